"""No numeric setting takes a boolean (`combolayer.specs.base.NoBooleans`, `is_real`):
pydantic, like Python, reads ``true`` as 1, so a YAML ``time_limit: true`` was a
one-second limit, ``noise: true`` an alpha of 1 and ``lam: true`` a Blackbox step of 1.
Specs have their own test (tests/test_specs.py); here the backend config, every
registered estimator, the layer, the losses' settings, the data generators and the
training and experiment configs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import combolayer as cl
from combolayer import losses
from combolayer.estimators.base import METHODS
from combolayer.experiments.core import ExperimentConfig
from combolayer.specs.base import _is_numeric
from combolayer.training.loop import ConfigError, load_config

BOOLEAN = "must hold numbers, got the boolean (True|np.True_)"
TOPK = cl.problems.TopK(n=4, k=2)


def numeric_fields(model: type) -> list[str]:
    return [name for name, field in model.model_fields.items()
            if _is_numeric(field.annotation)]


def test_the_numeric_fields_checked_include_the_known_ones():
    """The tests below parametrise over the fields `_is_numeric` finds: pinned here, so
    that a field it missed would not leave both the check and its test out."""
    assert {"time_limit", "threads", "mip_gap", "workers"} <= set(numeric_fields(
        cl.BackendConfig))
    assert {("blackbox", "lam"), ("perturbed", "sigma"), ("perturbed", "num_samples"),
            ("imle", "lam"), ("imle", "tau"), ("aimle", "step")} <= set(ESTIMATOR_FIELDS)


@pytest.mark.parametrize("field", numeric_fields(cl.BackendConfig))
@pytest.mark.parametrize("boolean", [True, np.bool_(True)])
def test_a_backend_config_refuses_a_boolean_for_a_number(field, boolean):
    # workers has a check of its own, which refuses booleans in its own words
    refused = f"{field}: .*got (the boolean )?(True|np.True_)"
    with pytest.raises(cl.SpecError, match=f"^invalid backend config: {refused}"):
        cl.BackendConfig(**{field: boolean})
    with pytest.raises(cl.SpecError, match=refused):
        cl.BackendConfig.load({"name": "highs", field: boolean})


def test_a_backend_config_file_with_a_boolean_limit_is_refused(tmp_path):
    path = tmp_path / "backend.yaml"
    path.write_text("name: highs\ntime_limit: true\n")
    with pytest.raises(cl.SpecError, match=f"time_limit: {BOOLEAN}"):
        cl.BackendConfig.load(str(path))
    # numbers of every kind are still numbers
    config = cl.BackendConfig(time_limit=np.int64(2), mip_gap=0, threads=np.int32(2),
                              workers="auto")
    assert (config.time_limit, config.mip_gap, config.threads) == (2.0, 0.0, 2)


ESTIMATOR_FIELDS = [(name, field) for name, cls in sorted(METHODS.items())
                    for field in numeric_fields(cls)]


@pytest.mark.parametrize("method, field", ESTIMATOR_FIELDS)
def test_an_estimator_refuses_a_boolean_for_a_number(method, field):
    with pytest.raises(cl.InputError, match=f"{field}: {BOOLEAN}"):
        METHODS[method](**{field: True})
    with pytest.raises(cl.InputError, match=f"{field}: {BOOLEAN}"):
        cl.ComboLayer(TOPK, method={"name": method, field: np.bool_(True)})


def test_an_estimator_refuses_a_boolean_given_by_position():
    with pytest.raises(cl.InputError, match=f"lam: {BOOLEAN}"):
        cl.Blackbox(True)
    assert cl.Blackbox(3).lam == 3.0


@pytest.mark.parametrize("noise", [True, False, np.bool_(True), torch.tensor(True)])
def test_the_layer_refuses_a_boolean_noise(noise):
    with pytest.raises(cl.InputError, match="noise must be a number alpha >= 0, got the boolean"):
        cl.ComboLayer(TOPK, noise=noise)
    assert cl.ComboLayer(TOPK, noise=1).noise.alpha == 1.0
    assert cl.ComboLayer(TOPK, noise=torch.tensor(0.5)).noise.alpha == 0.5


@pytest.mark.parametrize("make, message", [
    (lambda: losses.ListwiseLTRLoss(TOPK, temperature=True), "temperature must be"),
    (lambda: losses.PairwiseLTRLoss(TOPK, margin=True), "margin must be"),
    (lambda: losses.PGLoss(TOPK, sigma=True), "sigma must be"),
    (lambda: losses.PGLoss(TOPK, sigma=np.bool_(True)), "sigma must be"),
    (lambda: losses.PGLoss(TOPK, sigma=torch.tensor(True)), "sigma must be"),
    (lambda: losses.RegularizedFenchelYoungLoss(TOPK, lam=True), "lam must be"),
    (lambda: losses.RegularizedFenchelYoungLoss(TOPK, lam=np.bool_(True)), "lam must be"),
    (lambda: losses.RegularizedFenchelYoungLoss(TOPK, max_iter=True), "max_iter must be"),
    (lambda: losses.CaVELoss(TOPK, max_iter=True), "max_iter must be"),
    (lambda: losses.CaVELoss(TOPK, inner_ratio=True), "inner_ratio must be"),
])
def test_a_loss_refuses_a_boolean_for_a_number(make, message):
    with pytest.raises(cl.InputError, match=f"{message}.*got .*True"):
        make()


@pytest.mark.parametrize("make, name", [
    (lambda: cl.data.shortest_path(4, 3, grid=(2, 2), noise_width=True), "noise_width"),
    (lambda: cl.data.shortest_path(4, 3, grid=(2, 2), seed=True), "seed"),
    (lambda: cl.data.shortest_path(4, 3, grid=(True, 3)), "grid"),
    (lambda: cl.data.knapsack(4, 3, 5, dim=True), "dim"),
    (lambda: cl.data.knapsack(4, 3, True), "num_items"),
    (lambda: cl.data.tsp(4, 3, True), "num_nodes"),
])
def test_a_data_generator_refuses_a_boolean_for_a_number(make, name):
    with pytest.raises(cl.InputError, match=f"{name} must (be|hold) .*True"):
        make()


def test_a_data_generator_takes_every_number_and_seed_it_took():
    """numpy numbers, a grid as an array, and what numpy's RandomState takes as a seed
    (None, a sequence)."""
    data = cl.data.knapsack(4, 3, 5, seed=np.int64(2), noise_width=np.float32(0.5))
    assert data.costs.shape == (4, 5)
    for seed in (None, [1, 2]):
        assert cl.data.shortest_path(2, 3, grid=(2, 2), seed=seed).costs.shape == (2, 4)
    assert cl.data.shortest_path(2, 3, grid=np.array([2, 3])).costs.shape == (2, 7)


def test_a_loss_takes_a_zero_dimensional_tensor_as_a_number():
    assert losses.PGLoss(TOPK, sigma=torch.tensor(0.5)).sigma == 0.5
    assert losses.RegularizedFenchelYoungLoss(TOPK, lam=torch.tensor(2.0)).lam == 2.0
    pytest.importorskip("clarabel")
    assert losses.CaVELoss(TOPK, inner_ratio=torch.tensor(0.5)).inner_ratio == 0.5


def test_an_experiment_config_refuses_a_boolean_for_a_number():
    with pytest.raises(ValueError, match=f"threads\n.*{BOOLEAN}"):
        ExperimentConfig(threads=True)
    with pytest.raises(ValueError, match=f"seeds\n.*{BOOLEAN} in \\[True\\]"):
        ExperimentConfig(seeds=[True])


@pytest.mark.parametrize("setting, where", [
    ({"lr": True}, "lr: "),
    ({"epochs": True}, "epochs: "),
    ({"batch_size": True}, "batch_size: "),
    ({"num_train": True}, "num_train: "),
    ({"num_test": True}, "num_test: "),
    ({"seed": True}, "seed: "),
    ({"layer": {"noise": True}}, "layer.noise: "),
    ({"layer": {"noise": False}}, "layer.noise: "),
    ({"layer": {"solve_ratio": True}}, "layer.solve_ratio: "),
    ({"layer": {"backend": {"name": "highs", "time_limit": True}}}, "time_limit: "),
    ({"layer": {"method": {"name": "blackbox", "lam": True}}}, "lam: "),
    ({"model": {"hidden": [8, True]}}, "model.hidden: "),
    ({"data": {"name": "shortest_path", "num_features": 5, "deg": True}}, "deg "),
])
def test_a_train_config_refuses_a_boolean_for_a_number(setting, where):
    """The error names where the boolean is (the setting's location, dotted)."""
    config = {"data": {"name": "shortest_path", "num_features": 5}, **setting}
    with pytest.raises(ConfigError, match=f"{where}must hold numbers, got the boolean"):
        load_config(config)


def test_a_train_config_file_with_a_boolean_is_refused(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text("data: {name: shortest_path, num_features: 5}\nlr: true\n")
    with pytest.raises(ConfigError, match=f"lr: {BOOLEAN}"):
        load_config(str(path))


@pytest.mark.parametrize("value", [None, "0.5", [0.5], torch.tensor([0.1, 0.2]), 1.5])
def test_cave_refuses_a_ratio_that_is_no_number_with_its_own_error(value):
    pytest.importorskip("clarabel")
    with pytest.raises(cl.InputError, match="CaVELoss inner_ratio must be a number in"):
        losses.CaVELoss(TOPK, inner_ratio=value)
