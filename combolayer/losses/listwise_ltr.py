"""Listwise learning to rank over a solution pool (Mandi et al.)."""

from __future__ import annotations

import torch
from torch import Tensor

from .pooled import CostPooledLoss


class ListwiseLTRLoss(CostPooledLoss):
    """Listwise LTR: cross-entropy between the pool's softmax rankings under the two costs.

    With ``c_hat`` and ``c`` the predicted and true min-sense costs and ``S``
    the pool (see `combolayer.losses.pooled.PooledLoss`),
    ``p = softmax_{y in S}(-<c, y>)`` clamped below at 1e-8 and
    ``q = softmax_{y in S}(-<c_hat, y>)``:

        loss = -sum_{y in S} p_y log q_y
        d loss / d c_hat = sum_y p_y y - (sum_y p_y) sum_y q_y y

    (``sum p = 1`` up to the clamp). PyEPO's ``listwiseLTR``, clamp included.

    Reference: Mandi, Bucarey, Mulamba, Guns, "Decision-Focused Learning:
    Through the Lens of Learning to Rank", ICML 2022.
    """

    def per_instance(self, c_hat: Tensor, c: Tensor, pool: Tensor) -> Tensor:
        target = torch.softmax(-(c @ pool.T), dim=-1).clamp(min=1e-8)
        return -(torch.log_softmax(-(c_hat @ pool.T), dim=-1) * target).sum(-1)
