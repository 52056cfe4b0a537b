"""Listwise learning to rank over a solution pool (Mandi et al.)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .base import check_number
from .pooled import CostPooledLoss


class ListwiseLTRLoss(CostPooledLoss):
    """Listwise LTR: cross-entropy between the pool's softmax rankings under the two costs.

    With ``c_hat`` and ``c`` the predicted and true min-sense costs, ``S`` the pool
    (see `combolayer.losses.pooled.PooledLoss`), ``tau = temperature``,
    ``p = softmax_{y in S}(-<c, y> / tau)`` clamped below at 1e-8 and
    ``q = softmax_{y in S}(-<c_hat, y> / tau)``:

        loss = -sum_{y in S} p_y log q_y
        d loss / d c_hat = (sum_y p_y y - (sum_y p_y) sum_y q_y y) / tau

    (``sum p = 1`` up to the clamp). Mandi et al.'s listwise (ListNet) loss, with
    their temperature ``tau`` on both distributions: a small ``tau`` concentrates
    them on the best solutions, a large one spreads them over the pool. At
    ``temperature=1`` (the default) it is PyEPO's ``listwiseLTR`` exactly, clamp
    included (PyEPO has no temperature).

    With a known cost ``k`` both distributions rank whole objectives,
    ``<c, y> + <k, x>`` and ``<c_hat, y> + <k, x>`` (the pool keeps whole solutions
    ``x``); the gradient keeps its form.

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
        temperature: ``tau > 0`` (default 1).

    Reference: Mandi, Bucarey, Mulamba, Guns, "Decision-Focused Learning:
    Through the Lens of Learning to Rank", ICML 2022.
    """

    def __init__(self, spec: Any, solve_ratio: float = 1.0, pool: Any = None,
                 reduction: str = "mean", backend: Any = "auto",
                 generator: torch.Generator | None = None, temperature: float = 1.0) -> None:
        temperature = check_number("ListwiseLTRLoss temperature", temperature, above=0)
        super().__init__(spec, solve_ratio=solve_ratio, pool=pool, reduction=reduction,
                         backend=backend, generator=generator)
        self.temperature = temperature

    def per_instance(self, c_hat: Tensor, c: Tensor, pool: Tensor,
                     known: Tensor | None = None) -> Tensor:
        tau = self.temperature
        target = torch.softmax(-self.values(c, pool, known) / tau, dim=-1).clamp(min=1e-8)
        predicted = torch.log_softmax(-self.values(c_hat, pool, known) / tau, dim=-1)
        return -(predicted * target).sum(-1)
