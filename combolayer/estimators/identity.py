"""Identity with projection (Sahoo et al., ICLR 2023): the flagship estimator."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from ..backends.solver import Solver
from ..transforms.projection import fast_apply
from .base import DifferentiableSolve, Estimator

__all__ = ["Identity"]


def _negative_identity(solver: Solver) -> type[torch.autograd.Function]:
    """Forward: the solution, solved inside (no copy of it). Backward: the negative
    identity, ``dL/dc = -dL/dy``, one op with nothing saved."""

    class _NegativeIdentity(torch.autograd.Function):
        @staticmethod
        def forward(costs: Tensor) -> Tensor:
            return solver.solve_min(costs)

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
            pass

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Tensor:
            return grad.neg()

    return _NegativeIdentity


class Identity(Estimator):
    """Identity with projection: the solver is a negative identity on the backward pass.

    ``dL/dw = -(dP/dw)^T dL/dy`` for min problems (``+`` for max); no extra solver
    call. Combine it with ``projection`` and ``noise`` on :class:`~combolayer.ComboLayer`.

    Examples:
        >>> import torch, combolayer as cl
        >>> layer = cl.ComboLayer(cl.problems.TopK(n=4, k=2), method=cl.Identity(),
        ...                       projection="none")
        >>> w = torch.tensor([3.0, 1.0, 2.0, 5.0], requires_grad=True)
        >>> y = layer(w)                      # the two largest (TopK is a max problem)
        >>> y.tolist()
        [1.0, 0.0, 0.0, 1.0]
        >>> y.backward(torch.ones(4))
        >>> w.grad.tolist()                   # +dL/dy for a max problem, no extra solve
        [1.0, 1.0, 1.0, 1.0]

    Reference: Sahoo, Paulus, Vlastelica, Musil, Kuleshov, Martius, "Backpropagation
    through Combinatorial Algorithms: Identity with Projection Works", ICLR 2023.
    """

    name: ClassVar[str] = "identity"
    differentiable_backward: ClassVar[bool] = True

    def build(self, solver: Solver) -> DifferentiableSolve:
        # The hot path of every Identity layer: the solve runs inside one autograd
        # Function whose backward is one op, applied without Function.apply's
        # argument binding (docs/performance.md), instead of the shared shell.
        negative_identity = fast_apply(_negative_identity(solver))
        solve_min = solver.solve_min

        def solve(costs: Tensor, *, target: Tensor | None = None, needs_grad: bool,
                  training: bool = True) -> Tensor:
            return negative_identity(costs) if needs_grad else solve_min(costs)

        return solve

    def forward(self, solver, costs, *, target, training):
        return solver.solve_min(costs), ()

    def backward(self, solver, grad, costs):
        return -grad
