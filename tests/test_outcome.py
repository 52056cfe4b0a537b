"""One status ladder: every solver's status maps onto an Outcome, and settle() turns an
Outcome into the solution, a warning or an error by the same rules for all of them."""

from __future__ import annotations

import re

import numpy as np
import pytest

import combolayer as cl
from combolayer.backends.outcome import Outcome, limit_name, settle

SOLUTION = np.array([1.0, 0.0])


def values() -> np.ndarray:
    return SOLUTION


@pytest.mark.parametrize("solver", ["HiGHS", "SCIP", "cvxpy (SCIP)"])
def test_the_rules_and_messages_are_the_same_for_every_solver(solver):
    name = re.escape(solver)
    assert settle(Outcome.OPTIMAL, solver, values, has_solution=True) is SOLUTION
    with pytest.raises(cl.InfeasibleError, match=f"^{name}: the problem is infeasible"):
        settle(Outcome.INFEASIBLE, solver, values, has_solution=False)
    with pytest.raises(cl.SolverError, match="unbounded.*add finite bounds") as info:
        settle(Outcome.UNBOUNDED, solver, values, has_solution=False)
    assert not isinstance(info.value, cl.InfeasibleError)
    with pytest.warns(RuntimeWarning, match="time limit; returning the best feasible"):
        assert settle(Outcome.TIME_LIMIT, solver, values, has_solution=True) is SOLUTION
    with pytest.raises(cl.SolverError, match="time limit without finding a feasible solution"):
        settle(Outcome.TIME_LIMIT, solver, values, has_solution=False)
    with pytest.raises(cl.SolverError, match=f"{name} stopped with status 'Interrupted'"):
        settle(Outcome.STOPPED, solver, values, has_solution=True, status="Interrupted")
    # "optimal" without a solution is not trusted
    with pytest.raises(cl.SolverError, match="stopped with status"):
        settle(Outcome.OPTIMAL, solver, values, has_solution=False)


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
    assert scip_outcome("nodelimit") is Outcome.LIMIT  # as Gurobi's NODE_LIMIT (issue 38)
    assert scip_outcome("sollimit") is Outcome.LIMIT
    cp = pytest.importorskip("cvxpy")
    from combolayer.backends.cvxpy import cvxpy_outcome

    # optimal_inaccurate is never optimal: SCIP's own status says which limit it was.
    assert cvxpy_outcome(cp.OPTIMAL_INACCURATE) is Outcome.INACCURATE
    assert cvxpy_outcome(cp.OPTIMAL_INACCURATE, "timelimit") is Outcome.TIME_LIMIT
    assert cvxpy_outcome(cp.OPTIMAL_INACCURATE, "gaplimit") is Outcome.OPTIMAL
    assert cvxpy_outcome(cp.OPTIMAL_INACCURATE, "nodelimit") is Outcome.INACCURATE
    assert cvxpy_outcome(cp.USER_LIMIT) is Outcome.TIME_LIMIT
    assert cvxpy_outcome(cp.INFEASIBLE_INACCURATE) is Outcome.INFEASIBLE
