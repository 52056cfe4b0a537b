"""Backend registry, capability checks, and ``make_solver``.

A backend is a class with a ``name``, the Python packages it ``requires``,
its ``capabilities`` and ``compile(spec, config) -> Kernel``. Capabilities are
``"linear"`` (solves any canonical form), ``"integer"`` (integer variables),
``"lazy"`` (lazily separated constraints) and the problem kinds it solves
natively (``"topk"``, ``"matching"``, ...). Third-party backends register under
the entry-point group ``combolayer.backends``.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from functools import lru_cache
from importlib.metadata import entry_points
from typing import ClassVar, Protocol

from ..canonical import CanonicalForm
from ..errors import BackendUnavailable
from ..io import load_spec
from ..specs import Spec
from .config import BackendConfig
from .solver import Kernel, Solver

ENTRY_POINT_GROUP = "combolayer.backends"


class Backend(Protocol):
    name: ClassVar[str]
    requires: ClassVar[tuple[str, ...]]
    capabilities: ClassVar[frozenset[str]]
    #: Lower is preferred by ``"auto"``; generic solvers rank GENERIC_TIER
    #: behind native ones (see :func:`preference`). A backend whose speed
    #: depends on the problem may define ``rank(spec) -> int`` on that scale.
    priority: ClassVar[int]

    def accepts(self, spec: Spec) -> str | None:
        """Why this backend cannot solve ``spec`` beyond its capabilities, or None."""

    def compile(self, spec: Spec, config: BackendConfig) -> Kernel: ...


_REGISTRY: dict[str, type] = {}
_BUILTIN_MODULES = (
    "combolayer.backends.highs",
    "combolayer.backends.scip",
    "combolayer.backends.cvxpy",
    "combolayer.backends.networkx",
    "combolayer.backends.torch",
    "combolayer.backends.scipy",
)
_loaded = False


def register_backend(cls: type) -> type:
    """Register a backend class under ``cls.name`` (usable as a decorator)."""
    _REGISTRY[cls.name] = cls
    return cls


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in _BUILTIN_MODULES:
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module)
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


def canonical_form(spec: Spec, lazy: bool = True) -> CanonicalForm:
    """The spec's canonical form, built once per (spec, lazy)."""
    return _canonical_form(type(spec), spec.model_dump_json(), lazy)


@lru_cache(maxsize=64)
def _canonical_form(cls: type, spec_json: str, lazy: bool) -> CanonicalForm:
    return cls.model_validate_json(spec_json).to_canonical(lazy=lazy)


def is_native(cls: type, spec: Spec) -> bool:
    return spec.kind in cls.capabilities


def why_not(cls: type, spec: Spec) -> str | None:
    """Why backend ``cls`` cannot solve ``spec``, or None when it can."""
    missing = missing_packages(cls)
    if missing:
        return f"package {', '.join(missing)} is not installed (pip install {' '.join(missing)})"
    if not is_native(cls, spec):
        if "linear" not in cls.capabilities:
            return f"it solves only {sorted(cls.capabilities)}, not {spec.kind!r}"
        form = canonical_form(spec, lazy="lazy" in cls.capabilities)
        if form.is_mip and "integer" not in cls.capabilities:
            return "it cannot handle integer variables"
    accepts = getattr(cls, "accepts", None)
    return accepts(cls(), spec) if accepts is not None else None


#: Added to a generic backend's priority: native solvers come first by default.
GENERIC_TIER = 100


def preference(cls: type, spec: Spec) -> int:
    """Where ``"auto"`` ranks backend ``cls`` for ``spec``; lower is tried first."""
    rank = getattr(cls, "rank", None)
    if rank is not None:
        return rank(spec)
    return cls.priority + (0 if is_native(cls, spec) else GENERIC_TIER)


def _ranked(spec: Spec) -> list[type]:
    """All backends, best first."""
    return sorted(backends().values(), key=lambda cls: preference(cls, spec))


def capable_backends(spec: Spec) -> list[str]:
    return [cls.name for cls in _ranked(spec) if why_not(cls, spec) is None]


def select_backend(spec: Spec, name: str = "auto") -> type:
    """The backend class for ``name``, checked against ``spec``."""
    if name == "auto":
        for cls in _ranked(spec):
            if why_not(cls, spec) is None:
                return cls
        raise BackendUnavailable(f"no installed backend can solve {spec.label}")
    registry = backends()
    if name not in registry:
        raise BackendUnavailable(
            f"unknown backend {name!r}: expected one of {['auto', *sorted(registry)]}"
        )
    reason = why_not(registry[name], spec)
    if reason is not None:
        able = capable_backends(spec)
        raise BackendUnavailable(
            f"backend {name!r} cannot solve {spec.label}: {reason}; "
            f"backends that can: {', '.join(able) or 'none installed'}"
        )
    return registry[name]


def compile_kernel(backend_name: str, spec: Spec, config: BackendConfig) -> Kernel:
    """Build one kernel; module-level so executors can call it in worker processes."""
    return backends()[backend_name]().compile(spec, config)


def make_solver(
    spec: Spec | str | os.PathLike | dict,
    backend: str | BackendConfig | dict = "auto",
) -> Solver:
    """Compile ``spec`` for a backend: the model is built here, once.

    ``backend`` is a name, a :class:`BackendConfig`, or a dict/YAML/JSON of one.
    """
    spec = load_spec(spec)
    config = BackendConfig.load(backend)
    cls = select_backend(spec, config.name)
    kernel = _executor_kernel(cls, spec, config)
    return Solver(spec, kernel, cls.name, config)


def _executor_kernel(cls: type, spec: Spec, config: BackendConfig) -> Kernel:
    if config.executor == "serial" or getattr(cls, "array_api", "numpy") == "torch":
        return cls().compile(spec, config)
    from .executors import parallel_kernel

    return parallel_kernel(cls.name, spec, config)
