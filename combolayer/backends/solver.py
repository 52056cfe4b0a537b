"""The compiled solver: one value with ``solve(costs)``, whatever the backend."""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from ..errors import SolverError
from ..specs.base import Spec
from .outcome import OPTIMAL, record_all, recording, row_statuses, worst


@runtime_checkable
class Kernel(Protocol):
    """What a backend compiles a problem into.

    It minimises: given a ``(B, N)`` batch of minimisation costs it returns the
    ``(B, N)`` optimal outputs. ``array_api`` says whether it takes float64
    numpy arrays (``"numpy"``) or torch tensors on any device (``"torch"``).
    """

    array_api: str

    def __call__(self, costs: Any) -> Any: ...


class RowKernel:
    """A numpy kernel for solvers that take one cost vector at a time.

    Subclasses set ``form`` and define ``solve_one(cost) -> x`` (solver values,
    outputs first); the loop and the rounding of outputs are done here, once.

    A kept solver model is not thread-safe (two threads sharing one SCIP model
    crashed the process; HiGHS returned garbage), so each kernel holds a lock:
    threads that share a layer take turns. ``executor="thread"`` gives every
    worker thread a model of its own instead.
    """

    array_api = "numpy"
    form: Any
    #: Whether ``solve_one`` takes ``start=`` (a MIP start); others ignore ``start``.
    takes_start = False

    def __new__(cls, *args: Any, **kwargs: Any) -> RowKernel:
        kernel = super().__new__(cls)
        kernel._lock = threading.Lock()
        return kernel

    def solve_one(self, cost: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def __call__(self, costs: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
        """The ``(B, N)`` optimal outputs for ``(B, N)`` minimisation costs.

        ``start``, optional, is a ``(B, N)`` array of candidate outputs, one per row
        (the instance's last solution, or a solution pool's best under its cost),
        given to the solver as a MIP start where the kernel ``takes_start``. It is
        a hint: the answer stays optimal whether or not the start is feasible.
        """
        n = costs.shape[1]
        out = np.empty_like(costs)
        statuses = []
        starts = (np.asarray(start, dtype=np.float64).reshape(costs.shape)
                  if start is not None and self.takes_start else None)
        with self._lock, recording() as log:
            for b, row in enumerate(costs):
                solves = len(log)
                out[b] = (self.solve_one(row) if starts is None
                          else self.solve_one(row, start=starts[b]))[:n]
                # one status per row, however many solves the row took
                statuses.append(worst(log[solves:]))
        record_all(statuses)
        return self.form.outputs(out)


@dataclass(frozen=True)
class FunctionKernel:
    """A kernel that is just a function on a ``(B, N)`` batch of minimisation costs."""

    function: Callable
    array_api: str = "numpy"

    def __call__(self, costs: Any) -> Any:
        return self.function(costs)


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


def check_costs(spec: Spec, costs: Any, name: str = "costs") -> None:
    """Raise ValueError on a wrong trailing shape, non-real dtype, NaN/inf, or entries of
    magnitude MAX_COST or more (one reduction when all is well)."""
    shape = tuple(costs.shape)
    cost_shape = spec.cost_shape
    k = len(cost_shape)
    if shape[len(shape) - k :] != cost_shape or len(shape) < k:
        raise ValueError(
            f"{name} has trailing shape {shape[len(shape) - k :] if len(shape) >= k else shape} "
            f"but {spec.label} expects {cost_shape} (got full shape {shape})"
        )
    is_torch = isinstance(costs, torch.Tensor)
    if costs.is_complex() if is_torch else np.iscomplexobj(costs):
        raise ValueError(f"{name} must be real, got complex dtype {costs.dtype} for {spec.label}")
    if costs.numel() == 0 if is_torch else costs.size == 0:
        return
    # One reduction and one number read back in the usual case: the Euclidean norm
    # bounds every entry (half of MAX_COST leaves room for its rounding), and NaN or
    # inf make it NaN or inf, which fail the comparison.
    if is_torch:
        if float(torch.linalg.vector_norm(costs.detach())) < 0.5 * MAX_COST:
            return
        largest = float(costs.detach().abs().max())
    else:
        largest = float(np.abs(costs).max())
    if largest < MAX_COST:
        return
    if not all_finite(costs):
        raise ValueError(f"{name} must be finite, got NaN or inf entries for {spec.label}")
    raise ValueError(f"{name} must be below {MAX_COST:g} in magnitude for {spec.label}, "
                     f"got {largest:.3g}: rescale the costs")


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


class Solver:
    """A problem compiled for one backend: ``solve(costs)`` returns the optimal solutions.

    Numpy in gives numpy out, torch in gives torch out on the input's device and
    dtype; any leading batch shape is allowed.

    A row the solver did not solve to optimality (a time limit hit with a feasible
    solution in hand, or a solution the solver calls inaccurate) is never silent:
    each call that returns one warns once (a ``RuntimeWarning`` counting the rows),
    or raises `SolverError` under ``BackendConfig(on_limit="raise")``, whatever
    the executor; and `last_status` names the status of every row.
    """

    def __init__(self, spec: Spec, kernel: Kernel, backend: str, config: Any) -> None:
        self.spec = spec
        self.kernel = kernel
        self.backend = backend
        self.config = config
        self.sign = 1.0 if spec.sense == "min" else -1.0
        self.cost_shape = spec.cost_shape
        self.num_outputs = math.prod(spec.cost_shape)
        self._last = threading.local()
        self.on_limit = getattr(config, "on_limit", "warn")

    @property
    def last_status(self) -> tuple[str, ...]:
        """The status of each row (flattened batch, row-major) of this thread's most
        recent solve with this solver: ``"optimal"``, ``"time limit"`` (the best feasible
        solution found when the time limit hit) or ``"inaccurate"``; ``()`` before the
        first. Per thread, so threads that share a solver each read their own."""
        return getattr(self._last, "status", ())

    def _run(self, kernel: Callable, costs: Any, start: np.ndarray | None = None) -> Any:
        """``kernel(costs)`` on a ``(B, N)`` batch, keeping each row's status and
        warning (or raising) when one is not optimal; ``start`` goes to a kernel
        that `takes_start`."""
        with recording() as log:
            y = kernel(costs) if start is None else kernel(costs, start=start)
        statuses = row_statuses(log, costs.shape[0])
        self._last.status = tuple(statuses)
        if statuses and worst(statuses) != OPTIMAL:
            self._not_optimal(statuses)
        return y

    def _not_optimal(self, statuses: list[str]) -> None:
        bad = [status for status in statuses if status != OPTIMAL]
        kinds = ", ".join(sorted(set(bad)))
        message = (f"{self.backend}: {len(bad)} of {len(statuses)} rows of {self.spec.label} "
                   f"were not solved to optimality ({kinds}): their solutions are feasible but "
                   "may not be optimal; see solver.last_status for which")
        if self.on_limit == "raise":
            raise SolverError(message + "; BackendConfig(on_limit='raise') makes this an error")
        warnings.warn(message + "; raise BackendConfig.time_limit, or set on_limit='raise' to "
                      "make this an error", RuntimeWarning, stacklevel=4)

    @property
    def kernel(self) -> Kernel:
        return self._kernel

    @kernel.setter
    def kernel(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self._torch_kernel = kernel.array_api == "torch"  # read on every solve

    def __repr__(self) -> str:
        return f"Solver({self.spec.label}, backend={self.backend!r})"

    def solve(self, costs: Any) -> Any:
        """``argmin`` (``argmax`` for ``sense="max"``) of ``<costs, y>`` over the feasible set."""
        is_torch = isinstance(costs, torch.Tensor)
        if not is_torch:
            costs = np.asarray(costs)
            check_costs(self.spec, costs)  # before the cast, which would drop imaginary parts
            costs = costs.astype(np.float64, copy=False)
        else:
            check_costs(self.spec, costs)
        y = self.solve_min(self.sign * costs)
        return y

    def solve_min(self, costs: Any) -> Any:
        """Minimise ``<costs, y>`` for already sense-folded costs; no input checks.

        Takes a numpy array or a torch tensor of shape ``(*batch, *cost_shape)``
        and returns the same kind, shape, dtype and device.
        """
        shape = costs.shape
        if costs.size == 0 if isinstance(costs, np.ndarray) else costs.numel() == 0:
            return costs * 0  # nothing to solve: no kernel sees an empty batch
        if isinstance(costs, torch.Tensor):
            return self.solve_rows(costs.detach().reshape(-1, self.num_outputs)).reshape(shape)
        flat = np.ascontiguousarray(costs, dtype=np.float64).reshape(-1, self.num_outputs)
        if self._torch_kernel:
            y = self._run(self.kernel, torch.from_numpy(flat)).numpy()
        else:
            y = self._run(self.kernel, flat)
        return np.asarray(y, dtype=np.float64).reshape(shape)

    def solve_rows(self, costs: torch.Tensor, start: np.ndarray | None = None) -> torch.Tensor:
        """`solve_min` of a ``(B, N)`` tensor with ``B >= 1`` that needs no gradient,
        with nothing else looked at: the layer's hot path, where every call counts.
        ``start``, ``(B, N)`` candidate outputs, is passed on as a MIP start where the
        kernel `takes_start` (see `RowKernel.__call__`), and dropped elsewhere."""
        if not getattr(self._kernel, "takes_start", False):
            start = None
        if self._torch_kernel:
            y = self._run(self._kernel, costs)
        else:
            # one copy at most: none for float64 CPU costs, which numpy shares
            y = torch.from_numpy(self._run(self._kernel, costs.to("cpu", torch.float64).numpy(),
                                           start))
        # get_device() compares ints (-1 on the CPU) without building torch.device objects
        if y.dtype is costs.dtype and y.get_device() == costs.get_device():
            return y
        return y.to(costs)
