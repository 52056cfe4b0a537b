"""Shared by the PyEPO-method tests: a tiny enumerable problem, brute force, and PyEPO's models."""

from __future__ import annotations

import itertools

import pytest
import torch

import combolayer as cl

# At most one of y0, y1; at least one of y2, y3: 9 feasible points, enumerable.
SPEC_MIN = cl.ILP(
    shape=[4],
    constraints=[
        cl.Constraint(coefs={0: 1, 1: 1}, sense="<=", rhs=1),
        cl.Constraint(coefs={2: 1, 3: 1}, sense=">=", rhs=1),
    ],
)
SPEC_MAX = SPEC_MIN.model_copy(update={"sense": "max"})
POINTS = torch.tensor(
    [p for p in itertools.product([0.0, 1.0], repeat=4) if p[0] + p[1] <= 1 and p[2] + p[3] >= 1],
    dtype=torch.float64,
)


def brute_min(costs: torch.Tensor) -> torch.Tensor:
    """argmin over the enumerated points, for any batch shape (random costs: no ties)."""
    return POINTS[(costs @ POINTS.T).argmin(-1)]


def sign_of(spec) -> float:
    return 1.0 if spec.sense == "min" else -1.0


def pyepo_shortest_path():
    """PyEPO's Gurobi 5x5 shortest-path model and combolayer's spec with the same edge order,
    or a skip when pyepo or gurobipy is missing."""
    pytest.importorskip("pyepo")
    pytest.importorskip("gurobipy")
    from pyepo.model.grb import shortestPathModel

    from combolayer.data import shortest_path_spec

    model = shortestPathModel(grid=(5, 5))
    spec = shortest_path_spec((5, 5))
    assert [tuple(arc) for arc in model.arcs] == [tuple(e) for e in spec.edges]
    return model, spec


def pyepo_knapsack(num_items: int = 8, seed: int = 0):
    """PyEPO's Gurobi knapsack (maximise) and the same combolayer Knapsack, or a skip."""
    pytest.importorskip("pyepo")
    pytest.importorskip("gurobipy")
    from pyepo.model.grb import knapsackModel

    gen = torch.Generator().manual_seed(seed)
    weights = torch.randint(1, 10, (2, num_items), generator=gen).double().numpy()
    capacities = (weights.sum(1) / 2).round()
    model = knapsackModel(weights=weights, capacity=capacities)
    spec = cl.problems.Knapsack(weights=weights.tolist(), capacities=capacities.tolist())
    return model, spec
