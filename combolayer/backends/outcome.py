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

Every solution returned is also recorded with its status ("optimal", "time
limit", "inaccurate") in the calling thread's innermost `recording`, if
any: that is how the status of each row travels from a kernel, through the
executors' workers, to `Solver.last_status`, which then warns once per call
(or raises, with ``BackendConfig(on_limit="raise")``). Called with no recording
open (a kernel used directly), `settle` warns itself, as it always did.
"""

from __future__ import annotations

import enum
import threading
import warnings
from collections.abc import Callable, Iterable

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
    #: status (`limit_name`) in ``last_status`` and in messages.
    LIMIT = "limit"
    #: A solution the solver returned but calls inaccurate (cvxpy's
    #: ``optimal_inaccurate``, e.g. SCIP stopped by a node limit).
    INACCURATE = "inaccurate"
    #: The solver caught a Ctrl-C and stopped: `settle` re-raises it.
    INTERRUPTED = "interrupted"
    #: Any other stop (numerical trouble, interrupted, an unexpected status).
    STOPPED = "stopped"


def settle(
    outcome: Outcome,
    solver: str,
    solution: Callable[[], np.ndarray],
    *,
    has_solution: bool,
    status: str = "",
    is_infeasible: Callable[[], bool] | None = None,
) -> np.ndarray:
    """The solution for ``outcome``, or the error it calls for.

    ``solver`` names the solver in messages (``"HiGHS"``, ``"cvxpy (SCIP)"``);
    ``solution()`` reads the solver's values, called only when one is returned;
    ``has_solution`` says whether the solver holds a feasible solution;
    ``status`` is the solver's own status, shown when it stopped otherwise;
    ``is_infeasible()`` resolves `Outcome.INFEASIBLE_OR_UNBOUNDED`
    (e.g. by a solve with zero costs), which otherwise counts as unbounded.
    """
    if outcome is Outcome.OPTIMAL and has_solution:
        record(OPTIMAL)
        return solution()
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
            if not record(limit):
                warnings.warn(f"{solver} hit the {limit}; returning the best feasible "
                              "solution found, which may not be optimal", RuntimeWarning,
                              stacklevel=2)
            return solution()
        error = SolverError(f"{solver} hit the {limit} without finding a feasible solution; "
                            f"{raise_limit(limit)}")
        error.status = limit  # which limit, as `last_status` names it (the race reads it)
        raise error
    if outcome is Outcome.INACCURATE and has_solution:
        if not record(outcome.value):
            warnings.warn(f"{solver} returned a solution it calls inaccurate{_shown(status)}; "
                          "it may not be optimal", RuntimeWarning, stacklevel=2)
        return solution()
    shown = f" {status!r}" if status else f" {outcome.value!r}"
    raise SolverError(f"{solver} stopped with status{shown}")


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
    """The advice for a row stopped by ``limit`` (a `limit_name` or ``"time limit"``)."""
    if limit == Outcome.TIME_LIMIT.value:
        return "raise BackendConfig.time_limit"
    return f"raise or remove the {limit} set in BackendConfig.options"


def _shown(status: str) -> str:
    return f" (status {status!r})" if status else ""


# -- per-row statuses -----------------------------------------------------------------

#: The status of a row solved to optimality; any other status is a non-optimal answer.
OPTIMAL = Outcome.OPTIMAL.value
#: The status of a row whose per-call rows ``A x <= b`` left no feasible solution (its
#: output is a row of zeros); `Solver` raises or flags it (``on_infeasible``).
INFEASIBLE = Outcome.INFEASIBLE.value

_LOCAL = threading.local()


class recording:  # noqa: N801 (used as a context manager, like a function)
    """Collect the statuses `settle` records in this thread, innermost first.

    ``with recording() as log:`` opens a list that every solution returned by
    `settle` in this thread appends its status to, until the block ends.
    Recordings nest; only the innermost one receives.
    """

    __slots__ = ("log",)

    def __enter__(self) -> list[str]:
        stack = _LOCAL.__dict__.get("stack")
        if stack is None:
            stack = _LOCAL.stack = []
        self.log: list[str] = []
        stack.append(self.log)
        return self.log

    def __exit__(self, *exc: object) -> None:
        _LOCAL.stack.pop()


def record(status: str) -> bool:
    """Append ``status`` to this thread's innermost recording; False when none is open."""
    stack = _LOCAL.__dict__.get("stack")
    if not stack:
        return False
    stack[-1].append(status)
    return True


def record_all(statuses: Iterable[str]) -> None:
    """Append each of ``statuses`` (a worker's, carried back) to this thread's recording."""
    stack = _LOCAL.__dict__.get("stack")
    if stack:
        stack[-1].extend(statuses)


def worst(statuses: list[str]) -> str:
    """One status for a row that recorded several (a kernel that solves in rounds)."""
    for status in statuses:
        if status != OPTIMAL:
            return status
    return OPTIMAL


def row_statuses(log: list[str], rows: int) -> list[str]:
    """The status of each of ``rows`` rows from what a kernel recorded: one per row for
    row kernels, none for kernels that never stop early (every row optimal)."""
    if len(log) == rows:
        return log
    return [worst(log)] * rows
