"""The compiled solver: one value with ``solve(costs)``, whatever the backend."""

from __future__ import annotations

import dataclasses
import math
import numbers
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import torch

from ..errors import BackendUnavailable, InfeasibleError, InputError, InputTypeError, SolverError
from ..func_transforms import (
    check_not_vmapped,
    outside_transforms,
    tracked,
    transforms_active,
    wrapped,
)
from ..specs.base import Spec
from ..specs.canonical import IntegerRows, unit_exponent, unit_rows
from .outcome import (
    INFEASIBLE,
    OPTIMAL,
    POOLED,
    Solved,
    as_solved,
    raise_limit,
    statuses_of,
    warn_not_optimal,
    worst,
)
from .rows import Rows, check_in_range, check_rows, rows_for
from .wrapper import KnownBound, RowBound, SolverWrapper

if TYPE_CHECKING:
    from .device import DeviceRoute


@runtime_checkable
class Kernel(Protocol):
    """What a backend compiles a problem into, with every capability its callers use.

    It minimises: given a ``(B, N)`` batch of minimisation costs it returns the
    ``(B, N)`` optimal outputs. ``array_api`` says whether it takes float64
    numpy arrays (``"numpy"``) or torch tensors on any device (``"torch"``).
    `KernelDefaults` gives a kernel class the defaults of the rest; a plugin's kernel
    that has only ``array_api`` and ``__call__`` gets them through `as_kernel`.
    """

    array_api: str
    #: Whether ``__call__`` takes per-call rows (``rows=``, `combolayer.backends.rows`).
    takes_rows: bool
    #: Whether ``__call__`` takes a MIP start (``start=``, ``(B, N)`` candidate outputs).
    takes_start: bool
    #: Whether the kernel checks its costs' values itself (`check_values`: finite, below
    #: `MAX_COST`; and the spec's `Spec.cost_floor`) in a host read its solve makes
    #: anyway; the `Solver` then applies neither itself.
    checks_values: bool
    #: The backend solving whole batches now, and why, where the kernel chooses among
    #: several (``"auto"``'s race); None where the backend is the solver's own.
    current_backend: str | None
    backend_reason: str | None

    def serial(self) -> Kernel:
        """The kernel that solves in the caller's thread: an executor's local model, else
        this one."""
        ...

    def outcome(self) -> dict | None:
        """What a copy of the kernel keeps from this one (a race's winner), or None."""
        ...

    def adopt(self, outcome: dict | None) -> None:
        """Take another kernel's `outcome` (the layer or loss this one was copied from)."""
        ...

    def with_statuses(self, costs: Any, **kwargs: Any) -> Solved:
        """``__call__``'s solutions with the status of each instance (`Solved`): what a
        caller that keeps the statuses (`Solver`, an executor's worker) calls."""
        ...

    def close(self) -> None:
        """Hand back what the kernel holds besides its models (an executor's workers,
        a race's candidates' workers); nothing for most kernels."""
        ...

    def __call__(self, costs: Any) -> Any: ...


class KernelDefaults:
    """The defaults of `Kernel`'s capabilities, for a kernel class to inherit and
    override: no per-call rows, no MIP start, its own backend, nothing to hand to a copy
    or to close."""

    takes_rows = False
    takes_start = False
    checks_values = False
    current_backend: str | None = None
    backend_reason: str | None = None

    def serial(self) -> Kernel:
        return self  # type: ignore[return-value]

    def outcome(self) -> dict | None:
        return None

    def adopt(self, outcome: dict | None) -> None:
        return None

    def close(self) -> None:
        return None

    def with_statuses(self, costs: Any, **kwargs: Any) -> Solved:
        # a bare array from a kernel that never stops early, or its own `Solved`
        return as_solved(self(costs, **kwargs))


class ReportingKernel(KernelDefaults):
    """The base of kernels whose instances may stop short of optimal (a limit, an
    inaccurate solve, per-call rows left infeasible): they define `with_statuses`, which
    returns each instance's status; called directly, they return the solutions and warn
    for such instances."""

    def with_statuses(self, costs: Any, **kwargs: Any) -> Solved:
        raise NotImplementedError

    def __call__(self, costs: Any, **kwargs: Any) -> Any:
        return warn_not_optimal(self.with_statuses(costs, **kwargs), type(self).__name__)


def as_kernel(kernel: Any) -> Kernel:
    """``kernel`` itself where it has every `Kernel` capability, else a `PluginKernel`
    around it (a plugin's kernel needs only ``array_api`` and ``__call__``)."""
    if isinstance(kernel, Kernel):
        return kernel
    return PluginKernel(kernel)


def _own(name: str) -> property:
    """The kernel's own ``name`` where it has one (read on every use), else the default."""
    default = getattr(KernelDefaults, name)
    return property(lambda self: getattr(self.kernel, name, default))


def _own_method(name: str) -> Callable:
    """The kernel's own method ``name`` where it has one, else `KernelDefaults`'."""
    default = getattr(KernelDefaults, name)

    def method(self: PluginKernel, *args: Any, **kwargs: Any) -> Any:
        own = getattr(self.kernel, name, None)
        return own(*args, **kwargs) if own is not None else default(self, *args, **kwargs)

    method.__name__ = name
    return method


class PluginKernel(KernelDefaults):
    """A kernel around another that has some or all of `Kernel`'s capabilities (a
    plugin's needs only ``array_api`` and ``__call__``): the ones it has are its own,
    the others `KernelDefaults`'; everything else it holds is read through. A subclass
    changes what it needs (`combolayer.backends.simple_paths`)."""

    takes_rows = _own("takes_rows")
    takes_start = _own("takes_start")
    checks_values = _own("checks_values")
    current_backend = _own("current_backend")
    backend_reason = _own("backend_reason")
    outcome = _own_method("outcome")
    adopt = _own_method("adopt")
    with_statuses = _own_method("with_statuses")
    close = _own_method("close")

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.array_api = kernel.array_api

    def serial(self) -> Kernel:
        local = self.kernel.serial() if hasattr(self.kernel, "serial") else self.kernel
        return self if local is self.kernel else as_kernel(local)

    def __getattr__(self, name: str) -> Any:
        # copy and pickle look for dunders before __init__ has set the kernel
        if name.startswith("__") or "kernel" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["kernel"], name)

    def __call__(self, costs: Any, **kwargs: Any) -> Any:
        return self.kernel(costs, **kwargs)


class RowKernel(ReportingKernel):
    """A numpy kernel for solvers that take one cost vector at a time.

    Subclasses set ``form`` and define ``solve_one(cost) -> x`` (solver values,
    outputs first); the loop and the rounding of outputs are done here, once.
    ``cost`` has N entries (the outputs' costs; every other variable keeps the
    cost 0 it was built with) or ``num_vars`` (a cost on every variable, sent by a
    `Solver` whose spec has a known cost or that was asked for the auxiliaries);
    the kernel returns as many values per instance as each instance's cost has.

    A kept solver model is not thread-safe (two threads sharing one SCIP model
    crashed the process; HiGHS returned garbage), so each kernel holds a lock:
    threads that share a layer take turns. ``executor="thread"`` gives every
    worker thread a model of its own instead.
    """

    array_api = "numpy"
    form: Any
    #: The solver option that sets its feasibility tolerance (``BackendConfig.options``),
    #: named when an answer breaks a row within it (`_check_rows`); None if unknown.
    feasibility_option: str | None = None
    #: Whether ``solve_one`` gets each instance's costs scaled up by a power of two
    #: (`unit_scaled`): set at construction from the config's options (`scales_costs`).
    scale_costs = True

    def __new__(cls, *args: Any, **kwargs: Any) -> RowKernel:
        kernel = super().__new__(cls)
        kernel._lock = threading.Lock()
        # every row kernel is built as (form or spec, config, ...)
        config = args[1] if len(args) > 1 else kwargs.get("config")
        kernel.scale_costs = scales_costs(getattr(config, "options", {}))
        return kernel

    # A subclass that takes a MIP start (``solve_one(cost, start=)``) sets takes_start;
    # one that takes per-call rows sets takes_rows and defines ``_set_rows(A, b)`` (add
    # ``A x <= b`` to the kept model) and ``_clear_rows()``.

    def solve_one(self, cost: np.ndarray) -> np.ndarray | Solved:
        """The solver's values for one instance's cost: a bare array (optimal), or
        `settle`'s `Solved` with the instance's status."""
        raise NotImplementedError

    def _set_rows(self, A: np.ndarray, b: np.ndarray) -> None:
        """Put the rows ``A x <= b`` (``(m, num_vars)``, ``(m,)``) into the kept model,
        in place of the previous instance's."""
        raise NotImplementedError

    def _clear_rows(self) -> None:
        """Take the per-call rows out of the kept model again."""
        raise NotImplementedError

    def with_statuses(self, costs: np.ndarray, start: np.ndarray | None = None,
                      rows: Rows | None = None) -> Solved:
        """The ``(B, N)`` optimal outputs for ``(B, N)`` minimisation costs, with each
        instance's status (`Solved`).

        ``start``, optional, is a ``(B, N)`` array of candidate outputs, one per instance
        (the instance's last solution, or a solution pool's best under its cost),
        given to the solver as a MIP start where the kernel ``takes_start``. It is
        a hint: the answer stays optimal whether or not the start is feasible.

        ``rows``, optional (kernels that `takes_rows`), adds per-instance rows: instance
        ``i`` is solved with ``rows.A[rows.index[i]] x <= rows.b[rows.index[i]]``.
        The kept model gets them in place (set when the entry changes, cleared after
        the batch), never rebuilt. An instance they make infeasible gets
        the status ``"infeasible"`` and an all-zero solution (CombOptNet's dummy); the
        `Solver` then raises or flags it (``on_infeasible``).
        """
        if rows is not None:
            return self._call_with_rows(costs, start, rows)
        # costs may be full-width (num_vars: the Solver's known costs or return_aux):
        # solve_one then sets every column's cost and the whole solution comes back
        n = costs.shape[1]
        out = np.empty_like(costs)
        statuses: list[str] | None = None  # None while every instance is optimal
        solved: list[np.ndarray | None] = [None] * len(costs)  # the solver's values
        starts = self._starts(costs, start)
        with self._lock:
            for b, cost in enumerate(costs):
                cost = unit_scaled(cost) if self.scale_costs else cost
                x = (self.solve_one(cost) if starts is None
                     else self.solve_one(cost, start=starts[b]))
                if isinstance(x, Solved):
                    if x.statuses is not None:
                        statuses = statuses or [OPTIMAL] * len(costs)
                        statuses[b] = x.statuses[0]
                    x = x.values
                solved[b] = x
                out[b] = x[:n]
        self._check_rows(solved)
        return Solved(self._answer(out, n), None if statuses is None else tuple(statuses))

    def _check_rows(self, solved: list[np.ndarray | None]) -> None:
        """`SolverError` when the solver's values for an instance (``solved``, None where
        there are none), rounded, break a row of integer variables
        (`CanonicalForm.breach`, once for the batch): a MIP solver's tolerance is
        relative, and an answer within it can break a row with large coefficients by
        whole units. Forms whose LP has integral vertices (integral data) need no check,
        nor kernels whose values are not the form's variables (a tour's edges)."""
        form = self.form
        values = [x for x in solved if x is not None]
        if form.lp_is_integral or not values or len(values[0]) != form.num_vars:
            return
        breach = form.breach(np.stack(values))
        if breach is not None:
            _, row, excess = breach
            self._breach(f"row {row} of the problem", excess)

    def _breach(self, where: str, excess: float) -> None:
        tighten = ("" if self.feasibility_option is None else
                   f", tighten its tolerance (options={{'{self.feasibility_option}': "
                   "1e-9}),")
        raise SolverError(
            f"{type(self).__name__}: the solver's answer breaks {where} by {excess:.3g}: "
            "its feasibility tolerance is too coarse for this row's coefficients; rescale "
            f"the row towards coefficients near 1 (e.g. weights in other units){tighten} "
            "or use another backend")

    def _starts(self, costs: np.ndarray, start: np.ndarray | None) -> np.ndarray | None:
        """``start`` as one float64 vector per instance, or None where the kernel does not
        `takes_start` (or none was given)."""
        if start is None or not self.takes_start:
            return None
        return np.asarray(start, dtype=np.float64).reshape(len(costs), -1)

    def _answer(self, out: np.ndarray, n: int) -> np.ndarray:
        """The rounded outputs, or the whole solutions for full-width (``num_vars``) costs."""
        return self.form.outputs(out) if n <= self.form.num_outputs else self.form.solution(out)

    def _call_with_rows(self, costs: np.ndarray, start: np.ndarray | None,
                        rows: Rows) -> Solved:
        n = costs.shape[1]
        out = np.zeros_like(costs)
        starts = self._starts(costs, start)
        index = np.asarray(rows.index)
        # grouped by entry (stable): an entry's rows go in once for all its instances
        order = np.argsort(index, kind="stable").tolist()
        statuses = [OPTIMAL] * len(costs)
        solved: list[np.ndarray | None] = [None] * len(costs)  # None: rows left it empty
        index = index.tolist()
        current = None
        entries: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # the rows set, by entry
        with self._lock:
            try:
                for i in order:
                    cost = unit_scaled(costs[i]) if self.scale_costs else costs[i]
                    if index[i] != current:
                        current = index[i]
                        A = np.asarray(rows.A[current], dtype=np.float64)
                        if A.shape[1] < self.form.num_vars:  # the form's own auxiliaries
                            A = np.pad(A, ((0, 0), (0, self.form.num_vars - A.shape[1])))
                        entries[current] = A, np.asarray(rows.b[current], dtype=np.float64)
                        self._set_rows(*unit_rows(*entries[current]))
                    try:
                        x = (self.solve_one(cost) if starts is None
                             else self.solve_one(cost, start=starts[i]))
                    except InfeasibleError:
                        statuses[i] = INFEASIBLE
                        continue
                    if isinstance(x, Solved):
                        statuses[i] = worst(x.statuses or ())
                        x = x.values
                    solved[i] = x
                    out[i] = x[:n]
            finally:
                if current is not None:
                    self._clear_rows()
        self._check_rows(solved)
        self._check_call_rows(solved, index, entries)
        return Solved(self._answer(out, n), tuple(statuses))

    def _check_call_rows(self, solved: list[np.ndarray | None], index: list[int],
                         entries: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        """`_check_rows` for the call's own rows ``A x <= b`` (``entries``, the rows of each
        entry; ``index``, each instance's entry): those of integer variables alone must
        hold for the rounded answers (`IntegerRows.breach`, once per entry)."""
        form = self.form
        instances: dict[int, list[int]] = {}
        for i, x in enumerate(solved):
            if x is not None and len(x) == form.num_vars:
                instances.setdefault(index[i], []).append(i)
        for entry, mine in instances.items():
            A, b = entries[entry]
            rows = IntegerRows.of(A, np.full(len(b), -np.inf), b, form.integer)
            breach = rows.breach(form.solution(np.stack([solved[i] for i in mine])))
            if breach is not None:
                instance, row, excess = breach
                self._breach(f"per-call row {row} of instance {mine[instance]}", excess)


#: Costs reach a MIP solver with their largest magnitude scaled up to at least 2**20
#: (`unit_scaled`): its tolerances are absolute, so that costs near 1 beside one of 1e7 or
#: 1e8 (a big-M, a known cost) stay well above them after the layer's normalisation;
#: 2**20 keeps the objective's rounding (about 1e-10) far below the 1e-7 tolerances
#: (tests/test_backends.py, the big-M and the scaling tests).
COST_BITS = 20


#: Solver options in the objective's units, which scaling the costs would change, as
#: `scales_costs` compares names (lower case, no underscores: Gurobi ignores both):
#: HiGHS's, SCIP's (``limits/objectivestop`` before SCIP 10) and Gurobi's, and so the
#: solvers' under cvxpy. A row kernel given one solves the costs as they come.
OBJECTIVE_OPTIONS = frozenset({
    "objectivebound", "objectivetarget", "mipabsgap",  # HiGHS
    "limits/primal", "limits/dual", "limits/objectivestop", "limits/absgap",  # SCIP
    "cutoff", "bestobjstop", "bestbdstop", "mipgapabs"})  # Gurobi


def scales_costs(options: dict) -> bool:
    """Whether a row kernel with these solver ``options`` scales its costs (`unit_scaled`):
    not when one of them, or of the options nested in them (cvxpy's ``scip_params``), is
    in the objective's units (`OBJECTIVE_OPTIONS`: a cutoff of 4 on costs scaled by 2**18
    cut every solution off)."""
    for key, value in options.items():
        if str(key).lower().replace("_", "") in OBJECTIVE_OPTIONS:
            return False
        if isinstance(value, dict) and not scales_costs(value):
            return False
    return True


def unit_scaled(cost: np.ndarray) -> np.ndarray:
    """``cost`` as it is when its largest magnitude is ``2**COST_BITS`` or more, else times
    the power of two that brings it into [2**COST_BITS, 2**(COST_BITS + 1)): the same
    argmin, exactly (a power of two changes no mantissa: ties stay ties). A MIP solver's
    tolerances are absolute (on the objective and the reduced costs): on costs of 1e-6,
    HiGHS and Gurobi took tours 2.7% and 15% longer, and SCIP a knapsack 24% worse;
    normalised to unit norm, costs of 1 beside a big-M of 1e7 sank to 1e-7 and HiGHS,
    Gurobi and cvxpy answered zeros.
    Larger costs are never brought down: the differences of costs near 1e6 (an offset,
    or a known cost next to a small predicted one) sank below those tolerances so."""
    exponent = unit_exponent(np.abs(cost).max(initial=0.0), COST_BITS)
    return np.ldexp(cost, exponent) if exponent else cost


@dataclass(frozen=True)
class FunctionKernel(KernelDefaults):
    """A kernel that is just a function on a ``(B, N)`` batch of minimisation costs: it
    returns the solutions, or a `Solved` where an instance may stop short of optimal."""

    function: Callable
    array_api: str = "numpy"

    def with_statuses(self, costs: Any) -> Solved:
        return as_solved(self.function(costs))

    def __call__(self, costs: Any) -> Any:
        out = self.function(costs)
        return warn_not_optimal(out, "FunctionKernel") if isinstance(out, Solved) else out


def inner(a: Any, b: Any, num_cost_dims: int, keepdim: bool = False) -> Any:
    """``<a, b>`` over the trailing ``num_cost_dims`` axes: one value per instance
    (numpy or torch; ``keepdim`` keeps size-1 axes for broadcasting)."""
    product = a * b
    dims = tuple(range(product.ndim - num_cost_dims, product.ndim))
    if isinstance(product, torch.Tensor):
        return product.sum(dim=dims, keepdim=keepdim)
    return product.sum(axis=dims, keepdims=keepdim)


#: Costs at or above this magnitude are refused: solvers treat 1e20 as infinite
#: (SCIP raised a bare Exception there, HiGHS said 'Unknown'), their tolerances
#: are relative, and float32 norms of such costs overflow.
MAX_COST = 1e15


#: The half-precision dtypes, which the layer and the losses work on in float32.
HALF_PRECISION = (torch.float16, torch.bfloat16)

#: The largest integer up to which every integer is exact in each half-precision dtype:
#: solutions, returned in the costs' dtype, must fit (a Ranking(300)'s ranks in bfloat16
#: were not a permutation).
_EXACT_INTEGERS = {torch.float16: 2048, torch.bfloat16: 256}
_EXACT_NUMPY_INTEGERS = {np.dtype(np.float16): 2048}


def check_costs(spec: Spec, costs: Any, name: str = "costs") -> None:
    """Raise ValueError on a wrong trailing shape, non-real dtype, NaN/inf, or entries of
    magnitude MAX_COST or more (one reduction when all is well).

    The values (`check_values`) of a tensor off the CPU, or of one torch.compile is
    tracing, are checked where they are read instead, with no host synchronisation of
    their own: on the host copy a solve makes anyway (`Solver`), by the device kernel's
    solve, or inside the layer's compiled solve (`combolayer.layer.ops`)."""
    shape = tuple(costs.shape)
    cost_shape = spec.cost_shape
    k = len(cost_shape)
    if shape[len(shape) - k :] != cost_shape or len(shape) < k:
        raise InputError(
            f"{name} has trailing shape {shape[len(shape) - k :] if len(shape) >= k else shape} "
            f"but {spec.label} expects {cost_shape} (got full shape {shape})"
        )
    is_torch = isinstance(costs, torch.Tensor)
    if costs.is_complex() if is_torch else np.iscomplexobj(costs):
        raise InputError(f"{name} must be real, got complex dtype {costs.dtype} for {spec.label}")
    if not is_torch and not _real_numbers(costs):  # text, dates, records, None
        raise InputError(f"{name} must be real numbers, got dtype {costs.dtype} for "
                         f"{spec.label}")
    if is_torch and (not costs.is_cpu or torch.compiler.is_compiling()):
        return
    check_values(spec, costs, name)


def _real_numbers(costs: np.ndarray) -> bool:
    """Whether a numpy array holds real numbers: by its dtype, or (an object array)
    entry by entry (numpy would convert ``"5"`` and ``None``)."""
    if costs.dtype.kind != "O":
        return costs.dtype.kind in "biuf"
    return all(isinstance(entry, numbers.Real) for entry in costs.flat)


def check_values(spec: Spec, costs: Any, name: str = "costs") -> None:
    """`check_costs`'s value checks alone (NaN/inf, magnitude MAX_COST or more), on a
    numpy array or a tensor: the one check every path runs. On a tensor off the CPU
    it synchronises nothing: the check is queued on the device
    (``torch._assert_async``) and fails there, as a device-side assertion naming the
    problem, before the solve's result can be read. Kernels that read the device
    anyway (`Kernel.checks_values`: the Bellman-Ford kernels) raise this ValueError
    themselves instead, and the `Solver` queues nothing for them."""
    is_torch = isinstance(costs, torch.Tensor)
    if costs.numel() == 0 if is_torch else costs.size == 0:
        return
    if is_torch and not costs.is_cpu:
        torch._assert_async(~invalid_values(costs), str(values_error(spec, name)))
        return
    # One reduction and one number read back in the usual case: the Euclidean norm
    # bounds every entry (half of MAX_COST leaves room for its rounding), and NaN or
    # inf make it NaN or inf, which fail the comparison.
    if is_torch:
        if 0 in costs.stride():  # an expanded tensor: its stored entries, not 1e12 copies
            costs = costs[tuple(slice(0, 1) if step == 0 else slice(None)
                                for step in costs.stride())]
        if float(torch.linalg.vector_norm(costs.detach())) < 0.5 * MAX_COST:
            return
        largest = float(costs.detach().abs().max())
    else:
        largest = float(np.abs(costs).max())
    if largest < MAX_COST:
        return
    if not all_finite(costs):
        raise InputError(f"{name} must be finite, got NaN or inf entries for {spec.label}")
    raise InputError(f"{name} must be below {MAX_COST:g} in magnitude for {spec.label}, "
                     f"got {largest:.3g}: rescale the costs")


def invalid_values(costs: torch.Tensor) -> torch.Tensor:
    """A 0-d bool tensor on the costs' device, read nowhere: whether an entry is NaN,
    infinite or of magnitude `MAX_COST` or more (amax propagates NaN, which fails the
    comparison as inf does)."""
    return ~(costs.detach().abs().amax() < MAX_COST)


def values_error(spec: Spec, name: str = "costs") -> InputError:
    """The error for costs that `invalid_values` marks."""
    return InputError(f"{name} must be finite and below {MAX_COST:g} in magnitude for "
                      f"{spec.label}")


def all_finite(costs: Any) -> bool:
    """Whether every entry is finite, in one fused reduction: a NaN or inf entry
    makes the sum NaN or inf. Only a sum that overflows on finite entries pays
    for the entrywise test."""
    if isinstance(costs, torch.Tensor):
        if math.isfinite(costs.sum().item()):
            return True
        return bool(torch.isfinite(costs).all())
    with np.errstate(over="ignore", invalid="ignore"):
        if math.isfinite(np.add.reduce(costs, axis=None)):
            return True
    return bool(np.isfinite(costs).all())


def check_known_cost(label: str, num_vars: int, batch: tuple[int, ...], known_cost: Any,
                     like: Any, values: bool = True) -> Any:
    """A per-call known cost checked once, at the edge: ``(*batch, num_vars)`` or any shape
    that broadcasts to it (``(num_vars,)``: the same for every instance), real, finite and
    below `MAX_COEFFICIENT` in magnitude (unless ``values`` is False: the layer's compiled
    solve checks them).
    Returned as the kind of ``like`` (a tensor on its device and dtype, or a float64
    array), broadcast to ``(*batch, num_vars)``. ValueError names expected and got."""
    is_torch = isinstance(like, torch.Tensor)
    if isinstance(known_cost, torch.Tensor):
        if known_cost.requires_grad and torch.is_grad_enabled():
            raise InputError(f"known_cost requires a gradient, but no method gives one to a "
                             f"known cost (it is data) for {label}: pass known_cost.detach()")
        known = known_cost.detach()
    else:
        known = np.asarray(known_cost)
        known = torch.as_tensor(known if np.iscomplexobj(known)
                                else np.asarray(known, dtype=np.float64))
    if known.is_complex():
        raise InputError(f"known_cost must be real, got dtype {known.dtype} for {label}")
    shape = tuple(known.shape)
    try:
        # one value per variable, always: a (1,) or (B, 1) cost would broadcast to all
        fits = known.ndim >= 1 and shape[-1] == num_vars and torch.broadcast_shapes(
            shape, (*batch, num_vars)) == (*batch, num_vars)
    except RuntimeError:
        fits = False
    if not fits:
        raise InputError(f"known_cost has shape {shape} but {label} has {num_vars} variables "
                         f"(N outputs + num_aux) and the costs' batch is {tuple(batch)}: "
                         f"expected ({', '.join(map(str, (*batch, num_vars)))}) or "
                         f"({num_vars},)")
    if values:
        check_in_range("known_cost", known, label)
    known = known.expand(*batch, num_vars)
    if is_torch:
        return known.to(like)
    return known.to("cpu", torch.float64).numpy()


def known_minimisation_cost(spec: Spec) -> np.ndarray | None:
    """``sign * known_cost`` of ``spec`` as a float64 ``(num_vars,)`` array, or None
    when it has none (or only zeros, which change nothing)."""
    known = getattr(spec, "known_cost", None)
    if known is None:
        return None
    known = np.asarray(known, dtype=np.float64)
    if not known.any():
        return None
    return (1.0 if spec.sense == "min" else -1.0) * known


def pool_width(spec: Spec) -> int:
    """The width of a solution pool's rows for ``spec``: ``num_vars`` (whole solutions,
    whose known cost the pool must count to rank them) when it has a known cost,
    else ``N``, the outputs."""
    return spec.num_outputs if known_minimisation_cost(spec) is None else spec.num_vars


class Recorder(SolverWrapper):
    """A solver (or a wrapper of one) that keeps, for its caller, what its solves
    produce besides the solutions: `infeasible`, the positions (``Rows.origin``) of the
    instances that per-call rows left infeasible under ``on_infeasible="flag"`` (the
    solver then leaves the warning to the caller), and with ``keep_aux`` `aux`, the
    auxiliaries of each solve (a ``(B, num_aux)`` tensor, one row per solved instance,
    in order; each ``solve_min`` and ``solve_batch`` then asks for the whole solutions
    and returns what its caller asked for). Made for one call by the caller that
    wants them from the solves an estimator or a loss makes (the layer's ``return_aux``
    and per-call rows, Fenchel-Young's known cost), which reads them here: nothing is
    shared between calls or threads. Everything else is the solver's."""

    def __init__(self, solver: Any, keep_aux: bool = True) -> None:
        super().__init__(solver)
        self.keep_aux = keep_aux
        self.aux: list[torch.Tensor] = []
        self.infeasible: set[int] = set()

    def _options(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        rows = kwargs.get("rows")
        if rows is not None:
            kwargs["rows"] = dataclasses.replace(rows, flagged=self.infeasible)
        return kwargs

    def _keep(self, out: Any, return_aux: bool) -> Any:
        if not self.keep_aux:
            return out
        y, aux = out
        kept = aux if isinstance(aux, torch.Tensor) else torch.from_numpy(np.asarray(aux))
        if kept.numel():
            self.aux.append(kept.reshape(-1, kept.shape[-1]))
        return (y, aux) if return_aux else y

    def solve_min(self, costs: Any, return_aux: bool = False, **kwargs: Any) -> Any:
        out = self._solver.solve_min(costs, return_aux=return_aux or self.keep_aux,
                                     **self._options(kwargs))
        return self._keep(out, return_aux)

    def solve_batch(self, costs: torch.Tensor, start: Any = None, return_aux: bool = False,
                    **kwargs: Any) -> Any:
        out = self._solver.solve_batch(costs, start=start,
                                       return_aux=return_aux or self.keep_aux,
                                       **self._options(kwargs))
        return self._keep(out, return_aux)


def cast_solutions(solver: Any, x: Any, dtype: Any, aux: bool = False) -> Any:
    """Solutions of ``solver`` ``x`` (a numpy array or a tensor; with ``aux``,
    auxiliaries; or a pair ``(y, aux)`` of both) in the costs' ``dtype``, refused where a
    half-precision dtype cannot hold one of their integer values exactly
    (`_EXACT_INTEGERS`): a Ranking(300)'s ranks in bfloat16 were no permutation, and an
    integer output that only rows bound reached 301, which bfloat16 rounds to 300,
    breaking its row. Other values (an estimator's average, 1/3) round as the dtype
    rounds. Read only where the spec's bounds (`Solver.largest_value`) do not settle it;
    while traced, the check is queued (``torch._assert_async``: a RuntimeError) without
    reading the bounds (Dynamo before torch 2.13 could not take them as a constant)."""
    if isinstance(x, tuple):
        return (cast_solutions(solver, x[0], dtype),
                cast_solutions(solver, x[1], dtype, aux=True))
    is_numpy = isinstance(x, np.ndarray)
    out = x.astype(dtype) if is_numpy else x.to(dtype)
    # numpy's dtypes in a dict of their own: Dynamo before torch 2.13 could not hash one
    # while tracing a lookup by a torch dtype (a graph break)
    exact = (_EXACT_NUMPY_INTEGERS if is_numpy else _EXACT_INTEGERS).get(out.dtype)
    if exact is None:
        return out
    compiling = not is_numpy and torch.compiler.is_compiling()
    if not compiling and solver.largest_value(aux) <= exact:
        return out
    # while traced, the spec's kind names it: some labels read pydantic's field defaults,
    # which Dynamo cannot trace
    label = type(solver.spec).__name__ if compiling else solver.spec.label
    message = (f"the solutions of {label} reach integers that {dtype} cannot hold exactly "
               f"(it holds those up to {exact}); pass float32 costs")
    if is_numpy:
        held = bool(((out.astype(x.dtype) == x) | (x != np.round(x))).all())
    else:
        held = ((out.to(x.dtype) == x) | (x != x.round())).all()
        if compiling:
            torch._assert_async(held, message)
            return out
    if not held:
        raise InputError(message)
    return out


def rebuild_solver(recipe: Callable[[], Solver], outcome: dict | None = None) -> Solver:
    """A copy of a `Solver` made from its recipe (`Solver.__reduce__`), with the race
    winner ``outcome`` adopted."""
    solver = recipe()
    solver.kernel.adopt(outcome)
    return solver


class Solver:
    """A problem compiled for one backend: ``solve(costs)`` returns the optimal solutions.

    Numpy in gives numpy out, torch in gives torch out on the input's device and
    dtype; any leading batch shape is allowed.

    An instance the solver did not solve to optimality (a time limit hit with a feasible
    solution in hand, or a solution the solver calls inaccurate) is never silent:
    each call that returns one warns once (a ``RuntimeWarning`` counting the instances),
    or raises `SolverError` under ``BackendConfig(on_limit="raise")``, whatever
    the executor; ``solve(costs, return_status=True)`` returns the status of every
    instance with the solutions.
    """

    def __init__(self, spec: Spec, kernel: Kernel, backend: str, config: Any) -> None:
        self.spec = spec
        self.kernel = kernel
        self.backend = backend
        self.config = config
        self.sign = 1.0 if spec.sense == "min" else -1.0
        self.cost_shape = spec.cost_shape
        self.num_outputs = spec.num_outputs
        #: All variables (`Spec.num_vars`) and the auxiliaries among them (an ILP's
        #: ``num_aux``; 0 for the named problems, whose solution is the output).
        self.num_vars = spec.num_vars
        self.num_aux = self.num_vars - self.num_outputs
        #: The known cost in minimisation form (``sign * known_cost``, ``(num_vars,)``
        #: float64), or None when the spec has none (or only zeros).
        self.known = known_minimisation_cost(spec)
        #: The width of the rows a solution pool keeps for this solver (`pool_width`,
        #: the one rule, also read by pools built from a spec alone).
        self.pool_width = pool_width(spec)
        self._known_on: dict[tuple[Any, Any, bool], torch.Tensor] = {}
        self._largest: dict[bool, float] = {}  # `largest_value`, by ``aux``
        self.on_limit = getattr(config, "on_limit", "warn")
        self.on_infeasible = getattr(config, "on_infeasible", "raise")
        #: Builds the solver that takes per-call rows when this one's kernel does not
        #: (set by `make_solver`: the best backend with ``Capability.ROWS``), or None.
        self.row_fallback: Callable[[], Solver] | None = None
        self._row_solver: Solver | None = None
        #: Where costs on an accelerator go when ``kernel`` takes numpy arrays (set by
        #: `make_solver` under ``"auto"``: `combolayer.backends.device`), or None.
        self.device_route: DeviceRoute | None = None
        #: Whether `solve_batch` may hand CPU costs straight to the kernel: no known cost
        #: to widen them with, and `_full_batch` not overridden (`CachedSolver` is not).
        self._lean = self.known is None and type(self)._full_batch is Solver._full_batch
        #: Why this backend was chosen (set by `make_solver`), read by `backend_reason`.
        self.choice_reason = ""
        #: Builds this solver again (set by `make_solver`: itself on the spec and the
        #: backend config; ``"auto"`` chooses again, the same backend where the same ones are
        #: installed), what a copy keeps
        #: (`__reduce__`); None for a solver built by hand, which cannot be copied.
        self.recipe: Callable[[], Solver] | None = None

    def _run(self, kernel: Kernel, costs: Any, start: np.ndarray | None = None,
             rows: Rows | None = None) -> Solved:
        """``kernel(costs)`` on a ``(B, N)`` batch with each instance's status (`Solved`);
        ``start`` goes to a kernel that `takes_start`, ``rows`` (per-call rows) to one
        that ``takes_rows``. The caller's public call settles the statuses (`_settle`)."""
        kwargs = {}
        if start is not None:
            kwargs["start"] = start
        if rows is not None:
            kwargs["rows"] = rows
        if self.cost_floor is not None:
            costs = self.cost_floor(costs)
        return kernel.with_statuses(costs, **kwargs) if kwargs else kernel.with_statuses(costs)

    def _settle(self, solved: Solved, rows: Rows | None = None,
                statuses: list[str] | None = None) -> Any:
        """``solved.values`` for a public call's instances, once their statuses
        (``solved.statuses``; None: every instance optimal) are added to the caller's
        ``statuses`` list, where it gave one; raises or warns for the instances not
        solved to optimality."""
        if statuses is not None:
            statuses.extend(statuses_of(solved))
        statuses = solved.statuses
        if statuses is not None and worst(statuses) != OPTIMAL:
            if INFEASIBLE in statuses:
                self._infeasible(statuses, rows)
            self._not_optimal(statuses)
        return solved.values

    def _infeasible(self, statuses: tuple[str, ...], rows: Rows | None) -> None:
        """Per-call rows that left instances without a feasible solution: raise
        `InfeasibleError` (``on_infeasible="raise"``) or flag them (``"flag"``: their
        positions go to the rows' ``flagged`` set where the caller gave one, a
        `Recorder`'s, or this call warns)."""
        bad = [i for i, status in enumerate(statuses) if status == INFEASIBLE]
        message = (f"{self.backend}: {len(bad)} of {len(statuses)} instances of "
                   f"{self.spec.label} are infeasible with their per-call rows A x <= b "
                   f"(instances {bad[:10]}{' ...' if len(bad) > 10 else ''})")
        if self.on_infeasible != "flag":
            raise InfeasibleError(message + "; on_infeasible='flag' (on the layer or in "
                                  "BackendConfig) returns them flagged instead")
        if rows is not None and rows.flagged is not None:
            rows.flagged.update(rows.origins()[bad].tolist())
        else:
            warnings.warn(message + ": their solutions are zeros; solve(..., "
                          "return_status=True) says which", RuntimeWarning, stacklevel=5)

    def _not_optimal(self, statuses: tuple[str, ...]) -> None:
        bad = [status for status in statuses if status not in (OPTIMAL, INFEASIBLE, POOLED)]
        if not bad:
            return
        kinds = ", ".join(sorted(set(bad)))
        message = (f"{self.backend}: {len(bad)} of {len(statuses)} instances of {self.spec.label} "
                   f"were not solved to optimality ({kinds}): their solutions are feasible but "
                   "may not be optimal; solve(..., return_status=True) says which")
        if self.on_limit == "raise":
            raise SolverError(message + "; BackendConfig(on_limit='raise') makes this an error")
        advice = "; ".join(raise_limit(kind) for kind in sorted(set(bad)) if "limit" in kind)
        warnings.warn(message + f"; {advice or 'see the solver status'}, or set "
                      "on_limit='raise' to make this an error", RuntimeWarning, stacklevel=4)

    @property
    def kernel(self) -> Kernel:
        return self._kernel

    @kernel.setter
    def kernel(self, kernel: Kernel) -> None:
        self._kernel = kernel = as_kernel(kernel)
        self._torch_kernel = kernel.array_api == "torch"  # read on every solve
        #: The spec's rule for minimisation-form costs that no kernel may see as they
        #: are (`Spec.cost_floor`: a path's negative costs on a graph with cycles), applied
        #: to the kernel's costs in `_run` and `solve_batch`'s hot path; None where there
        #: is none, or where the kernel `checks_values` and so applies it itself in the
        #: read it makes anyway (a second read of a device tensor would be a second
        #: host synchronisation).
        self.cost_floor = None if kernel.checks_values else self.spec.cost_floor()

    @property
    def backend(self) -> str:
        """The backend's name; under ``"auto"``'s race (`combolayer.backends.race`) the one
        solving whole batches now: the first-ranked, then the winner."""
        return self._kernel.current_backend or self._backend

    @backend.setter
    def backend(self, name: str) -> None:
        self._backend = name

    @property
    def backend_reason(self) -> str:
        """Why this backend solves: named by the caller, its place in ``"auto"``'s ranking,
        or the race's winner and its times (set by `make_solver`)."""
        return self._kernel.backend_reason or self.choice_reason

    def __repr__(self) -> str:
        return f"Solver({self.spec.label}, backend={self.backend!r})"

    def close(self) -> None:
        """Hand back the workers of this solver's executor (and of the solver it made for
        per-call rows); the next solve starts them again. Nothing to do for a serial
        solver."""
        self._kernel.close()
        if self._row_solver is not None and self._row_solver is not self:
            self._row_solver.close()

    def __reduce__(self) -> tuple:
        """Copying and pickling keep the recipe, never the solver (native models, locks
        and worker pools cannot be copied): the copy is made again from the spec and the
        backend config (`recipe`, `rebuild_solver`), and adopts the race's winner where
        the backend races (`Kernel.outcome`). The layer and the losses copy their solvers
        so."""
        if self.recipe is None:
            raise InputTypeError(f"{self!r} was built by hand, not by make_solver, so it has no "
                            "recipe to copy or pickle it with; set its recipe, or build it "
                            "with cl.make_solver(spec, backend)")
        return rebuild_solver, (self.recipe, self._kernel.outcome())

    def solve(self, costs: Any, return_aux: bool = False, A: Any = None, b: Any = None,
              known_cost: Any = None, return_status: bool = False) -> Any:
        """``argmin`` (``argmax`` for ``sense="max"``) of ``<costs, y> + <known_cost, x>``
        over the feasible set (``x = concat(y, aux)``; no known cost: ``<costs, y>``).

        Args:
            costs: ``(*batch, *cost_shape)``, numpy or torch (the solutions come back
                as the same kind).
            return_aux: also return the auxiliaries: ``(y, aux)``, ``aux`` of shape
                ``(*batch, num_aux)``, the same kind, dtype and device as ``y``.
            A: rows ``A x <= b`` added for this call (`combolayer.backends.rows`):
                ``(*batch, m, num_vars)`` or ``(m, num_vars)``. An instance they leave
                infeasible raises `InfeasibleError`, or under
                ``BackendConfig(on_infeasible="flag")`` comes back as zeros with the
                status ``"infeasible"`` (``return_status``), with one warning.
            b: their right-hand sides, ``(*batch, m)`` or ``(m,)``.
            known_cost: a known cost for this call, ``(*batch, num_vars)`` or
                ``(num_vars,)`` in the spec's sense, added to the spec's own
                (`check_known_cost`).
            return_status: also return each instance's status, last: ``(y, status)``
                or ``(y, aux, status)``, ``status`` a tuple over the flattened batch
                (row-major) of ``"optimal"``, ``"time limit"`` and the other limits (the
                best feasible solution found when the limit hit), ``"inaccurate"``,
                ``"infeasible"`` (per-call rows, ``on_infeasible="flag"``) or
                ``"pooled"`` (answered from a solution pool, ``solve_ratio < 1``).

        Returns:
            The solutions ``y``, of the costs' kind, shape, dtype and device (float64
            for integer or bool costs); with
            ``return_aux`` and ``return_status``, a tuple ``(y, aux, status)`` of those
            asked for, in that order.

        Raises:
            ValueError: costs, rows or a known cost of the wrong shape, or not finite.
            InfeasibleError: no feasible solution (the spec, or an instance's per-call
                rows under ``on_infeasible="raise"``).
            SolverError: unbounded, a limit hit before any feasible solution, a solver
                failure, or under ``on_limit="raise"`` an instance not solved to
                optimality.
        """
        is_torch = isinstance(costs, torch.Tensor)
        if transforms_active():  # torch.func: vmap refused before any check
            check_not_vmapped(costs, A, b, known_cost)
        dtype = None  # costs solved in float64 that are not: the dtype the solutions go back to
        if not is_torch:
            costs = np.asarray(costs)
            if costs.dtype == object and _real_numbers(costs):  # checked as numbers: NaN too
                costs = costs.astype(np.float64)
            check_costs(self.spec, costs)  # before the cast, which would drop imaginary parts
            if costs.dtype != np.float64 and costs.dtype.kind == "f":
                dtype = costs.dtype
            costs = costs.astype(np.float64, copy=False)
        else:
            if not (costs.is_floating_point() or costs.is_complex()):
                costs = costs.to(torch.float64)  # integer or bool costs: float64 solutions
            check_costs(self.spec, costs)
            if costs.dtype in HALF_PRECISION or (
                    known_cost is not None and costs.dtype != torch.float64):
                # a known cost is added in float64 (as the layer does): float32 would tie
                # 1e8 and 1e8 + 1; half-precision solutions are checked as they go back
                dtype, costs = costs.dtype, costs.double()
        rows = None
        if A is not None or b is not None:
            batch = tuple(costs.shape[: costs.ndim - len(self.cost_shape)])
            check_rows(self.spec.label, self.num_vars, batch, A, b)
            rows = rows_for(A, b, batch)
            if not is_torch:
                rows = rows.numpy()
        known = None
        if known_cost is not None:
            batch = tuple(costs.shape[: costs.ndim - len(self.cost_shape)])
            known = self.sign * check_known_cost(self.spec.label, self.num_vars, batch,
                                                 known_cost, costs)
        # only what was given: a wrapper's solve_min binds its own (`SolverWrapper.solve`)
        options = {name: value for name, value in (("rows", rows), ("known", known))
                   if value is not None}
        statuses: list[str] | None = [] if return_status else None
        out = self.solve_min(self.sign * costs, return_aux=return_aux, statuses=statuses,
                             **options)
        if dtype is not None:
            out = cast_solutions(self, out, dtype)
        if not return_status:
            return out
        return (*out, tuple(statuses)) if return_aux else (out, tuple(statuses))

    def solve_min(self, costs: Any, return_aux: bool = False, rows: Rows | None = None,
                  known: Any = None, statuses: list[str] | None = None) -> Any:
        """Minimise ``<costs, y>`` (plus the known cost, sense-folded) for already
        sense-folded costs; no input checks.

        ``known``, optional, is a per-call known cost in minimisation form, of the kind
        of ``costs`` and broadcastable to ``(*batch, num_vars)`` (`fold_known`).

        Takes a numpy array or a torch tensor of shape ``(*batch, *cost_shape)``
        and returns the same kind, shape, dtype and device; with ``return_aux``,
        ``(y, aux)`` with ``aux`` of shape ``(*batch, num_aux)``. ``rows``: per-call rows
        (`Rows`, one entry per instance of the flattened batch, see `RowBound`).
        ``statuses``, optional, is the caller's list that each instance's status is
        added to (`Solver.solve`'s ``return_status``).
        """
        if isinstance(costs, np.ndarray):  # solved as a float64 tensor sharing its memory
            costs = torch.from_numpy(np.require(costs, np.float64, ["C", "W"]))
            known = None if known is None else torch.as_tensor(np.asarray(known, np.float64))
            out = self.solve_min(costs, return_aux, rows, known, statuses)
            return tuple(part.numpy() for part in out) if return_aux else out.numpy()
        if wrapped(costs) or (rows is not None and wrapped(rows.A)):
            # Under a torch.func transform (grad; vmap is refused): the solve is hidden from
            # it, on the tensors it tracks and with its dispatch off (a wrapped tensor has no
            # storage to read, and each op on a tracked one is wrapped again). The answer is
            # a constant to the transform, as to autograd: the estimators' shells carry the
            # gradient.
            if rows is not None:
                rows = dataclasses.replace(rows, A=tracked(rows.A), b=tracked(rows.b),
                                           index=tracked(rows.index))
            with outside_transforms():
                return self.solve_min(tracked(costs), return_aux, rows, tracked(known),
                                      statuses)
        shape = costs.shape
        batch = tuple(shape[: len(shape) - len(self.cost_shape)])
        costs, aux_known = self.fold_known(costs, known)
        if costs.numel() == 0:
            y = costs * 0  # nothing to solve: no kernel sees an empty batch
            return (y, costs.new_zeros((*batch, self.num_aux))) if return_aux else y
        # only the options asked for: a subclass's solve_batch may take fewer
        options = {key: value for key, value in (("return_aux", return_aux), ("rows", rows),
                                                 ("aux_known", aux_known),
                                                 ("statuses", statuses))
                   if value is not None and value is not False}
        out = self.solve_batch(costs.detach().reshape(-1, self.num_outputs), **options)
        if not return_aux:
            return out.reshape(shape)
        return out[0].reshape(shape), out[1].reshape(*batch, self.num_aux)

    def solve_batch(self, costs: torch.Tensor, start: np.ndarray | None = None,
                    return_aux: bool = False, rows: Rows | None = None,
                    aux_known: torch.Tensor | None = None,
                    statuses: list[str] | None = None) -> Any:
        """`solve_min` of a ``(B, N)`` tensor with ``B >= 1`` that needs no gradient,
        with nothing else looked at: the layer's hot path, where every call counts.
        ``start``, ``(B, N)`` candidate outputs, is passed on as a MIP start where the
        kernel `takes_start` (see `RowKernel.__call__`), and dropped elsewhere.
        ``return_aux`` returns ``(y, aux)``, ``aux`` ``(B, num_aux)``. ``aux_known``,
        ``(B, num_aux)``: a per-call known cost on the auxiliaries (`fold_known`).
        ``statuses``: as in `solve_min`."""
        if (self._lean and rows is None and start is None
                and not return_aux and aux_known is None and costs.is_cpu):
            # The layer's hot path: the kernel called from here, one frame below the
            # estimator's node (what `_full_batch` and `_run` do for these costs).
            torch_kernel = self._torch_kernel
            flat = costs if torch_kernel else costs.to(torch.float64).numpy()
            if self.cost_floor is not None:
                flat = self.cost_floor(flat)
            y = self._settle(self._kernel.with_statuses(flat), None, statuses)
            if not torch_kernel:
                y = torch.from_numpy(y)
            return y if y.dtype is costs.dtype else y.to(costs.dtype)
        full = return_aux or self.known is not None or aux_known is not None
        x = self._settle(self._full_batch(costs, start, full, rows) if aux_known is None
                         else self._full_batch(costs, start, full, rows, aux_known), rows,
                         statuses)
        if not full:
            return x
        y, aux = self._split(x)
        y = y.contiguous()
        return (y, aux) if return_aux else y

    def _full_batch(self, costs: torch.Tensor, start: np.ndarray | None = None,
                    full: bool = False, rows: Rows | None = None,
                    aux_known: Any = None) -> Solved:
        """The solutions of ``(B, N)`` minimisation costs as a tensor on the costs'
        device and dtype, with their instances' statuses (`Solved`; the public call settles them,
        `_settle`): ``(B, N)`` outputs, or with ``full`` the whole solutions
        ``(B, num_vars)`` (the known cost, if any, is always counted: a spec with one
        is solved full-width; so is a call with ``aux_known``, a per-call known cost on the
        auxiliaries, ``(B, num_aux)``). `CachedSolver` overrides this."""
        if rows is not None and not self._kernel.takes_rows:
            return self.row_solver()._full_batch(costs, start, full, rows, aux_known)
        if self.device_route is not None and not costs.is_cpu:
            return self.device_route.solver(self)._full_batch(costs, start, full, rows,
                                                              aux_known)
        if not self._kernel.takes_start:
            start = None
        wide = full or self.known is not None or aux_known is not None
        on_device = not costs.is_cpu  # check_costs left the values to here
        if self._torch_kernel:
            if on_device and not self._kernel.checks_values:
                check_values(self.spec, costs)
            # a known cost is added in float64, as for a host kernel: float32 ties 1e8, 1e8 + 1
            solved = self._run(self._kernel,
                               self.widen(costs.double(), aux_known) if wide else costs,
                               rows=None if rows is None else rows.torch(costs))
            y = solved.values
        else:
            # one copy at most: none for float64 CPU costs, which numpy shares
            flat = costs.to("cpu", torch.float64)
            if on_device:  # the costs alone, as check_costs checks them on the CPU
                check_values(self.spec, flat)
            flat = (self.widen(flat, aux_known) if wide else flat).numpy()
            solved = self._run(self._kernel, flat, start,
                               None if rows is None else rows.numpy())
            y = torch.from_numpy(solved.values)
        if wide:
            self._check_width(y)
        # get_device() compares ints (-1 on the CPU) without building torch.device objects
        if y.dtype is not costs.dtype or y.get_device() != costs.get_device():
            y = y.to(costs)
        return Solved(y, solved.statuses)

    def row_solver(self) -> Solver:
        """The solver for calls with per-call rows: this one when its kernel takes them,
        else one compiled (once, on first use) for the best backend that does."""
        if self._kernel.takes_rows:
            return self
        if self._row_solver is None:
            if self.row_fallback is None:
                raise BackendUnavailable(
                    f"backend {self.backend!r} cannot take per-call rows A x <= b for "
                    f"{self.spec.label}; backends that can: highs, scip, gurobi, cvxpy, "
                    "enumerate (small binary problems)")
            self._row_solver = self.row_fallback()
        return self._row_solver

    def bind_rows(self, A: Any, b: Any) -> RowBound:
        """This solver with the rows ``A x <= b`` bound to every solve (`RowBound`)."""
        return RowBound(self, A, b)

    def widen(self, costs: torch.Tensor, aux_known: Any = None) -> torch.Tensor:
        """``(B, num_vars)`` minimisation costs for ``(B, N)`` ones: the given costs on
        the outputs, zero on the auxiliaries, plus the sense-folded known cost, and
        ``aux_known`` ``(B, num_aux)`` (a per-call known cost there) when given."""
        out = costs.new_zeros((costs.shape[0], self.num_vars))
        out[:, : self.num_outputs] = costs
        if aux_known is not None:
            out[:, self.num_outputs :] = torch.as_tensor(aux_known).to(out)
        if self.known is not None:
            out += self.known_like(out)
        return out

    def fold_known(self, costs: torch.Tensor, known: Any) -> tuple[torch.Tensor, Any]:
        """Where a per-call known cost goes, the one place: ``known`` (minimisation form,
        broadcastable to ``(*batch, num_vars)``) on the outputs is a shift of the costs
        the solver sees, added here; on the auxiliaries it must reach the kernel, and is
        returned as ``(B, num_aux)`` (flattened batch), or None where it is zero there.
        Returns ``(costs + known[..., :N], aux_known)``."""
        if known is None:
            return costs, None
        k = len(self.cost_shape)
        batch = tuple(costs.shape[: costs.ndim - k])
        n = self.num_outputs
        known = torch.as_tensor(known).to(costs).expand(*batch, self.num_vars)
        on_aux = known[..., n:]
        costs = costs + known[..., :n].reshape(costs.shape)
        if not bool(on_aux.any()):
            return costs, None
        return costs, on_aux.reshape(-1, self.num_aux)

    def bind_known(self, known: Any) -> KnownBound:
        """This solver with a per-call known cost (minimisation form, ``(*batch,
        num_vars)``) bound to every solve (`KnownBound`)."""
        return KnownBound(self, known)

    @property
    def counts_known(self) -> bool:
        """Whether solves count a known cost: the spec's here (`KnownBound`: a call's)."""
        return self.known is not None

    def weighs_aux(self, known: Any = None) -> bool:
        """Whether the known cost of a solve weighs the auxiliaries (is non-zero past the
        outputs): the spec's, or ``known``, a call's (``(*batch, num_vars)``, either sense),
        when given. Counting it then needs the solution's auxiliaries, and no rescaling
        of the costs keeps the solution."""
        n = self.num_outputs
        if self.known is not None and self.known[n:].any():
            return True
        return known is not None and bool((known[..., n:] != 0).any())

    def known_like(self, like: torch.Tensor, folded: bool = True) -> torch.Tensor | None:
        """The known cost ``(num_vars,)`` as a tensor on ``like``'s device and dtype, or
        None when the spec has none (`known`). ``folded``: in minimisation form
        (``sign * known_cost``, as `known`); else in the spec's own sense. Copied to
        each device and dtype once and kept (the losses and metrics read it per batch):
        the tensor is shared, so callers must not write into it."""
        if self.known is None:
            return None
        key = (like.device, like.dtype, folded)
        known = self._known_on.get(key)
        if known is None:
            values = self.known if folded else self.sign * self.known
            # kept: made where no torch.func transform wraps it
            with outside_transforms():
                known = torch.from_numpy(values).to(device=like.device, dtype=like.dtype)
            self._known_on[key] = known
        return known

    def largest_value(self, aux: bool = False) -> float:
        """`Spec.largest_output` (with ``aux``, of every variable), read from the spec once:
        a half-precision call asks on every call (`cast_solutions`), and the spec's
        canonical form is found by its JSON."""
        largest = self._largest.get(aux)
        if largest is None:
            largest = self._largest[aux] = self.spec.largest_output(aux)
        return largest

    def _split(self, x: Any) -> tuple[Any, Any]:
        return x[:, : self.num_outputs], x[:, self.num_outputs :]

    def _check_width(self, x: Any) -> None:
        if x.shape[-1] != self.num_vars:
            raise SolverError(
                f"backend {self.backend!r} returned {x.shape[-1]} values per solution for "
                f"{self.spec.label} where {self.num_vars} were asked (outputs and auxiliaries): "
                "it cannot solve with a known cost or return the auxiliaries; use one of "
                "'highs', 'scip', 'gurobi', 'cvxpy'")

    def known_value(self, y: Any, aux: Any | None = None) -> Any:
        """``<known_cost, concat(y, aux)>`` per instance (the spec's sense, not folded),
        for ``y`` of shape ``(*batch, *cost_shape)`` and ``aux`` ``(*batch, num_aux)``;
        0 without a known cost. ``aux`` may be left out when the known cost is zero
        on the auxiliaries."""
        k = len(self.cost_shape)
        is_torch = isinstance(y, torch.Tensor)
        if self.known is None:
            batch = tuple(y.shape[: y.ndim - k])
            return y.new_zeros(batch) if is_torch else np.zeros(batch)
        n = self.num_outputs
        flat = y.reshape(*y.shape[: y.ndim - k], n)
        # on tensors, the known cost copied to their device once (no host copy per call)
        on_y = (self.known_like(flat, folded=False) if is_torch
                else self.sign * self.known)[:n]
        value = (flat * on_y).sum(-1)
        if not self.weighs_aux():
            return value
        if aux is None:
            raise InputError(f"{self.spec.label} has a known cost on its auxiliaries: pass their "
                             "values too (aux, from solve(..., return_aux=True)) to count it")
        on_aux = (self.known_like(aux, folded=False) if is_torch
                  else self.sign * self.known)[n:]
        return value + (aux * on_aux).sum(-1)
