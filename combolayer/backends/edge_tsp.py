"""The edge-form TSP (`combolayer.problems.TSPEdges`) solved by the matrix form's solver.

One cost per undirected edge becomes a symmetric ``(n, n)`` matrix
(`combolayer.problems.tsp_edges.edges_to_matrix`, twice each tour's length: the
same tours), the matrix TSP's ``"auto"`` solver finds the tour exactly (HiGHS's
TSP kernel, Held-Karp for small ones) and its adjacency matrix is read back per
edge. Nothing about tours is solved twice in the library.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..problems.tsp import TSP
from ..problems.tsp_edges import TSPEdges, edges_to_matrix, matrix_to_edges
from ..specs.base import Spec
from .base import Backend, Tier
from .config import BackendConfig
from .registry import make_solver, register_backend
from .solver import FunctionKernel, Kernel


@register_backend
class MatrixTSPBackend(Backend):
    """`TSPEdges` through the exact solver of the matrix-form `TSP` (its ``"auto"``)."""

    name: ClassVar[str] = "tsp_matrix"
    kinds: ClassVar[frozenset[str]] = frozenset({"tsp_edges"})
    native_tier: ClassVar[int] = Tier.SPECIALISED

    @classmethod
    def ignored_limits(cls, config: BackendConfig) -> str | None:
        return None  # handed to the matrix form's solver, which says if it ignores them

    def compile(self, spec: Spec, config: BackendConfig) -> Kernel:
        assert isinstance(spec, TSPEdges)
        n = spec.num_nodes
        # the costs arrive in minimisation sense, whatever the spec's sense
        inner = make_solver(TSP(num_nodes=n), config.model_copy(update={"name": "auto"}))

        def solve(costs: np.ndarray) -> np.ndarray:
            return matrix_to_edges(inner.solve(edges_to_matrix(costs, n)), n)

        return FunctionKernel(solve)
