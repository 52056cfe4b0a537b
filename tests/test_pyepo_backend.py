"""PyEPO's models behind combolayer: cl.backends.from_pyepo and cl.data.from_pyepo."""

import math

import numpy as np
import pytest
import torch
from pyepo_kit import check_known_terms_are_read
from testkit import PickMin
from testkit import skip_unless_installed as available

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


def test_make_solver_takes_the_wrapped_model_in_place_of_the_spec(path_model):
    backend = cl.backends.from_pyepo(path_model)
    solver = cl.make_solver(backend)  # the spec read from the model, as a layer does
    assert solver.spec == backend.spec and solver.backend == "pyepo:shortestPathModel"
    costs = np.random.default_rng(2).random((3, 40))
    np.testing.assert_allclose(solver.solve(costs),
                               cl.make_solver(backend.spec, backend=backend).solve(costs))


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


class Facility(grb.optGrbModel):
    """Costs on three assignments, two to make; the first needs the depot ``z``, whose
    opening cost 5 is in the model (a known cost: setObj leaves it alone)."""

    def _getModel(self):
        import gurobipy as gp

        m = gp.Model()
        x = m.addVars(3, vtype=gp.GRB.BINARY, name="x")
        z = m.addVar(vtype=gp.GRB.BINARY, obj=5.0, name="z")
        m.addConstr(x.sum() == 2)
        m.addConstr(x[0] <= z)
        return m, x


def test_objective_terms_on_other_variables_are_the_specs_known_cost():
    check_known_terms_are_read(Facility())


def test_a_pool_seeded_from_a_dataset_without_the_auxiliaries_says_so():
    from pyepo.data.dataset import optDataset

    from combolayer.pool import as_pool

    model = Facility()
    dataset = optDataset(model, np.zeros((2, 2)), np.array([[-6.0, 0.0, 0.5], [1.0, 0.0, 0.5]]))
    spec = cl.backends.from_pyepo(model).spec  # a known cost: the pool keeps whole solutions
    with pytest.raises(ValueError, match="sols hold 3 values per instance, expected 4"):
        as_pool(dataset, spec)
    np.testing.assert_array_equal(cl.data.from_pyepo(dataset).solutions.numpy(),
                                  [[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])


def test_a_gurobi_objective_sense_other_than_the_models_is_refused():
    import gurobipy as gp

    class Facility(grb.optGrbModel):
        def _getModel(self):
            m = gp.Model()
            x = m.addVars(2, vtype=gp.GRB.BINARY)
            m.addVar(vtype=gp.GRB.BINARY, obj=5.0)
            return m, x

    model = Facility()
    model._model.ModelSense = gp.GRB.MAXIMIZE  # after PyEPO read its sense as min
    with pytest.raises(cl.SpecError, match="modelSense min but its solver's objective maxim"):
        _ = cl.backends.from_pyepo(model).spec


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
    backend = cl.backends.from_pyepo(PickMin())
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


# -- a reader refuses what an ILP cannot state, never reads it as something else -----------


def gurobi_model(build):
    """A PyEPO Gurobi model whose ``_getModel`` is ``build(gp, GRB) -> (model, x)``."""
    pytest.importorskip("pyepo")
    available("gurobi")
    from pyepo.model.grb import optGrbModel

    class Model(optGrbModel):
        def _getModel(self):
            import gurobipy as gp
            from gurobipy import GRB

            return build(gp, GRB)

    return Model()


def semi(vtype_name):
    def build(gp, GRB):
        model = gp.Model()
        model.Params.OutputFlag = 0
        vtype = getattr(GRB, vtype_name)
        # x0 in {0} or [1, 1]: read as continuous, its lower bound 1 fixed it at 1
        x = model.addVars(3, lb=[1, 0, 0], ub=[1, 1, 1],
                          vtype=[vtype, GRB.BINARY, GRB.BINARY], name="x")
        model.addConstr(x.sum() == 1)
        return model, x
    return build


@pytest.mark.parametrize("vtype, word", [("SEMICONT", "semi-continuous"),
                                          ("SEMIINT", "semi-integer")])
def test_a_semi_continuous_or_semi_integer_gurobi_variable_is_refused(vtype, word):
    backend = cl.backends.from_pyepo(gurobi_model(semi(vtype)))
    with pytest.raises(cl.SpecError, match=rf"has a {word} variable \(x\[0\]\).*pass a spec"):
        _ = backend.spec
    with pytest.raises(cl.SpecError, match=word):
        cl.ComboLayer(backend, projection="auto")


def multiple_objectives(gp, GRB):
    model = gp.Model()
    model.Params.OutputFlag = 0
    x = model.addVars(3, vtype=GRB.BINARY, name="x")
    model.addConstr(x.sum() == 1)
    model.setObjectiveN(x[0] + 0.0, 1, priority=1)
    return model, x


def piecewise_objective(gp, GRB):
    model = gp.Model()
    model.Params.OutputFlag = 0
    x = model.addVars(3, vtype=GRB.CONTINUOUS, ub=1.0, name="x")
    model.addConstr(x.sum() == 1)
    model.setPWLObj(x[1], [0.0, 0.5, 1.0], [0.0, 1.0, 0.0])
    return model, x


@pytest.mark.parametrize("build, match", [(multiple_objectives, "more objectives"),
                                          (piecewise_objective, "piecewise-linear")])
def test_gurobi_objectives_beyond_one_linear_objective_are_refused(build, match):
    backend = cl.backends.from_pyepo(gurobi_model(build))
    with pytest.raises(cl.SpecError, match=match):
        _ = backend.spec


def test_an_unknown_variable_type_letter_is_refused_not_read_as_continuous():
    from combolayer.interop.pyepo import _integrality

    assert _integrality("m", ["B", "I", "C"], ["a", "b", "c"]) == [
        "binary", "integer", "continuous"]
    with pytest.raises(cl.SpecError, match=r"variable of type 'Q' \(z\)"):
        _integrality("m", ["C", "Q"], ["y", "z"])


def test_a_gurobi_variable_without_an_upper_bound_is_read_as_unbounded():
    def build(gp, GRB):
        model = gp.Model()
        model.Params.OutputFlag = 0
        x = model.addVars(2, lb=0.0, ub=GRB.INFINITY, vtype=GRB.INTEGER, name="x")
        model.addConstr(x[0] + x[1] >= 1)
        return model, x

    spec = cl.backends.from_pyepo(gurobi_model(build)).spec
    assert spec.upper == [math.inf, math.inf]  # was NaN through from_matrices: a SpecError


# -- an infeasible or unbounded PyEPO model raises combolayer's error ----------------------


def infeasible(gp, GRB):
    model = gp.Model()
    model.Params.OutputFlag = 0
    x = model.addVars(3, vtype=GRB.BINARY, name="x")
    model.addConstr(x.sum() >= 4)
    return model, x


def unbounded(gp, GRB):
    model = gp.Model()
    model.Params.OutputFlag = 0
    x = model.addVars(3, lb=0.0, ub=GRB.INFINITY, name="x")
    model.ModelSense = GRB.MAXIMIZE
    return model, x


def test_an_infeasible_pyepo_model_raises_infeasible_error():
    layer = cl.ComboLayer(cl.backends.from_pyepo(gurobi_model(infeasible)), projection="none")
    with pytest.raises(cl.InfeasibleError, match="PyEPO model Model: the problem is infeasible"):
        layer(torch.ones(3))


def test_an_unbounded_pyepo_model_raises_solver_error_not_infeasible():
    model = gurobi_model(unbounded)
    spec = cl.ILP.from_matrices(shape=[3], upper=None, integrality="continuous")
    solver = cl.make_solver(spec, backend=cl.backends.from_pyepo(model))
    with pytest.raises(cl.SolverError, match="unbounded") as error:
        solver.solve(-np.ones(3))
    assert not isinstance(error.value, cl.InfeasibleError)


def test_pyepos_bare_runtime_error_is_read_by_its_words_for_other_models():
    from combolayer.interop.pyepo import _no_solution

    class Words:
        num_cost = 2
        _model = object()

        def setObj(self, c):
            pass

        def solve(self):
            raise RuntimeError("Pyomo found no solution (termination other).")

    with pytest.raises(cl.InfeasibleError):
        _no_solution(Words(), RuntimeError("Pyomo found no solution (termination infeasible)."))
    with pytest.raises(cl.SolverError, match="termination other") as error:
        _no_solution(Words(), RuntimeError("Pyomo found no solution (termination other)."))
    assert not isinstance(error.value, cl.InfeasibleError)


def test_thread_workers_each_solve_with_a_model_of_their_own(path_model, always_parallel):
    """One PyEPO model is not thread-safe: every thread kernel after the first solves with
    the model built again (all shared the wrapped model before, and every call failed)."""
    wrapped = cl.backends.from_pyepo(path_model)
    solver = cl.make_solver(wrapped.spec, backend=cl.BackendConfig(
        name="pyepo", options={"model": wrapped}, executor="thread", workers=2))
    costs = np.random.default_rng(0).uniform(size=(64, wrapped.spec.num_outputs))
    y = solver.solve(costs)
    assert len({id(kernel.optmodel) for kernel in solver.kernel._idle}) == 2
    expected = cl.make_solver(wrapped.spec, "highs").solve(costs)
    np.testing.assert_allclose((y * costs).sum(1), (expected * costs).sum(1), atol=1e-9)
    solver.kernel.close()


@pytest.mark.parametrize("setting", [{"time_limit": 1.0}, {"mip_gap": 0.01}])
def test_settings_the_model_cannot_take_are_refused(path_model, setting):
    wrapped = cl.backends.from_pyepo(path_model)
    with pytest.raises(ValueError, match="cannot apply BackendConfig's time_limit or mip_gap"):
        cl.make_solver(wrapped.spec, backend=cl.BackendConfig(
            name="pyepo", options={"model": wrapped}, **setting))
