"""Cone-aligned vector estimation, CaVE (Tang & Khalil): the cosine to the optimality cone."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from ..backends.pool import draw_exact
from ..backends.registry import as_solver
from ..backends.solver import check_costs
from ..errors import BackendUnavailable
from .base import SolverLoss, check_reduction, check_solution, reduce

#: A constraint whose slack at ``y_true`` is below this binds (PyEPO's tolerance).
TIGHT = 1e-5


class BindingRows:
    """The canonical form of a spec, read once, and the rows that bind at 0/1 solutions."""

    def __init__(self, spec: Any, tol: float = TIGHT) -> None:
        ilp = spec.to_ilp()
        self.label = spec.label
        self.n = int(np.prod(spec.cost_shape))
        self.num_aux = ilp.num_aux
        self.tol = tol
        A_ub, self.b_ub, A_eq, _ = ilp.to_matrices()
        self.A_ub = sp.csr_matrix(A_ub)
        self.equalities = np.vstack([A_eq.toarray(), -A_eq.toarray()])

    def __call__(self, y_true: Any) -> list[np.ndarray]:
        n, tol = self.n, self.tol
        if self.num_aux:
            raise ValueError(
                f"CaVE reads the binding constraints from y_true, but {self.label} has "
                f"{self.num_aux} auxiliary variables whose values y_true does not give: "
                f"pass binding= (the normals, (batch, rows, {n})) to the loss instead"
            )
        y = np.asarray(torch.as_tensor(y_true).detach().cpu(), dtype=np.float64).reshape(-1, n)
        if not np.all(np.isclose(y, 0.0, atol=tol) | np.isclose(y, 1.0, atol=tol)):
            raise ValueError(f"CaVE is defined for binary problems: y_true must be 0/1 for "
                             f"{self.label}, got values such as "
                             f"{y[~np.isclose(y, np.round(y))][:3]}")
        slack = np.abs(self.b_ub[None, :] - (self.A_ub @ y.T).T)
        eye = np.eye(n)
        normals = []
        for row, tight in zip(y, slack < tol, strict=True):
            at_zero, at_one = row <= tol, row >= 1.0 - tol
            normals.append(np.vstack([self.A_ub[np.flatnonzero(tight)].toarray(),
                                      self.equalities, -eye[at_zero], eye[at_one & ~at_zero]]))
        return normals


def binding_normals(spec: Any, y_true: Any, tol: float = TIGHT) -> list[np.ndarray]:
    """The normals of the constraints that bind at each 0/1 solution, in ``<=`` orientation.

    For ``y_true`` ``(*batch, *cost_shape)`` returns one ``(R_b, N)`` array per
    instance, from the spec's canonical form ``to_matrices()``: the ``<=`` rows
    (``>=`` already negated) with slack below ``tol``, every equality row ``a``
    as ``a`` and ``-a``, ``-e_k`` where ``y_k = 0`` and ``+e_k`` where
    ``y_k = 1``. A min problem's ``y_true`` is optimal for ``c`` exactly when
    ``-c`` lies in the cone these rows span (the LP's KKT conditions), which
    is what CaVE aligns the prediction with. These are the rows of PyEPO's
    ``optDatasetConstrs``.
    """
    return BindingRows(spec, tol)(y_true)


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
    import clarabel

    normals = normals[np.abs(normals).sum(axis=1) > 1e-7]
    if not len(normals):
        return point.copy()
    m = normals.shape[0]
    P = sp.triu(sp.csc_matrix(2.0 * normals @ normals.T)).tocsc()
    q = -2.0 * normals @ point
    A = -sp.eye(m, format="csc")
    solver = clarabel.DefaultSolver(P, q, A, np.zeros(m), [clarabel.NonnegativeConeT(m)],
                                    _clarabel_settings(max_iter))
    return np.asarray(solver.solve().x) @ normals


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
    gradient than the cone's boundary); a large ``max_iter`` gives the exact
    projection. ``solve_ratio < 1`` is the paper's "CaVE Hybrid": each call
    takes the QP with that probability, else
    ``p = (1 - inner_ratio) s / |s| + inner_ratio * mean of the unit normals``.

    CaVE is for binary problems; ``y_true`` must be 0/1. Call it as
    ``loss(cost_pred, y_true)``, or ``loss(cost_pred, y_true, binding=G)`` with
    the normals precomputed (``(batch, rows, N)``, zero rows ignored: PyEPO's
    ``tight_ctrs``), needed when the spec has auxiliary variables.

    A known cost (`combolayer.ILP.known_cost`) is refused (ValueError): CaVE's loss
    is a cosine, so it sees only the direction of ``c_hat``, and that is all that
    decides ``y`` when the objective is ``<c_hat, y>`` alone. With a known cost ``k``
    the objective ``<c_hat, y> + <k, x>`` is not invariant to scaling ``c_hat``:
    ``c_hat`` and ``2 c_hat`` get the same CaVE loss but can have different optima,
    and ``x*`` is optimal exactly when ``-(c_hat, k)`` lies in the cone of the whole
    solution's binding rows (in ``num_vars`` coordinates, the last ones fixed to
    ``k``). Aligning with that is a distance to a cone with fixed coordinates, a
    different loss, not CaVE's cosine.

    Reference: Tang, Khalil, "CaVE: A Cone-Aligned Approach for Fast
    Predict-then-optimize with Binary Linear Programs", CPAIOR 2024.
    """

    counts_known_cost = False  # a cosine is blind to the scale a known cost makes matter

    def __init__(self, spec: Any, max_iter: int = 3, solve_ratio: float = 1.0,
                 inner_ratio: float = 0.2, reduction: str = "mean", backend: Any = "auto",
                 generator: torch.Generator | None = None) -> None:
        if not (isinstance(max_iter, int) and max_iter >= 1):
            raise ValueError(f"CaVELoss max_iter must be an int >= 1, got {max_iter!r}")
        for name, value in (("solve_ratio", solve_ratio), ("inner_ratio", inner_ratio)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"CaVELoss {name} must be in [0, 1], got {value}")
        try:
            import clarabel  # noqa: F401
        except ImportError:
            raise BackendUnavailable("CaVELoss projects with clarabel, which is missing: "
                                     "pip install clarabel (cvxpy installs it)") from None
        self.solver = as_solver(spec, backend)
        self.spec = self.solver.spec
        self.binding_rows = BindingRows(self.spec)
        self.max_iter = max_iter
        self.solve_ratio = float(solve_ratio)
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
            normals = self.binding_rows(y_true)
        else:
            binding = np.asarray(torch.as_tensor(binding).detach().cpu(), dtype=np.float64)
            if binding.ndim != 3 or binding.shape[0] != s.shape[0] or binding.shape[2] != n:
                raise ValueError(f"binding has shape {binding.shape} but (batch={s.shape[0]}, "
                                 f"rows, {n}) was expected")
            normals = list(binding)
        with torch.no_grad():
            if draw_exact(self.solve_ratio, self.generator):
                points = s.detach().cpu().numpy().astype(np.float64)
                target = torch.as_tensor(np.stack([
                    cone_projection(point, g, self.max_iter)
                    for point, g in zip(points, normals, strict=True)])).to(s)
            else:
                target = self._heuristic(s, normals)
        loss = 1.0 - torch.nn.functional.cosine_similarity(s, target, dim=1)
        batch = cost_pred.shape[: cost_pred.ndim - len(self.spec.cost_shape)]
        return reduce(loss.reshape(batch), self.reduction)

    def _heuristic(self, s: Tensor, normals: list[np.ndarray]) -> Tensor:
        means = []
        for g in normals:
            norms = np.linalg.norm(g, axis=1, keepdims=True)
            valid = norms[:, 0] > 1e-7
            unit = g[valid] / norms[valid]
            means.append(unit.mean(0) if len(unit) else np.zeros(g.shape[1]))
        mean = torch.as_tensor(np.stack(means)).to(s)
        direction = s / s.norm(dim=1, keepdim=True).clamp(min=1e-8)
        return (1.0 - self.inner_ratio) * direction + self.inner_ratio * mean
