"""Cost transforms: small pure functions composed with `chain`.

A projection ``P`` maps costs to costs without changing the solver's answer,
``y(P(w)) == y(w)``, and the layer differentiates through it, which removes
the gradient directions the solver is invariant to (Sahoo et al. 2023, sec. 3.3).
The built-in projections act on the last axis of a flattened cost ``(..., N)``;
`on_cost_shape` lifts one to costs of shape ``(..., *cost_shape)``.
Choosing a projection by name for a problem is `combolayer.layer.projection`;
noise distributions are [`combolayer.transforms.noise`][combolayer.transforms.noise].
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from ..errors import InputTypeError
from ..func_transforms import transforms_active

Transform = Callable[[Tensor], Tensor]

#: A cost of norm below this is taken as 0 by ``normalize`` and `Normalized`: it stays
#: zero (its solution is arbitrary anyway) and gradients stay finite, never NaN.
NORM_EPS = 1e-12
#: NORM_EPS as a 0-dim tensor per float dtype: a comparison with the norm's own
#: dtype wraps no Python float and converts nothing per call.
_NORM_EPS_TENSORS = {dtype: torch.tensor(NORM_EPS, dtype=dtype)
                     for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)}


def identity(w: Tensor) -> Tensor:
    return w


def project_mean(w: Tensor) -> Tensor:
    """P_mean: subtract the mean, the projection onto the plane normal to the all-ones vector."""
    return w - w.mean(dim=-1, keepdim=True)


def normalize(w: Tensor) -> Tensor:
    """P_norm: scale to unit Euclidean norm; a cost of norm below `NORM_EPS` is divided
    by 1 (its gradient is then ``g``, not ``g / NORM_EPS``)."""
    norm = torch.linalg.vector_norm(w, dim=-1, keepdim=True)
    return w / torch.where(norm < NORM_EPS, 1.0, norm)


def fast_apply(function: type[torch.autograd.Function],
               under_transforms: Callable | None = None) -> Callable:
    """``function.apply`` without its per-call ``inspect.signature`` binding of
    default arguments (a share of the overhead benchmarks/training_overhead.py
    measures), for functions whose ``forward`` has none; under functorch
    transforms (vmap, grad) the full ``apply`` runs as before, or ``under_transforms``
    when given (for a ``function`` in the old style, ``forward(ctx, ...)``, which they
    refuse). In a graph that torch.compile traces the full ``apply`` runs too: Dynamo
    traces ``Function.apply``, and before torch 2.13 it stopped at the C-level one
    (a graph break, and ``fullgraph=True`` failed).

    The returned ``apply`` keeps the C-level apply as ``apply.direct``: a caller on a
    hot path that tests `transforms_active` itself calls it with one Python frame
    less (the layer does)."""
    direct = super(torch.autograd.Function, function).apply
    transformed = function.apply if under_transforms is None else under_transforms

    def apply(*args):
        if torch.compiler.is_compiling():
            return function.apply(*args)
        return transformed(*args) if transforms_active() else direct(*args)

    apply.direct = direct  # type: ignore[attr-defined]
    return apply


#: Up to this many outputs, P_plane is one matmul with the dense ``(N, N)``
#: projector: fewer torch ops (1 instead of 3) than the low-rank form, which
#: is what costs at small N (measured in docs/measurements/overhead.md).
DENSE_PROJECTOR_MAX = 128


def project_plane(normals: Tensor) -> Transform:
    """P_plane: remove the components along orthonormal rows ``normals`` of shape ``(r, N)``.

    The operator is built once per device and dtype, on first use there: the
    all-ones normal alone is `project_mean`; up to
    `DENSE_PROJECTOR_MAX` outputs it is ``w @ (I - normals.T normals)``;
    above, ``w - (w @ normals.T) @ normals``.
    """
    r, n = normals.shape
    if r == 0:
        return identity
    ones = torch.full((1, n), 1.0 / math.sqrt(n), dtype=normals.dtype)
    if r == 1 and torch.allclose(normals.abs(), ones, rtol=0, atol=1e-12) and (
            bool((normals[0] > 0).all()) or bool((normals[0] < 0).all())):
        return project_mean
    basis64 = normals.to(torch.float64)
    dense = n <= DENSE_PROJECTOR_MAX
    operator64 = torch.eye(n, dtype=torch.float64) - basis64.T @ basis64 if dense else basis64
    cache: dict[object, Tensor] = {}

    def project(w: Tensor) -> Tensor:
        # A traced graph makes its own operator, once, and never reads the cache: reading
        # it made Dynamo guard on its keys, and a second model recompiled after an eager
        # call. Keyed by the dtype alone on the CPU: building a torch.device per call to
        # hash it is not free, on a path that runs twice per training step.
        compiling = torch.compiler.is_compiling()
        key = w.dtype if w.is_cpu else (w.device, w.dtype)
        operator = None if compiling else cache.get(key)
        if operator is None:
            if not (w.is_floating_point() or w.is_complex()):
                # cast to an integer dtype, the projector would round to 0 and 1
                raise InputTypeError(f"project_plane expects floating-point costs, got "
                                     f"{w.dtype}; convert them first, e.g. "
                                     "w.to(torch.get_default_dtype())")
            operator = operator64.to(device=w.device, dtype=w.dtype)
            if not compiling:
                cache[key] = operator
        if dense:
            return w @ operator  # symmetric: the backward is the same matmul
        return w - (w @ operator.T) @ operator

    return project


def chain(*transforms: Transform) -> Transform:
    """Compose transforms left to right: ``chain(f, g)(w) == g(f(w))``."""

    def composed(w: Tensor) -> Tensor:
        for transform in transforms:
            w = transform(w)
        return w

    return composed


def on_cost_shape(transform: Transform, cost_shape: tuple[int, ...]) -> Transform:
    """Apply a flat-cost transform to costs of shape ``(..., *cost_shape)``.

    The lifted transform keeps the flat one as its ``flat`` attribute.
    """
    if len(cost_shape) == 1:
        return transform
    size = math.prod(cost_shape)

    def lifted(w: Tensor) -> Tensor:
        batch = w.shape[: w.ndim - len(cost_shape)]
        return transform(w.reshape(*batch, size)).reshape(w.shape)

    lifted.flat = transform  # type: ignore[attr-defined]
    return lifted


class Normalized:
    """``chain(project, normalize)`` as one autograd node, for an orthogonal
    projection ``project`` (symmetric and idempotent: mean, plane).

    Same values and gradient as the chain: with ``c = P w``, ``n = max(||c||,
    NORM_EPS)`` and ``u = c / n``, the backward is ``P ((g - u <g, u>) / n)``
    (``P g / n`` where the norm was clamped). Autograd would record about ten
    nodes for the chain; this is one, applied without ``Function.apply``'s
    per-call signature binding (docs/measurements/overhead.md). Its two halves,
    `values` and `vjp`, are public for a node that fuses more
    around them (the Identity layer's, in `combolayer.estimators`).
    """

    def __init__(self, project: Transform) -> None:
        self.project = project

    def __call__(self, w: Tensor) -> Tensor:
        return _normalized_node(w, self)[0]

    def values(self, w: Tensor, negate: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """The forward, without autograd: ``(u, n, clamped)``; the last axis reduced to
        size 1 in ``n`` and ``clamped``, which only the backward (`vjp`) reads.
        ``negate`` returns ``-u`` in place of ``u``.

        ``u = P w / max(||P w||, NORM_EPS)`` always: the solver's input. ``clamped``
        marks the costs whose ``P w`` is no projected cost: below `NORM_EPS`, or, for
        the mean's projection, off its plane (``|sum(P w)| > sqrt(N) ||P w|| / 2``):
        the rounding left by subtracting the mean of all-equal costs, a constant
        vector. The normalisation's gradient there was 1e5-1e12, different in float32
        and float64; for such costs ``n`` is 1 and the backward is ``P g``, as
        ``normalize``'s at a zero cost. (A threshold on ``||P w||`` against ``||w||``
        also read real costs around a large offset as ties.)"""
        c = self.project(w)
        norm = torch.linalg.vector_norm(c, dim=-1, keepdim=True)
        clamped = norm < _NORM_EPS_TENSORS[norm.dtype]
        if self.project is project_mean:
            clamped |= c.sum(-1, keepdim=True).abs_() > norm * (0.5 * math.sqrt(w.shape[-1]))
        u = c / (norm.clamp_min(NORM_EPS).neg_() if negate else norm.clamp_min(NORM_EPS))
        return u, norm.masked_fill_(clamped, 1.0), clamped

    def vjp(self, grad: Tensor, u: Tensor, norm: Tensor, clamped: Tensor) -> Tensor:
        """``dL/dw`` for ``grad = dL/du``, from what `values` returned (``u`` or
        ``-u`` alike: it enters as ``u <grad, u>``, bit for bit the same)."""
        along = (grad * u).sum(-1, keepdim=True).masked_fill_(clamped, 0.0)
        return self.project(torch.addcmul(grad, u, along, value=-1.0).div_(norm))

    def vjp_recorded(self, grad: Tensor, w: Tensor, clamped: Tensor) -> Tensor:
        """`vjp` recomputed from the costs ``w`` in ops that autograd records: the
        backward that ``create_graph=True`` differentiates again (a gradient penalty, a
        Hessian-vector product). ``clamped`` as `values` returned it."""
        # `values` and `vjp`'s ops, none in place: the same values, bit for bit
        c = self.project(w)
        norm = torch.linalg.vector_norm(c, dim=-1, keepdim=True)
        u = c / norm.clamp_min(NORM_EPS)
        along = (grad * u).sum(-1, keepdim=True).masked_fill(clamped, 0.0)
        return self.project(torch.addcmul(grad, u, along, value=-1.0)
                            / norm.masked_fill(clamped, 1.0))

    def recorded(self, grad: Tensor, u: Tensor, clamped: Tensor, w: Tensor) -> Tensor:
        """`vjp_recorded` from the costs ``w`` a node saved, reshaped as ``u``: the
        backward where it is itself recorded (``create_graph=True``, nested torch.func
        transforms). A node saves ``w`` for it, as torch's own ops save their inputs:
        autograd frees it with the graph, and refuses it changed in place."""
        return self.vjp_recorded(grad, w.reshape(u.shape), clamped)


class _NormalizedNode(torch.autograd.Function):
    """`Normalized`'s node: one class for every instance, which it is handed (a class per
    instance was a new constant for torch.compile: each layer compiled its graph again)."""

    @staticmethod
    def forward(w: Tensor, owner: Normalized) -> tuple[Tensor, Tensor, Tensor]:
        return owner.values(w)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        u, norm, clamped = output
        ctx.owner = inputs[1]
        ctx.mark_non_differentiable(norm, clamped)
        ctx.set_materialize_grads(False)  # no zero gradients made for norm, clamped
        ctx.save_for_backward(u, norm, clamped, inputs[0])  # w, for `Normalized.recorded`

    @staticmethod
    def backward(ctx, grad: Tensor | None, _norm_grad=None, _clamped_grad=None):
        if grad is None:
            return None, None
        u, norm, clamped, w = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True, nested torch.func transforms
            return ctx.owner.recorded(grad, u, clamped, w), None
        return ctx.owner.vjp(grad, u, norm, clamped), None


_normalized_node = fast_apply(_NormalizedNode)


def normalized(project: Transform) -> Normalized:
    """``chain(project, normalize)`` as one autograd node (`Normalized`)."""
    return Normalized(project)


project_std = normalized(project_mean)
