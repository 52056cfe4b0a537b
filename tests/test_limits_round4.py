"""Issue 38, round four of the adversarial review: readers that skipped what they could
not state (items 1, 3), configs that could ask for anything (7), PyEPO's bare errors
(10), limits named as the time limit (14), and the test plugin's overflow (17)."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from testkit import skip_unless_installed as available

import combolayer as cl

# -- item 1: a reader refuses what an ILP cannot state, never reads it as something else


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
    from combolayer.backends.pyepo import _integrality

    assert _integrality("m", ["B", "I", "C"], ["a", "b", "c"]) == [
        "binary", "integer", "continuous"]
    with pytest.raises(cl.SpecError, match=r"variable of type 'Q' \(z\)"):
        _integrality("m", ["C", "Q"], ["y", "z"])


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


def test_a_gurobi_variable_without_an_upper_bound_is_read_as_unbounded():
    def build(gp, GRB):
        model = gp.Model()
        model.Params.OutputFlag = 0
        x = model.addVars(2, lb=0.0, ub=GRB.INFINITY, vtype=GRB.INTEGER, name="x")
        model.addConstr(x[0] + x[1] >= 1)
        return model, x

    spec = cl.backends.from_pyepo(gurobi_model(build)).spec
    assert spec.upper == [math.inf, math.inf]  # was NaN through from_matrices: a SpecError


# -- item 3: a model file's objective beyond the solvers' infinity ---------------------


@pytest.mark.parametrize("coefficient", ["1e300", "1e16", "-1e300"])
def test_a_model_file_objective_beyond_infinity_names_its_column(tmp_path, coefficient):
    path = tmp_path / "big.lp"
    path.write_text(f"Minimize\n obj: x + {coefficient} y\nSubject To\n c1: x + y >= 1\n"
                    "Bounds\n 0 <= x <= 1\n 0 <= y <= 1\nEnd\n")
    with pytest.raises(cl.SpecError, match=r"objective coefficient of column 1 \(y\)"):
        cl.ILP.from_file(path)
    path.write_text(path.read_text().replace(coefficient, "1e14"))
    assert cl.ILP.from_file(path).default_cost == (1.0, 1e14)


def test_the_file_readers_cost_bound_is_the_layers():
    from combolayer.backends.solver import MAX_COST
    from combolayer.specs import files

    assert files.MAX_COST == MAX_COST


# -- item 7: threads and workers are bounded in the validator ---------------------------


@pytest.mark.parametrize("config, match", [
    ({"threads": 10**6}, r"threads=1000000 is above the limit of \d+ \(8 per usable core, "
                         r"\d+ usable here\)"),
    ({"executor": "process", "workers": 10**6}, r"workers=1000000 for executor='process'.*"
                                                r"usable here"),
    ({"executor": "thread", "workers": 10**6}, "usable here"),
    ({"options": {"threads": 10**6}}, r"options\['threads'\]=1000000.*usable here"),
    ({"options": {"Threads": 10**6}}, "usable here"),
    ({"options": {"MIPGap": math.nan}}, r"options\['MIPGap'\] is NaN"),
])
def test_a_config_cannot_ask_for_a_million_threads_or_workers_or_nan(config, match):
    with pytest.raises(ValueError, match=match):
        cl.BackendConfig(**config)
    with pytest.raises(cl.SpecError, match=match):
        cl.BackendConfig.load(config)


def test_configs_within_the_bound_and_ray_workers_are_accepted():
    from combolayer.backends.config import max_parallel, usable_cores

    assert max_parallel() >= 8 * usable_cores()
    cl.BackendConfig(threads=max_parallel(), executor="process", workers=max_parallel())
    cl.BackendConfig(executor="ray", workers=10_000)  # the cluster's CPUs decide, at start
    cl.BackendConfig(executor="serial", options={"threads": 2, "MIPGap": 0.01})


def test_highs_asked_for_a_million_threads_raises_and_the_interpreter_lives():
    code = ("import combolayer as cl\n"
            "try:\n"
            "    cl.make_solver(cl.problems.TopK(4, 2), {'name': 'highs', 'threads': 10**6})\n"
            "except ValueError as error:\n"
            "    print('refused:', error)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "refused:" in result.stdout and "usable here" in result.stdout


# -- item 10: an infeasible PyEPO model raises combolayer's error ------------------------


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
    from combolayer.backends.pyepo import _no_solution

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


# -- item 14: a limit other than time is named; SCIP's behaves like Gurobi's -------------


def hard_knapsack():
    rng = np.random.default_rng(0)
    spec = cl.problems.Knapsack(weights=rng.uniform(1, 50, (5, 200)).round(2).tolist(),
                                capacities=[500.0] * 5)
    return spec, rng.uniform(1, 10, 200)


@pytest.mark.parametrize("backend, options", [
    ("gurobi", {"SolutionLimit": 1}),
    ("scip", {"limits/solutions": 1, "fast": False}),
    ("highs", {"mip_max_improving_sols": 1}),
    ("highs", {"mip_max_nodes": 1}),  # HiGHS names its node limit a solution limit
])
def test_a_solution_limit_returns_the_solution_named_as_a_solution_limit(backend, options):
    available(backend)
    spec, values = hard_knapsack()
    solver = cl.make_solver(spec, {"name": backend, "options": options})
    with pytest.warns(RuntimeWarning, match=r"\(solution limit\).*raise or remove the "
                                            r"solution limit set in BackendConfig.options"):
        y = solver.solve(values)
    assert solver.last_status == ("solution limit",)
    weights = np.asarray(spec.weights)
    assert (weights @ y <= 500.0 + 1e-6).all()  # a feasible answer came back
    solver = cl.make_solver(spec, {"name": backend, "options": options, "on_limit": "raise"})
    with pytest.raises(cl.SolverError, match="solution limit"):
        solver.solve(values)


def test_a_limit_without_a_solution_names_the_limit_not_the_time_limit():
    available("gurobi")
    spec, values = hard_knapsack()
    solver = cl.make_solver(spec, {"name": "gurobi", "options": {
        "NodeLimit": 0, "Heuristics": 0, "Presolve": 0, "Cuts": 0}})
    with pytest.raises(cl.SolverError, match=r"hit the node limit without finding a feasible "
                                             r"solution; raise or remove the node limit"):
        solver.solve(values)


def test_limit_names_read_both_solvers_statuses():
    from combolayer.backends.outcome import limit_name, raise_limit

    assert limit_name("SOLUTION_LIMIT") == limit_name("sollimit") == "solution limit"
    assert limit_name("NODE_LIMIT") == limit_name("totalnodelimit") == "node limit"
    assert limit_name("USER_OBJ_LIMIT") == "objective limit"
    assert raise_limit("time limit") == "raise BackendConfig.time_limit"


# -- item 17: the test plugin ranks large models without an overflow ---------------------


def test_the_bruteforce_plugin_refuses_a_large_model_without_overflow():
    bruteforce = pytest.importorskip("combolayer_bruteforce")
    spec = cl.ILP.from_matrices(shape=[1200], A_ub=np.ones((1, 1200)), b_ub=[3.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "overflow encountered in reduce" was a warning
        reason = bruteforce.BruteForceBackend().accepts(spec)
        cl.backends.capable_backends(spec)
    assert reason == "it enumerates at most 65536 points, this problem has about 1e361"
    small = cl.ILP.from_matrices(shape=[4], A_ub=np.ones((1, 4)), b_ub=[3.0])
    assert bruteforce.BruteForceBackend().accepts(small) is None


# -- item 10: a backend's own reader on a DSL model refuses instead of misreading ---------


@pytest.mark.parametrize("backend, reader, package", [
    ("gurobi", "ilp_from_gurobi", "gurobipy"), ("ortools", "ilp_from_ortools", "ortools"),
    ("pyomo", "ilp_from_pyomo", "pyomo"), ("mpax", "ilp_from_mpax", "mpax"),
])
def test_a_backend_reader_refuses_a_dsl_model_whose_costs_it_cannot_see(backend, reader,
                                                                         package):
    dsl = pytest.importorskip("pyepo.dsl")
    pytest.importorskip(package)
    from pyepo import EPO

    from combolayer.backends import pyepo as readers

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


def test_a_copt_model_with_several_objectives_is_refused():
    copt = pytest.importorskip("pyepo.model.copt")
    pytest.importorskip("coptpy")
    model = copt.shortestPathModel(grid=(2, 2))
    assert cl.backends.from_pyepo(model).spec.num_outputs == 4  # one objective: read
    model = copt.shortestPathModel(grid=(2, 2))
    columns = list(model._model.getVars())
    model._model.setObjectiveN(0, columns[0] * 1.0)
    model._model.setObjectiveN(1, columns[1] * 1.0)
    with pytest.raises(cl.SpecError, match="has MultiObjs"):
        _ = cl.backends.from_pyepo(model).spec
