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

    The sense does not enter (a square). PyEPO's ``pointwiseLTR``. With a known
    cost ``k`` both objectives gain the same ``<k, x>``, which cancels: the loss is
    the same (the pool then keeps whole solutions ``x``, of which it reads ``y``).

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

    Reference: Mandi, Bucarey, Mulamba, Guns, "Decision-Focused Learning:
    Through the Lens of Learning to Rank", ICML 2022.
    """

    def per_instance(self, c_hat: Tensor, c: Tensor, pool: Tensor,
                     known: Tensor | None = None) -> Tensor:
        # the known part <k, x> (the spec's and the instance's) is the same under both
        # costs: it cancels
        return ((c - c_hat) @ self.outputs(pool).T).square().mean(-1)
