"""Contrastive MAP over a solution pool (Mulamba et al.)."""

from __future__ import annotations

from torch import Tensor

from .pooled import SolutionPooledLoss


class CMAPLoss(SolutionPooledLoss):
    """The contrastive MAP loss: the true solution against the pool's best under the prediction.

    With ``c_hat`` the predicted min-sense cost, ``y*`` the true solution and
    ``S`` the pool (see `combolayer.losses.pooled.PooledLoss`):

        loss = <c_hat, y*> - min_{y in S} <c_hat, y> = max_{y in S} (<c_hat, y*> - <c_hat, y>)
        d loss / d c_hat = y* - y_hat,   y_hat = argmin_{y in S} <c_hat, y>

    PyEPO's ``contrastiveMAP`` (CMAP); >= 0 when ``y*`` is in the pool, and 0
    exactly when the prediction ranks ``y*`` first among the pool.

    Reference: Mulamba, Mandi, Diligenti, Lombardi, Bucarey, Guns, "Contrastive
    Losses and Solution Caching for Predict-and-Optimize", IJCAI 2021.
    """

    def per_instance(self, c_hat: Tensor, y_star: Tensor, pool: Tensor) -> Tensor:
        return (c_hat * y_star).sum(-1) - (c_hat @ pool.T).min(-1).values
