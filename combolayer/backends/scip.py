"""SCIP through pyscipopt: LPs and MIPs from the canonical form, with lazy cuts.

The model is built once. pyscipopt 6.3 has no way to change one objective
coefficient in the original problem, and ``setObjective`` raises once the
problem is transformed, so each solve calls ``freeTransform()``, sets the whole
objective and optimizes again (``optimizeNogil`` so threads run in parallel).

Presolve, primal heuristics and separation are switched off by default where
that is faster (measured: small LPs, knapsacks, matchings, grids), but kept on
for the problem kinds in ``_KEEP_DEFAULTS`` (TSP-50 was slower without them)
and for pure LPs with ``_LARGE_LP`` variables or more. The cheap heuristics of
``_CHEAP_HEURISTICS`` stay on in that fast mode.
``options={"fast": True/False}`` overrides the per-kind default; every other
option goes to ``Model.setParam`` verbatim.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import gc
import weakref
from typing import ClassVar

import numpy as np

from ..errors import InputError
from ..specs.base import Spec
from ..specs.canonical import CanonicalForm, canonical_form
from .base import Backend, Capability, Tier
from .config import BackendConfig
from .outcome import Outcome, Solved, settle
from .registry import register_backend
from .solver import RowKernel

#: Problem kinds on which SCIP's presolve/heuristics/separation pay for
#: themselves (set by benchmarks/tsp_backends.py).
_KEEP_DEFAULTS = frozenset({"tsp"})
#: Pure LPs at least this large also keep them: presolve pays on the 30x30 grid
#: flow LP, not on small LPs (set by benchmarks/backends.py).
_LARGE_LP = 5000
#: Primal heuristics switched back on in the fast mode, at every node: rounding of
#: the LP solution, and one- and two-variable moves from each new incumbent. Mean
#: per solve against every heuristic off, on PyEPO's knapsack (scratch sweeps, see
#: docs/backends.md): 200 x 2 0.36x on its integer costs and 0.56x on perturbed
#: float costs, 50 x 2 0.62x and 0.71x; a 30-variable integer program 0.81x;
#: matchings and grid paths, whose LPs are integral, unchanged.
_CHEAP_HEURISTICS = {f"heuristics/{name}/freq": 1
                     for name in ("simplerounding", "rounding", "oneopt", "twoopt")}


def _fast_default(kind: str, form: CanonicalForm | None = None) -> bool:
    """Whether to switch presolve, heuristics and separation off (see docs/backends.md).

    Measured faster off: knapsack-50 8.5x, 30-variable MIP 8.9x, matching 3.1x,
    binary grid shortest path 1.4-2.6x."""
    if kind in _KEEP_DEFAULTS:
        return False
    return form is None or form.is_mip or form.num_vars < _LARGE_LP


def _ranged(expr, lower: float, upper: float):
    """``lower <= expr <= upper`` as one SCIP constraint (an infinite side is left out)."""
    if lower == upper:
        return expr == float(upper)
    if np.isfinite(lower) and np.isfinite(upper):
        return float(lower) <= (expr <= float(upper))
    return expr <= float(upper) if np.isfinite(upper) else expr >= float(lower)


def _lazy_handler_class():
    """A constraint handler calling ``form.separator`` on every candidate solution.

    Defined inside a function because ``pyscipopt`` is an optional import.
    """
    from pyscipopt import SCIP_RESULT, Conshdlr, quicksum

    class LazyHandler(Conshdlr):
        def __init__(self, variables, separator):
            self.variables = variables
            self.separator = separator

        def _cuts(self, solution=None):
            x = np.array([self.model.getSolVal(solution, v) for v in self.variables])
            return self.separator(x)

        def conscheck(self, constraints, solution, checkintegrality, checklprows, printreason,
                      completely):
            ok = not self._cuts(solution)
            return {"result": SCIP_RESULT.FEASIBLE if ok else SCIP_RESULT.INFEASIBLE}

        def _enforce(self):
            cuts = self._cuts()
            if not cuts:
                return {"result": SCIP_RESULT.FEASIBLE}
            for cut in cuts:
                expr = quicksum(float(v) * self.variables[int(j)]
                                for j, v in zip(cut.index, cut.value, strict=True))
                self.model.addCons(_ranged(expr, cut.lower, cut.upper))
            return {"result": SCIP_RESULT.CONSADDED}

        def consenfolp(self, constraints, nusefulconss, solinfeasible):
            return self._enforce()

        def consenfops(self, constraints, nusefulconss, solinfeasible, objinfeasible):
            return self._enforce()

        def consinitsol(self, constraints):
            self._transformed = None  # the transformed variables of this solve

        def conssepalp(self, constraints, nusefulconss):
            """Cuts on fractional LP solutions (``separator.fractional``): branch and
            cut instead of waiting for integer candidates."""
            fractional = getattr(self.separator, "fractional", None)
            if fractional is None:
                return {"result": SCIP_RESULT.DIDNOTRUN}
            cuts = fractional(np.array([self.model.getSolVal(None, v) for v in self.variables]))
            if not cuts:
                return {"result": SCIP_RESULT.DIDNOTFIND}
            if getattr(self, "_transformed", None) is None:
                self._transformed = [self.model.getTransformedVar(v) for v in self.variables]
            for cut in cuts:
                row = self.model.createEmptyRowUnspec(
                    name="cut", lhs=float(cut.lower) if np.isfinite(cut.lower) else None,
                    rhs=float(cut.upper) if np.isfinite(cut.upper) else None,
                    local=False, removable=True)
                self.model.cacheRowExtensions(row)
                for j, value in zip(cut.index.tolist(), cut.value.tolist(), strict=True):
                    self.model.addVarToRow(row, self._transformed[j], value)
                self.model.flushRowExtensions(row)
                self.model.addCut(row, forcecut=True)
                self.model.releaseRow(row)
            return {"result": SCIP_RESULT.SEPARATED}

        def conslock(self, constraint, locktype, nlockspos, nlocksneg):
            # No constraint objects (needscons=False); dual reductions are off instead.
            pass

    return LazyHandler


def _build_model(form: CanonicalForm, config: BackendConfig, kind: str, separator=None):
    """The SCIP model of ``form``, with a lazy handler calling ``separator`` (the form's
    own, or a `_Switch` of it) when there is one."""
    import pyscipopt
    from pyscipopt.scip import Expr, Term

    model = pyscipopt.Model()
    if not config.verbose:
        model.hideOutput()
    options = dict(config.options)
    if options.pop("fast", _fast_default(kind, form)):
        off = pyscipopt.SCIP_PARAMSETTING.OFF
        model.setPresolve(off)
        model.setHeuristics(off)
        model.setSeparating(off)
        for key, value in _CHEAP_HEURISTICS.items():
            model.setParam(key, value)
    model.setParam("limits/gap", float(config.mip_gap))
    # No solution of an earlier solve kept as an incumbent for the next: under ties an
    # instance's optimum then does not depend on what the model solved before it (its
    # place in a batch, an executor's chunks: 14 of 64 tied matchings changed with the
    # batch's order), and the training loops' recorded knapsack solves ran 0.88-0.96x
    # as long (a probe on PyEPO's 50 x 2 knapsack, Identity's and SPO+'s costs).
    model.setParam("limits/maxorigsol", 0)
    if config.time_limit is not None:
        model.setParam("limits/time", float(config.time_limit))
    if config.threads > 1:
        model.setParam("lp/threads", int(config.threads))
    for key, value in options.items():
        try:
            model.setParam(key, value)
        except (KeyError, LookupError, TypeError, ValueError) as error:
            raise InputError(f"SCIP rejected option {key}={value!r}: {error}") from None

    variables = []
    for j in range(form.num_vars):
        upper = None if np.isinf(form.upper[j]) else float(form.upper[j])
        lower = None if np.isinf(form.lower[j]) else float(form.lower[j])
        vtype = "I" if form.integer[j] else "C"
        variables.append(model.addVar(name=f"x{j}", vtype=vtype, lb=lower, ub=upper))
    terms = [Term(v) for v in variables]

    A, row_lower, row_upper = form.rows()
    for i in range(A.shape[0]):
        start, end = A.indptr[i], A.indptr[i + 1]
        cols, vals = A.indices[start:end], A.data[start:end]
        expr = Expr({terms[j]: float(v) for j, v in zip(cols, vals, strict=True)})
        model.addCons(_ranged(expr, row_lower[i], row_upper[i]))

    if separator is not None:
        _include_lazy_handler(model, variables, separator)
    return model, variables, terms


def _include_lazy_handler(model, variables, separator) -> None:
    """Include a `_lazy_handler_class` handler calling ``separator`` in ``model`` (in its
    problem stage). The model alone holds the handler: a kernel that kept it too crashed
    the interpreter's teardown now and then (exit code 139, as `_WITH_HANDLER` says)."""
    handler = _lazy_handler_class()(variables, separator)
    fractional = getattr(separator, "fractional", None) is not None
    model.includeConshdlr(handler, "combolayer_lazy", "lazy constraints from a separator",
                          enfopriority=-1, chckpriority=-1, needscons=False,
                          sepapriority=1 if fractional else 0,
                          sepafreq=1 if fractional else -1)
    _allow_dual_reductions(model, False)


def _allow_dual_reductions(model, allowed: bool) -> None:
    """Without constraint objects a lazy handler cannot lock variables, so while one
    separates, SCIP must not fix variables by dual arguments that ignore the cuts."""
    model.setParam("misc/allowstrongdualreds", allowed)
    model.setParam("misc/allowweakdualreds", allowed)


class _Switch:
    """A separator that calls ``separator``, which a kernel changes between solves (the
    form's own, or with per-call rows in, its `CanonicalForm.for_rows` one); None: no cut
    for any candidate."""

    def __init__(self, separator) -> None:
        self.separator = separator

    @property
    def fractional(self):
        return getattr(self.separator, "fractional", None)

    def __call__(self, x: np.ndarray) -> list:
        return [] if self.separator is None else self.separator(x)


# SCIP frees a model's memory into the C allocator, which keeps it: glibc holds
# freed blocks in per-thread arenas, so building and dropping layers (the thread
# executor builds a model per worker thread) grew a process by 110 MB over 200
# layers with no SCIP model left alive, and malloc_trim(0) gave it all back.
# A new model first hands back what the models dropped since the last one held.
_FREED = [0]


def _model_dropped() -> None:
    _FREED[0] += 1


def _trim_dropped_models() -> None:
    if _FREED[0] and (trim := _malloc_trim()) is not None:
        trim(0)
    _FREED[0] = 0


@functools.cache
def _malloc_trim():
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc only
    except OSError:
        return None


# A model with a Python constraint handler (a separator's lazy cuts: the TSP) must be
# freed while the interpreter still runs. Left to the interpreter's teardown, freeing it
# crashed the process after the script's last line (SIGSEGV, exit code 139; pyscipopt
# 6.3 with torch imported, a script that kept such a solver to its end). So the
# problems of such models still alive at exit are freed first, by an atexit hook.
_WITH_HANDLER: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _free_handler_models() -> None:
    for kernel in list(_WITH_HANDLER):
        kernel.model.freeProb()
        # the kernel's model is the last reference: dropped now, SCIP frees its plugins
        # (the Python handler among them) while the interpreter still runs
        kernel.__dict__.pop("model", None)
        kernel.__dict__.pop("variables", None)
    gc.collect()


class ScipKernel(RowKernel):
    """One kept SCIP model; ``__call__`` solves a batch of minimisation costs.

    Solutions of earlier solves are not kept as incumbents (``limits/maxorigsol`` 0):
    under ties, an instance's optimum does not depend on the earlier solves of this
    kernel.
    """

    feasibility_option = "numerics/feastol"

    def __init__(self, form: CanonicalForm, config: BackendConfig, kind: str = "ilp") -> None:
        _trim_dropped_models()
        weakref.finalize(self, _model_dropped)
        self.form = form
        #: With a separator for per-call rows other than the form's own, the lazy handler
        #: calls it through a `_Switch` (the handler is included once one separates).
        self._switch = (None if form.for_rows.separator is form.separator
                        else _Switch(form.separator))
        self.model, self.variables, self._terms = _build_model(
            form, config, kind, form.separator if self._switch is None or form.separator is None
            else self._switch)
        self._included = form.separator is not None
        self._outputs = self._terms[: form.num_outputs]
        self._nogil = hasattr(self.model, "optimizeNogil")
        self._row_constraints: list = []
        if form.separator is not None:
            _WITH_HANDLER.add(self)

    #: Per-call rows are added to the kept (untransformed) model and deleted again; while
    #: they are in, the model separates the cuts of ``form.for_rows`` (`_separate`). Its
    #: integer variables are integer whether or not the LP is integral.
    takes_rows = True

    def _separate(self, separator) -> None:
        """Make the lazy handler separate ``separator`` (None: nothing) through the
        `_Switch`, including the handler the first time one is needed (a form without
        a separator of its own whose per-call rows need one: `CanonicalForm.row_separator`)."""
        if self._switch is None or self._switch.separator is separator:
            return
        self.model.freeTransform()
        self._switch.separator = separator
        if not self._included:
            _include_lazy_handler(self.model, self.variables, self._switch)
            self._included = True
            _WITH_HANDLER.add(self)
        _allow_dual_reductions(self.model, separator is None)

    def _set_rows(self, A: np.ndarray, b: np.ndarray) -> None:
        from pyscipopt.scip import Expr

        self._delete_rows()
        self.model.freeTransform()  # constraints change only on the original problem
        self._separate(self.form.for_rows.separator)
        for coefs, rhs in zip(A[:, : self.form.num_vars], b, strict=True):
            nonzero = np.flatnonzero(coefs) if coefs.any() else np.zeros(1, dtype=int)
            expr = Expr({self._terms[j]: float(coefs[j]) for j in nonzero.tolist()})
            self._row_constraints.append(self.model.addCons(expr <= float(rhs)))

    def _clear_rows(self) -> None:
        self._delete_rows()
        self._separate(self.form.separator)

    def _delete_rows(self) -> None:
        if self._row_constraints:
            self.model.freeTransform()
            for constraint in self._row_constraints:
                self.model.delCons(constraint)
            self._row_constraints = []

    #: Off: a start measured no faster on PyEPO's knapsack (mean 0.99-1.02x, and
    #: 0.98-1.00x on the training loops' own solves with the pool's starts;
    #: benchmarks/warm_start.py, docs/measurements/solvers.md): its cheap heuristics find
    #: an incumbent early. Set it on a kernel to pass ``start``.
    takes_start = False

    def solve_one(self, cost: np.ndarray, start: np.ndarray | None = None) -> Solved:
        from pyscipopt.scip import Expr

        values = np.asarray(cost, dtype=float).tolist()
        # a full-width cost (a known cost, or the auxiliaries asked for) covers every column
        terms = self._outputs if len(values) == len(self._outputs) else self._terms
        objective = Expr(dict(zip(terms, values, strict=True)))
        return self._optimize(objective, start if self.form.is_mip else None)

    def _add_start(self, start: np.ndarray) -> None:
        """A MIP start: a full solution on the outputs, which SCIP checks when the
        solve starts and drops if infeasible. Forms with auxiliaries get none: SCIP
        stores only one partial solution per problem (a second raised "limit
        reached"), and its completion heuristic is off in the fast mode."""
        if self.form.num_vars > self.form.num_outputs:
            return
        model = self.model
        solution = model.createSol()
        for variable, value in zip(self.variables, np.asarray(start).tolist(), strict=True):
            model.setSolVal(solution, variable, value)
        # room for this one start alone: no earlier solve's solution is kept (`_build_model`)
        model.setParam("limits/maxorigsol", 1)
        model.addSol(solution, free=True)
        model.setParam("limits/maxorigsol", 0)

    def _run(self, objective, start: np.ndarray | None = None) -> str:
        model = self.model
        model.freeTransform()
        model.setObjective(objective, "minimize")
        if start is not None:
            self._add_start(start)
        if self._nogil:
            model.optimizeNogil()
        else:
            model.optimize()
        return model.getStatus()

    def _values(self) -> np.ndarray:
        solution = self.model.getBestSol()
        return np.array([solution[v] for v in self.variables], dtype=float)

    def _optimize(self, objective, start: np.ndarray | None = None) -> Solved:
        from pyscipopt.scip import Expr

        status = self._run(objective, start)
        return settle(
            scip_outcome(status), "SCIP", self._values, has_solution=self.model.getNSols() > 0,
            status=status, is_infeasible=lambda: self._run(Expr()) == "infeasible",
        )


def scip_outcome(status: str) -> Outcome:
    """SCIP's status string as an `Outcome` (a gap limit counts as optimal:
    it is the ``mip_gap`` asked for)."""
    return {
        "optimal": Outcome.OPTIMAL,
        "gaplimit": Outcome.OPTIMAL,
        "infeasible": Outcome.INFEASIBLE,
        "unbounded": Outcome.UNBOUNDED,
        "inforunbd": Outcome.INFEASIBLE_OR_UNBOUNDED,
        "timelimit": Outcome.TIME_LIMIT,
        "userinterrupt": Outcome.INTERRUPTED,
        # the limits a user can set in options, as Gurobi's: the best solution found
        # (with a warning) or an error without one, named in the instance's status
        **dict.fromkeys(("sollimit", "bestsollimit", "nodelimit", "totalnodelimit",
                         "stallnodelimit", "memlimit", "restartlimit"), Outcome.LIMIT),
    }.get(status, Outcome.STOPPED)


@register_backend
class ScipBackend(Backend):
    """SCIP (pyscipopt): any linear or mixed-integer program, with lazy cuts."""

    name: ClassVar[str] = "scip"
    takes_options: ClassVar[bool] = True
    stops_at_limits: ClassVar[bool] = True
    requires: ClassVar[tuple[str, ...]] = ("pyscipopt",)
    capabilities: ClassVar[Capability] = (Capability.LP | Capability.MIP | Capability.LAZY_CUTS
                                          | Capability.ROWS)
    generic_tier: ClassVar[int] = Tier.MIP_SOLVER

    def compile(self, spec: Spec, config: BackendConfig) -> ScipKernel:
        return ScipKernel(canonical_form(spec, lazy=True), config, kind=spec.kind)
