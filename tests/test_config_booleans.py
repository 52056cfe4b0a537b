"""No numeric setting takes a boolean (`combolayer.specs.base.NoBooleans`): pydantic, like
Python, reads ``true`` as 1, so a YAML ``time_limit: true`` was a one-second limit,
``noise: true`` an alpha of 1 and ``lam: true`` a Blackbox step of 1. Specs have their
own test (tests/test_specs.py); here the backend config, every registered estimator,
the layer and the training config."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import combolayer as cl
from combolayer.estimators.base import METHODS
from combolayer.specs.base import _is_numeric
from combolayer.training.loop import ConfigError, load_config

BOOLEAN = "must hold numbers, got the boolean True"


def numeric_fields(model: type) -> list[str]:
    return [name for name, field in model.model_fields.items()
            if _is_numeric(field.annotation)]


@pytest.mark.parametrize("field", numeric_fields(cl.BackendConfig))
def test_a_backend_config_refuses_a_boolean_for_a_number(field):
    with pytest.raises(cl.SpecError, match=f"^invalid backend config: {field} {BOOLEAN}"):
        cl.BackendConfig(**{field: True})
    with pytest.raises(cl.SpecError, match=f"{field} {BOOLEAN}"):
        cl.BackendConfig.load({"name": "highs", field: True})


ESTIMATOR_FIELDS = [(name, field) for name, cls in sorted(METHODS.items())
                    for field in numeric_fields(cls)]


def test_every_estimator_with_a_numeric_setting_is_checked():
    assert {"blackbox", "perturbed", "imle"} <= {name for name, _ in ESTIMATOR_FIELDS}


@pytest.mark.parametrize("method, field", ESTIMATOR_FIELDS)
def test_an_estimator_refuses_a_boolean_for_a_number(method, field):
    with pytest.raises(cl.InputError, match=f"{field} {BOOLEAN}"):
        METHODS[method](**{field: True})


@pytest.mark.parametrize("noise", [True, np.bool_(True), torch.tensor(True)])
def test_the_layer_refuses_a_boolean_noise(noise):
    with pytest.raises(cl.InputError, match="noise must be a number alpha >= 0, got the boolean"):
        cl.ComboLayer(cl.problems.TopK(n=4, k=2), noise=noise)
    assert cl.ComboLayer(cl.problems.TopK(n=4, k=2), noise=1).noise.alpha == 1.0


@pytest.mark.parametrize("setting, name", [
    ({"lr": True}, "lr"),
    ({"epochs": True}, "epochs"),
    ({"layer": {"noise": True}}, "noise"),
    ({"layer": {"solve_ratio": True}}, "solve_ratio"),
    ({"layer": {"backend": {"name": "highs", "time_limit": True}}}, "time_limit"),
    ({"layer": {"method": {"name": "blackbox", "lam": True}}}, "lam"),
    ({"data": {"name": "shortest_path", "num_features": 5, "deg": True}}, "deg"),
])
def test_a_train_config_refuses_a_boolean_for_a_number(setting, name):
    config = {"data": {"name": "shortest_path", "num_features": 5}, **setting}
    with pytest.raises(ConfigError, match=f"{name} {BOOLEAN}"):
        load_config(config)
