"""The dvae experiment's validation split, control row, sanity gate and scaled
thresholds, on tiny configs and made-up runs (the quick run is in
test_experiment_dvae_l2x.py)."""

import pytest

from combolayer.experiments import core, dvae

TINY = {"encoder": [16], "decoder": [16], "epochs": 3}


def test_the_validation_split_comes_out_of_the_training_part():
    train, val, test = dvae.load_images(dvae.Config())
    assert (len(train), len(val), len(test)) == (1222, 216, 359)
    again = dvae.load_images(dvae.Config())
    assert all((a == b).all() for a, b in zip((train, val, test), again))  # a fixed split


@pytest.mark.parametrize("control", [False, True])
def test_an_outcome_records_validation_and_untrained_values(control):
    config = dvae.Config(**TINY)
    data = dvae.load_images(config)
    variant = core.Variant("identity", projection="std")
    outcome = dvae.train_one(core.control(variant) if control else variant, 0, config, data)
    assert len(outcome.curve) == config.epochs  # the control is evaluated every epoch
    # ... but trains in its first epoch only
    assert len(outcome.series["train N-ELBO"]) == (1 if control else config.epochs)
    assert outcome.untrained > outcome.value
    assert outcome.untrained_val > outcome.final_val


def fake_runs(config, final_val, value):
    """Every row at the same N-ELBO over 5 seeds but the ones named in ``value``;
    the rows named in ``final_val`` end at that validation N-ELBO."""
    variants = list(dvae.variants_for(config).values())
    outcomes = {}
    for v in variants:
        key = v.projection if v.method == "identity" and not v.is_control else v.method
        mean = value.get(key, 15.0)
        outcomes[v.label] = [
            core.Outcome(value=mean + 0.1 * (i - 2), untrained=44.0, untrained_val=44.0,
                         final_val=final_val.get(key, mean))
            for i in range(5)]  # their mean: exactly ``mean``
    return core.Runs(variants, outcomes)


EXPECTED = {
    "Identity with P_std reaches a clearly lower N-ELBO than I-MLE": "agrees",
    "Each projection helps: P_mean beats no projection": "agrees",
    "Each projection helps: P_norm beats no projection": "invalid",
    "P_norm helps much more than P_mean: P_norm beats P_mean": "invalid",
    "Combined (P_std) they perform best: P_std beats P_norm": "invalid",
    "No projection is far worse than P_std": "agrees",
}


def test_a_claim_on_a_row_that_did_not_train_is_invalid():
    config = dvae.Config(projections=["none", "mean", "norm", "std"])
    metric = core.Metric(name="N-ELBO", higher_is_better=False)
    # P_norm's validation N-ELBO barely moved (gate: a drop above 5% of 44 nats)
    runs = fake_runs(config, final_val={"norm": 43.0},
                     value={"std": 12.0, "mean": 13.0, "norm": 11.0, "control": 26.0})
    claims = dvae.claims_of(runs, config, metric)
    assert [c.verdict for c in claims] == list(EXPECTED.values())
    assert all(c.claim.startswith(text) for c, text in zip(claims, EXPECTED))


def test_the_gaps_are_fractions_of_the_spread_named_in_the_claim():
    config = dvae.Config(projections=["none", "std"])
    metric = core.Metric(name="N-ELBO", higher_is_better=False)
    # spread 44 -> 14: "far" needs 0.06 x 30 = 1.8 nats, which a 1.5-nat gap misses
    runs = fake_runs(config, final_val={}, value={"std": 14.0, "none": 15.5, "imle": 20.0})
    clear, far = dvae.claims_of(runs, config, metric)
    assert far.claim.startswith("No projection is far worse than P_std")
    assert "0.06 x spread untrained 44 -> best 14 = 1.8" in far.claim
    assert far.verdict == "disagrees"
    assert "0.02 x spread untrained 44 -> best 14 = 0.6" in clear.claim
