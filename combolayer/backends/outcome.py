"""One ladder from a solver's status to a solution, a warning or an error.

Each backend maps its solver's own status onto :class:`Outcome` (a few lines
per solver) and calls :func:`settle`, so every solver follows the same rules
with the same messages:

- optimal: the solution;
- infeasible: :class:`~combolayer.InfeasibleError`;
- unbounded: :class:`~combolayer.SolverError` asking for finite bounds;
- a time (or other user) limit with a feasible solution: a ``RuntimeWarning``
  and that solution; without one: :class:`~combolayer.SolverError`;
- a Ctrl-C the solver caught: ``KeyboardInterrupt``, as if Python had seen it;
- anything else: :class:`~combolayer.SolverError` naming the solver's status.
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Callable

import numpy as np

from ..errors import InfeasibleError, SolverError


class Outcome(enum.Enum):
    OPTIMAL = "optimal"
    INFEASIBLE = "infeasible"
    UNBOUNDED = "unbounded"
    #: The solver could not tell which; :func:`settle` asks ``is_infeasible``.
    INFEASIBLE_OR_UNBOUNDED = "infeasible or unbounded"
    TIME_LIMIT = "time limit"
    #: The solver caught a Ctrl-C and stopped: :func:`settle` re-raises it.
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
    ``is_infeasible()`` resolves :attr:`Outcome.INFEASIBLE_OR_UNBOUNDED`
    (e.g. by a solve with zero costs), which otherwise counts as unbounded.
    """
    if outcome is Outcome.OPTIMAL and has_solution:
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
    if outcome is Outcome.TIME_LIMIT:
        if has_solution:
            warnings.warn(f"{solver} hit the time limit; returning the best feasible solution "
                          "found, which may not be optimal", RuntimeWarning, stacklevel=2)
            return solution()
        raise SolverError(f"{solver} hit the time limit without finding a feasible solution; "
                          "raise BackendConfig.time_limit")
    shown = f" {status!r}" if status else f" {outcome.value!r}"
    raise SolverError(f"{solver} stopped with status{shown}")
