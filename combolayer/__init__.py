"""combolayer: combinatorial solvers as differentiable PyTorch layers."""

import logging as _logging

from . import backends, data, gradients, losses, metrics, problems, retrieval, transforms
from .analysis import AffineHull, analyze
from .backends import BackendConfig, make_solver
from .errors import (
    BackendUnavailable,
    ComboLayerError,
    InfeasibleError,
    SolverError,
    SpecError,
)
from .estimators import IMLE, Blackbox, Identity, Margin, Perturbed, SumOfGamma
from .io import load_spec
from .layer import ComboLayer
from .specs import ILP, Constraint

__version__ = "0.1.0"

# Quiet unless the application configures logging: the backend chosen and the
# solver time per batch are logged at DEBUG under "combolayer".
_logging.getLogger(__name__).addHandler(_logging.NullHandler())

__all__ = [
    "ILP",
    "IMLE",
    "AffineHull",
    "BackendConfig",
    "BackendUnavailable",
    "Blackbox",
    "ComboLayer",
    "ComboLayerError",
    "Constraint",
    "Identity",
    "InfeasibleError",
    "Margin",
    "Perturbed",
    "SolverError",
    "SpecError",
    "SumOfGamma",
    "analyze",
    "backends",
    "data",
    "gradients",
    "load_spec",
    "losses",
    "make_solver",
    "metrics",
    "problems",
    "retrieval",
    "transforms",
]
