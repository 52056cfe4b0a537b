"""The text of ``combolayer analyze``: a hull's dimension, equations and fixed outputs.

`describe` renders an [`AffineHull`][combolayer.AffineHull] for a person, e.g.
``y[2,0] = y[0,2]`` rather than a row of the normal matrix.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
from torch import Tensor

from ..backends.solver import known_minimisation_cost
from ..layer.projection import PROJECTIONS, has_known_cost, make_projection
from ..specs.base import Spec
from ..transforms.projection import Transform
from .hull import AffineHull

#: `describe` lists at most this many equations and fixed outputs.
MAX_SHOWN = 20
#: Above this many flops (r^2 * N) the equations are shown as the basis rows
#: instead of the reduced row echelon form, which reads better but costs more.
RREF_FLOPS = 5e9
#: `describe_auto` reads the layer's projection off this many seeded probe costs, and
#: compares its answers within this tolerance.
PROBES = 3
PROBE_TOL = 1e-9


def describe(spec: Spec, hull: AffineHull, full: bool = False) -> str:
    """A person's summary of ``hull``: the dimension, the spec's own constraints that
    hold with equality for every solution, the equations, the fixed outputs and what
    ``"auto"`` (``"auto-exact"`` for an exact hull) does. Lists are cut at `MAX_SHOWN`
    entries unless ``full``."""
    most = None if full else MAX_SHOWN
    mode = "integer solutions (exact, MIP)" if hull.exact else "LP relaxation (sound)"
    lines = [f"{spec.label}: {hull.num_outputs} outputs, affine hull of dimension "
             f"{hull.dim} [{mode}]"]
    rows = tight_constraints(spec, hull)
    if rows:
        lines.append("your constraints that hold with equality for every solution:")
        lines += [f"  {line}" for line in rows[:most]]
        if most is not None and len(rows) > most:
            lines.append(f"  ... and {len(rows) - most} more (--full shows all)")
    equations = readable_equations(hull)
    fixed = hull.fixed.tolist()
    r = len(hull.normals)
    lines.append(f"{r} independent equation{'' if r == 1 else 's'}"
                 + (f", {len(fixed)} of them fixing an output" if fixed else "")
                 + (":" if equations else ""))
    lines += [f"  {line}" for line in equations[:most]]
    if most is not None and len(equations) > most:
        lines.append(f"  ... and {len(equations) - most} more (--full shows all)")
    shown = ", ".join(f"{_name(j, hull.cost_shape)} = {_number(hull.point[j])}"
                      for j in fixed[:most])
    more = f", ... ({len(fixed)} in all)" if most is not None and len(fixed) > most else ""
    lines.append(f"fixed outputs: {shown}{more}" if fixed else "fixed outputs: none")
    lines.append(f'projection "{auto_name(hull)}": {describe_auto(spec, hull)}')
    return "\n".join(lines)


def tight_constraints(spec: Spec, hull: AffineHull) -> list[str]:
    """The spec's own rows that every solution meets with equality, in the user's
    names: ``row "budget" (<=) holds with equality``.

    A row over the outputs alone holds with equality on the hull exactly when its
    coefficients lie in the span of the normals and the shared point meets it; rows
    that involve auxiliary variables are left out (the hull lives in output space).
    """
    if not hasattr(spec, "constraints"):
        return []
    n = hull.num_outputs
    basis = np.asarray(hull.normals)
    out = []
    for i, row in enumerate(spec.constraints):
        coefs = np.zeros(n)
        touches_aux = False
        for j, value in row.items():
            if j < n:
                coefs[j] += value
            else:
                touches_aux = True
        if touches_aux or not coefs.any():
            continue
        residual = coefs - basis.T @ (basis @ coefs) if len(basis) else coefs
        if np.abs(residual).max() > 1e-7 * max(1.0, np.abs(coefs).max()):
            continue
        # to rounding of the row's terms: a row of 2e6 that every solution meets at 1
        # below its bound does not hold with equality
        terms = float(np.abs(coefs) @ np.abs(hull.point)) + abs(row.rhs) + 1.0
        if abs(float(coefs @ hull.point) - row.rhs) > 1e-9 * terms:
            continue
        name = f'row "{row.name}"' if row.name else f"constraints[{i}]"
        how = "is an equation" if row.sense == "==" else "holds with equality"
        out.append(f"{name} ({row.sense} {_number(row.rhs)}) {how}")
    return out


def auto_name(hull: AffineHull) -> str:
    """The hull projection a hull of this mode serves: ``"auto-exact"`` for an exact
    hull, else ``"auto"``."""
    return "auto-exact" if hull.exact else "auto"


def describe_auto(spec: Spec, hull: AffineHull) -> str:
    """What a layer on ``spec`` does to ``w`` under projection `auto_name` (``hull``'s
    mode), in words.

    Read off the transform the layer itself builds (`make_projection`), by applying it
    to seeded probe costs, so the words follow that function wherever its rule changes:
    which of the hull's normal directions it removes, whether it acts on ``w`` or on the
    total cost ``w + known_cost`` on the outputs, whether it rescales, and which plain
    projection it equals (only one the layer accepts for ``spec``).
    """
    with warnings.catch_warnings():  # the layer's own construction warning is not news here
        warnings.simplefilter("ignore")
        transform = make_projection(auto_name(hull), spec)
    probe = _Probe(transform, spec, hull)
    shift = next((s for s in probe.shifts() if probe.linear(s) or probe.scale_free(s)), None)
    if shift is None:
        return ("a transform of w that is neither linear nor independent of w's scale "
                "(see combolayer.layer.projection.make_projection)")
    steps = []
    r = len(hull.normals)
    if r and probe.removes_normals(shift):
        ones = np.full(hull.num_outputs, 1.0 / math.sqrt(hull.num_outputs))
        if r == 1 and abs(float(hull.normals[0] @ ones)) > 1.0 - 1e-9:
            steps.append("subtract the mean")
        else:
            steps.append(f"remove the {r} normal direction{'' if r == 1 else 's'} "
                         f"(project onto the {hull.dim}-dimensional hull)")
    elif r:
        steps.append(f"keep the {r} normal direction{'' if r == 1 else 's'}")
    if probe.scale_free(shift):
        size = probe.size(shift)
        steps.append("normalise" if abs(size - 1.0) < 1e-9 else f"rescale to norm {size:.4g}")
    text = ", then ".join(steps) if steps else "nothing (w passes unchanged)"
    if shift is not probe.zero:
        text = (f"on the total cost w + known_cost over the outputs: {text}; the known "
                "cost is taken off again after (the solver adds it back)")
    elif not probe.scale_free(shift) and has_known_cost(spec):
        text += ("; the spec's known cost makes the scale of w matter" if not steps
                 else "; no rescaling (the spec's known cost makes the scale of w matter)")
    if not r:
        text += "; the solutions span every direction"
    alias = probe.alias() if shift is probe.zero else None
    return text + (f' (= "{alias}")' if alias else "")


class _Probe:
    """Seeded float64 probe costs through a layer's transform, and the properties read
    from them (within `PROBE_TOL`)."""

    def __init__(self, transform: Transform, spec: Spec, hull: AffineHull) -> None:
        self.transform, self.spec, self.hull = transform, spec, hull
        generator = torch.Generator().manual_seed(0)
        n, shape = hull.num_outputs, hull.cost_shape
        w = torch.randn(PROBES, n, generator=generator, dtype=torch.float64)
        normals = torch.tensor(hull.normals, dtype=torch.float64)
        self.w = w.reshape(PROBES, *shape)
        self.along = (torch.randn(PROBES, len(normals), generator=generator,
                                  dtype=torch.float64) @ normals).reshape(PROBES, *shape)
        self.zero = torch.zeros(shape, dtype=torch.float64)

    def shifts(self) -> list[Tensor]:
        """Where the transform may act from: ``w`` itself (shift 0), or the total cost
        ``w + k`` with ``k`` the known cost on the outputs (spec sense, or sense-folded)."""
        known = known_minimisation_cost(self.spec)
        if known is None:
            return [self.zero]
        on_outputs = torch.as_tensor(known[: self.hull.num_outputs]).reshape(self.zero.shape)
        sign = 1.0 if self.spec.sense == "min" else -1.0
        return [self.zero, sign * on_outputs, -sign * on_outputs]

    def around(self, v: Tensor, shift: Tensor) -> Tensor:
        """The transform seen on the total cost ``v = w + shift``."""
        return self.transform(v - shift) + shift

    def linear(self, shift: Tensor) -> bool:
        return (_close(self.around(2.0 * self.w, shift), 2.0 * self.around(self.w, shift))
                and _close(self.around(0.0 * self.w, shift), 0.0 * self.w))

    def scale_free(self, shift: Tensor) -> bool:
        # scaled down too: on a hull of dimension 1, normalize(plane(w + k)) - k is the
        # same for w and 3 w (a sign) when k is small, and looked scale-free around 0
        u = self.around(self.w, shift)
        return (all(_close(self.around(scale * self.w, shift), u) for scale in (3.0, 0.01))
                and not _close(u, torch.zeros_like(u)))

    def size(self, shift: Tensor) -> float:
        u = self.around(self.w, shift).reshape(PROBES, -1)
        return float(torch.linalg.vector_norm(u, dim=-1).mean())

    def removes_normals(self, shift: Tensor) -> bool:
        return _close(self.around(self.w + self.along, shift), self.around(self.w, shift))

    def alias(self) -> str | None:
        """The plain projection (`PROJECTIONS`) the layer accepts for the spec and that
        gives the same costs as this one, if any."""
        mine = self.transform(self.w)
        for name in PROJECTIONS:
            try:
                other = make_projection(name, self.spec)
            except ValueError:  # refused for this spec (a known cost): not an alias
                continue
            if _close(other(self.w), mine):
                return name
        return None


def _close(a: Tensor, b: Tensor) -> bool:
    return bool(torch.allclose(a, b, rtol=PROBE_TOL, atol=PROBE_TOL))


def readable_equations(hull: AffineHull) -> list[str]:
    """The hull's equations other than the fixed outputs, e.g. ``y[2,0] = y[0,2]``.

    The normals, with the fixed outputs' columns cleared, in reduced row echelon
    form, each rescaled to small integers when it can be.
    """
    normals = np.array(hull.normals)
    normals[:, hull.fixed] = 0.0
    r, n = normals.shape
    rows = _rref(normals) if r * r * n <= RREF_FLOPS else normals
    rows = rows[np.abs(rows).max(axis=1, initial=0.0) > 1e-9]
    return [_equation(row, float(row @ hull.point), hull.cost_shape) for row in rows]


def _rref(A: np.ndarray, tol: float = 1e-9) -> np.ndarray:
    A = A.copy()
    r, n = A.shape
    pivot_row = 0
    for col in range(n):
        if pivot_row == r:
            break
        below = np.abs(A[pivot_row:, col])
        best = int(np.argmax(below))
        if below[best] <= tol:
            continue
        A[[pivot_row, pivot_row + best]] = A[[pivot_row + best, pivot_row]]
        A[pivot_row] /= A[pivot_row, col]
        factors = A[:, col].copy()
        factors[pivot_row] = 0.0
        A -= np.outer(factors, A[pivot_row])
        A[np.abs(A) < tol] = 0.0
        pivot_row += 1
    return A[:pivot_row]


def _equation(row: np.ndarray, rhs: float, shape: tuple[int, ...]) -> str:
    nonzero = np.flatnonzero(np.abs(row) > 1e-9)
    coefs, rhs = _small_integers(row[nonzero], rhs)
    if coefs[0] < 0:
        coefs, rhs = -coefs, -rhs
    names = [_name(j, shape) for j in nonzero]
    if abs(rhs) < 1e-9 and (coefs > 0).any() and (coefs < 0).any():
        # "a = b" reads better than "a - b = 0"
        left = _sum(coefs[coefs > 0], [m for m, c in zip(names, coefs, strict=True) if c > 0])
        right = _sum(-coefs[coefs < 0], [m for m, c in zip(names, coefs, strict=True) if c < 0])
        text = f"{left} = {right}"
    else:
        text = f"{_sum(coefs, names)} = {_number(rhs)}"
    return text + (f"   ({len(names)} terms)" if len(names) > 6 else "")


def _small_integers(coefs: np.ndarray, rhs: float) -> tuple[np.ndarray, float]:
    """Scale so the coefficients are small integers when some multiplier up to 12 does it."""
    scaled = coefs / np.abs(coefs).min()
    for multiplier in range(1, 13):
        candidate = scaled * multiplier
        if np.allclose(candidate, np.round(candidate), atol=1e-6):
            factor = multiplier / np.abs(coefs).min()
            return np.round(candidate), rhs * factor
    return coefs, rhs


def _sum(coefs: np.ndarray, names: list[str]) -> str:
    """``y[0] + 2*y[3] - y[4]``; a long sum shows its ends: ``y[0] + ... + y[9]``."""
    terms = [(float(c), name) for c, name in zip(coefs, names, strict=True)]
    if len(terms) <= 6:
        return " ".join(_term(c, name, lead=i == 0) for i, (c, name) in enumerate(terms))
    first = _term(*terms[0], lead=True)
    last = _term(*terms[-1], lead=False)
    if np.allclose(coefs, coefs[0]):
        return f"{first} {last[0]} ... {last}"
    middle = " ".join(_term(c, name, lead=False) for c, name in terms[1:3])
    return f"{first} {middle} ... {last}"


def _term(coef: float, name: str, lead: bool) -> str:
    size = abs(coef)
    body = name if abs(size - 1.0) < 1e-9 else f"{_number(size)}*{name}"
    if lead:
        return body if coef > 0 else f"-{body}"
    return f"+ {body}" if coef > 0 else f"- {body}"


def _name(flat: int, shape: tuple[int, ...]) -> str:
    return "y[" + ",".join(str(int(i)) for i in np.unravel_index(flat, shape)) + "]"


def _number(value: float) -> str:
    value = float(np.round(value, 6)) + 0.0
    return str(int(value)) if value == int(value) else f"{value:g}"
