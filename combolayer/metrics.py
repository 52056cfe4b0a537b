"""Decision-quality metrics with PyEPO's definitions.

Each takes the true costs ``c`` of shape ``(*batch, *cost_shape)`` and the
decisions ``y_pred`` taken from predicted costs, and compares against the true
optimum ``y*(c)``. The optimum is solved in one batch call unless ``y_true``
(the optimal solutions, e.g. from :mod:`combolayer.data`) is given; pass a
compiled ``solver`` (or a ``backend``) to avoid recompiling per call.

Every metric raises ``ValueError`` when ``cost_true`` has NaN/inf or a trailing
shape other than ``cost_shape``, or when ``y_pred`` / ``y_true`` do not have
``cost_true``'s shape (the message names expected and got).

Examples:
    >>> import torch, combolayer as cl
    >>> spec = cl.problems.TopK(n=3, k=1)                   # pick the largest value
    >>> cost = torch.tensor([[1.0, 3.0, 2.0]])
    >>> cl.metrics.regret(spec, cost, torch.tensor([[0.0, 0.0, 1.0]])).tolist()
    [1.0]
    >>> round(float(cl.metrics.normalized_regret(spec, cost, torch.tensor([[0.0, 0.0, 1.0]]))), 4)
    0.3333
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .backends.registry import make_solver
from .backends.solver import Solver, check_costs, inner

#: PyEPO's guard against an all-zero optimal objective in normalized regret.
REGRET_EPS = 1e-7


def _as64(x: Any) -> Tensor:
    return torch.as_tensor(x).detach().to("cpu", torch.float64)


def _objectives(spec: Any, cost_true: Any, y_pred: Any, solver: Solver | None, backend: Any,
                y_true: Any) -> tuple[Tensor, Tensor, float]:
    """``(<c, y_pred>, <c, y*>, sign)`` per instance, as float64 tensors."""
    if solver is None:
        solver = make_solver(spec, backend)
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
    """Per-instance regret: ``<c, y_pred> - <c, y*(c)>`` (min), the reverse for max; >= 0.

    Args:
        spec: the problem.
        cost_true: the true costs, ``(*batch, *cost_shape)``.
        y_pred: the decisions taken, same shape.
        solver: a compiled solver for ``spec`` (skips compiling one).
        backend: the backend to compile with when ``solver`` is not given.
        y_true: the optimal solutions for ``cost_true`` (skips solving them).

    Returns:
        A float64 tensor of shape ``batch``.
    """
    value, best, sign = _objectives(spec, cost_true, y_pred, solver, backend, y_true)
    return sign * (value - best)


def normalized_regret(spec: Any, cost_true: Any, y_pred: Any, *, solver: Solver | None = None,
                      backend: Any = "auto", y_true: Any = None) -> Tensor:
    """Scalar ``sum regret / (sum |<c, y*(c)>| + 1e-7)`` over the batch (PyEPO's ``regret``).

    Arguments as :func:`regret`; returns a float64 scalar tensor.
    """
    value, best, sign = _objectives(spec, cost_true, y_pred, solver, backend, y_true)
    return (sign * (value - best)).sum() / (best.abs().sum() + REGRET_EPS)


def cost_ratio(spec: Any, cost_true: Any, y_pred: Any, *, solver: Solver | None = None,
               backend: Any = "auto", y_true: Any = None) -> Tensor:
    """Per-instance ``<c, y_pred> / <c, y*(c)>`` (1 is optimal; the Warcraft metric)."""
    value, best, _ = _objectives(spec, cost_true, y_pred, solver, backend, y_true)
    return value / best
