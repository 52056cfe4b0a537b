"""Decision-quality metrics with PyEPO's definitions.

Each takes the true costs ``c`` of shape ``(*batch, *cost_shape)`` and the
decisions ``y_pred`` taken from predicted costs, and compares against the true
optimum ``y*(c)``. The optimum is solved in one batch call unless ``y_true``
(the optimal solutions, e.g. from :mod:`combolayer.data`) is given. The
problem is a spec, a compiled solver or a ComboLayer; pass a compiled one
(as the problem or as ``backend=``) to avoid recompiling per call.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .backends.registry import as_solver, renamed_solver_keyword
from .backends.solver import Solver, check_costs, inner

#: PyEPO's guard against an all-zero optimal objective in normalized regret.
REGRET_EPS = 1e-7


def _as64(x: Any) -> Tensor:
    return torch.as_tensor(x).detach().to("cpu", torch.float64)


def _objectives(spec: Any, cost_true: Any, y_pred: Any, solver: Solver | None, backend: Any,
                y_true: Any, where: str) -> tuple[Tensor, Tensor, float]:
    """``(<c, y_pred>, <c, y*>, sign)`` per instance, as float64 tensors."""
    solver = as_solver(spec, renamed_solver_keyword(solver, backend, where))
    cost, pred = _as64(cost_true), _as64(y_pred)
    check_costs(solver.spec, cost, "cost_true")
    if pred.shape != cost.shape:
        raise ValueError(
            f"y_pred has shape {tuple(pred.shape)} but cost_true has {tuple(cost.shape)}"
        )
    if y_true is None:
        best = solver.solve(cost)
    else:
        best = _as64(y_true)
        if best.shape != cost.shape:
            raise ValueError(
                f"y_true has shape {tuple(best.shape)} but cost_true has {tuple(cost.shape)}"
            )
    k = len(solver.cost_shape)
    return inner(cost, pred, k), inner(cost, best, k), solver.sign


def regret(spec: Any, cost_true: Any, y_pred: Any, *, solver: Solver | None = None,
           backend: Any = "auto", y_true: Any = None) -> Tensor:
    """Per-instance regret: ``<c, y_pred> - <c, y*(c)>`` (min), the reverse for max; >= 0."""
    value, best, sign = _objectives(spec, cost_true, y_pred, solver, backend, y_true,
                                    "regret")
    return sign * (value - best)


def normalized_regret(spec: Any, cost_true: Any, y_pred: Any, *, solver: Solver | None = None,
                      backend: Any = "auto", y_true: Any = None) -> Tensor:
    """Scalar ``sum regret / (sum |<c, y*(c)>| + 1e-7)`` over the batch (PyEPO's ``regret``)."""
    value, best, sign = _objectives(spec, cost_true, y_pred, solver, backend, y_true,
                                    "normalized_regret")
    return (sign * (value - best)).sum() / (best.abs().sum() + REGRET_EPS)


def cost_ratio(spec: Any, cost_true: Any, y_pred: Any, *, solver: Solver | None = None,
               backend: Any = "auto", y_true: Any = None) -> Tensor:
    """Per-instance ``<c, y_pred> / <c, y*(c)>`` (1 is optimal; the Warcraft metric)."""
    value, best, _ = _objectives(spec, cost_true, y_pred, solver, backend, y_true,
                                 "cost_ratio")
    return value / best
