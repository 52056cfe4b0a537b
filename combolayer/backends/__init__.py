"""Solver backends: HiGHS, SCIP, cvxpy, networkx, scipy and torch, plus plugins."""

from .config import BackendConfig
from .registry import (
    ENTRY_POINT_GROUP,
    backends,
    canonical_form,
    capable_backends,
    make_solver,
    register_backend,
    select_backend,
)
from .solver import Kernel, Solver, check_costs

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendConfig",
    "Kernel",
    "Solver",
    "backends",
    "canonical_form",
    "capable_backends",
    "check_costs",
    "make_solver",
    "register_backend",
    "select_backend",
]
