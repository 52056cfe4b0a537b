"""One status ladder: every solver's status maps onto an Outcome, and settle() turns an
Outcome into the solution with its status, or an error, by the same rules for all of them."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from testkit import skip_unless_installed as available

import combolayer as cl
from combolayer.backends.outcome import Outcome, Solved, limit_name, settle, warn_not_optimal

SOLUTION = np.array([1.0, 0.0])


def values() -> np.ndarray:
    return SOLUTION


@pytest.mark.parametrize("solver", ["HiGHS", "SCIP", "cvxpy (SCIP)"])
def test_the_rules_and_messages_are_the_same_for_every_solver(solver):
    name = re.escape(solver)
    assert settle(Outcome.OPTIMAL, solver, values, has_solution=True) == Solved(SOLUTION)
    with pytest.raises(cl.InfeasibleError, match=f"^{name}: the problem is infeasible"):
        settle(Outcome.INFEASIBLE, solver, values, has_solution=False)
    with pytest.raises(cl.SolverError, match="unbounded.*add finite bounds") as info:
        settle(Outcome.UNBOUNDED, solver, values, has_solution=False)
    assert not isinstance(info.value, cl.InfeasibleError)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the status comes back as a value: nothing to warn
        stopped = settle(Outcome.TIME_LIMIT, solver, values, has_solution=True)
        inaccurate = settle(Outcome.INACCURATE, solver, values, has_solution=True)
    assert stopped.values is SOLUTION and stopped.statuses == ("time limit",)
    assert inaccurate.values is SOLUTION and inaccurate.statuses == ("inaccurate",)
    assert settle(Outcome.LIMIT, solver, values, has_solution=True,
                  status="sollimit").statuses == ("solution limit",)
    with pytest.raises(cl.SolverError, match="time limit without finding a feasible solution"):
        settle(Outcome.TIME_LIMIT, solver, values, has_solution=False)
    with pytest.raises(cl.SolverError, match=f"{name} stopped with status 'Interrupted'"):
        settle(Outcome.STOPPED, solver, values, has_solution=True, status="Interrupted")
    # "optimal" without a solution is not trusted
    with pytest.raises(cl.SolverError, match="stopped with status"):
        settle(Outcome.OPTIMAL, solver, values, has_solution=False)


def test_rounds_keep_the_first_status_that_is_not_optimal_and_direct_callers_are_warned():
    first, stopped, last = Solved(1), Solved(2, ("time limit",)), Solved(3)
    assert first.then(last) == last
    assert first.then(stopped).then(last) == Solved(3, ("time limit",))
    assert stopped.then(Solved(3, ("inaccurate",))) == Solved(3, ("time limit",))
    with pytest.warns(RuntimeWarning, match=r"Kernel did not solve 1 of 2 instances to optimality "
                                            r"\(time limit\)"):
        assert warn_not_optimal(Solved(SOLUTION, ("optimal", "time limit")), "Kernel") is SOLUTION
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_not_optimal(Solved(SOLUTION, ("optimal",)), "Kernel") is SOLUTION


def test_a_highs_kernel_called_directly_warns_and_returns_the_statuses_as_values():
    available("highs")
    spec, values = hard_knapsack()
    solver = cl.make_solver(spec, {"name": "highs", "options": {"mip_max_improving_sols": 1}})
    costs = solver.sign * values[None]  # the kernel minimises
    solved = solver.kernel.with_statuses(costs)
    assert solved.statuses == ("solution limit",) and solved.values.shape == (1, 200)
    with pytest.warns(RuntimeWarning, match=r"\(solution limit\)"):
        y = solver.kernel(costs)
    np.testing.assert_array_equal(y, solved.values)


def test_infeasible_or_unbounded_asks_which():
    with pytest.raises(cl.InfeasibleError):
        settle(Outcome.INFEASIBLE_OR_UNBOUNDED, "HiGHS", values, has_solution=False,
               is_infeasible=lambda: True)
    with pytest.raises(cl.SolverError, match="unbounded"):
        settle(Outcome.INFEASIBLE_OR_UNBOUNDED, "HiGHS", values, has_solution=False,
               is_infeasible=lambda: False)


def test_each_solver_maps_its_statuses():
    import highspy

    from combolayer.backends.highs import highs_outcome
    from combolayer.backends.scip import scip_outcome

    S = highspy.HighsModelStatus
    assert highs_outcome(S.kOptimal) is Outcome.OPTIMAL
    assert highs_outcome(S.kUnboundedOrInfeasible) is Outcome.INFEASIBLE_OR_UNBOUNDED
    assert highs_outcome(S.kTimeLimit) is Outcome.TIME_LIMIT
    assert highs_outcome(S.kSolveError) is Outcome.STOPPED
    # the limits a user sets in options stop like the time limit, named by the status
    for status, name in ((S.kSolutionLimit, "solution limit"),
                         (S.kIterationLimit, "iteration limit"),
                         (S.kObjectiveBound, "objective bound")):
        assert highs_outcome(status) is Outcome.LIMIT
        assert limit_name(highspy.Highs().modelStatusToString(status)) == name
    assert scip_outcome("gaplimit") is Outcome.OPTIMAL
    assert scip_outcome("inforunbd") is Outcome.INFEASIBLE_OR_UNBOUNDED
    assert scip_outcome("userinterrupt") is Outcome.INTERRUPTED
    assert scip_outcome("nodelimit") is Outcome.LIMIT  # as Gurobi's NODE_LIMIT
    assert scip_outcome("sollimit") is Outcome.LIMIT
    cp = pytest.importorskip("cvxpy")
    from combolayer.backends.modelling import cvxpy_outcome

    # optimal_inaccurate is never optimal: SCIP's own status says which limit it was.
    assert cvxpy_outcome(cp.OPTIMAL_INACCURATE) is Outcome.INACCURATE
    assert cvxpy_outcome(cp.OPTIMAL_INACCURATE, "timelimit") is Outcome.TIME_LIMIT
    assert cvxpy_outcome(cp.OPTIMAL_INACCURATE, "gaplimit") is Outcome.OPTIMAL
    assert cvxpy_outcome(cp.OPTIMAL_INACCURATE, "nodelimit") is Outcome.INACCURATE
    assert cvxpy_outcome(cp.USER_LIMIT) is Outcome.TIME_LIMIT
    assert cvxpy_outcome(cp.INFEASIBLE_INACCURATE) is Outcome.INFEASIBLE


# -- a limit other than time is named; SCIP's behaves like Gurobi's ------------------------


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
        y, status = solver.solve(values, return_status=True)
    assert status == ("solution limit",)
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
