"""HiGHS through highspy: LPs and MIPs from the canonical form.

The model is passed once; each solve changes only the column costs, clears
the solver state and runs again with presolve off. Measured on the demo's
LPs, reusing the previous basis was 2-5x slower when every cost changes.

Process-global HiGHS state (the banner, the thread scheduler) is handled in
:mod:`combolayer.backends.highs_runtime`, whose names are re-exported here.
"""

from __future__ import annotations

from typing import ClassVar

import highspy
import numpy as np
import scipy.sparse as sp

from ..specs.base import Spec
from ..specs.canonical import CanonicalForm, canonical_form
from .base import Backend, Capability, Tier
from .config import BackendConfig
from .highs_runtime import check_status, new_highs, run_highs
from .outcome import Outcome, settle
from .registry import register_backend
from .solver import RowKernel


def highs_lp(cost: np.ndarray, lower: np.ndarray, upper: np.ndarray, A: sp.spmatrix,
             row_lower: np.ndarray, row_upper: np.ndarray, integer: np.ndarray | None = None):
    """A ``highspy.HighsLp`` for ``min cost.x`` s.t. ``row_lower <= A x <= row_upper``,
    ``lower <= x <= upper`` (infinite bounds allowed), ``x[j]`` integer where ``integer[j]``."""
    def bounded(values: np.ndarray) -> np.ndarray:
        return np.clip(np.asarray(values, dtype=np.float64), -highspy.kHighsInf,
                       highspy.kHighsInf)

    A = sp.csc_matrix(A)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = A.shape[1], A.shape[0]
    lp.col_cost_ = np.asarray(cost, dtype=np.float64)
    lp.col_lower_, lp.col_upper_ = bounded(lower), bounded(upper)
    lp.row_lower_, lp.row_upper_ = bounded(row_lower), bounded(row_upper)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = A.indptr.astype(np.int32)
    lp.a_matrix_.index_ = A.indices.astype(np.int32)
    lp.a_matrix_.value_ = A.data.astype(np.float64)
    if integer is not None:
        lp.integrality_ = [
            highspy.HighsVarType.kInteger if flag else highspy.HighsVarType.kContinuous
            for flag in integer
        ]
    return lp


def _build_model(form: CanonicalForm, config: BackendConfig):
    h = new_highs(config.threads, config.verbose)
    options = {
        # Presolve costs more than it saves when only the costs change, except on
        # the MIPs re-solved with subtour cuts (TSP-50: 106 ms on, 144 ms off).
        "presolve": "on" if form.separator is not None else "off",
        "mip_rel_gap": float(config.mip_gap),
        # The default absolute gap (1e-6) and relative gap (1e-4) returned a
        # non-optimal knapsack solution in our measurements: exact by default.
        "mip_abs_gap": 0.0 if config.mip_gap == 0 else 1e-6,
    }
    if config.time_limit is not None:
        options["time_limit"] = float(config.time_limit)
    for key, value in options.items():
        check_status(h.setOptionValue(key, value), f"setOptionValue({key})")
    for key, value in config.options.items():
        if h.setOptionValue(key, value) != highspy.HighsStatus.kOk:
            raise ValueError(f"HiGHS rejected option {key}={value!r}")

    A, row_lower, row_upper = form.rows()
    integer = form.integer if form.is_mip else None
    check_status(h.passModel(highs_lp(np.zeros(form.num_vars), form.lower, form.upper, A,
                                      row_lower, row_upper, integer)), "passModel")
    return h


#: How pooled cuts enter a solve: "initial" (all added as rows before the first
#: solve) or "lazy" (added only when the LP optimum violates them, before the
#: separator is asked); measured in docs/problems.md.
CUT_POOL_MODE = "lazy"


def _violated(cuts, x: np.ndarray, tol: float = 1e-6) -> list:
    return [cut for cut in cuts
            if not cut.lower - tol <= float(cut.value @ x[cut.index]) <= cut.upper + tol]


class CutPool:
    """A bounded pool of the cuts that were binding at recent optima.

    Only for separators whose cuts hold for every cost vector (subtour cuts
    depend on n alone), so seeding a solve with them keeps it exact: the
    separation loop still runs until the candidate violates nothing. A cut
    enters or is refreshed when it is tight at a solve's optimum; the least
    recently tight ones leave first once ``size`` is reached.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._cuts: dict[bytes, object] = {}

    def __len__(self) -> int:
        return len(self._cuts)

    def cuts(self) -> list:
        return list(self._cuts.values())

    def update(self, cuts, x: np.ndarray, tol: float = 1e-6) -> None:
        for cut in cuts:
            activity = float(cut.value @ x[cut.index])
            if abs(activity - cut.lower) <= tol or abs(activity - cut.upper) <= tol:
                key = cut.index.tobytes()
                self._cuts.pop(key, None)
                self._cuts[key] = cut  # most recently tight last
        while len(self._cuts) > self.size:
            del self._cuts[next(iter(self._cuts))]


class HighsKernel(RowKernel):
    """One kept HiGHS model; ``__call__`` solves a batch of minimisation costs."""

    def __init__(self, form: CanonicalForm, config: BackendConfig) -> None:
        self._status = highspy.HighsModelStatus
        self.form = form
        self.model = _build_model(form, config)
        self._columns = np.arange(form.num_outputs, dtype=np.int32)
        self._base_rows = self.model.getNumRow()
        #: Cuts valid for every cost (subtour cuts depend only on n), recently
        #: binding, seeded into each solve (see :class:`CutPool`).
        self.cut_pool = (CutPool(form.separator.pool_size)
                         if getattr(form.separator, "pool_size", 0) else None)

    def solve_one(self, cost: np.ndarray) -> np.ndarray:
        check_status(self.model.changeColsCost(len(self._columns), self._columns, cost),
                     "changeColsCost")
        if self.form.separator is None:
            return self._run()
        return self._run_with_cuts(self.form.separator)

    def _add_cuts(self, cuts) -> None:
        for cut in cuts:
            check_status(self.model.addRow(cut.lower, cut.upper, len(cut.index),
                                           cut.index.astype(np.int32),
                                           cut.value.astype(np.float64)), "addRow")

    def _run_with_cuts(self, separator) -> np.ndarray:
        h = self.model
        pool = self.cut_pool
        try:
            seeded = pool.cuts() if pool is not None and CUT_POOL_MODE == "initial" else []
            self._add_cuts(seeded)
            found, x = self._relaxation_cuts(separator)
            if x is None or not self._integral(x):
                x = self._run()  # the MIP; an integral LP optimum is already its optimum
            while cuts := separator(x):
                self._add_cuts(cuts)
                found += cuts
                x = self._run()
            if pool is not None:
                pool.update([*seeded, *found], x)
            return x
        finally:
            # Every cut ever found, kept as rows, made later solves 15x slower:
            # drop them; only the pool's few binding ones are seeded next time.
            extra = h.getNumRow() - self._base_rows
            if extra:
                check_status(h.deleteRows(extra, np.arange(
                    self._base_rows, self._base_rows + extra, dtype=np.int32)), "deleteRows")

    def _integral(self, x: np.ndarray, tol: float = 1e-9) -> bool:
        values = x[self.form.integer]
        return bool(np.all(np.abs(values - np.round(values)) <= tol))

    def _relaxation_cuts(self, separator) -> tuple[list, np.ndarray | None]:
        """Cuts found on the LP relaxation first (``separator.fractional``), where a
        round costs an LP solve instead of a MIP solve; they stay as rows for the MIP.
        Returns the cuts and the last LP optimum (None without an LP phase)."""
        fractional = getattr(separator, "fractional", None)
        if fractional is None or not self.form.is_mip:
            return [], None
        h = self.model
        integer = np.flatnonzero(self.form.integer).astype(np.int32)
        kind = np.uint8(1)  # HighsVarType.kInteger
        check_status(h.changeColsIntegrality(len(integer), integer,
                                             np.zeros(len(integer), np.uint8)),
                     "changeColsIntegrality")
        found = []
        lazy = self.cut_pool.cuts() if self.cut_pool is not None and (
            CUT_POOL_MODE == "lazy") else []
        try:
            x = self._run()
            while cuts := (_violated(lazy, x) or fractional(x)):
                self._add_cuts(cuts)
                found += cuts
                x = self._run(warm=True)
        finally:
            check_status(h.changeColsIntegrality(len(integer), integer,
                                                 np.full(len(integer), kind)),
                         "changeColsIntegrality")
        return found, x

    def _run(self, warm: bool = False) -> np.ndarray:
        h = self.model
        if not warm:  # a warm start only pays within a cut loop (same costs)
            check_status(h.clearSolver(), "clearSolver")
        run_highs(h)
        status = h.getModelStatus()
        return settle(
            highs_outcome(status), "HiGHS", lambda: np.asarray(h.getSolution().col_value),
            has_solution=h.getInfo().primal_solution_status == 2,  # kSolutionStatusFeasible
            status=h.modelStatusToString(status), is_infeasible=self._infeasible,
        )

    def _infeasible(self) -> bool:
        """Tell infeasible from unbounded by solving with zero costs."""
        h = self.model
        saved = np.asarray(h.getLp().col_cost_)
        columns = np.arange(len(saved), dtype=np.int32)
        check_status(h.changeColsCost(len(saved), columns, np.zeros(len(saved))),
                     "changeColsCost")
        check_status(h.clearSolver(), "clearSolver")
        run_highs(h)
        infeasible = h.getModelStatus() != self._status.kOptimal
        check_status(h.changeColsCost(len(saved), columns, saved), "changeColsCost")
        return infeasible


#: HiGHS is the TSP default up to this many nodes: measured faster than SCIP
#: at n = 10, 20 and 50 and 5x slower at n = 100, where the MIP re-solves
#: dominate (docs/problems.md); the crossover in between is not measured.
TSP_MAX_NODES_FIRST = 60


def highs_outcome(status) -> Outcome:
    """HiGHS's model status as an :class:`Outcome`."""
    S = highspy.HighsModelStatus
    return {
        S.kOptimal: Outcome.OPTIMAL,
        S.kInfeasible: Outcome.INFEASIBLE,
        S.kUnbounded: Outcome.UNBOUNDED,
        S.kUnboundedOrInfeasible: Outcome.INFEASIBLE_OR_UNBOUNDED,
        S.kTimeLimit: Outcome.TIME_LIMIT,
        S.kInterrupt: Outcome.INTERRUPTED,
    }.get(status, Outcome.STOPPED)


@register_backend
class HighsBackend(Backend):
    """HiGHS (highspy): any linear or mixed-integer program, with lazy cuts."""

    name: ClassVar[str] = "highs"
    requires: ClassVar[tuple[str, ...]] = ("highspy",)
    capabilities: ClassVar[Capability] = Capability.LP | Capability.MIP | Capability.LAZY_CUTS

    @classmethod
    def rank(cls, spec: Spec) -> int:
        """First for LPs; after SCIP for MIPs, where HiGHS's per-solve setup dominates
        small problems (measured: 10 ms against SCIP's 0.44 ms on an 8-variable
        selection ILP, examples/custom_ilp.py). Ahead of SCIP for TSP up to
        ``TSP_MAX_NODES_FIRST`` nodes, where the warm-started LP cut rounds beat
        SCIP's branch and cut (docs/problems.md, TSP table)."""
        if spec.kind == "tsp" and spec.num_nodes <= TSP_MAX_NODES_FIRST:
            return Tier.MIP_SOLVER - 1
        return Tier.MIP_SOLVER_SLOW if canonical_form(spec).is_mip else Tier.LP_SOLVER

    def compile(self, spec: Spec, config: BackendConfig) -> HighsKernel:
        return HighsKernel(canonical_form(spec, lazy=True), config)
