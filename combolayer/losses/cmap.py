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

    With a known cost ``k`` both objectives are whole, ``<c_hat, y> + <k, x>``
    (the pool keeps whole solutions ``x``), and ``y_hat`` is the pool's best under
    it; for ``y*`` the known cost of its outputs, ``<k[:N], y*>`` (its auxiliaries'
    is a constant, left out: the value is >= 0 as above when ``k`` is zero on the
    auxiliaries, and otherwise shifted by ``-<k[N:], aux*>``).

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

    Reference: Mulamba, Mandi, Diligenti, Lombardi, Bucarey, Guns, "Contrastive
    Losses and Solution Caching for Predict-and-Optimize", IJCAI 2021.
    """

    def per_instance(self, c_hat: Tensor, y_star: Tensor, pool: Tensor,
                     known: Tensor | None = None) -> Tensor:
        return (self.target_value(c_hat, y_star, known)
                - self.values(c_hat, pool, known).min(-1).values)
