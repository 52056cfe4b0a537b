import subprocess
import sys

from combolayer.cli import demo


def test_demo_runs_learns_and_saves_a_plot(tmp_path, capsys):
    histories = demo.run(epochs=2, out=tmp_path)
    assert [h.name for h in histories] == list(demo.METHODS)
    assert "identity, auto projection" in demo.METHODS  # the flagship row
    assert {"identity, no projection", "identity, std projection"} <= set(demo.METHODS)
    assert any(name.startswith("blackbox") for name in demo.METHODS)
    # Untrained linear models sit near 0.6 normalized regret on this data.
    assert min(h.regret[-1] for h in histories) < 0.3
    assert (tmp_path / "regret.png").stat().st_size > 10_000
    out = capsys.readouterr().out
    assert "normalized test regret" in out
    # what cl.analyze found: the dimension, then one line per equation
    assert "affine hull of dimension 16 in R^40, cut out by 24 equations" in out
    assert "  y[35] + y[39] = 1" in out
    # every row next to PyEPO's number, labelled as cited
    for name in demo.METHODS:
        assert name in out
    assert "NID 0.089" in out and "as cited in docs" in out


def test_plain_table_without_rich():
    history = demo.History("identity, auto projection", regret=[0.5, 0.1], seconds=[1.0, 1.0])
    text = demo.table([history])
    assert "identity, auto projection" in text and "0.1000" in text and "NID 0.089" in text


def test_cli_help_lists_every_command():
    out = subprocess.run([sys.executable, "-m", "combolayer", "--help"], capture_output=True,
                         text=True, check=True).stdout
    for command in ("demo", "solve", "analyze", "train", "bench", "reproduce"):
        assert command in out
