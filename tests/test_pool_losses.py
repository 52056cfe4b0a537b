"""NCE, CMAP and the LTR losses: formulas on an enumerable problem, the pool, and PyEPO."""

from __future__ import annotations

import pytest
import torch
from pyepo_kit import (
    POINTS,
    SPEC_MAX,
    SPEC_MIN,
    assert_same_loss,
    brute_min,
    pyepo_knapsack,
    pyepo_shortest_path,
    sign_of,
)

import combolayer as cl
from combolayer.pool import SolutionPool

POOL = POINTS[[0, 2, 3, 5, 8]]


def by_hand(name: str, c_hat: torch.Tensor, c: torch.Tensor, y_star: torch.Tensor,
            pool: torch.Tensor) -> torch.Tensor:
    """Each loss per instance, written out over the pool for min-sense costs."""
    rows = []
    for b in range(len(c_hat)):
        pred = torch.stack([c_hat[b] @ y for y in pool])
        true = torch.stack([c[b] @ y for y in pool])
        if name == "nce":
            rows.append(torch.stack([c_hat[b] @ y_star[b] - p for p in pred]).mean())
        elif name == "cmap":
            rows.append(torch.stack([c_hat[b] @ y_star[b] - p for p in pred]).max())
        elif name == "pointwise":
            rows.append(((true - pred) ** 2).mean())
        elif name == "pairwise":
            best = int(true.argmin())
            rows.append(sum(max(pred[best] - p, 0.0) for p in pred) / (len(pool) - 1))
        else:
            p_true = torch.softmax(-true, 0).clamp(min=1e-8)
            rows.append(-(p_true * torch.log_softmax(-pred, 0)).sum())
    return torch.stack(rows)


LOSSES = {
    "nce": cl.losses.NCELoss,
    "cmap": cl.losses.CMAPLoss,
    "pointwise": cl.losses.PointwiseLTRLoss,
    "pairwise": cl.losses.PairwiseLTRLoss,
    "listwise": cl.losses.ListwiseLTRLoss,
}


def _call(name, loss, w, w_true, sign):
    if name in ("nce", "cmap"):
        return loss(w, brute_min(sign * w_true))
    return loss(w, w_true)


@pytest.mark.parametrize("name", list(LOSSES))
@pytest.mark.parametrize("spec", [SPEC_MIN, SPEC_MAX], ids=["min", "max"])
def test_pool_losses_match_their_formula_and_gradcheck(spec, name):
    gen = torch.Generator().manual_seed(11)
    w = torch.randn(3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    w_true = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    sign = sign_of(spec)
    loss = LOSSES[name](spec, solve_ratio=0.0, pool=POOL, reduction="none")
    value = _call(name, loss, w, w_true, sign)
    expected = by_hand(name, sign * w.detach(), sign * w_true,
                       brute_min(sign * w_true), POOL)
    torch.testing.assert_close(value.detach(), expected)
    torch.autograd.gradcheck(lambda x: _call(name, loss, x, w_true, sign), (w,))
    assert len(loss.pool) == len(POOL)  # solve_ratio=0: the pool never changes


def test_nce_and_cmap_gradients_in_closed_form():
    gen = torch.Generator().manual_seed(12)
    w = torch.randn(3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    y_star = brute_min(torch.randn(3, 4, generator=gen, dtype=torch.float64))
    cl.losses.NCELoss(SPEC_MIN, solve_ratio=0, pool=POOL, reduction="sum")(w, y_star).backward()
    torch.testing.assert_close(w.grad, y_star - POOL.mean(0))
    w.grad = None
    cl.losses.CMAPLoss(SPEC_MIN, solve_ratio=0, pool=POOL, reduction="sum")(w, y_star).backward()
    torch.testing.assert_close(w.grad, y_star - POOL[(w.detach() @ POOL.T).argmin(-1)])


def test_solve_ratio_and_seeding():
    gen = torch.Generator().manual_seed(13)
    w = torch.randn(6, 4, generator=gen, dtype=torch.float64)
    y = brute_min(w)
    # solve_ratio=1: every call solves the predictions and pools them
    loss = cl.losses.NCELoss(SPEC_MIN)
    loss(w, y)
    assert {tuple(r) for r in loss.pool.solutions.tolist()} == {tuple(r) for r in y.tolist()}
    # solve_ratio=0 never calls the solver: an unseeded pool is an error
    with pytest.raises(cl.SolverError, match=r"pool is empty: pass pool="):
        cl.losses.CMAPLoss(SPEC_MIN, solve_ratio=0.0)(w, y)
    # seeding from solutions, from a data set, or sharing one pool
    data = cl.data.shortest_path(20, 3, grid=(3, 3), seed=1)
    for pool in (data.solutions, data):
        seeded = cl.losses.PairwiseLTRLoss(data.spec, solve_ratio=0.0, pool=pool)
        assert len(seeded.pool) == len(torch.unique(data.solutions, dim=0))
    # a solver's -0.0 is the same solution as 0.0
    assert SolutionPool(2).seed(torch.tensor([[-0.0, 1.0], [0.0, 1.0]])) == 1
    shared = SolutionPool(4)
    a = cl.losses.ListwiseLTRLoss(SPEC_MIN, pool=shared)
    b = cl.losses.PointwiseLTRLoss(SPEC_MIN, solve_ratio=0.0, pool=shared)
    a(w, w)
    assert b.pool is shared and len(b.pool) == len(torch.unique(y, dim=0))
    b(w, w)
    # solve_ratio in (0, 1): a seeded coin per call
    calls = []
    half = cl.losses.NCELoss(SPEC_MIN, solve_ratio=0.5, pool=POOL,
                             generator=torch.Generator().manual_seed(0))
    original = half.solver.solve_min
    half.solver.solve_min = lambda c: calls.append(1) or original(c)
    for _ in range(200):
        half(w, y)
    assert 70 < len(calls) < 130
    with pytest.raises(ValueError, match=r"solve_ratio must be in \[0, 1\], got 1.5"):
        cl.losses.NCELoss(SPEC_MIN, solve_ratio=1.5)
    with pytest.raises(ValueError, match=r"pool holds solutions of ILP\(shape=\[4\]\), not of "
                                         r"ShortestPath"):
        cl.losses.NCELoss(data.spec, pool=shared)


@pytest.mark.parametrize("name", list(LOSSES))
@pytest.mark.parametrize("problem", ["shortest_path", "knapsack"])
def test_pool_losses_agree_with_pyepo(problem, name):
    model, spec = pyepo_shortest_path() if problem == "shortest_path" else pyepo_knapsack()
    from pyepo.data.dataset import optDataset
    from pyepo.func import CMAP, NCE, lsLTR, prLTR, ptLTR

    theirs_cls = {"nce": NCE, "cmap": CMAP, "pointwise": ptLTR,
                  "pairwise": prLTR, "listwise": lsLTR}[name]
    n = spec.cost_shape[0]
    gen = torch.Generator().manual_seed(5)
    train_costs = torch.rand(12, n, generator=gen, dtype=torch.float64)
    dataset = optDataset(model, torch.zeros(12, 1).numpy(), train_costs.numpy())
    theirs = theirs_cls(model, solve_ratio=1.0, dataset=dataset)
    ours = LOSSES[name](spec, solve_ratio=1.0, pool=dataset)
    assert len(ours.pool) == len(theirs.solpool)
    for _ in range(2):
        cost = torch.rand(4, n, generator=gen, dtype=torch.float64)
        index = torch.randint(0, 12, (4,), generator=gen)
        target = (dataset.sols[index].double() if name in ("nce", "cmap")
                  else train_costs[index])
        assert_same_loss(theirs, ours, cost, target)
        assert len(ours.pool) == len(theirs.solpool)
