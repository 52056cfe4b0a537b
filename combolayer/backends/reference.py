"""networkx: a slow, independent reference for shortest paths and matchings.

Useful to cross-check the fast solvers; ``backend="auto"`` prefers those
(this backend ranks in the reference tier). networkx is imported lazily.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from ..errors import InfeasibleError
from ..problems import GridShortestPath, Matching, ShortestPath
from ..problems.matching import padded_costs
from ..problems.shortest_path import clip_negative_costs
from ..specs.base import Spec
from .algorithms import grid_path_costs
from .base import FunctionBackend, Tier
from .registry import register_backend


def _path_nodes(graph, source, target, label: str, negative: bool, weight: Callable) -> list:
    """The nodes of a cheapest path, with ``weight(u, v, data)`` the instance's cost of an
    edge: read per call, never written into the graph, which threads share."""
    import networkx as nx

    try:
        if negative:
            return nx.bellman_ford_path(graph, source, target, weight=weight)
        return nx.dijkstra_path(graph, source, target, weight=weight)
    except nx.NetworkXNoPath:
        raise InfeasibleError(f"no path from {source} to {target} in {label}") from None


def _graph_kernel(spec: ShortestPath) -> Callable:
    import networkx as nx

    graph = nx.DiGraph() if spec.directed else nx.Graph()
    graph.add_nodes_from(range(spec.num_nodes))
    graph.add_edges_from((u, v, {"index": e}) for e, (u, v) in enumerate(spec.edges))
    acyclic = spec.directed and nx.is_directed_acyclic_graph(graph)

    def solve(costs: np.ndarray) -> np.ndarray:
        if not acyclic:
            costs = clip_negative_costs(spec, costs, slice(None))
        y = np.zeros_like(costs)
        for b, weights in enumerate(costs):
            nodes = _path_nodes(graph, spec.source, spec.target, spec.label,
                                negative=bool((weights < 0).any()),
                                weight=lambda u, v, data, w=weights: float(w[data["index"]]))
            for u, v in zip(nodes[:-1], nodes[1:], strict=True):
                y[b, graph.edges[u, v]["index"]] = 1.0
        return y

    return solve


def _grid_kernel(spec: GridShortestPath) -> Callable:
    import networkx as nx

    tails, heads = spec.arcs
    graph = nx.DiGraph()
    graph.add_edges_from(zip(tails.tolist(), heads.tolist(), strict=True))

    def solve(costs: np.ndarray) -> np.ndarray:
        y = np.zeros_like(costs)
        for b, vertex_costs in enumerate(grid_path_costs(spec, costs)):
            nodes = _path_nodes(graph, spec.source_index, spec.target_index, spec.label, False,
                                weight=lambda u, v, data, c=vertex_costs: float(c[v]))
            y[b, nodes] = 1.0
        return y

    return solve


def _matching_kernel(spec: Matching) -> Callable:
    import networkx as nx

    padded = padded_costs(spec)
    R, C = spec.rows, spec.cols

    def solve(costs: np.ndarray) -> np.ndarray:
        y = np.zeros_like(costs)
        for b, cost in enumerate(costs.reshape(len(costs), R, C)):
            if padded is not None:  # the square assignment, inf where a pair is barred
                cost = np.concatenate([np.pad(cost, ((0, 0), (0, R))), padded[R:]])
            # Max-cardinality matching of max total (top - cost) = a matching of the
            # smaller side (or a perfect one of the padding) of min total cost; the +1
            # keeps every weight positive.
            top = cost[np.isfinite(cost)].max() + 1.0
            graph = nx.Graph()
            graph.add_weighted_edges_from(
                (("r", i), ("c", j), float(top - cost[i, j]))
                for i, j in zip(*np.nonzero(np.isfinite(cost)), strict=True))
            for a, c in nx.max_weight_matching(graph, maxcardinality=True):
                (_, i), (_, j) = (a, c) if a[0] == "r" else (c, a)
                if i < R and j < C:
                    y[b, i * C + j] = 1.0
        return y

    return solve


@register_backend
class NetworkxBackend(FunctionBackend):
    """networkx shortest paths (Dijkstra, Bellman-Ford on DAGs) and blossom matching."""

    name: ClassVar[str] = "networkx"
    requires: ClassVar[tuple[str, ...]] = ("networkx",)
    native_tier: ClassVar[int] = Tier.REFERENCE
    builders: ClassVar[dict[str, Callable[[Spec], Callable]]] = {
        "shortest_path": _graph_kernel,
        "grid_shortest_path": _grid_kernel,
        "matching": _matching_kernel,
    }
