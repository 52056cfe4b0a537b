"""Per-call rows ``A x <= b`` on the named problems equal brute force.

Rows can break what a named problem's formulation relies on: the integral LP of
TopK, Ranking, Matching and the shortest paths (a row makes its vertices
fractional, so the problem must be solved as a MIP), and the shortest paths'
arc flows, which without subtour elimination meet a row forcing a vertex with
the path plus a disjoint cycle. Every backend that takes rows, and ``"auto"``,
solver and layer, is checked here against enumeration of the problem's own
solutions (k-hot vectors, permutations, assignments, item sets, simple paths,
tours), with random rows per instance: the answer meets the rows and is optimal,
or the instance is flagged infeasible exactly when brute force finds no point.
"""

from __future__ import annotations

import importlib.util
import itertools
import warnings

import numpy as np
import pytest
import torch

import combolayer as cl
from combolayer.errors import BackendUnavailable

HAS_GUROBI = importlib.util.find_spec("gurobipy") is not None
BACKENDS = ["highs", "scip", "cvxpy", "enumerate", "auto",
            pytest.param("gurobi", marks=pytest.mark.skipif(not HAS_GUROBI,
                                                             reason="gurobipy missing"))]
#: Instances per problem and backend, each with its own rows.
INSTANCES = 16


# -- the problems' solutions, enumerated ------------------------------------------------

def _topk(spec: cl.problems.TopK) -> np.ndarray:
    points = []
    for chosen in itertools.combinations(range(spec.n), spec.k):
        y = np.zeros(spec.n)
        y[list(chosen)] = 1.0
        points.append(y)
    return np.array(points)


def _ranking(spec: cl.problems.Ranking) -> np.ndarray:
    return np.array(list(itertools.permutations(range(1, spec.n + 1))), dtype=float)


def _matching(spec: cl.problems.Matching) -> np.ndarray:
    points = []
    for columns in itertools.permutations(range(spec.cols), spec.rows):
        y = np.zeros((spec.rows, spec.cols))
        y[np.arange(spec.rows), columns] = 1.0
        points.append(y.ravel())
    return np.array(points)


def _knapsack(spec: cl.problems.Knapsack) -> np.ndarray:
    points = np.array(list(itertools.product((0.0, 1.0), repeat=spec.num_items)))
    fits = (points @ np.asarray(spec.weights).T <= np.asarray(spec.capacities)).all(axis=1)
    return points[fits]


def _simple_paths(successors: dict[int, list[int]], source: int, target: int):
    """Every simple source-target path, as a node list (depth first)."""
    stack = [[source]]
    while stack:
        path = stack.pop()
        if path[-1] == target:
            yield path
            continue
        stack.extend(path + [v] for v in successors.get(path[-1], []) if v not in path)


def _graph_paths(spec: cl.problems.ShortestPath) -> np.ndarray:
    successors: dict[int, list[int]] = {}
    edge: dict[tuple[int, int], int] = {}
    for k, (u, v) in enumerate(spec.edges):
        for a, b in ((u, v),) if spec.directed else ((u, v), (v, u)):
            successors.setdefault(a, []).append(b)
            edge[a, b] = k
    points = []
    for path in _simple_paths(successors, spec.source, spec.target):
        y = np.zeros(len(spec.edges))
        y[[edge[a, b] for a, b in itertools.pairwise(path)]] = 1.0
        points.append(y)
    return np.unique(np.array(points), axis=0)


def _grid_paths(spec) -> np.ndarray:
    tails, heads = spec.arcs
    successors: dict[int, list[int]] = {}
    for u, v in zip(tails.tolist(), heads.tolist(), strict=True):
        successors.setdefault(u, []).append(v)
    points = []
    for path in _simple_paths(successors, spec.source_index, spec.target_index):
        y = np.zeros(spec.rows * spec.cols)
        y[path] = 1.0
        points.append(y)
    return np.unique(np.array(points), axis=0)


def _tours(spec: cl.problems.TSP) -> np.ndarray:
    n = spec.num_nodes
    points = []
    for rest in itertools.permutations(range(1, n)):
        if rest[0] > rest[-1]:
            continue  # each tour once, not once per direction
        order = (0, *rest)
        y = np.zeros((n, n))
        for a, b in zip(order, order[1:] + order[:1], strict=True):
            y[a, b] = y[b, a] = 1.0
        points.append(y.ravel())
    return np.array(points)


def _problems():
    """``(name, spec, solutions, non-negative costs)`` for every named problem kind."""
    rng = np.random.default_rng(5)
    weights = rng.integers(1, 6, (2, 6)).astype(float)
    graph = cl.problems.ShortestPath(  # cycles in both directions, and a chord
        num_nodes=5, edges=[(0, 1), (1, 2), (2, 1), (2, 4), (1, 3), (3, 2), (3, 4), (0, 3),
                            (4, 0)], source=0, target=4)
    undirected = cl.problems.ShortestPath(
        num_nodes=5, edges=[(0, 1), (1, 2), (2, 4), (1, 3), (3, 4), (0, 2)], source=0,
        target=4, directed=False)
    problems = [
        ("topk", cl.problems.TopK(n=5, k=2), False),
        ("topk_min", cl.problems.TopK(n=6, k=3, sense="min"), False),
        ("ranking", cl.problems.Ranking(4), False),
        ("matching", cl.problems.Matching(3, 3), False),
        ("matching_rectangular", cl.problems.Matching(2, 4), False),
        ("knapsack", cl.problems.Knapsack(weights=weights.tolist(),
                                          capacities=(weights.sum(axis=1) / 2).tolist()),
         False),
        ("grid", cl.problems.ShortestPath.grid(3, 3), True),
        ("grid4", cl.problems.ShortestPath.grid(3, 3, neighborhood=4), True),
        ("graph", graph, True),
        ("undirected", undirected, True),
        ("tsp", cl.problems.TSP(num_nodes=5), False),
    ]
    enumerate_solutions = {"topk": _topk, "ranking": _ranking, "matching": _matching,
                           "knapsack": _knapsack, "grid_shortest_path": _grid_paths,
                           "shortest_path": _graph_paths, "tsp": _tours}
    return [(name, spec, enumerate_solutions[spec.kind](spec), nonnegative)
            for name, spec, nonnegative in problems]


PROBLEMS = _problems()


# -- random instances -------------------------------------------------------------------

def instances(rng: np.random.Generator, spec, points: np.ndarray, nonnegative: bool):
    """Costs and two rows per instance: random rows in {-1, 0, 1} around a random
    solution (slack -1 to 1, so some instances are infeasible); on paths, the first row
    often forces a vertex or an edge of that solution (``-y_j <= -1``)."""
    n = points.shape[1]
    anchors = points[rng.integers(0, len(points), INSTANCES)]
    A = rng.choice([-1.0, 0.0, 0.0, 1.0], size=(INSTANCES, 2, n))
    b = np.einsum("imn,in->im", A, anchors) + rng.integers(-1, 2, (INSTANCES, 2))
    if nonnegative:
        for i in np.flatnonzero(rng.random(INSTANCES) < 0.5):
            j = rng.choice(np.flatnonzero(anchors[i]))
            A[i, 0] = 0.0
            A[i, 0, j], b[i, 0] = -1.0, -1.0
    costs = (rng.uniform(0.1, 2.0, (INSTANCES, n)) if nonnegative
             else rng.normal(size=(INSTANCES, n)))
    return costs, A, b


def brute_force(spec, points: np.ndarray, costs: np.ndarray, A: np.ndarray, b: np.ndarray):
    """Per instance: the optimal objective over the solutions that meet its rows (NaN
    when none does), and which solutions meet them ``(B, K)``."""
    meets = (np.einsum("imn,kn->imk", A, points) <= b[..., None] + 1e-9).all(axis=1)
    values = costs @ points.T
    if spec.sense == "max":
        values = -values
    best = np.where(meets, values, np.inf).min(axis=1)
    best = np.where(np.isfinite(best), best, np.nan)
    return (best if spec.sense == "min" else -best), meets


def wrong_answers(spec, points, costs, A, b, y: np.ndarray, flagged: np.ndarray) -> list[str]:
    """What is wrong with the answers ``y`` ``(B, N)`` and the infeasible flags."""
    best, meets = brute_force(spec, points, costs, A, b)
    wrong = []
    for i in range(len(costs)):
        if np.isnan(best[i]):
            if not flagged[i]:
                wrong.append(f"instance {i}: infeasible by brute force, not flagged, got "
                             f"{y[i].tolist()}")
            continue
        if flagged[i]:
            wrong.append(f"instance {i}: flagged infeasible, brute force finds {best[i]:.4f}")
            continue
        solution = np.flatnonzero((np.abs(points - y[i]) < 1e-6).all(axis=1))
        if len(solution) == 0:
            wrong.append(f"instance {i}: {y[i].tolist()} is not a solution of {spec.label}")
        elif not meets[i, solution[0]]:
            wrong.append(f"instance {i}: {y[i].tolist()} breaks its rows "
                         f"(A y - b = {(A[i] @ y[i] - b[i]).tolist()})")
        elif abs(costs[i] @ y[i] - best[i]) > 1e-6 * max(1.0, abs(best[i])):
            wrong.append(f"instance {i}: objective {costs[i] @ y[i]:.4f}, brute force "
                         f"{best[i]:.4f}")
    return wrong


def solve_with(backend: str, spec, costs, A, b, layer_method: str | None):
    """``(y, flagged)`` from the solver (``layer_method`` None) or from a layer."""
    config = cl.BackendConfig(name=backend, on_infeasible="flag")
    shape = (len(costs), *spec.cost_shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the flagged instances' warning
        if layer_method is None:
            solver = cl.make_solver(spec, config)
            y, status = solver.solve(costs.reshape(shape), A=A, b=b, return_status=True)
            return y.reshape(len(costs), -1), np.array([s == "infeasible" for s in status])
        layer = cl.ComboLayer(spec, method=layer_method, backend=config)
        w = torch.tensor(costs.reshape(shape), requires_grad=True)
        y = layer(w, A=torch.tensor(A), b=torch.tensor(b))
        return (y.detach().numpy().reshape(len(costs), -1),
                layer.last_infeasible.numpy().reshape(-1))


def check_backend(backend: str, layer_method: str | None, seed: int) -> tuple[int, list[str]]:
    rng = np.random.default_rng(seed)
    checked, wrong = 0, []
    for name, spec, points, nonnegative in PROBLEMS:
        costs, A, b = instances(rng, spec, points, nonnegative)
        try:
            y, flagged = solve_with(backend, spec, costs, A, b, layer_method)
        except BackendUnavailable:
            assert backend == "enumerate", (name, backend)  # more than 20 binary variables
            continue
        checked += len(costs)
        wrong += [f"{name}: {line}" for line in
                  wrong_answers(spec, points, costs, A, b, y, np.asarray(flagged, dtype=bool))]
    return checked, wrong


@pytest.mark.parametrize("backend", BACKENDS)
def test_solver_with_rows_equals_brute_force_on_every_named_problem(backend):
    checked, wrong = check_backend(backend, None, seed=11)
    assert not wrong, f"{backend}: {len(wrong)} wrong of {checked}:\n" + "\n".join(wrong[:10])
    assert checked >= (5 if backend == "enumerate" else len(PROBLEMS)) * INSTANCES


@pytest.mark.parametrize("method", ["identity", "comboptnet"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_with_rows_equals_brute_force_on_every_named_problem(backend, method):
    checked, wrong = check_backend(backend, method, seed=12)
    assert not wrong, (f"{backend}, {method}: {len(wrong)} wrong of {checked}:\n"
                       + "\n".join(wrong[:10]))
    assert checked >= (5 if backend == "enumerate" else len(PROBLEMS)) * INSTANCES


def test_row_forcing_a_grid_vertex_gets_the_cheapest_simple_path_not_a_cycle():
    """The issue's grid: forcing vertex (2, 0) onto a 3 x 3 path is met by the path plus
    a 2-cycle through (2, 0) without subtour elimination; the answer is a simple path."""
    spec = cl.problems.ShortestPath.grid(3, 3)
    costs = np.array([[1.0, 0.1, 0.1], [3.0, 3.0, 0.1], [3.0, 3.0, 1.0]])
    A = np.zeros((1, 9))
    A[0, 6] = -1.0
    points = _grid_paths(spec)
    best, _ = brute_force(spec, points, costs.reshape(1, -1), A[None], np.array([[-1.0]]))
    for backend in ["highs", "scip", "cvxpy", "auto"] + (["gurobi"] if HAS_GUROBI else []):
        y = cl.make_solver(spec, backend).solve(costs, A=A, b=np.array([-1.0]))
        assert (np.abs(points - y.ravel()) < 1e-6).all(axis=1).any(), (backend, y)
        assert float((costs * y).sum()) == pytest.approx(best[0]), backend


def test_cvxpy_hands_path_rows_to_a_backend_that_separates_cycles():
    """cvxpy has no lazy constraints: its shortest-path kernel takes no rows, and the
    solver's calls with rows go to one that cuts the cycles off."""
    spec = cl.problems.ShortestPath.grid(3, 3)
    solver = cl.make_solver(spec, "cvxpy")
    assert not solver.kernel.takes_rows
    assert solver.row_solver().backend != "cvxpy"
    assert cl.make_solver(cl.problems.TopK(5, 2), "cvxpy").kernel.takes_rows


def test_rows_do_not_change_the_solves_without_rows():
    """A kernel solves the integral LP again once a call's rows are taken out: the next
    call without rows is the LP's answer (HiGHS's columns continuous again)."""
    spec = cl.problems.TopK(n=5, k=2)
    solver = cl.make_solver(spec, "highs")
    costs = np.array([-1.2131, 0.8253, -0.7692, -1.5507, 1.2538])
    y = solver.solve(costs, A=np.array([[0.0, 1.0, 0.0, -1.0, 1.0]]), b=np.array([1.0]))
    assert y.tolist() == [0.0, 0.0, 1.0, 0.0, 1.0]  # 1-hot before: the rounded LP vertex
    assert not any(int(kind) for kind in solver.kernel.model.getLp().integrality_)
    assert solver.solve(costs).tolist() == [0.0, 1.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize("spec, costs", [(cl.problems.TopK(1, 1), [0.5]),
                                         (cl.problems.Matching(1, 1), [[0.5]])])
def test_rows_on_a_one_variable_problem(spec, costs):
    """Gurobi refused the one-entry array of variable types it was given once rows made
    the model a MIP ("could not convert string to float: 'I'"), on every backend that
    hands rows to it."""
    for backend in ["auto", *cl.backends.capable_backends(spec)]:
        solver = cl.make_solver(spec, backend)
        np.testing.assert_array_equal(
            solver.solve(np.array(costs), A=np.array([[1.0]]), b=np.array([2.0])),
            np.ones_like(costs), err_msg=backend)
