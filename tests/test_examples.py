"""Every example runs, so none goes stale."""

import runpy
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))


def test_there_are_examples():
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path, capsys):
    namespace = runpy.run_path(str(path))
    result = namespace["main"]()
    assert capsys.readouterr().out
    if path.name == "custom_ilp.py":
        assert result > 0.5
    if path.name == "facility_location.py":  # both trainings cut the regret (known costs)
        assert result["identity"] < result["before"] and result["spo+"] < result["before"]
    if path.name == "predicted_capacity.py":  # learned capacities: better decisions
        assert result["comboptnet"]["accuracy"] > result["before"]["accuracy"]
        assert result["comboptnet"]["infeasible"] < result["before"]["infeasible"]
    if path.name == "from_mps.py":
        assert result == 1.0  # the layer learned costs that make the target optimal
