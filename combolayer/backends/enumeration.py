"""Small binary problems solved exactly for a whole batch at once, by enumeration in torch.

Every point of ``{0, 1}^n`` (n at most `MAX_VARS`) is listed once, when the
problem is compiled, and the spec's own constraints keep the feasible ones,
``F`` (``(K, n)``). A batch of costs is then one product ``costs @ F.T`` and an
argmin per instance, on the costs' device; per-call rows ``A x <= b`` mask, per
instance, the points they exclude (``A F.T <= b``), before the argmin. No solver
is called, so there is no per-solve set-up: a batch of 16-variable problems
costs about as much as a matrix product with 2^16 columns.

A problem with no rows of its own (every 0/1 point within the bounds feasible) is
separable: without per-call rows its minimum takes each variable at its upper bound
where its cost is negative and at its lower bound elsewhere, one comparison per
variable (the point the argmin over every point would pick, ties included), so
``"auto"`` puts enumeration first there whatever the number of points.

Ties go to the first point in lexicographic order (deterministic).
"""

from __future__ import annotations

import functools
import math
from typing import ClassVar

import numpy as np
import torch

from ..errors import InfeasibleError, InputError
from ..specs.base import Spec
from ..specs.canonical import CanonicalForm, canonical_form, rounding
from .base import Backend, Capability, Tier
from .config import BackendConfig
from .outcome import INFEASIBLE, OPTIMAL, Solved
from .registry import register_backend
from .rows import FEASIBILITY_TOL, Rows
from .solver import ReportingKernel

#: The most variables enumerated: 2^20 points of 20 entries are 160 MB in float64.
MAX_VARS = 20
#: Entries of one ``(instances, points)`` block (costs or row checks): the batch is cut into
#: pieces of at most this many (32 MB of float64).
BLOCK = 1 << 22
#: ``"auto"`` puts enumeration ahead of the MIP solvers on pure binary problems of at
#: most `AUTO_MAX_VARS` variables whose own constraints leave at most `AUTO_MAX_POINTS`
#: feasible points (a solve is one pass over them), and on separable ones (no rows of
#: their own) of any number of points, accepting per-call rows slower than a MIP solver
#: at 16 free variables (set by benchmarks/enumeration.py against SCIP and Gurobi, with
#: and without per-call rows).
AUTO_MAX_VARS = 16
AUTO_MAX_POINTS = 4096
#: Per instance, this many cheapest points are checked against the per-call rows first.
CANDIDATES = 64
#: Rows used by at least this many instances each (on average) are checked against
#: every point once per entry instead.
SHARED = 4
#: From this many variables on, the row values of all 2^n points are computed from the two
#: halves of the variables (`EnumerationKernel._allowed`).
SPLIT_MIN_VARS = 8


def _all_points(n: int, device: torch.device) -> torch.Tensor:
    """Every 0/1 point of ``n`` variables, lexicographic (first variable most significant),
    ``(2^n, n)`` float64."""
    index = torch.arange(2**n, device=device)
    shifts = torch.arange(n - 1, -1, -1, device=device)
    return ((index[:, None] >> shifts) & 1).to(torch.float64)


def _binary_form(spec: Spec) -> tuple[CanonicalForm | None, str | None]:
    """The spec's canonical form when it can be enumerated, else why not."""
    outputs = math.prod(spec.cost_shape)
    if outputs > MAX_VARS:
        # the outputs are the form's first variables: refused before the form is built
        # (a large TSP's form is costly to build only to be refused)
        return None, (f"it enumerates at most {MAX_VARS} binary variables, this problem "
                      f"has at least {outputs}")
    try:
        form = canonical_form(spec, lazy=False)
    except Exception as error:  # noqa: BLE001 (a form it cannot build is a refusal)
        return None, f"its canonical form cannot be built ({type(error).__name__})"
    if form.num_vars > MAX_VARS:
        return None, (f"it enumerates at most {MAX_VARS} binary variables, this problem "
                      f"has {form.num_vars}")
    binary = form.integer & (form.lower >= 0) & (form.upper <= 1)
    fixed = form.lower == form.upper
    if not (binary | fixed).all():
        return None, ("it solves binary problems only (0/1 integer variables, and "
                      "variables fixed by lower == upper)")
    return form, None


def variable_values(form: CanonicalForm, tol: float = FEASIBILITY_TOL) -> list[np.ndarray]:
    """Each variable's values within its bounds, ascending: a fixed variable's one value
    (any number; none for an integer variable fixed between two integers), a binary
    one's 0 and 1 that its bounds allow (`_binary_form` accepts nothing else)."""
    values = []
    for lower, upper, integer in zip(form.lower, form.upper, form.integer, strict=True):
        if lower == upper:
            off_grid = integer and abs(lower - round(lower)) > tol
            values.append(np.array([] if off_grid else [round(lower) if integer else lower],
                                   dtype=np.float64))
        else:
            values.append(np.array([v for v in (0.0, 1.0) if lower - tol <= v <= upper + tol]))
    return values


def feasible_points(form: CanonicalForm, tol: float = FEASIBILITY_TOL) -> np.ndarray:
    """Every point of the variables' values (`variable_values`, in lexicographic order)
    that meets the form's rows, as ``(K, num_vars)`` float64."""
    values = variable_values(form, tol)
    free = [j for j, v in enumerate(values) if len(v) == 2]
    if any(len(v) == 0 for v in values):
        return np.zeros((0, form.num_vars))
    k = len(free)
    points = np.empty((2**k, form.num_vars))
    for j, v in enumerate(values):
        if len(v) == 1:
            points[:, j] = v[0]
    # row i is the binary expansion of i over the free variables, the first most
    # significant (each free variable's values are 0 and 1): lexicographic
    points[:, free] = (np.arange(2**k)[:, None] >> np.arange(k - 1, -1, -1)) & 1
    # the points are integer: a row holds up to float rounding, not to a solver's
    # tolerance (weights of 1e-7 over a capacity of 0 break it)
    ok = np.ones(len(points), dtype=bool)
    for A, b, equal in ((form.A_ub, form.b_ub, False), (form.A_eq, form.b_eq, True)):
        if A.shape[0]:
            lhs = np.asarray(A @ points.T).T
            slack = rounding(np.asarray(abs(A) @ np.abs(points).T).T, np.abs(b))
            ok &= ((np.abs(lhs - b) if equal else lhs - b) <= slack).all(axis=1)
    points = points[ok]
    if form.row_separator is not None:  # a path's cycles: no point per-call rows may pick
        points = points[[not form.row_separator(x) for x in points]]
    return points


def separable_box(form: CanonicalForm, tol: float = FEASIBILITY_TOL
                  ) -> tuple[np.ndarray, np.ndarray] | None:
    """Each variable's lowest and highest value (`variable_values`) when the form has
    no rows (its feasible points are then every combination of them), else None; None
    too when some variable has no value (infeasible: the points say so)."""
    if form.A_ub.shape[0] or form.A_eq.shape[0]:
        return None
    values = variable_values(form, tol)
    if any(len(v) == 0 for v in values):
        return None
    return (np.array([v[0] for v in values], dtype=np.float64),
            np.array([v[-1] for v in values], dtype=np.float64))


@functools.lru_cache(maxsize=64)
def _count_points(cls: type, spec_json: str) -> int:
    """How many feasible points a spec has (once per spec)."""
    spec = cls.model_validate_json(spec_json)
    return len(feasible_points(_binary_form(spec)[0]))


class EnumerationKernel(ReportingKernel):
    """The feasible points of a small binary problem; `with_statuses` answers a ``(B, N)``
    (or full-width ``(B, num_vars)``) batch of minimisation costs with one product,
    each instance's status "infeasible" where its per-call rows leave no point."""

    array_api = "torch"
    takes_rows = True

    def __init__(self, form: CanonicalForm) -> None:
        self.form = form
        self._on: dict[torch.device, torch.Tensor] = {}
        n = form.num_vars
        #: no rows of the spec's own: each variable's lowest and highest 0/1 value within
        #: its bounds (`separable_box`), which answer calls without per-call rows
        self._box = separable_box(form)
        self._box_on: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        full = (bool((self._box[0] == 0).all() and (self._box[1] == 1).all())
                if self._box is not None else len(self.points) == 2**n)
        #: every 0/1 point kept (no fixed variable, no row of the spec's own): the row
        #: values ``A F.T`` are then sums of two small products (`_allowed`)
        self._split = n // 2 if full and n >= SPLIT_MIN_VARS else 0
        self._halves_on: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    @functools.cached_property
    def points(self) -> torch.Tensor:
        """The feasible points ``F``, listed on first use (a separable problem's calls
        without per-call rows never list them)."""
        return torch.from_numpy(feasible_points(self.form))

    def _allowed(self, A: torch.Tensor, b: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
        """Which points meet the rows ``A x <= b`` (``A`` ``(..., m, n)``, ``b``
        ``(..., m)``; -> ``(..., K)`` bool). When every 0/1 point is kept, point
        ``i = hi * 2^(n-h) + lo`` (first variables most significant) has ``a x = a[:h]
        x_hi + a[h:] x_lo``: two products with ``2^h`` and ``2^(n-h)`` points, then one
        comparison per row and point, row by row into one mask, instead of the ``(m, K)``
        products (faster at 16 variables: benchmarks/enumeration.py)."""
        h = self._split
        if not h:
            return ((A @ points.T) <= b[..., None]).all(dim=-2)
        halves = self._halves_on.get(points.device)
        if halves is None:
            halves = self._halves_on[points.device] = (
                _all_points(h, points.device), _all_points(points.shape[1] - h, points.device))
        high, low = halves
        room = b[..., None] - A[..., :h] @ high.T  # (..., m, 2^h)
        low_values = A[..., h:] @ low.T  # (..., m, 2^(n-h))
        mask = torch.ones(room.shape[:-2] + (len(high), len(low)), dtype=torch.bool,
                          device=points.device)
        for j in range(A.shape[-2]):
            mask &= low_values[..., j, None, :] <= room[..., j, :, None]
        return mask.flatten(-2)

    def with_statuses(self, costs: torch.Tensor, rows: Rows | None = None) -> Solved:
        width = costs.shape[1]
        if rows is None and self._box is not None:
            return Solved(self._separable(costs))
        points = self._on.get(costs.device)
        if points is None:  # a copy per device, made once
            points = self._on[costs.device] = self.points.to(costs.device)
        if len(points) == 0:
            if rows is None:
                raise InfeasibleError("enumerate: the problem is infeasible, it has no "
                                      "feasible solution")
            return Solved(costs.new_zeros(costs.shape), (INFEASIBLE,) * len(costs))
        values = costs.to(torch.float64)
        chosen = torch.empty(len(costs), dtype=torch.long, device=costs.device)
        feasible = torch.ones(len(costs), dtype=torch.bool, device=costs.device)
        if rows is not None:
            # the rows fitted to the form's columns once for the batch, not once per block
            A, b = self._fitted(rows, points)
            entries, inverse = torch.unique(rows.index, return_inverse=True)
            if len(entries) * SHARED <= len(costs):
                self._shared(values, A, b, entries, inverse, points, chosen, feasible)
                return self._answer(points, chosen, feasible, width, costs.dtype)
        step = max(1, BLOCK // len(points))
        for start in range(0, len(costs), step):
            stop = min(start + step, len(costs))
            objective = values[start:stop] @ points[:, :width].T
            if rows is None:
                chosen[start:stop] = objective.argmin(dim=1)
            else:
                chosen[start:stop], feasible[start:stop] = self._best_allowed(
                    objective, A, b, rows.index[start:stop], points)
        return self._answer(points, chosen, feasible, width, costs.dtype,
                            rows=rows is not None)

    def _separable(self, costs: torch.Tensor) -> torch.Tensor:
        """No rows couple the variables: each at its highest allowed value where its
        cost is negative, else at its lowest (the lexicographically first optimum)."""
        box = self._box_on.get(costs.device)
        if box is None:
            box = self._box_on[costs.device] = tuple(
                torch.from_numpy(side).to(costs.device) for side in self._box)
        low, high = (side[: costs.shape[1]] for side in box)
        # + 0.0: no -0.0
        return (torch.where(costs.to(torch.float64) < 0, high, low) + 0.0).to(costs.dtype)

    @staticmethod
    def _answer(points: torch.Tensor, chosen: torch.Tensor, feasible: torch.Tensor,
                width: int, dtype: torch.dtype, rows: bool = True) -> Solved:
        """The chosen points, and with per-call ``rows`` each instance's status: zeros and
        "infeasible" where they left no point."""
        x = points[chosen, :width]
        if not rows:
            return Solved((x + 0.0).to(dtype))
        statuses = tuple(OPTIMAL if ok else INFEASIBLE for ok in feasible.tolist())
        # + 0.0: no -0.0 from the mask
        return Solved((x * feasible[:, None] + 0.0).to(dtype), statuses)

    def _shared(self, values: torch.Tensor, A: torch.Tensor, b: torch.Tensor,
                entries: torch.Tensor, inverse: torch.Tensor, points: torch.Tensor,
                chosen: torch.Tensor, feasible: torch.Tensor) -> None:
        """Rows shared by many instances (one set for a batch, a learned constraint):
        each entry's feasible points once, then the products over those points only.
        ``A``, ``b``: the rows `_fitted` to the points' columns."""
        width = values.shape[1]
        for e, entry in enumerate(entries.tolist()):
            allowed = self._allowed(A[entry], b[entry], points)
            mine = (inverse == e).nonzero().squeeze(1)
            kept = allowed.nonzero().squeeze(1)
            if len(kept) == 0:
                feasible[mine] = False
                chosen[mine] = 0
                continue
            subset = points[kept, :width]
            step = max(1, BLOCK // len(kept))
            for start in range(0, len(mine), step):
                part = mine[start : start + step]
                chosen[part] = kept[(values[part] @ subset.T).argmin(dim=1)]

    @staticmethod
    def _fitted(rows: Rows, points: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``A`` with the points' columns (the form's own auxiliaries as zeros), and ``b``
        raised by what float rounding may add to a row at an integer point, no more
        (`rounding`): with a tolerance of 1e-6, a row of 1e-7 (``y0 + y1 <= 1`` scaled)
        took both, and ``y0 + y1 <= 1 - 1e-7`` took both too."""
        n = points.shape[1]
        A = rows.A.to(torch.float64)
        A = A[..., :n] if A.shape[-1] >= n else torch.nn.functional.pad(A, (0, n - A.shape[-1]))
        b = rows.b.to(torch.float64)
        largest = float(points.abs().max()) if points.numel() else 0.0
        return A, b + rounding(A.abs().sum(-1) * largest, b.abs())

    def _best_allowed(self, objective: torch.Tensor, A: torch.Tensor, b: torch.Tensor,
                      index: torch.Tensor, points: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
        """The cheapest point that meets each instance's per-call rows (entry ``index`` of
        the `_fitted` ``A``, ``b``), and whether there is one. The `CANDIDATES` cheapest
        points are checked first (a small product); only instances with no feasible
        candidate, or whose choice ties the dearest candidate, check every point (``A
        F.T``). Ties go to the first point, as everywhere in the kernel."""
        k = min(CANDIDATES, points.shape[0])
        values, cheapest = objective.topk(k, dim=1, largest=False, sorted=True)  # (B, k)
        # ties in point order, as argmin breaks them (topk's order among equals is its own):
        # by index, then stably by cost
        cheapest, by_index = cheapest.sort(dim=1)
        values, by_cost = values.gather(1, by_index).sort(dim=1, stable=True)
        cheapest = cheapest.gather(1, by_cost)
        lhs = torch.einsum("rmn,rkn->rmk", A[index], points[cheapest])
        ok = (lhs <= b[index][..., None]).all(dim=1)  # (B, k)
        first = ok.to(torch.int8).argmax(dim=1, keepdim=True)
        chosen = cheapest.gather(1, first).squeeze(1)  # first feasible candidate in cost order
        found = ok.any(dim=1)
        if k == points.shape[0]:
            return chosen, found
        # unsettled: no candidate is feasible, or the one chosen ties the dearest candidate
        # (a point left out may tie it too, at a lower index)
        settled = found & (values.gather(1, first).squeeze(1) < values[:, -1])
        if not bool(settled.all()):
            rest = (~settled).nonzero().squeeze(1)
            allowed = self._allowed(A[index[rest]], b[index[rest]], points)  # (rest, K)
            masked = objective[rest].masked_fill(~allowed, float("inf"))
            chosen[rest] = masked.argmin(dim=1)
            found[rest] = allowed.any(dim=1)
        return chosen, found


@register_backend
class EnumerationBackend(Backend):
    """Small binary problems (at most 20 variables) by enumeration in torch, batched on
    any device, with per-call rows; no solver package."""

    name: ClassVar[str] = "enumerate"
    requires: ClassVar[tuple[str, ...]] = ("torch",)
    capabilities: ClassVar[Capability] = Capability.BATCHED | Capability.ROWS
    array_api: ClassVar[str] = "torch"

    @classmethod
    def rank(cls, spec: Spec) -> int:
        """Ahead of the MIP solvers (behind any algorithm for the problem kind) on pure
        binary MIPs of at most `AUTO_MAX_VARS` variables and `AUTO_MAX_POINTS` feasible
        points; last otherwise."""
        if not spec.is_mip or spec.num_vars > AUTO_MAX_VARS:  # told before any form is built
            return Tier.LAST
        form, reason = _binary_form(spec)
        if reason is not None or not form.is_mip or form.num_vars > AUTO_MAX_VARS:
            return Tier.LAST
        # a separable problem takes one comparison per variable, whatever its points
        if (separable_box(form) is None
                and _count_points(type(spec), spec.model_dump_json()) > AUTO_MAX_POINTS):
            return Tier.LAST
        return Tier.MIP_ENUMERATION

    def accepts(self, spec: Spec) -> str | None:
        return _binary_form(spec)[1]

    def compile(self, spec: Spec, config: BackendConfig) -> EnumerationKernel:
        form, reason = _binary_form(spec)
        if reason is not None:
            raise InputError(f"backend 'enumerate' cannot solve {spec.label}: {reason}")
        return EnumerationKernel(form)
