"""The LTR options the published methods use: PairwiseLTRLoss's margin,
ListwiseLTRLoss's temperature and the pairwise-difference loss, each against an
independent loop in the style of Mandi et al.'s reference code, and at their defaults
against PyEPO on identical inputs."""

from __future__ import annotations

import pytest
import torch
from pyepo_kit import (
    POINTS,
    SPEC_MAX,
    SPEC_MIN,
    assert_same_loss,
    pyepo_knapsack,
    pyepo_shortest_path,
    sign_of,
)

import combolayer as cl

POOL = POINTS[[0, 2, 3, 5, 8]]


def reference(name: str, c_hat: torch.Tensor, c: torch.Tensor, pool: torch.Tensor,
              option: float) -> torch.Tensor:
    """Mandi et al.'s losses per instance, one instance and one pair at a time, for
    min-sense costs (random costs: no ties in the true objectives)."""
    rows = []
    for b in range(len(c_hat)):
        pred = torch.stack([c_hat[b] @ y for y in pool])
        true = torch.stack([c[b] @ y for y in pool])
        best = int(true.argmin())
        others = [j for j in range(len(pool)) if j != best]
        if name == "pairwise":
            rows.append(sum(torch.relu(option + pred[best] - pred[j]) for j in others)
                        / len(others))
        elif name == "difference":
            rows.append(sum(((pred[best] - pred[j]) - (true[best] - true[j])) ** 2
                            for j in others) / len(others))
        else:
            p = torch.softmax(-true / option, 0).clamp(min=1e-8)
            rows.append(-(p * torch.log_softmax(-pred / option, 0)).sum())
    return torch.stack(rows)


def build(name: str, spec, option: float, pool):
    if name == "pairwise":
        return cl.losses.PairwiseLTRLoss(spec, solve_ratio=0.0, pool=pool, margin=option)
    if name == "listwise":
        return cl.losses.ListwiseLTRLoss(spec, solve_ratio=0.0, pool=pool, temperature=option)
    return cl.losses.PairwiseDifferenceLTRLoss(spec, solve_ratio=0.0, pool=pool)


@pytest.mark.parametrize("spec", [SPEC_MIN, SPEC_MAX], ids=["min", "max"])
@pytest.mark.parametrize("name, option", [("pairwise", 0.0), ("pairwise", 0.7),
                                          ("pairwise", 3.0), ("listwise", 1.0),
                                          ("listwise", 0.25), ("listwise", 4.0),
                                          ("difference", 0.0)])
def test_loss_and_gradient_match_the_reference_loop(spec, name, option):
    gen = torch.Generator().manual_seed(3)
    sign = sign_of(spec)
    w = torch.randn(6, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    w_true = torch.randn(6, 4, generator=gen, dtype=torch.float64)
    loss = build(name, spec, option, POOL)
    ours = loss(w, w_true)
    (grad,) = torch.autograd.grad(ours, w)
    expected = reference(name, sign * w, sign * w_true, POOL, option).mean()
    (expected_grad,) = torch.autograd.grad(expected, w)
    torch.testing.assert_close(ours, expected)
    torch.testing.assert_close(grad, expected_grad)


def test_the_options_change_the_loss():
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    w_true = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    assert build("pairwise", SPEC_MIN, 1.0, POOL)(w, w_true) > \
        build("pairwise", SPEC_MIN, 0.0, POOL)(w, w_true)
    assert not torch.isclose(build("listwise", SPEC_MIN, 0.3, POOL)(w, w_true),
                             build("listwise", SPEC_MIN, 1.0, POOL)(w, w_true))
    # the difference loss is 0 exactly when every predicted gap to the best is the true one
    difference = build("difference", SPEC_MIN, 0.0, POOL)
    assert difference(w_true, w_true) == 0.0
    assert difference(w_true + torch.tensor([0.0, 0.0, 5.0, 0.0], dtype=torch.float64),
                      w_true) > 0


@pytest.mark.parametrize("kwargs, message", [
    ({"margin": -0.1}, "margin must be a finite number >= 0, got -0.1"),
    ({"margin": float("nan")}, "margin must be a finite number >= 0, got nan"),
])
def test_bad_margin(kwargs, message):
    with pytest.raises(ValueError, match=message):
        cl.losses.PairwiseLTRLoss(SPEC_MIN, **kwargs)


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("inf")])
def test_bad_temperature(temperature):
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        cl.losses.ListwiseLTRLoss(SPEC_MIN, temperature=temperature)


@pytest.mark.parametrize("name", ["pairwise", "listwise"])
@pytest.mark.parametrize("problem", ["shortest_path", "knapsack"])
def test_defaults_are_pyepos_losses_on_identical_inputs(problem, name):
    model, spec = pyepo_shortest_path() if problem == "shortest_path" else pyepo_knapsack()
    from pyepo.data.dataset import optDataset
    from pyepo.func import lsLTR, prLTR

    n = spec.cost_shape[0]
    gen = torch.Generator().manual_seed(11)
    train_costs = torch.rand(10, n, generator=gen, dtype=torch.float64)
    dataset = optDataset(model, torch.zeros(10, 1).numpy(), train_costs.numpy())
    theirs = (prLTR if name == "pairwise" else lsLTR)(model, solve_ratio=1.0, dataset=dataset)
    ours = (cl.losses.PairwiseLTRLoss(spec, pool=dataset, margin=0.0) if name == "pairwise"
            else cl.losses.ListwiseLTRLoss(spec, pool=dataset, temperature=1.0))
    cost = torch.rand(4, n, generator=gen, dtype=torch.float64)
    target = train_costs[torch.randint(0, 10, (4,), generator=gen)]
    assert_same_loss(theirs, ours, cost, target)
