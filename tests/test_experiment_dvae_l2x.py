"""The discrete-sampling reproductions (dvae, l2x): their --quick runs through the real
CLI, the results.json schema, and that quick-mode training beats an untrained model."""

import json

import pytest

from combolayer import cli

RESULT_KEYS = {"experiment", "quick", "seeds", "metric", "rows", "paper", "claims", "runtime_s",
               "versions"}
ROW_KEYS = {"method", "projection", "noise", "margin", "values", "mean", "std", "train_s"}


def run_quick(name, tmp_path, capsys):
    assert cli.main(["reproduce", name, "--quick", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    # a smoke run claims nothing: it says so and prints no verdict
    assert printed.startswith("smoke run: no verdicts")
    assert not any(f"[{v}]" in printed or v in printed.replace("no verdicts", "")
                   for v in ("agrees", "disagrees", "inconclusive", "invalid"))
    result = json.loads((tmp_path / "results.json").read_text())
    details = json.loads((tmp_path / "details.json").read_text())
    assert set(result) == RESULT_KEYS
    assert result["experiment"] == name and result["quick"] is True
    assert set(result["metric"]) == {"name", "higher_is_better"}
    assert result["rows"] and all(set(row) == ROW_KEYS for row in result["rows"])
    assert all(len(row["values"]) == len(result["seeds"]) for row in result["rows"])
    assert result["claims"]
    for claim in result["claims"]:
        assert set(claim) == {"claim", "verdict", "evidence"}
        assert (claim["verdict"], claim["evidence"]) == ("inconclusive",
                                                          "smoke run: no verdicts")
    assert all(set(p) == {"method", "projection", "value", "note"} for p in result["paper"])
    assert (tmp_path / "curves.png").stat().st_size > 0
    return result, details


def test_dvae_quick_learns(tmp_path, capsys):
    result, details = run_quick("dvae", tmp_path, capsys)
    assert result["metric"] == {"name": "N-ELBO", "higher_is_better": False}
    labels = {row["method"] + str(row["projection"]) for row in result["rows"]}
    assert {"imlenone", "identitynone", "identitystd", "identity [control]std"} <= labels
    (spread,) = details["spread"]
    assert set(spread["controls"]) == {"identity [control], P=std"}
    best = min(row["mean"] for row in result["rows"])
    assert best < spread["untrained"] - 5.0, (best, spread)  # nats per image
    assert {c["evidence"] for c in result["claims"]} == {"smoke run: no verdicts"}
    for extras in details["extras"].values():
        assert 0.0 < extras["solver_share"]["mean"] < 1.0


def test_l2x_quick_learns(tmp_path, capsys):
    result, details = run_quick("l2x", tmp_path, capsys)
    assert result["metric"] == {"name": "MSE x100", "higher_is_better": False}
    assert len(result["paper"]) == 3  # k=5: Identity P_std, no projection, I-MLE
    std = next(label for label in details["extras"] if "P=std" in label)
    extras = details["extras"][std]
    # the untrained model predicts the mean rating and selects at random (precision 5/100)
    assert result["rows"][0]["mean"] < extras["untrained_mse"]["mean"]
    assert extras["precision"]["mean"] > 3 * extras["untrained_precision"]["mean"]
    # every method with a hyperparameter is tuned on the validation split, Identity too
    tuned = {(t["method"], t["parameter"]): t for t in details["tuning"]}
    assert set(tuned) == {("imle", "lam"), ("imle", "tau"), ("blackbox", "lam"),
                          ("identity", "tau")}
    assert all(t["chosen"] in t["grid"] for t in tuned.values())


def test_l2x_identity_rows_use_the_tuned_temperature():
    from combolayer.experiments import l2x

    variants = l2x.variants_for(l2x.Config(), 5, identity_tau=10.0, imle_tau=0.1)
    assert {v.options["tau"] for v in variants.values() if v.method == "identity"} == {10.0}
    assert variants["imle"].options["tau"] == 0.1


def test_l2x_blackbox_rows_carry_their_lambda():
    from combolayer.experiments import l2x

    variants = l2x.variants_for(l2x.Config(), 5, imle_lam=100.0, blackbox_lam=1.0)
    names = {v.name for v in variants.values()}
    assert {"blackbox lam=1 [k=5]", "imle lam=100 [k=5]"} <= names
    assert not any("blackbox" in v.name for v in l2x.variants_for(l2x.Config(), 10).values())


def test_l2x_informative_positions_grow_with_k():
    from combolayer.experiments import l2x

    config = l2x.Config(n_train=20, n_test=10, n_val=10)
    for k in (5, 10, 15):
        _, train, test, val = l2x.make_data(config, k)
        for reviews in (train, test, val):
            assert (reviews.informative.sum(1) == k).all()


def test_dvae_mnist_without_torchvision_says_so(tmp_path):
    try:
        import torchvision  # noqa: F401
    except ImportError:
        from combolayer.experiments import dvae

        with pytest.raises(SystemExit, match="needs torchvision"):
            dvae.load_images(dvae.Config(data=str(tmp_path)))
    else:
        from combolayer.experiments import dvae

        with pytest.raises((RuntimeError, OSError)):  # no MNIST files in an empty folder
            dvae.load_images(dvae.Config(data=str(tmp_path)))
