"""Pairwise-difference learning to rank over a solution pool (Mandi et al.)."""

from __future__ import annotations

from torch import Tensor

from .pooled import CostPooledLoss


class PairwiseDifferenceLTRLoss(CostPooledLoss):
    """Pairwise difference LTR: the predicted objective gap between the pool's best
    solution and each other one regressed on the true gap.

    With ``c_hat`` and ``c`` the predicted and true min-sense costs, ``S`` the pool
    (see `combolayer.losses.pooled.PooledLoss`) and
    ``y_b = argmin_{y in S} <c, y>`` the pool's best under the true cost:

        loss = 1/max(|S| - 1, 1) sum_{y in S, y != y_b} (<c_hat, y_b - y> - <c, y_b - y>)^2
        d loss / d c_hat = 2/max(|S| - 1, 1) sum_{y != y_b} <c_hat - c, y_b - y> (y_b - y)

    Unlike the pointwise loss it asks only for the right objective *differences*,
    so a prediction off by a constant objective shift is not penalised; unlike the
    pairwise hinge it keeps pushing once the order is right, toward the true gaps.
    The sense does not enter (a square). PyEPO has no such loss; the test checks
    it against Mandi et al.'s reference loop.

    With a known cost ``k`` (the pool keeps whole solutions ``x``) ``y_b`` is the
    pool's best under the whole objective ``<c, y> + <k, x>``; in each gap error the
    known part ``<k, x_b - x>`` is on both sides and cancels, so only ``y_b`` changes.

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
    Through the Lens of Learning to Rank", ICML 2022 (the "pairwise difference"
    loss).
    """

    def per_instance(self, c_hat: Tensor, c: Tensor, pool: Tensor,
                     known: Tensor | None = None) -> Tensor:
        true = self.values(c, pool, known)
        best = true.argmin(-1, keepdim=True)
        predicted = self.values(c_hat, pool, known)
        gap_error = (predicted.gather(-1, best) - predicted) - (true.gather(-1, best) - true)
        # y_b against itself has gap 0 on both sides: it adds nothing
        return gap_error.square().sum(-1) / max(pool.shape[0] - 1, 1)
