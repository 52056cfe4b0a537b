import subprocess
import sys

from combolayer import demo


def test_demo_runs_learns_and_saves_a_plot(tmp_path, capsys):
    histories = demo.run(epochs=2, out=tmp_path)
    assert [h.name for h in histories] == list(demo.METHODS)
    # Untrained linear models sit near 0.6 normalized regret on this data.
    assert min(h.regret[-1] for h in histories) < 0.3
    assert (tmp_path / "regret.png").stat().st_size > 10_000
    assert "normalized test regret" in capsys.readouterr().out


def test_cli_help_lists_every_command():
    out = subprocess.run([sys.executable, "-m", "combolayer", "--help"], capture_output=True,
                         text=True, check=True).stdout
    for command in ("demo", "solve", "analyze", "train", "bench", "reproduce"):
        assert command in out
