"""SPO+: a convex surrogate of regret (Elmachtoub & Grigas)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..backends.registry import as_solver
from ..backends.solver import check_costs, inner
from .base import SolverLoss, check_reduction, check_solution, reduce


class SPOPlusLoss(SolverLoss):
    """The SPO+ loss, a convex surrogate of regret that needs the true costs.

    With ``c_hat`` the predicted and ``c`` the true min-sense costs, ``y*`` the
    optimum for ``c`` and ``y~ = y(2 c_hat - c)``:
    ``loss = -min_y <2 c_hat - c, y> + 2 <c_hat, y*> - <c, y*> = <2 c_hat - c, y* - y~>``
    (>= 0) and ``d loss / d c_hat = 2 (y* - y~)``. ``y*`` and ``y~`` are solved in
    one batch call; pass ``y_true`` (the optimal solutions) to skip solving ``y*``.

    Args:
        spec: the problem: a spec, a compiled `Solver` or a ComboLayer.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` over instances.
        backend: a backend name/config to compile a spec with (or a compiled
            [`Solver`][combolayer.backends.Solver]).

    Reference: Elmachtoub, Grigas, "Smart 'Predict, then Optimize'",
    Management Science 68(1), 2022.
    """

    def __init__(self, spec: Any, reduction: str = "mean", backend: Any = "auto") -> None:
        self.solver = as_solver(spec, backend)
        self.spec = self.solver.spec
        self.reduction = check_reduction(reduction)

    def __repr__(self) -> str:
        return f"SPOPlusLoss({self.spec.label}, reduction={self.reduction!r})"

    def __call__(self, cost_pred: Tensor, cost_true: Tensor,
                 y_true: Tensor | None = None) -> Tensor:
        check_costs(self.spec, cost_pred, "cost_pred")
        cost_true = check_solution(self.solver, torch.as_tensor(cost_true), cost_pred, "cost_true")
        check_costs(self.spec, cost_true, "cost_true")
        sign = self.solver.sign
        c_hat, c = sign * cost_pred, sign * cost_true
        shifted = 2.0 * c_hat - c
        if y_true is None:
            both = self.solver.solve_min(torch.stack([shifted.detach(), c]))
            y_tilde, y_star = both[0], both[1]
        else:
            y_star = check_solution(self.solver, y_true, cost_pred, "y_true")
            y_tilde = self.solver.solve_min(shifted.detach())
        loss = inner(shifted, y_star - y_tilde, len(self.spec.cost_shape))
        return reduce(loss, self.reduction)
