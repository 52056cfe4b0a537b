"""The warcraft and globe_tsp reproductions: quick mode runs, writes the results
schema, and learns (beats the untrained model on its own metric)."""

import json

import pytest

from combolayer.experiments import get
from combolayer.experiments.core import label_of

RESULT_KEYS = {"experiment", "quick", "seeds", "metric", "rows", "paper", "claims",
               "runtime_s", "versions"}
ROW_KEYS = {"method", "projection", "noise", "margin", "values", "mean", "std", "train_s"}
UNTRAINED = {"warcraft": "untrained cost ratio", "globe_tsp": "untrained tour accuracy"}


@pytest.fixture(scope="module", params=["warcraft", "globe_tsp"])
def quick_run(request, tmp_path_factory):
    module = get(request.param)
    out = tmp_path_factory.mktemp(request.param)
    config = module.Config(**module.QUICK, quick=True, out=out, progress=False)
    return request.param, module.run(config), out


def test_quick_run_writes_the_results_schema(quick_run):
    name, _, out = quick_run
    result = json.loads((out / "results.json").read_text())
    assert set(result) == RESULT_KEYS
    assert result["experiment"] == name and result["quick"] is True
    assert {"torch", "combolayer"} <= set(result["versions"])
    assert len(result["rows"]) >= 4
    for row in result["rows"]:
        assert set(row) == ROW_KEYS
        assert len(row["values"]) == len(result["seeds"])
    assert {row["method"].split(" ")[0] for row in result["rows"]} == {"identity", "blackbox"}
    for claim in result["claims"]:
        assert claim["verdict"] in ("agrees", "disagrees", "inconclusive", "invalid")
        assert claim["evidence"]
    assert (out / "curves.png").stat().st_size > 0
    assert "s / epoch" in next(iter(json.loads((out / "details.json").read_text())["extras"]
                                    .values()))


def test_quick_run_learns_better_than_the_untrained_model(quick_run):
    """Identity and Blackbox, clean, each beat the same network untrained (per seed)."""
    name, result, out = quick_run
    extras = json.loads((out / "details.json").read_text())["extras"]
    sign = 1.0 if result.metric.higher_is_better else -1.0
    for row in result.rows[:2]:  # the clean identity and blackbox rows come first
        untrained = extras[label_of(row)][UNTRAINED[name]]["mean"]
        assert sign * (row.mean - untrained) > 0, (label_of(row), row.mean, untrained)
