"""combolayer: combinatorial solvers as differentiable PyTorch layers."""

from .backends import BackendConfig, make_solver
from .errors import (
    BackendUnavailable,
    ComboLayerError,
    InfeasibleError,
    SolverError,
    SpecError,
)
from .estimators import Blackbox, Identity
from .io import load_spec
from .layer import ComboLayer
from .specs import ILP, Constraint

__version__ = "0.1.0"

__all__ = [
    "ILP",
    "BackendConfig",
    "BackendUnavailable",
    "Blackbox",
    "ComboLayer",
    "ComboLayerError",
    "Constraint",
    "Identity",
    "InfeasibleError",
    "SolverError",
    "SpecError",
    "load_spec",
    "make_solver",
]
