"""``ComboLayer``: a combinatorial solver as a differentiable PyTorch module."""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..analysis.hull import analyze
from ..backends.clip import ClipNegatives
from ..backends.config import BackendConfig
from ..backends.registry import check_solves, in_place_of_spec, make_solver
from ..backends.rows import check_rows
from ..backends.solver import (
    HALF_PRECISION,
    Recorder,
    Solver,
    cast_solutions,
    check_costs,
    check_known_cost,
)
from ..errors import InputError, InputTypeError
from ..estimators import Estimator, resolve_method
from ..estimators.base import ProjectedSolve, aux_of_output, row_gradient_methods
from ..func_transforms import check_not_vmapped, transforms_active
from ..pool import CachedSolver, SolutionPool, cache_setting
from ..specs.base import Spec, is_boolean
from ..specs.load import load_spec, read_mapping, spec_from_text
from ..specs.paths import config_base, resolve_path
from ..transforms.noise import SignNoise
from ..transforms.projection import NORM_EPS, Normalized, Transform
from .ops import CompiledSolve, check_floor, draw_noise, noise_slot
from .projection import (
    HULL_PROJECTIONS,
    has_known_cost,
    known_rescales,
    make_projection,
    project_with_known,
)
from .schedules import Schedule, make_schedule

logger = logging.getLogger(__name__)


def as_noise(noise: float | Any | None) -> Any:
    """A layer's training-mode noise from what `ComboLayer.set_noise` takes: `SignNoise`
    for a number ``alpha > 0``, None for 0 or None, or an object with ``sample``."""
    if isinstance(noise, Tensor) and noise.numel() == 1:
        noise = noise.item()
    if is_boolean(noise):  # float(True) would be an alpha of 1
        raise InputError(f"noise must be a number alpha >= 0, got the boolean {noise!r}")
    if noise is None or isinstance(noise, (int, float, np.number)):
        alpha = float(noise or 0.0)
        if not alpha >= 0 or alpha == float("inf"):
            raise InputError(f"noise must be a finite alpha >= 0, got {noise}")
        return SignNoise(alpha) if alpha > 0 else None
    if not callable(getattr(noise, "sample", None)):
        raise InputError(f"noise must be a number alpha >= 0, None, or an object with "
                         f"sample(shape, generator=...) (e.g. cl.SumOfGamma(k=10, tau=10)); "
                         f"got {noise!r}")
    return noise


class ComboLayer(nn.Module):
    """``y = argmin_{y in Y} <P(w + eps) + xi, y>`` (or argmax) with a gradient estimator.

    Args:
        spec: the problem (a spec, a dict, or a YAML/JSON file or string).
        method: the gradient estimator: a name (``"identity"``, ``"blackbox"``,
            ...), a dict ``{"name": ..., **params}``, or an estimator object.
        projection: the cost projection P, applied on the forward pass and
            differentiated through: ``"auto"``, ``"auto-exact"`` (the hull of
            the integer solutions, a few MIP solves at build), ``"plane"``,
            ``"mean"``, ``"norm"``, ``"std"``, ``"none"`` or a callable on costs of
            shape ``(..., *cost_shape)``.
        noise: ``alpha`` for xi ~ U({-alpha/2, alpha/2}^N) in training mode, or
            any object with ``sample(shape, generator=...)``. Change it later
            with `set_noise`.
        sample_noise: sampling noise ``eps``, added to ``w`` *before* the
            projection, so the layer samples ``y(P(w + eps))``, perturb-and-MAP
            as in the paper's discrete samplers (e.g. [`SumOfGamma`][combolayer.SumOfGamma] for
            top-k, Gumbel for one-hot): an object with ``sample(shape,
            generator=...)``, or None. Drawn in training mode and by
            `sample`; eval-mode ``forward`` never draws it.
        noise_schedule: the noise level per epoch, applied by `set_epoch`:
            a callable ``epoch -> alpha``, or a name from
            `combolayer.layer.schedules` (``"constant"``, ``"step_off"``,
            ``"linear_decay"``) or a dict with ``name`` and its arguments
            (``{"name": "step_off", "until": 10}``), starting at ``noise``.
        backend: a backend name, a `BackendConfig`, a dict, a compiled
            [`Solver`][combolayer.backends.Solver] (``cl.make_solver(spec, ...)``, as
            the losses take; it may also stand in place of ``spec``), or a PyEPO
            model wrapped by `combolayer.backends.from_pyepo` (which may also stand
            in place of ``spec``: the spec is then read from the model).
        generator: the ``torch.Generator`` the layer's ``noise`` and the
            ``solve_ratio`` draws come from (seed it to reproduce a run). An
            estimator that samples (``cl.Perturbed``, ``cl.IMLE``, ``cl.AIMLE``)
            draws from its own ``generator=`` argument, or from torch's global
            generator when given by name (``torch.manual_seed`` reproduces it).
        solve_ratio: PyEPO's solution cache (Mulamba et al. 2021). In training
            mode (and `sample`) each instance is solved exactly with this
            probability, otherwise it gets the cheapest solution, under its cost,
            in `pool`, the distinct solutions solved so far. This trades
            exactness for time: the forward is then no longer the exact argmin
            (and an estimator's extra solves, Blackbox's second one, perturbed
            samples, go through the cache too). Eval mode always solves exactly.
            ``1.0`` (default) builds no cache at all.
        pool: the `combolayer.pool.SolutionPool` the cache
            uses; pass one to share it with a loss or to bound it
            (``SolutionPool(N, max_size=...)``, default 10 000 solutions). Seed
            it with the training set's true solutions, as PyEPO does with its
            dataset: ``layer.pool.seed(y_train)``. An empty pool solves exactly.
        on_infeasible: what an instance does that per-call rows ``A x <= b``
            (``layer(w, A=A, b=b)``) leave infeasible: ``"raise"``
            (`InfeasibleError`, the default) or ``"flag"`` (its solution is zeros,
            one warning per call with the count, `last_infeasible` says which).
            Sets ``BackendConfig.on_infeasible``.

    Everything is compiled here, once; ``forward`` only checks, transforms and
    dispatches. Costs and solutions have shape ``(*batch, *spec.cost_shape)``.

    Raises:
        SpecError: ``spec`` is invalid.
        BackendUnavailable: the backend's package is missing or it cannot solve
            ``spec``; the message names backends that can.
        ValueError: an unknown method or projection, or ``noise < 0``.

    Examples:
        >>> import torch, combolayer as cl
        >>> layer = cl.ComboLayer(cl.problems.TopK(n=4, k=2), projection="auto")
        >>> w = torch.tensor([[0.1, 0.9, 0.5, 0.2]], requires_grad=True)
        >>> y = layer(w)
        >>> y.tolist()
        [[0.0, 1.0, 1.0, 0.0]]
        >>> (y * torch.tensor([1.0, 0, 0, 0])).sum().backward()  # w.grad: the identity gradient
    """

    def __init__(
        self,
        spec: Spec | str | os.PathLike | dict,
        method: str | dict | Estimator = "identity",
        projection: str | Transform = "auto",
        noise: float | Any = 0.0,
        backend: str | BackendConfig | dict = "auto",
        solve_ratio: float = 1.0,
        *,
        generator: torch.Generator | None = None,
        noise_schedule: str | dict | Schedule | None = None,
        sample_noise: Any = None,
        pool: SolutionPool | None = None,
        on_infeasible: str | None = None,
    ) -> None:
        super().__init__()
        spec, backend = in_place_of_spec(spec, backend)  # a solver or wrapped model
        self.solve_ratio = solve_ratio  # checked on every setting (`cache_setting`)
        self.spec = load_spec(spec)
        if isinstance(backend, Solver):
            # A compiled solver, as the losses take: used as is, and copied as its
            # recipe (Solver.__reduce__) when the layer is pickled or copied.
            check_solves(backend, self.spec, "the layer's spec")
            self.__dict__["_solver"] = backend
            config = backend.config
            self.backend_config = (config.model_copy(update={"name": backend.backend})
                                   if isinstance(config, BackendConfig)
                                   and config.name in ("auto", "race") else config)
        else:
            self.backend_config = BackendConfig.load(backend)
        if on_infeasible is not None:
            if on_infeasible not in ("raise", "flag"):
                raise InputError(f"on_infeasible must be 'raise' or 'flag', got {on_infeasible!r}")
            if not isinstance(self.backend_config, BackendConfig):
                raise InputError("on_infeasible needs a backend given by name or BackendConfig, "
                                 f"got {type(backend).__name__}: set it on that solver's config")
            self.__dict__.pop("_solver", None)
            self.backend_config = self.backend_config.model_copy(
                update={"on_infeasible": on_infeasible})
        self.method = method  # resolved on every setting (__setattr__)
        self._projection_arg = projection
        self._projection_name = (
            projection if isinstance(projection, str) else getattr(projection, "__name__", "custom")
        )
        self.set_noise(noise)
        if noise_schedule is not None and not isinstance(self.noise, (SignNoise, type(None))):
            raise InputError(
                f"noise_schedule sets a noise level alpha per epoch, but noise={noise!r} has "
                "none (it would be dropped at the first set_epoch): pass noise as a number "
                "alpha, or leave out the schedule")
        self.noise_schedule = (None if noise_schedule is None else
                               make_schedule(noise_schedule, self.noise_level))
        self.generator = generator
        if sample_noise is not None and not callable(getattr(sample_noise, "sample", None)):
            raise InputError(
                f"sample_noise must be None or an object with sample(shape, generator=...), "
                f"e.g. cl.SumOfGamma(k=10, tau=10); got {sample_noise!r}"
            )
        self.sample_noise = sample_noise
        #: The solution cache's pool, bound to this spec (pickled and deep-copied with the
        #: layer; a pool of another problem is refused).
        self.pool = pool  # a SolutionPool for the spec (`cache_setting`)
        self._compile()
        logger.debug("ComboLayer(%s): backend %r chosen", self.spec.label, self.solver.backend)
        logger.info("ComboLayer(%s): backend %r: %s", self.spec.label, self.solver.backend,
                    self.backend_reason)

    @torch.inference_mode(False)  # tensors that calls tracked by autograd may save
    def _compile(self) -> _Compiled:
        """Build the solver (where none was given), projection and differentiable solve.
        Done in ``__init__``, and again on first use after unpickling or deep-copying,
        which keep the solver (as its recipe, `Solver.__reduce__`) and leave what is
        built around it behind (closures, compiled operators)."""
        solver = self.__dict__.get("_solver")
        if solver is None:
            solver = self.__dict__["_solver"] = make_solver(self.spec, self.backend_config)
        projection = make_projection(self._projection_arg, self.spec)
        # Problems that need non-negative costs (shortest paths on graphs with
        # cycles): the solver must be able to take what the layer gives it. Under
        # negative_costs="clip" the layer clips the user's cost itself, before the
        # projection (whose negative entries the solver would otherwise clip).
        floor = self.spec.nonnegative_costs()
        cost_floor = self.spec.cost_floor()
        clip_lower = None
        if floor is None and getattr(cost_floor, "clip", False):
            floor, clip_lower = cost_floor.checked, torch.as_tensor(cost_floor.lower)
        floor = None if floor is None else torch.as_tensor(floor)
        hull = floor is not None and self._projection_arg in HULL_PROJECTIONS
        exact = hull and self._projection_arg.endswith("-exact")
        normals = torch.tensor(analyze(self.spec, exact=exact).normals) if hull else None
        if floor is not None and self._projection_arg in ("mean", "std"):
            # their shift is along the all-ones direction, on which every solution has
            # the same objective (make_projection refuses them where it is not): the hull
            # offset undoes it
            n = self.spec.num_outputs
            normals = torch.full((1, n), n ** -0.5, dtype=torch.float64)
        # A normalized projection given by name (a callable one sees costs of shape
        # (..., *cost_shape)) on a problem that takes costs of any sign (no hull
        # offset): the estimator may fold it into one autograd node (Identity does).
        flat = getattr(projection, "flat", projection)
        fusable = (floor is None and isinstance(self._projection_arg, str)
                   and isinstance(flat, Normalized))
        build_projected = getattr(self.method, "build_projected", None)
        whole = getattr(self.method, "compiles_whole", False)
        last = threading.local()
        flag = functools.partial(_flag_infeasible, self.spec.label, last)

        def solves(on: Solver) -> _Solves:
            base = on if floor is None else _ClipPerturbations(on, floor)
            return _Solves(base, self.method.build(base),
                           fused=build_projected(on, flat) if fusable and build_projected
                           else None,
                           op=CompiledSolve(self.method, base, floor, flag) if whole else None)

        compiled = _Compiled(
            solver=solver,
            projection=projection,
            floor=floor,
            normals=normals,
            clip_lower=clip_lower,
            precise=has_known_cost(self.spec),
            user_projection=not isinstance(self._projection_arg, str),
            known_rescales=known_rescales(self._projection_arg),
            exact=solves(solver),
            cached=None if self.solve_ratio >= 1.0 else solves(
                CachedSolver(solver, self.solve_ratio, self.pool, self.generator)),
            noise_slot=noise_slot(self), last=last, flag=flag)
        self.__dict__["_compiled"] = compiled
        return compiled

    @property
    def compiled(self) -> _Compiled:
        compiled = self.__dict__.get("_compiled")
        if compiled is None:  # a copy's first use: threads that call it at once build it once
            with _BUILDING:
                compiled = self.__dict__.get("_compiled") or self._compile()
        return compiled

    @property
    def solver(self) -> Solver:
        """The compiled solver (``layer.solver.solve(costs)`` solves without gradients)."""
        return self.compiled.solver

    @property
    def backend_reason(self) -> str:
        """Why `solver`'s backend solves this layer's problem: named by the caller, its
        place in ``"auto"``'s ranking, or the race it won on this run's costs, with the
        times (`combolayer.backends.race`)."""
        return self.solver.backend_reason

    @property
    def projection(self) -> Transform:
        """The cost projection P, on costs of shape ``(..., *cost_shape)``."""
        return self.compiled.projection

    def __getstate__(self) -> dict:
        # Pickling, torch.save and deepcopy keep the recipe: the solver copies as its own
        # (Solver.__reduce__); closures and compiled operators are built again.
        state = self.__dict__.copy()
        state.pop("_compiled", None)
        return state

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "method":
            value = resolve_method(value)
        elif name == "noise":
            value = as_noise(value)
        super().__setattr__(name, cache_setting(name, value, self.__dict__.get("spec")))
        # the solves are built with the method, and the solution cache with its
        # generator, ratio and pool: a new one is built into them too (an assigned method
        # went unused, and the cache kept drawing from the old generator)
        if (name in ("method", "generator", "solve_ratio", "pool")
                and "_compiled" in self.__dict__):
            self._compile()

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        # built now, not on first use: a first use inside torch.compile's trace would trace
        # the build (a lock, the hull analysis) and break the graph
        self._compile()

    @classmethod
    def from_config(cls, source: str | os.PathLike | dict) -> ComboLayer:
        """Build from a dict or YAML/JSON with keys problem, method, projection, noise, backend,
        noise_schedule, solve_ratio.

        A relative path in ``problem`` or ``backend`` is read next to the config file
        that names it (from the current directory for a dict or a YAML/JSON string), as
        in ``combolayer train``; a missing file's error shows the resolved path.

        Args:
            source: the config: a dict, a YAML/JSON file path or a YAML/JSON string.

        Raises:
            ValueError: ``problem`` is missing or a key is unknown.

        Examples:
            >>> layer = cl.ComboLayer.from_config(
            ...     {"problem": {"kind": "topk", "n": 5, "k": 2}, "method": "blackbox"})
        """
        config = dict(read_mapping(source, what="layer config"))
        known = {"problem", "method", "projection", "noise", "backend", "noise_schedule",
                 "solve_ratio", "on_infeasible"}
        unknown = set(config) - known
        if unknown or "problem" not in config:
            raise InputError(
                f"layer config needs 'problem' and may have {sorted(known - {'problem'})}; "
                f"got keys {sorted(config)}"
            )
        # One rule with ``combolayer train``: a relative path is read next to the file
        # that names it (the current directory for a dict or a string).
        base = config_base(source)
        origin = source if base is not None else None
        problem = resolve_path(config.pop("problem"), base, "problem", origin=origin)
        if isinstance(problem, dict) and not isinstance(source, dict):
            problem = spec_from_text(problem)  # written in text: the text size limits
        if "backend" in config:  # a backend config may be a YAML/JSON file too
            config["backend"] = resolve_path(config["backend"], base, "backend", origin=origin)
        return cls(problem, **config)

    def set_noise(self, noise: float | Any | None) -> None:
        """Set the training-mode noise: ``alpha`` for xi ~ U({-alpha/2, alpha/2}^N),
        a noise object with ``sample(shape, generator=...)``, or 0 / None for none.

        Eval mode never adds noise, whatever is set here (as ``layer.noise = ...`` does).
        """
        self.noise = noise

    def set_epoch(self, epoch: int) -> float:
        """Apply ``noise_schedule`` for ``epoch`` and return the noise level now in force
        (without a schedule the noise is left as it is)."""
        if self.noise_schedule is not None:
            self.set_noise(self.noise_schedule(epoch))
        return self.noise_level

    @property
    def noise_level(self) -> float:
        """The current margin noise ``alpha`` (0 when there is none)."""
        return float(getattr(self.noise, "alpha", 0.0)) if self.noise is not None else 0.0

    def _floored(self, costs: Tensor, w: Tensor, u: Tensor, xi: Tensor | None,
                 known: Tensor | None = None, check: bool = True) -> Tensor:
        """The solver's costs ``costs`` (``sign * (u + xi)``, ``u = P(w)``) for a problem
        that needs non-negative costs (`Spec.nonnegative_costs`), with the check that the
        user's cost is one it accepts.

        ``"plane"``, ``"auto"`` and ``"auto-exact"`` remove the components of ``w``
        along directions on which every solution has the same objective (``"mean"`` and
        ``"std"`` along the all-ones one), then ``"auto"`` scales by a positive factor:
        ``s * w`` has the argmin of ``P(w)`` and the signs of ``w``. The solver sees
        exactly ``s * w`` (plus the noise) while gradients flow through ``P(w)``
        unchanged, so a non-negative cost stays one that Dijkstra can take (a zero
        stays zero). With a per-call known cost ``known``, whose part on the outputs
        ``k`` the projection acts around (``P(w + k) - k``), it sees ``s * (w + k) - k``
        and adds ``k`` back: the total is checked. ``check=False`` leaves the check to the
        caller (the compiled solve's operator makes it).
        """
        sign = self.solver.sign
        k = None if known is None else known[..., : self.spec.num_outputs].reshape(w.shape)
        normals = self.compiled.normals
        if check:  # the total, scaled by s > 0 where normals remove a part
            check_floor(self.spec, self.compiled.floor,
                        sign * (u if normals is None else w) + (0 if k is None else sign * k))
        if normals is None:
            return costs
        with torch.no_grad():
            n = self.spec.num_outputs
            total = w if k is None else w + k
            flat = total.reshape(-1, n)
            basis = normals.to(dtype=w.dtype, device=w.device)
            kept = flat - (flat @ basis.T) @ basis
            projected = u if k is None else u + k
            scale = projected.reshape(-1, n).norm(dim=-1, keepdim=True) / (
                kept.norm(dim=-1, keepdim=True).clamp_min(NORM_EPS))
            exact = sign * (scale * flat).reshape(w.shape)
            if k is not None:
                exact = exact - sign * k
            if xi is not None:
                exact = exact + sign * xi
        # the value exactly, the gradient through P(w)
        return costs - costs.detach() + exact

    def extra_repr(self) -> str:
        config = self.solver.config
        noise = self.noise if self.noise is not None and not hasattr(self.noise, "alpha") \
            else self.noise_level
        return (
            f"{self.spec.label}, method={self.method}, projection={self._projection_name!r}, "
            f"noise={noise}, backend={self.solver.backend!r}, "
            f"time_limit={config.time_limit}, workers={config.workers}"
            + (f", solve_ratio={self.solve_ratio}" if self.solve_ratio < 1.0 else "")
            + f", backend_reason={self.backend_reason!r}"
        )

    def forward(self, w: Tensor, target: Tensor | None = None, return_aux: bool = False, *,
                A: Tensor | None = None, b: Tensor | None = None,
                known_cost: Tensor | None = None) -> Any:
        """Solve for costs ``w``; the backward pass is the estimator's.

        Args:
            w: costs of shape ``(*batch, *cost_shape)``, any float dtype and device.
            target: the true solutions, same shape, for estimators that use one
                (the informed margin); ignored by the others.
            return_aux: also return the auxiliary variables (`combolayer.ILP`'s
                ``num_aux``) of the solutions, without a gradient.
            A: per-call rows ``A x <= b`` added to the spec's constraints for this
                call: ``(*batch, m, num_vars)`` or ``(m, num_vars)`` (``num_vars`` = N
                outputs + ``num_aux``).
            b: their right-hand sides, ``(*batch, m)`` or ``(m,)``. Without a gradient
                they are per-instance data for any method; with one, the method must
                give them one (``row_gradients``: ``"comboptnet"``, ``"score_function"``,
                ``"qptl"``). An instance they leave infeasible raises, or under
                ``on_infeasible="flag"`` is zeros, flagged in `last_infeasible`.
            known_cost: a known cost for this call, added to the spec's own:
                ``(*batch, num_vars)`` or ``(num_vars,)``, in the spec's sense, no
                gradient. The projection acts on the total cost (`project_with_known`).

        Returns:
            The optimal solutions, with the shape, dtype and device of ``w``; with
            ``return_aux``, ``(y, aux)``, ``aux`` of shape ``(*batch, num_aux)`` on
            ``y``'s device and dtype (for an estimator whose output averages several
            solves, the perturbed ones, the same average of their auxiliaries).

        Raises:
            ValueError: ``w`` (or ``target``) has NaN/inf or a trailing shape other
                than ``cost_shape``; the message names expected and got.
            InfeasibleError: the problem has no feasible solution.
            SolverError: the solver failed (time limit without a solution, a
                crashed worker, ...).
        """
        if return_aux and not self._traced_whole():
            return self._with_aux(w, target, self.training, A, b, known_cost)
        return self._forward(w, target, self.training, A, b, known_cost, keep_aux=return_aux)

    def _traced_whole(self) -> bool:
        """Whether torch.compile is tracing a layer whose solve is one custom operator
        (`Estimator.compiles_whole`): per-call inputs and ``return_aux`` go through it too."""
        return torch.compiler.is_compiling() and self.compiled.exact.op is not None

    @torch.compiler.disable  # the estimator is built for this call: not traceable
    def _with_aux(self, *args: Any) -> tuple[Tensor, Tensor]:
        """``_forward(*args)`` and the auxiliaries of the solves it made, as the estimator
        says they go with its output (``output_aux``; for a method without one, the
        first solve's, averaged over each instance's solutions when it solved several per
        instance: `first_solve_aux`). Run eagerly under torch.compile (a graph break) for an
        estimator whose solve is no custom operator."""
        recorded = self._recording(keep_aux=True)
        try:
            y = self._forward(*args, recorded=recorded)
            box = [aux for recorder in recorded[1] for aux in recorder.aux]
        finally:
            _end_call(recorded)
        return y, aux_of_output(self.method, self.solver, y, box)

    @torch.compiler.disable  # may build the estimator: not traceable
    def _recording(self, keep_aux: bool) -> tuple[_Compiled, tuple[_CallRecorder, ...]]:
        """The layer's solves built on `Recorder`s of its solvers (the exact one, and the
        cached one with ``solve_ratio < 1``), opened for one call (`_end_call` ends it): they
        keep what that call's solves produce besides the solutions, the instances per-call
        rows left infeasible, and with ``keep_aux`` the auxiliaries. Built once per thread
        (building an estimator costs more than a small batch's solve); a call made while
        this thread's are open (from inside one) gets its own."""
        compiled = self.compiled
        kept = compiled.recordings.__dict__
        recorded = kept.get(keep_aux)
        if recorded is None or recorded[1][0].owner is not None:
            exact, recorder = compiled.exact.recorded(self.method, keep_aux)
            recorders: tuple[_CallRecorder, ...] = (recorder,)
            cached = None
            if compiled.cached is not None:
                cached, recorder = compiled.cached.recorded(self.method, keep_aux)
                recorders += (recorder,)
            fresh = dataclasses.replace(compiled, exact=exact, cached=cached), recorders
            kept.setdefault(keep_aux, fresh)
            recorded = fresh
        for recorder in recorded[1]:
            recorder.begin_call()
        return recorded

    def sample(self, w: Tensor, target: Tensor | None = None, *, A: Tensor | None = None,
               b: Tensor | None = None, known_cost: Tensor | None = None) -> Tensor:
        """A sampled forward in either mode: ``y(P(w + eps))`` with ``eps`` drawn
        from ``sample_noise``, and the estimator run as in training (so
        [`IMLE`][combolayer.IMLE] and `Perturbed` draw their own noise too). The margin
        ``noise`` is a training device, not part of the sampler: it is added only
        in training mode, as in ``forward``. Differentiable like ``forward``; use
        it for a test-time ELBO, which is an expectation over samples.
        """
        return self._forward(w, target, True, A, b, known_cost)

    @property
    def last_infeasible(self) -> Tensor | None:
        """The last call with per-call rows under ``on_infeasible="flag"``: a bool tensor
        of that call's batch shape, True for the instances the rows left without a
        feasible solution (their output is zeros). A call without rows leaves it as it
        was; None before the first call with rows. Per thread."""
        return getattr(self.compiled.last, "infeasible", None)

    def _rows(self, w: Tensor, A: Any, b: Any, values: bool = True
              ) -> tuple[Tensor, Tensor, bool]:
        """Per-call rows checked once (their values too, unless the compiled solve checks
        them: ``values``), as tensors on ``w``'s device broadcast to its batch (autograd
        kept), and whether they need a gradient. Their dtype is ``w``'s unless theirs is
        more precise (float64 rows with float32 costs; integer rows are made float64):
        the solver must meet the rows as given."""
        batch = tuple(w.shape[: w.dim() - len(self.spec.cost_shape)])
        check_rows(self.spec.label, self.compiled.solver.num_vars, batch, A, b, values=values)
        A, b = torch.as_tensor(A), torch.as_tensor(b)
        dtype = w.dtype
        for value in (A, b):
            dtype = torch.promote_types(dtype, value.dtype if value.is_floating_point()
                                        else torch.float64)
        A = A.to(device=w.device, dtype=dtype)
        b = b.to(device=w.device, dtype=dtype)
        rows_grad = torch.is_grad_enabled() and (A.requires_grad or b.requires_grad)
        if rows_grad and not getattr(self.method, "row_gradients", False):
            raise InputError(
                f"A or b requires a gradient, but method {self.method} gives none to "
                f"per-call rows: use one of {row_gradient_methods()}, or pass A.detach() "
                "and b.detach() to use them as data")
        m, n = A.shape[-2], A.shape[-1]
        return A.expand(*batch, m, n), b.expand(*batch, m), rows_grad

    def _forward(self, w: Tensor, target: Tensor | None, sampling: bool,
                 A: Any = None, b: Any = None, known_cost: Any = None,
                 recorded: tuple[_Compiled, tuple[Recorder, ...]] | None = None,
                 keep_aux: bool = False) -> Any:
        """The forward pass; ``recorded``, the layer's solves built on `Recorder`s for this
        call (`_recording`), is used in their place. A call with per-call rows records its
        own solves too, to hear which instances they left infeasible. ``keep_aux`` (while
        traced whole only: `_traced_whole`) returns ``(y, aux)``."""
        if (_any_autocast() and isinstance(w, Tensor)
                and torch.is_autocast_enabled(w.device.type)):
            # the layer works in w's dtype (half in float32): autocast's bfloat16
            # matmuls in the projection tied costs, and the solver broke the ties wrongly
            with torch.autocast(w.device.type, enabled=False):
                return self._forward(w, target, sampling, A, b, known_cost, recorded,
                                     keep_aux)
        # traced by torch.compile: no clock, no logging (the graph keeps neither); a solve
        # that is one custom operator takes the call's own inputs and checks their values
        compiling = torch.compiler.is_compiling()
        whole = compiling and self._traced_whole()
        if recorded is None and not whole and (A is not None or b is not None):
            recorded = self._recording(keep_aux=False)
            try:
                return self._forward(w, target, sampling, A, b, known_cost, recorded)
            finally:
                _end_call(recorded)
        transformed = transforms_active()  # torch.func's (one C call, read twice)
        if transformed:  # vmap refused here, not deep in a solve
            check_not_vmapped(w, target, A, b, known_cost)
        if not isinstance(w, Tensor):
            if not isinstance(w, np.ndarray):
                raise InputTypeError(f"w must be a torch.Tensor (or a numpy array), got "
                                f"{type(w).__name__}")
            w = torch.from_numpy(w)
        if not w.is_floating_point():
            raise InputTypeError(f"w must be a floating-point tensor, got {w.dtype}: "
                                 "pass w.float()")
        check_costs(self.spec, w, "w")
        if target is not None:
            target = torch.as_tensor(target, device=w.device)
            if not target.is_floating_point():  # a 0/1 solution as booleans or integers
                target = target.to(w.dtype)
            check_costs(self.spec, target, "target")
            if not _broadcasts_to(target.shape, w.shape):
                raise InputError(f"target of shape {tuple(target.shape)} does not broadcast "
                                 f"to w's shape {tuple(w.shape)}: pass one target per instance")
        compiled = self.compiled if recorded is None else recorded[0]
        dtype = w.dtype
        # the answer comes back in w's dtype: a known cost is counted in float64, and
        # half-precision costs are projected in float32 (in their own, costs 1 apart
        # near 1500 tied after the projection and the solver broke the tie wrongly)
        upcast = torch.float64 if compiled.precise or known_cost is not None else (
            torch.float32 if dtype in HALF_PRECISION else None)
        if upcast is not None and dtype != upcast:
            w = w.to(upcast)
        else:
            upcast = None
        rows_grad = False
        if A is not None or b is not None:
            A, b, rows_grad = self._rows(w, A, b, values=not whole)
        known = None
        if known_cost is not None:  # checked once here, then carried as a tensor
            batch = tuple(w.shape[: w.dim() - len(self.spec.cost_shape)])
            known = check_known_cost(self.spec.label, self.solver.num_vars, batch,
                                     known_cost, w.detach(), values=not whole)
        if compiled.clip_lower is not None:
            w = _clipped(w, compiled.clip_lower, compiled.solver.sign, known)
        if sampling and self.sample_noise is not None:
            # Before the projection: the paper's samplers perturb the logits.
            w = w + draw_noise(self, compiled.noise_slot, w, sample=True)
        noise = self.noise if self.training else None
        debug = not compiling and logger.isEnabledFor(logging.DEBUG)
        start = time.perf_counter() if debug else 0.0
        xi = None if noise is None else draw_noise(self, compiled.noise_slot, w, sample=False)
        # the solution cache's solves in training mode and for ``sample``
        solves = (compiled.cached if compiled.cached is not None
                  and (self.training or sampling) else compiled.exact)
        plain = A is None and known is None
        if whole:
            out = self._solve_op(compiled, solves.op, w, xi, target, self.training or sampling,
                                 A, b, rows_grad, known, keep_aux)
            return cast_solutions(compiled.solver, out, dtype) if upcast is not None else out
        if solves.fused is not None and plain:
            # the node's C-level apply where no functorch transform runs: one frame less
            y = (solves.fused if transformed else solves.fused_direct)(w, xi)
        else:
            projected = u = (compiled.projection(w) if known is None else
                             project_with_known(compiled.projection, self._projection_arg,
                                                self.spec, w, known))
            if compiled.user_projection:
                check_costs(self.spec, projected, "w after projection")
            if xi is not None:
                u = u + xi
            # The objective sense, folded in once (a min problem skips the multiply).
            costs = u if compiled.solver.sign == 1.0 else -u
            if compiled.floor is not None:
                costs = self._floored(costs, w, projected, xi, known)
            solve = solves.solve
            if compiling:  # a solve that is no custom operator runs eagerly: a graph break
                solve = functools.partial(_eagerly, solve)
            needs_grad = torch.is_grad_enabled() and (costs.requires_grad or rows_grad)
            target = None if target is None else target.to(costs)
            # the known cost in minimisation form, only when given (a custom estimator's
            # solve need not take it)
            extra = {} if known is None else {"known": compiled.solver.sign * known}
            if A is None:
                y = solve(costs, target=target, needs_grad=needs_grad,
                          training=self.training or sampling, **extra)
            else:
                y = solve(costs, target=target, needs_grad=needs_grad,
                          training=self.training or sampling, A=A, b=b, **extra)
                compiled.flag({entry for recorder in recorded[1]
                               for entry in recorder.infeasible}, A)
        if debug:
            logger.debug("%s: batch of %d solved on %r in %.4f s", self.spec.label,
                         y.numel() // self.spec.num_outputs, compiled.solver.backend,
                         time.perf_counter() - start)
        return cast_solutions(compiled.solver, y, dtype) if upcast is not None else y

    def _solve_op(self, compiled: _Compiled, op: CompiledSolve, w: Tensor,
                  xi: Tensor | None, target: Tensor | None, training: bool,
                  A: Tensor | None, b: Tensor | None, rows_grad: bool,
                  known: Tensor | None, keep_aux: bool) -> Any:
        """The forward as torch.compile traces it: the projection and the cost floor
        (`_floored`) in torch, then the solve as one custom operator (`combolayer.layer.ops`), which
        checks the values that `check_costs`, `check_rows` and `check_known_cost` leave
        to it while tracing, and runs the estimator's forward as eager mode does (with
        ``target``, ``training``, the per-call rows and known cost)."""
        if known is None:
            projected = compiled.projection(w)
        else:
            projected = project_with_known(compiled.projection, self._projection_arg,
                                           self.spec, w, known, check=False)
        sign = compiled.solver.sign
        costs = projected if sign == 1.0 else -projected
        if compiled.floor is not None:
            costs = self._floored(costs, w, projected, None, known, check=False)
        needs_grad = torch.is_grad_enabled() and (costs.requires_grad or rows_grad)
        return op(costs, None if xi is None else sign * xi,
                  None if target is None else target.to(costs), training, needs_grad,
                  A=A, b=b, known=None if known is None else sign * known, w=w.detach(),
                  A_grad=rows_grad and A.requires_grad, b_grad=rows_grad and b.requires_grad,
                  keep_aux=keep_aux,
                  aux_known_rescales=known is not None and compiled.known_rescales)

#: Whether autocast is on for some device: one C call, before the layer asks for w's
#: device (building a torch.device costs more, on the hot path).
_any_autocast = torch._C._is_any_autocast_enabled


def _clipped(w: Tensor, lower: Tensor, sign: float, known: Tensor | None) -> Tensor:
    """``w`` with its minimisation-form entries raised so that the total cost (with the
    per-call ``known`` cost's part on the outputs, if any) is at least ``lower`` (a
    path's ``negative_costs="clip"``), as the solver clips the total; the gradient passed
    straight through to ``w`` (as when the solver clips them)."""
    n = lower.numel()
    flat = sign * w.reshape(-1, n)
    least = lower.to(flat)
    if known is not None:
        least = least - sign * known[..., :n].reshape(-1, n)
    clipped = (sign * torch.maximum(flat, least)).reshape(w.shape)
    return clipped.detach() + (w - w.detach())  # the value exactly, the gradient w's


def _flag_infeasible(label: str, last: threading.local, flagged: set[int], A: Tensor) -> None:
    """Keep which instances the per-call rows ``A`` left infeasible (positions ``flagged``)
    as ``last.infeasible`` (the layer's ``last_infeasible``), and warn once per call with
    their count."""
    batch = tuple(A.shape[:-2])
    mask = torch.zeros(math.prod(batch), dtype=torch.bool)
    if flagged:
        # positions in the bound rows' batch (`Rows.origin`): A's, or A's under leading
        # sample axes where a method binds each sample its own rows (score_function),
        # which map back to their instance with trailing axes aligned
        mask[sorted({entry % mask.numel() for entry in flagged})] = True
        flagged = mask.nonzero()
        warnings.warn(
            f"{label}: {len(flagged)} of {mask.numel()} instances are infeasible "
            "with their per-call rows A x <= b; their solutions are zeros (CombOptNet's "
            "dummy) and layer.last_infeasible says which; on_infeasible='raise' makes "
            "this an error", RuntimeWarning, stacklevel=4)
    last.infeasible = mask.reshape(batch).to(A.device)


# help(cl.ComboLayer.__init__) and IDEs read the arguments from __init__, which would
# otherwise show nn.Module's docstring: give it the class's (mkdocstrings reads the
# source, so the docs show it once).
ComboLayer.__init__.__doc__ = ComboLayer.__doc__


class _CallRecorder(Recorder):
    """A `Recorder` that the layer builds its solves on once per thread and opens for one
    call at a time (`ComboLayer._recording`): it keeps what the solves made on the
    opening thread produce while the call is open, its forward's, and lets any other
    solve through unrecorded (a backward's, made later or from another thread), so that
    each call reads its own solves alone, as with a Recorder made for it."""

    def __init__(self, solver: Any, keep_aux: bool) -> None:
        super().__init__(solver, keep_aux)
        #: The thread of the open call, None between calls.
        self.owner: int | None = None

    def begin_call(self) -> None:
        self.aux, self.infeasible, self.owner = [], set(), threading.get_ident()

    def end_call(self) -> None:
        self.aux, self.infeasible, self.owner = [], set(), None

    def solve_min(self, costs: Any, return_aux: bool = False, **kwargs: Any) -> Any:
        # a solve outside the open call records into a recorder that nobody reads
        if self.owner == threading.get_ident():
            return super().solve_min(costs, return_aux=return_aux, **kwargs)
        return Recorder(self._solver, self.keep_aux).solve_min(costs, return_aux=return_aux,
                                                               **kwargs)

    def solve_batch(self, costs: torch.Tensor, start: Any = None, return_aux: bool = False,
                    **kwargs: Any) -> Any:
        if self.owner == threading.get_ident():
            return super().solve_batch(costs, start=start, return_aux=return_aux, **kwargs)
        return Recorder(self._solver, self.keep_aux).solve_batch(
            costs, start=start, return_aux=return_aux, **kwargs)


@torch.compiler.disable
def _end_call(recorded: tuple[_Compiled, tuple[_CallRecorder, ...]]) -> None:
    """End the call `ComboLayer._recording` opened: its recorders keep nothing more."""
    for recorder in recorded[1]:
        recorder.end_call()


@torch.compiler.disable
def _eagerly(solve: Callable[..., Tensor], *args: Any, **kwargs: Any) -> Tensor:
    """``solve(*args, **kwargs)`` outside torch.compile's tracing: an estimator's solve
    that is not one custom operator (`combolayer.layer.ops`) calls solvers Dynamo cannot
    follow (numpy, cvxpy, worker threads)."""
    return solve(*args, **kwargs)


class _ClipPerturbations(ClipNegatives):
    """The layer's solver for problems that need non-negative costs: the user's cost is
    checked in ``forward``, so a negative entry here comes from the layer's own noise or
    an estimator's step (Blackbox's ``c + lam dL/dy``, a perturbation). It is set to 0,
    with a warning the first time (`combolayer.backends.clip`, shared with the losses)."""

    def __init__(self, solver: Any, floor: Tensor) -> None:
        super().__init__(solver, floor, "the layer's noise or the estimator's step", "layer")


@dataclass(frozen=True)
class _Solves:
    """The differentiable solves a layer builds on one solver: the exact one, or with
    ``solve_ratio < 1`` the solution cache around it."""

    #: The solver they call: the given one, its negatives clipped where the problem
    #: needs it (`_ClipPerturbations`).
    base: Any
    #: The estimator's solve (`Estimator.build`).
    solve: Callable[..., Tensor]
    #: The default hot path as one node (``Estimator.build_projected``), or None.
    fused: ProjectedSolve | None = None
    #: The solve as one custom operator, for torch.compile (`combolayer.layer.ops`), for
    #: estimators that `compiles_whole`; None otherwise.
    op: CompiledSolve | None = None
    #: ``fused`` without its functorch test (`fast_apply`'s ``direct``; the node itself
    #: when it has none), called where no transform runs.
    fused_direct: ProjectedSolve | None = dataclasses.field(init=False, default=None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fused_direct", getattr(self.fused, "direct", self.fused))

    def recorded(self, method: Any, keep_aux: bool) -> tuple[_Solves, _CallRecorder]:
        """The estimator's solve alone, built on a `_CallRecorder` of ``base``, and it."""
        recorder = _CallRecorder(self.base, keep_aux)
        return _Solves(recorder, method.build(recorder)), recorder


#: Held while a copied or unpickled layer builds what it left behind (`ComboLayer.compiled`):
#: two builds at once left each thread with results (``last_infeasible``) on its own.
_BUILDING = threading.RLock()


def _broadcasts_to(shape: torch.Size, to: torch.Size) -> bool:
    try:
        return torch.broadcast_shapes(shape, to) == to
    except RuntimeError:
        return False


@dataclass(frozen=True)
class _Compiled:
    """Everything a layer builds from its recipe; never pickled (see ``__getstate__``)."""

    solver: Solver
    projection: Transform
    floor: Tensor | None
    normals: Tensor | None
    #: Under a path's ``negative_costs="clip"``: the least minimisation-form cost of each
    #: output (0 where a cycle could pay, -inf elsewhere), applied to the user's cost.
    clip_lower: Tensor | None
    #: Whether the spec has a known cost: the layer then works in float64 (as for a call
    #: with a known cost of its own), where a projection's ``P(w + k) - k`` keeps
    #: ``w``'s scale next to a large ``k``.
    precise: bool
    #: Whether the projection is the user's callable, whose output the layer checks
    #: as it checks ``w`` (shape and values: a NaN it made reached the solver).
    user_projection: bool
    #: Whether the projection rescales ``w``, which a per-call known cost on the
    #: auxiliaries forbids (`known_rescales`; read once here, not while traced).
    known_rescales: bool
    #: The solves on ``solver``.
    exact: _Solves
    #: With ``solve_ratio < 1``, the solves on the solution cache, used in training mode
    #: and by ``sample``; None otherwise.
    cached: _Solves | None = None
    #: The slot under which a compiled graph draws the layer's noise (`draw_noise`).
    noise_slot: Tensor | None = None
    #: Per-thread results of the last call (``last_infeasible``).
    last: threading.local = dataclasses.field(default_factory=threading.local)
    #: Keeps in ``last`` which instances a call's per-call rows left infeasible, and warns
    #: (`_flag_infeasible`): ``flag(positions, A)``.
    flag: Callable[[set[int], Tensor], None] | None = None
    #: Per thread, the solves built on `_CallRecorder`s by ``keep_aux`` (`ComboLayer._recording`).
    recordings: threading.local = dataclasses.field(default_factory=threading.local)
