"""The travelling salesman problem as a symmetric adjacency matrix.

Two exact formulations over the same ``(n, n)`` outputs (zero diagonal,
symmetric, degree 2):

- ``to_canonical(lazy=True)``: only the degree and symmetry rows, plus a
  separator that finds subtours in an integer candidate and returns the
  violated cut-set inequalities; HiGHS re-solves with them, SCIP separates
  them inside one solve. This is what the MIP backends compile.
- ``to_ilp()`` (and ``to_canonical(lazy=False)``): a compact
  Miller-Tucker-Zemlin formulation with directed arcs and orders as
  auxiliaries, for backends without lazy constraints (cvxpy, analysis).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import model_validator
from scipy.sparse.csgraph import connected_components

from ..specs.base import ILP, Sense, Spec, register_spec
from ..specs.canonical import Cut

__all__ = ["TSP"]


def _degree_rows(n: int, num_vars: int) -> tuple[sp.csr_matrix, np.ndarray, sp.csr_matrix]:
    """Degree-2 rows on the adjacency outputs, and symmetry rows ``y_ij - y_ji = 0`` (i < j)."""
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    degree = sp.csr_matrix((np.ones(len(i)), (i, i * n + j)), shape=(n, num_vars))
    iu, ju = np.triu_indices(n, k=1)
    k = np.arange(len(iu))
    symmetry = sp.csr_matrix(
        (np.concatenate([np.ones(len(k)), -np.ones(len(k))]),
         (np.concatenate([k, k]), np.concatenate([iu * n + ju, ju * n + iu]))),
        shape=(len(k), num_vars))
    return degree, np.full(n, 2.0), symmetry


def subtours(adjacency: sp.spmatrix | np.ndarray) -> list[np.ndarray]:
    """The node masks of the connected components of a 0/1 adjacency matrix,
    or ``[]`` when it is a single tour."""
    count, labels = connected_components(sp.csr_matrix(adjacency), directed=False)
    return [] if count == 1 else [labels == component for component in range(count)]


#: A fractional cut counts as violated below ``2 - _CUT_TOLERANCE``.
_CUT_TOLERANCE = 1e-6
#: Cut pool size per node (see :attr:`SubtourSeparator.pool_size`); 0 turns the
#: pool off, the fastest once the LP rounds find the cuts (docs/problems.md).
CUT_POOL_PER_NODE = 0


@dataclasses.dataclass(frozen=True)
class SubtourSeparator:
    """Cut-set inequalities ``sum_{i in S, j not in S} y_ij >= 2`` for every connected
    component S of an integer candidate that is not a single tour."""

    num_nodes: int

    @property
    def pool_size(self) -> int:
        """How many recently binding cuts a solver may keep and seed every solve with
        (the cuts hold for any costs): measured best in docs/problems.md."""
        return CUT_POOL_PER_NODE * self.num_nodes

    def fractional(self, x: np.ndarray, max_cuts: int = 8) -> list[Cut]:
        """Violated cut-set inequalities for a fractional solution: the components of
        its support graph (nothing crosses them), else the cuts below 2 that
        Stoer-Wagner's phases find (their minimum is the global minimum cut, so
        an empty answer proves every subtour inequality holds)."""
        cuts = self(x, threshold=1e-6)
        if cuts:
            return cuts
        n = self.num_nodes
        values = np.asarray(x[: n * n]).reshape(n, n)
        return [self._cut(inside) for inside in
                _stoer_wagner_cuts((values + values.T) / 2, 2.0 - _CUT_TOLERANCE)[:max_cuts]]

    def __call__(self, x: np.ndarray, threshold: float = 0.5) -> list[Cut]:
        n = self.num_nodes
        return [self._cut(inside)
                for inside in subtours(np.asarray(x[: n * n]).reshape(n, n) > threshold)]

    def _cut(self, inside: np.ndarray) -> Cut:
        n = self.num_nodes
        i, j = np.nonzero(np.outer(inside, ~inside))
        return Cut(index=i * n + j, value=np.ones(len(i)), lower=2.0, upper=np.inf)


def _stoer_wagner_cuts(weights: np.ndarray, below: float) -> list[np.ndarray]:
    """Node masks of the distinct cuts-of-the-phase of Stoer-Wagner on a symmetric
    weight matrix whose value is below ``below`` (the global minimum cut is one
    of the phases, so ``[]`` means no cut is below it)."""
    n = len(weights)
    w = weights.astype(np.float64, copy=True)
    np.fill_diagonal(w, 0.0)
    members = np.eye(n, dtype=bool)  # row v: the original nodes merged into v
    alive = np.ones(n, dtype=bool)
    found: dict[bytes, np.ndarray] = {}
    for _ in range(n - 1):
        nodes = np.flatnonzero(alive)
        added = np.zeros(n, dtype=bool)
        key = np.where(alive, 0.0, -np.inf)
        prev = last = int(nodes[0])
        for _ in range(len(nodes)):
            prev, last = last, int(np.argmax(key))
            added[last] = True
            key += w[last]
            key[added] = -np.inf
        # key of `last` when it was added is the cut of the phase: its connection
        # to everything added before it
        cut_value = float(w[last, nodes].sum())
        if cut_value < below:
            inside = members[last].copy()
            found.setdefault(inside.tobytes(), inside)
        w[prev] += w[last]
        w[:, prev] += w[:, last]
        w[prev, prev] = 0.0
        w[last] = 0.0
        w[:, last] = 0.0
        members[prev] |= members[last]
        alive[last] = False
    return list(found.values())


@register_spec
class TSP(Spec):
    """A cheapest tour through ``num_nodes`` cities; cost ``(n, n)``, any matrix.

    ``y`` is the symmetric 0/1 adjacency matrix of the tour, so ``<w, y>`` equals
    the tour's length under the symmetrised cost ``w + w.T`` (twice the length
    for a symmetric ``w``).

    Examples:
        >>> import numpy as np, combolayer as cl
        >>> y = cl.make_solver(cl.problems.TSP(4)).solve(np.ones((4, 4)))
        >>> y.sum(axis=1).tolist()            # every city has two tour neighbours
        [2.0, 2.0, 2.0, 2.0]
    """

    kind: Literal["tsp"] = "tsp"
    num_nodes: int
    sense: Sense = "min"

    _label_fields: ClassVar[tuple[str, ...]] = ("num_nodes",)

    @model_validator(mode="after")
    def _check(self) -> TSP:
        if self.num_nodes < 3:
            raise ValueError(f"num_nodes must be >= 3 for a tour, got {self.num_nodes}")
        return self

    @property
    def cost_shape(self) -> tuple[int, ...]:
        return (self.num_nodes, self.num_nodes)

    def _upper(self, num_vars: int) -> np.ndarray:
        upper = np.ones(num_vars)
        upper[: self.num_nodes**2] = 1.0 - np.eye(self.num_nodes).ravel()  # no self-loops
        return upper

    def to_ilp(self) -> ILP:
        """The compact MTZ formulation: outputs ``y`` (n*n), then arcs ``a`` (n*n), then
        orders ``u`` (n) with ``u_0 = 0``, ``1 <= u_i <= n - 1``."""
        n = self.num_nodes
        nn = n * n
        num_vars = 2 * nn + n
        degree, b_degree, symmetry = _degree_rows(n, num_vars)
        i, j = np.nonzero(~np.eye(n, dtype=bool))
        k = np.arange(len(i))
        # y_ij = a_ij + a_ji
        link = sp.csr_matrix(
            (np.concatenate([np.ones(len(k)), -np.ones(len(k)), -np.ones(len(k))]),
             (np.concatenate([k, k, k]),
              np.concatenate([i * n + j, nn + i * n + j, nn + j * n + i]))),
            shape=(len(k), num_vars))
        out_rows = sp.csr_matrix((np.ones(len(i)), (i, nn + i * n + j)), shape=(n, num_vars))
        in_rows = sp.csr_matrix((np.ones(len(i)), (j, nn + i * n + j)), shape=(n, num_vars))
        # MTZ: u_i - u_j + n a_ij <= n - 1 for i, j >= 1
        mask = (i > 0) & (j > 0)
        mi, mj = i[mask], j[mask]
        r = np.arange(len(mi))
        mtz = sp.csr_matrix(
            (np.concatenate([np.ones(len(r)), -np.ones(len(r)), np.full(len(r), float(n))]),
             (np.concatenate([r, r, r]),
              np.concatenate([2 * nn + mi, 2 * nn + mj, nn + mi * n + mj]))),
            shape=(len(r), num_vars))
        A_eq = sp.vstack([degree, symmetry, link, out_rows, in_rows])
        b_eq = np.concatenate([b_degree, np.zeros(symmetry.shape[0] + link.shape[0]),
                               np.ones(2 * n)])
        lower = np.zeros(num_vars)
        upper = self._upper(num_vars)
        upper[nn: 2 * nn] = 1.0 - np.eye(n).ravel()
        lower[2 * nn + 1:] = 1.0
        upper[2 * nn] = 0.0
        upper[2 * nn + 1:] = n - 1.0
        integrality = ["binary"] * (2 * nn) + ["continuous"] * n
        return ILP.from_matrices(shape=[n, n], A_ub=mtz, b_ub=np.full(len(r), n - 1.0),
                                 A_eq=A_eq, b_eq=b_eq, integrality=integrality,
                                 lower=lower, upper=upper, sense=self.sense, num_aux=nn + n)

    def degree_ilp(self) -> ILP:
        """The degree-2 relaxation: outputs only, symmetric, no subtour elimination."""
        n = self.num_nodes
        degree, b_degree, symmetry = _degree_rows(n, n * n)
        return ILP.from_matrices(shape=[n, n], A_eq=sp.vstack([degree, symmetry]),
                                 b_eq=np.concatenate([b_degree, np.zeros(symmetry.shape[0])]),
                                 upper=self._upper(n * n), sense=self.sense)

    def to_canonical(self, lazy: bool = True):
        if not lazy:
            return self.to_ilp().to_canonical()
        form = self.degree_ilp().to_canonical()
        return dataclasses.replace(form, separator=SubtourSeparator(self.num_nodes))
