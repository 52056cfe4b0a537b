"""Each PyEPO method added here trains: test regret falls on a tiny shortest-path problem."""

from __future__ import annotations

import pytest
import torch

import combolayer as cl
from combolayer.data import shortest_path

DATA = shortest_path(200, 5, grid=(3, 3), deg=4, noise_width=0.5, seed=3)
SOLVER = cl.make_solver(DATA.spec)


def _regret(model) -> float:
    with torch.no_grad():
        decisions = SOLVER.solve(model(DATA.features))
    return cl.metrics.normalized_regret(DATA.spec, DATA.costs, decisions,
                                        y_true=DATA.solutions).item()


def _layer_loss(method, positive=False):
    layer = cl.ComboLayer(DATA.spec, method=method, projection="none")

    def loss(pred, costs, solutions):
        pred = torch.nn.functional.softplus(pred) + 1e-3 if positive else pred
        return (layer(pred) - solutions).square().sum(-1).mean()

    return loss


def _loss_of(name):
    spec, pool = SOLVER, DATA.solutions
    losses = {
        "pg": lambda: cl.losses.PGLoss(spec, sigma=0.5),
        "pg_two_sides": lambda: cl.losses.PGLoss(spec, sigma=0.5, two_sides=True),
        "nce": lambda: cl.losses.NCELoss(spec, solve_ratio=0.3, pool=pool,
                                         generator=torch.Generator().manual_seed(0)),
        "cmap": lambda: cl.losses.CMAPLoss(spec, solve_ratio=0.3, pool=pool,
                                           generator=torch.Generator().manual_seed(0)),
        "pointwise_ltr": lambda: cl.losses.PointwiseLTRLoss(spec, pool=pool),
        "pairwise_ltr": lambda: cl.losses.PairwiseLTRLoss(spec, pool=pool),
        "listwise_ltr": lambda: cl.losses.ListwiseLTRLoss(spec, pool=pool),
        "cave": lambda: cl.losses.CaVELoss(spec),
        "rfy": lambda: cl.losses.RegularizedFenchelYoungLoss(spec, lam=1.0, max_iter=50),
        "pfy_mul": lambda: cl.losses.FenchelYoungLoss(
            spec, sigma=0.5, num_samples=2, perturbation="multiplicative",
            generator=torch.Generator().manual_seed(0)),
    }
    if name in losses:
        loss = losses[name]()
        wants_costs = name in ("pg", "pg_two_sides") or name.endswith("_ltr")
        positive = name == "pfy_mul"

        def call(pred, costs, solutions):
            pred = torch.nn.functional.softplus(pred) + 1e-3 if positive else pred
            return loss(pred, costs if wants_costs else solutions)

        return call
    methods = {
        "aimle": lambda: (cl.AIMLE(num_samples=2, generator=torch.Generator().manual_seed(0)),
                          False),
        "dpo_mul": lambda: (cl.Perturbed(sigma=0.5, num_samples=4, perturbation="multiplicative",
                                         generator=torch.Generator().manual_seed(0)), True),
        "rfwo": lambda: (cl.RegularizedFrankWolfe(lam=1.0, max_iter=50), False),
    }
    method, positive = methods[name]()
    return _layer_loss(method, positive)


NAMES = ["pg", "pg_two_sides", "nce", "cmap", "pointwise_ltr", "pairwise_ltr", "listwise_ltr",
         "cave", "rfy", "pfy_mul", "aimle", "dpo_mul", "rfwo"]


@pytest.mark.parametrize("name", NAMES)
def test_training_reduces_the_regret(name):
    torch.manual_seed(0)
    model = torch.nn.Linear(5, DATA.costs.shape[1])
    loss_fn = _loss_of(name)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    before = _regret(model)
    for _ in range(25):
        optimizer.zero_grad()
        loss_fn(model(DATA.features), DATA.costs, DATA.solutions).backward()
        optimizer.step()
    after = _regret(model)
    assert after < 0.4 * before, (before, after)
