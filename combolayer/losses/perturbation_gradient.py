"""The perturbation gradient (PG) loss (Gupta & Huang): a finite difference along the true cost."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..backends.registry import as_solver
from ..backends.solver import KnownBound, check_costs
from .base import SolverLoss, check_number, check_reduction, check_solution, reduce


class PGLoss(SolverLoss):
    """The perturbation gradient loss: the decision loss's directional finite difference.

    With ``c_hat`` the predicted and ``c`` the true min-sense costs, ``h`` the
    step ``sigma`` and ``V(u) = min_y <u, y>`` the optimal value,
    ``<c, y(c_hat)>`` is the derivative of ``V`` along ``c`` at ``c_hat``; PG
    replaces it by a finite difference, a Lipschitz surrogate of the decision
    loss that needs no true solutions. One-sided (backward) difference:

        loss = (<c_hat, y(c_hat)> - <c_hat - h c, y(c_hat - h c)>) / h

    and two-sided (``two_sides=True``, central):

        loss = (<c_hat + h c, y(c_hat + h c)> - <c_hat - h c, y(c_hat - h c)>) / (2 h)

    The solutions are held constant, so
    ``d loss / d c_hat = (y(c_hat) - y(c_hat - h c)) / h`` (one-sided) or
    ``(y(c_hat + h c) - y(c_hat - h c)) / (2 h)`` (two-sided). PyEPO's
    ``perturbationGradient`` (PG) with the same ``sigma`` and ``two_sides``;
    both solves of a call are one batch call.

    With a known cost ``k`` (`combolayer.ILP.known_cost`, min form) ``V`` is the
    optimal value of the whole objective, ``V(u) = min_x <u, y> + <k, x>``, so each
    term above gains the known part of its solution's objective, ``<k, x(u)>``
    (the solutions are then whole, ``x = concat(y, aux)``); the gradient is unchanged,
    since ``d V / d u = y(u)`` still. ``<c, y(c_hat)>`` is again ``V``'s derivative along
    ``c``, which is what the finite difference approximates. A known cost of each
    instance (``known_cost=``) is added to the spec's and counted the same way.

    It is a loss, not a layer's estimator: its output is a scalar surrogate of
    regret and its input pairs the prediction with the true cost, as SPO+'s does.

    Args:
        spec: the problem: a spec, a compiled `Solver` or a ComboLayer.
        sigma: the finite-difference step ``h`` (> 0), relative to the cost's scale.
        two_sides: central differences (two solves) instead of backward ones.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` over instances.
        backend: a backend name/config to compile a spec with.

    Reference: Gupta, Huang, "Decision-Focused Learning with Directional
    Gradients", NeurIPS 2024.
    """

    counts_known_cost = True  # V counts it: min_value over whole solutions

    def __init__(self, spec: Any, sigma: float = 0.1, two_sides: bool = False,
                 reduction: str = "mean", backend: Any = "auto") -> None:
        self.sigma = check_number("PGLoss sigma", sigma, above=0)
        self.solver = as_solver(spec, backend)
        self.spec = self.solver.spec
        self.two_sides = bool(two_sides)
        self.reduction = check_reduction(reduction)

    def __repr__(self) -> str:
        return (f"PGLoss({self.spec.label}, sigma={self.sigma}, two_sides={self.two_sides}, "
                f"reduction={self.reduction!r})")

    def __call__(self, cost_pred: Tensor, cost_true: Tensor,
                 known_cost: Tensor | None = None) -> Tensor:
        """The loss; ``known_cost``, optional, is a known cost of each instance
        (``(*batch, num_vars)`` or ``(num_vars,)``, the spec's sense), added to the spec's
        own: ``V`` is then each instance's whole objective, its solves and values count
        it."""
        check_costs(self.spec, cost_pred, "cost_pred")
        cost_true = check_solution(self.solver, torch.as_tensor(cost_true), cost_pred, "cost_true")
        check_costs(self.spec, cost_true, "cost_true")
        sign = self.solver.sign
        c_hat, step = sign * cost_pred, self.sigma * sign * cost_true
        self.check_nonnegative(c_hat, "cost_pred")
        upper = c_hat + step if self.two_sides else c_hat
        lower = c_hat - step
        # the steps' own negatives (c_hat - sigma c) are set to 0 where the problem needs it
        solved = [self.own_costs(upper.detach(), "c_hat + sigma c") if self.two_sides
                  else upper.detach(), self.own_costs(lower.detach(), "c_hat - sigma c")]
        known = self.instance_known(known_cost, c_hat)
        solver = self.solver if known is None else KnownBound(self.solver, known)
        y, aux = self.solve_whole(solver, torch.stack(solved))
        aux = (None, None) if aux is None else aux
        width = 2.0 * self.sigma if self.two_sides else self.sigma
        loss = (self.min_value(upper, y[0], aux[0], solver)
                - self.min_value(lower, y[1], aux[1], solver)) / width
        return reduce(loss, self.reduction)
