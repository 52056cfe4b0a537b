"""Gradient hooks: identities on the forward pass that change only the backward.

`add_gradient_noise` adds ``N(0, sigma^2)`` to the gradient that flows
back into a tensor, the paper's stand-in for further learnable layers after the
solver (Sahoo et al. 2023, sec. 5, "Corrupting Gradients": noise on
``dL/dy``). Put it between a layer's output and the loss:

    y = layer(w)
    loss = criterion(add_gradient_noise(y, 0.25, generator=g), y_true)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ..errors import InputError
from ..transforms.noise import generator_device


class _GradientNoise(torch.autograd.Function):
    """Forward: ``x`` unchanged. Backward: ``grad + scale * noise``, with ``noise``
    drawn when the backward runs."""

    @staticmethod
    def forward(x: Tensor, sigma: float, per_instance_dims: int | None,
                generator: torch.Generator | None) -> Tensor:
        return x.view_as(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
        _, ctx.sigma, ctx.per_instance_dims, ctx.generator = inputs

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None, None]:
        noise = torch.randn(grad.shape, generator=ctx.generator, dtype=torch.float64,
                            device=generator_device(ctx.generator))
        scale = ctx.sigma
        if ctx.per_instance_dims is not None:
            batch = grad.shape[: grad.ndim - ctx.per_instance_dims]
            scale = scale / max(1, int(torch.Size(batch).numel()))
        return grad + scale * noise.to(grad), None, None, None


def _check(sigma: float, reduction: str) -> None:
    if not sigma >= 0 or sigma == float("inf"):
        raise InputError(f"gradient noise sigma must be a finite value >= 0, got {sigma}")
    if reduction not in ("mean", "sum"):
        raise InputError(f"reduction must be 'mean' or 'sum' (how the loss reduces over the "
                         f"batch), got {reduction!r}")


def add_gradient_noise(x: Tensor, sigma: float, *, generator: torch.Generator | None = None,
                       reduction: str = "mean", instance_dims: int = 1) -> Tensor:
    """``x`` on the forward pass; on the backward, ``dL/dx + xi`` with ``xi ~ N(0, sigma^2)``.

    ``sigma`` is meant per instance, like [`Blackbox`][combolayer.Blackbox]'s ``lam``
    under its ``reduction="mean"``: with ``reduction="mean"`` (the default here; a loss
    averaged over the batch) the incoming
    gradient is ``dL_i/dx / B``, so the noise is divided by the batch size ``B``
    too and ``sigma`` is the noise on each instance's own ``dL_i/dx``; the
    batch is every axis but the trailing ``instance_dims`` (use
    ``len(spec.cost_shape)`` for a layer's output). With ``reduction="sum"``
    the noise is added as it is. ``sigma = 0`` returns ``x`` itself.
    The draws come from ``generator`` (seed it to reproduce a run).
    """
    _check(sigma, reduction)
    if not 0 <= instance_dims <= x.ndim:
        raise InputError(f"instance_dims must be between 0 and x.ndim={x.ndim}, "
                         f"got {instance_dims}")
    if sigma == 0 or not x.requires_grad:
        return x
    dims = instance_dims if reduction == "mean" else None
    return _GradientNoise.apply(x, float(sigma), dims, generator)


class GradientNoise(nn.Module):
    """`add_gradient_noise` as a module, so it can sit in ``nn.Sequential``;
    active in training mode only (eval mode returns the input)."""

    def __init__(self, sigma: float, *, generator: torch.Generator | None = None,
                 reduction: str = "mean", instance_dims: int = 1) -> None:
        super().__init__()
        _check(sigma, reduction)
        self.sigma = float(sigma)
        self.generator = generator
        self.reduction = reduction
        self.instance_dims = instance_dims

    def extra_repr(self) -> str:
        return f"sigma={self.sigma:g}, reduction={self.reduction!r}"

    def forward(self, x: Tensor) -> Tensor:
        if not self.training:
            return x
        return add_gradient_noise(x, self.sigma, generator=self.generator,
                                  reduction=self.reduction, instance_dims=self.instance_dims)
