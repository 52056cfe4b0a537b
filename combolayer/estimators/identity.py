"""Identity with projection (Sahoo et al., ICLR 2023): the flagship estimator."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from ..backends.solver import Solver
from ..func_transforms import transforms_active
from ..transforms.projection import Normalized, fast_apply
from .base import DifferentiableSolve, Estimator, ProjectedSolve

__all__ = ["Identity"]


def _negative_identity(solver: Solver) -> type[torch.autograd.Function]:
    """Forward: the solution, solved inside (no copy of it), the ``(B, N)`` costs handed
    to `Solver.solve_batch` from here. Backward: the negative identity, ``dL/dc =
    -dL/dy``, one op with nothing saved."""
    n, solve_min = solver.num_outputs, solver.solve_min
    # a wrapper (the layer's clipping of negative costs) solves through its solve_min
    solve_batch = solver.solve_batch if isinstance(solver, Solver) else None

    class _NegativeIdentity(torch.autograd.Function):
        @staticmethod
        def forward(costs: Tensor) -> Tensor:
            if solve_batch is None:
                return solve_min(costs)
            flat = costs.detach().reshape(-1, n)
            return solve_batch(flat).reshape(costs.shape) if len(flat) else costs * 0

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
            pass

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Tensor:
            return grad.neg()

    return _NegativeIdentity


def _projected_negative_identity(solver: Solver, projection: Normalized) -> ProjectedSolve:
    """The default Identity layer in one autograd node, for a normalized projection P
    acting on the flattened cost: ``apply(w, xi) -> y``, forward ``y = solve(sign *
    (P(w) + xi))``, with xi the layer's noise or None; backward ``dL/dw = -sign
    J_P(w)^T dL/dy`` in closed form (`Normalized.vjp`). Same values and gradient
    as P's node, the noise's add, the sign's ``neg`` (max problems) and
    `_negative_identity`'s node in a row.

    It runs once per training step, so it is written for few Python frames: each
    nested call is a visible share of a step (benchmarks/training_overhead.py).
    """
    n = solver.num_outputs
    single_axis = len(solver.cost_shape) == 1
    maximize = solver.sign == -1.0
    values, projected_vjp, solve_batch = projection.values, projection.vjp, solver.solve_batch

    def vjp(grad: Tensor, u: Tensor, norm: Tensor, clamped: Tensor, w: Tensor) -> Tensor:
        flat = grad if single_axis and grad.dim() == 2 else grad.reshape(u.shape)
        # dL/du: the negative identity's -dL/dy, or +dL/dy through a max problem's -u
        flat_u = flat if maximize else flat.neg()
        if torch.is_grad_enabled():  # recorded (create_graph=True): from w, in its graph
            out = projection.recorded(flat_u, u, clamped, w)
        else:
            out = projected_vjp(flat_u, u, norm, clamped)
        return out if flat is grad else out.reshape(grad.shape)

    class _ProjectedNegativeIdentity(torch.autograd.Function):
        # The old style (forward(ctx, ...)): one output, the intermediates saved on
        # ctx; measured ~3% of a PyEPO training epoch faster than returning them as
        # marked outputs, which functorch transforms need (the class below). The solve
        # is written out here, not called: the kernel sits two frames below this one.
        @staticmethod
        def forward(ctx: Any, w: Tensor, noise: Tensor | None) -> Tensor:
            flat = w if single_axis and w.dim() == 2 else w.reshape(-1, n)
            if noise is None:
                # a max problem's -u comes out of the division (vjp takes -u as u)
                u, norm, clamped = values(flat, maximize)
                costs = u
            else:
                u, norm, clamped = values(flat)
                costs = u + noise.reshape(u.shape)
                if maximize:
                    costs = costs.neg_()
            y = solve_batch(costs) if costs.shape[0] else costs * 0
            # w too, for a recorded backward (`Normalized.recorded`)
            ctx.save_for_backward(u, norm, clamped, w)
            return y if flat is w else y.reshape(w.shape)

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
            return vjp(grad, *ctx.saved_tensors), None

    class _Saved:
        """What ``_ProjectedNegativeIdentity.forward`` saves, kept for its twin below."""

        def save_for_backward(self, *saved: Tensor) -> None:
            self.saved = saved

    class _UnderTransforms(torch.autograd.Function):
        # the same node with setup_context, for functorch transforms (torch.func.grad)
        @staticmethod
        def forward(w: Tensor, noise: Tensor | None) -> tuple[Tensor, ...]:
            box = _Saved()
            y = _ProjectedNegativeIdentity.forward(box, w, noise)
            return (y, *box.saved[:3])  # w is an input, saved below

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
            _, *saved = output
            ctx.mark_non_differentiable(*saved)
            ctx.save_for_backward(*saved, inputs[0])

        @staticmethod
        def backward(ctx: Any, grad: Tensor, *_unused: Any) -> tuple[Tensor, None]:
            return vjp(grad, *ctx.saved_tensors), None

    return fast_apply(_ProjectedNegativeIdentity,
                      under_transforms=lambda w, noise: _UnderTransforms.apply(w, noise)[0])


class Identity(Estimator):
    """Identity with projection: the solver is a negative identity on the backward pass.

    ``dL/dw = -(dP/dw)^T dL/dy`` for min problems (``+`` for max); no extra solver
    call. Combine it with ``projection`` and ``noise`` on [`ComboLayer`][combolayer.ComboLayer].

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
    compiles_whole: ClassVar[bool] = True

    def build(self, solver: Solver) -> DifferentiableSolve:
        # The hot path of every Identity layer: the solve runs inside one autograd
        # Function whose backward is one op, applied without Function.apply's
        # argument binding (docs/measurements/overhead.md), instead of the shared shell.
        negative_identity = fast_apply(_negative_identity(solver))
        direct = negative_identity.direct
        solve_min = solver.solve_min
        with_rows = super().build(solver)  # per-call rows: the shared shell

        def solve(costs: Tensor, *, target: Tensor | None = None, needs_grad: bool,
                  training: bool = True, A: Tensor | None = None,
                  b: Tensor | None = None, known: Tensor | None = None) -> Tensor:
            if A is not None or known is not None:  # per-call inputs: the shared shell
                return with_rows(costs, target=target, needs_grad=needs_grad,
                                 training=training, A=A, b=b, known=known)
            if not needs_grad:
                return solve_min(costs)
            # the C-level apply where no functorch transform runs: one frame less
            return negative_identity(costs) if transforms_active() else direct(costs)

        return solve

    def build_projected(self, solver: Solver, projection: Normalized) -> ProjectedSolve:
        """The layer's whole default hot path, projection included, as one autograd node
        (`_projected_negative_identity`): ``solve(w, noise) -> y`` for costs ``w``
        of shape ``(*batch, *cost_shape)`` and the noise ``xi`` added after the
        projection (or None); without gradients it records nothing. The layer uses it
        for projections "auto", "auto-exact" and "std" on problems that take costs of
        any sign."""
        return _projected_negative_identity(solver, projection)

    def forward(self, solver, costs, *, target, training):
        return solver.solve_min(costs), ()

    def saved_like(self, solver, costs, training):
        return ()

    def backward(self, solver, grad, costs):
        return -grad
