"""Shortest paths: on a graph with edge costs, and on a grid with vertex costs.

Both ILPs are arc-flow formulations (one unit of flow from source to target).
They are exact for non-negative costs and, on acyclic graphs, for any costs;
with negative costs on a graph with cycles the flow could pick up disjoint
negative cycles, and the cheapest simple path is NP-hard. So every solver, whatever
its backend, first applies the spec's `CostFloor` to its minimisation-form costs
(``Spec.cost_floor``): a negative one on a graph with cycles raises, or under
``negative_costs="clip"`` is set to 0. Per-call rows ``A x <= b`` can make such a cycle pay
too (a row forcing a vertex is met by the path plus a cycle through it), so the
canonical forms carry a `CycleSeparator` as their ``row_separator``: with rows,
the solvers cut every cycle off lazily and return a simple path.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import model_validator

from ..errors import InputError, SpecError
from ..specs.base import ILP, Sense, Spec, register_spec
from ..specs.canonical import CanonicalForm, Cut

__all__ = ["GridShortestPath", "ShortestPath"]

NegativeCosts = Literal["error", "clip"]


def _flow_rows(num_nodes: int, tails: np.ndarray, heads: np.ndarray, offset: int, num_vars: int,
               source: int, target: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """Conservation rows ``out(v) - in(v) = [v == source] - [v == target]`` over arc variables
    ``offset .. offset + len(tails)``."""
    arcs = np.arange(len(tails)) + offset
    rows = np.concatenate([tails, heads])
    cols = np.concatenate([arcs, arcs])
    vals = np.concatenate([np.ones(len(tails)), -np.ones(len(heads))])
    A = sp.csr_matrix((vals, (rows, cols)), shape=(num_nodes, num_vars))
    b = np.zeros(num_nodes)
    b[source] += 1.0
    b[target] -= 1.0
    return A, b


def topological_order(num_nodes: int, tails: np.ndarray, heads: np.ndarray) -> np.ndarray | None:
    """A topological order of the directed graph, or None if it has a cycle (Kahn)."""
    indegree = np.bincount(heads, minlength=num_nodes)
    out = sp.csr_matrix((np.ones(len(tails)), (tails, heads)), shape=(num_nodes, num_nodes))
    order: list[int] = []
    frontier = [int(v) for v in np.flatnonzero(indegree == 0)]
    while frontier:
        u = frontier.pop()
        order.append(u)
        start, end = out.indptr[u], out.indptr[u + 1]
        succ = out.indices[start:end]
        indegree[succ] -= out.data[start:end].astype(np.int64)
        frontier.extend(int(v) for v in succ[indegree[succ] == 0])
    return np.asarray(order, dtype=np.int64) if len(order) == num_nodes else None


def flow_cycles(tails: np.ndarray, heads: np.ndarray, chosen: np.ndarray, source: int,
                target: int) -> list[np.ndarray]:
    """The node sets of the directed cycles in the 0/1 unit flow on the arcs ``chosen``
    (a mask over ``tails``/``heads``) from ``source`` to ``target``: empty exactly when
    the flow is one simple path. The walk from the source follows unused arcs and closes
    a cycle whenever it comes back to a node on it; the arcs it leaves over (balanced at
    every node) are cycles, walked the same way."""
    out: dict[int, list[int]] = {}
    for arc in np.flatnonzero(chosen).tolist():
        out.setdefault(int(tails[arc]), []).append(arc)
    found: list[np.ndarray] = []

    def walk(start: int, stop: int | None) -> None:
        path, where = [start], {start: 0}
        node = start
        while node != stop and out.get(node):
            node = int(heads[out[node].pop()])
            if node in where:  # back on the walk: the nodes since then are a cycle
                found.append(np.array(path[where[node]:]))
                for gone in path[where[node] + 1:]:
                    del where[gone]
                del path[where[node] + 1:]
            else:
                where[node] = len(path)
                path.append(node)

    walk(source, target)
    for node in list(out):
        while out[node]:
            walk(node, None)
    return found


@dataclass(frozen=True, eq=False)
class CycleSeparator:
    """Subtour eliminations for an arc-flow path: for each cycle of a candidate's flow on
    the node set ``S``, the cut ``x(A(S)) <= |S| - 1`` on the arcs with both ends in ``S``
    (arc ``k`` is column ``offset + k``), which every simple path meets. An integer
    candidate it accepts is one simple ``source``-``target`` path."""

    tails: np.ndarray
    heads: np.ndarray
    offset: int
    source: int
    target: int

    def __call__(self, x: np.ndarray) -> list[Cut]:
        columns = self.offset + np.arange(len(self.tails))
        chosen = np.asarray(x)[columns] > 0.5
        cuts = []
        for nodes in flow_cycles(self.tails, self.heads, chosen, self.source, self.target):
            inside = np.isin(self.tails, nodes) & np.isin(self.heads, nodes)
            cuts.append(Cut(columns[inside], np.ones(int(inside.sum())), -np.inf,
                            float(len(nodes) - 1)))
        return cuts


class _NonnegativeOnCycles:
    """What both shortest-path specs share about signs: on a graph with cycles
    (and ``negative_costs="error"``) costs must be non-negative. The specs declare
    ``negative_costs`` and ``sense`` themselves, after their own fields: declared here,
    they would come first, and positional arguments would bind to them."""

    if TYPE_CHECKING:
        negative_costs: NegativeCosts
        sense: Sense

    def _checked(self) -> np.ndarray | None:
        raise NotImplementedError

    def cycle_costs(self) -> np.ndarray | None:
        """The flat cost entries a cycle could pay with (a boolean mask over the
        outputs), or None on a graph without cycles, where any costs are fine."""
        checked = self._checked()
        return checked if checked is not None and checked.any() else None

    def nonnegative_costs(self) -> np.ndarray | None:
        return None if self.negative_costs == "clip" else self._checked()

    def cost_floor(self) -> CostFloor | None:
        self._refuse_clipped_max()  # again: model_copy(update=...) skips the validators
        checked = self.cycle_costs()
        return None if checked is None else CostFloor(self, checked)

    def _refuse_clipped_max(self) -> None:
        if self.sense == "max" and self.negative_costs == "clip" and \
                self.cycle_costs() is not None:
            raise SpecError(
                "sense='max' with negative_costs='clip' on a graph with cycles: a longest "
                "path wants positive costs, which are the ones a cycle could pay with, so "
                "clipping would set every positive cost to 0 and leave the costs meaningless. "
                "Expected negative_costs='error' (costs <= 0), or sense='min' on your "
                "costs negated, or an acyclic directed graph")

    def negative_cost_error(self, where: str) -> InputError:
        if self.sense == "max":
            return InputError(
                f"{self.label} got positive costs ({where}) on a graph with cycles and "
                "sense='max', where a cycle of positive total would pay (the longest simple "
                "path is NP-hard). Fix: make the costs non-positive (e.g. -softplus in your "
                "model), or use an acyclic directed graph")
        return InputError(
            f"{self.label} got negative costs ({where}) on a graph with cycles, where the "
            "cheapest path is not computable by Dijkstra (and NP-hard in general). Fix: make "
            "the costs non-negative (e.g. softplus or a shift in your model), or build the "
            "spec with negative_costs='clip' to set them to 0, or use an acyclic graph"
        )


class CostFloor:
    """A path spec's ``negative_costs`` rule, applied by every solver to its
    minimisation-form costs ``(B, N)`` (numpy or torch) before any kernel sees them:
    on the entries ``checked`` (where a cycle could pay), a cost below 0 raises the
    spec's error (``"error"``) or is set to 0 (``"clip"``). One vectorised comparison
    with a bound that is 0 on the checked entries and -inf elsewhere."""

    def __init__(self, spec: ShortestPath | GridShortestPath, checked: np.ndarray) -> None:
        self.spec = spec
        self.clip = spec.negative_costs == "clip"
        self.sign = 1.0 if spec.sense == "min" else -1.0
        #: The entries the rule applies to (a boolean mask over the outputs).
        self.checked = np.asarray(checked, dtype=bool)
        self.lower = np.where(checked, 0.0, -np.inf)
        self._tensors: dict = {}  # the bound as a tensor, per (device, dtype)

    def _bound(self, costs: Any) -> Any:
        key = (costs.device, costs.dtype)
        lower = self._tensors.get(key)
        if lower is None:
            lower = self._tensors[key] = costs.new_tensor(self.lower)
        return lower

    def __call__(self, costs: Any) -> Any:
        is_numpy = isinstance(costs, np.ndarray)
        lower = self.lower if is_numpy else self._bound(costs)
        if self.clip:
            if not is_numpy:
                return costs.clamp(min=lower)  # no read on the host
            return np.maximum(costs, lower) if (costs < lower).any() else costs
        below = costs < lower
        if bool(below.any()):
            b, j = (int(i) for i in (np.argwhere(below) if is_numpy else below.nonzero())[0])
            raise self.spec.negative_cost_error(
                f"instance {b}, value {self.sign * float(costs[b, j]):.4g}")
        return costs


def clip_negative_costs(spec: ShortestPath | GridShortestPath, weights: np.ndarray,
                        checked: np.ndarray | slice) -> np.ndarray:
    """Apply ``spec.negative_costs`` to the columns ``checked`` of a ``(B, M)`` batch of
    weights, for solvers that need non-negative costs (Dijkstra): raise on a
    negative one (``"error"``) or set it to 0 (``"clip"``), by the one rule every
    solver applies (`CostFloor`), for a kernel called on its own."""
    mask = np.zeros(weights.shape[1], dtype=bool)
    mask[checked] = True
    return CostFloor(spec, mask)(weights)



@register_spec
class ShortestPath(_NonnegativeOnCycles, Spec):
    """A cheapest source-target path in a graph with edge costs ``(num_edges,)``.

    ``y`` is the 0/1 indicator of the path's edges. Acyclic directed graphs accept
    any costs. ``ShortestPath.grid`` builds the vertex-cost grid version.

    Args:
        num_nodes: the number of nodes, numbered ``0 .. num_nodes - 1``.
        edges: the edges ``(u, v)``, one cost each, in the order of the costs.
        source: the node the path starts at.
        target: the node the path ends at.
        directed: True (default): ``(u, v)`` goes from u to v only; False lets every
            edge be used in either direction.
        sense: ``"min"`` (default, the cheapest path) or ``"max"``.
        negative_costs: what every solver does with negative costs on a graph with
            cycles (where the cheapest simple path is NP-hard), whatever the backend:
            ``"error"`` (default) raises, ``"clip"`` sets them to 0 first. Under
            ``sense="max"`` the costs that a cycle pays with are the positive ones:
            they raise, and ``"clip"`` is refused on a graph with cycles.

    Examples:
        >>> import numpy as np, combolayer as cl
        >>> spec = cl.problems.ShortestPath(num_nodes=3, edges=[(0, 1), (1, 2), (0, 2)],
        ...                                 source=0, target=2)
        >>> cl.make_solver(spec).solve(np.array([1.0, 1.0, 3.0])).tolist()
        [1.0, 1.0, 0.0]
    """

    kind: Literal["shortest_path"] = "shortest_path"
    num_nodes: int
    edges: list[tuple[int, int]]
    source: int
    target: int
    directed: bool = True
    sense: Sense = "min"
    negative_costs: NegativeCosts = "error"

    _label_fields: ClassVar[tuple[str, ...]] = ("num_nodes", "source", "target")
    lp_is_integral: ClassVar[bool] = True

    @classmethod
    def grid(cls, rows: int, cols: int, neighborhood: int = 8,
             source: tuple[int, int] = (0, 0), target: tuple[int, int] | None = None,
             negative_costs: NegativeCosts = "error") -> GridShortestPath:
        """A ``rows x cols`` grid with vertex costs; moves go to the 4 or 8 neighbours.

        Args:
            rows: the grid's number of rows.
            cols: the grid's number of columns.
            neighborhood: 8 (default, diagonal moves too) or 4.
            source: the ``(row, col)`` cell the path starts at.
            target: the ``(row, col)`` cell it ends at; None is the bottom-right cell.
            negative_costs: ``"error"`` (default) or ``"clip"``, as for `ShortestPath`.

        Returns:
            The [`GridShortestPath`][combolayer.problems.GridShortestPath] spec.
        """
        data = dict(rows=rows, cols=cols, neighborhood=neighborhood, source=source,
                    negative_costs=negative_costs)
        if target is not None:
            data["target"] = target
        return GridShortestPath(**data)

    @model_validator(mode="after")
    def _check(self) -> ShortestPath:
        if self.num_nodes < 2:
            raise InputError(f"num_nodes must be >= 2, got {self.num_nodes}")
        if not self.edges:
            raise InputError("edges must not be empty")
        for name in ("source", "target"):
            node = getattr(self, name)
            if not 0 <= node < self.num_nodes:
                raise InputError(f"{name}={node} is not a node: expected 0 <= {name} < "
                                 f"num_nodes={self.num_nodes}")
        if self.source == self.target:
            raise InputError(f"source and target must differ, both are {self.source}")
        seen: dict[tuple[int, int], int] = {}
        for i, (u, v) in enumerate(self.edges):
            for end in (u, v):
                if not 0 <= end < self.num_nodes:
                    raise InputError(f"edges[{i}] = ({u}, {v}) has a missing node {end}: "
                                     f"expected 0 <= node < num_nodes={self.num_nodes}")
            if u == v:
                raise InputError(f"edges[{i}] = ({u}, {v}) is a self-loop")
            key = (u, v) if self.directed else (min(u, v), max(u, v))
            if key in seen:
                raise InputError(f"edges[{i}] = ({u}, {v}) duplicates edges[{seen[key]}]; "
                                 "keep only the cheaper of parallel edges")
            seen[key] = i
        self._refuse_clipped_max()
        return self

    @property
    def cost_shape(self) -> tuple[int, ...]:
        return (len(self.edges),)

    @property
    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(tails, heads)`` as int arrays."""
        e = np.asarray(self.edges, dtype=np.int64).reshape(-1, 2)
        return e[:, 0], e[:, 1]

    def _checked(self) -> np.ndarray | None:
        tails, heads = self.arrays
        if self.directed and topological_order(self.num_nodes, tails, heads) is not None:
            return None  # acyclic: any costs
        return np.ones(len(self.edges), dtype=bool)

    def model_size(self) -> tuple[int, int]:
        m, n = len(self.edges), self.num_nodes  # a flow row per node, declared or not
        return (m, 2 * m + n) if self.directed else (3 * m, 8 * m + n)  # undirected: two arcs

    def to_canonical(self, lazy: bool = True) -> CanonicalForm:
        """The arc-flow form, with the cycles' cuts (`CycleSeparator`) as its
        ``row_separator``: on the edge columns when directed, on the arc auxiliaries
        (both directions of every edge) when not."""
        tails, heads = self.arrays
        m = len(tails)
        separator = (CycleSeparator(tails, heads, 0, self.source, self.target)
                     if self.directed else
                     CycleSeparator(np.concatenate([tails, heads]),
                                    np.concatenate([heads, tails]), m, self.source,
                                    self.target))
        return replace(super().to_canonical(lazy), row_separator=separator)

    def to_ilp(self) -> ILP:
        """The arc-flow ILP: exact for the costs this spec takes (non-negative ones on
        a graph with cycles; any on an acyclic graph)."""
        tails, heads = self.arrays
        m = len(tails)
        if self.directed:
            A, b = _flow_rows(self.num_nodes, tails, heads, 0, m, self.source, self.target)
            return ILP.from_matrices(shape=[m], A_eq=A, b_eq=b, sense=self.sense)
        # Undirected: arc variables u->v and v->u as auxiliaries, y_e = f_uv + f_vu.
        n_vars = 3 * m
        A_flow, b_flow = _flow_rows(self.num_nodes, np.concatenate([tails, heads]),
                                    np.concatenate([heads, tails]), m, n_vars,
                                    self.source, self.target)
        e = np.arange(m)
        link = sp.csr_matrix(
            (np.concatenate([np.ones(m), -np.ones(m), -np.ones(m)]),
             (np.concatenate([e, e, e]), np.concatenate([e, m + e, 2 * m + e]))),
            shape=(m, n_vars))
        return ILP.from_matrices(shape=[m], A_eq=sp.vstack([A_flow, link]),
                                 b_eq=np.concatenate([b_flow, np.zeros(m)]),
                                 sense=self.sense, num_aux=2 * m)


_MOVES = {
    4: [(-1, 0), (1, 0), (0, -1), (0, 1)],
    8: [(-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1)],
}


@register_spec
class GridShortestPath(_NonnegativeOnCycles, Spec):
    """A cheapest path on a ``rows x cols`` grid with vertex costs ``(rows, cols)``.

    ``y`` is the 0/1 indicator of the vertices on the path, source and target
    included, so ``<w, y>`` is the path's cost. Moves go to any of the 4 or 8
    neighbours. Build it with ``ShortestPath.grid(...)``.

    Args:
        rows: the grid's number of rows.
        cols: the grid's number of columns.
        neighborhood: 8 (default, diagonal moves too) or 4.
        source: the ``(row, col)`` cell the path starts at, ``(0, 0)`` by default.
        target: the ``(row, col)`` cell it ends at; the bottom-right cell by default.
        sense: ``"min"`` (default, the cheapest path) or ``"max"``.
        negative_costs: ``"error"`` (default) raises on negative costs, ``"clip"`` sets
            them to 0 (the grid has cycles, so Dijkstra needs them non-negative), on
            every backend. Under ``sense="max"`` positive costs raise, and ``"clip"``
            is refused.
    """

    kind: Literal["grid_shortest_path"] = "grid_shortest_path"
    rows: int
    cols: int
    neighborhood: Literal[4, 8] = 8
    source: tuple[int, int] = (0, 0)
    target: tuple[int, int]
    sense: Sense = "min"
    negative_costs: NegativeCosts = "error"

    _label_fields: ClassVar[tuple[str, ...]] = ("rows", "cols")
    lp_is_integral: ClassVar[bool] = True

    @model_validator(mode="before")
    @classmethod
    def _default_target(cls, data):
        if isinstance(data, dict) and data.get("target") is None:
            data = dict(data)
            try:
                data["target"] = (int(data["rows"]) - 1, int(data["cols"]) - 1)
            except (KeyError, TypeError, ValueError):
                data.pop("target", None)  # let field validation name the real problem
        return data

    @model_validator(mode="after")
    def _check(self) -> GridShortestPath:
        if self.rows < 1 or self.cols < 1 or self.rows * self.cols < 2:
            raise InputError(f"the grid needs at least 2 cells, got rows={self.rows}, "
                             f"cols={self.cols}")
        for name in ("source", "target"):
            r, c = getattr(self, name)
            if not (0 <= r < self.rows and 0 <= c < self.cols):
                raise InputError(f"{name}={(r, c)} is outside the {self.rows}x{self.cols} grid")
        if tuple(self.source) == tuple(self.target):
            raise InputError(f"source and target must differ, both are {tuple(self.source)}")
        self._refuse_clipped_max()
        return self

    @property
    def cost_shape(self) -> tuple[int, ...]:
        return (self.rows, self.cols)

    @property
    def source_index(self) -> int:
        return self.source[0] * self.cols + self.source[1]

    def _checked(self) -> np.ndarray:
        # The source and target lie on every path: their costs never change the choice.
        inner = np.ones(self.rows * self.cols, dtype=bool)
        inner[[self.source_index, self.target_index]] = False
        return inner

    @property
    def target_index(self) -> int:
        return self.target[0] * self.cols + self.target[1]

    @property
    def arcs(self) -> tuple[np.ndarray, np.ndarray]:
        """``(tails, heads)`` of every move, flat vertex indices; moves into the source
        and out of the target are left out (no cheapest path uses them)."""
        r, c = np.meshgrid(np.arange(self.rows), np.arange(self.cols), indexing="ij")
        r, c = r.ravel(), c.ravel()
        tails, heads = [], []
        for dr, dc in _MOVES[self.neighborhood]:
            r2, c2 = r + dr, c + dc
            ok = (r2 >= 0) & (r2 < self.rows) & (c2 >= 0) & (c2 < self.cols)
            tails.append((r * self.cols + c)[ok])
            heads.append((r2 * self.cols + c2)[ok])
        tails, heads = np.concatenate(tails), np.concatenate(heads)
        keep = (heads != self.source_index) & (tails != self.target_index)
        return tails[keep], heads[keep]

    def model_size(self) -> tuple[int, int]:
        n = self.rows * self.cols
        arcs = self.neighborhood * n  # at most one arc per move and vertex
        return n + arcs, 3 * n + 3 * arcs  # a flow row and a link row per vertex

    def to_canonical(self, lazy: bool = True) -> CanonicalForm:
        """The arc-flow form, with the cycles' cuts (`CycleSeparator`, on the arc
        auxiliaries) as its ``row_separator``."""
        tails, heads = self.arcs
        return replace(super().to_canonical(lazy), row_separator=CycleSeparator(
            tails, heads, self.rows * self.cols, self.source_index, self.target_index))

    def to_ilp(self) -> ILP:
        """The arc-flow ILP on the grid's arcs (auxiliaries): exact for the vertex costs
        this spec takes (non-negative ones, as the grid has cycles)."""
        tails, heads = self.arcs
        n, m = self.rows * self.cols, len(tails)
        A_flow, b_flow = _flow_rows(n, tails, heads, n, n + m, self.source_index,
                                    self.target_index)
        # y_v = inflow(v), plus 1 at the source.
        link = sp.csr_matrix(
            (np.concatenate([np.ones(n), -np.ones(m)]),
             (np.concatenate([np.arange(n), heads]),
              np.concatenate([np.arange(n), n + np.arange(m)]))),
            shape=(n, n + m))
        b_link = np.zeros(n)
        b_link[self.source_index] = 1.0
        return ILP.from_matrices(shape=[self.rows, self.cols], A_eq=sp.vstack([A_flow, link]),
                                 b_eq=np.concatenate([b_flow, b_link]), sense=self.sense,
                                 num_aux=m)
