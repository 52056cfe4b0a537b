"""An example combolayer plugin: solve tiny ILPs by enumerating every integer point.

It shows the whole backend interface (a :class:`~combolayer.backends.Backend`
subclass with ``name``, ``requires``, ``capabilities``, a tier, ``accepts`` and
``compile``) and doubles as the reference the test suite checks every other
backend against.
"""

from __future__ import annotations

import itertools
from typing import ClassVar

import numpy as np

from combolayer.backends import Backend, Capability, Tier
from combolayer.errors import InfeasibleError
from combolayer.specs.canonical import canonical_form

#: Enumerating more points than this is too slow to be useful.
MAX_POINTS = 1 << 16
TOL = 1e-7


def _points(form) -> np.ndarray:
    bounds = zip(form.lower, form.upper, strict=True)
    ranges = [np.arange(int(lo), int(up) + 1) for lo, up in bounds]
    return np.array(list(itertools.product(*ranges)), dtype=float).reshape(-1, form.num_vars)


class BruteForceKernel:
    array_api = "numpy"

    def __init__(self, form) -> None:
        points = _points(form)
        ok = np.ones(len(points), dtype=bool)
        if form.A_ub.shape[0]:
            ok &= (points @ form.A_ub.T.toarray() <= form.b_ub + TOL).all(axis=1)
        if form.A_eq.shape[0]:
            ok &= (np.abs(points @ form.A_eq.T.toarray() - form.b_eq) <= TOL).all(axis=1)
        self.num_outputs = form.num_outputs
        # Costs on the outputs: distinct output vectors, in lexicographic order; costs on
        # every variable (a known cost, or auxiliaries asked for): whole points.
        self.feasible = np.unique(points[ok, : form.num_outputs], axis=0)
        self.whole = np.unique(points[ok], axis=0)

    def __call__(self, costs: np.ndarray) -> np.ndarray:
        candidates = self.feasible if costs.shape[1] == self.num_outputs else self.whole
        if len(candidates) == 0:
            raise InfeasibleError("bruteforce: the problem has no feasible solution")
        return candidates[np.argmin(costs @ candidates.T, axis=1)]


class BruteForceBackend(Backend):
    """Enumerates every integer point of a small, bounded, pure-integer ILP."""

    name: ClassVar[str] = "bruteforce"
    requires: ClassVar[tuple[str, ...]] = ("numpy",)
    capabilities: ClassVar[Capability] = Capability.LP | Capability.MIP | Capability.BATCHED
    generic_tier: ClassVar[int] = Tier.LAST  # a reference, never the automatic choice

    def accepts(self, spec) -> str | None:
        reason = super().accepts(spec)
        if reason is not None:
            return reason
        form = canonical_form(spec, lazy=False)
        if not form.integer.all():
            return "it enumerates integer points only, and this problem has continuous variables"
        if not np.isfinite(form.upper).all() or not np.isfinite(form.lower).all():
            return "it needs finite lower and upper bounds on every variable"
        # in logarithms: the product overflows float64 from about 1000 binaries on
        log_count = float(np.log10(np.maximum(form.upper - form.lower + 1, 1)).sum())
        if log_count > np.log10(MAX_POINTS):
            return (f"it enumerates at most {MAX_POINTS} points, this problem has about "
                    f"1e{log_count:.0f}")
        return None

    def compile(self, spec, config) -> BruteForceKernel:
        return BruteForceKernel(canonical_form(spec, lazy=False))
