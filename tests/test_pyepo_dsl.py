"""PyEPO's modelling DSL (pyepo.dsl, PyEPO 2.2): a cost on a permutation or a subset of
the variables (``c_pred_index``) and a known base cost (``fixed_cost``) are read into the
spec, so every backend PyEPO compiles a DSL model to gives PyEPO's own answers.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

import combolayer as cl

pytest.importorskip("pyepo", reason="pyepo is not installed (optional extra [pyepo])")
dsl = pytest.importorskip("pyepo.dsl", reason="this pyepo has no DSL (pyepo >= 2.2)")
from pyepo import EPO  # noqa: E402

#: As tests/test_pyepo_mpax.py: PDLP's float32 objective can sit a few percent off.
MPAX_NEAR = 5e-2
BACKENDS = {"gurobi": "gurobipy", "copt": "coptpy", "pyomo": "pyomo", "ortools": "ortools",
            "mpax": "mpax"}


def _models(rng: np.random.Generator, vtype, sense: str):
    """The three DSL models of the issue, on one feasible set."""
    x = dsl.Variable(6, vtype=vtype, lb=0, ub=1)
    z = dsl.Variable(2, vtype=vtype, lb=0, ub=1)
    weights = rng.integers(1, 4, (2, 6)).astype(float)
    objective = dsl.Minimize if sense == "min" else dsl.Maximize

    def rows():
        return [weights @ x <= 6, dsl.sum(z) <= 1, x[0] + x[1] - z[0] <= 1]

    yield "permuted cost", dsl.Problem(objective(dsl.Parameter(6) @ x[[5, 2, 0, 1, 4, 3]]),
                                       rows())
    yield "cost on a subset", dsl.Problem(objective(dsl.Parameter(4) @ x[[4, 1, 3, 0]]), rows())
    known = np.array([0.5, -0.5, 0.0, 1.0, 0.0, 0.0]) @ x
    yield "known base cost", dsl.Problem(
        objective(dsl.Parameter(6) @ x + np.array([-1.5, 2.0]) @ z + known), rows())


def _compile(problem, backend: str):
    pytest.importorskip(BACKENDS[backend], reason=f"{BACKENDS[backend]} is not installed")
    kwargs = {"solver": "appsi_highs"} if backend == "pyomo" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return problem.compile(backend, **kwargs)
        except Exception as error:  # a licence or solver the machine lacks
            pytest.skip(f"PyEPO cannot compile a DSL model for {backend}: {error}")


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_dsl_models_give_pyepos_own_answers(backend):
    rng = np.random.default_rng(36)
    vtype = EPO.CONTINUOUS if backend == "mpax" else EPO.BINARY
    sense = "max" if backend in ("ortools", "copt") else "min"
    for name, problem in _models(rng, vtype, sense):
        model = _compile(problem, backend)
        backend_ = cl.backends.from_pyepo(model)
        spec = backend_.spec
        index = np.asarray(problem.c_pred_index)
        assert spec.num_outputs == len(index) and spec.num_vars == problem.num_vars
        assert (spec.known_cost is not None) == bool(np.any(problem.fixed_cost))
        layer = cl.ComboLayer(backend_)
        layer.eval()
        costs = rng.normal(size=(50, model.num_cost))
        y, aux = layer(torch.tensor(costs), return_aux=True)
        order = np.concatenate([index, np.setdiff1d(np.arange(problem.num_vars), index)])
        agree = 0
        for i, cost in enumerate(costs):
            model.setObj(cost)
            solution, _ = model.solve()
            theirs = np.asarray(torch.as_tensor(solution).cpu(), dtype=float)
            ours = np.zeros(problem.num_vars)
            ours[order] = np.concatenate([y[i].numpy(), aux[i].numpy()])
            value = cost @ ours[index] + problem.fixed_cost @ ours
            best = cost @ theirs[index] + problem.fixed_cost @ theirs
            if backend == "mpax":
                agree += abs(value - best) <= MPAX_NEAR * max(1.0, abs(best))
            else:
                agree += abs(value - best) <= 1e-6 and np.allclose(ours[index], theirs[index])
        assert agree == 50, f"{backend}, {name}: {agree} of 50"


def test_a_dsl_mapping_that_is_not_one_cost_per_variable_is_refused():
    pytest.importorskip("gurobipy")
    rng = np.random.default_rng(0)
    _, problem = next(_models(rng, EPO.BINARY, "min"))
    model = _compile(problem, "gurobi")
    broken = copy.copy(model)
    broken.problem = copy.deepcopy(model.problem)
    broken.problem.c_pred_index = np.array([5, 2, 0, 1, 4, 5])
    with pytest.raises(cl.SpecError, match=r"onto the variables \[5, 2, 0, 1, 4, 5\].*one "
                                           "distinct variable per cost"):
        _ = cl.backends.from_pyepo(broken).spec
    with pytest.raises(cl.SpecError, match="one distinct variable per cost"):
        cl.ComboLayer(cl.backends.from_pyepo(broken))


# -- a backend's own reader on a DSL model refuses instead of misreading -------------------


@pytest.mark.parametrize("backend, reader, package", [
    ("gurobi", "ilp_from_gurobi", "gurobipy"), ("ortools", "ilp_from_ortools", "ortools"),
    ("pyomo", "ilp_from_pyomo", "pyomo"), ("mpax", "ilp_from_mpax", "mpax"),
])
def test_a_backend_reader_refuses_a_dsl_model_whose_costs_it_cannot_see(backend, reader,
                                                                         package):
    dsl = pytest.importorskip("pyepo.dsl")
    pytest.importorskip(package)
    from pyepo import EPO

    from combolayer.interop import pyepo as readers

    vtype = EPO.CONTINUOUS if backend == "mpax" else EPO.BINARY
    x = dsl.Variable(6, vtype=vtype, lb=0, ub=1)
    # the cost lands on the variables in another order: read as the model's own order,
    # the ILP was silently another problem (the row's weights permuted), or MPAX's
    # reader failed with "cannot reshape"
    problem = dsl.Problem(dsl.Minimize(dsl.Parameter(6) @ x[[5, 2, 0, 1, 4, 3]]),
                          [np.arange(1.0, 7.0)[None] @ x <= 3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = problem.compile(backend, **({"solver": "appsi_highs"}
                                            if backend == "pyomo" else {}))
    with pytest.raises(cl.SpecError, match=r"is a DSL model .*ilp_from_dsl"):
        getattr(readers, reader)(model)
    spec = cl.backends.from_pyepo(model).spec  # the DSL reader sees the permutation
    assert spec.constraints[0].coefs == {0: 6.0, 1: 3.0, 2: 1.0, 3: 2.0, 4: 5.0, 5: 4.0}


# -- a PyEPO data set of a DSL model: its sols are whole solutions in the model's order ----


def _dataset(problem, costs: np.ndarray):
    from pyepo.data.dataset import optDataset

    model = _compile(problem, "gurobi")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return optDataset(model, np.zeros((len(costs), 2)), costs)


def test_data_from_a_permuted_dsl_cost_keeps_the_specs_order():
    pytest.importorskip("gurobipy")
    x = dsl.Variable(3, vtype=EPO.BINARY, lb=0, ub=1)
    problem = dsl.Problem(dsl.Maximize(dsl.Parameter(3) @ x[[2, 0, 1]]), [dsl.sum(x) <= 1])
    data = cl.data.from_pyepo(_dataset(problem, np.array([[1.0, 0.0, 0.0]])))
    # the cost's first entry is on x[2], which the spec puts first
    np.testing.assert_array_equal(data.solutions.numpy(), [[1.0, 0.0, 0.0]])
    np.testing.assert_array_equal(data.solutions.numpy(),
                                  cl.make_solver(data.spec).solve(data.costs.double().numpy()))


@pytest.mark.parametrize("case", ["permuted cost", "cost on a subset", "known base cost"])
def test_data_and_pool_from_a_dsl_dataset_are_the_specs_optima(case):
    pytest.importorskip("gurobipy")
    rng = np.random.default_rng(5)
    problem = dict(_models(rng, EPO.BINARY, "max"))[case]
    costs = rng.random((8, len(np.asarray(problem.c_pred_index))))
    dataset = _dataset(problem, costs)
    data = cl.data.from_pyepo(dataset)
    y, aux = cl.make_solver(data.spec).solve(costs, return_aux=True)
    np.testing.assert_allclose(data.solutions.numpy(), y, atol=1e-6)
    from combolayer.pool import as_pool

    pool = as_pool(dataset, data.spec)
    whole = np.hstack([y, aux])[:, : pool.num_outputs]  # a known cost: whole solutions
    assert pool.num_outputs == (data.spec.num_vars if case == "known base cost" else len(y[0]))
    pooled = pool.solutions.numpy()
    assert all(np.isclose(pooled, row, atol=1e-6).all(1).any() for row in whole)

