"""SPO+: a convex surrogate of regret (Elmachtoub & Grigas)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..backends.clip import ClipNegatives
from ..backends.registry import as_solver
from ..backends.solver import KnownBound, Solver, check_costs, inner
from ..pool import SolutionPool
from .base import SolverLoss, check_reduction, check_solution, reduce


class SPOPlusLoss(SolverLoss):
    """The SPO+ loss, a convex surrogate of regret that needs the true costs.

    With ``c_hat`` the predicted and ``c`` the true min-sense costs, ``y*`` the
    optimum for ``c`` and ``y~ = y(2 c_hat - c)``:
    ``loss = -min_y <2 c_hat - c, y> + 2 <c_hat, y*> - <c, y*> = <2 c_hat - c, y* - y~>``
    (>= 0) and ``d loss / d c_hat = 2 (y* - y~)``. ``y*`` and ``y~`` are solved in
    one batch call; pass ``y_true`` (the optimal solutions) to skip solving ``y*``. It
    is taken as given, as in PyEPO and as `combolayer.metrics.regret` takes ``y_pred``:
    not checked against the constraints, and a point that breaks them can make the
    loss negative.

    With a known cost ``k`` (`combolayer.ILP.known_cost`, min form) the objective is
    affine, ``<c, y> + <k, x>``, and the loss is
    ``<2 c_hat - c, y* - y~> + <k, x* - x~>`` over the whole solutions, with the same
    gradient ``2 (y* - y~)`` (docs/core.md, "Your whole model"); ``y_true`` is then used
    only when ``k`` is zero on the auxiliaries and there is no cache.

    Args:
        spec: the problem: a spec, a compiled `Solver` or a ComboLayer.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` over instances.
        backend: a backend name/config to compile a spec with (or a compiled
            `Solver`).
        solve_ratio: PyEPO's solution cache: ``y~`` is solved exactly with this
            probability per instance, otherwise it is the best solution in
            `pool` under ``2 c_hat - c``. ``y*`` is always exact (or
            ``y_true``), and goes into the pool. 1.0 (default): no cache.
        pool: a `combolayer.pool.SolutionPool` to use (e.g. a
            layer's ``layer.pool``, to share one); a new one by default. Seed it
            with the training set's true solutions: ``loss.pool.seed(y_train)`` (whole
            solutions ``concat(y, aux)`` when the spec has a known cost).
        generator: the ``torch.Generator`` the ``solve_ratio`` draws come from.

    Reference: Elmachtoub, Grigas, "Smart 'Predict, then Optimize'",
    Management Science 68(1), 2022.
    """

    counts_known_cost = True  # see _with_known_cost / _known_part

    def __init__(self, spec: Any, reduction: str = "mean", backend: Any = "auto",
                 solve_ratio: float = 1.0, pool: SolutionPool | None = None,
                 generator: torch.Generator | None = None) -> None:
        self.solver = as_solver(spec, backend)
        self.spec = self.solver.spec
        self.reduction = check_reduction(reduction)
        self.solve_ratio = solve_ratio  # checked on setting (`cache_setting`)
        self.pool = pool  # a SolutionPool for the spec (`cache_setting`)
        self.generator = generator

    @property
    def shifted_solver(self) -> Solver:
        """The solver ``y~`` comes from: the exact one, or the cache around it (with
        the negatives of ``2 c_hat - c`` set to 0 where the problem cannot take them)."""
        return self.own_step(self.cached_solver, "2 c_hat - c")

    def __repr__(self) -> str:
        ratio = f", solve_ratio={self.solve_ratio}" if self.solve_ratio < 1.0 else ""
        return f"SPOPlusLoss({self.spec.label}, reduction={self.reduction!r}{ratio})"

    def __call__(self, cost_pred: Tensor, cost_true: Tensor,
                 y_true: Tensor | None = None, known_cost: Tensor | None = None) -> Tensor:
        """The loss; ``known_cost``, optional, is a known cost of each instance
        (``(*batch, num_vars)`` or ``(num_vars,)``, the spec's sense), added to the spec's
        own and counted by the affine formula (a ``y_true`` given must be optimal under
        it)."""
        check_costs(self.spec, cost_pred, "cost_pred")
        cost_true = check_solution(self.solver, torch.as_tensor(cost_true), cost_pred, "cost_true")
        check_costs(self.spec, cost_true, "cost_true")
        sign = self.solver.sign
        c_hat, c = sign * cost_pred, sign * cost_true
        self.check_nonnegative(c_hat, "cost_pred")
        self.check_nonnegative(c, "cost_true")
        shifted = 2.0 * c_hat - c
        known = self.instance_known(known_cost, c)
        if self.solver.known is not None or known is not None:
            return reduce(self._with_known_cost(c_hat, c, shifted, y_true, cost_pred, known),
                          self.reduction)
        if y_true is None and self.shifted_solver is self.solver:
            both = self.solver.solve_min(torch.stack([shifted.detach(), c]))
            y_tilde, y_star = both[0], both[1]
        else:
            y_star = (self.solver.solve_min(c) if y_true is None else
                      check_solution(self.solver, y_true, cost_pred, "y_true"))
            if self.cached_solver is not self.solver:  # y_true, a user's, is checked
                add = self.pool.add_solved if y_true is None else self.pool.add
                add(y_star.reshape(-1, self.solver.num_outputs))
            y_tilde = self.shifted_solver.solve_min(shifted.detach())
        loss = inner(self._as_solved(shifted), y_star - y_tilde, len(self.spec.cost_shape))
        return reduce(loss, self.reduction)

    def _as_solved(self, shifted: Tensor, known: Tensor | None = None) -> Tensor:
        """``2 c_hat - c`` with the values ``y~`` was solved for, and its own gradient:
        where the problem needs non-negative costs, its negatives are set to 0 before the
        solve (`own_step`), and the loss on the costs as they were went below 0 (-1 on a
        3 x 3 grid, under a regret of 0); on the costs solved, ``y~`` is their minimiser,
        so the loss is at least 0. ``known``: the instances' known cost, as the solve
        clipped with it."""
        step = self.shifted_solver
        if not isinstance(step, ClipNegatives):
            return shifted
        return shifted + (step.clip(shifted.detach(), known) - shifted.detach())

    def _with_known_cost(self, c_hat: Tensor, c: Tensor, shifted: Tensor,
                         y_true: Tensor | None, cost_pred: Tensor,
                         known: Tensor | None = None) -> Tensor:
        """SPO+ for the affine objective ``<c, y> + <k, x>`` (min-sense ``k``, the
        spec's known cost): ``loss = <2 c_hat - c, y* - y~> + <k, x* - x~>`` with ``x~``
        the optimum under ``2 c_hat - c`` (and ``k``) and ``x*`` under ``c``;
        ``d loss / d c_hat = 2 (y* - y~)`` as before (docs/estimators.md). ``y_true`` is
        used when the known cost is zero on the auxiliaries; otherwise ``x*``'s
        auxiliaries are needed and ``y*`` is solved. ``known``: the instances' own known
        cost (min form, ``(*batch, num_vars)``), bound to every solve and counted."""
        solver, shifted_solver = self.solver, self.shifted_solver
        cached = shifted_solver is not solver
        on_aux = solver.weighs_aux(known)
        if known is not None:
            solver, shifted_solver = KnownBound(solver, known), KnownBound(shifted_solver, known)
        k = len(self.spec.cost_shape)
        if y_true is None and not cached:
            y, aux = solver.solve_min(torch.stack([shifted.detach(), c]), return_aux=True)
            (y_tilde, y_star), (aux_tilde, aux_star) = y, aux
        else:
            if y_true is not None and not on_aux and not cached:
                y_star, aux_star = check_solution(solver, y_true, cost_pred, "y_true"), None
            else:  # the pool keeps whole solutions: y*'s auxiliaries are needed
                y_star, aux_star = solver.solve_min(c, return_aux=True)
            if cached:
                flat = y_star.reshape(-1, solver.num_outputs)  # (B, N); aux may be (B, 0)
                whole = torch.cat([flat, aux_star.reshape(len(flat), solver.num_aux).to(flat)],
                                  dim=1)
                self.pool.add_solved(whole[:, : solver.pool_width])
            y_tilde, aux_tilde = shifted_solver.solve_min(shifted.detach(), return_aux=True)
        # known_value is in the spec's sense: times sign, the min-sense <k, x>
        known_part = solver.sign * (solver.known_value(y_star, aux_star)
                                    - solver.known_value(y_tilde, aux_tilde))
        return (inner(self._as_solved(shifted, known), y_star - y_tilde, k)
                + known_part.to(shifted))
