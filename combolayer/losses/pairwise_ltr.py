"""Pairwise learning to rank over a solution pool (Mandi et al.)."""

from __future__ import annotations

import torch
from torch import Tensor

from .pooled import CostPooledLoss


class PairwiseLTRLoss(CostPooledLoss):
    """Pairwise LTR: the pool's truly best solution should beat every other under the prediction.

    With ``c_hat`` and ``c`` the predicted and true min-sense costs, ``S`` the
    pool (see `combolayer.losses.pooled.PooledLoss`) and
    ``y_b = argmin_{y in S} <c, y>`` the pool's best under the true cost:

        loss = 1/max(|S| - 1, 1) sum_{y in S} relu(<c_hat, y_b> - <c_hat, y>)
        d loss / d c_hat = 1/max(|S| - 1, 1) sum_{y: <c_hat, y_b> > <c_hat, y>} (y_b - y)

    (``y_b`` against itself adds 0). PyEPO's ``pairwiseLTR``, with the hinge at 0.

    Reference: Mandi, Bucarey, Mulamba, Guns, "Decision-Focused Learning:
    Through the Lens of Learning to Rank", ICML 2022.
    """

    def per_instance(self, c_hat: Tensor, c: Tensor, pool: Tensor) -> Tensor:
        predicted = c_hat @ pool.T
        best = (c @ pool.T).argmin(-1, keepdim=True)
        margins = torch.relu(predicted.gather(-1, best) - predicted)
        return margins.sum(-1) / max(pool.shape[0] - 1, 1)
