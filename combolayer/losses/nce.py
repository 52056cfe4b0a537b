"""Noise-contrastive estimation over a solution pool (Mulamba et al.)."""

from __future__ import annotations

from torch import Tensor

from .pooled import SolutionPooledLoss


class NCELoss(SolutionPooledLoss):
    """The NCE loss: the true solution against every solution in the pool.

    With ``c_hat`` the predicted min-sense cost, ``y*`` the true solution and
    ``S`` the pool (see `combolayer.losses.pooled.PooledLoss` for the
    pool, ``solve_ratio`` and seeding):

        loss = 1/|S| sum_{y in S} (<c_hat, y*> - <c_hat, y>)
        d loss / d c_hat = y* - mean_{y in S} y

    PyEPO's ``noiseContrastiveEstimation`` (NCE): the pool's mean, including the
    true solutions it was seeded with; no solver call in the backward pass.

    With a known cost ``k`` each ``<c_hat, y>`` is the whole objective
    ``<c_hat, y> + <k, x>`` (the pool keeps whole solutions ``x``; for ``y*`` the
    known cost of its outputs, ``<k[:N], y*>``, its auxiliaries' being a constant
    that is left out). The gradient is unchanged.

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
                - self.values(c_hat, pool, known).mean(-1))
