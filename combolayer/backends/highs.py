"""HiGHS through highspy: LPs and MIPs from the canonical form.

The model is passed once; each solve changes only the column costs, clears
the solver state and runs again with presolve off: when every cost changes,
reusing the previous basis is slower (benchmarks/backends.py, kept models).

TSP has a kernel of its own, `HighsTspKernel` (cut rounds on the LP
of the edge formulation, then the MIP only when the LP stays fractional).

Process-global HiGHS state (the banner, the thread scheduler) is handled in
`combolayer.backends.highs_runtime`, whose names are re-exported here.
"""

from __future__ import annotations

from typing import ClassVar

import highspy
import numpy as np
import scipy.sparse as sp

from ..errors import InputError
from ..problems.tsp import (
    TSP,
    guided_tour,
    iterated_local_search,
    subtours,
    violated_blossoms,
    violated_subtours,
)
from ..problems.tsp_edges import TSPEdges, edge_pairs, edges_to_matrix
from ..specs.base import Spec
from ..specs.canonical import CanonicalForm, canonical_form
from .base import Backend, Capability, Tier
from .config import BackendConfig
from .highs_runtime import check_status, new_highs, run_highs
from .outcome import Outcome, Solved, settle
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
        # MIPs re-solved with lazy cuts (set by benchmarks/tsp_backends.py).
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
            raise InputError(f"HiGHS rejected option {key}={value!r}")

    A, row_lower, row_upper = form.rows()
    integer = form.integer if form.is_mip else None
    check_status(h.passModel(highs_lp(np.zeros(form.num_vars), form.lower, form.upper, A,
                                      row_lower, row_upper, integer)), "passModel")
    return h


def _solve(h, warm: bool = False, is_infeasible=None) -> Solved:
    """Solve, and return the column values with their status or raise as `settle` says. ``warm``
    keeps the solver state (a basis, a MIP start) from before."""
    if not warm:
        check_status(h.clearSolver(), "clearSolver")
    run_highs(h)
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kUnknown:
        # HiGHS's simplex can stop at 'Unknown' from state that clearSolver keeps (a
        # ranking LP, costs 1e13 and 1e-4, after a few solves of others), where the same
        # model passed afresh solves: the answer depends on the costs alone
        check_status(h.passModel(h.getLp()), "passModel")
        run_highs(h)
        status = h.getModelStatus()
    return settle(
        highs_outcome(status), "HiGHS", lambda: np.asarray(h.getSolution().col_value),
        has_solution=h.getInfo().primal_solution_status == 2,  # kSolutionStatusFeasible
        status=h.modelStatusToString(status), is_infeasible=is_infeasible,
    )


def _delete_rows_from(h, first: int) -> None:
    """Delete the model's rows from row ``first`` on."""
    extra = h.getNumRow() - first
    if extra:
        check_status(h.deleteRows(extra, np.arange(first, first + extra, dtype=np.int32)),
                     "deleteRows")


def _add_rows(h, rows: list[tuple[np.ndarray, np.ndarray, float, float]]) -> None:
    """Add ``(index, value, lower, upper)`` rows in one call."""
    if not rows:
        return
    index = np.concatenate([row[0] for row in rows]).astype(np.int32)
    starts = np.cumsum([0] + [len(row[0]) for row in rows[:-1]]).astype(np.int32)
    check_status(h.addRows(len(rows), np.array([row[2] for row in rows], dtype=np.float64),
                           np.array([row[3] for row in rows], dtype=np.float64), len(index),
                           starts, index,
                           np.concatenate([row[1] for row in rows]).astype(np.float64)),
                 "addRows")


class HighsKernel(RowKernel):
    """One kept HiGHS model; ``__call__`` solves a batch of minimisation costs."""

    feasibility_option = "mip_feasibility_tolerance"

    def __init__(self, form: CanonicalForm, config: BackendConfig) -> None:
        self.form = form
        self.model = _build_model(form, config)
        self._columns = np.arange(form.num_outputs, dtype=np.int32)
        # a full-width cost (a known cost, or the auxiliaries asked for) sets every column
        self._all_columns = np.arange(form.num_vars, dtype=np.int32)
        self._base_rows = self._fixed_rows = self.model.getNumRow()
        #: The form being solved: ``form``, or with per-call rows in ``form.for_rows``
        #: (integer columns branched on, the row separator's cuts).
        self._active = form

    #: Per-call rows are added to the kept model, solved, and deleted again; while they
    #: are in, the kept model solves ``form.for_rows`` (`_solve_form`).
    takes_rows = True

    def _solve_form(self, form: CanonicalForm) -> None:
        """Make the kept model solve ``form`` (``self.form`` or its `for_rows`), which
        differ at most in the integrality of the integer columns and in the separator."""
        if form is self._active:
            return
        if form.is_mip != self._active.is_mip:
            columns = np.flatnonzero(form.integer).astype(np.int32)
            kind = 1 if form.is_mip else 0  # kInteger, kContinuous
            check_status(self.model.changeColsIntegrality(
                len(columns), columns, np.full(len(columns), kind, dtype=np.uint8)),
                "changeColsIntegrality")
        self._active = form

    def _set_rows(self, A: np.ndarray, b: np.ndarray) -> None:
        self._delete_rows()
        self._solve_form(self.form.for_rows)
        rows = sp.csr_matrix(A[:, : self.form.num_vars])
        m = rows.shape[0]
        check_status(self.model.addRows(
            m, np.full(m, -highspy.kHighsInf), np.asarray(b, dtype=np.float64), rows.nnz,
            rows.indptr[:-1].astype(np.int32), rows.indices.astype(np.int32),
            rows.data.astype(np.float64)), "addRows")
        self._base_rows = self._fixed_rows + m  # lazy cuts are dropped above them

    def _clear_rows(self) -> None:
        self._delete_rows()
        self._solve_form(self.form)

    def _delete_rows(self) -> None:
        _delete_rows_from(self.model, self._fixed_rows)
        self._base_rows = self._fixed_rows

    #: On: a start (``setSolution``) saves time on PyEPO's knapsacks and on the
    #: training loops' own solves (set by benchmarks/warm_start.py).
    takes_start = True

    def solve_one(self, cost: np.ndarray, start: np.ndarray | None = None) -> Solved:
        if len(cost) < len(self._all_columns):
            # every column set: a full-width call before this one (a known cost on the
            # auxiliaries) left its costs in the kept model
            cost = np.concatenate([cost, np.zeros(len(self._all_columns) - len(cost))])
        check_status(self.model.changeColsCost(len(self._all_columns), self._all_columns, cost),
                     "changeColsCost")
        if start is not None and self._active.is_mip:
            return self._run_from(start)
        if self._active.separator is None:
            return self._run()
        return self._run_with_cuts(self._active.separator)

    def _run_from(self, start: np.ndarray) -> Solved:
        """Solve from a MIP start on the outputs (``setSolution`` with the output
        columns only; HiGHS completes the rest or drops an infeasible start)."""
        h = self.model
        check_status(h.clearSolver(), "clearSolver")
        check_status(h.setSolution(len(self._columns), self._columns,
                                   np.asarray(start, dtype=np.float64)), "setSolution")
        separator = self._active.separator
        solved = _solve(h, warm=True, is_infeasible=self._infeasible)
        if separator is None or not separator(solved.values):
            return solved
        return solved.then(self._run_with_cuts(separator))  # the start's cuts: from scratch

    def _run_with_cuts(self, separator) -> Solved:
        """Re-solve with the separator's cuts until it accepts the optimum; the cuts
        are dropped after the instance (kept, they made later solves slower)."""
        try:
            solved = self._run()
            while cuts := separator(solved.values):
                _add_rows(self.model,
                          [(cut.index, cut.value, cut.lower, cut.upper) for cut in cuts])
                solved = solved.then(self._run())
            return solved
        finally:
            _delete_rows_from(self.model, self._base_rows)

    def _run(self) -> Solved:
        return _solve(self.model, is_infeasible=self._infeasible)

    def _infeasible(self) -> bool:
        """Tell infeasible from unbounded by solving with zero costs."""
        h = self.model
        saved = np.asarray(h.getLp().col_cost_)
        columns = np.arange(len(saved), dtype=np.int32)
        check_status(h.changeColsCost(len(saved), columns, np.zeros(len(saved))),
                     "changeColsCost")
        check_status(h.clearSolver(), "clearSolver")
        run_highs(h)
        infeasible = h.getModelStatus() != highspy.HighsModelStatus.kOptimal
        check_status(h.changeColsCost(len(saved), columns, saved), "changeColsCost")
        return infeasible


class HighsTspKernel(RowKernel):
    """TSP on one kept HiGHS model of the edge formulation: a column per edge
    (cost ``w_ij + w_ji``, bounds 0..1), a degree-2 row per node. Per instance:

    1. LP rounds, warm-started from the previous basis: add every violated
       subtour inequality (exact separation, `violated_subtours`), and once
       none is violated the blossoms the odd-component heuristic finds
       (`violated_blossoms`), until nothing more is found. An integral
       optimum is then a tour, and optimal: no MIP.
    2. Otherwise a tour guided by the LP (`guided_tour`) is an upper bound;
       an edge whose reduced cost exceeds the gap to it cannot be in a cheaper
       tour and is fixed (to 0, or to 1 for reduced costs below minus the gap),
       and a gap of zero proves the tour optimal.
    3. The MIP, with presolve and that tour as its start, re-solved with the
       subtour inequalities of its optimum's components until it is one tour.

    Exact: every added row holds for every tour, and the fixings keep every tour
    cheaper than the upper bound. The rows are dropped before the next instance.
    """

    def __init__(self, spec: TSP, config: BackendConfig) -> None:
        n = spec.num_nodes
        self.form = canonical_form(spec)  # the (n, n) outputs: RowKernel rounds them
        self.num_nodes = n
        self._iu, self._ju = edge_pairs(n)
        m = len(self._iu)
        self._edge = np.zeros((n, n), dtype=np.int32)
        self._edge[self._iu, self._ju] = self._edge[self._ju, self._iu] = np.arange(m)
        self._columns = np.arange(m, dtype=np.int32)
        edges = CanonicalForm(cost_shape=(m,), A_ub=sp.csr_matrix((0, m)), b_ub=np.zeros(0),
                              A_eq=TSPEdges(num_nodes=n).degree_rows(m), b_eq=np.full(n, 2.0),
                              lower=np.zeros(m), upper=np.ones(m), integer=np.ones(m, dtype=bool))
        self.model = _build_model(edges, config)
        #: Presolve off for the LP rounds and on for the MIP, unless the options set it.
        self._switch_presolve = "presolve" not in config.options
        for key, value in _TSP_MIP_OPTIONS.items():
            if key not in config.options:
                check_status(self.model.setOptionValue(key, value), f"setOptionValue({key})")

    def solve_one(self, cost: np.ndarray) -> Solved:
        n = self.num_nodes
        w = cost.reshape(n, n)
        edge_cost = w[self._iu, self._ju] + w[self._ju, self._iu]
        self._reset(edge_cost)
        lp = self._lp_rounds()
        x = lp.values
        if np.all(np.minimum(x, 1.0 - x) <= 1e-9):
            return Solved(self._adjacency(x), lp.statuses)
        tour = self._edge_vector(guided_tour(self._values(x), self._values(edge_cost)))
        if TOUR_KICKS:
            tour = self._shorter_tour(tour, edge_cost)
        if self._fix_by_reduced_costs(x, float(edge_cost @ tour)):
            return Solved(self._adjacency(tour), lp.statuses)
        solved = lp.then(self._mip(tour, edge_cost))
        return Solved(self._adjacency(solved.values), solved.statuses)

    def _reset(self, edge_cost: np.ndarray) -> None:
        """The degree rows only, every edge free and continuous, the new costs."""
        h = self.model
        m = len(self._columns)
        _delete_rows_from(h, self.num_nodes)
        check_status(h.changeColsBounds(m, self._columns, np.zeros(m), np.ones(m)),
                     "changeColsBounds")
        check_status(h.changeColsIntegrality(m, self._columns, np.zeros(m, dtype=np.uint8)),
                     "changeColsIntegrality")
        check_status(h.changeColsCost(m, self._columns, edge_cost), "changeColsCost")

    def _values(self, x: np.ndarray) -> np.ndarray:
        """Edge values as a symmetric ``(n, n)`` matrix."""
        return edges_to_matrix(x, self.num_nodes)

    def _adjacency(self, x: np.ndarray) -> np.ndarray:
        return self._values(np.round(x)).ravel()

    def _inside(self, nodes: np.ndarray) -> np.ndarray:
        """The edges with both ends in ``nodes`` (a mask)."""
        index = np.flatnonzero(nodes)
        return self._edge[np.ix_(index, index)][np.triu_indices(len(index), k=1)]

    def _subtour_row(self, inside: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float]:
        """``x(E(S)) <= |S| - 1`` on the smaller side S: fewer nonzeros than the cut-set
        form ``x(delta(S)) >= 2``, which it equals under the degree rows."""
        side = inside if 2 * inside.sum() <= self.num_nodes else ~inside
        index = self._inside(side)
        return index, np.ones(len(index)), -np.inf, float(side.sum() - 1)

    def _blossom_row(self, handle: np.ndarray, teeth: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, float, float]:
        index = np.concatenate([self._inside(handle), self._edge[teeth[:, 0], teeth[:, 1]]])
        return index, np.ones(len(index)), -np.inf, float(handle.sum() + (len(teeth) - 1) // 2)

    def _lp_rounds(self) -> Solved:
        h = self.model
        solved = _solve(h)
        while True:
            values = self._values(solved.values)
            rows = [self._subtour_row(inside) for inside in violated_subtours(values)] or [
                self._blossom_row(handle, teeth) for handle, teeth in violated_blossoms(values)]
            if not rows:
                return solved
            _add_rows(h, rows)
            solved = solved.then(_solve(h, warm=True))

    def _edge_vector(self, order: np.ndarray) -> np.ndarray:
        tour = np.zeros(len(self._columns))
        tour[self._edge[order, np.roll(order, -1)]] = 1.0
        return tour

    def _shorter_tour(self, tour: np.ndarray, edge_cost: np.ndarray) -> np.ndarray:
        """The tour after `iterated_local_search`, which stops once it reaches the
        LP bound (then the tour is optimal)."""
        lower = self.model.getInfo().objective_function_value
        if edge_cost @ tour <= lower + TOUR_KICK_GAP * max(1.0, abs(lower)):
            return tour
        values = self._values(tour)
        order = [0, int(np.flatnonzero(values[0])[0])]
        while len(order) < self.num_nodes:
            a, b = np.flatnonzero(values[order[-1]])
            order.append(int(b if a == order[-2] else a))
        better = iterated_local_search(np.array(order), self._values(edge_cost), TOUR_KICKS,
                                       stop_at=lower)
        return self._edge_vector(better)

    def _fix_by_reduced_costs(self, x: np.ndarray, upper: float) -> bool:
        """Fix the edges that no tour cheaper than ``upper`` can change, from the last LP
        optimum: its value plus a reduced cost bounds every tour that moves that edge
        off its bound. True when the LP value reaches ``upper`` (that tour is optimal)."""
        h = self.model
        scale = max(1.0, abs(upper))
        gap = upper - h.getInfo().objective_function_value
        if gap <= 1e-9 * scale:
            return True
        reduced = np.asarray(h.getSolution().col_dual)
        margin = gap + 1e-6 * scale  # HiGHS's dual feasibility tolerance is 1e-7
        for fixed, value in (((x <= 1e-9) & (reduced > margin), 0.0),
                             ((x >= 1.0 - 1e-9) & (-reduced > margin), 1.0)):
            count = int(fixed.sum())
            check_status(h.changeColsBounds(count, self._columns[fixed], np.full(count, value),
                                            np.full(count, value)), "changeColsBounds")
        return False

    def _mip(self, tour: np.ndarray, edge_cost: np.ndarray) -> Solved:
        h = self.model
        m = len(self._columns)
        check_status(h.changeColsIntegrality(m, self._columns, np.ones(m, dtype=np.uint8)),
                     "changeColsIntegrality")
        # Presolve pays here (it drops the fixed edges), not on the LP rounds.
        self._set_presolve("on")
        start = highspy.HighsSolution()
        start.col_value = tour
        start.value_valid = True
        # The subtours of every integer solution HiGHS finds (its heuristics find many,
        # each a set of subtour inequalities the next round needs): one round adds them
        # all, instead of only those of the optimum.
        found: dict[bytes, np.ndarray] = {}

        def collect(event) -> None:
            x = np.asarray(event.data_out.mip_solution)[:m]
            for inside in subtours(self._values(x) > 0.5):
                found.setdefault(inside.tobytes(), inside)

        h.cbMipSolution.subscribe(collect)
        rounds = Solved(None)  # the statuses of the rounds so far: none yet
        try:
            while True:
                check_status(h.clearSolver(), "clearSolver")
                check_status(h.setSolution(start), "setSolution")  # stays feasible: a tour
                solved = _solve(h, warm=True)
                reported = h.getInfo().objective_function_value
                if abs(edge_cost @ solved.values - reported) > 1e-9 * max(1.0, abs(reported)):
                    # HiGHS 1.16 can map the start into the presolved model with
                    # another objective value, prove that value optimal and return
                    # the start itself (seen: 12.066823 returned as 12.066630):
                    # solve again without the start.
                    solved = _solve(h)
                rounds = rounds.then(solved)
                parts = subtours(self._values(solved.values) > 0.5)
                if not parts:
                    return rounds
                for inside in parts:
                    found.setdefault(inside.tobytes(), inside)
                _add_rows(h, [self._subtour_row(inside) for inside in found.values()])
                found.clear()
        finally:
            h.cbMipSolution.unsubscribe(collect)
            self._set_presolve("off")

    def _set_presolve(self, value: str) -> None:
        if self._switch_presolve:
            check_status(self.model.setOptionValue("presolve", value),
                         "setOptionValue(presolve)")


#: HiGHS options of the TSP kernel's MIP rounds, where ``BackendConfig.options`` does
#: not set them. Restarts after root fixings cost more than they save, and the primal
#: heuristics mostly find tours with subtours, which the next round cuts off anyway
#: (set by benchmarks/tsp_backends.py, same answers either way).
_TSP_MIP_OPTIONS = {
    "mip_allow_restart": False,
    "mip_heuristic_run_feasibility_jump": False,
    "mip_heuristic_run_rins": False,
    "mip_heuristic_run_rens": False,
    "mip_heuristic_run_root_reduced_cost": False,
}

#: Double-bridge kicks of the iterated local search that improves the upper-bound tour
#: (paid only by instances whose LP stays fractional). The tour decides how many edges
#: reduced costs fix, so a better tour saves more than the kicks cost in the mean, at
#: some cost to the median (set by benchmarks/tsp_backends.py against Gurobi).
TOUR_KICKS = 32
#: The tour is improved only when it is more than this (relative) above the LP bound:
#: below it, fixing is strong already and the kicks cost more than they save (set by
#: benchmarks/tsp_backends.py).
TOUR_KICK_GAP = 0.01

#: HiGHS's TSP kernel is the TSP default up to this many nodes, the largest size at
#: which benchmarks/tsp_backends.py measured it faster than SCIP; larger sizes are
#: not measured, and SCIP's branch and cut stays first there.
TSP_MAX_NODES_FIRST = 150


def highs_outcome(status) -> Outcome:
    """HiGHS's model status as an `Outcome`. The limits a user sets in ``options``
    (``mip_max_improving_sols``, ``mip_max_nodes`` and ``mip_max_leaves`` stop as a
    solution limit; ``simplex_iteration_limit``, ``objective_bound``, ...) stop like the
    time limit, named by the status (`limit_name`), as on Gurobi and SCIP."""
    S = highspy.HighsModelStatus
    return {
        S.kOptimal: Outcome.OPTIMAL,
        S.kInfeasible: Outcome.INFEASIBLE,
        S.kUnbounded: Outcome.UNBOUNDED,
        S.kUnboundedOrInfeasible: Outcome.INFEASIBLE_OR_UNBOUNDED,
        S.kTimeLimit: Outcome.TIME_LIMIT,
        S.kSolutionLimit: Outcome.LIMIT,
        S.kIterationLimit: Outcome.LIMIT,
        S.kMemoryLimit: Outcome.LIMIT,
        S.kObjectiveBound: Outcome.LIMIT,
        S.kObjectiveTarget: Outcome.LIMIT,
        S.kInterrupt: Outcome.INTERRUPTED,
    }.get(status, Outcome.STOPPED)


@register_backend
class HighsBackend(Backend):
    """HiGHS (highspy): any linear or mixed-integer program, with lazy cuts."""

    name: ClassVar[str] = "highs"
    takes_options: ClassVar[bool] = True
    stops_at_limits: ClassVar[bool] = True
    requires: ClassVar[tuple[str, ...]] = ("highspy",)
    capabilities: ClassVar[Capability] = (Capability.LP | Capability.MIP | Capability.LAZY_CUTS
                                          | Capability.ROWS)

    @classmethod
    def rank(cls, spec: Spec) -> int:
        """First for LPs; after SCIP for MIPs, where HiGHS's per-solve setup dominates
        small problems (per-solve latency measured by benchmarks/backends.py). Ahead
        of SCIP for TSP up to ``TSP_MAX_NODES_FIRST`` nodes, where `HighsTspKernel` beats SCIP's
        branch and cut (docs/problems.md, TSP table)."""
        if spec.kind == "tsp" and spec.num_nodes <= TSP_MAX_NODES_FIRST:
            return Tier.TSP_CUT_LOOP
        return Tier.MIP_SOLVER_SLOW if spec.is_mip else Tier.LP_SOLVER

    @classmethod
    def row_rank(cls, spec: Spec) -> int:
        """Behind SCIP whenever the problem has integer variables: per-call rows make
        it a MIP, and HiGHS, without lazy cuts inside branch and bound, re-solves the
        MIP per round of a path's cycle cuts (tests/test_rows_named_problems.py)."""
        return (Tier.MIP_SOLVER_SLOW if spec.has_integers
                else Tier.LP_SOLVER)

    def compile(self, spec: Spec, config: BackendConfig) -> HighsKernel | HighsTspKernel:
        if isinstance(spec, TSP):
            return HighsTspKernel(spec, config)
        return HighsKernel(canonical_form(spec, lazy=True), config)
