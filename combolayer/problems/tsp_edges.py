"""The travelling salesman problem over its ``n (n - 1) / 2`` undirected edges: PyEPO's form.

`TSPEdges` takes one cost per edge ``(i, j)``, ``i < j``, in
``itertools.combinations(range(n), 2)`` order (PyEPO's ``tspDFJModel``,
``tspGGModel`` and ``tspMTZModel``, and ``scipy.spatial.distance.pdist``), and
returns the 0/1 vector of the tour's edges, so ``<c, y>`` is the tour's length.

It is the matrix form `combolayer.problems.TSP` read through a linear map:
`edges_to_matrix` puts ``c_e`` at ``(i, j)`` and ``(j, i)``, whose matrix
objective is twice the edge objective (same tours), and `matrix_to_edges`
reads a tour's adjacency matrix back. The fast exact solver is the matrix
form's through that map (`combolayer.backends.edge_tsp`); the generic MIP
backends compile the symmetric formulation, degree 2 at every node with the
subtour elimination ``x(E(S)) <= |S| - 1`` (PyEPO's DFJ rows) as lazy cuts;
`to_ilp` is a compact Miller-Tucker-Zemlin formulation for backends without
lazy cuts and for `combolayer.analyze`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import model_validator

from ..errors import InputError
from ..specs.base import ILP, Sense, Spec, register_spec
from ..specs.canonical import Cut
from .tsp import TSP, subtours, tour_segments, violated_subtours

__all__ = ["TSPEdges"]


@functools.cache
def edge_pairs(num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The end nodes ``(i, j)``, ``i < j``, of every edge in PyEPO's order
    (``itertools.combinations``'s: the upper triangle row by row), built once per size
    and read-only: every solve and every cut reads them."""
    i, j = np.triu_indices(num_nodes, k=1)
    i.flags.writeable = j.flags.writeable = False
    return i, j


def edges_to_matrix(edge_values: np.ndarray, num_nodes: int) -> np.ndarray:
    """``(..., E)`` edge values as symmetric ``(..., n, n)`` matrices with a zero diagonal."""
    i, j = edge_pairs(num_nodes)
    edge_values = np.asarray(edge_values, dtype=np.float64)
    matrix = np.zeros((*edge_values.shape[:-1], num_nodes, num_nodes))
    matrix[..., i, j] = edge_values
    matrix[..., j, i] = edge_values
    return matrix


def matrix_to_edges(matrix: np.ndarray, num_nodes: int) -> np.ndarray:
    """The upper triangle of ``(..., n, n)`` matrices as ``(..., E)`` edge values."""
    i, j = edge_pairs(num_nodes)
    return np.asarray(matrix)[..., i, j]


@dataclasses.dataclass(frozen=True)
class EdgeSubtourSeparator:
    """Subtour rows ``x(E(S)) <= |S| - 1`` on the edge outputs: one per connected
    component ``S`` of an integer candidate that is not a single tour, and
    (`fractional`) the exact separation of an LP optimum."""

    num_nodes: int

    def __call__(self, x: np.ndarray, threshold: float = 0.5) -> list[Cut]:
        n = self.num_nodes
        adjacency = edges_to_matrix(np.asarray(x)[: n * (n - 1) // 2], n) > threshold
        return [self.cut(inside) for inside in subtours(adjacency)]

    def fractional(self, x: np.ndarray, max_cuts: int = 8) -> list[Cut]:
        n = self.num_nodes
        values = edges_to_matrix(np.asarray(x)[: n * (n - 1) // 2], n)
        return [self.cut(inside) for inside in violated_subtours(values)[:max_cuts]]

    def cut(self, inside: np.ndarray) -> Cut:
        i, j = edge_pairs(self.num_nodes)
        index = np.flatnonzero(inside[i] & inside[j])
        return Cut(index=index, value=np.ones(len(index)), lower=-np.inf,
                   upper=float(inside.sum()) - 1.0)


@register_spec
class TSPEdges(Spec):
    """A cheapest tour through ``num_nodes`` cities; cost: one per undirected edge.

    The cost has ``n (n - 1) / 2`` entries, edge ``(i, j)``, ``i < j``, in
    ``itertools.combinations(range(n), 2)`` order, PyEPO's TSP models' order;
    ``y`` is 0/1 per edge, the tour's ``n`` edges, and ``<c, y>`` is the tour's
    length. `combolayer.problems.TSP` is the same problem on ``(n, n)`` matrices
    (see `edges_to_matrix`).

    Args:
        num_nodes: the number of cities.
        sense: ``"min"`` (default, the shortest tour) or ``"max"``.

    Examples:
        >>> import numpy as np, combolayer as cl
        >>> cost = np.array([1.0, 2, 4, 8, 16, 32])  # edges 01 02 03 12 13 23
        >>> y = cl.make_solver(cl.problems.TSPEdges(4)).solve(cost)
        >>> y.tolist(), float(y @ cost)   # the tour 0-2-1-3-0
        ([0.0, 1.0, 1.0, 1.0, 1.0, 0.0], 30.0)
    """

    kind: Literal["tsp_edges"] = "tsp_edges"
    num_nodes: int
    sense: Sense = "min"

    _label_fields: ClassVar[tuple[str, ...]] = ("num_nodes",)

    @model_validator(mode="after")
    def _check(self) -> TSPEdges:
        if self.num_nodes < 3:
            raise InputError(f"num_nodes must be >= 3 for a tour, got {self.num_nodes}")
        return self

    @property
    def num_edges(self) -> int:
        return self.num_nodes * (self.num_nodes - 1) // 2

    @property
    def cost_shape(self) -> tuple[int, ...]:
        return (self.num_edges,)

    def as_matrix_tsp(self) -> TSP:
        """The matrix form of the same problem (`edges_to_matrix` maps the costs)."""
        return TSP(num_nodes=self.num_nodes, sense=self.sense)

    def model_size(self) -> tuple[int, int]:
        n = self.num_nodes
        return self.num_edges + n * n + n, 10 * n * n

    def degree_rows(self, num_vars: int) -> sp.csr_matrix:
        """``x(delta(v)) = 2`` for every node ``v``, on the first ``E`` of ``num_vars``."""
        i, j = edge_pairs(self.num_nodes)
        e = np.arange(len(i))
        return sp.csr_matrix((np.ones(2 * len(e)),
                              (np.concatenate([i, j]), np.concatenate([e, e]))),
                             shape=(self.num_nodes, num_vars))

    def to_ilp(self) -> ILP:
        """The compact MTZ formulation: edges ``y`` (E), then arcs ``a`` (n*n) and
        orders ``u`` (n) as auxiliaries, with ``y_ij = a_ij + a_ji``, one arc out of
        and into every node, ``u_i - u_j + n a_ij <= n - 1`` for ``i, j >= 1``."""
        n, num_edges = self.num_nodes, self.num_edges
        nn = n * n
        num_vars = num_edges + nn + n
        i, j = edge_pairs(n)
        e = np.arange(num_edges)
        link = sp.csr_matrix(
            (np.concatenate([np.ones(num_edges), -np.ones(num_edges), -np.ones(num_edges)]),
             (np.concatenate([e, e, e]),
              np.concatenate([e, num_edges + i * n + j, num_edges + j * n + i]))),
            shape=(num_edges, num_vars))
        ai, aj = np.nonzero(~np.eye(n, dtype=bool))
        out_rows = sp.csr_matrix((np.ones(len(ai)), (ai, num_edges + ai * n + aj)),
                                 shape=(n, num_vars))
        in_rows = sp.csr_matrix((np.ones(len(ai)), (aj, num_edges + ai * n + aj)),
                                shape=(n, num_vars))
        mask = (ai > 0) & (aj > 0)
        mi, mj = ai[mask], aj[mask]
        r = np.arange(len(mi))
        base = num_edges + nn
        mtz = sp.csr_matrix(
            (np.concatenate([np.ones(len(r)), -np.ones(len(r)), np.full(len(r), float(n))]),
             (np.concatenate([r, r, r]),
              np.concatenate([base + mi, base + mj, num_edges + mi * n + mj]))),
            shape=(len(r), num_vars))
        A_eq = sp.vstack([self.degree_rows(num_vars), link, out_rows, in_rows])
        b_eq = np.concatenate([np.full(n, 2.0), np.zeros(num_edges), np.ones(2 * n)])
        lower = np.zeros(num_vars)
        upper = np.ones(num_vars)
        upper[num_edges: base] = 1.0 - np.eye(n).ravel()
        lower[base + 1:] = 1.0
        upper[base] = 0.0
        upper[base + 1:] = n - 1.0
        integrality = ["binary"] * base + ["continuous"] * n
        return ILP.from_matrices(shape=[num_edges], A_ub=mtz, b_ub=np.full(len(r), n - 1.0),
                                 A_eq=A_eq, b_eq=b_eq, integrality=integrality,
                                 lower=lower, upper=upper, sense=self.sense, num_aux=nn + n)

    def degree_ilp(self) -> ILP:
        """The degree-2 relaxation: edges only, no subtour elimination."""
        return ILP.from_matrices(shape=[self.num_edges],
                                 A_eq=self.degree_rows(self.num_edges),
                                 b_eq=np.full(self.num_nodes, 2.0), sense=self.sense)

    def to_canonical(self, lazy: bool = True):
        if not lazy:
            return self.to_ilp().to_canonical()
        form = self.degree_ilp().to_canonical()
        return dataclasses.replace(form, separator=EdgeSubtourSeparator(self.num_nodes))

    def binding_cuts(self, y: np.ndarray) -> sp.csr_matrix:
        """The lazy rows that bind at the tour ``y``, in ``<=`` orientation on the
        outputs (`combolayer.problems.tsp.tour_segments`): the part of the formulation's binding
        constraints that its lazy form does not list."""
        i, j = edge_pairs(self.num_nodes)
        rows = [(mask[i] & mask[j]).astype(np.float64)
                for mask in tour_segments(edges_to_matrix(y, self.num_nodes) > 0.5)]
        return sp.csr_matrix(np.array(rows).reshape(len(rows), self.num_edges))
