"""The gradient-noise hook: identity forward, N(0, sigma^2) on the backward, per instance."""

import pytest
import torch

from combolayer.training.gradients import GradientNoise, add_gradient_noise


def _grad(x, sigma, seed, reduction="mean", weights=None):
    x = x.clone().requires_grad_(True)
    y = add_gradient_noise(x, sigma, generator=torch.Generator().manual_seed(seed),
                           reduction=reduction, instance_dims=2)
    assert torch.equal(y, x)
    loss = (y * weights).sum() if weights is not None else y.sum()
    (loss / (len(x) if reduction == "mean" else 1)).backward()
    return x.grad


def test_forward_is_the_identity_and_sigma_zero_changes_nothing():
    x = torch.randn(4, 3, 3, dtype=torch.float64)
    assert torch.equal(_grad(x, 0.0, 0), torch.full_like(x, 0.25))


def test_noise_is_gaussian_per_instance_under_a_mean_loss():
    x = torch.zeros(64, 50, 50, dtype=torch.float64)
    noise = _grad(x, 0.5, 0) * len(x) - 1.0  # back to per-instance dL_i/dy units
    assert noise.mean().abs() < 0.01
    assert noise.std().item() == pytest.approx(0.5, rel=0.02)


def test_sum_reduction_adds_the_noise_as_it_is():
    x = torch.zeros(64, 50, 50, dtype=torch.float64)
    noise = _grad(x, 0.5, 0, reduction="sum") - 1.0
    assert noise.std().item() == pytest.approx(0.5, rel=0.02)


def test_seeded_generator_reproduces_the_noise():
    x = torch.randn(5, 4, 4)
    assert torch.equal(_grad(x, 0.3, 7), _grad(x, 0.3, 7))
    assert not torch.equal(_grad(x, 0.3, 7), _grad(x, 0.3, 8))


def test_module_is_inactive_in_eval_mode():
    hook = GradientNoise(1.0, generator=torch.Generator().manual_seed(0), instance_dims=1)
    x = torch.ones(3, 2, requires_grad=True)
    hook.eval()(x).sum().backward()
    assert torch.equal(x.grad, torch.ones(3, 2))
    assert "sigma=1" in repr(hook)


@pytest.mark.parametrize("kwargs, match", [
    ({"sigma": -1.0}, "sigma must be a finite value >= 0, got -1.0"),
    ({"sigma": float("inf")}, "sigma must be a finite value >= 0"),
    ({"sigma": 0.1, "reduction": "none"}, "reduction must be 'mean' or 'sum'"),
    ({"sigma": 0.1, "instance_dims": 3}, r"instance_dims must be between 0 and x.ndim=2"),
])
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        add_gradient_noise(torch.ones(2, 2, requires_grad=True), **kwargs)
