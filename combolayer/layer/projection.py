"""Projections by name: the cost projection P of a layer, built for one problem.

The transforms themselves are small pure functions in `combolayer.transforms.projection`;
``"plane"`` and ``"auto"`` also need the problem's affine hull, computed by
[`combolayer.analyze`][combolayer.analyze]. This module sits above both and is the one place
that maps a projection's name to its transform.
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..analysis.hull import analyze
from ..backends.registry import make_solver
from ..backends.solver import known_minimisation_cost
from ..errors import ComboLayerError, InputError, InputTypeError
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


def known_on_outputs(spec: Spec) -> np.ndarray | None:
    """The spec's known cost on the outputs, in the spec's sense, shaped ``cost_shape``,
    when it has one on the outputs alone; None when it has none, or one on the
    auxiliaries too (no projection of ``w`` can then keep the solution and rescale)."""
    known = known_minimisation_cost(spec)
    if known is None:
        return None
    n = math.prod(spec.cost_shape)
    if known[n:].any():
        return None
    sign = 1.0 if spec.sense == "min" else -1.0
    return (sign * known[:n]).reshape(spec.cost_shape)


class AroundKnown:
    """``P(w + k) - k``: the projection ``P`` of the whole cost on the outputs, ``w`` plus
    a known cost ``k`` there, with ``k`` taken off again (the solver adds it back).

    The solver then sees ``P(w + k)``, whose argmin is that of ``<w + k, y>`` for any ``P``
    that keeps the solution of a cost without a known part (the hull projection,
    normalisation). So ``"auto"`` normalises the total cost, as it does without a known
    cost, and the predicted part keeps a bounded scale relative to the known one:
    Identity's step on a loss linear in y then cannot grow it without end. ``known``
    given to a call (a per-instance known cost on the outputs, ``(*batch, *cost_shape)``,
    the spec's sense) is added to the spec's own.
    """

    def __init__(self, projection: Transform, known: np.ndarray | None) -> None:
        self.projection = projection
        self._known = None if known is None else torch.as_tensor(known, dtype=torch.float64)
        self._on: dict[tuple[torch.device, torch.dtype], Tensor] = {}

    def _spec_known(self, like: Tensor) -> Tensor | None:
        if self._known is None:
            return None
        key = (like.device, like.dtype)
        if key not in self._on:
            self._on[key] = self._known.to(like)
        return self._on[key]

    def __call__(self, w: Tensor, known: Tensor | None = None) -> Tensor:
        shift = self._spec_known(w)
        if known is not None:
            shift = known if shift is None else shift + known
        if shift is None:
            return self.projection(w)
        return self.projection(w + shift) - shift


def make_projection(projection: str | Transform, spec: Spec) -> Transform:
    """The projection for a layer on ``spec``, acting on costs of shape ``(..., *cost_shape)``.

    A callable is used as it is and receives costs of shape ``(..., *cost_shape)``.

    With a known cost (``ILP.known_cost``, not all zero) the objective is
    ``<w, y> + <known_cost, x>``, and rescaling or shifting ``w`` alone changes its argmin.
    The rule for ``"auto"`` (and ``"auto-exact"``) there, announced by one ``UserWarning``
    when the layer is built:

    - a known cost on the outputs only (``k``): the hull projection and normalisation
      act on the total cost, ``P(w) = normalize(plane(w + k)) - k`` (`AroundKnown`); the
      solution is that of ``w`` and the prediction's scale stays bounded, as without a
      known cost (the same as adding ``k`` to ``w`` by hand before a layer without one).
      Under a loss linear in y Identity's gradient then does not depend on the
      solution: it turns ``w + k`` towards the true total cost, and no projection that
      keeps the solution makes it learn the decisions; the warning says to train on
      the optimal decisions or with ``SPOPlusLoss``;
    - a known cost on the auxiliaries: the hull projection alone (a rescaled ``w`` would
      change the solution), so nothing bounds the prediction's scale, and Identity under
      a loss linear in y does not learn: train with ``SPOPlusLoss`` (``combolayer train``
      picks ``loss: spo+`` for such a spec).

    ``"norm"``, ``"std"`` and ``"mean"`` raise ``ValueError`` with a known cost
    (docs/projections.md says why); ``"mean"`` and ``"std"`` also where ``sum(y)`` differs
    between solutions (a knapsack, paths of different lengths), since shifting ``w``
    then changes the solution.
    """
    if callable(projection):
        return projection
    if not isinstance(projection, str):
        raise InputTypeError(
            f"projection must be a name, one of {[*HULL_PROJECTIONS, *PROJECTIONS]}, or a "
            f"callable Tensor -> Tensor, got {type(projection).__name__} (for a matrix M: "
            "projection=lambda w: w @ M.T)")
    known = has_known_cost(spec)
    if known and projection in SCALING_PROJECTIONS:
        raise InputError(
            f"projection {projection!r} changes the solution of {spec.label}: it has a known "
            f"cost, so the objective <w, y> + <known_cost, x> is not invariant to "
            f"{SCALING_PROJECTIONS[projection]} w; use 'auto' or 'plane' (the hull "
            "projection, which keeps the solution), 'none', or a callable")
    if projection in HULL_PROJECTIONS:
        hull = analyze(spec, exact=projection.endswith("-exact"))
        if projection == "plane":
            return hull.transform()
        # plane then normalise, as one autograd node (docs/measurements/overhead.md)
        plane = project_plane(torch.tensor(hull.normals, dtype=torch.float64))
        auto = on_cost_shape(normalized(plane), spec.cost_shape)
        # what "auto" is for a call whose known cost weighs the auxiliaries
        # (`project_with_known`): the hull projection alone, as for such a spec
        auto.hull_alone = hull.transform()  # type: ignore[attr-defined]
        if not known:
            return auto
        on_outputs = known_on_outputs(spec)
        if on_outputs is not None:
            warnings.warn(
                f"projection {projection!r} on {spec.label}, which has a known cost on its "
                "outputs: the layer normalises the total cost w + known_cost (the solution "
                "is unchanged, the prediction's scale stays bounded); under a loss linear "
                "in y, Identity then turns w + known_cost towards the true total cost, "
                "which takes larger learning rates than SPO+ (docs/core.md, 'What Identity "
                "learns'); to learn the decisions directly, train on the optimal ones (a "
                "Hamming loss) or with cl.losses.SPOPlusLoss", UserWarning, stacklevel=4)
            around = AroundKnown(auto, on_outputs)
            around.hull_alone = auto.hull_alone  # type: ignore[attr-defined]
            return around
        warnings.warn(
            f"projection {projection!r} on {spec.label}, which has a known cost on its "
            "auxiliaries: the layer applies the hull projection alone (rescaling w would "
            "change the solution), so nothing bounds the prediction's scale and a loss "
            "linear in y (regret) does not train Identity; train with "
            "cl.losses.SPOPlusLoss instead", UserWarning, stacklevel=4)
        return hull.transform()
    if projection not in PROJECTIONS:
        raise InputError(
            f"unknown projection {projection!r}: expected one of "
            f"{[*HULL_PROJECTIONS, *PROJECTIONS]} or a callable Tensor -> Tensor"
        )
    if projection in ("mean", "std") and not _sum_is_fixed(spec):
        raise InputError(
            f"projection {projection!r} changes the solution of {spec.label}: subtracting "
            "the mean of w changes <w, y> by the mean times sum(y), and sum(y) is not the "
            "same for all its solutions (or could not be shown to be); use 'auto' or 'plane' "
            "(the hull projection, which keeps the solution), 'norm', 'none', or a callable")
    return on_cost_shape(PROJECTIONS[projection], spec.cost_shape)


def _sum_is_fixed(spec: Spec) -> bool:
    """Whether ``sum(y)`` is the same for every solution of ``spec``, so that shifting
    ``w`` by a constant keeps its argmin (decided once per spec, `_sum_fixed`)."""
    return _sum_fixed(type(spec), spec.model_dump_json())


@lru_cache(maxsize=128)
def _sum_fixed(cls: type, spec_json: str) -> bool:
    """`_sum_is_fixed`, cached as `analyze` is (a layer is built again after a copy, or a
    new generator): the all-ones direction lies in the normal space of the LP
    relaxation's affine hull; it does not where two solutions have different sums
    (`_sums_differ`); failing both (a sum that only integrality fixes), the integer
    solutions' hull decides (`analyze`, exact)."""
    spec = cls.model_validate_json(spec_json)
    ones = np.ones(math.prod(spec.cost_shape))

    def in_normal_space(exact: bool) -> bool:
        normals = analyze(spec, exact=exact).normals
        return bool(np.abs(ones - normals.T @ (normals @ ones)).max()
                    < 1e-6 * math.sqrt(len(ones)))

    try:
        if in_normal_space(exact=False):
            return True
        return not _sums_differ(spec) and in_normal_space(exact=True)
    except (ValueError, ComboLayerError):  # the exact probe's solves: not shown fixed
        return False


def _sums_differ(spec: Spec) -> bool:
    """Whether the optima of a few positive costs (all ones, then seeded random ones) have
    different sums: a witness in one batched solve, where the exact hull takes about 2 N
    MIP solves (minutes for a 7 x 7 grid's paths, to refuse ``"mean"``)."""
    n = math.prod(spec.cost_shape)
    costs = np.vstack([np.ones(n), np.random.default_rng(0).uniform(0.5, 1.5, (7, n))])
    try:
        y = make_solver(spec).solve(costs.reshape(-1, *spec.cost_shape))
    except (ValueError, ComboLayerError):  # unbounded, say: no witness
        return False
    sums = y.reshape(len(costs), n).sum(axis=1)
    return bool(np.ptp(sums) > 1e-6 * max(1.0, float(np.abs(sums).max())))


def project_with_known(projection: Transform, name: Any, spec: Spec, w: Tensor,
                       known: Tensor, check: bool = True) -> Tensor:
    """The projection ``projection`` (built for ``spec`` from ``name``) of ``w`` with a
    per-call known cost ``known`` (``(*batch, num_vars)``, the spec's sense): it acts on
    the total cost on the outputs, ``P(w + k) - k`` (`AroundKnown`), so the solution is
    that of ``w`` and ``"auto"`` normalises the whole cost, as with a spec-level known
    cost. A per-call known cost on the auxiliaries keeps the scale of ``w`` meaningful:
    ``"auto"`` is then the hull projection alone for the instances whose known cost
    weighs an auxiliary, as for a spec with a known cost there (chosen on the values, in
    torch: a traced graph keeps it), and ``"norm"``, ``"std"``
    and ``"mean"`` raise ``ValueError`` (`check_known_on_aux`; ``check=False`` leaves that
    to the caller, which knows from `known_rescales` whether it must)."""
    n = math.prod(spec.cost_shape)
    on_outputs = known[..., :n].reshape(w.shape)
    if check and known_rescales(name):
        check_known_on_aux(spec, known)
    if isinstance(projection, AroundKnown):
        total = projection(w, on_outputs)
    else:
        total = projection(w + on_outputs) - on_outputs
    hull = getattr(projection, "hull_alone", None)
    if hull is None or known.shape[-1] == n:  # no auxiliaries: nothing to weigh there
        return total
    # per instance: one whose known cost weighs no auxiliary is normalised as without
    weighs = (known[..., n:] != 0).any(-1)
    return torch.where(weighs.reshape(*weighs.shape, *(1,) * len(spec.cost_shape)),
                       hull(w), total)


def known_rescales(name: Any) -> bool:
    """Whether the projection named ``name`` rescales or shifts ``w`` whatever the known
    cost, which a per-call known cost on the auxiliaries forbids (``"auto"`` turns to the
    hull projection alone instead: `project_with_known`)."""
    return name in SCALING_PROJECTIONS


def check_known_on_aux(spec: Spec, known: Tensor) -> None:
    """``ValueError`` when the per-call known cost ``known`` weighs an auxiliary of
    ``spec``, under a projection that `known_rescales`."""
    if bool((known[..., math.prod(spec.cost_shape):] != 0).any()):
        raise InputError(
            f"the projection rescales w, but the per-call known_cost of {spec.label} weighs "
            "its auxiliaries, so the scale of w changes the solution: use "
            "projection='plane' (the hull projection alone) or 'none'")
