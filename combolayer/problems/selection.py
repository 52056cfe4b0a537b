"""Selecting and ordering: top-k and ranking."""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import model_validator

from ..errors import InputError
from ..specs.base import ILP, Sense, Spec, register_spec

__all__ = ["Ranking", "TopK"]


@register_spec
class TopK(Spec):
    """A k-hot vector ``(n,)``: the ``k`` largest scores (``sense="max"``) or smallest.

    Args:
        n: the number of items.
        k: how many are picked.
        sense: ``"max"`` (default) picks the largest scores, ``"min"`` the smallest.

    Examples:
        >>> import numpy as np, combolayer as cl
        >>> cl.make_solver(cl.problems.TopK(4, 2)).solve(np.array([3.0, 1.0, 2.0, 5.0])).tolist()
        [1.0, 0.0, 0.0, 1.0]
    """

    kind: Literal["topk"] = "topk"
    n: int
    k: int
    sense: Sense = "max"

    _label_fields: ClassVar[tuple[str, ...]] = ("n", "k")
    lp_is_integral: ClassVar[bool] = True

    @model_validator(mode="after")
    def _check(self) -> TopK:
        if self.n < 1:
            raise InputError(f"n must be >= 1, got {self.n}")
        if not 1 <= self.k <= self.n:
            raise InputError(f"k={self.k} is outside 1..n={self.n}")
        return self

    @property
    def cost_shape(self) -> tuple[int, ...]:
        return (self.n,)

    def to_ilp(self) -> ILP:
        return ILP.from_matrices(shape=[self.n], A_eq=np.ones((1, self.n)), b_eq=[self.k],
                                 sense=self.sense)

    def affine_hull(self) -> tuple[np.ndarray, np.ndarray]:
        """The picks sum to ``k`` and nothing else holds for every k-hot vector (a single
        point for ``k = n``): known in closed form, where the exact hull's 2 n MIP solves
        took 160 s at n = 1000."""
        first = (np.arange(self.n) < self.k).astype(np.float64)
        if self.k == self.n:
            return np.eye(self.n), first
        return np.ones((1, self.n)) / np.sqrt(self.n), first


@register_spec
class Ranking(Spec):
    """Ranks ``(n,)``: a permutation of 1..n. ``argmin <w, y>`` gives rank 1 to the
    largest score (rearrangement inequality), so a ranking of scores ``s`` is
    ``Ranking(n)`` applied to ``w = s``.

    Args:
        n: the number of items.
        sense: ``"min"`` (default: rank 1 to the largest score) or ``"max"``.

    Examples:
        >>> import numpy as np, combolayer as cl
        >>> cl.make_solver(cl.problems.Ranking(3)).solve(np.array([0.1, 0.3, 0.2])).tolist()
        [3.0, 1.0, 2.0]
    """

    kind: Literal["ranking"] = "ranking"
    n: int
    sense: Sense = "min"

    _label_fields: ClassVar[tuple[str, ...]] = ("n",)
    lp_is_integral: ClassVar[bool] = True

    @model_validator(mode="after")
    def _check(self) -> Ranking:
        if self.n < 1:
            raise InputError(f"n must be >= 1, got {self.n}")
        return self

    @property
    def cost_shape(self) -> tuple[int, ...]:
        return (self.n,)

    def model_size(self) -> tuple[int, int]:
        return self.n + self.n**2, 3 * self.n**2 + 4 * self.n  # the n*n assignment P

    def largest_output(self, aux: bool = False) -> float:
        return float(self.n)  # the last rank, without the n*n assignment's form

    def affine_hull(self) -> tuple[np.ndarray, np.ndarray]:
        """The ranks sum to ``n (n + 1) / 2`` and nothing else holds for every ranking
        (a single point for ``n = 1``): known in closed form, where the LP of the n**2
        assignment took minutes from n = 300."""
        ranks = np.arange(1.0, self.n + 1)
        return np.ones((1, self.n)) / np.sqrt(self.n), ranks

    def to_ilp(self) -> ILP:
        """Assignment formulation: ``P`` (n*n binary auxiliaries, item i gets rank r+1),
        ``y_i = sum_r (r + 1) P_ir``."""
        n = self.n
        i, r = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        i, r = i.ravel(), r.ravel()
        aux = n + i * n + r
        items = sp.csr_matrix((np.ones(n * n), (i, aux)), shape=(n, n + n * n))
        ranks = sp.csr_matrix((np.ones(n * n), (r, aux)), shape=(n, n + n * n))
        link = sp.csr_matrix(
            (np.concatenate([np.ones(n), -(r + 1.0)]),
             (np.concatenate([np.arange(n), i]), np.concatenate([np.arange(n), aux]))),
            shape=(n, n + n * n))
        lower = np.concatenate([np.ones(n), np.zeros(n * n)])
        upper = np.concatenate([np.full(n, float(n)), np.ones(n * n)])
        return ILP.from_matrices(shape=[n], A_eq=sp.vstack([items, ranks, link]),
                                 b_eq=np.concatenate([np.ones(2 * n), np.zeros(n)]),
                                 integrality=["integer"] * n + ["binary"] * (n * n),
                                 lower=lower, upper=upper, sense=self.sense, num_aux=n * n)
