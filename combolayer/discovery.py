"""Finding the modules of a package, so that adding one is a one-file change.

The problems, estimators and experiments packages each import every module
they hold when they are imported: a module's classes register themselves when
defined (``@register_spec``, an `Estimator`
subclass with a ``name``), and a new file in the folder needs no import line
anywhere else.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from types import ModuleType


def import_submodules(package: str, path: Iterable[str],
                      skip: Iterable[str] = ()) -> dict[str, ModuleType]:
    """Import every module of ``package`` (its ``__name__`` and ``__path__``) but the
    private ones and ``skip``, in alphabetical order; return them by short name."""
    skipped = set(skip)
    names = sorted(info.name for info in pkgutil.iter_modules(path)
                   if not info.name.startswith("_") and info.name not in skipped)
    return {name: importlib.import_module(f"{package}.{name}") for name in names}


def export_all(namespace: dict, modules: dict[str, ModuleType]) -> list[str]:
    """Put each module's ``__all__`` names into ``namespace`` (a package's ``globals()``);
    return the names, sorted, for the package's own ``__all__``."""
    names = []
    for module in modules.values():
        for name in getattr(module, "__all__", ()):
            namespace[name] = getattr(module, name)
            names.append(name)
    return sorted(names)
