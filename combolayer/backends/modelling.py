"""cvxpy as a backend: any canonical form, solved by the MIP solver named in options.

The cvxpy Problem is built once with the cost as a ``cp.Parameter``; each
solve only sets ``param.value``, so cvxpy reuses its compiled (DPP) problem
data and skips re-canonicalisation. ``options={"solver": "HIGHS"}`` (the
default) or ``"SCIP"`` or any installed cvxpy solver that takes integer
variables; every other option goes to ``Problem.solve`` verbatim.

cvxpy has no lazy constraints, so the registry hands this backend the spec's
form without them (``spec.to_canonical(lazy=False)``, e.g. MTZ for TSP).
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import numpy as np

from ..errors import InputError, SolverError
from ..specs.base import Spec
from ..specs.canonical import CanonicalForm, canonical_form
from .base import Backend, Capability, Tier
from .config import BackendConfig
from .highs_runtime import absorb_banner
from .outcome import Outcome, Solved, settle
from .registry import register_backend
from .solver import RowKernel

DEFAULT_SOLVER = "HIGHS"
#: The solvers `_solver_options` passes ``time_limit`` and ``mip_gap`` to.
LIMITED_SOLVERS = ("HIGHS", "SCIP")


def _solver_options(solver: str, config: BackendConfig, options: dict[str, Any]) -> dict:
    """Map time_limit, mip_gap and verbose onto the named solver's own keywords."""
    # warm_start (cvxpy's default) made HiGHS return the previous point on a
    # re-solve while reporting it optimal: every solve starts cold.
    kwargs: dict[str, Any] = {"verbose": bool(config.verbose), "warm_start": False}
    if solver == "HIGHS":
        # HiGHS's default gaps (1e-4 relative, 1e-6 absolute) can return a
        # non-optimal solution: exact unless a gap is asked for.
        kwargs["mip_rel_gap"] = float(config.mip_gap)
        kwargs["mip_abs_gap"] = 0.0 if config.mip_gap == 0 else 1e-6
        if config.time_limit is not None:
            kwargs["time_limit"] = float(config.time_limit)
    elif solver == "SCIP":
        params = {"limits/gap": float(config.mip_gap)}
        if config.time_limit is not None:
            params["limits/time"] = float(config.time_limit)
        params.update(options.pop("scip_params", {}))
        kwargs["scip_params"] = params
    kwargs.update(options)  # another solver's limits: CvxpyBackend.ignored_limits
    return kwargs


class CvxpyKernel(RowKernel):
    """One kept cvxpy Problem; ``__call__`` solves a batch of minimisation costs."""

    def __init__(self, form: CanonicalForm, config: BackendConfig) -> None:
        import cvxpy as cp

        options = dict(config.options)
        self.solver = str(options.pop("solver", DEFAULT_SOLVER)).upper()
        if self.solver == "HIGHS" and not config.verbose:
            absorb_banner()
        if self.solver not in cp.installed_solvers():
            raise InputError(f"cvxpy solver {self.solver!r} is not installed: expected one of "
                             f"{cp.installed_solvers()}")
        self.kwargs = _solver_options(self.solver, config, options)
        self.form = form
        #: Bounds that cross (an integer variable's, rounded inward: [0.3, 0.7]): no
        #: point is feasible, and cvxpy refuses to build such a variable.
        self.empty = bool((form.lower > form.upper).any())
        self.x = self._variable(form)
        # every column's cost (outputs first): a full-width cost sets all of them
        self.cost = cp.Parameter(form.num_vars)
        self.problem = self._base = cp.Problem(cp.Minimize(self.cost @ self.x),
                                               self._constraints(self.x))
        #: The variables of the problems with per-call rows: integer where the rows can
        #: make the LP's vertices fractional (`CanonicalForm.for_rows`), else ``x``.
        self._x_rows = (self.x if form.for_rows.is_mip == form.is_mip
                        else self._variable(form.for_rows))
        self._solved = self.x  # the variables of ``problem``
        #: Per m: the problem with m parameter rows ``A x <= b`` more, built once (DPP):
        #: only their values change between instances.
        self._with_rows: dict[int, tuple] = {}
        #: cvxpy has no lazy constraints: a form whose per-call rows need cuts (a path's
        #: subtour eliminations, `CanonicalForm.row_separator`) takes no rows, and calls
        #: with rows go to a backend that separates them.
        self.takes_rows = form.for_rows.separator is None

    @staticmethod
    def _variable(form: CanonicalForm):
        import cvxpy as cp

        # cvxpy takes integer positions as a tuple of index arrays, one per axis.
        integer = (np.flatnonzero(form.integer),) if form.is_mip else False
        return cp.Variable(form.num_vars, integer=integer,
                           bounds=[form.lower, np.maximum(form.upper, form.lower)])

    def _constraints(self, x) -> list:
        form = self.form
        constraints = []
        if form.A_ub.shape[0]:
            constraints.append(form.A_ub @ x <= form.b_ub)
        if form.A_eq.shape[0]:
            constraints.append(form.A_eq @ x == form.b_eq)
        return constraints

    def _set_rows(self, A: np.ndarray, b: np.ndarray) -> None:
        import cvxpy as cp

        m = A.shape[0]
        if m not in self._with_rows:
            A_param = cp.Parameter((m, self.form.num_vars))
            b_param = cp.Parameter(m)
            x = self._x_rows
            problem = cp.Problem(cp.Minimize(self.cost @ x),
                                 [*self._constraints(x), A_param @ x <= b_param])
            self._with_rows[m] = (problem, A_param, b_param)
        problem, A_param, b_param = self._with_rows[m]
        A_param.value = np.ascontiguousarray(A[:, : self.form.num_vars], dtype=float)
        b_param.value = np.asarray(b, dtype=float)
        self.problem, self._solved = problem, self._x_rows

    def _clear_rows(self) -> None:
        self.problem, self._solved = self._base, self.x

    def solve_one(self, cost: np.ndarray) -> Solved:
        import cvxpy as cp

        if self.empty:
            return settle(Outcome.INFEASIBLE, f"cvxpy ({self.solver})", None,
                          has_solution=False, status="crossing bounds")
        full = np.zeros(self.form.num_vars)
        full[: len(cost)] = cost
        self.cost.value = full
        try:
            with warnings.catch_warnings():
                # "Solution may be inaccurate": the status is read below instead.
                warnings.simplefilter("ignore", UserWarning)
                self.problem.solve(solver=self.solver, **self.kwargs)
        except cp.error.SolverError as error:
            raise SolverError(f"cvxpy ({self.solver}) failed: {error}") from error
        status = self.problem.status
        x = self._solved.value
        outcome = cvxpy_outcome(status, self._solver_status())
        feasible = x is not None and (outcome is Outcome.OPTIMAL or self._feasible(x))
        return settle(outcome, f"cvxpy ({self.solver})", lambda: np.asarray(x, dtype=float),
                      has_solution=feasible, status=str(status))

    def _solver_status(self) -> str:
        """The solver's own status when cvxpy keeps it (SCIP's ``scip_status``), else ""."""
        stats = getattr(self.problem, "solver_stats", None)
        extra = getattr(stats, "extra_stats", None)
        if isinstance(extra, dict):
            status = str(extra.get("scip_status", ""))
            extra.pop("model", None)  # cvxpy keeps the whole SCIP model there: let it go
            return status
        return ""

    def _feasible(self, x: np.ndarray, tol: float = 1e-6) -> bool:
        # cvxpy hands back HiGHS's last iterate after a time limit even when
        # it is not a feasible point: check before returning anything.
        form = self.form
        x = np.asarray(x, dtype=float)
        integral = np.abs(x - np.rint(x))[form.integer] <= tol
        return bool(
            integral.all()
            and (x >= form.lower - tol).all() and (x <= form.upper + tol).all()
            and (form.A_ub @ x <= form.b_ub + tol).all()
            and (np.abs(form.A_eq @ x - form.b_eq) <= tol).all()
        )


#: What SCIP's own status says when cvxpy reports ``optimal_inaccurate``: cvxpy
#: maps SCIP's time limit (and node and gap limits) there.
_SCIP_INACCURATE = {"timelimit": Outcome.TIME_LIMIT, "gaplimit": Outcome.OPTIMAL,
                    "optimal": Outcome.OPTIMAL}


def cvxpy_outcome(status: str, solver_status: str = "") -> Outcome:
    """cvxpy's problem status as an `Outcome`; cvxpy reports HiGHS's time limit
    as ``USER_LIMIT`` and SCIP's as ``optimal_inaccurate``, which is never counted as
    optimal: ``solver_status`` (SCIP's own, from cvxpy's ``extra_stats``) tells a time
    limit (and a gap limit, which is what ``mip_gap`` asked for) from the rest."""
    import cvxpy as cp

    if status == cp.OPTIMAL_INACCURATE:
        return _SCIP_INACCURATE.get(solver_status, Outcome.INACCURATE)
    return {
        cp.OPTIMAL: Outcome.OPTIMAL,
        cp.INFEASIBLE: Outcome.INFEASIBLE,
        cp.INFEASIBLE_INACCURATE: Outcome.INFEASIBLE,
        cp.UNBOUNDED: Outcome.UNBOUNDED,
        cp.UNBOUNDED_INACCURATE: Outcome.UNBOUNDED,
        cp.USER_LIMIT: Outcome.TIME_LIMIT,
    }.get(status, Outcome.STOPPED)


@register_backend
class CvxpyBackend(Backend):
    """cvxpy with a MIP solver from ``options["solver"]`` (HIGHS by default, or SCIP)."""

    name: ClassVar[str] = "cvxpy"
    takes_options: ClassVar[bool] = True
    requires: ClassVar[tuple[str, ...]] = ("cvxpy",)
    capabilities: ClassVar[Capability] = Capability.LP | Capability.MIP | Capability.ROWS
    generic_tier: ClassVar[int] = Tier.MODELLING

    @classmethod
    def ignored_limits(cls, config: BackendConfig) -> str | None:
        solver = str(config.options.get("solver", DEFAULT_SOLVER)).upper()
        if solver in LIMITED_SOLVERS:
            return None
        return f"the cvxpy backend cannot pass them to {solver}: set them in options"

    def compile(self, spec: Spec, config: BackendConfig) -> CvxpyKernel:
        return CvxpyKernel(canonical_form(spec, lazy=False), config)
