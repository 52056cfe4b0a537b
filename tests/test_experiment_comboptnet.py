"""CombOptNet's random-constraints reproduction: its data follow the paper's generator,
and its --quick run goes through the real CLI, claims nothing and writes the schema."""

import json

import numpy as np
import pytest

from combolayer import cli
from combolayer.experiments import comboptnet

pytest.importorskip("cvxpylayers", reason="the qptl row needs the [cvxpylayers] extra")


def test_true_constraints_keep_a_corner_feasible_and_solutions_satisfy_them():
    rng = np.random.default_rng(0)
    for box in comboptnet.BOXES.values():
        a, offset, origin = comboptnet.offset_constraints(rng, 8, 16, box, feasible_corner=True)
        assert np.allclose(np.linalg.norm(a, axis=1), 1.0)
        lb, ub = box
        assert ((origin >= lb + (ub - lb) / 4) & (origin <= ub - (ub - lb) / 4)).all()
    data = comboptnet.make_data("dense", 4, 0, 16, (20, 5, 10), "highs")
    A, b = data.true_rows
    for costs, solutions in data.splits.values():
        y = solutions.numpy()
        assert (y @ A.T <= b + 1e-6).all() and (y == np.round(y)).all()
        assert ((y >= -5) & (y <= 5)).all()
        assert np.allclose(np.linalg.norm(costs.numpy(), axis=1), 1.0)


def test_quick_run_claims_nothing_and_writes_the_schema(tmp_path, capsys):
    assert cli.main(["reproduce", "comboptnet", "--quick", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("smoke run: no verdicts")
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["experiment"] == "comboptnet" and result["quick"] is True
    assert {row["method"] for row in result["rows"]} == {
        "comboptnet [binary, m=2]", "qptl [binary, m=2]", "score function [binary, m=2]"}
    assert all(len(row["values"]) == len(result["seeds"]) for row in result["rows"])
    assert all(0.0 <= v <= 1.0 for row in result["rows"] for v in row["values"])
    assert result["claims"] and all(c["verdict"] == "inconclusive" for c in result["claims"])


def test_accuracy_solves_only_the_instances_whose_truth_meets_the_learned_rows():
    """The filtered accuracy equals the exact-match accuracy of a solve of every instance,
    on untrained rows (most truths cut off) and on the true rows (every one kept)."""
    import warnings

    import torch

    import combolayer as cl

    data = comboptnet.make_data("dense", 2, 0, 16, (4, 4, 60), "scip")
    config = comboptnet.Config()
    layer = cl.ComboLayer(data.spec, projection="none", backend="scip", on_infeasible="flag")
    split = data.splits["test"]
    A_true, b_true = (torch.tensor(v) for v in data.true_rows)
    models = [comboptnet.initial_model("dense", 2, seed, config, data.box, method)
              for seed in (0, 1) for method in ("comboptnet", "qptl")]
    models.append(lambda: (A_true, b_true))
    found = []
    for model in models:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            A, b = model()
            layer.eval()
            y = layer(split[0], A=A, b=b)
        found.append(comboptnet.accuracy(layer, model, split))
        assert found[-1] == float((y == split[1]).all(dim=1).double().mean())
    assert found[-1] == 1.0 and min(found) < 0.5


def test_the_schedules_chosen_by_hand_on_validation_are_declared_and_reported(tmp_path):
    """The learning-rate schedule per kind was chosen by hand on the validation split: the
    module declares both choices, as the config runs them, and the summary counts them."""
    from pathlib import Path

    from combolayer.experiments import report

    values = [choice.value for choice in comboptnet.CHOSEN_BY_HAND]
    assert [v.split(":")[0] for v in values] == ["binary CombOptNet", "dense CombOptNet"]
    config = comboptnet.Config()
    assert "comboptnet" in config.constant_lr["dense"]  # dense: the constant rate
    assert "comboptnet" not in config.constant_lr.get("binary", [])  # binary: the decay
    assert config.lr_min < config.lr
    results = Path(__file__).resolve().parents[1] / "docs" / "results"
    text = report.render(results, tmp_path / "results.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| [comboptnet]"))
    assert "| none tuned; 2 chosen by hand on validation |" in row
    assert all(f"| {value} |" in text for value in values)
