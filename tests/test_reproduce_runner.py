"""The reproduction runner's shared parts: the verdict rule, the results schema
and the report, independent of any one experiment."""

import json

import pytest

from combolayer.experiments import core, report, verdicts


@pytest.mark.parametrize(("a", "b", "higher", "expected"), [
    ([0.90, 0.91, 0.92], [0.70, 0.71, 0.72], True, "agrees"),      # clearly better
    ([0.70, 0.71, 0.72], [0.90, 0.91, 0.92], True, "disagrees"),   # clearly worse
    ([0.80, 0.90, 0.70], [0.78, 0.88, 0.72], True, "inconclusive"),
    ([1.01, 1.02, 1.01], [1.20, 1.25, 1.22], False, "agrees"),     # lower is better
])
def test_better_follows_the_two_standard_error_rule(a, b, higher, expected):
    verdict, evidence = verdicts.better(a, b, higher)
    assert verdict == expected
    assert "2 SE" in evidence


def test_a_minimum_gap_turns_a_small_clear_lead_into_a_disagreement():
    a, b = [0.801, 0.802, 0.803], [0.790, 0.791, 0.792]
    assert verdicts.better(a, b, True)[0] == "agrees"
    assert verdicts.better(a, b, True, min_gap=0.1)[0] == "disagrees"


def test_on_par_within_tolerance():
    assert verdicts.on_par([1.009, 1.010], [1.010, 1.011], False, tolerance=0.01)[0] == "agrees"
    assert verdicts.on_par([1.0, 1.001], [1.2, 1.201], False, tolerance=0.01)[0] == "disagrees"
    assert verdicts.on_par([1.0, 1.3], [1.2, 1.0], False, tolerance=0.01)[0] == "inconclusive"
    assert verdicts.all_of(["agrees", "inconclusive"]) == "inconclusive"
    assert verdicts.all_of(["agrees", "disagrees"]) == "disagrees"


def fake_runs():
    a = core.Variant("identity", projection="std")
    b = core.Variant("blackbox", noise=0.5, margin="noise", setting="k=5")
    outcomes = {
        a.label: [core.Outcome(value=v, curve=[0.5, v], extras={"r@2": v + 0.1}, train_s=1.0)
                  for v in (0.8, 0.82, 0.81)],
        b.label: [core.Outcome(value=v, curve=[0.4, v], extras={"r@2": v + 0.1}, train_s=2.0)
                  for v in (0.6, 0.61, 0.62)],
    }
    return core.Runs([a, b], outcomes), a, b


def test_finish_writes_exactly_the_schema_and_the_report_renders_it(tmp_path):
    runs, a, b = fake_runs()
    metric = core.Metric(name="R@1", higher_is_better=True)
    config = core.ExperimentConfig(seeds=[0, 1, 2], out=tmp_path / "results" / "fake")
    claims = [core.claim_better("identity beats blackbox", runs, a, b, metric)]
    paper = [core.PaperNumber(method="identity", projection="std", value=60.2, note="CUB")]
    result = core.finish("fake", config, metric, runs, paper, claims, started=0.0)
    data = json.loads((config.out / "results.json").read_text())
    assert list(data) == ["experiment", "quick", "seeds", "metric", "rows", "paper", "claims",
                          "runtime_s", "versions"]
    assert list(data["rows"][0]) == ["method", "projection", "noise", "margin", "values", "mean",
                                     "std", "train_s"]
    assert data["rows"][1]["method"] == "blackbox [k=5]"
    assert data["claims"][0]["verdict"] == "agrees"
    assert result.row("identity, P=std").mean == pytest.approx(0.81)
    assert (config.out / "curves.png").exists()

    page = report.render(tmp_path / "results", tmp_path / "results.md")
    text = page.read_text()
    assert "| identity beats blackbox | agrees |" in text
    assert "0.81 ± 0.01" in text and "r@2" in text
    assert "combolayer reproduce fake --out docs/results/fake" in text


def test_run_variants_refuses_duplicate_labels():
    v = core.Variant("identity")
    with pytest.raises(ValueError, match="distinct labels"):
        core.run_variants([v, v], [0], lambda *_: core.Outcome(0.0), desc="x", progress=False)


@pytest.mark.parametrize(("untrained", "final", "higher", "margin", "ok"), [
    ([1.649, 1.649, 1.649], [1.649, 1.650, 1.648], False, 0.05, False),  # I-MLE at k=5
    ([1.649, 1.649, 1.649], [0.18, 0.20, 0.19], False, 0.05, True),      # a row that learnt
    ([1.649, 1.649], [1.60, 1.61], False, 0.05, False),  # gain 0.044 <= 0.05 x 1.649
    ([1.649, 1.649], [1.55, 1.56], False, 0.05, True),   # gain 0.094 > 0.082
    ([0.10, 0.12], [0.11, 0.10], True, 0.05, False),     # accuracy that went nowhere
    ([0.10, 0.12], [0.80, 0.82], True, 0.05, True),
])
def test_the_sanity_gate_needs_a_stated_share_of_the_room_to_the_ideal(
        untrained, final, higher, margin, ok):
    ideal = 1.0 if higher else 0.0
    trained, reason = verdicts.trained(untrained, final, higher, margin, ideal)
    assert trained is ok
    assert "untrained" in reason and (">" if ok else "<=") in reason


def test_the_sanity_gate_refuses_mismatched_seeds_and_negative_margins():
    with pytest.raises(ValueError, match="one value per seed"):
        verdicts.trained([1.0, 1.0], [0.5], False, 0.05)
    with pytest.raises(ValueError, match="margin must be >= 0"):
        verdicts.trained([1.0], [0.5], False, -0.1)


def test_a_claim_on_a_row_that_did_not_train_is_invalid_never_agrees():
    # "P_std is on par with or better than I-MLE" with I-MLE stuck at its untrained value:
    # the numbers alone say agrees, the gate says invalid and names the row
    numbers = verdicts.on_par_or_better([0.18, 0.19, 0.2], [1.649, 1.649, 1.649], False, 0.1)
    assert numbers[0] == "agrees"
    gates = {"identity, P=std": verdicts.trained([1.65] * 3, [0.18, 0.19, 0.2], False, 0.05),
             "imle [k=5]": verdicts.trained([1.649] * 3, [1.649] * 3, False, 0.05)}
    verdict, evidence = verdicts.gate(numbers, gates)
    assert verdict == "invalid"
    assert "imle [k=5] did not train" in evidence and "identity, P=std" not in evidence
    # with both rows trained, the verdict passes through unchanged
    gates["imle [k=5]"] = (True, "fine")
    assert verdicts.gate(numbers, gates) == numbers
    assert verdicts.all_of(["agrees", "invalid", "disagrees"]) == "invalid"


def test_thresholds_on_the_analogues_scale():
    gap, text = verdicts.scaled_threshold(untrained=1.65, best=0.18, fraction=0.1)
    assert gap == pytest.approx(0.147)
    assert "spread" in text and "0.147" in text
    with pytest.raises(ValueError, match="fraction"):
        verdicts.scaled_threshold(1.0, 0.5, 0.0)


def test_claims_on_gated_runs_are_invalid_and_the_report_counts_them(tmp_path):
    a = core.Variant("identity", projection="std")
    b = core.Variant("imle", setting="k=5")
    outcomes = {
        a.label: [core.Outcome(value=v, untrained_val=1.65, final_val=v)
                  for v in (0.18, 0.19, 0.2)],
        b.label: [core.Outcome(value=v, untrained_val=1.649, final_val=v)
                  for v in (1.649, 1.649, 1.648)],
    }
    runs = core.Runs([a, b], outcomes)
    metric = core.Metric(name="MSE", higher_is_better=False)
    claims = [core.claim_better("identity beats imle", runs, a, b, metric),
              core.claim_on_par("identity on par with itself", runs, a, a, metric, 0.1)]
    assert [c.verdict for c in claims] == ["invalid", "agrees"]
    assert "imle [k=5] did not train" in claims[0].evidence
    config = core.ExperimentConfig(seeds=[0, 1, 2], out=tmp_path / "results" / "fake")
    result = core.finish("fake", config, metric, runs, [], claims, started=0.0)
    assert report.verdict_counts(result) == {"agrees": 1, "disagrees": 0, "inconclusive": 0,
                                             "invalid": 1}
    text = report.render(tmp_path / "results", tmp_path / "results.md").read_text()
    assert "| invalid |" in text and "| 1 | 0 | 0 | 1 |" in text
    assert "| identity beats imle | **invalid** |" in text


def test_the_report_names_the_tuned_hyperparameters(tmp_path):
    runs, a, b = fake_runs()
    metric = core.Metric(name="R@1", higher_is_better=True)
    config = core.ExperimentConfig(seeds=[0, 1, 2], out=tmp_path / "results" / "fake")
    tuning = [{"method": "imle", "k": 5, "grid": [100.0, 1000.0],
               "validation_mse_x100": {100.0: 1.5, 1000.0: 0.9}, "chosen": 1000.0,
               "chosen_validation_mse_x100": 0.9}]
    core.finish("fake", config, metric, runs, [], [], started=0.0, details={"tuning": tuning})
    text = report.render(tmp_path / "results", tmp_path / "results.md").read_text()
    assert "| imle | k=5 | 100: 1.5, 1000: 0.9 | 1000 | 0.9 |" in text
