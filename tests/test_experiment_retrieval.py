"""The retrieval reproduction's --quick run through the real CLI: the results
schema, verdicts from the shared rule, and learning that beats an untrained model."""

from __future__ import annotations

import json

from combolayer import cli

RESULT_KEYS = {"experiment", "quick", "seeds", "metric", "rows", "paper", "claims",
               "runtime_s", "versions"}
ROW_KEYS = {"method", "projection", "noise", "margin", "values", "mean", "std", "train_s"}
VERDICTS = {"agrees", "disagrees", "inconclusive", "invalid"}


def test_retrieval_quick(tmp_path):
    assert cli.main(["reproduce", "retrieval", "--quick", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert set(result) == RESULT_KEYS
    assert result["experiment"] == "retrieval" and result["quick"] is True
    assert result["metric"] == {"name": "R@1", "higher_is_better": True}
    assert all(set(row) == ROW_KEYS for row in result["rows"])
    assert {row["method"] for row in result["rows"]} == {"identity", "blackbox"}
    assert all(set(p) == {"method", "projection", "value", "note"} for p in result["paper"])
    assert result["claims"] and all(c["verdict"] in VERDICTS for c in result["claims"])
    for row in result["rows"]:
        assert len(row["values"]) == len(result["seeds"])
        assert all(0.0 <= v <= 1.0 for v in row["values"])

    details = json.loads((tmp_path / "details.json").read_text())
    untrained = max(e["untrained R@1"]["mean"] for e in details["extras"].values())
    best = max(row["mean"] for row in result["rows"])
    # learning must beat the untrained network's held-out R@1 (about 0.12 here)
    assert best > untrained + 0.05, (best, untrained)
    for extras in details["extras"].values():
        assert {"R@2", "R@4", "R@8", "s_per_epoch", "solver_share"} <= set(extras)
        assert 0.0 < extras["solver_share"]["mean"] < 1.0
    assert (tmp_path / "curves.png").exists()
