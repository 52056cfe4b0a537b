"""Gradient estimators: how a layer's backward pass treats the solver.

Every estimator sees minimisation costs: the layer folds the objective sense
into the cost once (``costs = sign * P(w)``) and autograd carries the sign back,
so nothing here tests for min or max. ``build(solver)`` runs once, when a layer
is built, and returns the differentiable solve

    solve(costs, *, target, needs_grad) -> y

where ``needs_grad`` is decided by the layer, outside any autograd.Function.
The solver is captured by the returned closure, never passed through ``.apply``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .backends.solver import Solver

DifferentiableSolve = Callable[..., Tensor]


class Estimator(Protocol):
    def build(self, solver: Solver) -> DifferentiableSolve: ...


class _NegativeIdentity(torch.autograd.Function):
    """Forward: the given solution. Backward: the negative identity, ``dL/dc = -dL/dy``."""

    @staticmethod
    def forward(costs: Tensor, solution: Tensor) -> Tensor:
        return solution.clone()

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return -grad, None


@dataclass(frozen=True)
class Identity:
    """Identity with projection: the solver is a negative identity on the backward pass.

    ``dL/dw = -(dP/dw)^T dL/dy`` for min problems (``+`` for max); no extra solver
    call. Combine it with ``projection`` and ``noise`` on :class:`~combolayer.ComboLayer`.

    Reference: Sahoo, Paulus, Vlastelica, Musil, Kuleshov, Martius, "Backpropagation
    through Combinatorial Algorithms: Identity with Projection Works", ICLR 2023.
    """

    def build(self, solver: Solver) -> DifferentiableSolve:
        def solve(costs: Tensor, *, target: Tensor | None = None, needs_grad: bool) -> Tensor:
            solution = solver.solve_min(costs)
            return _NegativeIdentity.apply(costs, solution) if needs_grad else solution

        return solve


@dataclass(frozen=True)
class Blackbox:
    """Blackbox backpropagation: the gradient of a piecewise-linear interpolation.

    With ``c`` the solver input, ``c' = c + lam * dL/dy`` and
    ``dL/dc = (y(c') - y(c)) / lam``; one extra batched solver call per backward.

    Reference: Vlastelica, Paulus, Musil, Martius, Rolinek, "Differentiation of
    Blackbox Combinatorial Solvers", ICLR 2020.
    """

    lam: float = 20.0

    def __post_init__(self) -> None:
        if not self.lam > 0:
            raise ValueError(f"Blackbox lam must be > 0, got {self.lam}")

    def build(self, solver: Solver) -> DifferentiableSolve:
        lam = self.lam

        class _Blackbox(torch.autograd.Function):
            @staticmethod
            def forward(costs: Tensor, solution: Tensor) -> Tensor:
                return solution.clone()

            @staticmethod
            def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
                costs, solution = inputs
                ctx.save_for_backward(costs, solution)

            @staticmethod
            @once_differentiable
            def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
                costs, solution = ctx.saved_tensors
                shifted = solver.solve_min(costs + lam * grad)
                return (shifted - solution) / lam, None

        def solve(costs: Tensor, *, target: Tensor | None = None, needs_grad: bool) -> Tensor:
            solution = solver.solve_min(costs)
            return _Blackbox.apply(costs, solution) if needs_grad else solution

        return solve


#: Estimators by name, as in ``method="blackbox"`` or ``{"name": "blackbox", "lam": 10}``.
METHODS: dict[str, type] = {"identity": Identity, "blackbox": Blackbox}


def resolve_method(method: str | dict | Estimator) -> Estimator:
    if isinstance(method, str):
        method = {"name": method}
    if isinstance(method, dict):
        params = dict(method)
        name = params.pop("name", None)
        if name not in METHODS:
            raise ValueError(f"unknown method {name!r}: expected one of {sorted(METHODS)}")
        try:
            return METHODS[name](**params)
        except TypeError as error:
            raise ValueError(f"bad parameters for method {name!r}: {error}") from None
    if not callable(getattr(method, "build", None)):
        raise ValueError(
            f"method must be a name, a dict or an estimator with build(solver), got {method!r}"
        )
    return method
