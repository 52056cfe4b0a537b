"""What every solver wrapper does the same way, done once.

A wrapper (`KnownBound`, `RowBound`, `Recorder`, `ClipNegatives`) changes some of a
solver's calls and is the solver for everything else. Binding rows or a known cost
to a wrapper wraps the wrapper, so what it changes stays in force for those solves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .rows import RowBound
    from .solver import KnownBound


class SolverWrapper:
    """``solver`` (a `Solver` or a wrapper of one), with the calls a subclass defines
    changed: every other attribute is the solver's."""

    def __init__(self, solver: Any) -> None:
        self._solver = solver

    def __getattr__(self, name: str) -> Any:
        # dunders are looked up on the class, and copy/pickle probe for them before
        # __init__ has set _solver
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.__dict__["_solver"], name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._solver!r})"

    def bind_rows(self, A: Any, b: Any) -> RowBound:
        """This wrapper with the rows ``A x <= b`` bound to every solve (`RowBound`)."""
        from .rows import RowBound  # rows.py builds on this module

        return RowBound(self, A, b)

    def bind_known(self, known: Any) -> KnownBound:
        """This wrapper with a per-call known cost (minimisation form) bound to every
        solve (`KnownBound`)."""
        from .solver import KnownBound  # solver.py builds on this module

        return KnownBound(self, known)
