"""Bipartite matching (assignment): every row matched once, every column at most once."""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import model_validator

from ..specs.base import ILP, Sense, Spec, register_spec

__all__ = ["Matching"]


@register_spec
class Matching(Spec):
    """Assign each of ``rows`` to a distinct one of ``cols`` (``rows <= cols``).

    Cost and solution ``(rows, cols)``; perfect matching when ``rows == cols``.

    Examples:
        >>> import numpy as np, combolayer as cl
        >>> spec = cl.problems.Matching(2, 2)
        >>> cl.make_solver(spec).solve(np.array([[0.0, 1.0], [1.0, 0.0]])).tolist()
        [[1.0, 0.0], [0.0, 1.0]]
    """

    kind: Literal["matching"] = "matching"
    rows: int
    cols: int
    sense: Sense = "min"

    _label_fields: ClassVar[tuple[str, ...]] = ("rows", "cols")
    lp_is_integral: ClassVar[bool] = True

    @model_validator(mode="after")
    def _check(self) -> Matching:
        if self.rows < 1:
            raise ValueError(f"rows must be >= 1, got {self.rows}")
        if self.cols < self.rows:
            raise ValueError(f"cols={self.cols} < rows={self.rows}: every row needs its own "
                             "column; transpose the cost so that rows <= cols")
        return self

    @property
    def cost_shape(self) -> tuple[int, ...]:
        return (self.rows, self.cols)

    def model_size(self) -> tuple[int, int]:
        return self.rows * self.cols, 2 * self.rows * self.cols

    def to_ilp(self) -> ILP:
        r, c = np.meshgrid(np.arange(self.rows), np.arange(self.cols), indexing="ij")
        flat = (r * self.cols + c).ravel()
        n = self.rows * self.cols
        row_sums = sp.csr_matrix((np.ones(n), (r.ravel(), flat)), shape=(self.rows, n))
        col_sums = sp.csr_matrix((np.ones(n), (c.ravel(), flat)), shape=(self.cols, n))
        if self.rows == self.cols:
            return ILP.from_matrices(shape=[self.rows, self.cols],
                                     A_eq=sp.vstack([row_sums, col_sums]),
                                     b_eq=np.ones(self.rows + self.cols), sense=self.sense)
        return ILP.from_matrices(shape=[self.rows, self.cols], A_ub=col_sums,
                                 b_ub=np.ones(self.cols), A_eq=row_sums,
                                 b_eq=np.ones(self.rows), sense=self.sense)
