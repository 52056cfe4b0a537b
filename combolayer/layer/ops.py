"""The layer's solve as one custom operator, so that ``torch.compile`` sees one node.

A compiled graph cannot trace a solver (numpy, HiGHS, a worker pool), and a custom
operator cannot take Python objects, so a layer registers what its solve needs,
a `CompiledSolve` (estimator, solver), under an integer handle when it is
built, and the graph carries the handle:

    combolayer::solve(Tensor costs, Tensor? noise, int handle) -> Tensor
    combolayer::solve_backward(Tensor grad, Tensor costs, Tensor output, int handle) -> Tensor

``solve`` checks the costs (the values the layer leaves unchecked while it is
traced), adds the noise and runs the estimator's forward; its fake implementation
says the solution has the costs' shape, dtype and device. Its autograd formula is
the estimator's backward: traced as it is when the backward is pure torch
(``Estimator.differentiable_backward``, Identity's ``-dL/dy``), else
``solve_backward``, a second opaque node that calls the solver (Blackbox's extra
solve). Either way the estimator's saved tensors are rebuilt from the costs and
the output (``Estimator.saved_from_output``), so only estimators that can do so
(``Estimator.compiles_whole``) use these operators; the layer keeps its autograd
shells for the others, which compile with a graph break at the solve.

Only traced code uses them: eager mode keeps the layer's autograd shells, the hot
path docs/measurements/overhead.md measures.
"""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..backends.solver import check_costs
from ..estimators.base import check_upstream
from ..specs.base import Spec

_HANDLES: weakref.WeakValueDictionary[int, CompiledSolve] = weakref.WeakValueDictionary()
_NEXT = itertools.count(1)


def check_floor(spec: Spec, floor: Tensor, costs: Tensor) -> None:
    """`Spec.negative_cost_error` when an entry of ``costs`` (``(*batch,
    *cost_shape)``, the solver's input before the layer's noise) that ``floor`` (a
    flat boolean mask, `Spec.nonnegative_costs`) marks is negative."""
    given = costs.reshape(-1, spec.num_outputs)[:, floor.to(costs.device)]
    if (given < 0).any():
        b, j = (given < 0).nonzero()[0].tolist()
        raise spec.negative_cost_error(
            f"w after projection, instance {b}, value {float(given[b, j]):.4g}")


@dataclass(eq=False)
class CompiledSolve:
    """What ``combolayer::solve`` runs for one layer, found by `handle`.

    ``solver`` is the one the estimator was built on (with the layer's clipping of
    negative perturbations, or the solution cache, where the layer has them);
    ``floor`` is the mask of entries that must be non-negative, or None."""

    estimator: Any
    solver: Any
    floor: Tensor | None = None
    handle: int = field(init=False)

    def __post_init__(self) -> None:
        self.handle = next(_NEXT)
        _HANDLES[self.handle] = self

    def __call__(self, costs: Tensor, noise: Tensor | None) -> Tensor:
        """The layer's solution for minimisation costs ``costs`` plus ``noise`` (or
        None), differentiable in ``costs``: one node in a compiled graph."""
        return torch.ops.combolayer.solve(costs, noise, self.handle)

    def forward(self, costs: Tensor, noise: Tensor | None) -> Tensor:
        check_costs(self.solver.spec, costs, "w after projection")
        if self.floor is not None:
            check_floor(self.solver.spec, self.floor, costs)
        if noise is not None:
            costs = costs + noise
        # an estimator that compiles whole reads neither target nor training
        output, _ = self.estimator.forward(self.solver, costs, target=None, training=True)
        return output

    def backward(self, grad: Tensor, costs: Tensor, output: Tensor) -> Tensor:
        if self.estimator.differentiable_backward:
            saved = self.estimator.saved_from_output(costs, output)
            return self.estimator.backward(self.solver, grad, costs, *saved)
        return torch.ops.combolayer.solve_backward(grad, costs, output, self.handle)

    def solver_backward(self, grad: Tensor, costs: Tensor, output: Tensor) -> Tensor:
        check_upstream(grad)
        saved = self.estimator.saved_from_output(costs, output)
        return self.estimator.backward(self.solver, grad, costs, *saved)


def _entry(handle: int) -> CompiledSolve:
    entry = _HANDLES.get(handle)
    if entry is None:
        raise RuntimeError(f"combolayer::solve: no layer holds handle {handle} any more "
                           "(the layer was deleted); compile the model that holds it again")
    return entry


@torch.library.custom_op("combolayer::solve", mutates_args=())
def _solve(costs: Tensor, noise: Tensor | None, handle: int) -> Tensor:
    return _entry(handle).forward(costs, noise)


@_solve.register_fake
def _(costs: Tensor, noise: Tensor | None, handle: int) -> Tensor:
    return torch.empty_like(costs)


def _setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
    costs, noise, handle = inputs
    ctx.handle = handle
    # the backward sees the solver's input, as the estimators' shells save it
    ctx.save_for_backward(costs if noise is None else costs + noise, output)


def _backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
    costs, output = ctx.saved_tensors
    return _entry(ctx.handle).backward(grad, costs, output), None, None


_solve.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op("combolayer::solve_backward", mutates_args=())
def _solve_backward(grad: Tensor, costs: Tensor, output: Tensor, handle: int) -> Tensor:
    return _entry(handle).solver_backward(grad, costs, output)


@_solve_backward.register_fake
def _(grad: Tensor, costs: Tensor, output: Tensor, handle: int) -> Tensor:
    return torch.empty_like(costs)
