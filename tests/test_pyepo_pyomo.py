"""PyEPO's Pyomo models behind combolayer: from_pyepo reads their constraints."""

import numpy as np
import pytest

import combolayer as cl

pytest.importorskip("pyepo", reason="pyepo is not installed (optional extra [pyepo])")
pe = pytest.importorskip("pyomo.environ", reason="pyomo is not installed (optional extra [pyepo])")
omo = pytest.importorskip("pyepo.model.omo", reason="pyepo's Pyomo models are unavailable")

#: Pyomo's interface to HiGHS through highspy, a combolayer dependency: no solver binary.
SOLVER = "appsi_highs"


def test_shortest_path_constraints_are_read_and_projection_auto_sees_the_flow():
    backend = cl.backends.from_pyepo(omo.shortestPathModel(grid=(5, 5), solver=SOLVER))
    assert backend.readable
    spec = backend.spec
    grid = cl.data.shortest_path_spec((5, 5))
    assert spec.cost_shape == (40,) and spec.sense == "min"
    hull = cl.analyze(spec)
    assert hull.dim == cl.analyze(grid).dim == 16
    costs = np.random.default_rng(0).random((6, 40))
    theirs = cl.make_solver(spec, backend=backend).solve(costs)
    ours = cl.make_solver(grid).solve(costs)
    np.testing.assert_allclose(np.sum(costs * theirs, 1), np.sum(costs * ours, 1), atol=1e-9)
    # the read spec's own solver agrees too: the constraints were read, not guessed
    np.testing.assert_allclose(np.sum(costs * cl.make_solver(spec).solve(costs), 1),
                               np.sum(costs * ours, 1), atol=1e-9)
    np.testing.assert_allclose(theirs @ hull.normals.T, np.tile(hull.offsets, (6, 1)),
                               atol=1e-9)
    layer = cl.ComboLayer(backend, projection="auto")
    assert layer.solver.backend == "pyepo:shortestPathModel"


def test_knapsack_inequalities_bounds_and_sense_are_read():
    weights = np.random.default_rng(2).integers(3, 8, (2, 12)).astype(float)
    model = omo.knapsackModel(weights=weights, capacity=[20.0, 20.0], solver=SOLVER)
    spec = cl.backends.from_pyepo(model).spec
    assert spec.sense == "max"
    knapsack = cl.problems.Knapsack(weights=weights.tolist(), capacities=[20.0, 20.0])
    values = np.random.default_rng(3).random((8, 12))
    read = cl.make_solver(spec).solve(values)
    np.testing.assert_allclose(np.sum(values * read, 1),
                               np.sum(values * cl.make_solver(knapsack).solve(values), 1),
                               atol=1e-9)
    assert set(np.unique(read)) <= {0.0, 1.0}


def test_two_sided_offset_constraints_are_read_and_shared_costs_refused():
    class Ranged(omo.shortestPathModel):
        def _getModel(self):
            model, x = super()._getModel()
            first = next(iter(x))
            # 0.5 <= x_first + 1 <= 1.5, i.e. x_first <= 0.5 (the path avoids it)
            model.extra = pe.Constraint(expr=pe.inequality(0.5, x[first] + 1.0, 1.5))
            return model, x

    model = Ranged(grid=(3, 3), solver=SOLVER)
    backend = cl.backends.from_pyepo(model)
    costs = np.zeros((1, 12))  # every path costs 0: the bound decides
    costs[0, 0] = -1.0  # the read bound must keep the first arc out
    y = cl.make_solver(backend.spec).solve(costs)
    assert y[0, 0] <= 0.5
    theirs = cl.make_solver(backend.spec, backend=backend).solve(costs)
    np.testing.assert_allclose((costs * y).sum(), (costs * theirs).sum(), atol=1e-9)

    # PyEPO's TSP gives each edge cost to both directed arcs: no ILP on the costs
    tsp = cl.backends.from_pyepo(omo.tspMTZModel(5, solver=SOLVER))
    with pytest.raises(cl.SpecError, match="not map its 10 costs onto variables one to one"):
        _ = tsp.spec


# -- a variable on a lattice or an SOS constraint is refused -------------------------------


def test_a_pyomo_variable_on_a_lattice_or_an_sos_constraint_is_refused():
    pe = pytest.importorskip("pyomo.environ")
    omo = pytest.importorskip("pyepo.model.omo")

    class Stepped(omo.shortestPathModel):
        def _getModel(self):
            model, x = super()._getModel()
            model.step = pe.Var(domain=pe.RangeSet(0, 10, 2))  # {0, 2, ..., 10}
            return model, x

    class WithSOS(omo.shortestPathModel):
        def _getModel(self):
            model, x = super()._getModel()
            model.sos = pe.SOSConstraint(var=x, sos=1)
            return model, x

    with pytest.raises(cl.SpecError, match=r"domain is not an interval.*\(step in"):
        _ = cl.backends.from_pyepo(Stepped(grid=(2, 2), solver="appsi_highs")).spec
    with pytest.raises(cl.SpecError, match=r"has a SOSConstraint \(sos\)"):
        _ = cl.backends.from_pyepo(WithSOS(grid=(2, 2), solver="appsi_highs")).spec
    # the plain model is still read
    assert cl.backends.from_pyepo(omo.shortestPathModel(grid=(2, 2),
                                                        solver="appsi_highs")).spec.num_vars
