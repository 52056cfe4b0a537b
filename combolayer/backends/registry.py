"""The backend registry: the one place that maps names to backends, and ``make_solver``.

A backend is a `Backend` subclass (see there for what it declares). Backends in this
package and in `combolayer.interop` (other libraries' models) register when their module
is imported, and every module of both packages is imported on first use
(`combolayer.discovery`), so a new backend is one new file there; third-party ones
register under the entry-point group ``combolayer.backends``.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import logging
import os
import time
import warnings
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from ..discovery import import_submodules
from ..errors import BackendUnavailable, InputError, InputTypeError
from ..executors import parallel_kernel
from ..specs.base import Spec
from ..specs.load import load_spec
from .base import Backend, Capability, Tier
from .config import BackendConfig
from .device import DeviceRoute
from .race import MAX_CANDIDATES, RacingKernel
from .simple_paths import simple_paths
from .solver import Kernel, Solver

ENTRY_POINT_GROUP = "combolayer.backends"

logger = logging.getLogger(__name__)

_REGISTRY: dict[str, type] = {}
_loaded = False
#: Modules of this package that are no backends but the old names of modules that moved
#: out of it (`combolayer.pool`, `combolayer.executors`): importing one warns, so the
#: backends' discovery skips them.
_MOVED = ("executors", "pool")


def register_backend(cls: type) -> type:
    """Register a backend class under ``cls.name`` (usable as a decorator)."""
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise InputTypeError(f"a backend must be a subclass of combolayer.backends.Backend, got "
                        f"{cls!r}")
    _REGISTRY[cls.name] = cls
    return cls


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    import_submodules(__package__, [str(Path(__file__).parent)], skip=_MOVED)
    interop = f"{__package__.rpartition('.')[0]}.interop"
    import_submodules(interop, importlib.import_module(interop).__path__)
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            plugin = entry.load()
        except Exception as error:  # a broken plugin must not take the built-ins down
            warnings.warn(f"combolayer: backend plugin {entry.name!r} ({entry.value}) failed "
                          f"to load and is skipped: {type(error).__name__}: {error}",
                          stacklevel=2)
            continue
        register_backend(plugin)


def backends() -> dict[str, type]:
    """Every registered backend class by name, installed or not."""
    _load_all()
    return dict(_REGISTRY)


def missing_packages(cls: type) -> list[str]:
    return [pkg for pkg in cls.requires if importlib.util.find_spec(pkg) is None]


def why_not(cls: type, spec: Spec, config: BackendConfig | None = None) -> str | None:
    """Why backend ``cls`` cannot solve ``spec`` under ``config`` (without one: as
    ``"auto"`` would use it), or None when it can."""
    missing = missing_packages(cls)
    if missing:
        return f"package {', '.join(missing)} is not installed (pip install {' '.join(missing)})"
    absent = [key for key in cls.config_options
              if config is None or key not in config.options]
    if absent:
        return f"it solves only with options {absent} in its config"
    return cls().accepts(spec)


#: Added on an accelerator to the rank of a backend whose kernels take numpy arrays
#: (a round trip through the host per call): behind every one that runs on the device.
OFF_DEVICE = 10 * Tier.LAST


def preference(cls: type, spec: Spec, device: str = "cpu") -> int:
    """Where ``"auto"`` ranks backend ``cls`` for ``spec`` with costs on ``device`` (a
    torch device type: ``"cpu"``, ``"cuda"``, ...); lower is tried first."""
    value = cls.rank(spec)
    if device != "cpu" and cls.array_api != "torch":
        value += OFF_DEVICE
    return value


def _ranked(spec: Spec, device: str = "cpu") -> list[type]:
    """All backends, best first, for costs on ``device``."""
    return sorted(backends().values(), key=lambda cls: preference(cls, spec, device))


def capable_backends(spec: Spec) -> list[str]:
    return [cls.name for cls in _ranked(spec) if why_not(cls, spec) is None]


def select_backend(spec: Spec, name: str = "auto",
                   config: BackendConfig | None = None) -> type:
    """The backend class for ``name``, checked against ``spec`` (and, for a named
    backend, the ``config`` it is compiled with)."""
    if name == "auto":
        passed_over = []
        for cls in _ranked(spec):
            reason = why_not(cls, spec)
            if reason is None:
                for skipped, why in passed_over:
                    _log_fallback(skipped, why, cls.name, spec)
                return cls
            if cls.announce_fallback and not missing_packages(cls):
                passed_over.append((cls.name, reason))
        raise BackendUnavailable(f"no installed backend can solve {spec.label}")
    registry = backends()
    if name not in registry:
        raise BackendUnavailable(
            f"unknown backend {name!r}: expected one of {['auto', *sorted(registry)]}"
        )
    reason = why_not(registry[name], spec, config)
    if reason is not None:
        able = capable_backends(spec)
        raise BackendUnavailable(
            f"backend {name!r} cannot solve {spec.label}: {reason}; "
            f"backends that can: {', '.join(able) or 'none installed'}"
        )
    return registry[name]


_announced: set[tuple[str, str]] = set()


def _log_fallback(skipped: str, reason: str, chosen: str, spec: Spec) -> None:
    """One INFO line when "auto" passes over an installed backend that asks for it
    (``announce_fallback``, e.g. Gurobi under a size-limited licence), once per
    process for each backend and reason."""
    if (skipped, reason) in _announced:
        return
    _announced.add((skipped, reason))
    logger.info("backend 'auto' for %s: using %r, not %r: %s", spec.label, chosen, skipped,
                reason)


def make_solver(
    spec: Spec | str | os.PathLike | dict,
    backend: str | BackendConfig | dict = "auto",
) -> Solver:
    """Compile ``spec`` for a backend: the model is built here, once.

    Args:
        spec: a spec, or a dict / YAML / JSON of one (see `combolayer.load_spec`).
        backend: a name (``"auto"``, ``"highs"``, ``"scip"``, ``"gurobi"``, ``"cvxpy"``,
            ``"networkx"``, ``"scipy"``, ``"torch"``, ``"bellman_ford"`` or a plugin's), a
            `BackendConfig`, a dict/YAML/JSON of one, or a PyEPO model wrapped by
            `combolayer.backends.from_pyepo`. ``"auto"`` picks the
            fastest exact backend that supports the problem, and for costs on an
            accelerator one that solves them there where it exists (`device_route`).

    Returns:
        A [`Solver`][combolayer.backends.Solver] whose ``solve(costs)`` takes costs of shape
        ``(*batch, *spec.cost_shape)`` (numpy in, numpy out; torch in, torch out)
        and returns the optimal solutions in the same shape.

    Raises:
        SpecError: ``spec`` is invalid.
        BackendUnavailable: the backend's package is missing, the name is unknown,
            or it cannot solve ``spec``; the message names backends that can.

    Examples:
        >>> import numpy as np, combolayer as cl
        >>> solver = cl.make_solver(cl.problems.TopK(n=4, k=2), backend="highs")
        >>> solver.solve(np.array([0.1, 0.9, 0.5, 0.2])).tolist()
        [0.0, 1.0, 1.0, 0.0]
    """
    if not isinstance(spec, Solver):  # a wrapped PyEPO model may stand in for its spec
        spec, backend = in_place_of_spec(spec, backend)
    spec = load_spec(spec)
    config = BackendConfig.load(backend)
    races = _wants_race(config)
    ranked = config.model_copy(update={"name": "auto"}) if races else config
    cls = select_backend(spec, ranked.name, ranked)
    _warn_unused(cls, spec, ranked)
    kernel = _executor_kernel(cls, spec, ranked)
    if preference(cls, spec) >= Tier.GENERIC:  # no path algorithm of its own
        kernel = simple_paths(spec, kernel, functools.partial(_path_search, spec))
    reason = choice_reason(cls, spec, ranked, races)
    rivals = race_rivals(cls, spec) if races else []
    if rivals:
        kernel = RacingKernel(
            (cls.name, kernel),
            [(rival.name, functools.partial(_executor_kernel, rival, spec, ranked))
             for rival in rivals],
            # CPU time of this process times single-threaded solves whatever the load
            spec.label, first_reason=reason,
            clock=time.process_time if config.threads == 1 else time.perf_counter)
    solver = Solver(spec, kernel, cls.label(ranked), config)
    solver.recipe = functools.partial(make_solver, spec, config)
    solver.choice_reason = reason
    solver.row_fallback = functools.partial(_row_solver, spec, ranked)
    if ranked.name == "auto" and solver.kernel.array_api == "numpy":
        solver.device_route = device_route(spec, ranked)
        if solver.device_route is not None:
            solver.choice_reason += f"; costs on an accelerator: {solver.device_route.reason}"
    return solver


def _path_search(spec: Spec) -> Kernel:
    """A numpy kernel of the first backend ranked with an algorithm of its own for
    ``spec`` (scipy's Dijkstra for a path), for `simple_paths`."""
    for cls in _ranked(spec):
        if preference(cls, spec) >= Tier.GENERIC:
            break
        if cls.array_api == "numpy" and why_not(cls, spec) is None:
            return cls().compile(spec, BackendConfig(name=cls.name))
    raise BackendUnavailable(f"no installed backend searches the paths of {spec.label} "
                             "itself (scipy does)")


def device_route(spec: Spec, config: BackendConfig) -> DeviceRoute | None:
    """Where ``"auto"`` sends costs on an accelerator (`combolayer.backends.device`): the
    first capable backend of the ranking there (`preference` with ``device="cuda"``) when
    its kernels run on the device and it has an algorithm of its own for ``spec``'s
    kind; else None, and such costs take the CPU choice's round trip through the host."""
    for cls in _ranked(spec, "cuda"):
        if why_not(cls, spec) is None:
            if (cls.array_api != "torch"
                    or preference(cls, spec, "cuda") >= Tier.GENERIC):
                return None
            reason = (f"{cls.name}, a batch kernel for {spec.kind!r} that solves them on "
                      "their device (no round trip through the host)")
            named = config.model_copy(update={"name": cls.name})
            return DeviceRoute(cls.name, reason, functools.partial(make_solver, spec, named))
    return None


def _wants_race(config: BackendConfig) -> bool:
    """Whether ``config`` asks for the race (`combolayer.backends.race`): the opt-in name
    ``"race"``, or the deprecated ``BackendConfig(name="auto", deterministic=False)``."""
    if config.name == "race":
        return True
    if config.name == "auto" and not config.deterministic:
        warnings.warn('BackendConfig(deterministic=False) is deprecated: "auto" is a fixed '
                      'choice; pass backend="race" (or name="race") to race the solvers',
                      DeprecationWarning, stacklevel=3)
        return True
    return False


def _row_solver(spec: Spec, config: BackendConfig) -> Solver:
    """The solver for calls with per-call rows when ``config``'s backend takes none:
    the best installed backend that does (``Capability.ROWS``), with the same settings
    but the options that configure ``config``'s backend itself (`Backend.config_options`)."""
    own = backends()[config.name].config_options if config.name in backends() else ()
    config = config.model_copy(update={"options": {
        key: value for key, value in config.options.items() if key not in own}})
    # the installed backends that take per-call rows for spec, best first
    able = [cls for cls in backends().values()
            if cls.capabilities & Capability.ROWS and why_not(cls, spec) is None]
    able = [cls.name for cls in sorted(able, key=lambda cls: cls.row_rank(spec))]
    if not able:
        raise BackendUnavailable(
            f"backend {config.name!r} cannot take per-call rows A x <= b for {spec.label}, "
            "and no installed backend that can solves it (highs, scip, gurobi, cvxpy, or "
            "enumerate for small binary problems)")
    for name in able:
        # a backend may compile some problems to kernels of their own that take no rows
        # (HiGHS's and Gurobi's TSP kernels): the next one then
        solver = make_solver(spec, config.model_copy(update={"name": name}))
        if solver.kernel.takes_rows:
            logger.info("%s: backend %r takes no per-call rows; calls with rows go to %r",
                        spec.label, config.name, name)
            return solver
    raise BackendUnavailable(f"none of {able} takes per-call rows A x <= b for {spec.label}")


def as_solver(problem: Any, backend: Any = "auto") -> Solver:
    """The compiled solver a loss or metric works with.

    ``problem`` is a spec (or a dict/YAML/JSON of one), a compiled
    [`Solver`][combolayer.backends.Solver], or anything holding one as ``.solver`` (a
    [`ComboLayer`][combolayer.ComboLayer]); ``backend`` (a name, a config, or a
    compiled [`Solver`][combolayer.backends.Solver]) is used only to compile a spec.
    """
    compiled = problem if isinstance(problem, Solver) else getattr(problem, "solver", None)
    if isinstance(compiled, Solver):
        if isinstance(backend, Solver) and backend is not compiled:
            raise InputError("got a compiled solver twice (as the problem and as backend=); "
                             "pass one")
        return compiled
    if isinstance(backend, Solver):
        spec, _ = in_place_of_spec(problem, "auto")  # the problem's spec, where it holds one
        check_solves(backend, load_spec(spec), "the problem")
        return backend
    return make_solver(*in_place_of_spec(problem, backend))


def check_solves(solver: Solver, spec: Spec, what: str) -> None:
    """InputError unless ``solver`` was compiled for ``spec`` or its ILP form (given as
    ``backend=`` with another problem, it solved its own in that one's place). Not the
    ILP form of a spec whose costs every solver floors first (`Spec.cost_floor`: a
    shortest path on a graph with cycles), which that form's solver would not do."""
    ilp_form = type(solver.spec) is not type(spec) and solver.spec == spec.to_ilp()
    if solver.spec == spec or (ilp_form and spec.cost_floor() is None):
        return
    why = (" (its ILP form: its solver would not floor the costs, as every solver of "
           f"{spec.label} does)" if ilp_form else "")
    raise InputError(f"backend is a Solver compiled for {_other(solver.spec, spec)}, but "
                     f"{what} is {spec.label}{why}: pass a solver of this problem, or the "
                     "solver alone in place of the problem")


def _other(spec: Spec, than: Spec) -> str:
    """``spec``'s label, or where its fields differ from ``than``'s of the same label."""
    if spec.label != than.label:
        return spec.label
    fields = [name for name in type(spec).model_fields
              if type(spec) is type(than) and getattr(spec, name) != getattr(than, name)]
    return f"another {spec.label} (its {', '.join(fields) or 'kind'} differ)"


def in_place_of_spec(problem: Any, backend: Any) -> tuple[Any, Any]:
    """``(spec, backend)`` for a layer or loss given ``problem`` and ``backend``.

    Anything that carries its spec as ``.spec`` without being one (a compiled
    [`Solver`][combolayer.backends.Solver], a wrapped PyEPO model) may stand in place of
    the spec when ``backend`` is ``"auto"``: its ``.spec`` is the spec and itself the
    backend. Anything else is returned as given.
    """
    if (isinstance(backend, str) and backend == "auto" and not isinstance(problem, Spec)
            and hasattr(problem, "spec")):
        return problem.spec, problem
    return problem, backend


#: What each tier of ``"auto"``'s ranking stands for, for `choice_reason`.
_TIER_REASONS = {
    Tier.CLOSED_FORM: "a closed form on the tensor itself",
    Tier.SPECIALISED: "an exact algorithm of its own for the problem kind",
    Tier.REFERENCE: "a slow independent reference, the only one that can",
    Tier.GENERIC: "a generic solver",
}


def choice_reason(cls: type, spec: Spec, config: BackendConfig, races: bool = False) -> str:
    """Why backend ``cls`` solves ``spec`` under ``config``, in one sentence:
    named by the caller, or where ``"auto"`` ranks it and which backends it passed over
    (and, unless it ``races`` already, that ``backend="race"`` would time it)."""
    if config.name != "auto":
        return f"{cls.name}: named by the caller (backend={config.name!r})"
    rank = preference(cls, spec)
    if rank < Tier.GENERIC:
        tier = max(t for t in _TIER_REASONS if t <= rank)
        why = (f"{_TIER_REASONS[tier]} for {spec.kind!r}, ranked ahead of every generic "
               "solver and used without a race")
    else:
        behind = [f"{other.name} {preference(other, spec):g}" for other in _ranked(spec)
                  if other is not cls and Tier.GENERIC <= preference(other, spec) < Tier.LAST
                  and why_not(other, spec) is None]
        why = (f"the first capable generic solver of its ranking for this problem (rank "
               f"{rank:g}"
               + (f"; then {', '.join(behind)}" if behind else "")
               + "; docs/backends.md gives the measurements behind it)")
    passed = [f"{other.name} ({why_not(other, spec)})" for other in _ranked(spec)
              if preference(other, spec) < rank and not missing_packages(other)
              and other.announce_fallback]
    return (f"{cls.name}: first under 'auto': {why}"
            + (f"; passed over {', '.join(passed)}" if passed else "")
            + ("; backend='race' would time the generic solvers on the run's costs"
               if not races and race_rivals(cls, spec) else ""))


def race_rivals(cls: type, spec: Spec) -> list[type]:
    """The backends that race ``cls``, the first capable one of ``"auto"``'s ranking
    (`combolayer.backends.race`): the next capable ones that may race (`_races`), up to
    ``race.MAX_CANDIDATES`` in all; none when ``cls`` may not (an algorithm of its own
    for the problem, or a batched torch kernel: no solver loop to time)."""
    if not _races(cls, spec):
        return []
    rivals = (other for other in _ranked(spec)
              if other is not cls and _races(other, spec) and why_not(other, spec) is None)
    return list(itertools.islice(rivals, MAX_CANDIDATES - 1))


def _races(cls: type, spec: Spec) -> bool:
    """Whether ``cls`` may race for ``spec``: a generic exact solver on numpy (ranked
    from ``Tier.GENERIC`` to below ``Tier.MODELLING``)."""
    return (Tier.GENERIC <= preference(cls, spec) < Tier.MODELLING
            and cls.array_api == "numpy")


#: Options the executors read themselves (`combolayer.executors.RayKernel`).
EXECUTOR_OPTIONS = ("ray_address", "ray_num_cpus")


def _warn_unused(cls: type, spec: Spec, config: BackendConfig) -> None:
    """Warn of the settings in ``config`` that backend ``cls`` has no use for: solver
    options, a time limit or a gap where it has no solver to pass them to (scipy, torch,
    ...: ``"auto"`` may pick one over the MIP solver they were meant for), and an
    executor for a kernel that solves a whole batch in one vectorised call. They did
    nothing without a word."""
    unused = []
    options = [key for key in config.options
               if key not in (*cls.config_options, *EXECUTOR_OPTIONS)]
    if options and not cls.takes_options:
        unused.append(f"options {options} (it has no solver settings)")
    limits = [f"{name}={value!r}" for name, value in (("time_limit", config.time_limit),
                                                        ("mip_gap", config.mip_gap)) if value]
    ignored = cls.ignored_limits(config) if limits else None
    if ignored is not None:
        unused.append(f"{' and '.join(limits)} ({ignored})")
    if config.executor != "serial" and cls.array_api == "torch":
        unused.append(f"executor={config.executor!r}, workers={config.workers!r} (it solves "
                      "a whole batch in one vectorised call)")
    if unused:
        warnings.warn(f"backend {cls.name!r} for {spec.label} does nothing with "
                      f"{' and '.join(unused)}", UserWarning, stacklevel=3)


def _executor_kernel(cls: type, spec: Spec, config: BackendConfig) -> Kernel:
    if config.executor == "serial" or cls.array_api == "torch":
        return cls().compile(spec, config)
    return parallel_kernel(cls, spec, config)
