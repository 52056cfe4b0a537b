"""Bipartite matching (assignment): pairs of a row and a column, each row and each
column in at most one pair, with the rows, the columns or both all matched, or with
the number of pairs bounded.

Every variant solves as one assignment: a plain rectangular one when the smaller
side is matched in full, otherwise a square one of ``rows + cols`` padded with
unmatched places (`padded_costs`). Its ILP (row and column sums, a total) is a network
flow's, so its LP relaxation is exact.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import model_validator

from ..errors import InputError
from ..specs.base import ILP, Sense, Spec, register_spec

__all__ = ["Matching"]

#: Which side has every one of its members matched: ``"rows"`` (each row exactly
#: once, each column at most once), ``"cols"``, ``"both"`` (a perfect matching) or
#: ``"none"`` (each row and column at most once).
Cover = Literal["rows", "cols", "both", "none"]


@register_spec
class Matching(Spec):
    """Pairs of a row and a column, each row and each column in at most one pair.

    Cost and solution ``(rows, cols)``, ``y[i, j] = 1`` when row ``i`` is paired with
    column ``j``. With ``cover="none"``, "at most k pairs" is ``max_pairs=k``, "exactly
    k pairs" is ``min_pairs=max_pairs=k``; a bound the cover already implies is accepted.

    Args:
        rows: the number of rows.
        cols: the number of columns.
        sense: ``"min"`` (default, the cheapest matching) or ``"max"``.
        cover: which side is matched in full: ``"rows"`` (default: every row exactly
            once, every column at most once, ``rows <= cols``; perfect when
            ``rows == cols``), ``"cols"`` (every column exactly once, ``cols <= rows``),
            ``"both"`` (a perfect matching, ``rows == cols``) or ``"none"`` (every row
            and every column at most once).
        min_pairs: the fewest pairs (default 0: no bound beyond ``cover``'s).
        max_pairs: the most pairs, or None (no bound beyond ``cover``'s).

    Examples:
        >>> import numpy as np, combolayer as cl
        >>> spec = cl.problems.Matching(2, 2)
        >>> cl.make_solver(spec).solve(np.array([[0.0, 1.0], [1.0, 0.0]])).tolist()
        [[1.0, 0.0], [0.0, 1.0]]
        >>> capped = cl.problems.Matching(2, 2, cover="none", max_pairs=1)
        >>> cl.make_solver(capped).solve(np.array([[-1.0, 1.0], [1.0, -2.0]])).tolist()
        [[0.0, 0.0], [0.0, 1.0]]
    """

    kind: Literal["matching"] = "matching"
    rows: int
    cols: int
    sense: Sense = "min"
    cover: Cover = "rows"
    min_pairs: int = 0
    max_pairs: int | None = None

    _label_fields: ClassVar[tuple[str, ...]] = ("rows", "cols")
    lp_is_integral: ClassVar[bool] = True

    @model_validator(mode="after")
    def _check(self) -> Matching:
        if self.rows < 1 or self.cols < 1:
            raise InputError(f"rows and cols must be >= 1, got rows={self.rows}, "
                             f"cols={self.cols}")
        if self.cover == "rows" and self.cols < self.rows:
            raise InputError(f"cols={self.cols} < rows={self.rows}: every row needs its own "
                             "column; transpose the cost so that rows <= cols, or choose "
                             "cover='cols' or 'none'")
        if self.cover == "cols" and self.rows < self.cols:
            raise InputError(f"rows={self.rows} < cols={self.cols}: every column needs its own "
                             "row; transpose the cost so that cols <= rows, or choose "
                             "cover='rows' or 'none'")
        if self.cover == "both" and self.rows != self.cols:
            raise InputError(f"cover='both' (a perfect matching) needs rows == cols, got "
                             f"rows={self.rows}, cols={self.cols}")
        most = min(self.rows, self.cols)
        if not 0 <= self.min_pairs <= most:
            raise InputError(f"min_pairs={self.min_pairs} is outside 0..min(rows, cols) = "
                             f"0..{most}")
        if self.max_pairs is not None and not self.min_pairs <= self.max_pairs <= most:
            raise InputError(f"max_pairs={self.max_pairs} is outside min_pairs..min(rows, "
                             f"cols) = {self.min_pairs}..{most}")
        low, high = self.pair_range
        if low > high:
            raise InputError(f"cover={self.cover!r} matches {low} pairs, but max_pairs="
                             f"{self.max_pairs} allows at most {high}; use cover='none' to "
                             "bound the number of pairs")
        return self

    @property
    def label(self) -> str:
        extra = [f"{name}={getattr(self, name)!r}" for name in ("cover", "min_pairs", "max_pairs")
                 if getattr(self, name) != type(self).model_fields[name].default]
        return super().label[:-1] + "".join(", " + e for e in extra) + ")"

    @property
    def cost_shape(self) -> tuple[int, ...]:
        return (self.rows, self.cols)

    @property
    def pair_range(self) -> tuple[int, int]:
        """The least and the most pairs a solution may have, the cover and the
        bounds together."""
        most = min(self.rows, self.cols)
        high = most if self.max_pairs is None else min(self.max_pairs, most)
        return max(self.min_pairs, self._covered_pairs), high

    @property
    def _covered_pairs(self) -> int:
        """The pairs the cover alone forces: one per covered row (or column)."""
        return {"rows": self.rows, "cols": self.cols, "both": self.rows, "none": 0}[self.cover]

    def model_size(self) -> tuple[int, int]:
        n, pair_rows = self.rows * self.cols, len(self._pair_rows())
        # nonzeros, then a row per row and column sum and per bound on the total
        return n, 2 * n + n * pair_rows + self.rows + self.cols + pair_rows

    def _pair_rows(self) -> list[tuple[str, int]]:
        """The bounds on the total that the row and column sums do not already imply:
        ``("==", k)``, ``("<=", k)`` or ``(">=", k)``."""
        low, high = self.pair_range
        implied_low, implied_high = self._covered_pairs, min(self.rows, self.cols)
        if low == high and low != implied_low:
            return [("==", low)]
        bounds = []
        if low > implied_low:
            bounds.append((">=", low))
        if high < implied_high:
            bounds.append(("<=", high))
        return bounds

    def affine_hull(self) -> tuple[np.ndarray, np.ndarray] | None:
        """For a cover with no other bound on the number of pairs, in closed form: the
        covered side's sums are 1, both sides' when ``rows == cols`` (the columns' then
        spanned beyond the rows' by a Helmert basis), and nothing else holds; the LP and
        the orthonormalisation took 18 s and 1 GB at 200 x 200. None (computed) otherwise."""
        if self.cover == "none" or self._pair_rows():
            return None
        r, c = self.rows, self.cols
        rows_sum = self.cover in ("rows", "both") or r == c
        cols_sum = self.cover in ("cols", "both") or r == c
        blocks = []
        if rows_sum:
            blocks.append(np.kron(np.eye(r), np.ones((1, c))) / np.sqrt(c))
        if cols_sum:
            across = _helmert(c) if rows_sum else np.eye(c)  # beyond the rows' sums
            blocks.append(np.kron(np.ones((1, r)), across) / np.sqrt(r))
        point = np.zeros((r, c))
        point[np.arange(min(r, c)), np.arange(min(r, c))] = 1.0
        return np.vstack(blocks), point.ravel()

    def to_ilp(self) -> ILP:
        r, c = np.meshgrid(np.arange(self.rows), np.arange(self.cols), indexing="ij")
        flat = (r * self.cols + c).ravel()
        n = self.rows * self.cols
        row_sums = sp.csr_matrix((np.ones(n), (r.ravel(), flat)), shape=(self.rows, n))
        col_sums = sp.csr_matrix((np.ones(n), (c.ravel(), flat)), shape=(self.cols, n))
        # a side is matched in full when the cover says so, or when the other side is
        # and both have as many members (the square assignment keeps its equalities)
        rows_full = self.cover in ("rows", "both") or (self.cover == "cols"
                                                       and self.rows == self.cols)
        cols_full = self.cover in ("cols", "both") or (self.cover == "rows"
                                                       and self.rows == self.cols)
        eq, eq_rhs, ub, ub_rhs = [], [], [], []
        for sums, full, count in ((row_sums, rows_full, self.rows),
                                  (col_sums, cols_full, self.cols)):
            (eq if full else ub).append(sums)
            (eq_rhs if full else ub_rhs).append(np.ones(count))
        total = sp.csr_matrix(np.ones((1, n)))
        for sense, k in self._pair_rows():
            if sense == "==":
                eq.append(total)
                eq_rhs.append(np.array([float(k)]))
            else:
                sign = 1.0 if sense == "<=" else -1.0
                ub.append(sign * total)
                ub_rhs.append(np.array([sign * k]))
        return ILP.from_matrices(
            shape=[self.rows, self.cols],
            A_ub=sp.vstack(ub) if ub else None, b_ub=np.concatenate(ub_rhs) if ub else None,
            A_eq=sp.vstack(eq) if eq else None, b_eq=np.concatenate(eq_rhs) if eq else None,
            sense=self.sense,
        )


def padded_costs(spec: Matching) -> np.ndarray | None:
    """The square ``(rows + cols, rows + cols)`` assignment that solves ``spec``, its
    ``[:rows, :cols]`` block left for the costs (0 there), or None when a plain
    rectangular assignment does (every member of the smaller side matched, which
    every cover but ``"none"`` implies).

    Rows ``rows..`` are padding rows, columns ``cols..`` padding columns: a real row
    on a padding column is unmatched, a padding row on a real column leaves that
    column unmatched. In a perfect assignment the padding pairs are as many as the
    real pairs, so the first ``low`` padding rows may take only padding columns and
    those from ``high`` on only real ones: ``low <= pairs <= high``.
    """
    low, high = spec.pair_range
    if low == min(spec.rows, spec.cols):
        return None
    R, C = spec.rows, spec.cols
    grid = np.zeros((R + C, R + C))
    grid[R : R + low, :C] = np.inf
    grid[R + high :, C:] = np.inf
    return grid


def _helmert(n: int) -> np.ndarray:
    """An orthonormal basis ``(n - 1, n)`` of the vectors that sum to 0: row ``k`` is
    ``k`` ones, then ``-k``, scaled to unit norm."""
    basis = np.tril(np.ones((n - 1, n)))
    k = np.arange(1, n)
    basis[k - 1, k] = -k
    return basis / np.sqrt(k * (k + 1.0))[:, None]
