"""PGLoss: Gupta & Huang's finite differences, by formula and against PyEPO's PG."""

from __future__ import annotations

import pytest
import torch
from pyepo_kit import SPEC_MAX, SPEC_MIN, brute_min, pyepo_knapsack, pyepo_shortest_path, sign_of

import combolayer as cl


@pytest.mark.parametrize("two_sides", [False, True])
@pytest.mark.parametrize("spec", [SPEC_MIN, SPEC_MAX], ids=["min", "max"])
def test_pg_matches_its_formula(spec, two_sides):
    gen = torch.Generator().manual_seed(7)
    sigma = 0.4
    w = torch.randn(5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    w_true = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    loss = cl.losses.PGLoss(spec, sigma=sigma, two_sides=two_sides, reduction="none")(w, w_true)
    loss.sum().backward()
    sign = sign_of(spec)
    c_hat, c = sign * w.detach(), sign * w_true
    upper = c_hat + sigma * c if two_sides else c_hat
    lower = c_hat - sigma * c
    y_up, y_low = brute_min(upper), brute_min(lower)
    width = 2 * sigma if two_sides else sigma
    value = ((upper * y_up).sum(-1) - (lower * y_low).sum(-1)) / width
    torch.testing.assert_close(loss.detach(), value)
    torch.testing.assert_close(w.grad, sign * (y_up - y_low) / width)


def test_pg_one_sided_is_the_directional_derivative_for_small_sigma():
    """For a small step, the one-sided loss is <c, y(c_hat)> (V is linear near c_hat)."""
    gen = torch.Generator().manual_seed(8)
    w = torch.randn(6, 4, generator=gen, dtype=torch.float64)
    w_true = torch.randn(6, 4, generator=gen, dtype=torch.float64)
    loss = cl.losses.PGLoss(SPEC_MIN, sigma=1e-6, reduction="none")(w, w_true)
    torch.testing.assert_close(loss, (w_true * brute_min(w)).sum(-1))


def test_pg_rejects_bad_input():
    with pytest.raises(ValueError, match="PGLoss sigma must be a finite number > 0, got 0"):
        cl.losses.PGLoss(SPEC_MIN, sigma=0)
    with pytest.raises(ValueError, match=r"cost_true has shape \(2, 3\)"):
        cl.losses.PGLoss(SPEC_MIN)(torch.zeros(2, 4), torch.zeros(2, 3))


@pytest.mark.parametrize("two_sides", [False, True])
@pytest.mark.parametrize("problem", ["shortest_path", "knapsack"])
def test_pg_agrees_with_pyepo(problem, two_sides):
    model, spec = pyepo_shortest_path() if problem == "shortest_path" else pyepo_knapsack()
    from pyepo.func import PG

    n = len(spec.cost_shape) and spec.cost_shape[0]
    gen = torch.Generator().manual_seed(3)
    cost = torch.rand(4, n, generator=gen, dtype=torch.float64)
    true = torch.rand(4, n, generator=gen, dtype=torch.float64)
    a, b = cost.clone().requires_grad_(), cost.clone().requires_grad_()
    theirs = PG(model, sigma=0.3, two_sides=two_sides)(a, true)
    ours = cl.losses.PGLoss(spec, sigma=0.3, two_sides=two_sides)(b, true)
    theirs.backward()
    ours.backward()
    torch.testing.assert_close(ours, theirs.detach())
    torch.testing.assert_close(b.grad, a.grad)
