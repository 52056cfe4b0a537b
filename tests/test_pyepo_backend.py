"""PyEPO's models behind combolayer: cl.backends.from_pyepo and cl.data.from_pyepo."""

import numpy as np
import pytest
import torch

import combolayer as cl

pytest.importorskip("pyepo", reason="pyepo is not installed (optional extra [pyepo])")
pytest.importorskip("gurobipy", reason="gurobipy is not installed (optional extra [gurobi])")
grb = pytest.importorskip("pyepo.model.grb", reason="pyepo's Gurobi models are unavailable")


@pytest.fixture(scope="module")
def path_model():
    return grb.shortestPathModel(grid=(5, 5))


def test_shortest_path_solutions_equal_combolayers(path_model):
    spec = cl.data.shortest_path_spec((5, 5))
    costs = np.random.default_rng(0).random((30, 40))
    ours = cl.make_solver(spec).solve(costs)
    theirs = cl.make_solver(spec, backend=cl.backends.from_pyepo(path_model)).solve(costs)
    np.testing.assert_allclose(np.sum(costs * theirs, 1), np.sum(costs * ours, 1), atol=1e-9)
    assert set(np.unique(theirs)) <= {0.0, 1.0}


def test_derived_spec_has_flow_conservation(path_model):
    backend = cl.backends.from_pyepo(path_model)
    spec = backend.spec
    assert spec.cost_shape == (40,) and spec.sense == "min"
    hull = cl.analyze(spec)
    assert hull.dim == cl.analyze(cl.data.shortest_path_spec((5, 5))).dim == 16
    # every normal is constant on real paths: adding it leaves the solution unchanged
    costs = np.random.default_rng(1).random((5, 40))
    solver = cl.make_solver(spec, backend=backend)
    y = solver.solve(costs)
    np.testing.assert_allclose(y @ hull.normals.T, np.tile(hull.offsets, (5, 1)), atol=1e-9)
    shifted = costs + 3.0 * hull.normals[0] + 0.5 * hull.normals[-1]
    np.testing.assert_array_equal(cl.make_solver(cl.data.shortest_path_spec((5, 5)))
                                  .solve(shifted), cl.make_solver(spec).solve(costs))


def test_knapsack_max_sense_folded_once():
    weights = np.random.default_rng(2).integers(3, 8, (2, 12)).astype(float)
    model = grb.knapsackModel(weights=weights, capacity=[20.0, 20.0])
    backend = cl.backends.from_pyepo(model)
    assert backend.spec.sense == "max"
    spec = cl.problems.Knapsack(weights=weights.tolist(), capacities=[20.0, 20.0])
    values = np.random.default_rng(3).random((10, 12))
    theirs = cl.make_solver(spec, backend=backend).solve(values)
    ours = cl.make_solver(spec).solve(values)
    np.testing.assert_allclose(np.sum(values * theirs, 1), np.sum(values * ours, 1), atol=1e-9)
    assert (theirs @ weights.T <= 20.0 + 1e-9).all()


def test_pyepo_model_trains_behind_combo_layer(path_model):
    data = cl.data.shortest_path(120, 5, grid=(5, 5), deg=2, seed=3)
    train, test = data.split(100)
    layer = cl.ComboLayer(cl.backends.from_pyepo(path_model), method="identity")
    assert layer.solver.backend == "pyepo:shortestPathModel"
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 40)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)

    def test_regret():
        layer.eval()
        with torch.no_grad():
            y = layer(model(test.features))
        layer.train()
        return float(cl.metrics.normalized_regret(data.spec, test.costs, y))

    before = test_regret()
    for _ in range(10):
        loss = ((layer(model(train.features)) - train.solutions) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert test_regret() < before


def test_data_from_pyepo_matches_cl_data(path_model):
    from pyepo.data import dataset, shortestpath

    feats, costs = shortestpath.genData(40, 5, (5, 5), deg=2, noise_width=0.5, seed=7)
    pyepo_data = dataset.optDataset(path_model, feats, costs)
    data = cl.data.from_pyepo(pyepo_data)
    ours = cl.data.shortest_path(40, 5, grid=(5, 5), deg=2, noise_width=0.5, seed=7)
    np.testing.assert_allclose(data.costs, ours.costs, rtol=1e-6)
    np.testing.assert_allclose(data.features, ours.features, rtol=1e-6)
    np.testing.assert_allclose((data.costs * data.solutions).sum(1),
                               (ours.costs * ours.solutions).sum(1), rtol=1e-5)
    assert data.spec.cost_shape == (40,)


def test_unreadable_model_says_to_pass_a_spec():
    class Opaque:
        num_cost = 3
        modelSense = 1

        def setObj(self, c):
            self.c = np.asarray(c)

        def solve(self):
            y = np.zeros(3)
            y[np.argmin(self.c)] = 1.0
            return y, float(self.c.min())

    backend = cl.backends.from_pyepo(Opaque())
    with pytest.raises(cl.SpecError, match="Pass the problem's spec yourself"):
        cl.ComboLayer(backend)
    spec = cl.ILP.from_matrices(shape=[3], A_eq=np.ones((1, 3)), b_eq=[1.0])
    y = cl.make_solver(spec, backend=backend).solve(np.array([[3.0, 1.0, 2.0]]))
    assert y.tolist() == [[0.0, 1.0, 0.0]]
    with pytest.raises(cl.SpecError, match="expected equal sizes"):
        cl.make_solver(cl.ILP.from_matrices(shape=[4], A_eq=np.ones((1, 4)), b_eq=[1.0]),
                       backend=backend)
    with pytest.raises(TypeError, match="expects a PyEPO optModel"):
        cl.backends.from_pyepo(object())


def test_models_with_lazy_cuts_or_shared_costs_are_refused():
    vrp = pytest.importorskip("pyepo.model.grb.vrp")
    lazy = cl.backends.from_pyepo(vrp.vrpRCIModel(6, [1, 1, 1, 1, 1], 3, 2))
    with pytest.raises(cl.SpecError, match="lazy constraints"):
        cl.ComboLayer(lazy)
    mtz = cl.backends.from_pyepo(vrp.vrpMTZModel(6, [1, 1, 1, 1, 1], 3, 2))
    with pytest.raises(cl.SpecError, match="not one to one"):
        cl.ComboLayer(mtz)
