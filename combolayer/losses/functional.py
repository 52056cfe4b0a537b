"""Losses on solutions alone: Hamming and the loglog recall of rankings."""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import InputError
from .base import check_finite_target


def hamming(y: Tensor, y_true: Tensor) -> Tensor:
    """Normalised Hamming distance ``mean(y (1 - y_true) + (1 - y) y_true)`` over all entries.

    For 0/1 tensors it is the fraction of entries that differ; it is linear in
    ``y``, so its gradient ``1 - 2 y_true`` pushes each output toward its target
    (the loss of Vlastelica et al. 2020 for shortest paths and matchings).

    That gradient does not depend on the solver's output ``y``. Under
    [`Identity`][combolayer.Identity] the update is then the same whatever the
    solver returned, so the noise margin (``noise=``) and the informed margin
    ([`Margin`][combolayer.Margin]) have exactly no effect. With Identity, use a
    loss whose gradient depends on ``y``: L1 ``(y - y_true).abs()`` (equal to
    Hamming on 0/1 values, with gradient ``sign(y - y_true)``) or squared
    ``(y - y_true) ** 2``. Blackbox is not affected: its backward solves again.

    Args:
        y: the solutions, e.g. a layer's output.
        y_true: the target solutions, same shape.

    Raises:
        ValueError: shapes that differ, or a NaN or inf entry in either (named).
    """
    y_true = torch.as_tensor(y_true).to(y)
    if y.shape != y_true.shape:
        raise InputError(f"y has shape {tuple(y.shape)} but y_true has {tuple(y_true.shape)}")
    check_finite_target(y, "y", "hamming", role="prediction")
    check_finite_target(y_true, "y_true", "hamming")
    return (y * (1.0 - y_true) + (1.0 - y) * y_true).mean()


def loglog_recall(ranks: Tensor, relevance: Tensor) -> Tensor:
    """The "loglog" recall loss for rankings, from ranks computed by a Ranking layer.

    For each positive ``i``,
    ``rk-_i = rk_i - rk+_i`` is the number of negatives ranked above it, where
    ``rk+_i = 1 + #{positives ranked above i}`` is computed from the ranks and
    held constant, so the gradient flows through ``rk_i``. The loss is

        mean over instances of  mean over positives i of  log(1 + log(1 + rk-_i))

    (``rk-`` clamped at 0, as averaged ranks of a sampling estimator can dip
    below). It is 0 when all positives lead, and its double log makes the first
    negatives that overtake a positive cost the most, which is what recall@K
    counts. Instances without positives contribute 0.

    Args:
        ranks: ``(*batch, n)``, 1 = best, e.g. from
            ``ComboLayer(cl.problems.Ranking(n), method="blackbox")(scores)``.
        relevance: the same shape, 1 marking the positives.

    Raises:
        ValueError: shapes that differ, or a NaN or inf entry in either (named).

    Reference: Rolinek, Musil, Paulus, Vlastelica, Michaelis, Martius,
    "Optimizing Rank-based Metrics with Blackbox Differentiation", CVPR 2020.
    """
    relevance = torch.as_tensor(relevance).to(ranks)
    if ranks.shape != relevance.shape:
        raise InputError(
            f"ranks has shape {tuple(ranks.shape)} but relevance has {tuple(relevance.shape)}"
        )
    check_finite_target(ranks, "ranks", "loglog_recall", role="prediction")
    check_finite_target(relevance, "relevance", "loglog_recall")
    positive = relevance > 0.5
    held = ranks.detach()
    above = (held.unsqueeze(-2) < held.unsqueeze(-1)) & positive.unsqueeze(-2)
    rank_among_positives = 1.0 + above.sum(-1).to(ranks)
    negatives_above = (ranks - rank_among_positives).clamp_min(0.0)
    per_item = torch.log1p(torch.log1p(negatives_above)) * positive
    count = positive.sum(-1).clamp_min(1)
    return (per_item.sum(-1) / count).mean()
