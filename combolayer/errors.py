"""The error types of combolayer; every one subclasses `ComboLayerError`."""

from __future__ import annotations


class ComboLayerError(Exception):
    """Base class of every error combolayer raises on purpose."""


class SpecError(ComboLayerError, ValueError):
    """An invalid problem spec: index out of range, wrong lengths, NaN data, unknown kind."""


class SolverError(ComboLayerError, RuntimeError):
    """The solver could not return an optimal solution (unbounded, time limit, crashed worker)."""


class InfeasibleError(SolverError):
    """The problem has no feasible solution."""


class BackendUnavailable(ComboLayerError, ImportError):
    """A backend's package is missing, or the backend cannot handle this problem."""


class NoIntegerWarning(UserWarning):
    """A spec without a single integer variable: it is solved as a linear program, so
    its solutions may be fractional. Silence it for an LP on purpose with
    ``warnings.filterwarnings("ignore", category=cl.NoIntegerWarning)``."""
