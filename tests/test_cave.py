"""CaVE: the binding cone from the canonical form, its projection, the loss, and PyEPO."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pyepo_kit import SPEC_MAX, SPEC_MIN, brute_min, pyepo_knapsack, pyepo_shortest_path, sign_of
from scipy.optimize import nnls

import combolayer as cl
from combolayer.losses.cave import binding_normals, cone_projection

pytest.importorskip("clarabel")


def rows(a: np.ndarray) -> set[tuple[float, ...]]:
    return {tuple(float(v) + 0.0 for v in r) for r in np.asarray(a)}


def test_binding_normals_by_hand():
    (normals,) = binding_normals(SPEC_MIN, torch.tensor([1.0, 0.0, 1.0, 0.0]))
    assert rows(normals) == {(1, 1, 0, 0), (0, 0, -1, -1), (0, -1, 0, 0), (0, 0, 0, -1),
                             (1, 0, 0, 0), (0, 0, 1, 0)}
    (normals,) = binding_normals(SPEC_MIN, torch.tensor([0.0, 0.0, 1.0, 1.0]))
    assert (1, 1, 0, 0) not in rows(normals) and (0, 0, -1, -1) not in rows(normals)


@pytest.mark.parametrize("spec", [SPEC_MIN, SPEC_MAX], ids=["min", "max"])
def test_the_true_cost_lies_in_its_cone(spec):
    """KKT: -c is in the cone at y*(c), so the exact projection gives loss 0."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(6, 4, generator=gen, dtype=torch.float64)
    sign = sign_of(spec)
    y_star = brute_min(sign * w)
    loss = cl.losses.CaVELoss(spec, max_iter=200, reduction="none")(w, y_star)
    torch.testing.assert_close(loss, torch.zeros(6, dtype=torch.float64), atol=1e-6, rtol=0)
    other = cl.losses.CaVELoss(spec, max_iter=200, reduction="none")(-w, y_star)
    assert (other > 1e-3).all()


@pytest.mark.parametrize("spec", [SPEC_MIN, SPEC_MAX], ids=["min", "max"])
def test_cave_projection_and_gradient_match_the_formula(spec):
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    sign = sign_of(spec)
    y_true = brute_min(sign * torch.randn(5, 4, generator=gen, dtype=torch.float64))
    loss = cl.losses.CaVELoss(spec, max_iter=200, reduction="sum")(w, y_true)
    loss.backward()
    s = -sign * w.detach()
    expected_value, expected_grad = 0.0, torch.zeros_like(w)
    for b, normals in enumerate(binding_normals(spec, y_true)):
        lam, _ = nnls(normals.T, s[b].numpy())
        p = torch.as_tensor(normals.T @ lam)
        torch.testing.assert_close(torch.as_tensor(
            cone_projection(s[b].numpy(), normals, 200)), p, atol=1e-6, rtol=1e-6)
        sn, pn = s[b].norm(), p.norm()
        expected_value += 1 - (s[b] @ p) / (sn * pn)
        grad_s = -(p / (sn * pn) - (s[b] @ p) * s[b] / (sn**3 * pn))
        expected_grad[b] = -sign * grad_s
    torch.testing.assert_close(loss.detach(), expected_value, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(w.grad, expected_grad, atol=1e-6, rtol=1e-6)


def test_cave_hybrid_heuristic_branch():
    w = torch.tensor([[0.5, -1.0, 2.0, 0.3]], dtype=torch.float64, requires_grad=True)
    y_true = torch.tensor([[1.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
    loss = cl.losses.CaVELoss(SPEC_MIN, solve_ratio=0.0, inner_ratio=0.25)(w, y_true)
    (normals,) = binding_normals(SPEC_MIN, y_true)
    unit = normals / np.linalg.norm(normals, axis=1, keepdims=True)
    s = -w.detach()[0]
    p = 0.75 * s / s.norm() + 0.25 * torch.as_tensor(unit.mean(0))
    torch.testing.assert_close(loss.detach(), 1 - (s @ p) / (s.norm() * p.norm()))


def test_cave_errors():
    grid = cl.problems.ShortestPath.grid(3, 3)
    y = cl.make_solver(grid).solve(torch.rand(3, 3))
    with pytest.raises(ValueError, match="auxiliary variables .* pass binding="):
        cl.losses.CaVELoss(grid)(torch.rand(3, 3), y)
    with pytest.raises(ValueError, match="binary problems: y_true must be 0/1"):
        cl.losses.CaVELoss(SPEC_MIN)(torch.rand(4), torch.tensor([0.5, 0.5, 1.0, 0.0]))
    with pytest.raises(ValueError, match=r"binding has shape \(1, 2, 3\)"):
        cl.losses.CaVELoss(SPEC_MIN)(torch.rand(1, 4), torch.tensor([[1.0, 0, 1, 0]]),
                                     binding=torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match="max_iter must be an int >= 1, got 0"):
        cl.losses.CaVELoss(SPEC_MIN, max_iter=0)


@pytest.mark.parametrize("problem", ["shortest_path", "knapsack"])
def test_cave_agrees_with_pyepo(problem):
    model, spec = pyepo_shortest_path() if problem == "shortest_path" else pyepo_knapsack()
    from pyepo.data.dataset import collate_tight_constraints, optDatasetConstrs
    from pyepo.func import CaVE

    n = spec.cost_shape[0]
    gen = torch.Generator().manual_seed(2)
    costs = torch.rand(4, n, generator=gen, dtype=torch.float64)
    dataset = optDatasetConstrs(model, np.zeros((4, 1)), costs.numpy())
    _, _, sols, _, tight = collate_tight_constraints([dataset[i] for i in range(4)])
    ours = binding_normals(spec, sols)
    for mine, theirs in zip(ours, tight, strict=True):
        theirs = theirs.numpy()
        assert rows(mine) == rows(theirs[np.abs(theirs).sum(1) > 0])
    cost = torch.rand(4, n, generator=gen, dtype=torch.float64)
    for max_iter in (3, 50):
        a, b, c = (cost.clone().requires_grad_() for _ in range(3))
        their_loss = CaVE(model, max_iter=max_iter)(a, tight.double())
        our_loss = cl.losses.CaVELoss(spec, max_iter=max_iter)(b, sols)
        same_rows = cl.losses.CaVELoss(spec, max_iter=max_iter)(c, sols, binding=tight)
        for loss in (their_loss, our_loss, same_rows):
            loss.backward()
        torch.testing.assert_close(same_rows, their_loss.detach(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(c.grad, a.grad, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(our_loss, their_loss.detach(), atol=1e-4, rtol=1e-4)
