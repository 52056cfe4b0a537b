"""Pointwise learning to rank over a solution pool (Mandi et al.)."""

from __future__ import annotations

from torch import Tensor

from .pooled import CostPooledLoss


class PointwiseLTRLoss(CostPooledLoss):
    """Pointwise LTR: each pooled solution's predicted objective regressed on its true one.

    With ``c_hat`` and ``c`` the predicted and true costs and ``S`` the pool
    (see `combolayer.losses.pooled.PooledLoss`):

        loss = 1/|S| sum_{y in S} (<c, y> - <c_hat, y>)^2
        d loss / d c_hat = -2/|S| sum_{y in S} (<c - c_hat, y>) y

    The sense does not enter (a square). PyEPO's ``pointwiseLTR``.

    Reference: Mandi, Bucarey, Mulamba, Guns, "Decision-Focused Learning:
    Through the Lens of Learning to Rank", ICML 2022.
    """

    def per_instance(self, c_hat: Tensor, c: Tensor, pool: Tensor) -> Tensor:
        return ((c - c_hat) @ pool.T).square().mean(-1)
