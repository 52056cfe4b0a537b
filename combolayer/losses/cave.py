"""Cone-aligned vector estimation, CaVE (Tang & Khalil): the cosine to the optimality cone."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from ..backends.registry import as_solver
from ..backends.solver import check_costs
from ..errors import BackendUnavailable, InputError
from ..func_transforms import host_array
from ..pool import draw_exact
from ..specs.base import is_real
from ..specs.canonical import canonical_form
from .base import SolverLoss, as_number, check_reduction, check_solution, reduce

#: A constraint whose slack at ``y_true`` is below this binds (PyEPO's tolerance).
TIGHT = 1e-5
#: A cone keeps its Clarabel solver between calls (only the linear term changes)
#: while its QP matrix has at most this many nonzeros: about 100 bytes each for the
#: solver's factorisation, so a dataset of 1000 instances keeps 0.5 GB at most.
_KEPT_SOLVER_MAX_NNZ = 5_000


class ConeRows:
    """A spec's canonical form, read once, and the rows that bind at its solutions.

    Problems with lazily separated rows (the TSPs) use their lazy form, whose
    listed rows the spec completes with the lazy rows binding at ``y``
    (``spec.binding_cuts(y)``); every other problem its exact ILP. Auxiliary
    variables get their values at ``y`` from a feasibility MIP with the outputs
    fixed, and the normals then have one column per variable of the formulation.
    """

    def __init__(self, spec: Any, tol: float = TIGHT) -> None:
        self.label = spec.label
        self.n = int(np.prod(spec.cost_shape))
        self.tol = tol
        self.cuts = getattr(spec, "binding_cuts", None)
        form = canonical_form(spec, lazy=self.cuts is not None)
        self.num_vars = form.num_vars
        self.A_ub = sp.csr_matrix(form.A_ub)
        self.b_ub = np.asarray(form.b_ub, dtype=np.float64)
        self.A_eq = sp.csr_matrix(form.A_eq)
        self.b_eq = np.asarray(form.b_eq, dtype=np.float64)
        self.equalities = np.vstack([self.A_eq.toarray(), -self.A_eq.toarray()])
        self.lower = np.asarray(form.lower, dtype=np.float64)
        self.upper = np.asarray(form.upper, dtype=np.float64)
        self.integer = np.asarray(form.integer, dtype=bool)

    def __call__(self, y_true: Any) -> list[np.ndarray]:
        n, tol = self.n, self.tol
        y = host_array(y_true).reshape(-1, n)
        binary = np.isclose(y, 0.0, atol=tol) | np.isclose(y, 1.0, atol=tol)
        if not binary.all():
            raise InputError(f"CaVE is defined for binary problems: y_true must be 0/1 for "
                             f"{self.label}, got values such as {y[~binary][:3]}")
        x = self._with_auxiliaries(y) if self.num_vars > n else y
        slack = np.abs(self.b_ub[None, :] - (self.A_ub @ x.T).T)
        eye = np.eye(self.num_vars)
        fixed = self.upper - self.lower <= tol
        normals = []
        for point, tight in zip(x, slack < tol, strict=True):
            at_lower = point - self.lower <= tol
            at_upper = (self.upper - point <= tol) & (~at_lower | fixed)
            parts = [self.A_ub[np.flatnonzero(tight)].toarray(), self.equalities]
            if self.cuts is not None:
                cuts = self.cuts(point[:n]).toarray()
                parts.append(np.hstack([cuts, np.zeros((len(cuts), self.num_vars - n))]))
            normals.append(np.vstack(parts + [-eye[at_lower], eye[at_upper]]))
        return normals

    def _with_auxiliaries(self, y: np.ndarray) -> np.ndarray:
        """Each ``y`` with values of the auxiliary variables that make it feasible."""
        from scipy.optimize import Bounds, LinearConstraint, milp

        constraints = [LinearConstraint(A, lb, ub) for A, lb, ub in (
            (self.A_ub, -np.inf, self.b_ub), (self.A_eq, self.b_eq, self.b_eq)) if A.shape[0]]
        full = []
        for b, point in enumerate(y):
            lower, upper = self.lower.copy(), self.upper.copy()
            lower[: self.n] = upper[: self.n] = np.round(point)
            result = milp(np.zeros(self.num_vars), constraints=constraints,
                          integrality=self.integer.astype(int), bounds=Bounds(lower, upper))
            if result.x is None:
                raise InputError(f"y_true[{b}] is not a feasible solution of {self.label} "
                                 f"(its auxiliary variables have no feasible values: "
                                 f"{result.message})")
            full.append(result.x)
        return np.array(full)


def binding_normals(spec: Any, y_true: Any, tol: float = TIGHT) -> list[np.ndarray]:
    """The normals of the constraints that bind at each 0/1 solution, in ``<=`` orientation.

    For ``y_true`` ``(*batch, *cost_shape)`` returns one ``(R_b, V)`` array per
    instance (`binding_cones` gives them as a `BindingCones`): the ``<=`` rows
    (``>=`` already negated) with slack below ``tol``, every equality row ``a``
    as ``a`` and ``-a``, the lazy rows that bind (subtour rows of a tour),
    ``-e_k`` at a lower bound and ``+e_k`` at an upper bound. ``V`` is the
    number of outputs, or of all the formulation's variables when it has
    auxiliaries (their values from a feasibility solve with ``y`` fixed). A min
    problem's ``y_true`` is optimal for ``c`` when ``-(c, 0)`` lies in the cone
    these rows span (the LP's KKT conditions), which is what CaVE aligns the
    prediction with. On a problem without auxiliaries and lazy rows these are
    the rows of PyEPO's ``optDatasetConstrs``.
    """
    return ConeRows(spec, tol)(y_true)


def binding_cones(problem: Any, y_true: Any, tol: float = TIGHT) -> BindingCones:
    """CaVE's binding cones of a dataset's true solutions, computed once.

    Pass them (or a batch of them, ``cones[index]``) to `CaVELoss` as
    ``binding=``: the loss then neither reads the rows from ``y_true`` again
    nor rebuilds a cone's quadratic program, which it keeps for the next epoch.

    Args:
        problem: a spec, a compiled solver or a layer (its spec is used).
        y_true: the true solutions, ``(num_data, *cost_shape)``, 0/1.
        tol: a row binds where its slack is below this.

    Returns:
        A `BindingCones` of ``num_data`` cones (`binding_normals` gives their rows).

    Raises:
        ValueError: ``y_true`` is not 0/1, or (with auxiliary variables) not a
            feasible solution of the problem.

    Example:
        >>> import combolayer as cl
        >>> data = cl.data.shortest_path(8, num_features=5, grid=(3, 3))
        >>> cones = cl.losses.binding_cones(data.spec, data.solutions)
        >>> len(cones), tuple(cones.padded().shape[::2])
        (8, (8, 12))
    """
    spec = getattr(problem, "spec", problem)
    cones = BindingCones(binding_normals(spec, y_true, tol))
    for cone in cones._cones:  # here, once, rather than in the first epoch
        cone.prepare()
    return cones


class _Cone:
    """One instance's normals and its projection QP, built on first use and kept."""

    def __init__(self, normals: np.ndarray) -> None:
        normals = np.asarray(normals, dtype=np.float64)
        self.normals = normals[np.abs(normals).sum(axis=1) > 1e-7]  # PyEPO's padding rows
        self._P: sp.csc_matrix | None = None
        self._solver: Any = None  # kept between calls, with the max_iter it was last given
        self._max_iter = 0
        self._mean: np.ndarray | None = None

    def prepare(self, max_iter: int = 3) -> None:
        """Build the QP and the Clarabel solver now, not in the first training step."""
        self.mean_unit_normal(self.normals.shape[1])
        if len(self.normals) and self._qp_matrix().nnz <= _KEPT_SOLVER_MAX_NNZ:
            self._solver = self._new_solver(np.zeros(len(self.normals)), max_iter)
            self._max_iter = max_iter

    def _new_solver(self, q: np.ndarray, max_iter: int) -> Any:
        import clarabel

        m = len(self.normals)
        return clarabel.DefaultSolver(self._qp_matrix(), q, _negative_identity(m), np.zeros(m),
                                      [clarabel.NonnegativeConeT(m)], _clarabel_settings(max_iter))

    def _qp_matrix(self) -> sp.csc_matrix:
        """The upper triangle of ``2 G G^T`` in CSC form, zeros left out (as PyEPO's
        ``scipy.sparse.triu(csc_matrix(2 G G^T))`` has it), from the sparse product:
        the normals are mostly unit vectors, so the sparse product is far cheaper than
        a dense one (benchmarks/cave_pyepo.py times the cones)."""
        if self._P is None:
            m = len(self.normals)
            gram = sp.csr_matrix(self.normals) @ sp.csr_matrix(self.normals.T)
            gram.sort_indices()
            # symmetric: row j's entries left of the diagonal are column j's above it
            row = np.repeat(np.arange(m), np.diff(gram.indptr))
            keep = (gram.indices <= row) & (gram.data != 0)
            indptr = np.concatenate([[0], np.cumsum(np.bincount(row[keep], minlength=m))])
            self._P = sp.csc_matrix((2.0 * gram.data[keep], gram.indices[keep], indptr),
                                    shape=(m, m))
        return self._P

    def project(self, point: np.ndarray, max_iter: int) -> np.ndarray:
        """``G^T lam`` for ``lam = argmin_{lam >= 0} ||G^T lam - point||^2`` after at most
        ``max_iter`` Clarabel iterations (PyEPO's QP, its settings)."""
        if not len(self.normals):
            return point.copy()
        q = -2.0 * (self.normals @ point)
        solver = self._solver
        if solver is None:
            solver = self._new_solver(q, max_iter)
            if self._P.nnz <= _KEPT_SOLVER_MAX_NNZ:
                self._solver, self._max_iter = solver, max_iter
        else:  # the same iterates as a new solver: Clarabel starts cold in every solve
            solver.update(q=q)
            if max_iter != self._max_iter:
                solver.update(settings=_clarabel_settings(max_iter))
                self._max_iter = max_iter
        return np.asarray(solver.solve().x) @ self.normals

    def mean_unit_normal(self, width: int) -> np.ndarray:
        if self._mean is None:
            self._mean = np.zeros(width) if not len(self.normals) else (
                self.normals / np.linalg.norm(self.normals, axis=1, keepdims=True)).mean(0)
        return self._mean


class BindingCones:
    """The binding cones of a batch or dataset of true solutions (`binding_cones`).

    ``len(cones)`` instances; ``cones[i]`` is instance ``i``'s ``(R_i, V)``
    normals, ``cones[index]`` (a slice, a sequence or a tensor of indices) the
    `BindingCones` of those instances, sharing what their projections keep;
    ``cones.padded()`` the ``(B, R_max, V)`` zero-padded tensor of PyEPO's
    ``collate_tight_constraints``.

    Args:
        normals: one cone per instance: its ``(R_i, V)`` binding-row normals.
    """

    def __init__(self, normals: Sequence[np.ndarray] | Sequence[_Cone]) -> None:
        self._cones = [c if isinstance(c, _Cone) else _Cone(c) for c in normals]
        widths = {c.normals.shape[1] for c in self._cones}
        if len(widths) > 1:
            raise InputError(f"every cone needs the same number of columns, got {sorted(widths)}")
        self.width = widths.pop() if widths else 0

    @classmethod
    def of(cls, binding: Any) -> BindingCones:
        """``binding`` as cones: a `BindingCones`, a list of ``(R_b, V)`` arrays, or a
        ``(B, R, V)`` array or tensor, zero rows ignored (PyEPO's ``tight_ctrs``)."""
        if isinstance(binding, BindingCones):
            return binding
        if isinstance(binding, (list, tuple)):
            return cls([np.asarray(torch.as_tensor(g).detach().cpu(), dtype=np.float64)
                        for g in binding])
        array = np.asarray(torch.as_tensor(binding).detach().cpu(), dtype=np.float64)
        if array.ndim != 3:
            raise InputError(f"binding has shape {array.shape} but (batch, rows, columns) "
                             "was expected")
        return cls(list(array))

    def __len__(self) -> int:
        return len(self._cones)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, (int, np.integer)):
            return self._cones[index].normals
        if isinstance(index, slice):
            return BindingCones(self._cones[index])
        return BindingCones([self._cones[int(i)] for i in np.asarray(
            torch.as_tensor(index).cpu()).reshape(-1)])

    def __repr__(self) -> str:
        return f"BindingCones({len(self)} cones, {self.width} columns)"

    def padded(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """The ``(B, R_max, V)`` tensor of the normals, zero rows after each cone's own."""
        rows = max((len(c.normals) for c in self._cones), default=0)
        out = torch.zeros(len(self), rows, self.width, dtype=dtype)
        for b, cone in enumerate(self._cones):
            out[b, : len(cone.normals)] = torch.as_tensor(cone.normals)
        return out

    def project(self, points: np.ndarray, max_iter: int) -> np.ndarray:
        """Each point's projection on its cone (`_Cone.project`), ``(B, V)``."""
        return np.stack([cone.project(point, max_iter)
                         for cone, point in zip(self._cones, points, strict=True)])

    def mean_unit_normals(self) -> np.ndarray:
        """Each cone's mean unit normal, ``(B, V)``: the Hybrid heuristic's direction."""
        return np.stack([cone.mean_unit_normal(self.width) for cone in self._cones])


@functools.cache
def _negative_identity(m: int) -> sp.csc_matrix:
    return -sp.eye(m, format="csc")


@functools.cache
def _clarabel_settings(max_iter: int) -> Any:
    import clarabel

    settings = clarabel.DefaultSettings()
    settings.max_iter = int(max_iter)
    settings.verbose = False
    settings.max_threads = 1
    settings.presolve_enable = False
    settings.equilibrate_enable = False
    return settings


def cone_projection(point: np.ndarray, normals: np.ndarray, max_iter: int) -> np.ndarray:
    """``G^T lam`` for ``lam = argmin_{lam >= 0} ||G^T lam - point||^2``, ``G = normals``:
    the projection of ``point`` onto the cone the rows span, solved by Clarabel
    (an interior-point QP solver, cvxpy's default) stopped after ``max_iter`` iterations."""
    return _Cone(normals).project(np.asarray(point, dtype=np.float64), max_iter)


class CaVELoss(SolverLoss):
    """The CaVE loss: one minus the cosine between ``-c_hat`` and its projection on the cone.

    With ``c_hat`` the predicted min-sense cost and ``G`` the normals of the
    constraints binding at the true solution ``y*`` (`binding_normals`,
    from the spec's canonical form), ``y*`` is optimal for ``c_hat`` exactly
    when ``-c_hat`` lies in the cone ``{G^T lam : lam >= 0}``. With
    ``p = argmin_{x in cone} ||x - (-c_hat)||`` (held constant):

        loss = 1 - cos(-c_hat, p)

    so ``d loss / d(-c_hat) = -(p / (|s| |p|) - <s, p> s / (|s|^3 |p|))`` at
    ``s = -c_hat``. The projection is a small QP per instance, solved by
    Clarabel; ``max_iter=3`` (the default) stops it early, the paper's "CaVE+"
    that PyEPO's ``coneAlignedCosine`` defaults to (an interior point, a richer
    gradient than the cone's boundary).

    CaVE is for binary problems; ``y_true`` must be 0/1. Call it as
    ``loss(cost_pred, y_true)``, which reads the cones from ``y_true`` in every
    call, or ``loss(cost_pred, y_true, binding=cones[index])`` with the cones of
    the dataset computed once by `binding_cones` (the loss then keeps each
    cone's QP for the next epoch); ``binding`` may also be a ``(batch, rows, V)``
    tensor, zero rows ignored (PyEPO's ``tight_ctrs``). Where the formulation
    has auxiliary variables the cones live in all its ``V`` variables and the
    prediction is extended by zeros, the auxiliaries' cost.

    A known cost (`combolayer.ILP.known_cost`) is refused (ValueError): CaVE's loss
    is a cosine, so it sees only the direction of ``c_hat``, and that is all that
    decides ``y`` when the objective is ``<c_hat, y>`` alone. With a known cost ``k``
    the objective ``<c_hat, y> + <k, x>`` is not invariant to scaling ``c_hat``:
    ``c_hat`` and ``2 c_hat`` get the same CaVE loss but can have different optima,
    and ``x*`` is optimal exactly when ``-(c_hat, k)`` lies in the cone of the whole
    solution's binding rows (in ``num_vars`` coordinates, the last ones fixed to
    ``k``). Aligning with that is a distance to a cone with fixed coordinates, a
    different loss, not CaVE's cosine.

    Args:
        spec: the problem: a spec, a compiled `Solver` or a ComboLayer.
        max_iter: Clarabel's iterations per projection; 3 (default) is "CaVE+", a
            large value the exact projection.
        solve_ratio: the paper's "CaVE Hybrid" below 1: each call takes the QP with
            this probability, else
            ``p = (1 - inner_ratio) s / |s| + inner_ratio * mean of the unit normals``.
        inner_ratio: the weight of the normals' mean in the hybrid's ``p``.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` over instances.
        backend: a backend name/config to compile a spec with (or a compiled
            `Solver`).
        generator: the ``torch.Generator`` the ``solve_ratio`` draws come from.

    Reference: Tang, Khalil, "CaVE: A Cone-Aligned Approach for Fast
    Predict-then-optimize with Binary Linear Programs", CPAIOR 2024.
    """

    counts_known_cost = False  # a cosine is blind to the scale a known cost makes matter

    def __init__(self, spec: Any, max_iter: int = 3, solve_ratio: float = 1.0,
                 inner_ratio: float = 0.2, reduction: str = "mean", backend: Any = "auto",
                 generator: torch.Generator | None = None) -> None:
        if not (is_real(max_iter, integer=True) and max_iter >= 1):
            raise InputError(f"CaVELoss max_iter must be an int >= 1, got {max_iter!r}")
        for name, value in (("solve_ratio", solve_ratio), ("inner_ratio", inner_ratio)):
            # a number, or a one-element tensor of one (inner_ratio; solve_ratio's setter
            # takes numbers alone), but no boolean
            number = as_number(value)
            if not (is_real(number) and 0.0 <= number <= 1.0):
                raise InputError(f"CaVELoss {name} must be a number in [0, 1], got {value!r}")
        try:
            import clarabel  # noqa: F401
        except ImportError:
            raise BackendUnavailable("CaVELoss projects with clarabel, which is missing: "
                                     "pip install clarabel (cvxpy installs it)") from None
        self.solver = as_solver(spec, backend)
        self.spec = self.solver.spec
        self.cone_rows = ConeRows(self.spec)
        self.max_iter = max_iter
        self.solve_ratio = solve_ratio  # checked on setting (`cache_setting`)
        self.inner_ratio = float(inner_ratio)
        self.reduction = check_reduction(reduction)
        self.generator = generator

    def __repr__(self) -> str:
        return (f"CaVELoss({self.spec.label}, max_iter={self.max_iter}, "
                f"solve_ratio={self.solve_ratio}, inner_ratio={self.inner_ratio})")

    def __call__(self, cost_pred: Tensor, y_true: Tensor, binding: Any = None) -> Tensor:
        check_costs(self.spec, cost_pred, "cost_pred")
        y_true = check_solution(self.solver, y_true, cost_pred, "y_true")
        n = self.solver.num_outputs
        s = -(self.solver.sign * cost_pred).reshape(-1, n)
        if binding is None:
            cones = BindingCones(self.cone_rows(y_true))
        else:
            cones = BindingCones.of(binding)
            widths = sorted({n, self.cone_rows.num_vars})
            if len(cones) != s.shape[0] or cones.width not in widths:
                raise InputError(f"binding has {len(cones)} cones of {cones.width} columns but "
                                 f"{s.shape[0]} (the batch) of {' or '.join(map(str, widths))} "
                                 f"were expected for {self.spec.label}")
        if cones.width > n:  # normals on the auxiliaries too: their cost is 0
            s = torch.cat([s, s.new_zeros(s.shape[0], cones.width - n)], dim=1)
        with torch.no_grad():
            if draw_exact(self.solve_ratio, self.generator):
                points = host_array(s)
                target = torch.as_tensor(cones.project(points, self.max_iter)).to(s)
            else:
                mean = torch.as_tensor(cones.mean_unit_normals()).to(s)
                direction = s / s.norm(dim=1, keepdim=True).clamp(min=1e-8)
                target = (1.0 - self.inner_ratio) * direction + self.inner_ratio * mean
        loss = 1.0 - torch.nn.functional.cosine_similarity(s, target, dim=1)
        batch = cost_pred.shape[: cost_pred.ndim - len(self.spec.cost_shape)]
        return reduce(loss.reshape(batch), self.reduction)
