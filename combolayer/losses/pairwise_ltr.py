"""Pairwise learning to rank over a solution pool (Mandi et al.)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .base import check_number
from .pooled import CostPooledLoss


class PairwiseLTRLoss(CostPooledLoss):
    """Pairwise LTR: the pool's truly best solution should beat every other under the
    prediction, by at least ``margin``.

    With ``c_hat`` and ``c`` the predicted and true min-sense costs, ``S`` the
    pool (see `combolayer.losses.pooled.PooledLoss`),
    ``y_b = argmin_{y in S} <c, y>`` the pool's best under the true cost and
    ``theta = margin``:

        loss = 1/max(|S| - 1, 1) sum_{y in S, y != y_b} relu(theta + <c_hat, y_b> - <c_hat, y>)
        d loss / d c_hat = 1/max(|S| - 1, 1) sum_{y: theta + <c_hat, y_b> > <c_hat, y>} (y_b - y)

    Mandi et al.'s pairwise ranking loss, with their margin ``theta``; at
    ``margin=0`` (the default) it is PyEPO's ``pairwiseLTR`` (PyEPO has no margin),
    exactly where the pool's best is unique: on tied true objectives each takes the
    first best it holds, and PyEPO's pool is in ``np.unique``'s order. A margin asks
    the best solution to win by ``theta`` in objective units of the predicted cost, so
    it interacts with the cost's scale.

    With a known cost ``k`` every objective is whole, ``<c, y> + <k, x>`` (the pool
    keeps whole solutions ``x``): ``y_b`` is the pool's best under it, and each
    hinge compares whole objectives, ``theta + <c_hat, y_b - y> + <k, x_b - x>``.

    Args:
        spec: the problem: a spec, a compiled `Solver` or a ComboLayer.
        solve_ratio: the probability that a call solves the predicted costs exactly
            and adds the solutions to the pool (1.0: every call).
        pool: the pool's seed: the training set's true solutions, a ``cl.data`` data
            set, a PyEPO ``optDataset``, or a `combolayer.pool.SolutionPool`
            to share; None starts empty (then ``solve_ratio < 1`` needs a seed).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` over instances.
        backend: a backend name/config to compile a spec with (or a compiled
            `Solver`).
        generator: the ``torch.Generator`` the ``solve_ratio`` draws come from.
        margin: ``theta >= 0`` (default 0).

    Reference: Mandi, Bucarey, Mulamba, Guns, "Decision-Focused Learning:
    Through the Lens of Learning to Rank", ICML 2022.
    """

    def __init__(self, spec: Any, solve_ratio: float = 1.0, pool: Any = None,
                 reduction: str = "mean", backend: Any = "auto",
                 generator: torch.Generator | None = None, margin: float = 0.0) -> None:
        margin = check_number("PairwiseLTRLoss margin", margin, least=0)
        super().__init__(spec, solve_ratio=solve_ratio, pool=pool, reduction=reduction,
                         backend=backend, generator=generator)
        self.margin = margin

    def per_instance(self, c_hat: Tensor, c: Tensor, pool: Tensor,
                     known: Tensor | None = None) -> Tensor:
        predicted = self.values(c_hat, pool, known)
        best = self.values(c, pool, known).argmin(-1, keepdim=True)
        margins = torch.relu(self.margin + predicted.gather(-1, best) - predicted)
        if self.margin:  # y_b against itself: the hinge would count the margin
            margins = margins.scatter(-1, best, 0.0)
        return margins.sum(-1) / max(pool.shape[0] - 1, 1)
