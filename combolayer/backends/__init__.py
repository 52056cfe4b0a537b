"""Solver backends: HiGHS, SCIP, cvxpy, networkx, scipy and torch, plus plugins."""

from ..interop.pyepo import PyEPOBackend, from_pyepo
from ..specs.canonical import canonical_form
from .base import Backend, Capability, FunctionBackend, Tier
from .config import BackendConfig
from .outcome import Outcome, settle
from .registry import (
    ENTRY_POINT_GROUP,
    backends,
    capable_backends,
    make_solver,
    register_backend,
    select_backend,
)
from .solver import FunctionKernel, Kernel, RowKernel, Solver, check_costs

__all__ = [
    "ENTRY_POINT_GROUP",
    "Backend",
    "BackendConfig",
    "Capability",
    "FunctionBackend",
    "FunctionKernel",
    "Kernel",
    "Outcome",
    "PyEPOBackend",
    "RowKernel",
    "Solver",
    "Tier",
    "backends",
    "canonical_form",
    "capable_backends",
    "check_costs",
    "from_pyepo",
    "make_solver",
    "register_backend",
    "select_backend",
    "settle",
]
