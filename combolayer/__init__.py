"""combolayer: combinatorial solvers as differentiable PyTorch layers.

The package is laid out by stage (docs/architecture.md): ``specs`` (declaring
problems, their canonical form), ``problems`` (named problems), ``backends``
(solvers), ``analysis`` (the affine hull), ``transforms`` (projections, noise),
``estimators`` (backward passes), ``layer`` (their composition), ``training``
and ``cli`` with ``experiments``. The public namespaces of the API are
``cl.losses``, ``cl.metrics`` and ``cl.data`` at the top level, next to this file.
"""

import logging as _logging

from . import backends, data, losses, metrics, problems, transforms
from .analysis import AffineHull, analyze
from .backends import BackendConfig, make_solver
from .errors import (
    BackendUnavailable,
    ComboLayerError,
    InfeasibleError,
    InputError,
    InputTypeError,
    NoIntegerWarning,
    SolverError,
    SpecError,
)
from .estimators import (
    AIMLE,
    IMLE,
    Blackbox,
    CombOptNet,
    Identity,
    Margin,
    Perturbed,
    RegularizedFrankWolfe,
    ScoreFunction,
)
from .layer import ComboLayer
from .specs import ILP, Constraint, load_spec
from .training import gradients, retrieval
from .transforms import SumOfGamma

__version__ = "0.1.0"

# Quiet unless the application configures logging: the backend chosen and the
# solver time per batch are logged at DEBUG under "combolayer".
_logging.getLogger(__name__).addHandler(_logging.NullHandler())

__all__ = [
    "AIMLE",
    "ILP",
    "IMLE",
    "AffineHull",
    "BackendConfig",
    "BackendUnavailable",
    "Blackbox",
    "CombOptNet",
    "ComboLayer",
    "ComboLayerError",
    "Constraint",
    "Identity",
    "InfeasibleError",
    "InputError",
    "InputTypeError",
    "Margin",
    "NoIntegerWarning",
    "Perturbed",
    "RegularizedFrankWolfe",
    "ScoreFunction",
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
