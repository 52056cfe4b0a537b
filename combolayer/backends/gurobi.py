"""Gurobi through gurobipy: LPs and MIPs from the canonical form, TSP with lazy cuts.

The model is built once per compile with the matrix API (``addMVar`` and
``addMConstr`` on the canonical form's sparse matrices); a solve sets the
output columns' ``Obj`` and optimizes again. Each kernel has its own
``gurobipy.Env``, started empty with ``OutputFlag`` set first, so no licence
banner is printed.

A separator (``CanonicalForm.separator``) becomes lazy constraints: with
``LazyConstraints=1`` a callback reads every new incumbent (``cbGetSolution``)
and adds the cuts it violates (``cbLazy``). TSP has a kernel of its own on the
edge formulation, ``n (n - 1) / 2`` binary columns and a degree row per node,
with subtour eliminations ``x(E(S)) <= |S| - 1`` added lazily: half the
columns of the adjacency form, so TSP-60 (1770 columns) fits the size-limited
licence that ``pip install gurobipy`` brings.

Licences: a size-limited licence (2000 variables and 2000 linear
constraints; lazy rows added in a callback do not count) or an expired one
makes Gurobi raise ``GurobiError`` 10010 or 10009 at ``optimize``. The licence
is probed once per process (`licence`); `GurobiBackend.accepts`
compares the model's size against it, so ``backend="auto"`` moves on to the
next backend (with one log line that says why) and ``backend="gurobi"`` raises
`combolayer.BackendUnavailable` with Gurobi's reason.

Config: ``time_limit`` -> ``TimeLimit``, ``threads`` -> ``Threads`` (0 is
Gurobi's automatic choice), ``mip_gap`` -> ``MIPGap`` (and ``MIPGapAbs=0``
when it is 0, exact), ``verbose`` -> ``OutputFlag``; ``options`` go to
``Model.setParam`` verbatim, e.g. ``{"SolutionLimit": 1}``. A solve stopped by
any limit returns its best solution with a ``RuntimeWarning``, or raises
`combolayer.SolverError` without one.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from ..errors import BackendUnavailable, InputError
from ..problems.tsp import TSP, subtours
from ..problems.tsp_edges import EdgeSubtourSeparator, TSPEdges, edge_pairs, edges_to_matrix
from ..specs.base import Spec
from ..specs.canonical import CanonicalForm, canonical_form
from .base import Backend, Capability, Tier
from .config import BackendConfig
from .outcome import Outcome, Solved, settle
from .registry import register_backend
from .solver import RowKernel

logger = logging.getLogger(__name__)

#: GurobiError codes that mean the licence does not cover the model.
LICENCE_ERRORS = {10009: "no valid licence", 10010: "the model is too large for the licence"}
#: The size limits of a size-limited licence (the one ``pip install gurobipy`` brings).
SIZE_LIMITED = 2000
#: Set this environment variable to 0 to keep ``backend="auto"`` off Gurobi.
AUTO_ENV = "COMBOLAYER_AUTO_GUROBI"


@dataclass(frozen=True)
class Licence:
    """What this process's Gurobi licence allows: ``reason`` when it allows nothing,
    else the largest model (``None``: no size limit)."""

    max_vars: int | None = None
    max_rows: int | None = None
    reason: str | None = None
    #: Gurobi's own words on the limit (the probe's error message).
    message: str = ""

    def refuses(self, num_vars: int, num_rows: int) -> str | None:
        """Why a model of this size cannot be solved, or None."""
        if self.reason is not None:
            return self.reason
        if self.max_vars is not None and (num_vars > self.max_vars or num_rows > self.max_rows):
            return (f"the Gurobi licence is size-limited to {self.max_vars} variables and "
                    f"{self.max_rows} constraints, and this model has {num_vars} variables "
                    f"and {num_rows} constraints (Gurobi: {self.message!r}; bring a full "
                    "licence for larger models)")
        return None


def _error_reason(error) -> str:
    return f"Gurobi error {error.errno} ({LICENCE_ERRORS.get(error.errno, 'error')}): {error}"


@functools.lru_cache(maxsize=1)
def licence() -> Licence:
    """This process's licence, probed once (it costs a solve): an environment is started,
    then a model one variable above the size limit is optimized."""
    try:
        import gurobipy as gp
    except Exception as error:  # installed but broken: "auto" must still work
        return Licence(reason=f"gurobipy failed to import: {type(error).__name__}: {error}")
    try:
        env = _new_env(verbose=False)
        model = gp.Model(env=env)
        model.addMVar(SIZE_LIMITED + 1)
        try:
            model.optimize()
        finally:
            model.dispose()
            env.dispose()
    except gp.GurobiError as error:
        if error.errno == 10010:
            return Licence(max_vars=SIZE_LIMITED, max_rows=SIZE_LIMITED, message=str(error))
        return Licence(reason=_error_reason(error))
    return Licence()


def _new_env(verbose: bool):
    """A started environment that prints nothing unless ``verbose``."""
    import gurobipy as gp

    env = gp.Env(empty=True)
    env.setParam("OutputFlag", int(verbose))
    env.start()
    return env


def _new_model(config: BackendConfig):
    """An empty model with the config's parameters."""
    import gurobipy as gp

    try:
        env = _new_env(config.verbose)
    except gp.GurobiError as error:
        raise BackendUnavailable(f"backend 'gurobi': {_error_reason(error)}") from None
    model = gp.Model(env=env)
    model.setParam("Threads", int(config.threads))
    model.setParam("MIPGap", float(config.mip_gap))
    if config.mip_gap == 0:
        model.setParam("MIPGapAbs", 0.0)
    if config.time_limit is not None:
        model.setParam("TimeLimit", float(config.time_limit))
    for key, value in config.options.items():
        try:
            model.setParam(key, value)
        except (gp.GurobiError, TypeError, ValueError) as error:
            raise InputError(f"Gurobi rejected option {key}={value!r}: {error}") from None
    return model


def _bounds(values: np.ndarray) -> np.ndarray:
    from gurobipy import GRB

    return np.clip(np.asarray(values, dtype=np.float64), -GRB.INFINITY, GRB.INFINITY)


@functools.lru_cache(maxsize=1)
def _status_table() -> dict[int, tuple[Outcome, str]]:
    """Gurobi's status codes -> (`Outcome`, Gurobi's name for it), built once: the hot
    path of a solve reads one entry."""
    from gurobipy import GRB

    outcomes = {"OPTIMAL": Outcome.OPTIMAL, "INFEASIBLE": Outcome.INFEASIBLE,
                "UNBOUNDED": Outcome.UNBOUNDED, "INF_OR_UNBD": Outcome.INFEASIBLE_OR_UNBOUNDED,
                "TIME_LIMIT": Outcome.TIME_LIMIT, "INTERRUPTED": Outcome.INTERRUPTED,
                **dict.fromkeys(("SOLUTION_LIMIT", "NODE_LIMIT", "ITERATION_LIMIT", "WORK_LIMIT",
                                 "MEM_LIMIT", "USER_OBJ_LIMIT"), Outcome.LIMIT)}
    # every status this gurobipy names (the rest stop), so the list cannot fall behind
    return {getattr(GRB.Status, name): (outcomes.get(name, Outcome.STOPPED), name)
            for name in dir(GRB.Status) if name.isupper()}


def gurobi_status(status: int) -> tuple[Outcome, str]:
    """Gurobi's status code as an `Outcome`, with Gurobi's name for it. Every limit a
    user can set (time, solutions, nodes, iterations, work, memory, objective) stops
    like the time limit: its best solution with a warning, or an error without one;
    the instance's status and the message name the limit (``"solution limit"``)."""
    return _status_table().get(status) or (Outcome.STOPPED, str(status))


class _GurobiRun:
    """What the two kernels share: optimize with a start, read the status, settle."""

    _started = False  # whether the outputs hold a MIP start from the last call

    model: object
    variables: object  # the MVar of every column
    form: CanonicalForm

    def _optimize(self, callback=None) -> None:
        try:
            self.model.optimize(callback)
        except Exception as error:  # gurobipy.GurobiError: its licence codes say unavailable
            if getattr(error, "errno", None) in LICENCE_ERRORS:
                raise BackendUnavailable(f"backend 'gurobi': {_error_reason(error)}") from None
            raise

    @property
    def solves_mip(self) -> bool:
        """Whether the kept model is solved as a MIP (the TSP kernel's always is)."""
        return True

    def _set_start(self, start: np.ndarray | None) -> None:
        """A MIP start on the outputs (the other columns are left for Gurobi to complete),
        or none, which also clears the previous call's.

        A MIP is reset before each solve (``Model.reset(0)``, which keeps the start):
        Gurobi would start from the previous incumbent, and under ties the optimum it
        returned depended on what the kernel solved before, so a batch split over
        workers (which depends on timing) came back otherwise than serially. That costs
        nothing on a 5 x 5 assignment and 7% on PyEPO's 50 x 2 knapsack. An LP keeps its
        basis: a reset nearly doubled a stream of shortest-path LPs on PyEPO's 5x5 grid
        (90 -> 171 us a solve); under ties the vertex returned may depend on the
        kernel's earlier solves (docs/backends.md).
        """
        if self.solves_mip:
            self.model.reset(0)
        if start is not None:
            self._outputs.Start = np.asarray(start, dtype=np.float64)
            self._started = True
        elif self._started:
            from gurobipy import GRB

            self._outputs.Start = np.full(self._outputs.shape, GRB.UNDEFINED)
            self._started = False

    def _settle(self, callback=None) -> Solved:
        model = self.model
        # getAttr: about half a microsecond less than the .Status and .X sugar, per solve
        outcome, name = gurobi_status(model.getAttr("Status"))
        if outcome is Outcome.OPTIMAL:  # settle's first case, inlined: most solves end here
            return Solved(self.variables.getAttr("X"))
        return settle(outcome, "Gurobi", lambda: np.asarray(self.variables.X),
                      has_solution=model.SolCount > 0, status=name,
                      is_infeasible=lambda: self._infeasible(callback))

    def _infeasible(self, callback) -> bool:
        """Tell infeasible from unbounded by solving with zero costs."""
        from gurobipy import GRB

        saved = np.asarray(self.variables.Obj)
        self.variables.Obj = np.zeros(len(saved))
        try:
            self.model.reset(1)
            self._optimize(callback)
            return self.model.Status == GRB.INFEASIBLE
        finally:
            self.variables.Obj = saved


class GurobiKernel(_GurobiRun, RowKernel):
    """One kept Gurobi model of a canonical form; ``__call__`` solves a batch of
    minimisation costs, each optionally started from ``start`` (``(B, N)`` outputs)."""

    feasibility_option = "FeasibilityTol"

    #: Off: a start measured no faster on PyEPO's knapsack (mean 0.96-1.03x, also on
    #: the training loops' own solves; benchmarks/warm_start.py, docs/measurements/solvers.md).
    #: Set it on a kernel to pass ``start`` through as Gurobi's ``Start`` attribute.
    takes_start = False

    def __init__(self, form: CanonicalForm, config: BackendConfig) -> None:
        from gurobipy import GRB

        self.form = form
        self.model = model = _new_model(config)
        # an integral LP (flows, assignments) is solved as the LP: its vertices are
        # the integer solutions, and Gurobi's MIP machinery costs twice the time
        integer = form.integer if form.is_mip else np.zeros_like(form.integer)
        vtype = np.where(integer, GRB.INTEGER, GRB.CONTINUOUS)
        self.variables = model.addMVar(form.num_vars, lb=_bounds(form.lower),
                                       ub=_bounds(form.upper), vtype=vtype)
        if form.A_ub.shape[0]:
            model.addMConstr(sp.csr_matrix(form.A_ub), self.variables, GRB.LESS_EQUAL,
                             np.asarray(form.b_ub, dtype=np.float64))
        if form.A_eq.shape[0]:
            model.addMConstr(sp.csr_matrix(form.A_eq), self.variables, GRB.EQUAL,
                             np.asarray(form.b_eq, dtype=np.float64))
        self._outputs = self.variables[: form.num_outputs]
        self._callback = None
        self._active = form
        self._callbacks = {}
        self._solve_form(form, built=True)
        model.update()

    #: Per-call rows are added to the kept model (``addMConstr``) and removed again;
    #: while they are in, the kept model solves ``form.for_rows`` (`_solve_form`).
    takes_rows = True
    _row_constraints = None

    def _solve_form(self, form: CanonicalForm, built: bool = False) -> None:
        """Make the kept model solve ``form`` (``self.form`` or its `for_rows`), which
        differ at most in the integrality of the integer columns and in the separator."""
        from gurobipy import GRB

        if form is self._active and not built:
            return
        if form.is_mip != self._active.is_mip:
            # a list: gurobipy refuses a one-entry numpy array of strings
            self.variables.VType = np.where(form.integer & form.is_mip, GRB.INTEGER,
                                            GRB.CONTINUOUS).tolist()
        if form.separator is not None or not built:
            self.model.setParam("LazyConstraints", int(form.separator is not None))
        if form.separator is not None and form not in self._callbacks:
            self._callbacks[form] = _lazy_callback(self.variables, form.separator)
        self._callback = self._callbacks.get(form)
        self._active = form

    @property
    def solves_mip(self) -> bool:
        return self._active.is_mip

    def _set_rows(self, A: np.ndarray, b: np.ndarray) -> None:
        from gurobipy import GRB

        self._remove_rows()
        self._solve_form(self.form.for_rows)
        self._row_constraints = self.model.addMConstr(
            sp.csr_matrix(A[:, : self.form.num_vars]), self.variables, GRB.LESS_EQUAL,
            np.asarray(b, dtype=np.float64))

    def _clear_rows(self) -> None:
        self._remove_rows()
        self._solve_form(self.form)

    def _remove_rows(self) -> None:
        if self._row_constraints is not None:
            self.model.remove(self._row_constraints)
            self._row_constraints = None

    def solve_one(self, cost: np.ndarray, start: np.ndarray | None = None) -> Solved:
        # every column set: a full-width call before this one (a known cost on the
        # auxiliaries) left its costs in the kept model
        if len(cost) < self.form.num_vars:
            cost = np.concatenate([cost, np.zeros(self.form.num_vars - len(cost))])
        self.variables.Obj = cost
        self._set_start(start)
        self._optimize(self._callback)
        return self._settle(self._callback)


def _lazy_callback(variables, separator):
    """A callback adding the separator's cuts on every new incumbent."""
    import gurobipy as gp
    from gurobipy import GRB

    columns = variables.tolist()

    def callback(model, where):
        if where != GRB.Callback.MIPSOL:
            return
        x = np.asarray(model.cbGetSolution(columns))
        for cut in separator(x):
            expr = gp.LinExpr(cut.value.tolist(), [columns[j] for j in cut.index.tolist()])
            if np.isfinite(cut.upper):
                model.cbLazy(expr <= float(cut.upper))
            if np.isfinite(cut.lower):
                model.cbLazy(expr >= float(cut.lower))

    return callback


class GurobiTspKernel(_GurobiRun, RowKernel):
    """TSP on the edge formulation (a binary column per edge ``i < j`` with cost
    ``w_ij + w_ji``, a degree-2 row per node), subtour eliminations
    ``x(E(S)) <= |S| - 1`` added lazily for every component of an incumbent that
    is not one tour. ``start`` is an ``(n, n)`` adjacency matrix (flattened)."""

    takes_start = False  # not measured on TSP; set it on a kernel to pass ``start``

    def __init__(self, spec: TSP, config: BackendConfig) -> None:
        from gurobipy import GRB

        n = spec.num_nodes
        self.form = canonical_form(spec)  # the (n, n) outputs: RowKernel rounds them
        self.num_nodes = n
        self._iu, self._ju = edge_pairs(n)
        m = len(self._iu)
        self.model = model = _new_model(config)
        self.variables = model.addMVar(m, vtype=GRB.BINARY)
        self._outputs = self.variables
        model.addMConstr(TSPEdges(num_nodes=n).degree_rows(m), self.variables, GRB.EQUAL,
                         np.full(n, 2.0))
        model.setParam("LazyConstraints", 1)
        cut = EdgeSubtourSeparator(n).cut

        def separator(x: np.ndarray) -> list:
            # each subtour's smaller side: fewer nonzeros
            return [cut(inside if 2 * inside.sum() <= n else ~inside)
                    for inside in subtours(edges_to_matrix(x, n) > 0.5)]

        self._callback = _lazy_callback(self.variables, separator)
        model.update()

    def solve_one(self, cost: np.ndarray, start: np.ndarray | None = None) -> Solved:
        n = self.num_nodes
        w = cost.reshape(n, n)
        self.variables.Obj = w[self._iu, self._ju] + w[self._ju, self._iu]
        if start is not None:
            start = np.asarray(start, dtype=np.float64).reshape(n, n)[self._iu, self._ju]
        self._set_start(start)
        self._optimize(self._callback)
        solved = self._settle(self._callback)
        return Solved(edges_to_matrix(np.round(solved.values), n).ravel(), solved.statuses)


def model_size(spec: Spec) -> tuple[int, int]:
    """The variables and constraints of the model `GurobiBackend.compile` builds."""
    if isinstance(spec, TSP):
        n = spec.num_nodes
        return n * (n - 1) // 2, n
    form = canonical_form(spec, lazy=True)
    return form.num_vars, form.A_ub.shape[0] + form.A_eq.shape[0]


@register_backend
class GurobiBackend(Backend):
    """Gurobi (gurobipy): any linear or mixed-integer program, with lazy cuts; first
    for MIPs under ``"auto"`` when its licence covers the model."""

    name: ClassVar[str] = "gurobi"
    takes_options: ClassVar[bool] = True
    stops_at_limits: ClassVar[bool] = True
    requires: ClassVar[tuple[str, ...]] = ("gurobipy",)
    capabilities: ClassVar[Capability] = (Capability.LP | Capability.MIP | Capability.LAZY_CUTS
                                          | Capability.ROWS)
    #: ``"auto"`` logs why when it passes over this backend (a licence that does not
    #: cover the model), since a user who installed it expects it to be used.
    announce_fallback: ClassVar[bool] = True

    @classmethod
    def rank(cls, spec: Spec) -> int:
        """Ahead of SCIP on MIPs (the knapsacks of benchmarks/mip_training.py);
        behind HiGHS on LPs and behind HiGHS's TSP kernel where that is first
        (docs/problems.md, TSP table); never automatic when ``COMBOLAYER_AUTO_GUROBI=0``."""
        if os.environ.get(AUTO_ENV, "1").strip().lower() in {"0", "false", "no", "off"}:
            return Tier.LAST
        if isinstance(spec, TSP):
            return Tier.TSP_LICENSED
        return (Tier.MIP_SOLVER_LICENSED if spec.is_mip
                else Tier.LP_SOLVER_LICENSED)

    def accepts(self, spec: Spec) -> str | None:
        return super().accepts(spec) or licence().refuses(*model_size(spec))

    def compile(self, spec: Spec, config: BackendConfig) -> GurobiKernel | GurobiTspKernel:
        if isinstance(spec, TSP):
            return GurobiTspKernel(spec, config)
        return GurobiKernel(canonical_form(spec, lazy=True), config)
