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
