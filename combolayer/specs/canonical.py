"""The canonical matrix form every generic solver backend compiles.

    minimise   (sign * w) . x[:N]
    subject to A_ub x <= b_ub,  A_eq x == b_eq,  lower <= x <= upper,
               x[j] integer where integer[j],
               every cut the separator returns (lazy constraints).

Backends only ever minimise: the objective sense is folded into the costs
once, as ``Solver.sign``, before they reach a kernel. `canonical_form`
builds a spec's form once and caches it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from ..errors import NoIntegerWarning

if TYPE_CHECKING:
    from .base import Spec


@dataclass(frozen=True)
class Cut:
    """A lazy row ``lower <= sum(value * x[index]) <= upper`` found by a separator."""

    index: np.ndarray
    value: np.ndarray
    lower: float
    upper: float


#: A separator takes a candidate solution (all variables) and returns the
#: constraints it violates; an empty list accepts the candidate.
Separator = Callable[[np.ndarray], list[Cut]]


@dataclass(frozen=True)
class JoinedSeparator:
    """The cuts of two separators on the same candidate, ``first``'s then ``second``'s."""

    first: Separator
    second: Separator

    def __call__(self, x: np.ndarray) -> list[Cut]:
        return [*self.first(x), *self.second(x)]


def rounding(terms: Any, bound: Any, share: float = 1e-12) -> Any:
    """What float rounding may add to rows evaluated at an integer point: ``share`` (1e-12)
    of their size (``terms``, the sum of ``|a_j x_j|``, plus ``bound``, ``|b|``; arrays or
    tensors). A row of integer variables that a point breaks by more is broken; a point a
    solver returned carries more (`combolayer.pool.POOL_ROW_TOL`)."""
    return share * (terms + bound + 1.0)


def unit_rows(A: Any, b: np.ndarray) -> tuple[Any, np.ndarray]:
    """Rows ``A x <= b`` (or ``== b``; ``A`` dense or sparse) with each row whose
    coefficients are all below 1 in magnitude brought up into [1, 2) by a power of two
    (`unit_exponent`): the same feasible set, exactly. A solver's feasibility tolerance is
    absolute: a row scaled by 1e-7 was met within it by answers that break it by whole
    units (Gurobi, cvxpy), and HiGHS and SCIP drop coefficients below about 1e-9. Rows
    with a coefficient of 1 or more are left as they are."""
    if sp.issparse(A):
        largest = abs(A).max(axis=1).toarray().ravel() if A.shape[1] else np.zeros(len(b))
    else:
        largest = np.abs(A).max(axis=1, initial=0.0)
    exponent = unit_exponent(largest)
    if not exponent.any():
        return A, b
    if sp.issparse(A):
        return sp.csr_matrix(sp.diags(np.ldexp(1.0, exponent)) @ A), np.ldexp(b, exponent)
    return np.ldexp(A, exponent[:, None]), np.ldexp(b, exponent)


def unit_exponent(largest: Any, bits: int = 0) -> Any:
    """The power of two (its exponent) that brings each largest magnitude ``largest``
    below ``2**bits`` into [2**bits, 2**(bits + 1)); 0 where it is 0, ``2**bits`` or
    more, or not finite."""
    small = (largest > 0) & (largest < 2.0 ** bits)
    return np.where(small, bits + 1 - np.frexp(np.where(small, largest, 1.0))[1], 0)


@dataclass(frozen=True, eq=False)
class CanonicalForm:
    cost_shape: tuple[int, ...]
    A_ub: sp.csr_matrix
    b_ub: np.ndarray
    A_eq: sp.csr_matrix
    b_eq: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    integer: np.ndarray
    separator: Separator | None = field(default=None)
    #: The LP relaxation has integral vertices (a totally unimodular system with
    #: integral data, as in flows and assignments): solvers may skip branching.
    lp_is_integral: bool = False
    #: Lazy cuts that no optimum needs until per-call rows are added, which can make
    #: the rows' integer optimum break them (a path's subtour eliminations: a row that
    #: forces a vertex is otherwise met by the path plus a disjoint cycle). `for_rows`
    #: makes them the separator.
    row_separator: Separator | None = field(default=None)

    @property
    def num_outputs(self) -> int:
        return math.prod(self.cost_shape)

    @property
    def num_vars(self) -> int:
        return len(self.lower)

    @property
    def is_mip(self) -> bool:
        """Whether a solver must branch: integer variables whose LP vertices may be fractional."""
        return bool(self.integer.any()) and not self.lp_is_integral

    @cached_property
    def for_rows(self) -> CanonicalForm:
        """The form a kernel solves once per-call rows ``A x <= b`` are added: added rows
        can cut the LP's integral vertices off (so ``lp_is_integral`` no longer holds and
        the integer variables must be branched on), and `row_separator` joins the
        separator. The form itself when neither changes anything; built once per form."""
        integral = self.lp_is_integral and bool(self.integer.any())
        if not integral and self.row_separator is None:
            return self
        separator = self.separator
        if self.row_separator is not None:
            separator = (self.row_separator if separator is None
                         else JoinedSeparator(separator, self.row_separator))
        return replace(self, lp_is_integral=False, separator=separator, row_separator=None)

    def outputs(self, x: np.ndarray) -> np.ndarray:
        """The outputs of solver values ``x`` (``(..., num_vars)`` or ``(..., N)``):
        the first N, rounded where integer. "+ 0.0" turns rint's -0.0 into 0.0."""
        y = x[..., : self.num_outputs]
        return np.where(self.integer[: self.num_outputs], np.rint(y), y) + 0.0

    def solution(self, x: np.ndarray) -> np.ndarray:
        """Solver values ``x`` (``(..., k)``, the first k variables, outputs first),
        rounded where integer: the full solution ``concat(y, aux)`` for k = num_vars."""
        k = x.shape[-1]
        return np.where(self.integer[:k], np.rint(x), x) + 0.0

    def rows(self) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
        """All rows stacked as ``row_lower <= A x <= row_upper``."""
        A = sp.vstack([self.A_ub, self.A_eq], format="csr")
        row_lower = np.concatenate([np.full(len(self.b_ub), -np.inf), self.b_eq])
        row_upper = np.concatenate([self.b_ub, self.b_eq])
        return A, row_lower, row_upper

    @cached_property
    def integer_rows(self) -> IntegerRows:
        """The rows (`rows`) whose variables are all integer, built once for `breach`."""
        return IntegerRows.of(*self.rows(), self.integer)

    def breach(self, x: np.ndarray) -> tuple[int, int, float] | None:
        """`IntegerRows.breach` of the form's own rows for solver values ``x``
        (``(B, num_vars)``), rounded where integer: the instance, the row (its position
        in `rows`) and the excess, or None."""
        return self.integer_rows.breach(self.solution(x)) if len(x) else None


@dataclass(frozen=True, eq=False)
class IntegerRows:
    """The rows ``lower <= A x <= upper`` of integer variables alone, among those of a
    problem (the form's, or a call's own): ``keep`` their positions there, ``size`` the
    absolute values of ``A``, ``bound`` the size of each row's finite bound."""

    keep: np.ndarray
    A: Any
    size: Any
    lower: np.ndarray
    upper: np.ndarray
    bound: np.ndarray

    @classmethod
    def of(cls, A: Any, lower: np.ndarray, upper: np.ndarray,
           integer: np.ndarray) -> IntegerRows:
        """Those of the rows ``A`` (dense or sparse) that weigh only the columns marked in
        ``integer`` (the integer variables; a solution pool's own columns)."""
        keep = np.flatnonzero(np.asarray(abs(A) @ (~integer).astype(float)).ravel() == 0)
        A, lower, upper = A[keep], lower[keep], upper[keep]
        bound = np.where(np.isfinite(upper), np.abs(upper), np.abs(lower))
        return cls(keep, A, abs(A), lower, upper, bound)

    def breach(self, points: np.ndarray, share: float = 1e-12) -> tuple[int, int, float] | None:
        """The instance and the row (its position among the rows given to `of`) that
        ``points`` (``(B, num_vars)``, integer where the rows' variables are) break the
        most, and by how much; None when they all hold. A solver's feasibility tolerance
        is coarse next to a row with large coefficients (weights of 1e9): its answer may
        break the row by whole units; a rounded point holds such rows exactly, so
        anything beyond float rounding (``share``, 1e-12, of the row's size) is a breach.
        One product for the batch."""
        if not len(self.keep) or not len(points):
            return None
        value = np.asarray(self.A @ points.T).T  # (B, rows)
        with np.errstate(invalid="ignore"):  # inf - inf on a free side
            excess = np.fmax(value - self.upper, self.lower - value)
        over = excess - rounding(np.asarray(self.size @ np.abs(points).T).T, self.bound, share)
        b, row = np.unravel_index(int(np.argmax(over)), over.shape)
        if over[b, row] <= 0:
            return None
        return int(b), int(self.keep[row]), float(excess[b, row])


def canonical_form(spec: Spec, lazy: bool = True) -> CanonicalForm:
    """The spec's canonical form, built once per (spec, lazy) and shared: do not modify it."""
    spec_json = spec.model_dump_json()
    form = _canonical_form(type(spec), spec_json, lazy)
    if form.num_vars and not form.integer.any() and spec_json not in _WARNED_NO_INTEGER:
        # Once per spec: a forgotten boolean=True in cvxpy, with 0..1 bounds, otherwise
        # gives fractional "decisions" without a word.
        _WARNED_NO_INTEGER.add(spec_json)
        warnings.warn(
            f"{spec.label} has no integer variable: it is solved as a linear program and "
            "its solutions may be fractional. Mark the integer ones with integrality="
            "'binary' or 'integer' (one value, or a list with one per variable), or "
            "boolean=True / integer=True on the cvxpy Variable; for an LP on purpose, "
            "warnings.filterwarnings('ignore', category=cl.NoIntegerWarning)",
            NoIntegerWarning, stacklevel=3)
    return form


#: The specs (as JSON) already warned about having no integer variable.
_WARNED_NO_INTEGER: set[str] = set()


@lru_cache(maxsize=64)
def _canonical_form(cls: type, spec_json: str, lazy: bool) -> CanonicalForm:
    return cls.model_validate_json(spec_json).to_canonical(lazy=lazy)
