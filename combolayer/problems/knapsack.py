"""The 0/1 multi-dimensional knapsack."""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import model_validator

from ..errors import InputError
from ..specs.base import ILP, MAX_COEFFICIENT, MAX_ENTRIES, Sense, Spec, register_spec

__all__ = ["Knapsack"]


@register_spec
class Knapsack(Spec):
    """Pick items of value ``w`` (shape ``(n,)``) within ``m`` capacities.

    Args:
        weights: the ``(m, n)`` non-negative weight of each item in each dimension.
        capacities: the ``(m,)`` non-negative capacity of each dimension.
        sense: ``"max"`` (default: the most valuable feasible set) or ``"min"``.

    Examples:
        >>> import numpy as np, combolayer as cl
        >>> spec = cl.problems.Knapsack(weights=[[1, 2, 3]], capacities=[3])
        >>> cl.make_solver(spec).solve(np.array([1.0, 1.0, 3.0])).tolist()
        [0.0, 0.0, 1.0]
    """

    kind: Literal["knapsack"] = "knapsack"
    weights: list[list[float]]
    capacities: list[float]
    sense: Sense = "max"

    _label_fields: ClassVar[tuple[str, ...]] = ("num_items", "num_constraints")

    @model_validator(mode="after")
    def _check(self) -> Knapsack:
        if not self.weights or not self.weights[0]:
            raise InputError("weights must be a non-empty (m, n) matrix")
        n = len(self.weights[0])
        for i, row in enumerate(self.weights):
            if len(row) != n:
                raise InputError(f"weights[{i}] has {len(row)} entries, expected {n} "
                                 "(one per item, like weights[0])")
            for j, v in enumerate(row):
                if not 0 <= v < MAX_COEFFICIENT:
                    raise InputError(f"weights[{i}][{j}] must be >= 0 and below "
                                     f"{MAX_COEFFICIENT:g}, got {v}")
        if len(self.capacities) != len(self.weights):
            raise InputError(f"capacities has {len(self.capacities)} entries, expected "
                             f"{len(self.weights)} (one per row of weights)")
        for i, v in enumerate(self.capacities):
            if not 0 <= v < MAX_COEFFICIENT:
                raise InputError(f"capacities[{i}] must be >= 0 and below "
                                 f"{MAX_COEFFICIENT:g}, got {v}")
        return self

    @property
    def num_items(self) -> int:
        return len(self.weights[0])

    @property
    def num_constraints(self) -> int:
        return len(self.weights)

    @property
    def cost_shape(self) -> tuple[int, ...]:
        return (self.num_items,)

    def model_size(self) -> tuple[int, int]:
        return self.num_items, (self.num_items + 1) * self.num_constraints

    @classmethod
    def raw_model_size(cls, data: dict) -> tuple[int, int] | None:
        # YAML aliases repeat a row of weights without its text: each reference counts
        weights = data.get("weights")
        if not isinstance(weights, list) or not weights or not isinstance(weights[0], list):
            return None
        entries = 0
        for row in weights:
            entries += (len(row) if isinstance(row, list) else 0) + 1
            if entries > MAX_ENTRIES:
                break
        return len(weights[0]), entries

    def to_ilp(self) -> ILP:
        return ILP.from_matrices(shape=[self.num_items], A_ub=np.asarray(self.weights),
                                 b_ub=np.asarray(self.capacities), sense=self.sense)
