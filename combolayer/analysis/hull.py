"""Invariance analysis: the affine hull of a problem's solutions, found from its constraints.

If every feasible ``y`` satisfies ``<a, y> = b``, then ``w`` and ``w + t * a``
give the same argmin for every ``t``: the solver is blind to ``a``, and the
Identity gradient along ``a`` is pure noise (Sahoo et al. 2023, sec. 3.3).
[`analyze`][combolayer.analyze] finds all such ``a`` for any spec:

- LP mode (default) works on the LP relaxation of the compact exact ILP. It
  collects the explicit equalities, the implicit ones (inequalities and bounds
  tight over the whole relaxation, found by LPs) and the fixed variables, then
  eliminates the auxiliary variables so the normals live in output space.
  Sound: the relaxation contains every integer solution, so every equation it
  reports holds for all of them. It can miss equations that hold only at
  integer points.
- Exact mode finds the affine hull of the integer solutions with the MIP
  solver, by optimising in both directions along vectors orthogonal to what is
  known; it needs at most about ``2 N`` solves.

Results are cached per spec, so a layer pays for the analysis once, at
construction. `combolayer.analysis.text` renders a hull for people
(``combolayer analyze``).
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass
from functools import lru_cache

import highspy
import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg
import torch
from torch import Tensor

from ..backends.highs import check_status, highs_lp, highs_outcome, new_highs, run_highs
from ..backends.outcome import settle, warn_not_optimal
from ..backends.registry import make_solver
from ..backends.solver import known_minimisation_cost
from ..errors import InfeasibleError, InputError, SolverError
from ..specs.base import Spec
from ..specs.canonical import CanonicalForm, canonical_form
from ..specs.load import load_spec
from ..transforms.projection import Transform, on_cost_shape, project_plane

#: A row or bound whose largest slack over the relaxation stays below this
#: (after scaling the row to unit norm) is treated as tight everywhere.
SLACK_TOL = 1e-6
#: Singular values below ``RANK_RTOL * largest`` count as zero.
RANK_RTOL = 1e-9
#: Sparse elimination pivots only on entries at least this fraction of the
#: largest in their column (threshold partial pivoting, as in sparse LU).
PIVOT_THRESHOLD = 0.1
#: Dense SVD up to this many flops (min^2 * max of the shape), the Gram matrix
#: and ``eigh`` above, where a dense SVD would dominate the analysis at build time.
SVD_FLOPS = 2e7
#: Entries this small after an elimination step are cancellations, not data.
DROP_TOL = 1e-12
#: An output whose unit vector lies in the normal space up to this is fixed.
FIXED_TOL = 1e-8
#: Exact mode: two solutions differ along a direction if their difference has a part
#: along it above this, plus `SPAN_RTOL` of the difference's norm (its rounding error).
#: Too small a tolerance only misses an equation (a solver's rounding taken for a
#: direction); too large a one makes a false one, which changes solutions: integer
#: points 1e6 apart that differ by a unit (a tolerance relative to their distance), or
#: outputs 1e-7 apart (1e-6).
SPAN_TOL = 1e-9
#: The relative part of the tolerance above: a few float64 roundings of the difference
#: (integer points 1e13 apart differ by a unit, beyond 1e-13 of their distance).
SPAN_RTOL = 1e-15
#: An LP point whose integer variables are this close to integers is a point of the
#: problem as it is (HiGHS's vertices of integral polytopes are exact to about 1e-12).
INTEGRAL_TOL = 1e-9
#: Branch-and-bound nodes each MIP of `_slack_at_an_integer_point` may take: a limit of
#: work, so that what it finds does not depend on the machine's speed (the named
#: problems' and the cancellations' MIPs end at the root).
SLACK_MIP_NODES = 1000
#: Seconds the MIPs of `_slack_at_an_integer_point` may take in all, after which the
#: rows they would check are left out of the equations (HiGHS solved every named
#: problem's in under 0.1 s; an LP-feasible problem with no integer point runs to it).
SLACK_MIP_SECONDS = 2.0


@dataclass(frozen=True, eq=False)
class AffineHull:
    """The affine hull ``{y : normals @ y == offsets}`` of a problem's solutions.

    Built by [`analyze`][combolayer.analyze]; its fields:

    Args:
        normals: ``(r, N)``, orthonormal rows, flat over ``cost_shape``, spanning the
            directions along which every solution has the same value.
        offsets: ``(r,)``, the value ``normals[i] @ y`` every solution shares.
        fixed: the flat indices of the outputs equal in every solution (their value
            is ``point[j]``).
        point: one solution (LP mode: a point of the relaxation, on its equations), flat.
        cost_shape: the problem's cost shape.
        exact: True if the hull is the integer solutions' (``analyze(exact=True)``),
            False if the LP relaxation's.
    """

    normals: np.ndarray
    offsets: np.ndarray
    fixed: np.ndarray
    point: np.ndarray
    cost_shape: tuple[int, ...]
    exact: bool

    @property
    def num_outputs(self) -> int:
        return math.prod(self.cost_shape)

    @property
    def dim(self) -> int:
        """The dimension of the affine hull, ``N - r``."""
        return self.num_outputs - len(self.normals)

    def projector(self) -> np.ndarray:
        """``normals.T @ normals``: the orthogonal projector onto the normal space."""
        return self.normals.T @ self.normals

    def transform(self) -> Transform:
        """``project`` as a transform on costs of shape ``(..., *cost_shape)``."""
        return on_cost_shape(project_plane(self._basis), self.cost_shape)

    def project(self, w: Tensor) -> Tensor:
        """Remove the components of ``w`` along the normals (batched, differentiable).

        Args:
            w: costs of shape ``(..., *cost_shape)`` or ``(..., N)``.

        Returns:
            The projected costs, with the shape, dtype and device of ``w``; integer
            costs are projected in floating point, float64 for a numpy array and torch's
            default dtype otherwise (the projection of an integer vector is not one).
        """
        if isinstance(w, np.ndarray) and not np.issubdtype(w.dtype, np.inexact):
            w = w.astype(np.float64)
        w = torch.as_tensor(w)
        if not (w.is_floating_point() or w.is_complex()):
            w = w.to(torch.get_default_dtype())
        k = len(self.cost_shape)
        if tuple(w.shape[w.ndim - k:]) == self.cost_shape and w.ndim >= k:
            return self.transform()(w)
        if w.ndim >= 1 and w.shape[-1] == self.num_outputs:
            return project_plane(self._basis)(w)
        raise InputError(
            f"w has shape {tuple(w.shape)} but the hull expects trailing shape "
            f"{self.cost_shape} or ({self.num_outputs},)"
        )

    def __repr__(self) -> str:
        # Short: kind, sizes, dimension and the first rows, never every number.
        shown = 3
        rows = "; ".join(
            np.array2string(row, precision=3, suppress_small=True, threshold=8, edgeitems=3,
                            max_line_width=10_000)
            + f" = {offset:.4g}" for row, offset in zip(self.normals[:shown], self.offsets))
        more = f"; ... {len(self.normals) - shown} more" if len(self.normals) > shown else ""
        fixed = np.array2string(self.fixed, threshold=8, edgeitems=3)
        return (f"AffineHull({'exact' if self.exact else 'LP relaxation'}, "
                f"cost_shape={self.cost_shape}, dim={self.dim} in R^{self.num_outputs}, "
                f"{len(self.normals)} equations, fixed={fixed}"
                + (f", normals @ y = offsets: [{rows}{more}]" if len(self.normals) else "")
                + ")")

    def __post_init__(self) -> None:
        # One float64 copy, moved to w's device and dtype per call (a no-op when they match).
        object.__setattr__(self, "_basis", torch.tensor(self.normals, dtype=torch.float64))


def analyze(spec: Spec, exact: bool = False) -> AffineHull:
    """The affine hull of ``spec``'s solutions: what the solver is invariant to.

    Args:
        spec: a spec, or a dict / YAML / JSON of one.
        exact: ``False`` uses the LP relaxation of the compact ILP (sound: every
            equation found holds for every integer solution, but it may miss
            equations that hold only for integer points); ``True`` uses the MIP
            solver to find the affine hull of the integer solutions (about
            ``2 N`` solves).

    The hull is that of the feasible solutions, whatever the objective: a known cost
    (``ILP.known_cost``) and the sense play no part, so a spec and the same spec with
    another known cost share one hull (and one cache entry).

    Returns:
        An [`AffineHull`][combolayer.AffineHull]: ``normals`` ``(r, N)`` with orthonormal rows,
        ``offsets`` ``(r,)``, ``dim = N - r``, the ``fixed`` outputs, and
        ``project(w)`` for costs ``(..., *cost_shape)``. Cached per spec.

    Raises:
        SpecError: ``spec`` is invalid.
        InfeasibleError: the problem has no feasible solution (LP mode: its LP
            relaxation has none; an integer-infeasible problem is refused by the solver).
        SolverError: ``exact=True`` on an unbounded feasible set (LP mode takes it).

    Examples:
        >>> import combolayer as cl
        >>> hull = cl.analyze(cl.problems.TopK(n=4, k=2))
        >>> hull.dim, hull.normals.round(2).tolist()
        (3, [[0.5, 0.5, 0.5, 0.5]])
    """
    spec = _feasible_set(load_spec(spec))
    return _analyze(type(spec), spec.model_dump_json(), bool(exact))


def _feasible_set(spec: Spec) -> Spec:
    """``spec`` without its known cost: exact mode probes the solutions with a solver,
    which would add the known cost to every probe and find the hull of biased optima
    instead of that of the feasible set."""
    if known_minimisation_cost(spec) is None:
        return spec
    return type(spec).model_validate({**spec.model_dump(), "known_cost": None})


@lru_cache(maxsize=128)
def _analyze(cls: type, spec_json: str, exact: bool) -> AffineHull:
    spec = cls.model_validate_json(spec_json)
    known = spec.affine_hull()
    if known is not None:  # the hull of the relaxation and of the integer solutions alike
        return _hull(*known, spec.cost_shape, exact=exact)
    if exact:
        relaxed = _analyze(cls, spec_json, False)
        try:
            return _exact_hull(spec, relaxed)
        except SolverError as error:
            if isinstance(error, InfeasibleError) or "unbounded" not in str(error):
                raise
            # the probes' costs, not the user's, met a ray of the feasible set
            raise SolverError(f"exact mode probes the solutions of {spec.label} with linear "
                              "costs, and its feasible set is unbounded: give its integer "
                              "variables finite bounds, or use LP mode (analyze(spec), "
                              "projection='auto')") from None
    form = canonical_form(spec, lazy=False)
    equations, point = _equalities(form)
    normals = _row_basis(_output_rows(equations, form.num_outputs))
    return _hull(normals, point[: form.num_outputs], form.cost_shape, exact=False)


def _hull(normals: np.ndarray, point: np.ndarray, cost_shape: tuple[int, ...],
          exact: bool) -> AffineHull:
    normals = np.ascontiguousarray(normals, dtype=np.float64).reshape(-1, math.prod(cost_shape))
    point = np.asarray(point, dtype=np.float64)
    in_normal_space = (normals**2).sum(axis=0)
    fixed = np.flatnonzero(in_normal_space > 1.0 - FIXED_TOL)
    offsets = normals @ point
    for array in (normals, offsets, point, fixed):
        array.flags.writeable = False  # cached and shared between layers
    return AffineHull(
        normals=normals,
        offsets=offsets,
        fixed=fixed,
        point=point,
        cost_shape=tuple(cost_shape),
        exact=exact,
    )


# -- LP mode: the equalities of the relaxation ----------------------------------


def _equalities(form: CanonicalForm) -> tuple[sp.csr_matrix, np.ndarray]:
    """Rows spanning every equation of the LP relaxation, and one feasible point.

    Explicit equalities, plus the inequalities and bounds that are tight over
    the whole relaxation. Lazy constraints (a separator) are ignored: a looser
    relaxation only loses equations, it never adds a wrong one.
    """
    n = form.num_vars
    A_ub = _unit_rows(form.A_ub)
    b_ub = form.b_ub / _row_norms(form.A_ub).clip(min=1e-300)
    nonempty = _row_norms(form.A_ub) > 0
    if np.any(form.b_ub[~nonempty] < 0):
        raise InfeasibleError("a constraint 0 <= b with b < 0 makes the problem infeasible")
    fixed = np.isfinite(form.lower) & (form.lower == form.upper)
    has_lower = np.flatnonzero(np.isfinite(form.lower) & ~fixed)
    has_upper = np.flatnonzero(np.isfinite(form.upper) & ~fixed)
    rows = np.flatnonzero(nonempty)
    # Candidates, each as "g x <= h" with unit-norm g: rows, then lower, then upper bounds.
    G = sp.vstack([
        A_ub[rows],
        -sp.identity(n, format="csr")[has_lower],
        sp.identity(n, format="csr")[has_upper],
    ], format="csr")
    h = np.concatenate([b_ub[rows], -form.lower[has_lower], form.upper[has_upper]])
    tight, point = tight_rows(form, G, h)
    equations = sp.vstack([
        form.A_eq,
        G[tight],
        sp.identity(n, format="csr")[np.flatnonzero(fixed)],
    ], format="csr")
    rhs = np.concatenate([form.b_eq, h[tight], form.lower[fixed]])
    return equations, _onto(equations, rhs, point)


def _onto(E: sp.csr_matrix, e: np.ndarray, point: np.ndarray) -> np.ndarray:
    """``point`` moved the least onto ``E x = e`` (least squares where the equations
    disagree). The LP's point lies on them to its tolerance only: a row tight at every
    integer point but slack by 1 in 2e6 on the relaxation (a big-M row) left it 0.34
    off, and the offsets read from it were wrong."""
    residual = e - E @ point
    if not len(e) or np.abs(residual).max() <= DROP_TOL * (1.0 + np.abs(e).max()):
        return point
    return point + scipy.sparse.linalg.lsqr(E, residual, atol=1e-15, btol=1e-15)[0]


def _row_norms(A: sp.spmatrix) -> np.ndarray:
    A = sp.csr_matrix(A)
    return np.sqrt(np.asarray(A.multiply(A).sum(axis=1)).ravel())


def _unit_rows(A: sp.spmatrix) -> sp.csr_matrix:
    norms = _row_norms(A)
    scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    return sp.csr_matrix(sp.diags(scale) @ A)


def tight_rows(form: CanonicalForm, G: sp.csr_matrix,
               h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which candidate rows ``G x <= h`` hold with equality on the whole relaxation
    (their indices), and a point of it; IntOpt's log barrier keeps them as equations too
    (`combolayer.estimators._relaxation`).

    One LP over the homogenised relaxation: ``G x + s <= t h``, ``A_eq x == t b_eq``,
    ``t l <= x <= t u``, ``1 <= t <= 1 / SLACK_TOL``, ``0 <= s <= 1``, maximising
    ``sum(s)``. ``x / t`` is a point of the relaxation with slacks at least ``s / t``,
    and a point slack in every row that can be, scaled up by ``t``, gives each such row
    ``s = 1`` at once: at the optimum a row's ``s`` is 1 where its slack can reach
    about ``SLACK_TOL``, and 0 where it is tight everywhere.

    A row whose data have two magnitudes closer than ``SLACK_TOL`` of its norm, but not
    equal, may have a slack the LP cannot tell from 0 (`_resolved`), so it is never
    returned as tight: an equation missed only loosens the hull, a wrong one would
    change the solutions.
    """
    n, c, m = form.num_vars, G.shape[0], form.A_eq.shape[0]
    lower = np.flatnonzero(np.isfinite(form.lower))
    upper = np.flatnonzero(np.isfinite(form.upper))
    identity = sp.identity(n, format="csr")

    def t_column(values: np.ndarray) -> sp.csr_matrix:  # t's coefficients in those rows
        return sp.csr_matrix(np.asarray(values, dtype=np.float64).reshape(-1, 1))

    # variables (x, s, t); every row is "<= 0" but the equations
    A_all = sp.vstack([
        sp.hstack([G, sp.identity(c, format="csr"), t_column(-h)]),
        sp.hstack([-identity[lower], sp.csr_matrix((len(lower), c)),
                   t_column(form.lower[lower])]),
        sp.hstack([identity[upper], sp.csr_matrix((len(upper), c)),
                   t_column(-form.upper[upper])]),
        sp.hstack([form.A_eq, sp.csr_matrix((m, c)), t_column(-form.b_eq)]),
    ], format="csr")
    inequalities = c + len(lower) + len(upper)
    lp = highs_lp(
        cost=np.concatenate([np.zeros(n), -np.ones(c), [0.0]]),
        lower=np.concatenate([np.full(n, -np.inf), np.zeros(c), [1.0]]),
        upper=np.concatenate([np.full(n, np.inf), np.ones(c), [1.0 / SLACK_TOL]]),
        A=A_all,
        row_lower=np.concatenate([np.full(inequalities, -np.inf), np.zeros(m)]),
        row_upper=np.zeros(inequalities + m),
    )
    model = _highs_model(lp)
    # the interior-point method without crossover: any optimum will do, and on large
    # relaxations it took 1.1 s where the default solver took 17 s (TopK(30000))
    model.setOptionValue("solver", "ipm")
    model.setOptionValue("run_crossover", "off")
    run_highs(model)
    if model.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        # it stops at 'Unknown' on some infeasible relaxations: the default solver says
        model.setOptionValue("solver", "choose")
        model.setOptionValue("run_crossover", "on")
        run_highs(model)
    x = _run_lp(model, run=False)
    tight = np.flatnonzero((x[n:n + c] < 0.5) & _resolved(G, h))
    return tight[~_slack_at_an_integer_point(form, G, h, tight)], x[:n] / x[-1]


def _resolved(G: sp.csr_matrix, h: np.ndarray) -> np.ndarray:
    """Per row of ``G x <= h``, whether the LP can tell its slack from 0: the magnitudes
    of its entries, of ``h`` and 0, sorted, differ by at least ``SLACK_TOL`` of the row's
    norm or by at most ``DROP_TOL`` of it (a cancellation, not data).

    A slack is a difference of such terms: with an entry that small (a big-M row,
    ``1e7 x0 + 1e7 x1 + x2 >= 2e7``) or two that close (``1e7 y0 + (1e7 + 1) y1 <= 1e7 + 1``
    with ``y0 + y1 == 1``, slack 1 at ``y = (1, 0)``), a point can be slack by less than
    the LP resolves, and the row would look tight everywhere.
    """
    G = sp.csr_matrix(abs(G))
    rows = G.shape[0]
    norms = np.maximum(_row_norms(G), 1e-300)
    owner = np.concatenate([np.repeat(np.arange(rows), np.diff(G.indptr)),
                            np.arange(rows), np.arange(rows)])
    values = np.concatenate([G.data, np.abs(h), np.zeros(rows)]) / norms[owner]
    order = np.lexsort((values, owner))
    owner, values = owner[order], values[order]
    gaps = np.diff(values)
    close = (owner[1:] == owner[:-1]) & (gaps < SLACK_TOL) & (gaps > DROP_TOL)
    return np.bincount(owner[1:][close], minlength=rows) == 0


def _slack_at_an_integer_point(form: CanonicalForm, G: sp.csr_matrix, h: np.ndarray,
                               rows: np.ndarray) -> np.ndarray:
    """Per row ``i`` of ``rows`` (tight on the relaxation to the LP's resolution), whether
    a point of the problem, checked term by term, is slack in it: a slack made by a
    cancellation of its terms (``3 y0 + y1 + 1.9999999 y2 <= 3`` with
    ``y1 == y2 == 1 - y0``: ``1e-7`` at ``y = (0, 1, 1)``), which the LP cannot resolve.

    A row whose negation is a row too (an equation written as two inequalities) is an
    equation at every point. For any other, the LP maximises its slack over the
    relaxation. A point of the problem that is slack (the LP's, its integer variables
    rounded) proves the row no equation; the LP's optimum, where it is a point of the
    problem (integral) without slack, proves it one. Else (a fractional point: its
    rounding may miss the slack points) the MIP's optimum decides (at most
    `SLACK_MIP_NODES` nodes each, `SLACK_MIP_SECONDS` for all); a row it does not settle
    is no equation (a missed one loosens the hull, a false one changes solutions). The
    objective is scaled up by ``1 / SLACK_TOL`` so that such a difference is not lost in
    the solvers' optimality tolerances."""
    slack = np.zeros(len(rows), dtype=bool)
    if not len(rows):
        return slack
    n, m = form.num_vars, form.A_ub.shape[0]
    relaxation = dict(
        cost=np.zeros(n), lower=form.lower, upper=form.upper, A=sp.vstack([form.A_ub, form.A_eq]),
        row_lower=np.concatenate([np.full(m, -np.inf), form.b_eq]),
        row_upper=np.concatenate([form.b_ub, form.b_eq]),
    )
    lp, mip = _highs_model(highs_lp(**relaxation)), None
    left = SLACK_MIP_SECONDS  # the MIPs' time, in all
    G = sp.csr_matrix(G)
    paired = _paired(G, h, rows)
    for k, i in enumerate(rows):
        if paired[k]:
            continue
        g = G[i].toarray().ravel()
        cost = g / (SLACK_TOL * np.abs(g).max())
        x = _solution(lp, cost)
        if x is None:  # no point of the relaxation: the row stays tight, on the LP's word
            continue
        point = _rounded(form, x)
        if _slack_at(g, h[i], point):
            slack[k] = True
            continue
        if lp.getModelStatus() == highspy.HighsModelStatus.kOptimal and (
                not form.integer.any()
                or point is not None and np.abs(point - x).max() <= INTEGRAL_TOL):
            continue  # the largest slack, at a point of the problem, is none: an equation
        # a fractional (or unfinished) LP point without slack proves nothing: the MIP's
        # optimum decides; a point it finds may only show slack
        slack[k] = True  # unsettled: no equation, unless the MIP proves one
        if left > 0:
            if mip is None:
                mip = _highs_model(highs_lp(**relaxation, integer=form.integer))
                check_status(mip.setOptionValue("mip_rel_gap", 0.0), "setOptionValue")
                check_status(mip.setOptionValue("mip_max_nodes", SLACK_MIP_NODES),
                             "setOptionValue")
            check_status(mip.setOptionValue("time_limit", left), "setOptionValue")
            began = time.monotonic()
            found = _solution(mip, cost)
            left -= time.monotonic() - began
            point = None if found is None else _rounded(form, found)
            proven = mip.getModelStatus() == highspy.HighsModelStatus.kOptimal
            slack[k] = _slack_at(g, h[i], point) or not (proven and point is not None)
    return slack


def _paired(G: sp.csr_matrix, h: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per row of ``rows``, whether ``G x <= h`` also holds its negation (``a x <= b``
    and ``-a x <= -b``): an equation at every point, with nothing to check."""
    G = sp.csr_matrix(G)
    G.sort_indices()

    def key(i: int, sign: float) -> tuple:
        part = slice(G.indptr[i], G.indptr[i + 1])
        return (tuple(G.indices[part].tolist()), tuple((sign * G.data[part]).tolist()),
                sign * float(h[i]))

    keys = {key(i, 1.0) for i in range(G.shape[0])}
    return np.array([key(i, -1.0) in keys for i in rows], dtype=bool)


def _slack_at(g: np.ndarray, h: float, point: np.ndarray | None) -> bool:
    """Whether ``point`` (a point of the problem, or None) is slack in ``g x <= h``
    beyond rounding: a proof that the row is no equation."""
    if point is None:
        return False
    return h - g @ point > DROP_TOL * (abs(h) + np.abs(g) @ np.abs(point))


def _highs_model(lp):
    """A one-thread HiGHS holding ``lp``."""
    model = new_highs(threads=1)
    check_status(model.passModel(lp), "passModel")
    return model


def _solution(model, cost: np.ndarray) -> np.ndarray | None:
    """``model``'s point minimising ``cost``, or None when the solve ends without a
    feasible one. Any feasible point will do, optimal or not (HiGHS stops at 'Unknown'
    on some rows of 1e6): the caller's checks are exact."""
    num_vars = len(cost)
    check_status(model.changeColsCost(num_vars, np.arange(num_vars), cost), "changeColsCost")
    run_highs(model)
    if model.getInfo().primal_solution_status != 2:
        return None
    return np.asarray(model.getSolution().col_value)


def _rounded(form: CanonicalForm, x: np.ndarray) -> np.ndarray | None:
    """``x`` with its integer variables rounded, if that meets every constraint."""
    point = np.where(form.integer, np.round(x), x)
    return point if _meets(form, point) else None


def _meets(form: CanonicalForm, x: np.ndarray) -> bool:
    """Whether ``x`` satisfies the bounds and rows of ``form`` up to rounding error."""
    def within(A: sp.spmatrix, b: np.ndarray) -> np.ndarray:
        return DROP_TOL * (np.abs(b) + abs(A) @ np.abs(x) + 1.0)

    eye = sp.identity(form.num_vars, format="csr")
    return bool(np.all(form.A_ub @ x - form.b_ub <= within(form.A_ub, form.b_ub))
                and np.all(abs(form.A_eq @ x - form.b_eq) <= within(form.A_eq, form.b_eq))
                and np.all(form.lower - x <= within(eye, form.lower))
                and np.all(x - form.upper <= within(eye, form.upper)))


def _run_lp(model, run: bool = True) -> np.ndarray:
    """The LP's solution (running it first unless ``run`` is False), or the error or
    warning its status calls for."""
    if run:
        run_highs(model)
    status = model.getModelStatus()
    optimal = status == highspy.HighsModelStatus.kOptimal
    solver = "HiGHS (the LP relaxation, looking for implicit equalities)"
    return warn_not_optimal(settle(
        highs_outcome(status), solver, lambda: np.asarray(model.getSolution().col_value),
        has_solution=optimal or model.getInfo().primal_solution_status == 2,
        status=model.modelStatusToString(status),
    ), solver)


# -- from all variables to output space -------------------------------------------


def _output_rows(E: sp.csr_matrix, num_outputs: int) -> sp.csr_matrix:
    """Rows spanning the equations that ``E x = e`` implies on the outputs alone.

    With ``E = [E_y | E_z]`` (outputs, auxiliaries) these are ``lam @ E_y`` for
    ``lam`` in the left null space of ``E_z``. Sparse Gaussian elimination of
    the auxiliaries finds them without dense algebra: each auxiliary is pivoted
    out of every row through one row holding it (fewest entries first, among
    rows with a large enough coefficient), and that row is dropped. The rows
    left without auxiliaries are the output equations.
    """
    E = _unit_rows(E)
    rows = [dict(zip(E.indices[E.indptr[i]:E.indptr[i + 1]].tolist(),
                     E.data[E.indptr[i]:E.indptr[i + 1]].tolist(), strict=True))
            for i in range(E.shape[0])]
    holders: dict[int, set[int]] = {}
    for i, row in enumerate(rows):
        for j in row:
            if j >= num_outputs:
                holders.setdefault(j, set()).add(i)
    heap = [(len(held), j) for j, held in holders.items()]
    heapq.heapify(heap)
    while heap:
        count, j = heapq.heappop(heap)
        held = holders[j]
        if count != len(held):  # stale entry: the column changed since it was pushed
            if held:
                heapq.heappush(heap, (len(held), j))
            continue
        if not held:
            continue
        biggest = max(abs(rows[i][j]) for i in held)
        pivot = min((i for i in held if abs(rows[i][j]) >= PIVOT_THRESHOLD * biggest),
                    key=lambda i: (len(rows[i]), i))
        prow = rows[pivot]
        for i in held - {pivot}:
            row = rows[i]
            factor = row[j] / prow[j]
            for col, value in prow.items():
                new = row.get(col, 0.0) - factor * value
                if abs(new) <= DROP_TOL:
                    if col in row:
                        del row[col]
                        if col >= num_outputs:
                            holders[col].discard(i)
                else:
                    if col not in row and col >= num_outputs:
                        holders[col].add(i)
                    row[col] = new
            row.pop(j, None)
        for col in prow:
            if col >= num_outputs:
                holders[col].discard(pivot)
        rows[pivot] = {}
        for col in {c for i in held for c in rows[i] if c >= num_outputs}:
            heapq.heappush(heap, (len(holders[col]), col))
    data, indices, indptr = [], [], [0]
    for row in rows:
        if row and all(col < num_outputs for col in row):
            indices.extend(row)
            data.extend(row.values())
            indptr.append(len(indices))
    return sp.csr_matrix((data, indices, indptr), shape=(len(indptr) - 1, num_outputs))


def _row_basis(R: sp.spmatrix) -> np.ndarray:
    """Orthonormal rows spanning the row space of ``R``.

    Rows with pairwise disjoint supports are orthogonal already (fixed
    variables, symmetry pairs, one family of assignment rows): they go in as
    they are, and only the rest, projected off them, needs dense algebra.
    """
    R = _canonical_rows(sp.csr_matrix(R))
    m, n = R.shape
    disjoint = _disjoint_rows(R)
    S = R[disjoint]
    T = R[np.setdiff1d(np.arange(m), disjoint)]
    for _ in range(2):  # "twice is enough" for Gram-Schmidt against S
        T = sp.csr_matrix(T - (T @ S.T) @ S)
    T = T.toarray()
    norms = np.linalg.norm(T, axis=1)
    T = T[norms > RANK_RTOL] / norms[norms > RANK_RTOL, None]
    rest = _orthonormal_rows(T)
    if len(rest) and S.shape[0]:
        # Re-project: rounding in the dense step must not leak back into span(S).
        rest = _cholesky_qr(rest - (rest @ S.T) @ S)
    return _canonical_signs(np.vstack([S.toarray(), rest]))


def _orthonormal_rows(T: np.ndarray) -> np.ndarray:
    """Orthonormal rows spanning the rows of a dense ``T`` (unit rows expected).

    SVD when small; otherwise ``eigh`` of the ``(k, k)`` Gram matrix, then one
    Cholesky re-orthonormalisation to undo the error the squaring brings.
    """
    k, n = T.shape
    if k == 0:
        return np.zeros((0, n))
    if min(k, n) ** 2 * max(k, n) <= SVD_FLOPS:
        _, s, vh = np.linalg.svd(T, full_matrices=False)
        return vh[s > RANK_RTOL * s.max()]
    values, vectors = np.linalg.eigh(T @ T.T)
    # eigh resolves eigenvalues to about k * eps * largest: RANK_RTOL**2 is out of reach.
    keep = values > max(RANK_RTOL**2, 100 * k * np.finfo(float).eps) * values.max()
    return _cholesky_qr((vectors[:, keep].T @ T) / np.sqrt(values[keep])[:, None])


def _cholesky_qr(basis: np.ndarray) -> np.ndarray:
    """Re-orthonormalise nearly orthonormal rows: ``L^-1 B`` with ``B B^T = L L^T``."""
    chol = np.linalg.cholesky(basis @ basis.T)
    return scipy.linalg.solve_triangular(chol, basis, lower=True)


def _canonical_rows(R: sp.csr_matrix) -> sp.csr_matrix:
    """Unit rows, first entry positive, exact duplicates and zero rows removed."""
    R = _unit_rows(R)
    R.eliminate_zeros()
    R.sort_indices()
    keep, seen, signs = [], set(), np.ones(R.shape[0])
    for i in range(R.shape[0]):
        start, end = R.indptr[i], R.indptr[i + 1]
        if start == end:
            continue
        signs[i] = 1.0 if R.data[start] > 0 else -1.0
        key = (tuple(R.indices[start:end]), tuple(np.round(signs[i] * R.data[start:end], 12)))
        if key not in seen:
            seen.add(key)
            keep.append(i)
    return sp.csr_matrix(sp.diags(signs) @ R)[keep]


def _disjoint_rows(R: sp.csr_matrix) -> np.ndarray:
    """A greedy set of rows with pairwise disjoint supports, sparsest first."""
    used = np.zeros(R.shape[1], dtype=bool)
    chosen = []
    for i in np.argsort(np.diff(R.indptr), kind="stable"):
        cols = R.indices[R.indptr[i]:R.indptr[i + 1]]
        if not used[cols].any():
            used[cols] = True
            chosen.append(i)
    return np.sort(np.asarray(chosen, dtype=int))


def _canonical_signs(basis: np.ndarray) -> np.ndarray:
    """Flip each row so its largest entry (the first among ties) is positive."""
    if not len(basis):
        return basis
    size = np.abs(basis)
    largest = np.argmax(size >= size.max(axis=1, keepdims=True) - 1e-9, axis=1)
    lead = basis[np.arange(len(basis)), largest]
    return np.ascontiguousarray(basis * np.where(lead < 0, -1.0, 1.0)[:, None])


# -- exact mode: the affine hull of the integer solutions ----------------------------


def _exact_hull(spec: Spec, relaxed: AffineHull) -> AffineHull:
    """Grow the equations and the point span of the integer solutions until they meet.

    The LP's equations are checked first, each minimised both ways: one whose minima
    differ from ``origin``'s value holds on the relaxation only to the LP's tolerance
    (a row whose slack is a cancellation of its terms) and is left out. Then every
    direction ``c`` orthogonal to both is optimised both ways. If both optima lie in
    the span of the points seen so far, ``<c, y>`` is the same for every solution and
    ``c`` is a new equation; otherwise the new point extends the span. Each round fixes
    one more dimension, with two solves.
    """
    solver = make_solver(spec, "highs")
    rows = None
    if solver.cost_floor is not None:
        # A path on a graph with cycles: the probes' costs have both signs, which the
        # cost floor refuses for a user's costs. The MIP with every cycle cut off (the
        # form per-call rows get: here one row that every solution meets) optimises
        # them over the simple paths exactly.
        solver.cost_floor = None
        rows = (np.zeros((1, solver.num_vars)), np.ones(1))
    n = relaxed.num_outputs
    origin = _solve_flat(solver, np.zeros(n), rows)
    normals: list[np.ndarray] = []
    seen: list[np.ndarray] = []
    for normal in relaxed.normals:
        ends = [_solve_flat(solver, cost, rows) for cost in (normal, -normal)]
        seen.extend(ends)
        if all(_within_rounding(abs(normal @ (y - origin)), y - origin) for y in ends):
            normals.append(normal)
    span: list[np.ndarray] = []
    for y in seen:
        _extend_span(span, normals, y - origin)
    while len(normals) + len(span) < n:
        known = np.array(normals + span).reshape(-1, n)
        c = scipy.linalg.null_space(known)[:, 0] if len(known) else np.eye(n)[0]
        grew = False
        for cost in (c, -c):
            grew |= _extend_span(span, normals, _solve_flat(solver, cost, rows) - origin)
        if not grew:
            normals.append(c)
    basis = _row_basis(np.array(normals).reshape(-1, n)) if normals else np.zeros((0, n))
    return _hull(basis, origin, relaxed.cost_shape, exact=True)


def _extend_span(span: list[np.ndarray], normals: list[np.ndarray],
                 difference: np.ndarray) -> bool:
    """Append to ``span`` the unit part of ``difference`` (a solution minus the origin)
    off ``normals`` and ``span``, unless it is rounding error; whether it was."""
    known = np.array(normals + span).reshape(-1, len(difference))
    residual = difference - known.T @ (known @ difference) if len(known) else difference
    size = np.linalg.norm(residual)
    if _within_rounding(size, difference):
        return False
    span.append(residual / size)
    return True


def _within_rounding(size: float, difference: np.ndarray) -> bool:
    """Whether a part of ``size`` of ``difference`` (of two solutions) is rounding
    error (`SPAN_TOL`, `SPAN_RTOL`)."""
    return size <= SPAN_TOL + SPAN_RTOL * np.linalg.norm(difference)


def _solve_flat(solver, cost: np.ndarray,
                rows: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    costs = cost.reshape(1, *solver.cost_shape)
    if rows is None:
        return np.asarray(solver.solve_min(costs), dtype=np.float64).reshape(-1)
    y = solver.solve(solver.sign * costs, A=rows[0], b=rows[1])  # solve folds the sign in
    return np.asarray(y, dtype=np.float64).reshape(-1)
