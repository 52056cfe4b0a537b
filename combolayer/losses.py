"""Losses for decision-focused learning.

A loss maps (cost, target) to a scalar and holds a compiled solver; it is
not a layer. The problem is given as a value: a spec, a compiled
:class:`~combolayer.backends.Solver` (``cl.make_solver(...)``) or a
:class:`~combolayer.ComboLayer`, whose solver is then shared. Like the
estimators, the losses fold the objective sense once, ``c = solver.sign * cost``,
and are written for minimisation only; autograd carries the sign back to the
caller's costs. All solves of a call are one batch call to the solver.

Costs are ``(*batch, *cost_shape)``; a loss raises ``ValueError`` for costs
with NaN/inf or another trailing shape, and for solutions whose shape is not
the costs' (the message names expected and got).

Examples:
    >>> import torch, combolayer as cl
    >>> spec = cl.problems.TopK(n=3, k=1)
    >>> spo = cl.losses.SPOPlusLoss(spec)
    >>> cost_pred = torch.tensor([[0.0, 1.0, 2.0]], requires_grad=True)
    >>> loss = spo(cost_pred, torch.tensor([[3.0, 1.0, 2.0]]))
    >>> loss.backward()                         # cost_pred.grad = 2 (y* - y~), sign-folded
    >>> round(cl.losses.hamming(torch.tensor([1.0, 0, 0]), torch.tensor([0.0, 1, 0])).item(), 4)
    0.6667
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .backends.registry import as_solver
from .backends.solver import Solver, check_costs, inner
from .estimators import Perturbed

REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(reduction: str) -> str:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {list(REDUCTIONS)}, got {reduction!r}")
    return reduction


def _reduce(per_instance: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return per_instance.mean()
    if reduction == "sum":
        return per_instance.sum()
    return per_instance


def _check_solution(solver: Solver, y: Tensor, like: Tensor, name: str) -> Tensor:
    if tuple(y.shape) != tuple(like.shape):
        raise ValueError(
            f"{name} has shape {tuple(y.shape)} but the costs have {tuple(like.shape)} "
            f"for {solver.spec.label}"
        )
    return torch.as_tensor(y).to(like)


class SPOPlusLoss:
    """The SPO+ loss, a convex surrogate of regret that needs the true costs.

    With ``c_hat`` the predicted and ``c`` the true min-sense costs, ``y*`` the
    optimum for ``c`` and ``y~ = y(2 c_hat - c)``:
    ``loss = -min_y <2 c_hat - c, y> + 2 <c_hat, y*> - <c, y*> = <2 c_hat - c, y* - y~>``
    (>= 0) and ``d loss / d c_hat = 2 (y* - y~)``. ``y*`` and ``y~`` are solved in
    one batch call; pass ``y_true`` (the optimal solutions) to skip solving ``y*``.

    Args:
        spec: the problem: a spec, a compiled :class:`Solver` or a ComboLayer.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` over instances.
        backend: a backend name/config to compile a spec with (or a compiled
            :class:`Solver`).

    Reference: Elmachtoub, Grigas, "Smart 'Predict, then Optimize'",
    Management Science 68(1), 2022.
    """

    def __init__(self, spec: Any, reduction: str = "mean", backend: Any = "auto") -> None:
        self.solver = as_solver(spec, backend)
        self.spec = self.solver.spec
        self.reduction = _check_reduction(reduction)

    def __repr__(self) -> str:
        return f"SPOPlusLoss({self.spec.label}, reduction={self.reduction!r})"

    def __call__(self, cost_pred: Tensor, cost_true: Tensor,
                 y_true: Tensor | None = None) -> Tensor:
        check_costs(self.spec, cost_pred, "cost_pred")
        cost_true = _check_solution(self.solver, torch.as_tensor(cost_true), cost_pred, "cost_true")
        check_costs(self.spec, cost_true, "cost_true")
        sign = self.solver.sign
        c_hat, c = sign * cost_pred, sign * cost_true
        shifted = 2.0 * c_hat - c
        if y_true is None:
            both = self.solver.solve_min(torch.stack([shifted.detach(), c]))
            y_tilde, y_star = both[0], both[1]
        else:
            y_star = _check_solution(self.solver, y_true, cost_pred, "y_true")
            y_tilde = self.solver.solve_min(shifted.detach())
        loss = inner(shifted, y_star - y_tilde, len(self.spec.cost_shape))
        return _reduce(loss, self.reduction)


class FenchelYoungLoss:
    """The perturbed Fenchel-Young loss, built on :class:`~combolayer.Perturbed`.

    With ``c`` the predicted min-sense cost (theta = -c in the paper's max
    form), ``Z_s`` the perturbations and ``y_s = y(c - sigma Z_s)``:
    ``loss = <c, y_true> - 1/S sum_s <c - sigma Z_s, y_s>``, the Monte-Carlo
    estimate of ``F_sigma(theta) - <theta, y_true>`` (the constant
    ``Omega(y_true)`` is dropped, so the value is >= 0 only in expectation), and
    ``d loss / d c = y_true - mean_s y_s``, i.e. ``y_sigma(theta) - y_true`` in
    the paper's form. All samples are one batch call. ``spec`` is a spec, a
    compiled :class:`Solver` or a ComboLayer; ``backend`` compiles a spec.

    Reference: Berthet, Blondel, Teboul, Cuturi, Vert, Bach, "Learning with
    Differentiable Perturbed Optimizers", NeurIPS 2020.
    """

    def __init__(self, spec: Any, sigma: float = 1.0, num_samples: int = 1,
                 noise: Any = "gaussian", reduction: str = "mean", backend: Any = "auto",
                 generator: torch.Generator | None = None) -> None:
        self.solver = as_solver(spec, backend)
        self.spec = self.solver.spec
        self.perturbed = Perturbed(sigma=sigma, num_samples=num_samples, noise=noise,
                                   generator=generator)
        self.reduction = _check_reduction(reduction)

    def __repr__(self) -> str:
        p = self.perturbed
        return (f"FenchelYoungLoss({self.spec.label}, sigma={p.sigma}, "
                f"num_samples={p.num_samples}, noise={p.noise!r})")

    def __call__(self, cost_pred: Tensor, y_true: Tensor) -> Tensor:
        check_costs(self.spec, cost_pred, "cost_pred")
        y_true = _check_solution(self.solver, y_true, cost_pred, "y_true")
        c = self.solver.sign * cost_pred
        z, samples = self.perturbed.perturbed_solutions(self.solver, c)
        k = len(self.spec.cost_shape)
        perturbed_value = inner(c - self.perturbed.sigma * z, samples, k).mean(0)
        return _reduce(inner(c, y_true, k) - perturbed_value, self.reduction)


def hamming(y: Tensor, y_true: Tensor) -> Tensor:
    """Normalised Hamming distance ``mean(y (1 - y_true) + (1 - y) y_true)`` over all entries.

    For 0/1 tensors it is the fraction of entries that differ; it is linear in
    ``y``, so its gradient ``1 - 2 y_true`` pushes each output toward its target
    (the loss of Vlastelica et al. 2020 for shortest paths and matchings).

    That gradient does not depend on the solver's output ``y``. Under
    :class:`~combolayer.Identity` the update is then the same whatever the
    solver returned, so the noise margin (``noise=``) and the informed margin
    (:class:`~combolayer.Margin`) have exactly no effect. With Identity, use a
    loss whose gradient depends on ``y``: L1 ``(y - y_true).abs()`` (equal to
    Hamming on 0/1 values, with gradient ``sign(y - y_true)``) or squared
    ``(y - y_true) ** 2``. Blackbox is not affected: its backward solves again.
    """
    y_true = torch.as_tensor(y_true).to(y)
    if y.shape != y_true.shape:
        raise ValueError(f"y has shape {tuple(y.shape)} but y_true has {tuple(y_true.shape)}")
    return (y * (1.0 - y_true) + (1.0 - y) * y_true).mean()


def loglog_recall(ranks: Tensor, relevance: Tensor) -> Tensor:
    """The "loglog" recall loss for rankings, from ranks computed by a Ranking layer.

    ``ranks`` (``(*batch, n)``, 1 = best) come from e.g.
    ``ComboLayer(cl.problems.Ranking(n), method="blackbox")(scores)`` and
    ``relevance`` marks the positives with 1. For each positive ``i``,
    ``rk-_i = rk_i - rk+_i`` is the number of negatives ranked above it, where
    ``rk+_i = 1 + #{positives ranked above i}`` is computed from the ranks and
    held constant, so the gradient flows through ``rk_i``. The loss is

        mean over instances of  mean over positives i of  log(1 + log(1 + rk-_i))

    (``rk-`` clamped at 0, as averaged ranks of a sampling estimator can dip
    below). It is 0 when all positives lead, and its double log makes the first
    negatives that overtake a positive cost the most, which is what recall@K
    counts. Instances without positives contribute 0.

    Reference: Rolinek, Musil, Paulus, Vlastelica, Michaelis, Martius,
    "Optimizing Rank-based Metrics with Blackbox Differentiation", CVPR 2020.
    """
    relevance = torch.as_tensor(relevance).to(ranks)
    if ranks.shape != relevance.shape:
        raise ValueError(
            f"ranks has shape {tuple(ranks.shape)} but relevance has {tuple(relevance.shape)}"
        )
    positive = relevance > 0.5
    held = ranks.detach()
    above = (held.unsqueeze(-2) < held.unsqueeze(-1)) & positive.unsqueeze(-2)
    rank_among_positives = 1.0 + above.sum(-1).to(ranks)
    negatives_above = (ranks - rank_among_positives).clamp_min(0.0)
    per_item = torch.log1p(torch.log1p(negatives_above)) * positive
    count = positive.sum(-1).clamp_min(1)
    return (per_item.sum(-1) / count).mean()


__all__ = ["FenchelYoungLoss", "SPOPlusLoss", "hamming", "loglog_recall"]
