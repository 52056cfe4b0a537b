"""Shared by the PyEPO-method tests: a tiny enumerable problem, brute force, and PyEPO's models."""

from __future__ import annotations

import itertools

import numpy as np
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


def own_objectives(model, costs: np.ndarray) -> np.ndarray:
    """The objective value of the model's own solve (setObj, solve) of each cost row."""
    values = []
    for row in costs:
        model.setObj(row)
        solution, _ = model.solve()
        values.append(row @ torch.as_tensor(solution).double().cpu().numpy())  # MPAX: a tensor
    return np.array(values)


def check_grid_model_is_read(model, costs: np.ndarray) -> None:
    """A PyEPO 5x5 shortest-path ``model``: its spec is read with the flow conservation
    (hull dimension 16), and solves ``costs`` to the model's own objective values, by
    combolayer's solver and by the model behind ``from_pyepo``."""
    backend = cl.backends.from_pyepo(model)
    assert backend.readable
    spec = backend.spec
    assert spec.cost_shape == (40,) and spec.sense == "min"
    hull = cl.analyze(spec)
    assert hull.dim == cl.analyze(cl.data.shortest_path_spec((5, 5))).dim == 16
    read = cl.make_solver(spec).solve(costs)
    np.testing.assert_allclose(np.sum(costs * read, 1), own_objectives(model, costs), atol=1e-9)
    np.testing.assert_allclose(read @ hull.normals.T, np.tile(hull.offsets, (len(costs), 1)),
                               atol=1e-9)
    theirs = cl.make_solver(spec, backend=backend).solve(costs)
    np.testing.assert_allclose(np.sum(costs * theirs, 1), np.sum(costs * read, 1), atol=1e-9)


#: Assignment costs for a facility model (three assignments, two to make, the first
#: only with the depot open at its known cost 5): the first row pays it, the others
#: do not, whichever way the known cost is dropped or counted.
FACILITY_COSTS = np.vstack([[-2.0, 0.0, 0.5], [-6.0, 0.0, 0.5],
                            np.random.default_rng(7).uniform(-8.0, 2.0, (10, 3))])


def check_known_terms_are_read(model, costs: np.ndarray = FACILITY_COSTS) -> None:
    """A PyEPO facility ``model`` (costs on three assignments, the depot ``z`` with the
    objective coefficient 5 in the model, which ``setObj`` leaves alone): its spec has
    that known cost, and the spec's solver and the model behind ``from_pyepo`` reach the
    model's own objective values; calls with other known costs, one after another, leave
    the model's own coefficient in place (Gurobi applies a change lazily: a restore
    still pending when the next call read the coefficients was lost)."""
    backend = cl.backends.from_pyepo(model)
    spec = backend.spec
    assert spec.known_cost == [0.0, 0.0, 0.0, 5.0]

    def own_values() -> list[float]:  # the model's own solves, its objective as it holds it
        values = []
        for row in costs:
            model.setObj(row)
            values.append(model.solve()[1])
        return values

    theirs = own_values()
    ours = cl.make_solver(spec, backend=backend)  # the first solver made solves with `model`
    for solver in (cl.make_solver(spec, backend="highs"), ours):
        y, aux = solver.solve(costs, return_aux=True)
        objective = np.sum(costs * y, 1) + np.hstack([y, aux]) @ np.array(spec.known_cost)
        np.testing.assert_allclose(objective, theirs, atol=1e-6)
    for depot in (0.0, 100.0, 0.0, -3.0, 100.0, 0.0):
        known = np.array([0.0, 0.0, 0.0, depot])
        np.testing.assert_allclose(
            ours.solve(costs, known_cost=known),
            cl.make_solver(spec, backend="highs").solve(costs, known_cost=known), atol=1e-9)
    np.testing.assert_allclose(own_values(), theirs, atol=1e-9)  # the model's 5 is back


def check_knapsack_model_is_read(model, weights: np.ndarray, capacities: list[float],
                                 values: np.ndarray) -> np.ndarray:
    """A PyEPO knapsack ``model``: its spec is read as a binary maximisation that solves
    ``values`` to the model's own and to `cl.problems.Knapsack`'s objective values;
    returns combolayer's solutions."""
    spec = cl.backends.from_pyepo(model).spec
    assert spec.sense == "max" and spec.integrality == ["binary"] * weights.shape[1]
    read = cl.make_solver(spec).solve(values)
    np.testing.assert_allclose(np.sum(values * read, 1), own_objectives(model, values),
                               atol=1e-9)
    knapsack = cl.problems.Knapsack(weights=weights.tolist(), capacities=capacities)
    np.testing.assert_allclose(np.sum(values * read, 1),
                               np.sum(values * cl.make_solver(knapsack).solve(values), 1),
                               atol=1e-9)
    return read


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


def assert_same_loss(theirs, ours, cost: torch.Tensor, target: torch.Tensor) -> None:
    """PyEPO's loss ``theirs`` and ours, each on its own copy of ``cost``: the same
    value and the same gradient with respect to ``cost``."""
    a, b = cost.clone().requires_grad_(), cost.clone().requires_grad_()
    their_loss, our_loss = theirs(a, target), ours(b, target)
    their_loss.backward()
    our_loss.backward()
    torch.testing.assert_close(our_loss, their_loss.detach())
    torch.testing.assert_close(b.grad, a.grad)
