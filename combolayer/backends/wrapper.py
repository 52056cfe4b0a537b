"""Solver wrappers: what every one does the same way, done once, and the two that
bind a call's data, `RowBound` (per-call rows) and `KnownBound` (a per-call known cost).

A wrapper (`KnownBound`, `RowBound`, `Recorder`, `ClipNegatives`) changes some of a
solver's calls and is the solver for everything else. Binding rows or a known cost
to a wrapper wraps the wrapper, so what it changes stays in force for those solves.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import InputError
from .rows import Rows, rows_for


class SolverWrapper:
    """``solver`` (a `Solver` or a wrapper of one), with the calls a subclass defines
    changed: every other attribute is the solver's."""

    def __init__(self, solver: Any) -> None:
        self._solver = solver

    def __getattr__(self, name: str) -> Any:
        # dunders are looked up on the class, and copy/pickle probe for them before
        # __init__ has set _solver
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.__dict__["_solver"], name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._solver!r})"

    def solve(self, costs: Any, *args: Any, **kwargs: Any) -> Any:
        """`Solver.solve` (its checks, the objective's sense) through this wrapper's
        ``solve_min``, so that what the wrapper changes holds for a public call too."""
        solver = self._solver
        while isinstance(solver, SolverWrapper):
            solver = solver._solver
        return type(solver).solve(self, costs, *args, **kwargs)

    def bind_rows(self, A: Any, b: Any) -> RowBound:
        """This wrapper with the rows ``A x <= b`` bound to every solve (`RowBound`)."""
        return RowBound(self, A, b)

    def bind_known(self, known: Any) -> KnownBound:
        """This wrapper with a per-call known cost (minimisation form) bound to every
        solve (`KnownBound`)."""
        return KnownBound(self, known)


class RowBound(SolverWrapper):
    """A solver (or a wrapper of one) with a call's rows bound to it: ``solve_min(costs)``
    solves with the rows ``A x <= b`` broadcast onto the costs' batch (trailing axes
    aligned, so a leading sample axis is fine). Everything else is the solver's."""

    def __init__(self, solver: Any, A: Any, b: Any) -> None:
        super().__init__(solver)
        self.A = torch.as_tensor(A).detach()
        self.b = torch.as_tensor(b).detach()

    def __repr__(self) -> str:
        return f"RowBound({self._solver!r}, m={self.A.shape[-2]})"

    def bind_rows(self, A: torch.Tensor, b: torch.Tensor) -> RowBound:
        """The same solver with the rows ``A x <= b`` bound instead of these."""
        return RowBound(self._solver, A, b)

    def bind_known(self, known: Any) -> RowBound:
        """These rows over the solver with ``known`` bound (`KnownBound` under the rows,
        the order the estimators build; a known cost bound there already is replaced)."""
        return RowBound(self._solver.bind_known(known), self.A, self.b)

    def solve_min(self, costs: Any, **kwargs: Any) -> Any:
        if kwargs.pop("rows", None) is not None:
            raise InputError("this solver has per-call rows bound to it (bind_rows): pass "
                             "the call's rows A, b to bind_rows, not to the solve as well")
        batch = tuple(costs.shape[: costs.ndim - len(self._solver.cost_shape)])
        rows = rows_for(self.A, self.b, batch)
        return self._solver.solve_min(costs, rows=rows, **kwargs)

    def solve_batch(self, costs: torch.Tensor, start: Any = None, **kwargs: Any) -> torch.Tensor:
        """`solve_min` of a ``(B, N)`` batch: ``B`` is a multiple of the rows' batch size
        (instance ``i`` takes entry ``i % count``, and is reported as that entry)."""
        rows = rows_for(self.A, self.b, tuple(self.A.shape[:-2]))
        count = len(rows.origin)
        if costs.shape[0] % count:
            raise InputError(f"{costs.shape[0]} instances are not a multiple of the {count} "
                             "entries of the per-call rows")
        index = torch.arange(costs.shape[0], device=rows.A.device) % count
        return self._solver.solve_batch(costs, start=start, rows=Rows(
            rows.A, rows.b, rows.index[index], np.tile(rows.origin, costs.shape[0] // count)),
            **kwargs)


class KnownBound(SolverWrapper):
    """A solver (or a wrapper of one) with a call's known cost bound to it, as `RowBound`
    binds rows (the two nest): ``solve_min`` solves with ``known`` (minimisation form,
    ``(*batch, num_vars)``) broadcast onto the costs' batch, and `known_value` counts it."""

    #: A known cost is counted (the call's, whether or not the spec has one).
    counts_known = True

    def __init__(self, solver: Any, known: Any) -> None:
        super().__init__(solver)
        self.instance_known = known.detach() if isinstance(known, torch.Tensor) else known
        #: Whether a known cost weighs the auxiliaries (read once, not per call).
        self._weighs_aux = solver.weighs_aux(self.instance_known)

    def bind_known(self, known: Any) -> KnownBound:
        """The same solver with ``known`` bound instead of this known cost."""
        return KnownBound(self._solver, known)

    def weighs_aux(self, known: Any = None) -> bool:
        """`Solver.weighs_aux`, counting the bound known cost too."""
        return self._weighs_aux or self._solver.weighs_aux(known)

    def solve_min(self, costs: Any, **kwargs: Any) -> Any:
        known = self.instance_known
        if isinstance(costs, torch.Tensor):
            known = torch.as_tensor(known).to(costs)
        given = kwargs.pop("known", None)
        if given is not None:  # a known cost of the call's own, added to the bound one
            known = known + given
        return self._solver.solve_min(costs, known=known, **kwargs)

    def solve_batch(self, costs: torch.Tensor, start: Any = None, **kwargs: Any) -> Any:
        """`solve_min` of a ``(B, N)`` batch: ``B`` is a multiple of the known cost's
        batch size (instance ``i`` takes entry ``i % count``)."""
        known = torch.as_tensor(self.instance_known).to(costs)
        known = known.reshape(-1, known.shape[-1])
        if costs.shape[0] % known.shape[0]:
            raise InputError(f"{costs.shape[0]} instances are not a multiple of the "
                             f"{known.shape[0]} entries of the per-call known cost")
        known = known.repeat(costs.shape[0] // known.shape[0], 1)
        costs, aux_known = self.fold_known(costs, known)
        if aux_known is not None:
            kwargs["aux_known"] = aux_known
        return self._solver.solve_batch(costs, start=start, **kwargs)

    def known_value(self, y: Any, aux: Any | None = None) -> Any:
        """The solver's `known_value` plus ``<known, concat(y, aux)>`` per instance, in
        the spec's sense (``aux`` may be left out where the bound cost is zero on the
        auxiliaries)."""
        solver = self._solver
        k = len(solver.cost_shape)
        n = solver.num_outputs
        flat = y.reshape(*y.shape[: y.ndim - k], n)
        known = self.instance_known
        if isinstance(y, torch.Tensor):
            known = torch.as_tensor(known).to(flat)
        value = solver.known_value(y, aux) + solver.sign * (flat * known[..., :n]).sum(-1)
        if not self._weighs_aux:
            return value
        if aux is None:
            raise InputError(f"the per-call known cost of {solver.spec.label} weighs its "
                             "auxiliaries: pass their values too (aux, from "
                             "solve(..., return_aux=True)) to count it")
        return value + solver.sign * (aux * known[..., n:]).sum(-1)


def with_sample_axis(solver: Any) -> Any:
    """``solver`` with the rows and known cost bound to it (`RowBound`, `KnownBound`, the
    outermost wrappers) given a size-1 axis before their own last axes, so that they
    broadcast onto costs whose batch ends in a sample axis, ``(*batch, S, *cost_shape)``:
    each instance's samples solved one after another, under the instance's rows."""
    if isinstance(solver, RowBound):
        return RowBound(with_sample_axis(solver._solver), solver.A[..., None, :, :],
                        solver.b[..., None, :])
    if isinstance(solver, KnownBound):
        return KnownBound(with_sample_axis(solver._solver), solver.instance_known[..., None, :])
    return solver
