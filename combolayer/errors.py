"""The error types of combolayer; every one subclasses `ComboLayerError`."""

from __future__ import annotations


class ComboLayerError(Exception):
    """Base class of every error combolayer raises on purpose."""


class SpecError(ComboLayerError, ValueError):
    """An invalid problem spec: index out of range, wrong lengths, NaN data, unknown kind."""


class InputError(ComboLayerError, ValueError):
    """Invalid input other than a spec: costs with NaN or inf, a wrong shape, per-call
    rows or known costs that do not fit, a setting out of range. Also a ValueError."""


class InputTypeError(ComboLayerError, TypeError):
    """An input of the wrong type: costs that are not a floating-point tensor or array, a
    setting of the wrong kind. Also a TypeError."""


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
