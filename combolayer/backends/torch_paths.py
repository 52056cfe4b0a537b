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
never needed without negative cycles). On CUDA the chunk is captured once per batch
shape as a CUDA graph and replayed (a plain loop where capture fails).

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
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from ..errors import InfeasibleError
from ..problems import GridShortestPath, ShortestPath
from ..problems.shortest_path import _MOVES, topological_order
from ..specs.base import Spec
from .base import Capability, FunctionBackend, Tier
from .registry import register_backend
from .solver import KernelDefaults, invalid_values, values_error

#: Relaxations between two reads of "did anything change" on the host.
CHECK_EVERY = 8
#: Batch shapes whose buffers (and, on CUDA, captured graph) a kernel keeps.
KEPT_SHAPES = 4


def _work_dtype(device: torch.device) -> torch.dtype:
    """float64, the host solvers' precision, where the device has it."""
    return torch.float32 if device.type == "mps" else torch.float64


def _capture(relax: Callable[[], None], count: int) -> torch.cuda.CUDAGraph | None:
    """``count`` calls of ``relax`` captured as one CUDA graph, or None where capture
    fails (the caller then loops). One warm-up call runs first, on a side stream, as
    capture requires; it is a valid relaxation, so it changes no answer."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            relax()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(count):
                relax()
        return graph
    except RuntimeError:
        return None


class _State:
    """The buffers of one batch shape on one device: distances, predecessors, costs.

    Subclasses define `reset` (load a batch of costs) and `relax` (one simultaneous
    relaxation, in place, so that a captured CUDA graph replays it on new costs).
    """

    dist: Tensor
    graph: torch.cuda.CUDAGraph | None = None
    captured = False

    def reset(self, costs: Tensor) -> None:
        raise NotImplementedError

    def relax(self) -> None:
        raise NotImplementedError

    def converge(self, max_rounds: int, invalid: Tensor) -> bool:
        """Relax until a chunk of `CHECK_EVERY` relaxations changes nothing (one host
        read per chunk), or ``max_rounds`` have run. ``invalid`` (`invalid_values` of
        the costs, 0-d) is read with the first chunk's check: False, and no more
        relaxations, where it is set."""
        if self.dist.is_cuda and not self.captured:
            self.captured = True
            self.graph = _capture(self.relax, CHECK_EVERY)
        before = torch.empty_like(self.dist)
        rounds = 0
        while rounds < max_rounds:
            before.copy_(self.dist)
            if self.graph is not None:
                self.graph.replay()
            else:
                for _ in range(CHECK_EVERY):
                    self.relax()
            rounds += CHECK_EVERY
            # distances only fall, so equal ends mean no relaxation in between changed one
            settled, bad = torch.stack([torch.eq(before, self.dist).all(), invalid]).tolist()
            if bad:
                return False
            if settled:
                break
        return True


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
    def __init__(self, paths: GridPaths, batch: int, device: torch.device) -> None:
        spec, dtype = paths.spec, _work_dtype(device)
        rows, cols = spec.rows, spec.cols
        self.paths = paths
        self.padded = torch.full((batch, rows + 2, cols + 2), math.inf, dtype=dtype,
                                 device=device)
        self.dist = self.padded[:, 1:-1, 1:-1]
        self.pred = torch.full((batch, rows, cols), -1, dtype=torch.int64, device=device)
        self.cost = torch.zeros((batch, rows, cols), dtype=dtype, device=device)
        self.movable = paths.movable.to(device)
        self.inner = paths.inner.to(device)
        self.offsets = paths.offsets.to(device)
        self.vertex = torch.arange(rows * cols, device=device)
        self.moves = [(1 + dr, 1 + dc) for dr, dc in _MOVES[spec.neighborhood]]

    def reset(self, costs: Tensor) -> None:
        spec = self.paths.spec
        self.cost.copy_(costs)
        self.padded.fill_(math.inf)
        self.dist[:, spec.source[0], spec.source[1]] = 0.0
        self.pred.fill_(-1)

    def neighbours(self) -> tuple[Tensor, Tensor]:
        """The least neighbour distance of every vertex and the move it comes from
        (the first in move order on ties)."""
        rows, cols = self.cost.shape[1:]
        views = [self.padded[:, r:r + rows, c:c + cols] for r, c in self.moves]
        return torch.stack(views, dim=1).min(dim=1)

    def relax(self) -> None:
        best, move = self.neighbours()
        candidate = best + self.cost
        better = (candidate < self.dist) & self.movable
        self.dist.copy_(torch.where(better, candidate, self.dist))
        self.pred.copy_(torch.where(better, move, self.pred))

    def path(self) -> Tensor:
        """``(B, n)`` 0/1 vertices of the path, after `converge`: the target takes the
        least of its neighbours as its predecessor."""
        spec = self.paths.spec
        n, t = spec.rows * spec.cols, spec.target_index
        _, move = self.neighbours()
        pred = self.pred.reshape(-1, n).clone()
        pred[:, t] = move.reshape(-1, n)[:, t]
        pointer = torch.where(pred >= 0, self.vertex + self.offsets[pred.clamp(min=0)],
                              self.vertex)
        return _on_path(pointer, t)


class _Kernel(KernelDefaults):
    """What both kernels share: they copy and pickle as their spec (the buffers and
    CUDA graphs they keep are rebuilt on first use)."""

    array_api = "torch"
    #: NaN, inf and too large costs raise `ValueError` with the convergence check's
    #: first host read (`_State.converge`), not a read or device assertion of their own.
    checks_values = True
    spec: GridShortestPath | ShortestPath

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
        self.inner = torch.from_numpy(spec._checked())
        self.movable = self.inner.reshape(spec.rows, spec.cols)
        dr, dc = torch.tensor(_MOVES[spec.neighborhood]).T
        self.offsets = dr * spec.cols + dc
        self._states: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, costs: Tensor) -> Tensor:
        spec = self.spec
        work = costs.detach().to(_work_dtype(costs.device))
        invalid = invalid_values(work)
        with self._lock:
            state = _kept(self._states, (work.shape[0], work.device),
                          lambda: _GridState(self, work.shape[0], work.device))
            negative = None
            if spec.negative_costs == "error":
                negative = _below_zero(work, state.inner).any()
            else:
                work = work.clamp(min=0.0)
            state.reset(torch.where(state.inner, work, 0.0).reshape(state.cost.shape))
            if not state.converge(spec.rows * spec.cols, _either(invalid, negative)):
                _refuse(spec, work, state.inner, negative)
            return state.path().to(costs.dtype)


class _GraphState(_State):
    def __init__(self, paths: GraphPaths, batch: int, device: torch.device) -> None:
        n, dtype = paths.num_nodes, _work_dtype(device)
        self.paths = paths
        # one more vertex, never reached, for the padding of the entering-arc table
        self.all_dist = torch.full((batch, n + 1), math.inf, dtype=dtype, device=device)
        self.dist = self.all_dist[:, :n]
        self.pred = torch.full((batch, n), -1, dtype=torch.int64, device=device)
        self.arc_cost = torch.zeros((batch, *paths.tails.shape), dtype=dtype, device=device)
        self.tails = paths.tails.to(device)
        self.edges = paths.edges.to(device)
        self.movable = paths.movable.to(device)
        self.vertex = torch.arange(n, device=device)

    def reset(self, costs: Tensor) -> None:
        self.arc_cost.copy_(costs[:, self.edges])
        self.all_dist.fill_(math.inf)
        self.all_dist[:, self.paths.source] = 0.0
        self.pred.fill_(-1)

    def relax(self) -> None:
        best, slot = (self.all_dist[:, self.tails] + self.arc_cost).min(dim=2)
        better = (best < self.dist) & self.movable
        self.dist.copy_(torch.where(better, best, self.dist))
        self.pred.copy_(torch.where(better, slot, self.pred))

    def path(self) -> Tensor:
        """``(B, num_edges + 1)`` 0/1 edges of the path, after `converge` (the last
        column is the padding's, to drop)."""
        paths = self.paths
        reached = self.pred >= 0
        slot = self.pred.clamp(min=0)
        pointer = torch.where(reached, self.tails[self.vertex, slot], self.vertex)
        edge = torch.where(reached, self.edges[self.vertex, slot], paths.num_edges)
        on = _on_path(pointer, paths.target)
        return on.new_zeros(on.shape[0], paths.num_edges + 1).scatter_add_(1, edge, on)


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
        self.acyclic = spec.directed and topological_order(n, tails, heads) is not None
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
        spec, device = self.spec, costs.device
        work = costs.detach().to(_work_dtype(device))
        invalid = invalid_values(work)
        negative = None
        if not self.acyclic:
            if spec.negative_costs == "error":
                negative = _below_zero(work, None).any()
            else:
                work = work.clamp(min=0.0)
        m = work.shape[1]
        work = torch.cat([work, work.new_zeros(work.shape[0], 1)], dim=1)
        with self._lock:
            state = _kept(self._states, (work.shape[0], device),
                          lambda: _GraphState(self, work.shape[0], device))
            state.reset(work)
            if not state.converge(self.num_nodes, _either(invalid, negative)):
                _refuse(spec, work[:, :m], None, negative)
            unreachable = torch.isinf(state.dist[:, self.target])
            if bool(unreachable.any()):
                b = int(unreachable.nonzero()[0, 0])
                raise InfeasibleError(f"no path from node {self.source} to node {self.target} "
                                      f"in {spec.label} (instance {b})")
            return state.path()[:, :m].clamp_(max=1).to(costs.dtype)


def _kept(states: OrderedDict, key: tuple, build: Callable[[], _State]) -> _State:
    """The buffers for ``key`` (batch size, device), built on first use; the
    `KEPT_SHAPES` most recently used are kept."""
    state = states.get(key)
    if state is None:
        state = states[key] = build()
        while len(states) > KEPT_SHAPES:
            states.popitem(last=False)
    states.move_to_end(key)
    return state


def _below_zero(costs: Tensor, checked: Tensor | None) -> Tensor:
    """The negative entries of ``costs`` among the ``checked`` ones (all when None); their
    ``.any()`` is read with the convergence check's first read (`_State.converge`), not in
    a host read of its own."""
    return costs < 0 if checked is None else (costs < 0) & checked


def _either(invalid: Tensor, negative: Tensor | None) -> Tensor:
    return invalid if negative is None else invalid | negative


def _refuse(spec: ShortestPath | GridShortestPath, costs: Tensor, checked: Tensor | None,
            negative: Tensor | None) -> None:
    """The error for costs the convergence check stopped on: the spec's negative-cost
    error (naming the first negative entry, in the spec's sense) where ``negative`` is
    set, else `values_error`."""
    if negative is not None and bool(negative):
        b, j = (int(i) for i in _below_zero(costs, checked).nonzero()[0])
        sign = 1.0 if spec.sense == "min" else -1.0
        raise spec.negative_cost_error(f"instance {b}, value {sign * float(costs[b, j]):.4g}")
    raise values_error(spec)


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
