"""combolayer: combinatorial solvers as differentiable PyTorch layers."""

from . import problems
from .analysis import AffineHull, analyze
from .backends import BackendConfig, make_solver
from .errors import (
    BackendUnavailable,
    ComboLayerError,
    InfeasibleError,
    SolverError,
    SpecError,
)
from . import losses, metrics
from .estimators import IMLE, Blackbox, Identity, Margin, Perturbed
from .io import load_spec
from .layer import ComboLayer
from .specs import ILP, Constraint

__version__ = "0.1.0"

__all__ = [
    "ILP",
    "AffineHull",
    "BackendConfig",
    "BackendUnavailable",
    "Blackbox",
    "ComboLayer",
    "ComboLayerError",
    "Constraint",
    "IMLE",
    "Identity",
    "InfeasibleError",
    "Margin",
    "Perturbed",
    "SolverError",
    "SpecError",
    "analyze",
    "load_spec",
    "make_solver",
    "problems",
]
