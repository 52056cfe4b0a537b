"""What the solution-pool losses (NCE, CMAP, the LTR family) share: the pool and its refresh."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..backends.registry import as_solver
from ..backends.solver import KnownBound, check_costs
from ..errors import InputError, SolverError
from ..pool import draw_exact
from .base import SolverLoss, check_reduction, check_solution, reduce


class PooledLoss(SolverLoss):
    """Base of the losses over a pool of feasible solutions (PyEPO's ``solpool``).

    Every call first refreshes the pool as PyEPO does: with probability
    ``solve_ratio`` (every call at 1.0) the predicted costs are solved exactly,
    one batch call, and the solutions join the pool; otherwise the loss uses the
    pool as it is, with no solver call at all. ``pool`` seeds it with the
    training set's true solutions, PyEPO's ``dataset`` argument: pass the
    solutions ``(num_data, *cost_shape)``, a ``cl.data`` data set, a PyEPO
    ``optDataset``, or a `combolayer.pool.SolutionPool` to share
    one pool between losses; ``loss.pool.seed(y)`` adds more later. With
    ``solve_ratio < 1`` seed the pool, or the first call that does not solve
    finds it empty and raises `SolverError` (a RuntimeError).

    The sense is folded once: ``c = solver.sign * cost``, so subclasses write
    `per_instance` for minimisation on flattened ``(B, N)`` costs and a
    ``(P, N)`` pool; `SolutionPooledLoss` and `CostPooledLoss` check and
    flatten the target (true solutions or true costs) that they compare with.

    With a known cost ``k`` (`combolayer.ILP.known_cost`) the pool keeps whole
    solutions ``x = concat(y, aux)`` (seed it with them), and every objective a
    loss compares is the whole one, ``<c, y> + <k, x>`` (min form): subclasses
    read them from `values` and `target_value`, never from ``c @ pool.T``. A known
    cost of each instance (``known_cost=``, ``(*batch, num_vars)`` or ``(num_vars,)``,
    the spec's sense) is added to the spec's in every objective and in the pool's
    refresh; where the spec has none the pool keeps the outputs only, so the call's
    must then be zero on the auxiliaries.
    """

    _abstract_loss = True
    counts_known_cost = True  # every objective compared comes from values / target_value

    def __init__(self, spec: Any, solve_ratio: float = 1.0, pool: Any = None,
                 reduction: str = "mean", backend: Any = "auto",
                 generator: torch.Generator | None = None) -> None:
        self.solver = as_solver(spec, backend)
        self.spec = self.solver.spec
        self.solve_ratio = solve_ratio  # checked on setting (`cache_setting`)
        self.pool = pool  # a SolutionPool for the spec (`cache_setting`)
        self.reduction = check_reduction(reduction)
        self.generator = generator

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.spec.label}, solve_ratio={self.solve_ratio}, "
                f"pool={self.pool!r}, reduction={self.reduction!r})")

    def refreshed_pool(self, costs: Tensor, known: Tensor | None = None) -> Tensor:
        """The pool ``(P, width)`` on the costs' device and dtype (width ``N``, or
        ``num_vars`` with a known cost: whole solutions), after solving the
        ``(B, N)`` min-sense ``costs`` (with ``known``, each instance's own known cost
        ``(B, num_vars)`` in min form, bound) with probability ``solve_ratio``."""
        if draw_exact(self.solve_ratio, self.generator):
            solver = self.solver if known is None else KnownBound(self.solver, known)
            # the solver reads the batch off the cost shape: give it (B, *cost_shape)
            shaped = costs.detach().reshape(-1, *self.spec.cost_shape)
            y, aux = self.solve_whole(solver, shaped)
            y = y.reshape(-1, self.solver.num_outputs)
            whole = y if aux is None else torch.cat([y, aux], dim=-1)
            self.pool.add_solved(whole[:, : self.solver.pool_width])
        if not len(self.pool):
            raise SolverError(
                f"{type(self).__name__}'s solution pool is empty: pass pool=<the training "
                f"solutions> (or call loss.pool.seed(y_train)) when solve_ratio < 1"
            )
        return self.pool.snapshot(costs)

    def values(self, costs: Tensor, pool: Tensor, known: Tensor | None = None) -> Tensor:
        """The ``(B, P)`` min-sense objectives of the pooled solutions under ``(B, N)``
        ``costs``: ``<costs, y> + <k, x>`` for each pooled whole solution ``x = concat(y,
        aux)`` (with a known cost ``k`` the pool keeps whole solutions); ``<costs, y>``
        without one. ``known``: each instance's own known cost ``(B, num_vars)`` (min
        form, `instance_pool_known`), added to ``k``."""
        spec_known = self.known_like(pool)
        values = costs @ self.outputs(pool).T
        if spec_known is not None:
            values = values + pool @ spec_known
        if known is not None:
            values = values + known[:, : pool.shape[-1]] @ pool.T
        return values

    def target_value(self, costs: Tensor, y: Tensor, known: Tensor | None = None) -> Tensor:
        """The ``(B,)`` min-sense objectives of the ``(B, N)`` target solutions ``y``:
        ``<costs, y> + <k[:N], y>`` (``known``, each instance's own, added to ``k``). The
        known cost of the target's auxiliaries, which ``y_true`` does not give, does not
        depend on the prediction: it is left out, a constant shift of the loss (as
        Fenchel-Young drops it)."""
        return (costs * y).sum(-1) + self.target_known_value(y, known)

    def instance_pool_known(self, known_cost: Any, cost_pred: Tensor) -> Tensor | None:
        """The call's known cost (`instance_known`) flattened to ``(B, num_vars)``, or None.
        ValueError where the pool keeps the outputs only (the spec has no known cost of
        its own) and the call's weighs the auxiliaries, which pooled outputs cannot
        count."""
        known = self.instance_known(known_cost, cost_pred)
        if known is None:
            return None
        known = known.reshape(-1, self.solver.num_vars)
        n = self.solver.num_outputs
        if self.solver.pool_width == n and self.solver.weighs_aux(known):
            raise InputError(
                f"{type(self).__name__}'s pool keeps the outputs only ({self.spec.label} has "
                "no known cost of its own), so a per-call known cost on the auxiliaries "
                f"cannot be counted in its pooled objectives: known_cost[..., {n}:] must be "
                "zero here; SPOPlusLoss, FenchelYoungLoss, PGLoss and "
                "RegularizedFenchelYoungLoss count it on every variable")
        return known

    def outputs(self, pool: Tensor) -> Tensor:
        """The pooled solutions' outputs ``(P, N)`` (the pool may keep whole solutions)."""
        return pool[:, : self.solver.num_outputs]

    def flat(self, costs: Tensor, name: str) -> Tensor:
        """Checked min-sense costs, flattened to ``(B, N)``."""
        check_costs(self.spec, costs, name)
        return (self.solver.sign * costs).reshape(-1, self.solver.num_outputs)

    def true_costs(self, cost_true: Tensor, cost_pred: Tensor) -> Tensor:
        """``cost_true`` as a tensor like ``cost_pred``, its shape checked (not yet folded)."""
        return check_solution(self.solver, torch.as_tensor(cost_true), cost_pred, "cost_true")

    def finish(self, per_instance: Tensor, like: Tensor) -> Tensor:
        batch = like.shape[: like.ndim - len(self.spec.cost_shape)]
        return reduce(per_instance.reshape(batch), self.reduction)

    def per_instance(self, c_hat: Tensor, target: Tensor, pool: Tensor,
                     known: Tensor | None = None) -> Tensor:
        """The ``(B,)`` losses of min-sense ``(B, N)`` predictions against the
        flattened target, over the ``(P, width)`` pool (`refreshed_pool`); ``known``,
        each instance's own known cost ``(B, num_vars)`` (min form) or None, goes to
        every `values` and `target_value`."""
        raise NotImplementedError

    def flat_target(self, target: Tensor, cost_pred: Tensor) -> Tensor:
        """The checked target, flattened to ``(B, N)``."""
        raise NotImplementedError

    def _loss(self, cost_pred: Tensor, target: Tensor, known_cost: Any = None) -> Tensor:
        c_hat = self.flat(cost_pred, "cost_pred")
        target = self.flat_target(target, cost_pred)
        known = self.instance_pool_known(known_cost, cost_pred)
        pool = self.refreshed_pool(c_hat, known)
        return self.finish(self.per_instance(c_hat, target, pool, known), cost_pred)


class SolutionPooledLoss(PooledLoss):
    """A pool loss against the true solutions ``y_true`` (NCE, CMAP)."""

    _abstract_loss = True

    def __call__(self, cost_pred: Tensor, y_true: Tensor,
                 known_cost: Tensor | None = None) -> Tensor:
        return self._loss(cost_pred, y_true, known_cost)

    def flat_target(self, target: Tensor, cost_pred: Tensor) -> Tensor:
        y_star = check_solution(self.solver, target, cost_pred, "y_true")
        return y_star.reshape(-1, self.solver.num_outputs)


class CostPooledLoss(PooledLoss):
    """A pool loss against the true costs ``cost_true`` (the LTR family)."""

    _abstract_loss = True

    def __call__(self, cost_pred: Tensor, cost_true: Tensor,
                 known_cost: Tensor | None = None) -> Tensor:
        return self._loss(cost_pred, cost_true, known_cost)

    def flat_target(self, target: Tensor, cost_pred: Tensor) -> Tensor:
        return self.flat(self.true_costs(target, cost_pred), "cost_true")
