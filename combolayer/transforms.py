"""Cost transforms: small pure functions composed with :func:`chain`.

A projection ``P`` maps costs to costs without changing the solver's answer,
``y(P(w)) == y(w)``, and the layer differentiates through it, which removes
the gradient directions the solver is invariant to (Sahoo et al. 2023, sec. 3.3).
The built-in projections act on the last axis of a flattened cost ``(..., N)``;
:func:`on_cost_shape` lifts one to costs of shape ``(..., *cost_shape)``.
Choosing a projection by name for a problem is :mod:`combolayer.projections`;
noise distributions are :mod:`combolayer.noise`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from .noise import SignNoise  # noqa: F401  (moved to combolayer.noise; importable here too)

Transform = Callable[[Tensor], Tensor]

#: ``normalize`` divides by ``max(||w||, NORM_EPS)``: a zero cost stays zero
#: (its solution is arbitrary anyway) and gradients stay finite, never NaN.
NORM_EPS = 1e-12


def identity(w: Tensor) -> Tensor:
    return w


def project_mean(w: Tensor) -> Tensor:
    """P_mean: subtract the mean, the projection onto the plane normal to the all-ones vector."""
    return w - w.mean(dim=-1, keepdim=True)


def normalize(w: Tensor) -> Tensor:
    """P_norm: scale to unit Euclidean norm (see :data:`NORM_EPS`)."""
    return w / torch.linalg.vector_norm(w, dim=-1, keepdim=True).clamp_min(NORM_EPS)


def project_plane(normals: Tensor) -> Transform:
    """P_plane: remove the components along orthonormal rows ``normals`` of shape ``(r, N)``."""

    def project(w: Tensor) -> Tensor:
        basis = normals.to(device=w.device, dtype=w.dtype)
        return w - (w @ basis.T) @ basis

    return project


def chain(*transforms: Transform) -> Transform:
    """Compose transforms left to right: ``chain(f, g)(w) == g(f(w))``."""

    def composed(w: Tensor) -> Tensor:
        for transform in transforms:
            w = transform(w)
        return w

    return composed


def on_cost_shape(transform: Transform, cost_shape: tuple[int, ...]) -> Transform:
    """Apply a flat-cost transform to costs of shape ``(..., *cost_shape)``."""
    if len(cost_shape) == 1:
        return transform
    size = math.prod(cost_shape)

    def lifted(w: Tensor) -> Tensor:
        batch = w.shape[: w.ndim - len(cost_shape)]
        return transform(w.reshape(*batch, size)).reshape(w.shape)

    return lifted


project_std = chain(project_mean, normalize)
