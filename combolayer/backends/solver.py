"""The compiled solver: one value with ``solve(costs)``, whatever the backend."""

from __future__ import annotations

import math
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from ..specs import Spec


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
    """

    array_api = "numpy"
    form: Any

    def solve_one(self, cost: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def __call__(self, costs: np.ndarray) -> np.ndarray:
        n = costs.shape[1]
        out = np.empty_like(costs)
        for b, row in enumerate(costs):
            out[b] = self.solve_one(row)[:n]
        return self.form.outputs(out)


def inner(a: Any, b: Any, num_cost_dims: int, keepdim: bool = False) -> Any:
    """``<a, b>`` over the trailing ``num_cost_dims`` axes: one value per instance
    (numpy or torch; ``keepdim`` keeps size-1 axes for broadcasting)."""
    product = a * b
    dims = tuple(range(product.ndim - num_cost_dims, product.ndim))
    if isinstance(product, torch.Tensor):
        return product.sum(dim=dims, keepdim=keepdim)
    return product.sum(axis=dims, keepdims=keepdim)


def check_costs(spec: Spec, costs: Any, name: str = "costs") -> None:
    """Raise ValueError on a wrong trailing shape or NaN/inf entries."""
    shape = tuple(costs.shape)
    k = len(spec.cost_shape)
    if shape[len(shape) - k :] != spec.cost_shape or len(shape) < k:
        raise ValueError(
            f"{name} has trailing shape {shape[len(shape) - k :] if len(shape) >= k else shape} "
            f"but {spec.label} expects {spec.cost_shape} (got full shape {shape})"
        )
    if not all_finite(costs):
        raise ValueError(f"{name} must be finite, got NaN or inf entries for {spec.label}")


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
    """

    def __init__(self, spec: Spec, kernel: Kernel, backend: str, config: Any) -> None:
        self.spec = spec
        self.kernel = kernel
        self.backend = backend
        self.config = config
        self.sign = 1.0 if spec.sense == "min" else -1.0
        self.cost_shape = spec.cost_shape
        self.num_outputs = math.prod(spec.cost_shape)

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
            costs = np.asarray(costs, dtype=np.float64)
        check_costs(self.spec, costs)
        y = self.solve_min(self.sign * costs)
        return y

    def solve_min(self, costs: Any) -> Any:
        """Minimise ``<costs, y>`` for already sense-folded costs; no input checks.

        Takes a numpy array or a torch tensor of shape ``(*batch, *cost_shape)``
        and returns the same kind, shape, dtype and device.
        """
        shape = costs.shape
        if isinstance(costs, torch.Tensor):
            flat = costs.detach().reshape(-1, self.num_outputs)
            if self._torch_kernel:
                y = self.kernel(flat)
            else:
                # one copy at most: none for float64 CPU costs, which numpy shares
                y = torch.from_numpy(self.kernel(flat.to("cpu", torch.float64).numpy()))
            if y.device != costs.device or y.dtype != costs.dtype:
                y = y.to(device=costs.device, dtype=costs.dtype)
            return y.reshape(shape)
        flat = np.ascontiguousarray(costs, dtype=np.float64).reshape(-1, self.num_outputs)
        if self._torch_kernel:
            y = self.kernel(torch.from_numpy(flat)).numpy()
        else:
            y = self.kernel(flat)
        return np.asarray(y, dtype=np.float64).reshape(shape)
