"""Exact shortest paths as batched torch kernels that run on the costs' own device.

Bellman-Ford in min-plus form relaxes every vertex of every instance at once, so a
batch on a GPU is solved there, with no host round trip per instance:

- on a grid with vertex costs (`GridShortestPath`), ``dist[v] = cost[v] + min(dist
  of v's 4 or 8 neighbours)``, the neighbours read as shifted views of one padded
  tensor;
- on a graph with edge costs (`ShortestPath`), the same minimum over a padded table
  of each vertex's entering arcs.

Relaxations are simultaneous (each reads the previous distances) and stop when a
chunk of `CHECK_EVERY` of them changed nothing: one read on the host per chunk, not
per relaxation, and never more relaxations than the graph has vertices (more are
never needed without negative cycles). On 8 neighbours a relaxation's minimum is one
3x3 max pooling of the negated distances. On CUDA each step of a call (read the
costs and reset, a chunk, read the path back) is captured once per batch shape as a
CUDA graph and replayed (the steps themselves where capture fails).

Exact: a vertex takes a new predecessor only when its distance strictly drops, so
with non-negative costs (or on an acyclic graph) the predecessors form a tree rooted
at the source (a cycle among them would need a negative cycle, also in floating
point, where ``a + w >= a`` for ``w >= 0``), and the path read back from the target
is a cheapest one. Distances are summed in float64 (float32 on devices without it)
along the path, as the host solvers sum them. Ties go to the first neighbour in the
spec's move order (grids) or the lowest-numbered entering arc (graphs) among those
whose distance is least; the answer is the same on every run. The path is read
back by pointer doubling (``log2(n)`` gathers), not a walk of ``n`` steps.

Negative costs follow the spec's ``negative_costs`` as `combolayer.backends.algorithms`'s
Dijkstra does: on a grid, and on a graph with cycles, ``"error"`` raises and
``"clip"`` sets them to 0 (a grid's source and target costs never count); an
acyclic directed graph takes any costs.

Bipartite matching has no such kernel: no package among combolayer's dependencies
solves a batch of assignment problems exactly on CUDA tensors (an exact batched
auction or Hungarian method in torch would be a project of its own), so matching
stays on the host (`scipy.optimize.linear_sum_assignment`).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from contextlib import nullcontext
from typing import ClassVar, NoReturn

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from scipy.sparse import csgraph
from torch import Tensor

from ..errors import InfeasibleError
from ..problems import GridShortestPath, ShortestPath
from ..problems.shortest_path import _MOVES
from ..specs.base import Spec
from .base import Capability, FunctionBackend, Tier
from .registry import register_backend
from .solver import KernelDefaults, invalid_values, values_error

#: Relaxations between two reads of "did anything change" on the host.
CHECK_EVERY = 8
#: Devices whose host reads cost nothing beyond the work before them: there a call's
#: first step is one chunk, as every later one (relaxations past convergence are work).
READS_FREE = frozenset({"cpu"})
#: Batch shapes whose buffers (and, on CUDA, captured graph) a kernel keeps.
KEPT_SHAPES = 4


def _work_dtype(device: torch.device) -> torch.dtype:
    """float64, the host solvers' precision, where the device has it."""
    return torch.float32 if device.type == "mps" else torch.float64


def _capture(step: Callable[[], None]) -> torch.cuda.CUDAGraph | None:
    """``step`` captured as a CUDA graph, or None where capture fails (the caller then
    runs it as is). One warm-up call runs first, on a side stream, as capture requires;
    a `_State`'s steps read and write only its buffers, so the extra call changes no
    later answer."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            step()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        # "thread_local": other threads' CUDA calls meanwhile (a data loader's copies)
        # neither break the capture nor fail themselves
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            step()
        return graph
    except RuntimeError:
        return None


class _State:
    """The buffers of one batch shape, device and dtype, and a solve in three steps that
    read and write only them, so that on CUDA each is captured once as a graph and
    replayed on the next batch's costs (copied into `costs`):

    - `start`: the costs read from `costs` (checked, clipped) and the distances reset
      (`load`), then ``first`` relaxations, the last `CHECK_EVERY` of them a `chunk`
      (off the CPU, enough for most costs to settle: one host read, which stalls the
      device's queue, for most calls);
    - `chunk`: `CHECK_EVERY` simultaneous relaxations (`relax`), then `flags`:
      settled (no distance changed), refused (set by `load`: invalid or negative
      costs), unreachable (the target, where a graph may have no path);
    - `finish`: the path read back (`trace`) into `out`.

    A call then costs one copy, a replay per step and one host read per chunk.
    Subclasses define `load`, `relax` and `trace`, and the buffers `dist` (compared
    across a chunk), `before` (its copy) and `out`.
    """

    dist: Tensor
    before: Tensor
    out: Tensor

    def __init__(self, costs: Tensor, rounds: int, first: int = CHECK_EVERY) -> None:
        self.costs = torch.empty_like(costs)
        self.rounds = rounds
        free = costs.device.type in READS_FREE
        self.first = CHECK_EVERY if free else max(CHECK_EVERY, min(first, rounds))
        self.flags = torch.zeros(3, dtype=torch.bool, device=costs.device)
        self.steps: tuple[Callable[[], None], ...] | None = None

    def load(self) -> None:
        raise NotImplementedError

    def relax(self) -> None:
        raise NotImplementedError

    def trace(self) -> Tensor:
        raise NotImplementedError

    def start(self) -> None:
        self.load()
        for _ in range(self.first - CHECK_EVERY):
            self.relax()
        self.chunk()

    def chunk(self) -> None:
        self.before.copy_(self.dist)
        for _ in range(CHECK_EVERY):
            self.relax()
        # distances only fall, so equal ends mean no relaxation in between changed one
        self.flags[0] = torch.eq(self.before, self.dist).all()

    def finish(self) -> None:
        self.out.copy_(self.trace())

    def solve(self, costs: Tensor) -> tuple[Tensor, bool, bool]:
        """``(paths, refused, unreachable)``: each instance's 0/1 path in a new tensor
        (meaningless where a flag is set), whether the costs must be refused, and
        whether an instance has no path. Relaxes until a chunk changes nothing, or
        ``rounds`` relaxations have run; refused costs stop after the first chunk."""
        # on the costs' own GPU: a graph captured or replayed on another one's stream
        # would hold or run nothing
        with torch.cuda.device(costs.device) if costs.is_cuda else nullcontext():
            self.costs.copy_(costs)
            start, chunk, finish = self._steps()
            start()
            rounds = self.first
            settled, refused, unreachable = self.flags.tolist()
            while not (settled or refused) and rounds < self.rounds:
                chunk()
                rounds += CHECK_EVERY
                settled, refused, unreachable = self.flags.tolist()
            if refused or unreachable:
                return self.out, refused, unreachable
            finish()
            return self.out.clone(), False, False

    def _steps(self) -> tuple[Callable[[], None], ...]:
        """`start`, `chunk` and `finish`, as replays of CUDA graphs on CUDA (captured
        at the first call; the steps themselves where a capture fails)."""
        if self.steps is None:
            steps = (self.start, self.chunk, self.finish)
            if self.costs.is_cuda:
                graphs = [_capture(step) for step in steps]
                if all(graph is not None for graph in graphs):
                    steps = tuple(graph.replay for graph in graphs)
            self.steps = steps
        return self.steps


def _on_path(pointer: Tensor, target: int | Tensor) -> Tensor:
    """``(B, n)`` 0/1: the vertices on each instance's chain target, pointer[target], ...
    (``pointer`` ``(B, n)`` int64, a root pointing to itself), by pointer doubling:
    after round j the set holds the first ``2^j`` vertices of the chain."""
    batch, n = pointer.shape
    on = torch.zeros(batch, n, dtype=torch.int32, device=pointer.device)
    on[:, target] = 1
    jump = pointer
    for _ in range(max(1, math.ceil(math.log2(n)))):
        on = on.scatter_add(1, jump, on).clamp_(max=1)
        jump = jump.gather(1, jump)
    return on


class _GridState(_State):
    """A grid's buffers. `dist` holds minus each vertex's distance (-inf: not reached,
    and the padding around the grid), so that the least neighbour distance is a
    maximum: on 8 neighbours one 3x3 max pooling, whose index is the first maximum in
    reading order, which is the spec's move order there; on 4, the maximum over the
    four shifted views in the spec's move order. `step` is the cost of entering each
    vertex, inf for the source and the target (never relaxed)."""

    def __init__(self, paths: GridPaths, costs: Tensor) -> None:
        spec = paths.spec
        # paths settle within about 2.5 times the side (measured on uniform costs and on
        # a few costly cells, grids 5-30); then one chunk to see that nothing changed
        side = max(spec.rows, spec.cols)
        super().__init__(costs, spec.rows * spec.cols,
                         first=CHECK_EVERY * (math.ceil(2.5 * side / CHECK_EVERY) + 1))
        device, dtype = costs.device, _work_dtype(costs.device)
        batch, rows, cols = costs.shape[0], spec.rows, spec.cols
        self.paths = paths
        self.padded = torch.full((batch, rows + 2, cols + 2), -math.inf, dtype=dtype,
                                 device=device)
        self.dist = self.padded[:, 1:-1, 1:-1]
        self.before = torch.empty_like(self.dist)
        self.pred = torch.full((batch, rows, cols), -1, dtype=torch.int64, device=device)
        self.step = torch.zeros((batch, rows, cols), dtype=dtype, device=device)
        self.out = torch.empty_like(costs)
        self.checked = paths.checked.to(device)  # all but the source and the target
        self.offsets = paths.offsets.to(device)
        self.vertex = torch.arange(rows * cols, device=device)
        self.pooled = spec.neighborhood == 8
        self.moves = [(1 + dr, 1 + dc) for dr, dc in _MOVES[spec.neighborhood]]

    def load(self) -> None:
        spec = self.paths.spec
        work, self.flags[1] = self.paths.read(self.costs, self.checked)
        self.step.copy_(torch.where(self.checked, work, math.inf).reshape(self.step.shape))
        self.padded.fill_(-math.inf)
        self.dist[:, spec.source[0], spec.source[1]] = 0.0
        self.pred.fill_(-1)

    def neighbours(self) -> tuple[Tensor, Tensor]:
        """Minus the least neighbour distance of every vertex, and where it comes from:
        its index in the padded grid (8 neighbours; the vertex's own, which never
        improves it, is in the window) or the move (4)."""
        if self.pooled:
            return F.max_pool2d(self.padded, 3, stride=1, return_indices=True)
        rows, cols = self.dist.shape[1:]
        views = [self.padded[:, r:r + rows, c:c + cols] for r, c in self.moves]
        return torch.stack(views, dim=1).max(dim=1)

    def relax(self) -> None:
        best, source = self.neighbours()
        candidate = best - self.step
        better = candidate > self.dist
        torch.maximum(self.dist, candidate, out=self.dist)
        torch.where(better, source, self.pred, out=self.pred)

    def trace(self) -> Tensor:
        """``(B, n)`` 0/1 vertices of the path: the target takes the least of its
        neighbours as its predecessor."""
        spec = self.paths.spec
        n, t, cols = spec.rows * spec.cols, spec.target_index, spec.cols
        _, source = self.neighbours()
        pred = self.pred.reshape(-1, n).clone()
        pred[:, t] = source.reshape(-1, n)[:, t]
        known = pred.clamp(min=0)
        if self.pooled:  # an index in the padded grid, one row and column more each side
            vertex = (known // (cols + 2) - 1) * cols + known % (cols + 2) - 1
        else:
            vertex = self.vertex + self.offsets[known]
        return _on_path(torch.where(pred >= 0, vertex, self.vertex), t)


class _Kernel(KernelDefaults):
    """What both kernels share: they copy and pickle as their spec (the buffers and
    CUDA graphs they keep are rebuilt on first use)."""

    array_api = "torch"
    #: NaN, inf and too large costs raise `ValueError` with the convergence check's
    #: first host read (`_State.solve`), not a read or device assertion of their own.
    checks_values = True
    spec: GridShortestPath | ShortestPath
    #: The cost entries that must not be negative, a flat mask on the CPU
    #: (`Spec._checked`), or None where any cost is fine (an acyclic graph); the spec's
    #: ``negative_costs`` says whether a negative one is refused or clipped at 0.
    checked: Tensor | None

    def read(self, costs: Tensor, checked: Tensor | None) -> tuple[Tensor, Tensor]:
        """``(work, refused)``: ``costs`` in the work dtype, clipped at 0 where the spec
        clips negative costs, and a 0-d flag, read nowhere here, of costs to refuse: NaN,
        inf or too large, or negative among ``checked`` (`checked` on the costs' device)
        where the spec refuses those."""
        work = costs.to(_work_dtype(costs.device))
        refused = invalid_values(work)
        if checked is not None:
            if self.spec.negative_costs == "error":
                refused = refused | _below_zero(work, checked).any()
            else:
                work = work.clamp(min=0.0)
        return work, refused

    def refuse(self, costs: Tensor) -> NoReturn:
        """The error for costs `read` refused: the spec's negative-cost error naming the
        first negative checked entry (its value in the spec's sense) where the spec
        refuses them, else `values_error`."""
        work, spec = costs.to(_work_dtype(costs.device)), self.spec
        if self.checked is not None and spec.negative_costs == "error":
            below = _below_zero(work, self.checked.to(costs.device))
            if bool(below.any()):
                b, j = (int(i) for i in below.nonzero()[0])
                sign = 1.0 if spec.sense == "min" else -1.0
                raise spec.negative_cost_error(
                    f"instance {b}, value {sign * float(work[b, j]):.4g}")
        raise values_error(spec)

    def __getstate__(self) -> dict:
        return {"spec": self.spec}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["spec"])


class GridPaths(_Kernel):
    """The kernel of a grid with vertex costs: ``(B, rows * cols)`` costs in, the 0/1
    indicators of the vertices on a cheapest path out (source and target included)."""

    def __init__(self, spec: GridShortestPath) -> None:
        self.spec = spec
        # the source and target lie on every path: their costs never count; the target
        # is never relaxed (no move leaves it) and gets its predecessor at the end
        self.checked = torch.from_numpy(spec._checked())
        dr, dc = torch.tensor(_MOVES[spec.neighborhood]).T
        self.offsets = dr * spec.cols + dc
        self._states: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, costs: Tensor) -> Tensor:
        costs = costs.detach()
        with self._lock:
            state = _kept(self._states, (costs.shape, costs.device, costs.dtype),
                          lambda: _GridState(self, costs))
            paths, refused, _ = state.solve(costs)
        if refused:
            self.refuse(costs)
        return paths


class _GraphState(_State):
    """A graph's buffers: distances with one more vertex, never reached, for the
    padding of the entering-arc table; the arcs' costs per vertex and slot."""

    def __init__(self, paths: GraphPaths, costs: Tensor) -> None:
        # a path of least cost has at least as many arcs as one of fewest: on PyEPO's
        # grids (acyclic, every path as long) the distances settle at the source's depth
        super().__init__(costs, paths.num_nodes,
                         first=CHECK_EVERY * (math.ceil(paths.depth / CHECK_EVERY) + 1))
        device, dtype = costs.device, _work_dtype(costs.device)
        batch, n = costs.shape[0], paths.num_nodes
        self.paths = paths
        self.all_dist = torch.full((batch, n + 1), math.inf, dtype=dtype, device=device)
        self.dist = self.all_dist[:, :n]
        self.before = torch.empty_like(self.dist)
        self.pred = torch.full((batch, n), -1, dtype=torch.int64, device=device)
        self.arc_cost = torch.zeros((batch, *paths.tails.shape), dtype=dtype, device=device)
        self.out = torch.empty_like(costs)
        self.checked = None if paths.checked is None else paths.checked.to(device)
        self.tails = paths.tails.to(device)
        self.edges = paths.edges.to(device)
        self.movable = paths.movable.to(device)
        self.vertex = torch.arange(n, device=device)

    def load(self) -> None:
        paths = self.paths
        work, self.flags[1] = paths.read(self.costs, self.checked)
        padded = torch.cat([work, work.new_zeros(work.shape[0], 1)], dim=1)
        self.arc_cost.copy_(padded[:, self.edges])
        self.all_dist.fill_(math.inf)
        self.all_dist[:, paths.source] = 0.0
        self.pred.fill_(-1)

    def relax(self) -> None:
        best, slot = (self.all_dist[:, self.tails] + self.arc_cost).min(dim=2)
        better = (best < self.dist) & self.movable
        self.dist.copy_(torch.where(better, best, self.dist))
        self.pred.copy_(torch.where(better, slot, self.pred))

    def chunk(self) -> None:
        super().chunk()
        self.flags[2] = torch.isinf(self.dist[:, self.paths.target]).any()

    def trace(self) -> Tensor:
        """``(B, num_edges)`` 0/1 edges of the path."""
        paths = self.paths
        reached = self.pred >= 0
        slot = self.pred.clamp(min=0)
        pointer = torch.where(reached, self.tails[self.vertex, slot], self.vertex)
        edge = torch.where(reached, self.edges[self.vertex, slot], paths.num_edges)
        on = _on_path(pointer, paths.target)
        edges = on.new_zeros(on.shape[0], paths.num_edges + 1).scatter_add_(1, edge, on)
        return edges[:, :paths.num_edges].clamp_(max=1)


class GraphPaths(_Kernel):
    """The kernel of a graph with edge costs: ``(B, num_edges)`` costs in, the 0/1
    indicators of the edges of a cheapest source-target path out. Raises
    `InfeasibleError` when an instance has no path."""

    def __init__(self, spec: ShortestPath) -> None:
        self.spec = spec
        tails, heads = spec.arrays
        m, n = len(tails), spec.num_nodes
        edges = np.arange(m)
        if not spec.directed:
            tails, heads, edges = (np.concatenate([tails, heads]), np.concatenate([heads, tails]),
                                   np.concatenate([edges, edges]))
        self.num_nodes, self.num_edges = n, m
        self.source, self.target = spec.source, spec.target
        checked = spec._checked()  # None on an acyclic graph, which takes any costs
        self.checked = None if checked is None else torch.from_numpy(checked)
        # the most arcs on a path of fewest arcs from the source: the first step's length
        arcs = sp.csr_matrix((np.ones(len(tails)), (tails, heads)), shape=(n, n))
        hops = csgraph.shortest_path(arcs, unweighted=True, indices=spec.source)
        self.depth = int(hops[np.isfinite(hops)].max())
        # every vertex's entering arcs in arc order, padded with a never-reached tail n
        order = np.argsort(heads, kind="stable")
        count = np.bincount(heads, minlength=n)
        slot = np.arange(len(order)) - np.repeat(np.cumsum(count) - count, count)
        width = max(1, int(count.max()))
        tail_table = np.full((n, width), n, dtype=np.int64)
        edge_table = np.full((n, width), m, dtype=np.int64)
        tail_table[heads[order], slot] = tails[order]
        edge_table[heads[order], slot] = edges[order]
        self.tails = torch.from_numpy(tail_table)
        # the padding's edge is a column of zeros appended to the costs
        self.edges = torch.from_numpy(edge_table)
        self.movable = torch.ones(n, dtype=torch.bool)
        self.movable[spec.source] = False
        self._states: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, costs: Tensor) -> Tensor:
        spec, costs = self.spec, costs.detach()
        with self._lock:
            state = _kept(self._states, (costs.shape, costs.device, costs.dtype),
                          lambda: _GraphState(self, costs))
            paths, refused, unreachable = state.solve(costs)
            if unreachable and not refused:
                b = int(torch.isinf(state.dist[:, self.target]).nonzero()[0, 0])
        if refused:
            self.refuse(costs)
        if unreachable:
            raise InfeasibleError(f"no path from node {self.source} to node {self.target} "
                                  f"in {spec.label} (instance {b})")
        return paths


def _kept(states: OrderedDict, key: tuple, build: Callable[[], _State]) -> _State:
    """The buffers for ``key`` (costs' shape, device, dtype), built on first use; the
    `KEPT_SHAPES` most recently used are kept."""
    state = states.get(key)
    if state is None:
        with torch.inference_mode(False):  # buffers that calls outside it may update
            state = states[key] = build()
        while len(states) > KEPT_SHAPES:
            states.popitem(last=False)
    states.move_to_end(key)
    return state


def _below_zero(costs: Tensor, checked: Tensor) -> Tensor:
    """The negative entries of ``costs`` among the ``checked`` ones; their ``.any()`` is
    read with the convergence check's first read (`_State.solve`), not in a host read of
    its own."""
    return (costs < 0) & checked


@register_backend
class BellmanFordBackend(FunctionBackend):
    """Batched Bellman-Ford shortest paths in torch, on the costs' own device."""

    name: ClassVar[str] = "bellman_ford"
    requires: ClassVar[tuple[str, ...]] = ("torch",)
    capabilities: ClassVar[Capability] = Capability.BATCHED
    array_api: ClassVar[str] = "torch"
    native_tier: ClassVar[int] = Tier.SPECIALISED_TORCH
    builders: ClassVar[dict[str, Callable[[Spec], Callable]]] = {
        "shortest_path": GraphPaths,
        "grid_shortest_path": GridPaths,
    }
