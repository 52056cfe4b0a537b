"""The paper's experiments at CPU scale, run by ``combolayer reproduce NAME``.

Each experiment is one module in this package, and adding one touches that
file only: the module's docstring (first line: the one-line description), a
pydantic ``Config`` (a subclass of `ExperimentConfig`
with the paper's values as defaults and the CPU-scale changes named), a
``QUICK`` dict of overrides for the seconds-long smoke run, a ``PAPER_SCALE``
dict that sets the paper's model sizes, epochs and data sizes (``--scale
paper``; with ``--quick``, a toy slice of it: ``QUICK``, then an optional
``PAPER_QUICK`` where the paper's model needs fewer samples still), an
optional ``CHOSEN_BY_HAND`` tuple of `core.HandChoice` (values chosen by hand on
the validation split, outside `core.tune`: the report counts and lists them), and
``run(config) -> Result``. `experiments` finds them by scanning the package.
"""

from __future__ import annotations

from functools import cache
from types import ModuleType

from ..discovery import import_submodules

#: Modules of this package that hold the shared machinery, not experiments.
_INFRASTRUCTURE = {"core", "report", "verdicts", "plots"}


@cache
def experiments() -> dict[str, ModuleType]:
    """Every experiment module, by name, in alphabetical order."""
    modules = import_submodules(__name__, __path__, skip=_INFRASTRUCTURE)
    return {name: module for name, module in modules.items()
            if hasattr(module, "run") and hasattr(module, "Config")}


def describe(module: ModuleType) -> str:
    """The experiment's one-line description: its docstring's first line."""
    return (module.__doc__ or "").strip().splitlines()[0].rstrip(".") if module.__doc__ else ""


def get(name: str) -> ModuleType:
    """The experiment module called ``name``; ``KeyError`` names the known ones."""
    found = experiments()
    if name not in found:
        raise KeyError(f"unknown experiment {name!r}: expected one of {sorted(found)}")
    return found[name]
