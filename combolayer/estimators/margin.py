"""The informed margin (Rolinek et al., CVPR 2020): loss-augmented inference, around any
estimator."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from pydantic import PrivateAttr, field_validator, model_validator
from torch import Tensor

from ..backends.solver import Solver
from ..errors import InputError
from ..specs.canonical import canonical_form
from .base import DifferentiableSolve, Estimator, costs_backward, resolve_method

__all__ = ["Margin"]


def _check_binary(spec: Any, who: str) -> None:
    form = canonical_form(spec)
    n = form.num_outputs
    binary = (
        form.integer[:n].all() and (form.lower[:n] >= 0).all() and (form.upper[:n] <= 1).all()
    )
    if not binary:
        raise InputError(f"{who} needs a binary problem (0/1 outputs), got {spec.label}")


class Margin(Estimator):
    """Informed margin: wraps any estimator and, in training, adds
    ``(alpha / 2) * (2 y_true - 1)`` to the minimisation cost.

    Use it as ``ComboLayer(spec, method=Margin(alpha=0.1, method="blackbox"))``
    and call ``layer(w, target=y_true)``. Entries of the true solution become
    more expensive and the others cheaper, so the solver's answer must beat the
    truth by a margin (loss-augmented inference). Because it acts on the min
    cost, a max problem's cost ``w`` effectively loses the term: the sign flips
    with the sense, and nothing here tests for it. Binary problems only (checked
    when built); eval mode adds nothing; training without ``target`` raises.

    Args:
        alpha: the margin's width: the cost moves by ``alpha / 2`` per entry.
        method: the wrapped estimator: a name, a dict or an estimator object.

    Reference: Rolinek, Musil, Paulus, Vlastelica, Michaelis, Martius,
    "Optimizing Rank-based Metrics with Blackbox Differentiation", CVPR 2020.
    """

    name: ClassVar[str] = "margin"

    alpha: float = 0.1
    method: Any = "identity"
    _inner: Any = PrivateAttr()

    @field_validator("alpha")
    @classmethod
    def _check_alpha(cls, value: float) -> float:
        if not value >= 0:
            raise InputError(f"Margin alpha must be >= 0, got {value}")
        return value

    @model_validator(mode="after")
    def _check_method(self) -> Margin:
        # the estimator torch.compile's operator runs (`forward`, `backward`); `build`
        # resolves its own
        self._inner = resolve_method(self.method)
        return self

    @property
    def compiles_whole(self) -> bool:  # type: ignore[override]
        """Whether the wrapped estimator compiles whole: then so does the margin."""
        return bool(getattr(self._inner, "compiles_whole", False))

    @property
    def differentiable_backward(self) -> bool:  # type: ignore[override]
        """Whether the wrapped estimator's backward is pure torch: then so is the margin's."""
        return bool(getattr(self._inner, "differentiable_backward", False))

    def _shifted(self, costs: Tensor, target: Tensor | None, training: bool) -> Tensor:
        """The minimisation cost with the margin added in training."""
        if not training:
            return costs
        if target is None:
            raise InputError(
                "Margin needs the true solution in training: call layer(w, target=y_true)")
        return costs + self.alpha / 2.0 * (2.0 * target - 1.0)

    def forward(self, solver, costs, *, target, training):
        shifted = self._shifted(costs, target, training)
        output, saved = self._inner.forward(solver, shifted, target=target, training=training)
        # the wrapped backward is taken where its forward solved: at the shifted cost
        return output, None if saved is None else (shifted.detach(), *saved)

    def saved_like(self, solver, costs, training):
        saved = self._inner.saved_like(solver, costs, training)
        return None if saved is None else (torch.empty_like(costs), *saved)

    def backward(self, solver, grad, costs, shifted, *saved):
        # the margin is a constant shift: dL/dc is the wrapped estimator's at c + shift
        return costs_backward(self._inner, solver, grad, shifted, *saved)

    def build(self, solver: Solver) -> DifferentiableSolve:
        _check_binary(solver.spec, "Margin")
        base = self._inner.build(solver)  # one inner estimator: its state is shared

        def solve(costs: Tensor, *, target: Tensor | None = None, needs_grad: bool,
                  training: bool = True, **rows: Tensor) -> Tensor:
            costs = self._shifted(costs, target, training)
            return base(costs, target=target, needs_grad=needs_grad, training=training, **rows)

        return solve
