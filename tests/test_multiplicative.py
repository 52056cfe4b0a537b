"""Multiplicative perturbations (PyEPO's DPOMul and PFYMul) against their formulas and PyEPO."""

from __future__ import annotations

import pytest
import torch
from pyepo_kit import SPEC_MAX, SPEC_MIN, brute_min, pyepo_shortest_path, sign_of
from testkit import FixedNoise

import combolayer as cl


@pytest.mark.parametrize("spec", [SPEC_MIN, SPEC_MAX], ids=["min", "max"])
def test_perturbed_multiplicative_matches_pyepo_formula(spec):
    gen = torch.Generator().manual_seed(2)
    sigma, samples, batch = 0.6, 5, 3
    w = (torch.rand(batch, 4, generator=gen, dtype=torch.float64) + 0.5).requires_grad_()
    z = torch.randn(samples, batch, 4, generator=gen, dtype=torch.float64)
    g = torch.randn(batch, 4, generator=gen, dtype=torch.float64)
    method = cl.Perturbed(sigma=sigma, num_samples=samples, noise=FixedNoise(z),
                          perturbation="multiplicative")
    layer = cl.ComboLayer(spec, method=method, projection="none")
    y = layer(w)
    (y * g).sum().backward()

    sign = sign_of(spec)
    factor = torch.exp(sigma * z - sigma**2 / 2)
    ys = brute_min(sign * w.detach() * factor)
    assert torch.equal(y.detach(), ys.mean(0))
    # dL/dw = sum_s <g, y_s> Z_s / (S sigma w), the same for either sense.
    expected = ((ys * g).sum(-1, keepdim=True) * z).mean(0) / (sigma * w.detach())
    torch.testing.assert_close(w.grad, expected)


@pytest.mark.parametrize("spec", [SPEC_MIN, SPEC_MAX], ids=["min", "max"])
def test_fenchel_young_multiplicative_gradient(spec):
    gen = torch.Generator().manual_seed(4)
    sigma, samples, batch = 0.5, 4, 3
    w = (torch.rand(batch, 4, generator=gen, dtype=torch.float64) + 0.5).requires_grad_()
    z = torch.randn(samples, batch, 4, generator=gen, dtype=torch.float64)
    sign = sign_of(spec)
    y_true = brute_min(sign * torch.rand(batch, 4, generator=gen, dtype=torch.float64))
    loss_fn = cl.losses.FenchelYoungLoss(spec, sigma=sigma, num_samples=samples,
                                         noise=FixedNoise(z), reduction="sum",
                                         perturbation="multiplicative")
    loss = loss_fn(w, y_true)
    loss.backward()
    factor = torch.exp(sigma * z - sigma**2 / 2)
    c = sign * w.detach()
    ys = brute_min(c * factor)
    value = (c * y_true).sum(-1) - (c * factor * ys).sum(-1).mean(0)
    torch.testing.assert_close(loss.detach(), value.sum())
    torch.testing.assert_close(w.grad, sign * (y_true - (factor * ys).mean(0)))


def test_multiplicative_keeps_the_sign_of_the_costs():
    z = 5.0 * torch.randn(8, 2, 4, dtype=torch.float64)
    method = cl.Perturbed(sigma=2.0, num_samples=8, noise=FixedNoise(z),
                          perturbation="multiplicative")
    costs = torch.rand(2, 4, dtype=torch.float64) + 0.1
    assert (method.perturb(costs, z) > 0).all()
    assert (method.perturb(-costs, z) < 0).all()
    with pytest.raises(ValueError, match="perturbation"):
        cl.Perturbed(perturbation="exponential")


def _pyepo_noise(batch: int, samples: int, dim: int) -> torch.Tensor:
    """PyEPO's draws (its generator, seed 135, shape (batch, samples, dim))."""
    return torch.randn((batch, samples, dim), generator=torch.Generator().manual_seed(135),
                       dtype=torch.float64)


@pytest.mark.parametrize("spec", [SPEC_MIN, SPEC_MAX], ids=["min", "max"])
def test_variance_reduction_centres_the_rewards(spec):
    gen = torch.Generator().manual_seed(8)
    sigma, samples = 0.8, 4
    w = torch.randn(3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    z = torch.randn(samples, 3, 4, generator=gen, dtype=torch.float64)
    g = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    layer = cl.ComboLayer(spec, projection="none", method=cl.Perturbed(
        sigma=sigma, num_samples=samples, noise=FixedNoise(z), variance_reduction=True))
    (layer(w) * g).sum().backward()
    sign = sign_of(spec)
    ys = brute_min(sign * w.detach() - sigma * z)
    reward = (ys * g).sum(-1, keepdim=True)
    reward = (reward - reward.mean(0)) * samples / (samples - 1)
    torch.testing.assert_close(w.grad, sign * -(reward * z).mean(0) / sigma)


def test_dpo_with_variance_reduction_agrees_with_pyepo():
    model, spec = pyepo_shortest_path()
    from pyepo.func import DPO

    gen = torch.Generator().manual_seed(1)
    batch, samples, sigma = 3, 5, 0.7
    cost = torch.rand(batch, 40, generator=gen, dtype=torch.float64)
    g = torch.randn(batch, 40, generator=gen, dtype=torch.float64)
    z = _pyepo_noise(batch, samples, 40)
    a, b = cost.clone().requires_grad_(), cost.clone().requires_grad_()
    theirs = DPO(model, n_samples=samples, sigma=sigma, seed=135)(a)  # variance_reduction=True
    # PyEPO perturbs c + sigma xi; ours c - sigma Z: Z = -xi
    ours = cl.ComboLayer(spec, projection="none", method=cl.Perturbed(
        sigma=sigma, num_samples=samples, noise=FixedNoise(-z.transpose(0, 1).contiguous()),
        variance_reduction=True))(b)
    (theirs * g).sum().backward()
    (ours * g).sum().backward()
    torch.testing.assert_close(ours, theirs.detach())
    torch.testing.assert_close(b.grad, a.grad)


@pytest.mark.parametrize("variance_reduction", [False, True])
def test_dpomul_and_pfymul_agree_with_pyepo(variance_reduction):
    model, spec = pyepo_shortest_path()
    from pyepo.func import DPOMul, PFYMul

    gen = torch.Generator().manual_seed(0)
    batch, samples, sigma = 3, 4, 0.5
    cost = (torch.rand(batch, 40, generator=gen, dtype=torch.float64) + 0.2)
    g = torch.randn(batch, 40, generator=gen, dtype=torch.float64)
    z = _pyepo_noise(batch, samples, 40)
    noise = FixedNoise(z.transpose(0, 1).contiguous())

    theirs_in = cost.clone().requires_grad_()
    dpo = DPOMul(model, n_samples=samples, sigma=sigma, seed=135,
                 variance_reduction=variance_reduction)
    their_y = dpo(theirs_in)
    (their_y * g).sum().backward()
    ours_in = cost.clone().requires_grad_()
    layer = cl.ComboLayer(spec, projection="none", method=cl.Perturbed(
        sigma=sigma, num_samples=samples, noise=noise, perturbation="multiplicative",
        variance_reduction=variance_reduction))
    our_y = layer(ours_in)
    (our_y * g).sum().backward()
    torch.testing.assert_close(our_y, their_y.detach())
    torch.testing.assert_close(ours_in.grad, theirs_in.grad)

    y_true = cl.make_solver(spec).solve(torch.rand(batch, 40, generator=gen, dtype=torch.float64))
    theirs_in = cost.clone().requires_grad_()
    pfy = PFYMul(model, n_samples=samples, sigma=sigma, seed=135)
    their_loss = pfy(theirs_in, y_true)
    their_loss.backward()
    ours_in = cost.clone().requires_grad_()
    fy = cl.losses.FenchelYoungLoss(spec, sigma=sigma, num_samples=samples, noise=noise,
                                    perturbation="multiplicative")
    our_loss = fy(ours_in, y_true)
    our_loss.backward()
    torch.testing.assert_close(our_loss, their_loss.detach())
    torch.testing.assert_close(ours_in.grad, theirs_in.grad)
