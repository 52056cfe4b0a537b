"""Projections by name: the cost projection P of a layer, built for one problem.

The transforms themselves are small pure functions in `combolayer.transforms.projection`;
``"plane"`` and ``"auto"`` also need the problem's affine hull, computed by
[`combolayer.analyze`][combolayer.analyze]. This module sits above both and is the one place
that maps a projection's name to its transform.
"""

from __future__ import annotations

import torch

from ..analysis.hull import analyze
from ..backends.solver import known_minimisation_cost
from ..specs.base import Spec
from ..transforms.projection import (
    Transform,
    identity,
    normalize,
    normalized,
    on_cost_shape,
    project_mean,
    project_plane,
    project_std,
)

#: Projections that need nothing but the cost; "plane" and "auto" need the
#: problem's affine hull ([`combolayer.analyze`][combolayer.analyze]).
PROJECTIONS: dict[str, Transform] = {
    "none": identity,
    "mean": project_mean,
    "norm": normalize,
    "std": project_std,
}


#: Projections built on the problem's affine hull: ``"plane"`` removes its normal
#: directions, ``"auto"`` then normalises; ``"auto-exact"`` uses the hull of the
#: integer solutions (``cl.analyze(spec, exact=True)``, a few MIP solves at build)
#: instead of the LP relaxation's.
HULL_PROJECTIONS = ("auto", "auto-exact", "plane")

#: The projections that rescale or shift w, and what they do to it: with a known cost
#: they change the solution, so a layer refuses them.
SCALING_PROJECTIONS = {"norm": "rescaling", "std": "shifting and rescaling",
                       "mean": "shifting"}


def has_known_cost(spec: Spec) -> bool:
    """Whether ``spec`` has a known cost that is not all zero (`combolayer.ILP.known_cost`):
    the solver's own test (`known_minimisation_cost`)."""
    return known_minimisation_cost(spec) is not None


def make_projection(projection: str | Transform, spec: Spec) -> Transform:
    """The projection for a layer on ``spec``, acting on costs of shape ``(..., *cost_shape)``.

    A callable is used as it is and receives costs of shape ``(..., *cost_shape)``.

    With a known cost (``ILP.known_cost``, not all zero) the objective is
    ``<w, y> + <known_cost, x>``, and rescaling or shifting ``w`` changes its argmin:
    ``"auto"`` is then the hull projection alone (no normalisation), and ``"norm"``,
    ``"std"`` and ``"mean"`` raise ``ValueError`` (docs/invariance.md says why).
    """
    if callable(projection):
        return projection
    known = has_known_cost(spec)
    if known and projection in SCALING_PROJECTIONS:
        raise ValueError(
            f"projection {projection!r} changes the solution of {spec.label}: it has a known "
            f"cost, so the objective <w, y> + <known_cost, x> is not invariant to "
            f"{SCALING_PROJECTIONS[projection]} w; use 'auto' or 'plane' (the hull "
            "projection, which keeps the solution), 'none', or a callable")
    if projection in HULL_PROJECTIONS:
        hull = analyze(spec, exact=projection.endswith("-exact"))
        if projection == "plane" or known:
            return hull.transform()
        # plane then normalise, as one autograd node (docs/performance.md)
        plane = project_plane(torch.tensor(hull.normals, dtype=torch.float64))
        return on_cost_shape(normalized(plane), spec.cost_shape)
    if projection not in PROJECTIONS:
        raise ValueError(
            f"unknown projection {projection!r}: expected one of "
            f"{[*HULL_PROJECTIONS, *PROJECTIONS]} or a callable Tensor -> Tensor"
        )
    return on_cost_shape(PROJECTIONS[projection], spec.cost_shape)
