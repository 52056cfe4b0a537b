"""The graph_matching reproduction: its --quick run through the real CLI."""

import json

import numpy as np
import pytest

from combolayer import cli
from combolayer.experiments import core, graph_matching

RESULT_KEYS = {"experiment", "quick", "seeds", "metric", "rows", "paper", "claims",
               "runtime_s", "versions"}
ROW_KEYS = {"method", "projection", "noise", "margin", "values", "mean", "std", "train_s"}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("graph_matching")
    assert cli.main(["reproduce", "graph_matching", "--quick", "--out", str(out)]) == 0
    return (json.loads((out / "results.json").read_text()),
            json.loads((out / "details.json").read_text()), out)


def test_quick_results_schema(quick_run):
    result, _, out = quick_run
    assert set(result) == RESULT_KEYS
    assert result["experiment"] == "graph_matching" and result["quick"] is True
    assert result["metric"] == {"name": "matching accuracy", "higher_is_better": True}
    # 2 methods x 2 projections x (no margin + noise + informed at one alpha) + 6 L1 rows
    # + the control
    assert len(result["rows"]) == 19
    for row in result["rows"]:
        assert set(row) == ROW_KEYS
        assert row["margin"] in (None, "noise", "informed")
        assert len(row["values"]) == len(result["seeds"])
        assert all(0.0 <= v <= 1.0 for v in row["values"])
    assert {p["method"] for p in result["paper"]} == {"identity", "blackbox"}
    assert len(result["paper"]) == 36
    assert result["claims"]
    for claim in result["claims"]:
        assert set(claim) == {"claim", "verdict", "evidence"}
        assert claim["verdict"] in ("agrees", "disagrees", "inconclusive", "invalid")
    assert (out / "curves.png").stat().st_size > 0


def test_quick_learning_beats_the_untrained_model(quick_run):
    result, details, _ = quick_run
    best = max(result["rows"], key=lambda row: row["mean"])
    untrained = np.mean([e["untrained_accuracy"]["mean"] for e in details["extras"].values()])
    # a random matching of 8-15 keypoints gets about 1/n; an untrained network's
    # cosine scores already keep a little of the descriptors' similarity
    assert untrained < 0.3
    assert best["mean"] > untrained + 0.15


def test_the_control_row_stops_learning_after_its_first_epoch(quick_run):
    result, details, _ = quick_run
    control = [row for row in result["rows"] if row["method"] == "blackbox [control]"]
    assert len(control) == 1 and control[0]["projection"] == "none"
    curve = details["curves"]["blackbox [control]"]
    assert curve[1:] == [curve[0]] * (len(curve) - 1)  # frozen after epoch 1
    spread = details["spread"][0]
    assert spread["setting"] == "" and spread["controls"] == {"blackbox [control]": curve[-1]}


def test_outcomes_carry_the_validation_gate():
    config = graph_matching.Config(**{**graph_matching.QUICK, "epochs": 1})
    data = graph_matching.make_data(config, 0)
    assert [sum(len(g["matching"]) for g in part.values()) for part in data] == [96, 64, 64]
    variant = graph_matching.variants(config)[1]
    outcome = graph_matching.train_one(config, variant, 0, data)
    assert 0 <= outcome.untrained_val <= 1 and 0 <= outcome.final_val <= 1
    assert outcome.untrained is not None


def test_claims_on_a_row_that_did_not_train_are_invalid():
    """Blackbox's rows never leave their untrained validation accuracy: every claim
    that compares one is invalid, and the on-par claims never agree."""
    config = graph_matching.Config(**graph_matching.QUICK)
    rows = graph_matching.variants(config)
    outcomes = {}
    for v in rows:
        stuck = v.method == "blackbox" or v.is_control
        outcomes[v.label] = [core.Outcome(value=0.1 if stuck else 0.6 + 0.01 * i,
                                          untrained=0.1, untrained_val=0.1,
                                          final_val=0.1 if stuck else 0.6,
                                          extras={"s_per_epoch": 1.0}) for i in range(3)]
    claims = graph_matching.claims(config, core.Runs(rows, outcomes))
    by_text = {c.claim.split(" (")[0]: c.verdict for c in claims}
    assert by_text["Without projection, Identity is on par with Blackbox"] == "invalid"
    assert by_text["A margin improves blackbox"] == "invalid"
    assert "0.1 x spread untrained 0.1 -> best" in claims[0].claim


def test_hamming_margins_leave_identity_unchanged(quick_run):
    """The Hamming loss's gradient does not depend on y: under Identity every margin
    row trains the same model as the no-margin row."""
    result, _, _ = quick_run
    for projection in ("none", "norm"):
        values = {tuple(row["values"]) for row in result["rows"]
                  if row["method"] == "identity" and row["projection"] == projection}
        assert len(values) == 1


def test_timing_extras_are_recorded(quick_run):
    _, details, _ = quick_run
    for extras in details["extras"].values():
        assert extras["s_per_epoch"]["mean"] > 0
        assert 0 < extras["solver_share"]["mean"] < 1


def test_quadratic_assignment_ilp_matches_brute_force():
    """The edge-aware ILP's optimum agrees with enumerating all permutations (n = 4)."""
    from itertools import permutations

    import combolayer as cl

    rng = np.random.default_rng(0)
    n = 4
    spec, m = graph_matching.quadratic_assignment_ilp(rng.normal(size=(n, 2)),
                                                      rng.normal(size=(n, 2)), k=2)
    costs = rng.normal(size=spec.cost_shape)
    y = cl.make_solver(spec, "highs").solve(costs)
    x = y[: n * n].reshape(n, n)
    assert sorted(x.sum(0)) == [1] * n and sorted(x.sum(1)) == [1] * n

    def value(perm):
        xs = np.zeros((n, n))
        xs[np.arange(n), perm] = 1
        flat = xs.ravel()
        z = [flat[u] * flat[v] for u, v in _pairs(spec, n)]
        return costs[: n * n] @ flat + costs[n * n:] @ np.array(z)

    best = min(value(p) for p in permutations(range(n)))
    assert costs @ y == pytest.approx(best, abs=1e-6)


def _pairs(spec, n):
    """The (u, v) output indices each auxiliary z stands for, read off its constraints."""
    a_ub, _, _, _ = spec.to_matrices()
    a_ub = a_ub.toarray()
    out = []
    for row in range(0, a_ub.shape[0], 3):
        u, v = np.flatnonzero(a_ub[row + 2][: n * n] == 1)
        out.append((u, v))
    return out
