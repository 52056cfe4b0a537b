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

The cut generation around the solvers lives here too, on symmetric ``(n, n)``
edge-value matrices: exact subtour separation (`violated_subtours`),
the odd-component blossom heuristic (`violated_blossoms`) and a tour
for an upper bound (`guided_tour`). HiGHS's TSP kernel
(`combolayer.backends.highs_tsp`) and SCIP's constraint handler call them.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import model_validator
from scipy.sparse.csgraph import connected_components

from ..errors import InputError
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


#: Up to this many nodes `components` squares a dense reachability matrix, faster
#: than building a sparse graph for scipy at these sizes. Above it OpenBLAS runs the
#: products on a second thread, which is slower and keeps that core spinning.
_DENSE_COMPONENTS_MAX_NODES = 64


def components(adjacency: sp.spmatrix | np.ndarray) -> np.ndarray:
    """The component label of every node of a symmetric 0/1 adjacency matrix,
    labels ``0..k-1`` numbered in the order of each component's first node."""
    n = adjacency.shape[0]
    if sp.issparse(adjacency) or n > _DENSE_COMPONENTS_MAX_NODES:
        return connected_components(sp.csr_matrix(adjacency), directed=False)[1]
    reach = (np.asarray(adjacency, dtype=bool) | np.eye(n, dtype=bool)).astype(np.float32)
    while True:  # doubles the path length covered per step: log2(n) products at most
        grown = ((reach @ reach) > 0).astype(np.float32)
        if np.array_equal(grown, reach):
            break
        reach = grown
    return np.unique(reach.argmax(axis=1), return_inverse=True)[1].reshape(n)


def subtours(adjacency: sp.spmatrix | np.ndarray) -> list[np.ndarray]:
    """The node masks of the connected components of a 0/1 adjacency matrix,
    or ``[]`` when it is a single tour."""
    labels = components(adjacency)
    count = int(labels.max()) + 1
    return [] if count == 1 else [labels == component for component in range(count)]


def tour_segments(adjacency: np.ndarray, max_size: int = 3) -> list[np.ndarray]:
    """Node masks ``S`` whose subtour rows bind at a tour (its symmetric 0/1 adjacency
    matrix): the tour's contiguous segments of ``3 <= |S| <= min(max_size, n / 2)`` nodes.

    ``x(E(S)) = |S| - 1`` holds at a tour only where ``S`` is one of its paths, and
    with the degree rows ``S`` and its complement give the same row, two nodes an
    edge's bound ``x_e <= 1``: ``max_size = n // 2`` lists every binding subtour row.
    The default keeps the three-node ones, ``n`` rows of three edges: all of them
    make CaVE's projection QP much denser and its solve slower
    (benchmarks/cave_pyepo.py; PyEPO's cones: the degree and bound rows, and those
    of the cuts its own solve generated that bind).
    """
    n = len(adjacency)
    adjacency = np.asarray(adjacency, dtype=bool)
    order = [0, int(np.flatnonzero(adjacency[0])[0])]
    while len(order) < n:
        a, b = np.flatnonzero(adjacency[order[-1]])
        order.append(int(b if a == order[-2] else a))
    masks = []
    for size in range(3, min(max_size, n // 2) + 1):
        # at size n / 2 the segment n / 2 positions on is the complement: counted once
        for start in range(n // 2 if 2 * size == n else n):
            mask = np.zeros(n, dtype=bool)
            mask[[order[(start + k) % n] for k in range(size)]] = True
            masks.append(mask)
    return masks


#: A fractional cut counts as violated below ``2 - _CUT_TOLERANCE``.
_CUT_TOLERANCE = 1e-6
#: Edge values at or below this are outside the support graph.
_SUPPORT_TOLERANCE = 1e-6
#: Edges at least ``1 - _ONE_TOLERANCE`` are shrunk before Stoer-Wagner.
_ONE_TOLERANCE = 1e-9


def violated_subtours(x: np.ndarray, below: float = 2.0 - _CUT_TOLERANCE) -> list[np.ndarray]:
    """Node masks S with ``x(delta(S)) < below`` for a symmetric ``(n, n)`` matrix of
    edge values with degree 2 at every node (an LP optimum of the degree rows).

    Exact: ``[]`` means every subtour inequality holds. The components of the
    support graph when there are several (nothing crosses them); else the cuts
    below ``below`` among Stoer-Wagner's phase cuts, whose minimum is the
    global minimum cut, on the graph with every edge of value 1 shrunk first
    (Padberg-Rinaldi: with degree 2 at both ends, a cut S separating the ends
    of a 1-edge uv, u in S, gives S - u with a value no larger, so some
    minimum cut keeps u and v together).
    """
    labels = components(x > _SUPPORT_TOLERANCE)
    if labels.max() > 0:
        return [labels == k for k in range(int(labels.max()) + 1)]
    paths = components(x >= 1.0 - _ONE_TOLERANCE)
    order = np.argsort(paths, kind="stable")
    starts = np.searchsorted(paths[order], np.arange(int(paths.max()) + 1))
    shrunk = np.add.reduceat(np.add.reduceat(x[np.ix_(order, order)], starts, axis=0),
                             starts, axis=1)  # summed over each path's nodes
    return [inside[paths] for inside in _stoer_wagner_cuts(shrunk, below)]


def violated_blossoms(x: np.ndarray, tolerance: float = _CUT_TOLERANCE
                      ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Blossom (2-matching) inequalities ``x(E(H)) + x(T) <= |H| + (|T| - 1) / 2`` that a
    symmetric ``(n, n)`` matrix of edge values with degree 2 violates, as pairs of
    the handle's node mask and the teeth, a ``(|T|, 2)`` array of (inside, outside)
    nodes.

    The odd-component heuristic of Padberg and Hong: each handle is a component
    of the fractional edges, its teeth the edges of value 1 leaving it (a node
    outside that two teeth reach joins the handle, so the teeth are disjoint);
    an odd number of at least 3 teeth gives a violated inequality. Valid for
    every tour, so these rows never cut one off.
    """
    fractional = (x > tolerance) & (x < 1.0 - tolerance)
    ones = x >= 1.0 - tolerance
    labels = components(fractional)
    found = []
    for label in range(int(labels.max()) + 1):
        handle = labels == label
        if handle.sum() < 3:
            continue  # a node without fractional edges
        while True:
            inside, outside = np.nonzero(ones & handle[:, None] & ~handle[None, :])
            nodes, hits = np.unique(outside, return_counts=True)
            if not (hits > 1).any():
                break
            handle = handle.copy()
            handle[nodes[hits > 1]] = True
        teeth = np.stack([inside, outside], axis=1)
        if len(teeth) < 3 or len(teeth) % 2 == 0 or len(np.unique(inside)) < len(inside):
            continue
        value = x[np.ix_(handle, handle)].sum() / 2 + x[inside, outside].sum()
        if value > handle.sum() + (len(teeth) - 1) / 2 + tolerance:
            found.append((handle, teeth))
    return found


def guided_tour(x: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """A good tour (the order of the nodes) for a symmetric ``(n, n)`` cost matrix,
    guided by LP edge values ``x``: the greedy edge heuristic taking edges by
    decreasing ``x``, then by increasing cost, then 2-opt and Or-opt moves until
    none improves (`local_search`). Only an upper bound for the exact
    solvers: any tour will do."""
    n = len(cost)
    iu, ju = np.triu_indices(n, k=1)
    order = np.lexsort((cost[iu, ju], -np.round(x[iu, ju], 6)))
    degree = np.zeros(n, dtype=int)
    root = np.arange(n)
    neighbours: list[list[int]] = [[] for _ in range(n)]

    def find(node: int) -> int:
        while root[node] != node:
            root[node] = root[root[node]]
            node = int(root[node])
        return node

    taken = 0
    for edge in order:
        i, j = int(iu[edge]), int(ju[edge])
        if degree[i] == 2 or degree[j] == 2 or find(i) == find(j):
            continue
        root[find(i)] = find(j)
        degree[i] += 1
        degree[j] += 1
        neighbours[i].append(j)
        neighbours[j].append(i)
        taken += 1
        if taken == n - 1:
            break
    first, last = np.flatnonzero(degree < 2)[[0, -1]]  # the path's two ends
    neighbours[first].append(int(last))
    neighbours[last].append(int(first))
    tour = [0, neighbours[0][0]]
    while len(tour) < n:
        a, b = neighbours[tour[-1]]
        tour.append(b if a == tour[-2] else a)
    return local_search(np.array(tour), cost)


def iterated_local_search(tour: np.ndarray, cost: np.ndarray, kicks: int,
                          seed: int = 0, stop_at: float = -np.inf) -> np.ndarray:
    """A shorter tour, if ``kicks`` random double-bridge moves (segments A B C D
    reordered A C B D, which 2-opt and Or-opt cannot undo), each followed by
    `local_search`, find one (Martin, Otto and Felten's iterated local search).
    Stops early at a tour no longer than ``stop_at`` (a lower bound: nothing is
    shorter). Only an upper bound for the exact solvers; seeded, so the same tour
    comes back for the same input."""
    n = len(tour)
    if n < 8:
        return tour
    rng = np.random.default_rng(seed)
    best, best_length = tour, float(cost[tour, np.roll(tour, -1)].sum())
    for _ in range(kicks):
        if best_length <= stop_at + _min_gain(best, cost):
            break
        i, j, k = np.sort(rng.choice(np.arange(1, n), size=3, replace=False))
        kicked = np.concatenate([best[:i], best[j:k], best[i:j], best[k:]])
        candidate = local_search(kicked, cost)
        length = float(cost[candidate, np.roll(candidate, -1)].sum())
        if length < best_length - _min_gain(best, cost):
            best, best_length = candidate, length
    return best


def local_search(tour: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """Apply the best 2-opt move, else the best Or-opt move, while one shortens the tour."""
    while (moved := _two_opt_move(tour, cost)) is not None or (
            moved := _or_opt_move(tour, cost)) is not None:
        tour = moved
    return tour


def _min_gain(tour: np.ndarray, cost: np.ndarray) -> float:
    """Gains at or below this (relative to the tour's length) are rounding noise."""
    return 1e-12 * max(1.0, float(cost[tour, np.roll(tour, -1)].sum()))


def _two_opt_move(tour: np.ndarray, cost: np.ndarray) -> np.ndarray | None:
    """The tour after the best 2-opt move (reverse a segment), or None if none gains."""
    n = len(tour)
    a, b = tour, np.roll(tour, -1)
    kept = cost[a, b]
    gain = kept[:, None] + kept[None, :] - cost[a[:, None], a[None, :]] - cost[
        b[:, None], b[None, :]]
    gain = np.triu(gain, k=2)
    gain[0, n - 1] = 0.0  # those two edges are adjacent
    i, j = divmod(int(gain.argmax()), n)
    if gain[i, j] <= _min_gain(tour, cost):
        return None
    return np.concatenate([tour[:i + 1], tour[i + 1:j + 1][::-1], tour[j + 1:]])


def _or_opt_move(tour: np.ndarray, cost: np.ndarray, max_length: int = 3) -> np.ndarray | None:
    """The tour after the best Or-opt move (a segment of 1..``max_length`` nodes put
    between two other neighbours, either way round), or None if none gains."""
    n = len(tour)
    position = np.arange(n)
    a, b = tour, np.roll(tour, -1)  # edge j joins a[j] and b[j]
    best, move = _min_gain(tour, cost), None
    for length in range(1, min(max_length, n - 3) + 1):
        first, last = tour, np.roll(tour, -(length - 1))  # segment i: first[i]..last[i]
        before, after = np.roll(tour, 1), np.roll(tour, -length)
        removed = cost[before, first] + cost[last, after] - cost[before, after]
        forward = cost[a[None, :], first[:, None]] + cost[last[:, None], b[None, :]]
        backward = cost[a[None, :], last[:, None]] + cost[first[:, None], b[None, :]]
        gain = removed[:, None] - np.minimum(forward, backward) + cost[a, b][None, :]
        offset = (position[None, :] - position[:, None]) % n
        gain[(offset >= n - 1) | (offset < length)] = -np.inf  # edges touching segment i
        i, j = divmod(int(gain.argmax()), n)
        if gain[i, j] > best:
            best, move = gain[i, j], (i, j, length, bool(forward[i, j] > backward[i, j]))
    if move is None:
        return None
    i, j, length, reverse = move
    rotated = np.roll(tour, -i)  # the segment first, then the rest in tour order
    segment, rest = rotated[:length], rotated[length:]
    k = (j - i - length) % n  # edge j starts at rest[k]
    return np.concatenate([rest[:k + 1], segment[::-1] if reverse else segment, rest[k + 1:]])


@dataclasses.dataclass(frozen=True)
class SubtourSeparator:
    """Cut-set inequalities ``sum_{i in S, j not in S} y_ij >= 2`` on the ``(n, n)``
    outputs of the lazy form: for every connected component S of an integer
    candidate that is not a single tour, and (`fractional`) for LP optima."""

    num_nodes: int

    def fractional(self, x: np.ndarray, max_cuts: int = 8) -> list[Cut]:
        """Violated cut-set inequalities for a fractional solution, exact
        (`violated_subtours`): an empty answer proves every subtour
        inequality holds."""
        n = self.num_nodes
        values = np.asarray(x[: n * n]).reshape(n, n)
        return [self._cut(inside)
                for inside in violated_subtours((values + values.T) / 2)[:max_cuts]]

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

    Args:
        num_nodes: the number of cities.
        sense: ``"min"`` (default, the shortest tour) or ``"max"``.

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
            raise InputError(f"num_nodes must be >= 3 for a tour, got {self.num_nodes}")
        return self

    @property
    def cost_shape(self) -> tuple[int, ...]:
        return (self.num_nodes, self.num_nodes)

    def _upper(self, num_vars: int) -> np.ndarray:
        upper = np.ones(num_vars)
        upper[: self.num_nodes**2] = 1.0 - np.eye(self.num_nodes).ravel()  # no self-loops
        return upper

    def model_size(self) -> tuple[int, int]:
        n = self.num_nodes
        return 2 * n * n + n, 10 * n * n  # MTZ: outputs, arcs, orders; ~10 entries per pair

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

    def binding_cuts(self, y: np.ndarray) -> sp.csr_matrix:
        """The lazy rows that bind at the tour ``y`` (an ``(n, n)`` adjacency matrix),
        in ``<=`` orientation on the outputs: ``sum_{i < j in S} y_ij <= |S| - 1``
        for every `tour_segments` ``S``, the part of the formulation's binding
        constraints that its lazy form does not list."""
        n = self.num_nodes
        upper = np.triu(np.ones((n, n), dtype=bool), k=1)
        rows = [(np.outer(mask, mask) & upper).ravel().astype(np.float64)
                for mask in tour_segments(np.asarray(y).reshape(n, n) > 0.5)]
        return sp.csr_matrix(np.array(rows).reshape(len(rows), n * n))
