"""Specialised exact solvers on numpy/scipy: shortest paths, assignment, knapsack.

- Shortest paths: a dynamic program over a topological order when the graph is
  acyclic (any costs; vectorised over the batch), otherwise Dijkstra
  (``scipy.sparse.csgraph``) on a CSR graph built once, whose weights alone
  change per solve. Negative costs on a graph with cycles raise unless the
  spec says ``negative_costs="clip"``.
- Matching: ``scipy.optimize.linear_sum_assignment``, on the costs or, when not
  every member of the smaller side is matched (``cover="none"``, bounded pairs),
  on the square padding of ``problems.matching.padded_costs``.
- TSP: up to ``TSP_DP_MAX_NODES`` cities, the Held-Karp dynamic program,
  batched and first for ``auto`` (faster than the MIP backends at these sizes,
  measured by benchmarks/tsp_backends.py); above that
  ``scipy.optimize.milp`` over the n(n-1)/2 symmetric edges, re-solved with
  subtour cuts, which ranks last.
- Knapsack: a dynamic program over integer weights, a table of
  ``prod(capacities + 1)`` states per item, batched (weights with one or two
  decimals are scaled to integers first). Faster than SCIP and HiGHS at 2x32
  and 2x100 (benchmarks/problems.py). Other weights, or tables above
  ``KNAPSACK_MAX_WORK``, are left to the MIP backends.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse import csgraph

from ..errors import InfeasibleError
from ..problems import TSP, GridShortestPath, Knapsack, Matching, ShortestPath
from ..problems.matching import padded_costs
from ..problems.shortest_path import clip_negative_costs, topological_order
from ..problems.tsp import subtours
from ..problems.tsp_edges import TSPEdges, edge_pairs
from ..specs.base import Spec
from .base import Capability, FunctionBackend, Tier
from .outcome import Outcome, Solved, joined, settle
from .registry import register_backend
from .solver import KernelDefaults

#: Largest ``num_items * prod(capacities + 1)`` the knapsack DP takes on.
KNAPSACK_MAX_WORK = 5e7
#: Above this many table cells per item SCIP beats the DP (set by
#: benchmarks/problems.py).
KNAPSACK_MAX_CELLS_VS_SCIP = 50_000
#: Cells of the knapsack DP table per chunk of the batch (memory bound).
_KNAPSACK_CHUNK_CELLS = 2_000_000
#: Largest TSP the Held-Karp DP solves (O(2^n n^2) per instance): its time doubles
#: per city, and above this HiGHS is faster (set by benchmarks/tsp_backends.py).
TSP_DP_MAX_NODES = 12
#: Candidate cells of one Held-Karp layer per chunk of the batch (memory bound).
_TSP_CHUNK_CELLS = 4_000_000


# -- shortest paths ---------------------------------------------------------------


@dataclass(frozen=True)
class DagPlan:
    """A DAG's arcs grouped by the level of their head (longest-path depth), built once:
    every arc entering a level starts at a lower level, so one level is relaxed at once."""

    num_nodes: int
    source: int
    target: int
    tails: np.ndarray
    #: per level: (head nodes, padded (nodes, width) table of entering arcs, valid mask)
    levels: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]
    #: ``(num_paths, num_arcs)`` 0/1 arc indicators of every source-target path, when
    #: there are few enough (`MAX_ENUMERATED_PATHS`); then a solve is one matmul
    #: and an argmin instead of a Python loop over the levels.
    path_arcs: np.ndarray | None = None

    @classmethod
    def build(cls, num_nodes: int, tails: np.ndarray, heads: np.ndarray, order: np.ndarray,
              source: int, target: int) -> DagPlan:
        level = np.zeros(num_nodes, dtype=np.int64)
        for u in order:
            succ = heads[tails == u]
            level[succ] = np.maximum(level[succ], level[u] + 1)
        levels = []
        for lv in range(1, int(level.max()) + 1):
            # arcs into the source lie on no path from it (acyclic)
            arcs = np.flatnonzero((level[heads] == lv) & (heads != source))
            if arcs.size == 0:
                continue
            nodes, slot = np.unique(heads[arcs], return_inverse=True)
            # rank of each arc among the arcs entering the same node, in arc-index order
            by_slot = np.argsort(slot, kind="stable")
            starts = np.searchsorted(slot[by_slot], np.arange(nodes.size))
            rank = np.empty(arcs.size, dtype=np.int64)
            rank[by_slot] = np.arange(arcs.size) - np.repeat(starts, np.bincount(slot))
            table = np.zeros((nodes.size, int(np.bincount(slot).max())), dtype=np.int64)
            valid = np.zeros(table.shape, dtype=bool)
            table[slot, rank] = arcs
            valid[slot, rank] = True
            levels.append((nodes, table, valid))
        path_arcs = _enumerate_paths(num_nodes, tails, heads, order, source, target)
        return cls(num_nodes, source, target, tails, tuple(levels), path_arcs)

    def paths(self, arc_costs: np.ndarray) -> np.ndarray:
        """Cheapest source-target paths for a batch ``(B, num_arcs)`` of arc costs (any sign):
        the ``(B, num_arcs)`` 0/1 arc indicators; ties go to the first path in
        enumeration order, or with the level DP to the lowest arc index."""
        if self.path_arcs is not None:  # one float64 matmul: float32 costs widen exactly
            return self.path_arcs[np.argmin(arc_costs @ self.path_arcs.T, axis=1)]
        batch = arc_costs.shape[0]
        dist = np.full((batch, self.num_nodes), np.inf)
        dist[:, self.source] = 0.0
        pred = np.full((batch, self.num_nodes), -1, dtype=np.int64)
        for nodes, table, valid in self.levels:
            cand = dist[:, self.tails[table]] + arc_costs[:, table]
            cand[:, ~valid] = np.inf
            best = np.argmin(cand, axis=-1)
            best_value = np.take_along_axis(cand, best[..., None], axis=-1)[..., 0]
            dist[:, nodes] = best_value
            pred[:, nodes] = table[np.arange(nodes.size), best]
        return _walk_back(pred, self.tails, self.source, self.target, arc_costs.shape[1],
                          dist[:, self.target])


class EnumeratedPaths(KernelDefaults):
    """The kernel of a DAG whose paths `DagPlan` enumerated; it also takes torch
    tensors (``array_api = "torch"``): one float64 torch matmul with the path table,
    then the argmin and the row lookup in numpy on its result (no copy), which cost
    less dispatch there than in torch. Measured inside PyEPO's training loop (32 x 40
    batches), this beat both all-torch and all-numpy (numpy's own matmul was the
    slowest there). The solutions come back in float32 for float32 costs, else in float64;
    `Solver.solve_batch` moves other dtypes back. Costs on an accelerator stay
    there: the matmul, the argmin and the row lookup run on their device, with
    the path table copied there once (no host round trip per batch). Ties go to
    the first path in enumeration order, as in `DagPlan.paths`, which numpy
    costs take (torch's argmin also returns the first minimum)."""

    array_api = "torch"

    def __init__(self, plan: DagPlan) -> None:
        self.plan = plan
        self._by_arc = torch.from_numpy(np.ascontiguousarray(plan.path_arcs.T))
        self._float32_paths = plan.path_arcs.astype(np.float32)
        self._on_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def __call__(self, costs: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        if isinstance(costs, np.ndarray):
            return self.plan.paths(costs)
        if costs.device.type != "cpu":
            by_arc, paths = self._tables(costs.device)
            best = torch.mm(costs.detach().to(torch.float64), by_arc).argmin(dim=1)
            return paths[best].to(costs.dtype)
        path_costs = torch.mm(costs.detach().to("cpu", torch.float64), self._by_arc).numpy()
        paths = self._float32_paths if costs.dtype == torch.float32 else self.plan.path_arcs
        return torch.from_numpy(paths.take(path_costs.argmin(axis=1), axis=0))

    def _tables(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``(A, K)`` arc-by-path table and the ``(K, A)`` path rows on ``device``."""
        tables = self._on_device.get(device)
        if tables is None:
            tables = self._on_device[device] = (self._by_arc.to(device),
                                                torch.from_numpy(self.plan.path_arcs).to(device))
        return tables


#: Enumerate a DAG's source-target paths up to this many (PyEPO's 5x5 grid: 70),
#: and while ``num_paths * num_arcs`` stays under ``_MAX_PATH_TABLE``: one
#: ``(B, A) @ (A, K)`` matmul beats the level DP's per-level numpy calls there
#: (benchmarks/problems.py, docs/measurements/solvers.md).
MAX_ENUMERATED_PATHS = 4096
_MAX_PATH_TABLE = 1 << 20


def _enumerate_paths(num_nodes: int, tails: np.ndarray, heads: np.ndarray, order: np.ndarray,
                     source: int, target: int) -> np.ndarray | None:
    """Every source-target path's 0/1 arc indicator, or None when there are none or too many."""
    num_arcs = len(tails)
    count = np.zeros(num_nodes, dtype=object)  # exact Python ints: counts can be huge
    count[target] = 1
    out_arcs: list[list[int]] = [[] for _ in range(num_nodes)]
    for a in range(num_arcs):
        out_arcs[int(tails[a])].append(a)
    for u in reversed(order.tolist()):
        if u != target:
            count[u] = sum(count[int(heads[a])] for a in out_arcs[u])
    total = int(count[source])
    if total == 0 or total > MAX_ENUMERATED_PATHS or total * num_arcs > _MAX_PATH_TABLE:
        return None
    paths: list[tuple[int, ...]] = []
    stack: list[tuple[int, tuple[int, ...]]] = [(source, ())]
    while stack:  # depth first, lower arc indices first
        node, arcs = stack.pop()
        if node == target:
            paths.append(arcs)
            continue
        stack.extend((int(heads[a]), (*arcs, a))
                     for a in reversed(out_arcs[node]) if count[int(heads[a])])
    table = np.zeros((len(paths), num_arcs))
    for k, arcs in enumerate(paths):
        table[k, arcs] = 1.0
    return table


def _walk_back(pred: np.ndarray, tails: np.ndarray, source: int, target: int, num_arcs: int,
               target_dist: np.ndarray) -> np.ndarray:
    if not np.isfinite(target_dist).all():
        b = int(np.flatnonzero(~np.isfinite(target_dist))[0])
        raise InfeasibleError(f"no path from node {source} to node {target} (instance {b})")
    batch = pred.shape[0]
    y = np.zeros((batch, num_arcs))
    instances = np.arange(batch)
    node = np.full(batch, target)
    for _ in range(pred.shape[1]):
        active = node != source
        if not active.any():
            break
        arc = pred[instances[active], node[active]]
        y[instances[active], arc] = 1.0
        node[active] = tails[arc]
    return y


class _Dijkstra:
    """Dijkstra on one CSR structure, with each instance's weights in a matrix of its own
    (one per call: threads share a kernel; refilling one shared matrix let a thread's
    search run on another's weights)."""

    def __init__(self, num_nodes: int, tails: np.ndarray, heads: np.ndarray, directed: bool):
        graph = sp.csr_matrix((np.arange(1, len(tails) + 1, dtype=float), (tails, heads)),
                              shape=(num_nodes, num_nodes))
        graph.sort_indices()
        # arc index behind every stored entry, so a weight vector maps to graph.data
        self.entry_arc = graph.data.astype(np.int64) - 1
        self.graph = graph
        self.directed = directed
        pairs = zip(tails.tolist(), heads.tolist(), strict=True)
        self.arc_of = {pair: a for a, pair in enumerate(pairs)}

    def parents(self, weights: np.ndarray, source: int) -> np.ndarray:
        graph = sp.csr_matrix((weights[self.entry_arc], self.graph.indices, self.graph.indptr),
                              shape=self.graph.shape)
        _, pred = csgraph.dijkstra(graph, directed=self.directed, indices=source,
                                   return_predecessors=True)
        return pred


def _graph_kernel(spec: ShortestPath) -> Callable:
    tails, heads = spec.arrays
    order = topological_order(spec.num_nodes, tails, heads) if spec.directed else None
    if order is not None:
        plan = DagPlan.build(spec.num_nodes, tails, heads, order, spec.source, spec.target)
        return plan.paths if plan.path_arcs is None else EnumeratedPaths(plan)
    dijkstra = _Dijkstra(spec.num_nodes, tails, heads, spec.directed)

    def solve(costs: np.ndarray) -> np.ndarray:
        costs = clip_negative_costs(spec, costs, slice(None))
        y = np.zeros_like(costs)
        for b, weights in enumerate(costs):
            pred = dijkstra.parents(weights, spec.source)
            node = spec.target
            if pred[node] < 0:
                raise InfeasibleError(f"no path from node {spec.source} to node "
                                      f"{spec.target} in {spec.label}")
            while node != spec.source:
                parent = int(pred[node])
                arc = dijkstra.arc_of.get((parent, node))
                if arc is None:  # undirected: the edge was declared the other way round
                    arc = dijkstra.arc_of[(node, parent)]
                y[b, arc] = 1.0
                node = parent
        return y

    return solve


def grid_path_costs(spec: GridShortestPath, costs: np.ndarray) -> np.ndarray:
    """The vertex costs ``(B, rows * cols)`` that a path search on ``spec``'s grid reads:
    negatives clipped on the inner vertices as ``spec.negative_costs`` says
    (`clip_negative_costs`), and 0 at the source and target, which lie on every path,
    so their costs never change the choice."""
    inner = np.ones(spec.rows * spec.cols, dtype=bool)
    inner[[spec.source_index, spec.target_index]] = False
    return np.where(inner, clip_negative_costs(spec, costs, inner), 0.0)


def _grid_kernel(spec: GridShortestPath) -> Callable:
    tails, heads = spec.arcs
    s, t = spec.source_index, spec.target_index
    dijkstra = _Dijkstra(spec.rows * spec.cols, tails, heads, directed=True)

    def solve(costs: np.ndarray) -> np.ndarray:
        y = np.zeros_like(costs)
        for b, vertex_costs in enumerate(grid_path_costs(spec, costs)):
            pred = dijkstra.parents(vertex_costs[heads], s)
            node = t
            if pred[node] < 0:
                raise InfeasibleError(f"no path from {tuple(spec.source)} to "
                                      f"{tuple(spec.target)} in {spec.label}")
            while node >= 0:
                y[b, node] = 1.0
                node = int(pred[node])
        return y

    return solve


# -- matching ---------------------------------------------------------------------


def _matching_kernel(spec: Matching) -> Callable:
    # scipy.optimize is slow to import: only when a kernel needs it.
    from scipy.optimize import linear_sum_assignment

    padded = padded_costs(spec)
    R, C = spec.rows, spec.cols

    def solve(costs: np.ndarray) -> np.ndarray:
        y = np.zeros_like(costs)
        grid = y.reshape(len(costs), R, C)
        square = None if padded is None else padded.copy()  # one per call: thread-safe
        for b, cost in enumerate(costs.reshape(len(costs), R, C)):
            if square is None:
                rows, cols = linear_sum_assignment(cost)
            else:
                square[:R, :C] = cost
                rows, cols = linear_sum_assignment(square)
                real = (rows < R) & (cols < C)
                rows, cols = rows[real], cols[real]
            grid[b, rows, cols] = 1.0
        return y

    return solve


# -- knapsack ---------------------------------------------------------------------


#: Weights with up to this many decimals are scaled to integers for the DP
#: (PyEPO's knapsack weights have one).
KNAPSACK_MAX_DECIMALS = 2


def _integer_knapsack(spec: Knapsack) -> tuple[np.ndarray, np.ndarray] | None:
    """Integer weights and capacities with the same feasible sets, or None."""
    weights = np.asarray(spec.weights, dtype=float)
    capacities = np.asarray(spec.capacities, dtype=float)
    for decimals in range(KNAPSACK_MAX_DECIMALS + 1):
        scaled = weights * 10.0**decimals
        # a tolerance relative to each number keeps 0.1 * 10 = 1.0000000000000002 from
        # losing a unit; an absolute one made a weight of 1e-7 the integer 0 (and a
        # capacity of 0.99999999 the integer 1): answers that break the capacity
        if np.allclose(scaled, np.round(scaled), rtol=1e-12, atol=0.0):
            caps = capacities * 10.0**decimals
            caps = np.floor(caps + 1e-12 * np.maximum(np.abs(caps), 1.0))
            return np.round(scaled).astype(np.int64), caps.astype(np.int64)
    return None


def knapsack_work(spec: Knapsack) -> float:
    _, capacities = _integer_knapsack(spec) or (None, None)
    if capacities is None:
        return math.inf
    return spec.num_items * float(np.prod(capacities.astype(float) + 1.0))


def knapsack_dp(weights: np.ndarray, capacities: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Maximise ``values @ y`` for a batch ``(B, n)`` of values over 0/1 ``y`` with
    ``weights @ y <= capacities`` (integer weights, ``(m, n)``).

    ``table[b, c]`` is the best value within capacity ``c`` (an m-dim index); an
    item is taken only when strictly better, so ties keep fewer, earlier items.
    """
    batch, n = values.shape
    dims = tuple(int(c) + 1 for c in capacities)
    table = np.zeros((batch, *dims))
    taken = np.zeros((n, batch, *dims), dtype=bool)
    for i in range(n):
        w = weights[:, i]
        if (w > capacities).any() or values[:, i].max() <= 0:
            continue
        src = (slice(None), *(slice(0, d - int(wi)) for d, wi in zip(dims, w, strict=True)))
        dst = (slice(None), *(slice(int(wi), d) for d, wi in zip(dims, w, strict=True)))
        candidate = table[src] + values[:, i].reshape(-1, *([1] * len(dims)))
        target = table[dst]  # a view: updated in place
        np.greater(candidate, target, out=taken[i][dst])
        np.maximum(target, candidate, out=target)
    y = np.zeros((batch, n))
    cell = np.tile(np.asarray(dims) - 1, (batch, 1))
    instances = np.arange(batch)
    for i in range(n - 1, -1, -1):
        take = taken[(i, instances, *cell.T)]
        y[take, i] = 1.0
        cell[take] -= weights[:, i]
    return y


def _in_chunks(solve: Callable[[np.ndarray], np.ndarray], chunk: int) -> Callable:
    """``solve`` over a batch ``chunk`` instances at a time (its tables' memory bound)."""
    return lambda costs: np.concatenate([solve(costs[i:i + chunk])
                                         for i in range(0, len(costs), chunk)] or [costs[:0]])


def _knapsack_kernel(spec: Knapsack) -> Callable:
    weights, capacities = _integer_knapsack(spec)
    chunk = max(1, _KNAPSACK_CHUNK_CELLS // max(1, int(knapsack_work(spec))))
    # the kernel minimises; the DP maximises
    return _in_chunks(lambda costs: knapsack_dp(weights, capacities, -costs), chunk)


# -- TSP ----------------------------------------------------------------------------


#: ``scipy.optimize.milp``'s status codes (1: iteration or time limit).
_MILP_OUTCOMES = {0: Outcome.OPTIMAL, 1: Outcome.TIME_LIMIT, 2: Outcome.INFEASIBLE,
                  3: Outcome.UNBOUNDED}


@functools.lru_cache(maxsize=16)
def _held_karp_plan(n: int) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], ...]:
    """Index tables of the Held-Karp recursion for ``n`` cities, one per subset size.

    Cities 1..n-1 are bits 0..m-1 of a subset ``S``; ``best[S * m + j]`` is a flat
    index. For every pair (``S``, ``j`` in ``S``) of a size, ``sources`` holds the
    entries ``best[(S - j) * m + i]`` of its ``size - 1`` predecessors ``i`` in
    ascending order, ``edges`` the flat ``(i+1, j+1)`` edge index, ``targets`` the
    entry it fills and ``cities`` the predecessors themselves.
    """
    m = n - 1
    bits = np.arange(m)
    popcount = np.array([bin(subset).count("1") for subset in range(1 << m)])
    layers = []
    for size in range(2, m + 1):
        subsets = np.flatnonzero(popcount == size)
        which, last = np.nonzero((subsets[:, None] >> bits) & 1)
        subset = subsets[which]
        previous = subset ^ (1 << last)
        _, cities = np.nonzero((previous[:, None] >> bits) & 1)
        cities = cities.reshape(len(subset), size - 1)
        layers.append((previous[:, None] * m + cities, (cities + 1) * n + last[:, None] + 1,
                       subset * m + last, cities.astype(np.int8)))
    return tuple(layers)


def held_karp(costs: np.ndarray, n: int) -> np.ndarray:
    """Optimal tours for a batch ``(B, n * n)`` of minimisation costs by the Held-Karp
    dynamic program, vectorised over the batch and over the subsets of one size.

    The tour starts at city 0; ``best[S, j]`` is the cheapest path from 0 through the
    set ``S`` of cities 1..n-1 ending at ``j`` in ``S``, under the undirected edge
    cost ``w_ij + w_ji``. Only valid (``S``, ``j``, predecessor) triples are
    visited (`_held_karp_plan`), ``m (m - 1) 2^(m-2)`` for ``m = n - 1``.
    Returns the ``(B, n * n)`` symmetric 0/1 adjacency. Ties go to the lowest
    city index (``argmin``), so it is deterministic.
    """
    batch = costs.shape[0]
    w = costs.reshape(batch, n, n)
    edge = (w + w.transpose(0, 2, 1)).reshape(batch, n * n)
    m = n - 1
    full = 1 << m
    bits = np.arange(m)
    best = np.full((batch, full * m), np.inf)
    parent = np.zeros((batch, full * m), dtype=np.int8)
    best[:, (1 << bits) * m + bits] = edge[:, 1:n]
    for sources, edges, targets, cities in _held_karp_plan(n):
        candidate = best[:, sources] + edge[:, edges]
        choice = candidate.argmin(-1)
        best[:, targets] = np.take_along_axis(candidate, choice[..., None], -1)[..., 0]
        parent[:, targets] = cities[np.arange(len(targets)), choice]
    node = (best[:, (full - 1) * m + bits] + edge[:, (bits + 1) * n]).argmin(-1) + 1
    instances = np.arange(batch)
    y = np.zeros((batch, n, n))
    y[instances, node, 0] = 1.0
    subset = np.full(batch, full - 1)
    for _ in range(m - 1):
        before = parent[instances, subset * m + node - 1].astype(np.int64) + 1
        subset = subset ^ (1 << (node - 1))
        y[instances, before, node] = 1.0
        node = before
    y[instances, 0, node] = 1.0
    return np.maximum(y, y.transpose(0, 2, 1)).reshape(batch, n * n)


def _held_karp_kernel(spec: TSP) -> Callable:
    n = spec.num_nodes
    cells = (n - 1) * 2 ** (n - 1) + max(
        (sources.size for sources, *_ in _held_karp_plan(n)), default=1)
    return _in_chunks(lambda costs: held_karp(costs, n), max(1, _TSP_CHUNK_CELLS // cells))


def _tsp_kernel(spec: TSP) -> Callable:
    """Symmetric TSP over the n(n-1)/2 edges (cost ``w_ij + w_ji``) with
    ``scipy.optimize.milp`` (HiGHS with presolve), re-solved with the cut-set
    inequalities of every subtour until the solution is one tour. Cuts stay
    within one instance: each instance starts again from the degree rows.
    Up to ``TSP_DP_MAX_NODES`` cities, `held_karp` instead."""
    n = spec.num_nodes
    if n <= TSP_DP_MAX_NODES:
        return _held_karp_kernel(spec)
    # scipy.optimize is slow to import: only when a kernel needs it.
    from scipy.optimize import Bounds, LinearConstraint, milp

    iu, ju = edge_pairs(n)
    m = len(iu)
    degree = TSPEdges(num_nodes=n).degree_rows(m)

    def solve_one(w: np.ndarray) -> Solved:
        cost = (w + w.T)[iu, ju]
        rows, lower, upper = [degree], [np.full(n, 2.0)], [np.full(n, 2.0)]
        rounds = Solved(None)  # the statuses of the rounds so far: none yet
        while True:
            result = milp(cost, integrality=np.ones(m), bounds=Bounds(0.0, 1.0),
                          constraints=LinearConstraint(sp.vstack(rows), np.concatenate(lower),
                                                       np.concatenate(upper)))
            rounds = rounds.then(settle(
                _MILP_OUTCOMES.get(result.status, Outcome.STOPPED), "scipy milp (HiGHS)",
                lambda result=result: result.x, has_solution=result.x is not None,
                status=result.message))
            chosen = rounds.values > 0.5
            adjacency = sp.csr_matrix((np.ones(chosen.sum()), (iu[chosen], ju[chosen])),
                                      shape=(n, n))
            components = subtours(adjacency)
            if not components:
                y = adjacency.toarray()
                return Solved((y + y.T).reshape(1, -1), rounds.statuses)
            for inside in components:
                rows.append(sp.csr_matrix((inside[iu] != inside[ju]).astype(float)[None]))
                lower.append(np.array([2.0]))
                upper.append(np.array([np.inf]))

    def solve(costs: np.ndarray) -> Solved:
        return joined([solve_one(w.reshape(n, n)) for w in costs])

    return solve


@register_backend
class ScipyBackend(FunctionBackend):
    """Specialised exact algorithms: Dijkstra / DAG DP, assignment, knapsack DP,
    Held-Karp for small TSPs."""

    name: ClassVar[str] = "scipy"
    requires: ClassVar[tuple[str, ...]] = ("scipy",)
    capabilities: ClassVar[Capability] = Capability.BATCHED
    builders: ClassVar[dict[str, Callable[[Spec], Callable]]] = {
        "shortest_path": _graph_kernel,
        "grid_shortest_path": _grid_kernel,
        "matching": _matching_kernel,
        "knapsack": _knapsack_kernel,
        "tsp": _tsp_kernel,
    }

    @classmethod
    def rank(cls, spec: Spec) -> int:
        """First, except where SCIP was measured faster (docs/problems.md): TSP above
        ``TSP_DP_MAX_NODES`` cities, where SCIP separates subtours inside one solve
        (faster than the milp loop: benchmarks/tsp_backends.py), and knapsacks
        whose table has more than KNAPSACK_MAX_CELLS_VS_SCIP cells per item. There
        it ranks just behind SCIP and ahead of HiGHS's MIPs."""
        slow = (isinstance(spec, TSP) and spec.num_nodes > TSP_DP_MAX_NODES) or (
            isinstance(spec, Knapsack)
            and knapsack_work(spec) / spec.num_items > KNAPSACK_MAX_CELLS_VS_SCIP
        )
        return Tier.SPECIALISED_SLOW if slow else super().rank(spec)

    def accepts(self, spec: Spec) -> str | None:
        reason = super().accepts(spec)
        if reason is None and isinstance(spec, Knapsack):
            if _integer_knapsack(spec) is None:
                return (f"its knapsack dynamic program needs weights with at most "
                        f"{KNAPSACK_MAX_DECIMALS} decimals")
            if (work := knapsack_work(spec)) > KNAPSACK_MAX_WORK:
                return (f"its knapsack dynamic program would need {work:.3g} "
                        f"steps (limit {KNAPSACK_MAX_WORK:.3g}); a MIP backend is faster")
        return reason
