"""combolayer train: a default loss under which Identity's options act, warnings
for settings that cannot act, one rule for relative paths, and run folders that reload."""

import json
import warnings

import numpy as np
import pytest
import torch
import yaml

import combolayer as cl
from combolayer.training.loop import (
    ConfigError,
    load_config,
    load_data,
    normalized_regret,
    run,
)
from combolayer.training.loop import fit as fit_loop

SMALL = {"data": {"name": "shortest_path", "num_features": 5, "grid": [3, 3], "deg": 2},
         "epochs": 2, "num_train": 64, "num_test": 64}


def _trained_weights(loss, noise):
    train, test = load_data(load_config(SMALL))
    layer = cl.ComboLayer(train.spec, noise=noise, generator=torch.Generator().manual_seed(0))
    model = torch.nn.Linear(5, train.spec.num_outputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_loop(layer, train, test, epochs=2, loss=loss, model=model)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_default_loss_is_the_regret_and_spo_plus_with_a_known_cost():
    from combolayer.training.loop import default_loss

    config = load_config(SMALL)
    assert config.loss is None  # chosen for the data's problem (default_loss)
    assert default_loss(load_data(config)[0].spec) == "regret"
    known = cl.ILP(shape=[2], known_cost=[1.0, 0.0])
    assert default_loss(known) == "spo+"
    assert default_loss(cl.ILP(shape=[2]), known_cost=torch.ones(3, 2)) == "spo+"


def test_noise_acts_under_l1_and_not_under_a_loss_linear_in_y():
    # What the warning says, checked: under the regret (linear in y) Identity's noise
    # leaves the trained model exactly as it was; under L1 it changes it.
    assert torch.equal(_trained_weights("regret", 0.0), _trained_weights("regret", 0.5))
    assert torch.equal(_trained_weights("hamming", 0.0), _trained_weights("hamming", 0.5))
    assert not torch.allclose(_trained_weights("l1", 0.0), _trained_weights("l1", 0.5))


@pytest.mark.parametrize("layer, loss, message", [
    ({"noise": 0.5}, "regret", "noise=0.5 cannot act under loss 'regret' with method 'identity'"),
    ({"noise": 0.5}, "hamming", "use loss 'l1'"),
    ({"method": "blackbox"}, "spo+", "method='blackbox' cannot act under loss 'spo\\+'"),
    ({"noise": 0.2, "projection": "std"}, "fenchel_young",
     "projection='std', noise=0.2 cannot act"),
])
def test_a_setting_that_cannot_act_warns(tmp_path, layer, loss, message):
    config = load_config({**SMALL, "epochs": 1, "layer": layer, "loss": loss})
    with pytest.warns(UserWarning, match=message):
        run(config, out=tmp_path)


@pytest.mark.parametrize("layer, loss", [({"noise": 0.5}, "l1"), ({}, "regret"),
                                         ({"method": "blackbox", "noise": 0.5}, "regret"),
                                         ({}, "spo+")])
def test_settings_that_act_do_not_warn(tmp_path, layer, loss):
    config = load_config({**SMALL, "epochs": 1, "layer": layer, "loss": loss})
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        run(config, out=tmp_path)


def _npz(path, spec, n=60, p=3):
    rng = np.random.default_rng(0)
    features = rng.normal(size=(n, p))
    costs = features @ rng.normal(size=(p, spec.num_outputs))
    np.savez(path, features=features, costs=costs)


def test_train_reads_relative_paths_next_to_the_config(tmp_path, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    spec = cl.problems.TopK(n=5, k=2)
    (project / "topk.yaml").write_text(yaml.safe_dump(spec.model_dump()))
    _npz(project / "data.npz", spec)
    (project / "train.yaml").write_text(yaml.safe_dump(
        {"problem": "topk.yaml", "data": {"npz": "data.npz"}, "epochs": 1, "out": "run"}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config("../project/train.yaml")
    assert config.problem == str(project / "topk.yaml")
    assert config.data.npz == str(project / "data.npz")
    assert config.out == str(project / "run")
    _, folder = run(config)
    assert folder == project / "run" and (folder / "model.pt").is_file()
    # A missing file: the error shows where it was looked for.
    (project / "bad.yaml").write_text(yaml.safe_dump(
        {"problem": "nothere.yaml", "data": {"npz": "data.npz"}}))
    with pytest.raises(ConfigError, match=f"problem: no file named '{project}/nothere.yaml'"):
        load_config(project / "bad.yaml")
    (project / "bad.yaml").write_text(yaml.safe_dump(
        {"problem": "topk.yaml", "data": {"npz": "sub/gone.npz"}}))
    with pytest.raises(ConfigError, match=f"data.npz: no file named '{project}/sub/gone.npz'"):
        load_config(project / "bad.yaml")


def test_from_config_reads_relative_paths_next_to_the_config(tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / "specs").mkdir(parents=True)
    (project / "specs" / "topk.yaml").write_text("{kind: topk, n: 5, k: 2}\n")
    (project / "layer.yaml").write_text("problem: specs/topk.yaml\nmethod: blackbox\n")
    monkeypatch.chdir(tmp_path)
    layer = cl.ComboLayer.from_config("project/layer.yaml")
    assert layer.spec == cl.problems.TopK(n=5, k=2)
    # A dict is named by no file: its relative paths are read from the current directory.
    monkeypatch.chdir(project)
    assert cl.ComboLayer.from_config({"problem": "specs/topk.yaml"}).spec.k == 2
    (project / "layer.yaml").write_text("problem: topk.yaml\n")
    with pytest.raises(cl.SpecError, match=f"problem: no file named '{project}/topk.yaml' "
                                           r"\(the relative path 'topk.yaml' is read next to"):
        cl.ComboLayer.from_config(project / "layer.yaml")


def test_load_run_reloads_the_model_and_layer_and_reproduces_the_test_regret(tmp_path):
    spec = cl.problems.TopK(n=5, k=2)
    (tmp_path / "topk.yaml").write_text(yaml.safe_dump(spec.model_dump()))
    _npz(tmp_path / "data.npz", spec)
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(
        {"problem": "topk.yaml", "data": {"npz": "data.npz"}, "epochs": 3, "lr": 0.05,
         "model": {"hidden": [7]}, "layer": {"method": "blackbox"}, "out": "run"}))
    history, folder = run(load_config(tmp_path / "train.yaml"))
    saved = load_config(folder / "config.json")  # self-contained: absolute paths
    assert saved.problem == str(tmp_path / "topk.yaml")
    model, layer = cl.training.load_run(folder)
    assert not model.training and not layer.training
    assert layer.spec == spec and layer.method.name == "blackbox"
    assert model[0].in_features == 3 and model[0].out_features == 7
    _, test = load_data(saved)
    assert normalized_regret(layer, model, test) == pytest.approx(history.regret[-1], abs=1e-7)
    assert layer(model(test.features[:4])).shape == (4, 5)


def test_load_run_names_the_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no model.json"):
        cl.training.load_run(tmp_path)


def test_a_backend_file_is_read_next_to_the_config_too(tmp_path, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    (project / "backend.yaml").write_text("name: highs\ntime_limit: 5\n")
    (project / "layer.yaml").write_text("problem: {kind: topk, n: 5, k: 2}\n"
                                        "backend: backend.yaml\n")
    monkeypatch.chdir(tmp_path)
    layer = cl.ComboLayer.from_config(project / "layer.yaml")
    assert layer.solver.config.time_limit == 5
    (project / "train.yaml").write_text(yaml.safe_dump(
        {**SMALL, "layer": {"backend": "backend.yaml"}}))
    config = load_config(project / "train.yaml")
    assert config.layer.backend == str(project / "backend.yaml")
    (project / "train.yaml").write_text(yaml.safe_dump(
        {**SMALL, "layer": {"backend": "gone.yaml"}}))
    with pytest.raises(ConfigError, match=f"layer.backend: no file named '{project}/gone.yaml'"):
        load_config(project / "train.yaml")
    assert load_config({**SMALL, "layer": {"backend": "scip"}}).layer.backend == "scip"


# -- a known cost on the auxiliaries, and run folders read like any other input ----------

#: Pick one of three outputs; the auxiliary z <= y0 earns the known cost -1.5 (a reward
#: for picking output 0), so the objective needs z's value.
AUX_REWARD = {"kind": "ilp", "shape": [3], "num_aux": 1, "known_cost": {3: -1.5},
              "constraints": [{"coefs": [1, 1, 1, 0], "sense": "==", "rhs": 1},
                              {"coefs": {3: 1, 0: -1}, "sense": "<=", "rhs": 0}]}


@pytest.fixture(scope="module")
def aux_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("aux")
    spec = cl.load_spec(AUX_REWARD)
    _npz(folder / "data.npz", spec)
    config = load_config({"problem": AUX_REWARD, "data": {"npz": str(folder / "data.npz")},
                          "epochs": 2, "out": str(folder / "run")})
    history, out = run(config)
    return spec, config, history, out


def test_train_counts_a_known_cost_on_the_auxiliaries_in_the_test_regret(aux_run):
    spec, config, history, folder = aux_run
    assert len(history.regret) == 2
    model, layer = cl.training.load_run(folder)
    _, test = load_data(config)
    with torch.no_grad():
        y, aux = layer.solver.solve(model(test.features), return_aux=True)
    expected = cl.metrics.normalized_regret(spec, test.costs, y, aux_pred=aux)
    assert history.regret[-1] == pytest.approx(float(expected), abs=1e-9)


def _copy_run(folder, tmp_path, **replace):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    for name, text in replace.items():
        (copy / f"{name}.json").write_text(text)
    return copy


def test_load_run_bounds_the_spec_it_reads(aux_run, tmp_path):
    import time

    copy = _copy_run(aux_run[3], tmp_path, spec='{"kind": "ranking", "n": 20000}')
    start = time.perf_counter()
    with pytest.raises(cl.SpecError, match="400,020,000 variables"):
        cl.training.load_run(copy)
    assert time.perf_counter() - start < 5


def test_load_run_refuses_a_cost_shape_other_than_the_specs(aux_run, tmp_path):
    shapes = json.loads((aux_run[3] / "model.json").read_text())
    copy = _copy_run(aux_run[3], tmp_path, model=json.dumps({**shapes, "cost_shape": [4]}))
    with pytest.raises(ConfigError, match=r"cost_shape is \[4\] but spec.json's ILP\(shape=\[3\]\) "
                                          r"expects \[3\]"):
        cl.training.load_run(copy)


@pytest.mark.parametrize("name, text, expected", [
    ("config", "[1, 2]", "config.json from .* must be a mapping, got list"),
    ("model", "[]", "model.json from .* must be a mapping, got list"),
    ("model", '{"num_features": true, "cost_shape": [3], "hidden": []}',
     "num_features must be a whole number >= 1, got True"),
    ("model", '{"num_features": 3, "cost_shape": [3], "hidden": [-2]}', "hidden"),
    ("config", '{"layer": {"noise": -1}}', "layer.noise|noise"),
])
def test_load_run_names_a_malformed_file(aux_run, tmp_path, name, text, expected):
    copy = _copy_run(aux_run[3], tmp_path, **{name: text})
    with pytest.raises((cl.SpecError, ConfigError), match=expected):
        cl.training.load_run(copy)


def test_a_run_folder_keeps_a_backend_config_files_contents(tmp_path):
    """A run whose layer.backend names a YAML file reloads after that file has gone: the
    folder keeps the config's contents (it kept the file's path, and load_run failed)."""
    spec = cl.problems.TopK(n=5, k=2)
    (tmp_path / "topk.yaml").write_text(yaml.safe_dump(spec.model_dump()))
    _npz(tmp_path / "data.npz", spec)
    (tmp_path / "backend.yaml").write_text(yaml.safe_dump({"name": "highs", "threads": 1}))
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(
        {"problem": "topk.yaml", "data": {"npz": "data.npz"}, "epochs": 1,
         "layer": {"backend": "backend.yaml"}, "out": "run"}))
    _, folder = run(load_config(tmp_path / "train.yaml"))
    (tmp_path / "backend.yaml").unlink()
    _, layer = cl.training.load_run(folder)
    assert layer.solver.backend == "highs"


def test_fit_applies_the_layers_noise_schedule_each_epoch():
    """fit called set_epoch never: a schedule that turns the noise off after epoch 0 kept
    it at its first level for the whole run."""
    train, test = load_data(load_config(SMALL))
    layer = cl.ComboLayer(train.spec, noise=0.5, noise_schedule={"name": "step_off", "until": 1})
    levels = []
    original = layer.set_epoch
    layer.set_epoch = lambda epoch: levels.append(original(epoch)) or levels[-1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_loop(layer, train, test, epochs=3, loss="l1")
    assert levels == [0.5, 0.0, 0.0]


def test_a_run_folder_keeps_the_generators_defaults_and_sizes(tmp_path):
    """config.json says which data the run trained on, defaults included (it kept only
    what the config gave), and a run from it makes the same data and the same model."""
    config = {"data": {"name": "shortest_path", "num_features": 5}, "epochs": 1,
              "num_train": 16}
    history, folder = run(load_config(config), out=tmp_path / "first")
    saved = json.loads((folder / "config.json").read_text())
    assert saved["data"] | {"grid": [5, 5], "deg": 1, "noise_width": 0.0, "seed": 135} \
        == saved["data"]
    assert (saved["num_train"], saved["num_test"]) == (16, 1000)
    again, _ = run(load_config(saved), out=tmp_path / "second")
    assert again.regret == history.regret and again.loss == history.loss
