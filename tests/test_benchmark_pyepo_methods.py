"""benchmarks/pyepo_methods.py runs end to end (quick mode, two rows) and writes its block."""

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "pyepo_methods.py"


def load():
    spec = importlib.util.spec_from_file_location("pyepo_methods", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["pyepo_methods"] = module
    spec.loader.exec_module(module)
    return module


def test_quick_mode_end_to_end(tmp_path):
    bench = load()
    page = tmp_path / "estimators.md"
    page.write_text("# Estimators\n")
    results = bench.main(["--quick", "--epochs", "1", "--methods", "SPO+", "NID",
                          "--problems", "shortest", "--out", str(page), "--plot",
                          str(tmp_path / "plot.png")])
    text = page.read_text()
    assert "<!-- pyepo-methods:start" in text and "QUICK MODE" in text
    assert "| shortest path 5x5 | SPO+ |" in text and (tmp_path / "plot.png").exists()
    ours = results[("shortest path 5x5", "SPO+", "combolayer (open source)")]
    assert not isinstance(ours, str) and 0 <= ours[0][0] <= 2
    have_pyepo = (importlib.util.find_spec("pyepo") is not None
                  and importlib.util.find_spec("gurobipy") is not None)
    if not have_pyepo:
        pytest.skip("pyepo or gurobipy missing: the PyEPO columns are not compared")
    # same data, initial model, batches and algorithm: the same regret up to solver ties
    for label in ("SPO+", "NID / Identity, projection none"):
        theirs = results[("shortest path 5x5", label, "PyEPO")]
        mine = results[("shortest path 5x5", label, "combolayer (open source)")]
        assert abs(theirs[0][0] - mine[0][0]) < 0.02, (label, theirs, mine)


def test_every_method_row_builds_on_both_sides(tmp_path):
    """A row whose factory fails shows "skipped": none may, with every package installed
    (a misspelt argument once hid five of our rows that way)."""
    bench = load()
    results = bench.main(["--quick", "--epochs", "1", "--problems", "knapsack", "--out", "",
                          "--plot", ""])
    skipped = [key for key, value in results.items() if value == "skipped"]
    assert not skipped
    if importlib.util.find_spec("pyepo") is None or importlib.util.find_spec("gurobipy") is None:
        pytest.skip("pyepo or gurobipy missing: the PyEPO cells are skipped by design")
    absent = [key for key, value in results.items() if value == "—"]
    assert absent == [("knapsack 50 items, 2 dims", label, "PyEPO")
                      for label in ("Identity, projection auto", "CaVE")]


def load_beside(name: str):
    """A script next to pyepo_methods.py, which it imports its rows from."""
    load()
    spec = importlib.util.spec_from_file_location(name, SCRIPT.with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_epoch_ab_times_rows_against_pyepo_and_writes_its_block(tmp_path):
    """benchmarks/pyepo_epoch_ab.py: A/B rounds of one epoch each, a row per method."""
    pytest.importorskip("pyepo", reason="the A/B script compares against PyEPO")
    pytest.importorskip("gurobipy", reason="both sides solve with Gurobi")
    module = load_beside("pyepo_epoch_ab")
    assert module.ab_ratios(iter([2.0, 4.0]), iter([1.0, 1.0]), 2) == [2.0, 4.0]
    page = tmp_path / "estimators.md"
    page.write_text("# Estimators\n")
    lines = module.main(["--problem", "shortest", "--methods", "SPO+", "NID", "--rounds", "2",
                         "--train", "32", "--out", str(page)])
    rows = [line for line in lines if line.startswith("| SPO+") or line.startswith("| NID")]
    assert len(rows) == 2 and all(float(row.split("|")[2]) > 0 for row in rows)
    assert "<!-- pyepo-epoch-ab-shortest:start" in page.read_text()


def test_imle_with_pyepos_noise_trains_the_same_model_as_pyepo(tmp_path):
    """benchmarks/imle_same_noise.py: with PyEPO's noise stream ours trains PyEPO's model."""
    pytest.importorskip("pyepo", reason="the script compares against PyEPO")
    pytest.importorskip("gurobipy", reason="both sides solve with Gurobi")
    module = load_beside("imle_same_noise")
    page = tmp_path / "estimators.md"
    page.write_text("# Estimators\n")
    lines = module.main(["--rounds", "2", "--train", "32", "--out", str(page)])
    cells = lines[-1].split("|")
    assert float(cells[2]) > 0 and float(cells[4]) == 0.0  # the weights end equal
    assert "<!-- pyepo-imle-same-noise:start" in page.read_text()
