"""combolayer train: a strict config, built-in or .npz data, any spec, and a run directory."""

import csv
import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import combolayer as cl
from combolayer.training.loop import ConfigError, TrainConfig, load_config, run

SMALL = {"data": {"name": "shortest_path", "num_features": 5, "grid": [3, 3], "deg": 2},
         "epochs": 2, "num_train": 64, "num_test": 64}


@pytest.mark.parametrize("config, message", [
    ({**SMALL, "epoch": 3}, "unknown key 'epoch' (did you mean 'epochs'?)"),
    ({**SMALL, "layr": {}}, "unknown key 'layr' (did you mean 'layer'?)"),
    ({**SMALL, "layer": {"projecton": "std"}}, "unknown key 'layer.projecton' (did you mean"),
    ({"epochs": 2}, "missing key 'data'"),
    ({**SMALL, "data": {"name": "shortest_path", "num_features": 5, "degg": 2}},
     "unknown key 'degg' for shortest_path (did you mean 'deg'?)"),
    ({**SMALL, "data": {"name": "knapsack", "num_features": 5}}, "knapsack needs ['num_items']"),
    ({**SMALL, "data": {"name": "shortest_path", "num_features": 5, "grid": 5}},
     "data: grid: Input should be a valid tuple (got 5)"),
    ({**SMALL, "data": {}}, "needs exactly one of 'name'"),
    ({**SMALL, "data": {"npz": "x.npz"}}, "'problem' is required with npz data"),
    ({**SMALL, "epochs": 0}, "epochs: Input should be greater than or equal to 1"),
])
def test_config_errors_name_the_key(config, message):
    with pytest.raises(ConfigError, match="invalid train config") as error:
        load_config(config)
    assert message in str(error.value)


def test_train_config_is_documented_key_by_key():
    text = (Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text()
    for key in TrainConfig.model_fields:
        assert f"`{key}`" in text, key


def write_npz(path, spec, n=120, p=4, seed=0, with_solutions=True):
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, p))
    B = rng.normal(size=(p, spec.num_outputs))
    costs = features @ B + rng.normal(scale=0.1, size=(n, spec.num_outputs))
    arrays = {"features": features, "costs": costs}
    if with_solutions:
        arrays["solutions"] = cl.make_solver(spec).solve(costs)
    np.savez(path, **arrays)
    return path


def test_npz_data_with_an_mps_problem_writes_history_plot_and_checkpoint(tmp_path):
    from test_files import LP_FILE

    (tmp_path / "pair.lp").write_text(LP_FILE)
    spec = cl.ILP.from_file(tmp_path / "pair.lp")
    write_npz(tmp_path / "data.npz", spec, with_solutions=False)
    config = {"problem": "pair.lp", "data": {"npz": "data.npz"}, "epochs": 3,
              "layer": {"projection": "auto", "noise": 0.5}, "model": {"hidden": [8]},
              "loss": "l1",
              "out": str(tmp_path / "run")}
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    history, folder = run(load_config(path))
    assert len(history.regret) == 3 and history.regret[-1] < history.regret[0] + 1e-9
    rows = list(csv.DictReader(open(folder / "history.csv")))
    assert [r["epoch"] for r in rows] == ["1", "2", "3"]
    assert set(rows[0]) == {"epoch", "train_loss", "test_regret", "seconds"}
    assert (folder / "regret.png").stat().st_size > 5_000
    state = torch.load(folder / "model.pt")
    assert state["0.weight"].shape == (8, 4)
    assert json.loads((folder / "config.json").read_text())["problem"].endswith("pair.lp")
    _, elsewhere = run(load_config(path), out=tmp_path / "elsewhere")  # as --out does
    assert json.loads((elsewhere / "config.json").read_text())["out"] == str(elsewhere)


def test_a_relative_out_is_written_absolute_so_the_saved_config_runs_again_anywhere(
        tmp_path, monkeypatch):
    """config.json kept --out as given ("runs/a"): run again from another directory, it
    wrote next to the config file, in a nested folder. The loss it used is written too."""
    spec = cl.problems.TopK(n=6, k=2)
    write_npz(tmp_path / "d.npz", spec)
    (tmp_path / "topk.yaml").write_text(yaml.safe_dump(spec.model_dump()))
    monkeypatch.chdir(tmp_path)
    config = load_config({"problem": "topk.yaml", "data": {"npz": "d.npz"}, "epochs": 1})
    _, folder = run(config, out="runs/a")
    saved = json.loads((folder / "config.json").read_text())
    assert saved["out"] == str(tmp_path / "runs" / "a") and saved["loss"] == "regret"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    _, again = run(load_config(folder / "config.json"))
    assert again == folder


@pytest.mark.parametrize("loss", ["spo+", "fenchel_young", "cave"])
def test_npz_with_a_yaml_spec_and_other_losses(tmp_path, loss):
    spec = cl.problems.TopK(n=6, k=2)
    (tmp_path / "topk.yaml").write_text(yaml.safe_dump(spec.model_dump()))
    write_npz(tmp_path / "d.npz", spec)
    config = {"problem": str(tmp_path / "topk.yaml"), "data": {"npz": str(tmp_path / "d.npz")},
              "loss": loss, "epochs": 5, "lr": 0.05, "out": str(tmp_path / "run")}
    history, _ = run(load_config(config))
    assert history.regret[-1] < 0.2


def test_npz_errors_are_messages(tmp_path):
    spec = cl.problems.TopK(n=6, k=2)
    np.savez(tmp_path / "d.npz", features=np.zeros((10, 3)))
    config = load_config({"problem": spec.model_dump(), "data": {"npz": str(tmp_path / "d.npz")}})
    with pytest.raises(ConfigError, match="has no array named 'costs'"):
        run(config, out=tmp_path)
    np.savez(tmp_path / "d.npz", features=np.zeros((10, 3)), costs=np.zeros((10, 5)))
    with pytest.raises(ConfigError, match=r"costs has shape \(10, 5\) but TopK\(n=6, k=2\)"):
        run(config, out=tmp_path)


def _spoil(name: str, arrays: dict) -> None:
    if name == "features":
        arrays["features"][4, 1] = np.nan
    else:  # feasible, not optimal: the regret divides by the given optimum
        arrays["solutions"][3] = np.roll(arrays["solutions"][3], 1)


@pytest.mark.parametrize(("spoiled", "message"), [
    ("features", r"features must be finite, got NaN or inf in row 4"),
    ("solutions", r"solutions row 3 is not optimal for its costs"),
])
def test_npz_arrays_that_cannot_train_are_refused_naming_them(tmp_path, spoiled, message):
    """NaN features failed later as 'w must be finite'; all-zero 'solutions' of an
    assignment reported a regret of 1.8e9."""
    spec = cl.problems.TopK(n=6, k=2)
    write_npz(tmp_path / "d.npz", spec, n=20)
    arrays = dict(np.load(tmp_path / "d.npz"))
    _spoil(spoiled, arrays)
    np.savez(tmp_path / "d.npz", **arrays)
    config = load_config({"problem": spec.model_dump(), "data": {"npz": str(tmp_path / "d.npz")},
                          "epochs": 1})
    with pytest.raises(ConfigError, match=message):
        run(config, out=tmp_path / "run")


def test_cli_train_on_generated_data(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump({**SMALL, "data": {"name": "tsp", "num_features": 3,
                                                      "num_nodes": 5}}))
    result = subprocess.run([sys.executable, "-m", "combolayer", "train", str(path),
                             "--out", str(tmp_path / "run")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "normalized test regret" in result.stdout
    assert (tmp_path / "run" / "model.pt").is_file()


def test_cli_train_typo_and_help(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text("data: {name: shortest_path, num_features: 5}\nepoch: 3\n")
    result = subprocess.run([sys.executable, "-m", "combolayer", "train", str(path)],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "unknown key 'epoch' (did you mean 'epochs'?)" in result.stderr
    result = subprocess.run([sys.executable, "-m", "combolayer", "train", "--help"],
                            capture_output=True, text=True, check=True)
    assert "docs/training.md" in result.stdout


# -- a .npz path that is not an npz of arrays ----------------------------------------------


@pytest.mark.parametrize("content", ["text", "pickle", "object_array"])
def test_a_train_config_npz_that_is_not_an_npz_of_arrays_says_so(tmp_path, content):
    # Before: numpy's "This file contains pickled (object) data" (never allow_pickle).
    from combolayer.training.loop import ConfigError, load_config, run

    path = tmp_path / "d.npz"
    if content == "text":
        path.write_text("features,costs\n1,2\n")
        message = r"is not an npz archive of arrays: expected an npz archive of numeric"
    elif content == "pickle":
        path.write_bytes(pickle.dumps({"features": np.zeros((10, 3))}))
        message = r"is not an npz archive of arrays"
    else:
        np.savez(path, features=np.array([{"a": 1}] * 10, dtype=object),
                 costs=np.zeros((10, 6)))
        message = r"holds an array that is not numeric"
    spec = cl.problems.TopK(n=6, k=2)
    config = load_config({"problem": spec.model_dump(), "data": {"npz": str(path)}})
    with pytest.raises(ConfigError, match=message) as caught:
        run(config, out=tmp_path / "run")
    assert "pickled" not in str(caught.value)


def test_a_margin_layer_trains_from_a_config_and_layer_typos_are_named_when_read():
    """Margin needs the true solution in training: `combolayer train` never passed it,
    and every step failed; a typo in layer.method, .projection or .backend was read only
    after the data were made and solved, without naming the key."""
    data = {"name": "shortest_path", "num_features": 5, "grid": [3, 3]}
    margin = {"method": {"name": "margin", "method": "blackbox"}}
    for loss in ("l1", "regret", "hamming"):
        history, _ = run(load_config({"data": data, "num_train": 20, "num_test": 10,
                                      "epochs": 1, "loss": loss, "layer": margin}))
        assert np.isfinite(history.regret).all()
    for layer, key in [({"method": "blackbx"}, "layer.method"),
                       ({"method": {"name": "blackbox", "lamb": 1}}, "layer.method"),
                       ({"projection": "plain"}, "layer.projection"),
                       ({"backend": "higs"}, "layer.backend"),
                       ({"backend": {"name": "highs", "timelimit": 3}}, "layer.backend")]:
        with pytest.raises(ConfigError, match=rf"{key}: "):
            load_config({"data": data, "layer": layer})


def test_fit_measures_the_test_regret_with_the_model_in_eval_mode():
    # the model stayed in training mode: dropout on, and batch norm's statistics updated
    # by the test data (2 batches tracked after one training batch)
    from combolayer.training.loop import fit, normalized_regret

    data = cl.data.shortest_path(60, 5, grid=(3, 3), seed=1)
    train, test = data.split(40)
    layer = cl.ComboLayer(data.spec)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 32), torch.nn.Dropout(0.5),
                                torch.nn.BatchNorm1d(32), torch.nn.Linear(32, 12))
    history = fit(layer, train, test, epochs=1, batch_size=40, model=model)
    assert model.training and int(model[2].num_batches_tracked) == 1
    model.eval()
    assert history.regret[0] == normalized_regret(layer, model, test)
    assert not model.training


def test_a_split_past_the_data_and_an_empty_split_are_refused():
    from combolayer.training.loop import fit

    data = cl.data.shortest_path(10, 3, grid=(3, 3))
    with pytest.raises(cl.InputError, match="num_train must be an integer between 0 and the 10 "):
        data.split(20)  # was 10 and 0 instances, and a perfect regret of 0.0 on no data
    train, test = data.split(10)
    with pytest.raises(cl.InputError, match="the test split is empty"):
        fit(cl.ComboLayer(data.spec), train, test, epochs=1)


@pytest.mark.parametrize("key, value, match", [
    ("epochs", True, "epochs: .*got the boolean True"),  # was 1 epoch
    ("batch_size", True, "batch_size: .*got the boolean True"),
    ("seed", -1, "seed: Input should be greater than or equal to 0"),  # numpy's, in run()
    ("seed", 2**64, "seed: Input should be less than 4294967296"),
    ("out", "", "out: String should have at least 1 character"),  # wrote into ./
])
def test_a_config_value_out_of_range_is_refused_when_read(key, value, match):
    from combolayer.training.loop import ConfigError, load_config

    config = {"data": {"name": "shortest_path", "num_features": 3, "grid": [3, 3]},
              "epochs": 1, key: value}
    with pytest.raises(ConfigError, match=match) as info:
        load_config(config)
    assert isinstance(info.value, cl.ComboLayerError)
    assert load_config({k: v for k, v in config.items() if k != key}).seed == 0


def test_a_config_takes_numpy_integers():
    from combolayer.training.loop import load_config

    config = load_config({"data": {"name": "knapsack", "num_features": 3, "num_items": 5},
                          "epochs": np.int64(5), "batch_size": np.int32(8)})
    assert (config.epochs, config.batch_size) == (5, 8)
