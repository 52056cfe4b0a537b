"""Regularised Frank-Wolfe optimisation, RFWO (Dalle et al. 2022; PyEPO's RFWO)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from pydantic import Field
from torch import Tensor

from .base import Estimator, Positive, keeps_aux, last_aux

__all__ = ["RegularizedFrankWolfe"]


def working_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype Frank-Wolfe's arithmetic runs in for inputs of ``dtype``: float32 at
    least (float64 stays float64). In float16 its thresholds (1e-12) round to 0 and its
    line search divides by zero, and ``torch.linalg.solve`` has no half kernel."""
    return torch.promote_types(dtype, torch.float32)


def _in_dtype(weights: Tensor, dtype: torch.dtype) -> Tensor:
    """Active-set ``weights`` in ``dtype``, a positive weight kept positive (the active
    face is where they are > 0, and a tiny one would round to 0 in float16)."""
    cast = weights.to(dtype)
    return torch.where(weights > 0, cast.clamp(min=torch.finfo(dtype).tiny), cast)


def known_oracle(solver: Any, lam: float, whole: bool = False,
                 batch: tuple[int, ...] | None = None
                 ) -> Callable[[Tensor], tuple[Tensor, Tensor]]:
    """The linear oracle of the regularised problem with ``solver``'s known cost ``k``
    (min form): ``g -> (y, <k, x> / lam)`` for the whole solution
    ``x = argmin_x <g, y> + <k, x> / lam``, solved as ``solve_min(lam g)`` (the
    solver adds ``k`` at scale 1; ``lam > 0`` keeps the argmin). Without a known cost
    (`Solver.counts_known`: the spec's, or a call's bound by `KnownBound`) the second
    part is 0. ``g`` and ``y`` are flat, ``(B, N)``; the solver sees ``(*batch,
    *cost_shape)``, ``batch`` the costs' own batch shape (``(B,)`` when None), onto which
    per-call rows and a per-call known cost broadcast.
    ``whole=True`` returns ``x`` itself, ``(B, num_vars)``, in place of ``y`` (for
    `away_step_frank_wolfe`'s ``carry``)."""
    shape = tuple(solver.cost_shape)

    def oracle(g: Tensor) -> tuple[Tensor, Tensor]:
        counts = solver.counts_known
        given = g.shape[:1] if batch is None else batch
        costs = (lam * g if counts else g).reshape(*given, *shape)
        if not (counts or whole):
            v = solver.solve_min(costs).reshape(g.shape)
            return v, v.new_zeros(g.shape[:-1])
        v, aux = solver.solve_min(costs, return_aux=True)
        aux = aux.to(v)
        value = (solver.sign * solver.known_value(v, aux).reshape(g.shape[0]) / lam if counts
                 else v.new_zeros(g.shape[:-1]))
        v = v.reshape(g.shape)
        if whole:  # by its width: an empty batch has no -1 to infer
            v = torch.cat([v, aux.reshape(g.shape[0], solver.num_aux)], -1)
        return v, value

    return oracle


@torch.no_grad()
def away_step_frank_wolfe(solve_min: Callable[[Tensor], Any], theta: Tensor, max_iter: int,
                          tol: float, linear: bool = False,
                          carry: int = 0) -> tuple[Tensor, ...]:
    """``mu = argmin_{mu in conv(Y)} 1/2 ||mu - theta||^2`` for a ``(B, N)`` batch, by
    away-step Frank-Wolfe with exact line search; ``solve_min`` is the linear
    oracle ``argmin_{y in Y} <c, y>`` on ``(B, N)`` costs (one batch call per step).

    Returns ``(mu, vertices (B, W, N), weights (B, W))``: the iterate and its
    active set (``W = 2N + 2`` slots; a zero weight is a free slot). PyEPO's
    ``_away_step_frank_wolfe``, step for step: each instance stops moving once
    its Frank-Wolfe gap is below ``tol``, all stop after ``max_iter`` steps.

    ``linear=True`` adds a linear term on whole solutions (a known cost): the
    problem is ``min_{mu in conv(X)} 1/2 ||mu_y - theta||^2 + <q, mu>``, the oracle
    (`known_oracle`) returns ``(y, <q, x>)`` for ``argmin_x <g, y> + <q, x>``, each
    vertex keeps its ``<q, v>`` beside its outputs for the gaps, the line search and
    the away step, and the result gains a fourth entry, ``<q, mu>`` ``(B,)``.

    ``carry > 0``: the oracle's solutions have ``carry`` more entries after their ``N``
    outputs (the auxiliaries: `known_oracle`'s ``whole``), which ride along: each vertex
    keeps its whole solution (vertices ``(B, W, N + carry)``), so that the weights that
    mix the outputs into ``mu`` mix the auxiliaries too (`active_mix`). The steps read
    the outputs alone: ``mu`` is the iterate without ``carry``, bit for bit (a solution
    whose outputs are an active vertex's adds its weight there, and keeps that vertex's
    auxiliaries).

    The arithmetic runs in `working_dtype` (float32 for a half-precision ``theta``), the
    oracle sees costs in it, and the results come back in ``theta``'s dtype.
    """
    dtype = theta.dtype
    theta = theta.to(working_dtype(dtype))
    oracle = solve_min if linear else (lambda g: (solve_min(g), None))
    batch, num_vars = theta.shape
    width = 2 * num_vars + 2
    vertices = theta.new_zeros((batch, width, num_vars + carry))
    outputs = vertices[..., :num_vars]  # a view: the vertices' outputs, which the steps read
    weights = theta.new_zeros((batch, width))
    vertex_norms = theta.new_zeros((batch, width))
    # the linear term of each vertex, and of the iterate (0 without one)
    vertex_linear = theta.new_zeros((batch, width))
    v0, l0 = oracle(-theta)
    v0 = v0.to(theta)
    l0 = theta.new_zeros(batch) if l0 is None else l0.to(theta)
    vertices[:, 0], weights[:, 0] = v0, 1.0
    vertex_norms[:, 0] = (v0[:, :num_vars] * v0[:, :num_vars]).sum(-1)
    vertex_linear[:, 0] = l0
    mu, mu_linear = v0[:, :num_vars].clone(), l0.clone()
    instances = torch.arange(batch, device=theta.device)
    for _ in range(max_iter):
        grad = mu - theta
        v, lv = oracle(grad)
        v = v.to(theta)
        v_y = v[:, :num_vars]
        lv = theta.new_zeros(batch) if lv is None else lv.to(theta)
        gap_fw = (grad * (mu - v_y)).sum(-1) + (mu_linear - lv)
        scores = (torch.einsum("bwv,bv->bw", outputs, grad) + vertex_linear).masked_fill(
            weights <= 0, -torch.inf)
        away = scores.argmax(-1)
        v_away, alpha_away = outputs[instances, away], weights[instances, away]
        gap_away = (grad * (v_away - mu)).sum(-1) + (vertex_linear[instances, away] - mu_linear)
        moving = gap_fw >= tol
        if not bool(moving.any()):
            break
        use_fw = gap_fw >= gap_away
        direction = torch.where(use_fw[:, None], v_y - mu, mu - v_away)
        direction_linear = torch.where(use_fw, lv - mu_linear,
                                       mu_linear - vertex_linear[instances, away])
        gap = torch.where(use_fw, gap_fw, gap_away)
        gamma_max = torch.where(use_fw, torch.ones_like(alpha_away),
                                alpha_away / (1.0 - alpha_away).clamp(min=1e-12))
        denom = (direction * direction).sum(-1).clamp(min=1e-12)
        gamma = torch.minimum((gap / denom).clamp(min=0.0), gamma_max) * moving.to(theta)
        mu = mu + gamma[:, None] * direction
        mu_linear = mu_linear + gamma * direction_linear
        weights = weights * torch.where(use_fw, 1.0 - gamma, 1.0 + gamma)[:, None]
        gamma_fw, gamma_away = gamma * use_fw, gamma * ~use_fw
        # a Frank-Wolfe vertex already active gains weight; a new one takes a free slot
        v_norm = (v_y * v_y).sum(-1)
        distance = (vertex_norms - 2 * torch.einsum("bwv,bv->bw", outputs, v_y) + v_norm[:, None]
                    + (vertex_linear - lv[:, None]).square())
        match = (distance < 1e-6) & (weights > 0)
        has_match, match_slot = match.any(-1), match.to(theta).argmax(-1)
        free = weights <= 1e-12
        free_slot = torch.where(free.any(-1), free.to(theta).argmax(-1), weights.argmin(-1))
        add = ~has_match & use_fw & (gamma_fw > 0)
        weights[instances, match_slot] += gamma_fw * (has_match & use_fw).to(theta)
        slot = (instances, free_slot)
        vertices[slot] = torch.where(add[:, None], v, vertices[slot])
        vertex_norms[slot] = torch.where(add, v_norm, vertex_norms[slot])
        vertex_linear[slot] = torch.where(add, lv, vertex_linear[slot])
        weights[slot] = torch.where(add, gamma_fw, weights[slot])
        weights[instances, away] -= gamma_away
        weights = weights.clamp(min=0.0)
        weights = torch.where(weights < 1e-12, torch.zeros_like(weights), weights)
    found = (mu.to(dtype), vertices.to(dtype), _in_dtype(weights, dtype))
    return (*found, mu_linear.to(dtype)) if linear else found


def active_mix(vertices: Tensor, weights: Tensor, num_outputs: int) -> Tensor:
    """The auxiliaries of `away_step_frank_wolfe`'s iterate, ``(B, carry)``: its active
    vertices' (``vertices[..., num_outputs:]``, whole solutions kept with ``carry``)
    mixed by the weights that mix their outputs into it."""
    return torch.einsum("bw,bwa->ba", weights, vertices[..., num_outputs:])


def active_face_projection(grad: Tensor, vertices: Tensor, weights: Tensor) -> Tensor:
    """``grad`` ``(B, N)`` projected onto the directions of each instance's active face:
    the span of its active vertices minus their mean (a ridge of 1e-6 relative to
    the Gram matrix's diagonal keeps it solvable, as in PyEPO), in `working_dtype` and
    returned in ``grad``'s."""
    dtype = grad.dtype
    grad, vertices = grad.to(working_dtype(dtype)), vertices.to(working_dtype(dtype))
    active = (weights > 0).to(vertices)
    mean = (vertices * active[..., None]).sum(-2) / active.sum(-1, keepdim=True).clamp(min=1.0)
    centered = (vertices - mean[:, None, :]) * active[..., None]
    gram = centered @ centered.transpose(-1, -2)
    ridge = gram.diagonal(dim1=-2, dim2=-1).amax(-1, keepdim=True).clamp(min=1.0) * 1e-6
    gram = gram + torch.diag_embed(ridge.expand(-1, gram.shape[-1]))
    alpha = torch.linalg.solve(gram, centered @ grad[..., None])
    return (centered.transpose(-1, -2) @ alpha)[..., 0].to(dtype)


class RegularizedFrankWolfe(Estimator):
    """The L2-regularised solution, by Frank-Wolfe, and its exact Jacobian.

    Training forward: ``y_lam(c) = argmin_{mu in conv(Y)} <c, mu> + lam/2 ||mu||^2
    = proj_{conv(Y)}(-c / lam)``, unique and continuous in ``c``, computed by
    `away_step_frank_wolfe` with the solver as linear oracle (one batch
    call per step). Backward:
    near ``c`` the projection moves within the active face ``F`` of the final
    iterate, so ``dL/dc = -1/lam * P_F dL/dy`` with ``P_F`` the orthogonal
    projector onto the face's directions (the span of the centred active
    vertices). Eval mode returns the exact ``y(c)``. With the layer's ``return_aux`` in
    training the auxiliaries are the output's mix: each vertex carries its own, weighed
    by the weights that make the output (`output_aux`).

    PyEPO's ``regularizedFrankWolfeOpt`` (RFWO) with ``lambd = lam``; its loss
    form is `combolayer.losses.RegularizedFenchelYoungLoss`.

    With a known cost ``k`` (`combolayer.ILP.known_cost`, min form) the problem is
    over whole solutions ``x = concat(y, aux)``:
    ``y_lam(c) = argmin_{mu in conv(X)} <c, mu_y> + <k, mu> + lam/2 ||mu_y||^2``, whose
    oracle ``argmin_x <g, y> + <k, x> / lam`` is the solver's own at ``lam g``
    (`known_oracle`); each vertex's ``<k, v>`` enters the gaps, the line search and the
    away step. The backward is the same: on the active face the linear term only
    shifts the projection, so ``d y_lam / d c`` is still ``-1/lam P_F``.

    Args:
        lam: the regularisation weight ``lam`` (PyEPO's ``lambd``).
        max_iter: the most Frank-Wolfe steps.
        tol: the Frank-Wolfe gap at which it stops.

    Examples:
        >>> import torch, combolayer as cl
        >>> layer = cl.ComboLayer(cl.problems.TopK(n=3, k=1), projection="none",
        ...                       method=cl.RegularizedFrankWolfe(lam=1.0))
        >>> [round(v, 4) for v in layer(torch.tensor([1.0, 0.5, 0.0])).tolist()]
        [0.75, 0.25, 0.0]

    Reference: Dalle, Baty, Bouvier, Parmentier, "Learning with Combinatorial
    Optimization Layers: a Probabilistic Approach", arXiv:2207.13513, 2022.
    """

    name: ClassVar[str] = "rfwo"
    compiles_whole: ClassVar[bool] = True

    lam: Positive = 1.0
    max_iter: int = Field(default=10_000, ge=1)
    tol: float = Field(default=1e-6, ge=0)

    #: With a known cost ``k`` the regularised problem is over whole solutions (see the
    #: class docstring); `known_oracle` gives Frank-Wolfe each vertex's ``<k, v> / lam``.
    counts_known_cost: ClassVar[bool] = True

    def forward(self, solver, costs, *, target, training):
        if not training:
            return solver.solve_min(costs), None
        n = solver.num_outputs
        # where the solver records auxiliaries (the layer's return_aux), each vertex
        # carries its own, and their mix by the active set's weights is recorded after
        # the solves' (output_aux)
        carry = solver.num_aux if keeps_aux(solver) else 0
        flat = costs.detach().reshape(-1, n)
        mu, vertices, weights, _ = away_step_frank_wolfe(
            known_oracle(solver, self.lam, whole=carry > 0,
                         batch=costs.shape[: costs.dim() - len(solver.cost_shape)]),
            -flat / self.lam, self.max_iter, self.tol, linear=True, carry=carry)
        if carry:
            solver.aux.append(active_mix(vertices, weights, n))
        return mu.reshape(costs.shape), (vertices[..., :n], weights)

    def output_aux(self, solves: list[Tensor], count: int) -> Tensor:
        """The last recorded auxiliaries: in training the mix `forward` records after its
        solves (the active set's weights on its vertices' auxiliaries, the weights that
        make the output), in eval mode its one solve's."""
        return last_aux(solves, count, str(self))

    def saved_like(self, solver, costs, training):
        if not training:
            return None
        n = solver.num_outputs
        # away_step_frank_wolfe's active set: 2 N + 2 slots per instance
        weights = costs.new_empty((costs.numel() // n, 2 * n + 2))
        return weights.new_empty((*weights.shape, n)), weights

    def backward(self, solver, grad, costs, vertices, weights):
        flat = grad.reshape(-1, solver.num_outputs)
        return (-active_face_projection(flat, vertices, weights) / self.lam).reshape(costs.shape)
