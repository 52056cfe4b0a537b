import numpy as np
import pytest
import torch

import combolayer as cl
from combolayer.layer.schedules import Constant, StepOff, make_schedule


def choose():
    return cl.ILP(shape=[6], constraints=[cl.Constraint(coefs=[1] * 6, sense="==", rhs=3)])


def test_named_schedules_start_at_the_layer_noise():
    assert make_schedule("constant", 0.4) == Constant(0.4)
    assert make_schedule({"name": "step_off", "until": 3}, 0.4) == StepOff(0.4, 3)
    decay = make_schedule({"name": "linear_decay", "until": 4, "alpha": 1.0}, 0.4)
    assert [decay(e) for e in range(6)] == [1.0, 0.75, 0.5, 0.25, 0.0, 0.0]
    with pytest.raises(ValueError, match="unknown noise schedule 'cosine'"):
        make_schedule("cosine", 0.1)
    with pytest.raises(ValueError, match="noise schedule 'step_off'"):
        make_schedule({"name": "step_off"}, 0.1)


def test_step_off_switches_the_noise_off_after_until_and_repr_shows_the_level():
    layer = cl.ComboLayer(choose(), noise=0.5, noise_schedule={"name": "step_off", "until": 2})
    levels = [layer.set_epoch(e) for e in range(4)]
    assert levels == [0.5, 0.5, 0.0, 0.0]
    assert layer.noise is None and layer.noise_level == 0.0
    layer.set_noise(0.3)
    assert layer.noise_level == 0.3
    with pytest.raises(ValueError, match="noise must be a finite alpha >= 0, got -1"):
        layer.set_noise(-1)


def test_a_callable_schedule_and_noise_only_in_training_mode():
    layer = cl.ComboLayer(choose(), projection="none", noise=0.0,
                          noise_schedule=lambda epoch: 100.0 * epoch)
    w = torch.tensor([[0.0, 0.1, 0.2, 0.3, 0.4, 0.5]])
    layer.set_epoch(1)
    assert layer.noise_level == 100.0
    draws = {tuple(layer(w)[0].tolist()) for _ in range(20)}
    assert len(draws) > 1  # alpha 100 swamps the costs: the selection moves
    layer.eval()
    assert {tuple(layer(w)[0].tolist()) for _ in range(5)} == {(1.0, 1.0, 1.0, 0.0, 0.0, 0.0)}


def test_a_schedule_over_a_noise_object_without_a_level_is_refused():
    """The schedule sets alpha; a SumOfGamma has none, and the first set_epoch dropped it."""
    with pytest.raises(ValueError, match="noise_schedule sets a noise level alpha per epoch"):
        cl.ComboLayer(cl.problems.TopK(n=4, k=2), noise=cl.SumOfGamma(k=2, tau=0.5),
                      noise_schedule={"name": "step_off", "until": 10})


@pytest.mark.parametrize("noise", [np.float32(0.5), torch.tensor(0.5), np.int64(1)])
def test_noise_levels_of_numpy_and_torch_scalars_are_numbers(noise):
    layer = cl.ComboLayer(cl.problems.TopK(n=4, k=2), noise=noise)
    assert layer.noise_level == float(noise)
    layer(torch.randn(3, 4))  # a training forward draws the noise


@pytest.mark.parametrize("noise", ["gumbel", np.float32(-1.0), float("nan")])
def test_a_noise_that_is_neither_a_level_nor_a_sampler_is_refused(noise):
    with pytest.raises(ValueError, match="noise must be"):
        cl.ComboLayer(cl.problems.TopK(n=4, k=2), noise=noise)


@pytest.mark.parametrize("name", ["step_off", "linear_decay"])
@pytest.mark.parametrize("until", [0, -1, 2.5, True])
def test_a_schedule_needs_a_whole_number_of_epochs(name, until):
    with pytest.raises(ValueError, match="until must be a whole number of epochs >= 1"):
        make_schedule({"name": name, "until": until}, 1.0)
