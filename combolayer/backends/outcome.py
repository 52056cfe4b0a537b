"""One ladder from a solver's status to a solution, a warning or an error.

Each backend maps its solver's own status onto `Outcome` (a few lines
per solver) and calls `settle`, so every solver follows the same rules
with the same messages:

- optimal: the solution;
- infeasible: [`InfeasibleError`][combolayer.InfeasibleError];
- unbounded: [`SolverError`][combolayer.SolverError] asking for finite bounds;
- a time (or other user) limit with a feasible solution, or a solution the
  solver calls inaccurate: that solution, marked non-optimal; without one:
  [`SolverError`][combolayer.SolverError];
- a Ctrl-C the solver caught: ``KeyboardInterrupt``, as if Python had seen it;
- anything else: [`SolverError`][combolayer.SolverError] naming the solver's status.

`settle` returns the solution together with its status (`Solved`): "optimal",
"time limit", "inaccurate", ... Kernels return the status of each instance with their
solutions, executors carry them back from their workers as values, and `Solver`
returns them (``solve(..., return_status=True)``) and warns once per call (or raises, with
``BackendConfig(on_limit="raise")``). A kernel called directly warns itself
(`warn_not_optimal`).
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InfeasibleError, SolverError


class Outcome(enum.Enum):
    OPTIMAL = "optimal"
    INFEASIBLE = "infeasible"
    UNBOUNDED = "unbounded"
    #: The solver could not tell which; `settle` asks ``is_infeasible``.
    INFEASIBLE_OR_UNBOUNDED = "infeasible or unbounded"
    TIME_LIMIT = "time limit"
    #: Any other limit a user can set (solutions, nodes, iterations, work, memory, an
    #: objective bound): it stops like the time limit, but is named by the solver's
    #: status (`limit_name`) in the statuses a solve returns and in messages.
    LIMIT = "limit"
    #: A solution the solver returned but calls inaccurate (cvxpy's
    #: ``optimal_inaccurate``, e.g. SCIP stopped by a node limit).
    INACCURATE = "inaccurate"
    #: The solver caught a Ctrl-C and stopped: `settle` re-raises it.
    INTERRUPTED = "interrupted"
    #: Any other stop (numerical trouble, an unexpected status).
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class Solved:
    """Solutions with the status of each of their instances: ``statuses`` is None where
    every instance is optimal (the usual case, and the only one for kernels that never
    stop early), else one status per instance (``"optimal"``, ``"time limit"``,
    ``"inaccurate"``, ``"infeasible"``, ...). `settle` returns one instance's: ``values``
    its solution."""

    values: Any
    statuses: tuple[str, ...] | None = None

    def then(self, later: Solved) -> Solved:
        """One instance solved in rounds (cuts, restarts): ``later``'s solution, with the
        first status of the two that is not optimal."""
        if self.statuses is None:
            return later
        return Solved(later.values, (worst([*self.statuses, *(later.statuses or ())]),))


def as_solved(out: Any) -> Solved:
    """``out`` as a `Solved`: itself, or a bare solution array (every instance optimal)."""
    return out if isinstance(out, Solved) else Solved(out)


def settle(
    outcome: Outcome,
    solver: str,
    solution: Callable[[], np.ndarray],
    *,
    has_solution: bool,
    status: str = "",
    is_infeasible: Callable[[], bool] | None = None,
) -> Solved:
    """The solution for ``outcome`` with its status (`Solved`, one instance), or the error
    it calls for.

    ``solver`` names the solver in messages (``"HiGHS"``, ``"cvxpy (SCIP)"``);
    ``solution()`` reads the solver's values, called only when one is returned;
    ``has_solution`` says whether the solver holds a feasible solution;
    ``status`` is the solver's own status, shown when it stopped otherwise;
    ``is_infeasible()`` resolves `Outcome.INFEASIBLE_OR_UNBOUNDED`
    (e.g. by a solve with zero costs), which otherwise counts as unbounded.
    """
    if outcome is Outcome.OPTIMAL and has_solution:
        return Solved(solution())
    if outcome is Outcome.INTERRUPTED:
        raise KeyboardInterrupt  # the solver caught the user's Ctrl-C: hand it back
    if outcome is Outcome.INFEASIBLE_OR_UNBOUNDED:
        infeasible = is_infeasible is not None and is_infeasible()
        outcome = Outcome.INFEASIBLE if infeasible else Outcome.UNBOUNDED
    if outcome is Outcome.INFEASIBLE:
        raise InfeasibleError(f"{solver}: the problem is infeasible, it has no feasible solution")
    if outcome is Outcome.UNBOUNDED:
        raise SolverError(
            f"{solver}: the problem is unbounded for these costs; add finite bounds "
            "(lower/upper) to the variables"
        )
    if outcome in (Outcome.TIME_LIMIT, Outcome.LIMIT):
        limit = outcome.value if outcome is Outcome.TIME_LIMIT else limit_name(status)
        if has_solution:
            return Solved(solution(), (limit,))
        error = SolverError(f"{solver} hit the {limit} without finding a feasible solution; "
                            f"{raise_limit(limit)}")
        error.status = limit  # which limit, as a solve's status names it (the race reads it)
        raise error
    if outcome is Outcome.INACCURATE and has_solution:
        return Solved(solution(), (outcome.value,))
    shown = f" {status!r}" if status else f" {outcome.value!r}"
    raise SolverError(f"{solver} stopped with status{shown}")


def warn_not_optimal(solved: Solved, solver: str, stacklevel: int = 3) -> Any:
    """``solved.values``, with a warning where an instance is not optimal: for a kernel called
    directly, whose caller keeps no statuses (`Solver` keeps them and warns itself)."""
    bad = [status for status in solved.statuses or () if status != OPTIMAL]
    if bad:
        kinds = ", ".join(sorted(set(bad)))
        warnings.warn(f"{solver} did not solve {len(bad)} of {len(solved.statuses)} instances "
                      f"to optimality ({kinds}); returning the best feasible solutions found, "
                      "which may not be optimal", RuntimeWarning, stacklevel=stacklevel)
    return solved.values


#: Solvers' status names of a limit (Gurobi's ``SOLUTION_LIMIT``, SCIP's ``sollimit``)
#: in words; any other is its name with underscores as spaces.
_LIMIT_NAMES = {
    "sollimit": "solution limit", "bestsollimit": "solution limit",
    "nodelimit": "node limit", "totalnodelimit": "node limit",
    "stallnodelimit": "stall node limit", "memlimit": "memory limit",
    "restartlimit": "restart limit", "mem_limit": "memory limit",
    "user_obj_limit": "objective limit",
    # HiGHS's model status strings (`Highs.modelStatusToString`)
    "solution limit reached": "solution limit", "iteration limit reached": "iteration limit",
    "memory limit reached": "memory limit", "bound on objective reached": "objective bound",
    "target for objective reached": "objective target",
}


def limit_name(status: str) -> str:
    """The limit a solver's status names, in words (``"SOLUTION_LIMIT"`` and
    ``"sollimit"``: ``"solution limit"``); ``"limit"`` when there is no status."""
    key = status.strip().lower()
    if not key:
        return Outcome.LIMIT.value
    return _LIMIT_NAMES.get(key, key.replace("_", " "))


def raise_limit(limit: str) -> str:
    """The advice for an instance stopped by ``limit`` (a `limit_name` or ``"time limit"``)."""
    if limit == Outcome.TIME_LIMIT.value:
        return "raise BackendConfig.time_limit"
    return f"raise or remove the {limit} set in BackendConfig.options"


# -- per-instance statuses ------------------------------------------------------------

#: The status of an instance solved to optimality; any other status is a non-optimal answer.
OPTIMAL = Outcome.OPTIMAL.value
#: The status of an instance whose per-call rows ``A x <= b`` left no feasible solution
#: (its output is all zeros); `Solver` raises or flags it (``on_infeasible``).
INFEASIBLE = Outcome.INFEASIBLE.value
#: The status of an instance a `CachedSolver` answered from its pool: a feasible solution
#: of the problem (and of the instance's own per-call rows), not solved for this cost, so
#: not claimed optimal; instances it solved carry their solver's status.
POOLED = "pooled"


def worst(statuses: Sequence[str]) -> str:
    """One status for instances or rounds that have several: the first that is not optimal."""
    return next((status for status in statuses if status != OPTIMAL), OPTIMAL)


def joined(parts: Sequence[Solved]) -> Solved:
    """Blocks of instances solved apart (chunks, slices), in order, as one `Solved`."""
    values = np.concatenate([part.values for part in parts], axis=0)
    if all(part.statuses is None for part in parts):
        return Solved(values)
    return Solved(values, tuple(status for part in parts for status in statuses_of(part)))


def statuses_of(solved: Solved) -> tuple[str, ...]:
    """The status of each instance of ``with_statuses``, "optimal" spelled out."""
    return solved.statuses or (OPTIMAL,) * len(solved.values)
