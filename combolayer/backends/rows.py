"""Per-call rows ``A x <= b``: constraints given with the costs, one set per instance.

``solver.solve(costs, A=A, b=b)`` and ``layer(w, A=A, b=b)`` add the rows
``A x <= b`` to the spec's own constraints for that call. ``A`` is
``(*batch, m, num_vars)`` or ``(m, num_vars)`` and ``b`` is ``(*batch, m)`` or
``(m,)``, where ``num_vars`` counts every variable of the spec (the N outputs,
then the auxiliaries); their batch broadcasts onto the costs' batch as torch
broadcasts (trailing axes aligned).

They are checked once, at the edge (`check_rows`), and then travel as one
`Rows` value: the distinct rows ``A (R, m, num_vars)``, ``b (R, m)`` and, for
each instance of the flattened batch, the entry it uses (``index``). A kernel
that ``takes_rows`` gets the whole batch in one call and puts each entry's rows
into its kept model in place (added, solved, taken out again), never rebuilding
it; consecutive instances with the same entry (samples of one) keep them.

`RowBound` binds a call's rows to a solver, so that every estimator and loss
that calls ``solve_min`` solves with them without knowing it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from ..errors import InputError, InputTypeError
from ..specs.base import MAX_COEFFICIENT

#: Slack on ``A x <= b`` when a solution is checked against per-call rows (the
#: solution cache, the tests): the solvers' own feasibility tolerance is 1e-6.
FEASIBILITY_TOL = 1e-6


def _host(value: Any, dtype: Any) -> np.ndarray:
    """``value`` (a tensor on any device, or array-like) as a contiguous numpy array."""
    if isinstance(value, torch.Tensor):
        value = value.detach().to("cpu").numpy()
    return np.ascontiguousarray(value, dtype=dtype)


@dataclass(frozen=True)
class Rows:
    """Per-instance rows ``A x <= b`` for a ``(B, ...)`` batch of instances.

    ``A`` is ``(R, m, num_vars)``, ``b`` is ``(R, m)`` (numpy arrays or torch
    tensors) and ``index`` is ``(B,)``: instance ``i`` is solved with
    ``A[index[i]] x <= b[index[i]]``. ``origin`` ``(B,)``, where known, is each
    instance's position in the rows' own batch as they were given (`rows_for`; the
    layer gives them broadcast to its batch, so that is the layer's instance whatever
    sample axes the solves add), kept through `take` and `subset`: what a flagged
    infeasible instance is reported as.

    ``flagged``, optional, is the caller's set that a `Solver` under
    ``on_infeasible="flag"`` adds the ``origin`` of each instance these rows leave
    infeasible to, in place of its own warning (the layer's `Recorder` gives one, and
    warns once per call); kept by `numpy`, `torch` and `take`, not sent to workers
    (`subset`).
    """

    A: Any
    b: Any
    index: Any
    origin: Any = None
    flagged: set[int] | None = field(default=None, compare=False, repr=False)

    def origins(self) -> np.ndarray:
        """``origin`` as int64 numpy (the positions ``0..B-1`` when not known)."""
        return _host(np.arange(len(self.index)) if self.origin is None else self.origin,
                     np.int64)

    def numpy(self) -> Rows:
        """The same rows as float64 numpy arrays (``index`` as int64)."""
        return replace(self, A=_host(self.A, np.float64), b=_host(self.b, np.float64),
                       index=_host(self.index, np.int64))

    def torch(self, like: torch.Tensor) -> Rows:
        """The same rows as float64 tensors on the device of ``like`` (float64 whatever
        the costs' dtype: float32 would round coefficients above 2**24 and make rows that
        an answer breaks look met)."""
        def tensor(value: Any, dtype: torch.dtype) -> torch.Tensor:
            if isinstance(value, np.ndarray):  # broadcast views are read-only: copy once
                value = torch.from_numpy(np.array(value))
            return value.to(device=like.device, dtype=dtype)

        return replace(self, A=tensor(self.A, torch.float64), b=tensor(self.b, torch.float64),
                       index=tensor(self.index, torch.long))

    def take(self, selected: Any) -> Rows:
        """The rows of the instances ``selected`` (a mask or indices into the batch)."""
        index = self.index
        origin = self.origins()[np.asarray(torch.as_tensor(selected).cpu())]
        if isinstance(index, torch.Tensor):
            return replace(self, index=index[torch.as_tensor(selected, device=index.device)],
                           origin=origin)
        return replace(self, index=np.asarray(index)[np.asarray(selected)], origin=origin)

    def subset(self, selected: Any) -> Rows:
        """The rows of the instances ``selected`` with only the entries they use (what
        a worker is sent with its chunk): numpy rows only."""
        entries, index = np.unique(np.asarray(self.index)[np.asarray(selected)],
                                   return_inverse=True)
        return Rows(np.asarray(self.A)[entries], np.asarray(self.b)[entries],
                    index.reshape(-1), self.origins()[np.asarray(selected)])


def check_rows(label: str, num_vars: int, batch: tuple[int, ...], A: Any, b: Any,
               values: bool = True) -> None:
    """Raise ValueError unless ``A``/``b`` are per-call rows for a costs batch ``batch``:
    ``A (*rows_batch, m, num_vars)``, ``b (*rows_batch, m)``, real, finite and below
    `MAX_COEFFICIENT` in magnitude (unless ``values`` is False: the layer's compiled solve
    checks them), with a batch that broadcasts onto ``batch``. The message names expected
    and got."""
    if (A is None) != (b is None):
        raise InputError(f"per-call rows need both A and b (A x <= b) for {label}, got only "
                         f"{'A' if b is None else 'b'}")
    for name, value, least in (("A", A, 2), ("b", b, 1)):
        if not isinstance(value, (torch.Tensor, np.ndarray)):
            raise InputTypeError(f"{name} must be a torch.Tensor or a numpy array, got "
                            f"{type(value).__name__}")
        if value.ndim < least:
            expected = "(*batch, m, num_vars)" if name == "A" else "(*batch, m)"
            raise InputError(f"{name} must have shape {expected} for {label}, got shape "
                             f"{tuple(value.shape)}")
        is_complex = value.is_complex() if isinstance(value, torch.Tensor) else \
            np.iscomplexobj(value)
        if is_complex:
            raise InputError(f"{name} must be real, got dtype {value.dtype}")
    if A.shape[-1] != num_vars:
        raise InputError(f"A has {A.shape[-1]} columns but {label} has {num_vars} variables "
                         f"(num_vars = N outputs + num_aux): A must be (*batch, m, "
                         f"{num_vars}), got {tuple(A.shape)}")
    if b.shape[-1] != A.shape[-2]:
        raise InputError(f"b must have one entry per row of A: A has m = {A.shape[-2]} rows, "
                         f"b has shape {tuple(b.shape)} (expected (*batch, {A.shape[-2]}))")
    A_batch, b_batch = tuple(A.shape[:-2]), tuple(b.shape[:-1])
    try:
        together = torch.broadcast_shapes(A_batch, b_batch, tuple(batch))
    except RuntimeError:
        together = None
    if together is None or tuple(together) != tuple(batch):
        raise InputError(f"the rows' batch shape (A: {A_batch}, b: {b_batch}) "
                         f"does not broadcast onto the costs' batch shape {tuple(batch)} "
                         f"for {label}")
    for name, value in (("A", A), ("b", b)) if values else ():
        check_in_range(name, value, label)


def check_in_range(name: str, value: Any, label: str) -> None:
    """``ValueError`` naming ``name`` when a call's input ``value`` (a tensor or an array:
    per-call rows, a known cost) has NaN or inf entries, or entries of magnitude
    `MAX_COEFFICIENT` or more, which the spec's own data may not have either, for
    problem ``label`` (solvers read 1e20 as infinite; SCIP raised a bare Exception)."""
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if not value.is_floating_point():  # bool and integer entries read as numbers
            value = value.double()
        largest = float(value.abs().amax()) if value.numel() else 0.0
    else:
        largest = float(np.abs(np.asarray(value, dtype=np.float64)).max(initial=0.0))
    if largest < MAX_COEFFICIENT:
        return
    if not math.isfinite(largest):  # amax keeps NaN, which fails the comparison too
        raise InputError(f"{name} must be finite, got NaN or inf entries for {label}")
    raise InputError(f"{name} must be below {MAX_COEFFICIENT:g} in magnitude for {label}, "
                     f"got {largest:.3g}: rescale it")


def rows_for(A: Any, b: Any, batch: tuple[int, ...]) -> Rows:
    """`Rows` for a costs batch of shape ``batch`` from checked ``A`` and ``b``: the
    distinct entries once, and the entry of every instance (trailing axes aligned).
    An axis along which both are expanded views (stride 0: the layer broadcasts rows
    given once for the batch) counts once, so such rows are one entry, set once. Each
    instance's ``origin`` is its position in the rows' batch as given, before that."""
    rows_batch = tuple(torch.broadcast_shapes(tuple(A.shape[:-2]), tuple(b.shape[:-1])))
    m, n = A.shape[-2], A.shape[-1]
    origin = np.broadcast_to(np.arange(math.prod(rows_batch)).reshape(rows_batch),
                             batch).reshape(-1)
    if isinstance(A, torch.Tensor) or isinstance(b, torch.Tensor):
        A = torch.as_tensor(A).detach().expand(*rows_batch, m, n)
        b = torch.as_tensor(b).detach().to(A.device).expand(*rows_batch, m)
        for axis, size in enumerate(rows_batch):
            if size > 1 and A.stride(axis) == 0 and b.stride(axis) == 0:
                A, b = A.narrow(axis, 0, 1), b.narrow(axis, 0, 1)
        # float64 whatever either's dtype (an integer A would truncate a fractional b)
        A, b = A.to(torch.float64), b.to(torch.float64)
        distinct = tuple(A.shape[:-2])
        count = math.prod(distinct)
        index = torch.arange(count, device=A.device).reshape(distinct)
        return Rows(A.reshape(count, m, n), b.reshape(count, m),
                    index.expand(batch).reshape(-1), origin)
    count = math.prod(rows_batch)
    A_flat = np.broadcast_to(A, (*rows_batch, m, n)).reshape(count, m, n)
    b_flat = np.broadcast_to(b, (*rows_batch, m)).reshape(count, m)
    return Rows(A_flat, b_flat, origin, origin)
