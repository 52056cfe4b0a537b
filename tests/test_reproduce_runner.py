"""The reproduction runner's shared parts: the verdict rule, the results schema
and the report, independent of any one experiment."""

import json
import math
import sys
import types

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
    assert "| invalid |" in text and "| 1 | 0 | 0 (0) | 1 |" in text
    assert "| identity beats imle | **invalid** |" in text


def _peaked_train(peak, seed_wobble=0.0):
    """Validation score highest at ``peak`` (falling a unit per decade away from it);
    seed 0 scores ``seed_wobble`` higher at values below the peak, seed 1 lower."""
    def train(variant, seed, bar):
        lam = variant.options["lam"]
        score = -abs(math.log10(lam) - math.log10(peak))
        if lam < peak:
            score += seed_wobble * (1 if seed == 0 else -1)
        return core.Outcome(value=0.0, final_val=score)
    return train


def _lam(lam):
    return core.Variant("blackbox", options={"lam": lam})


FULL = core.ExperimentConfig(seeds=list(range(4)), progress=False)
WIDE = core.Bounds.around(10.0, "a published lambda")


def test_tune_grows_the_grid_until_the_choice_has_a_worse_neighbour_on_each_side():
    higher = core.Metric(name="m", higher_is_better=True)
    record = core.tune("blackbox", "lam", [1.0, 10.0, 100.0], _lam, _peaked_train(1000.0),
                       FULL, higher, bounds=WIDE)
    assert record["grid"] == [1.0, 10.0, 100.0, 1000.0, 10000.0]
    assert record["chosen"] == 1000.0 and record["at_bound"] is None and record["grown"]
    assert record["seeds"] == [0, 1] and record["bounds"]["high"] == 10000.0
    # downwards too, and in the metric's direction: a lower-is-better score peaked at 0.1
    lower = core.Metric(name="m", higher_is_better=False)
    flipped = _peaked_train(0.1)
    record = core.tune("blackbox", "lam", [1.0, 10.0, 100.0], _lam,
                       lambda v, seed, bar: core.Outcome(
                           value=0.0, final_val=-flipped(v, seed, bar).final_val),
                       FULL, lower, bounds=WIDE)
    assert record["chosen"] == 0.1 and record["grid"][0] == 0.01 and record["at_bound"] is None


def test_tune_stops_at_a_stated_bound_and_marks_it():
    higher = core.Metric(name="m", higher_is_better=True)
    record = core.tune("blackbox", "lam", [1.0, 10.0, 100.0], _lam, _peaked_train(1e9),
                       FULL, higher, bounds=WIDE)
    assert record["grid"][-1] == 10000.0 and record["chosen"] == 10000.0
    assert record["at_bound"] == "high"
    # a step past the bound is clipped to the bound itself
    record = core.tune("blackbox", "lam", [1.0, 10.0], _lam, _peaked_train(1e-9), FULL, higher,
                       bounds=core.Bounds(0.5, 100.0, "a test bound"))
    assert record["grid"] == [0.5, 1.0, 10.0] and record["at_bound"] == "low"
    with pytest.raises(ValueError, match="outside the bounds"):
        core.tune("blackbox", "lam", [1e6], _lam, _peaked_train(1.0), FULL, higher, bounds=WIDE)
    with pytest.raises(ValueError, match="0 < low < high"):
        core.Bounds(1.0, 1.0, "empty")


def test_tune_chooses_on_the_mean_over_the_tuning_seeds_not_the_first():
    higher = core.Metric(name="m", higher_is_better=True)
    # seed 0 alone prefers 1 (score -1 + 3 = 2 > 0); the mean over seeds 0 and 1 prefers 10
    record = core.tune("blackbox", "lam", [0.1, 1.0, 10.0, 100.0], _lam,
                       _peaked_train(10.0, seed_wobble=3.0), FULL, higher, bounds=WIDE)
    assert record["chosen"] == 10.0 and record["validation_per_seed"][1.0] == [2.0, -4.0]
    one_seed = core.ExperimentConfig(seeds=[0, 1], tune_seeds=1, progress=False)
    record = core.tune("blackbox", "lam", [0.1, 1.0, 10.0, 100.0], _lam,
                       _peaked_train(10.0, seed_wobble=3.0), one_seed, higher, bounds=WIDE)
    assert record["chosen"] == 1.0


def test_a_quick_run_scores_its_grid_without_growing_it():
    quick = core.ExperimentConfig(seeds=[0], quick=True, progress=False)
    higher = core.Metric(name="m", higher_is_better=True)
    record = core.tune("blackbox", "lam", [10.0], _lam, _peaked_train(1000.0), quick, higher,
                       bounds=WIDE)
    assert record["grid"] == [10.0] and not record["grown"] and record["seeds"] == [0]
    with pytest.raises(ValueError, match="validation values"):
        core.tune("blackbox", "lam", [1.0], _lam,
                  lambda v, seed, bar: core.Outcome(value=0.0), quick, higher, bounds=WIDE)


def test_the_report_shows_the_whole_grid_and_how_the_choice_is_bracketed(tmp_path):
    runs, a, b = fake_runs()
    metric = core.Metric(name="R@1", higher_is_better=True)
    config = core.ExperimentConfig(seeds=[0, 1, 2], out=tmp_path / "results" / "fake")
    scores = {100.0: 1.5, 1000.0: 0.9, 10000.0: 1.2}
    lower = core.Metric(name="MSE", higher_is_better=False)
    train = _const_train(scores)
    tuning = [core.tune("imle", "lam", [100.0, 1000.0], _lam, train, config, lower,
                        bounds=core.Bounds.around(1000.0, "I-MLE's lambda"), setting="k=5"),
              core.tune("imle", "tau", [100.0, 1000.0], _lam, train, config, lower,
                        bounds=core.Bounds(1.0, 1000.0, "a test bound"))]
    core.finish("fake", config, metric, runs, [], [], started=0.0, details={"tuning": tuning})
    text = report.render(tmp_path / "results", tmp_path / "results.md").read_text()
    assert ("| imle (lam) | k=5 | 100: 1.5, **1000: 0.9**, 10000: 1.2 | 1000 | 0.9 | "
            "yes: worse on both sides |") in text
    assert ("| imle (tau) | - | 100: 1.5, **1000: 0.9** | 1000 | 0.9 | at the upper bound "
            "1000 (a test bound) |") in text
    assert "mean over 2 seed(s)" in text
    assert "| 3 | 1 of 2, 1 at a stated bound |" in text  # the summary: seeds, tuning
    assert "predates the current rules" not in text


def _const_train(scores):
    return lambda v, seed, bar: core.Outcome(value=0.0, final_val=scores[v.options["lam"]])


def test_every_row_runs_the_config_seeds_and_a_quick_run_claims_nothing(tmp_path):
    runs, a, b = fake_runs()
    metric = core.Metric(name="R@1", higher_is_better=True)
    claims = [core.claim_better("identity beats imle", runs, a, b, metric)]
    assert claims[0].verdict == "agrees"
    quick = core.ExperimentConfig(seeds=[0, 1, 2], quick=True, out=tmp_path / "quick")
    result = core.finish("fake", quick, metric, runs, [], claims, started=0.0)
    assert [(c.claim, c.verdict, c.evidence) for c in result.claims] == [
        ("identity beats imle", "inconclusive", "smoke run: no verdicts")]
    saved = json.loads((tmp_path / "quick" / "results.json").read_text())
    assert saved["claims"][0]["evidence"] == core.SMOKE
    more = core.ExperimentConfig(seeds=[0, 1, 2, 3], out=tmp_path / "full")
    with pytest.raises(ValueError, match="every row runs on the config's 4 seeds"):
        core.finish("fake", more, metric, runs, [], claims, started=0.0)


def test_a_control_learns_in_its_first_epoch_only_and_has_its_own_label():
    identity = core.Variant("identity", projection="std", setting="k=5", options={"k": 5})
    frozen = core.control(identity)
    assert frozen.label == "identity [k=5, control], P=std"
    assert frozen.options == {"k": 5, "control": True} and identity.options == {"k": 5}
    assert frozen.is_control and not identity.is_control
    assert [core.learns(frozen, e) for e in range(3)] == [True, False, False]
    assert all(core.learns(identity, e) for e in range(3))


def test_on_par_counts_only_when_the_control_loses_to_both_rows():
    a, b = [0.80, 0.81, 0.82], [0.80, 0.805, 0.81]
    numbers = verdicts.on_par(a, b, True, tolerance=0.02)
    assert numbers[0] == "agrees"
    kept_up = verdicts.discriminates(a, b, [0.79, 0.80, 0.81], True)
    assert not kept_up[0]
    verdict, evidence = verdicts.require_control(numbers, kept_up)
    assert verdict == "inconclusive" and evidence.startswith("trivial: control not")
    lost = verdicts.discriminates(a, b, [0.30, 0.31, 0.32], True)
    assert lost[0]
    assert verdicts.require_control(numbers, lost)[0] == "agrees"
    # a disagreement stands either way: the rows themselves differ
    apart = verdicts.on_par(a, [0.5, 0.51, 0.52], True, tolerance=0.02)
    assert verdicts.require_control(apart, kept_up)[0] == "disagrees"


def _toy_train_one(means):
    """A stand-in ``train_one``: the row's value is its mean plus a seed-dependent wobble."""
    def train_one(variant, seed, bar):
        wobble = ((seed * 7919) % 11 - 5) / 100
        return core.Outcome(value=means[variant.label] + wobble, untrained=0.1)
    return train_one


def test_the_report_shows_the_spread_to_the_control(tmp_path):
    a = core.Variant("identity", projection="std")
    frozen = core.control(a)
    means = {a.label: 0.80, frozen.label: 0.35}
    train_one = _toy_train_one(means)
    runs = core.run_variants([a, frozen], [0, 1, 2], train_one, desc="toy", progress=False)
    metric = core.Metric(name="R@1", higher_is_better=True)
    config = core.ExperimentConfig(seeds=[0, 1, 2], out=tmp_path / "results" / "fake")
    core.finish("fake", config, metric, runs, [], [], started=0.0)
    text = report.render(tmp_path / "results", tmp_path / "results.md").read_text()
    # the toy wobble of seeds 0, 1, 2 averages +0.0133
    assert "| - | 0.1 | identity, P=std: 0.8133 | identity [control], P=std: 0.3633 |" in text
    assert "Seeds [0, 1, 2], 3 per row; full run" in text
    # a run with re-checked claims (the earlier rules) says so in its section and the summary
    core.finish("fake", config, metric, runs, [], [], started=0.0, details={"recheck": []})
    text = report.render(tmp_path / "results", tmp_path / "results.md").read_text()
    assert "predates the current rules" in text and "| earlier rules: not grown |" in text


def test_values_chosen_by_hand_on_validation_are_counted_and_listed(tmp_path, monkeypatch):
    runs, a, b = fake_runs()
    metric = core.Metric(name="R@1", higher_is_better=True)
    config = core.ExperimentConfig(seeds=[0, 1, 2], out=tmp_path / "results" / "fake")
    core.finish("fake", config, metric, runs, [], [], started=0.0)
    fake = types.ModuleType("fake", "Fake: a stand-in experiment.\n\nIts setup.")
    monkeypatch.setattr(report, "experiments", lambda: {"fake": fake})
    text = report.render(tmp_path / "results", tmp_path / "results.md").read_text()
    assert "| 3 | none tuned | " in text and "Chosen by hand" not in text  # nothing declared
    fake.CHOSEN_BY_HAND = (
        core.HandChoice("identity: Adam 1e-3", "validation 0.80 against 0.75 at 1e-2"),
        core.HandChoice("blackbox: 50 epochs", "validation 0.62 against 0.60 at 20"))
    text = report.render(tmp_path / "results", tmp_path / "results.md").read_text()
    assert "| 3 | none tuned; 2 chosen by hand on validation | " in text
    assert "| identity: Adam 1e-3 | validation 0.80 against 0.75 at 1e-2 |" in text
    fake.CHOSEN_BY_HAND = ("identity: Adam 1e-3",)
    with pytest.raises(TypeError, match="expected core.HandChoice entries, got str"):
        report.render(tmp_path / "results", tmp_path / "results.md")
    with pytest.raises(ValueError, match="needs a value and its evidence"):
        core.HandChoice("identity: Adam 1e-3", " ")


def test_a_report_without_runs_leaves_the_page_as_it_was(tmp_path):
    # run outside the repository's root, --report replaced docs/results.md with an empty
    # page and exited 0
    page = tmp_path / "results.md"
    page.write_text("kept")
    with pytest.raises(FileNotFoundError, match="no committed run in .* left as it was"):
        report.render(tmp_path / "results", page)
    assert page.read_text() == "kept"


def test_a_collapse_is_a_validation_metric_that_ends_below_its_untrained_value():
    metric = core.Metric(name="R@1", higher_is_better=True)
    row = core.Variant("identity")

    def runs_ending_at(final):
        return core.Runs([row], {row.label: [
            core.Outcome(value=0.0, untrained_val=0.25 + 0.01 * i, final_val=final + 0.01 * i)
            for i in range(5)]})

    assert core.claim_collapses("collapses", runs_ending_at(0.15), row, metric).verdict == "agrees"
    trained = core.claim_collapses("collapses", runs_ending_at(0.5), row, metric)
    assert trained.verdict == "disagrees"
    assert "validation 0.27 untrained -> 0.52 trained" in trained.evidence


def test_the_readme_headline_counts_the_committed_verdicts():
    """The README's paragraph on the reproduction states the verdict counts of the
    committed full runs, so it cannot drift from docs/results."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    counts = {"agrees": 0, "disagrees": 0, "inconclusive": 0, "invalid": 0}
    for path in sorted((root / "docs" / "results").glob("*/results.json")):
        for claim in core.Result.model_validate_json(path.read_text()).claims:
            counts[claim.verdict] += 1
    text = " ".join((root / "README.md").read_text().split())
    stated = re.search(r"(\d+) claims agree, (\d+) disagree, (\d+) are inconclusive and "
                       r"(\d+) invalid", text)
    assert stated, "the README's reproduction paragraph states no verdict counts"
    assert [int(n) for n in stated.groups()] == list(counts.values())


def test_the_report_lists_the_verdicts_that_changed_from_the_previous_run(tmp_path):
    runs, a, b = fake_runs()
    metric = core.Metric(name="R@1", higher_is_better=True)
    config = core.ExperimentConfig(seeds=[0, 1, 2], out=tmp_path / "results" / "fake")
    claims = [core.claim_better("identity beats imle (gap 0.01)", runs, a, b, metric),
              core.claim_better("imle beats identity", runs, b, a, metric)]
    new = core.finish("fake", config, metric, runs, [], claims, started=0.0)
    old = new.model_copy(update={"claims": [
        core.Claim(claim="identity beats imle (gap 0.2)", verdict="inconclusive", evidence=""),
        core.Claim(claim="imle beats identity", verdict=claims[1].verdict, evidence=""),
        core.Claim(claim="a dropped claim (k=5; paper: 0.63 (time))", verdict="agrees",
                   evidence="")]})
    changes = report.verdict_changes(old, new)
    assert changes == [
        {"claim": "identity beats imle (gap 0.01)", "before": "inconclusive",
         "after": claims[0].verdict},
        {"claim": "a dropped claim (k=5; paper: 0.63 (time))", "before": "agrees", "after": "-"}]
    assert claims[0].verdict == "agrees"
    core.finish("fake", config, metric, runs, [], claims, started=0.0, details={
        "changes": {"previous": "commit abc", "claims": changes, "why": "The grid grew."}})
    text = report.render(tmp_path / "results", tmp_path / "results.md").read_text()
    assert ("Changed from the previous committed run (commit abc): 2 verdict(s). "
            "The grid grew.") in text
    assert "| identity beats imle (gap 0.01) | inconclusive | agrees |" in text


def test_a_run_without_matplotlib_warns_and_keeps_its_results(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.warns(UserWarning, match=r"matplotlib is not installed: no curves.png"):
        core.plot_curves({"loss": {"a": [1.0, 0.5]}}, tmp_path / "curves.png", "title")
    assert not (tmp_path / "curves.png").exists()


def test_the_digits_without_sklearn_name_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ImportError, match=r"combolayer\[experiments\]"):
        core.digits()
