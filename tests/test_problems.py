"""The problem library: every problem x backend agrees with brute-force enumeration."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
import yaml
from bruteforce import feasible_points

import combolayer as cl
from combolayer.backends import capable_backends
from combolayer.problems import TSP, Knapsack, Matching, Ranking, ShortestPath, TopK
from combolayer.problems.tsp import SubtourSeparator

#: Backends this file cross-checks; cvxpy is covered by its own tests.
MATRIX_BACKENDS = ("highs", "scip", "gurobi", "scipy", "torch", "networkx")


# -- small instances and their brute-force solution sets -------------------------


def dag_grid_edges(rows: int, cols: int) -> list[tuple[int, int]]:
    """PyEPO's grid: moves right and down only (acyclic)."""
    edges = []
    for i in range(rows):
        for j in range(cols):
            v = i * cols + j
            if j + 1 < cols:
                edges.append((v, v + 1))
            if i + 1 < rows:
                edges.append((v, v + cols))
    return edges


def simple_paths(num_nodes, arcs, source, target):
    """Every simple source-target path as a list of arc indices (arcs: (u, v, index))."""
    out: dict[int, list] = {v: [] for v in range(num_nodes)}
    for u, v, e in arcs:
        out[u].append((v, e))
    found = []

    def walk(node, seen, used):
        if node == target:
            found.append(list(used))
            return
        for v, e in out[node]:
            if v not in seen:
                walk(v, seen | {v}, used + [e])

    walk(source, {source}, [])
    return found


def enumerate_solutions(spec) -> np.ndarray:
    """All feasible solutions ``(K, *cost_shape)`` by problem-specific enumeration."""
    if isinstance(spec, ShortestPath):
        arcs = [(u, v, e) for e, (u, v) in enumerate(spec.edges)]
        if not spec.directed:
            arcs += [(v, u, e) for e, (u, v) in enumerate(spec.edges)]
        sols = []
        for path in simple_paths(spec.num_nodes, arcs, spec.source, spec.target):
            y = np.zeros(len(spec.edges))
            y[path] = 1.0
            sols.append(y)
        return np.array(sols)
    if spec.kind == "grid_shortest_path":
        tails, heads = spec.arcs
        arcs = list(zip(tails.tolist(), heads.tolist(), range(len(tails)), strict=True))
        sols = []
        for path in simple_paths(spec.rows * spec.cols, arcs, spec.source_index,
                                 spec.target_index):
            y = np.zeros(spec.rows * spec.cols)
            y[spec.source_index] = 1.0
            y[heads[path]] = 1.0
            sols.append(y.reshape(spec.cost_shape))
        return np.array(sols)
    if isinstance(spec, TSP):
        n = spec.num_nodes
        sols = []
        for perm in itertools.permutations(range(1, n)):
            tour = (0, *perm)
            y = np.zeros((n, n))
            for a, b in zip(tour, tour[1:] + tour[:1], strict=True):
                y[a, b] = y[b, a] = 1.0
            sols.append(y)
        return np.unique(np.array(sols), axis=0)
    if isinstance(spec, Matching):
        sols = []
        for cols in itertools.permutations(range(spec.cols), spec.rows):
            y = np.zeros(spec.cost_shape)
            y[np.arange(spec.rows), cols] = 1.0
            sols.append(y)
        return np.array(sols)
    if isinstance(spec, Knapsack):
        y = np.array(list(itertools.product([0.0, 1.0], repeat=spec.num_items)))
        ok = (y @ np.asarray(spec.weights).T <= np.asarray(spec.capacities) + 1e-9).all(axis=1)
        return y[ok]
    if isinstance(spec, TopK):
        sols = []
        for chosen in itertools.combinations(range(spec.n), spec.k):
            y = np.zeros(spec.n)
            y[list(chosen)] = 1.0
            sols.append(y)
        return np.array(sols)
    if isinstance(spec, Ranking):
        return np.array(list(itertools.permutations(range(1, spec.n + 1))), dtype=float)
    raise TypeError(spec)


def best_value(spec, solutions: np.ndarray, cost: np.ndarray) -> float:
    values = solutions.reshape(len(solutions), -1) @ cost.ravel()
    return float(values.min() if spec.sense == "min" else values.max())


def random_cyclic_graph(rng, n=6, m=12, directed=True):
    """A random graph with a back edge (a cycle) and a guaranteed 0 -> n-1 path."""
    spine = [(i, i + 1) for i in range(n - 1)] + [(n - 1, 0) if directed else (0, n - 1)]
    pairs = [(u, v) for u in range(n) for v in range(n)
             if u != v and (directed or u < v) and (u, v) not in spine]
    chosen = rng.choice(len(pairs), size=min(m - len(spine), len(pairs)), replace=False)
    edges = spine + [pairs[i] for i in sorted(chosen)]
    return ShortestPath(num_nodes=n, edges=edges, source=0, target=n - 1, directed=directed)


def _knapsack(rng, m=2, n=8):
    weights = rng.integers(1, 7, (m, n))
    return Knapsack(weights=weights.tolist(), capacities=(weights.sum(1) // 2).tolist())


CASES = {
    "dag_path": (lambda rng: ShortestPath(num_nodes=9, edges=dag_grid_edges(3, 3), source=0,
                                          target=8), "signed"),
    "cyclic_path": (lambda rng: random_cyclic_graph(rng), "positive"),
    "undirected_path": (lambda rng: random_cyclic_graph(rng, n=5, m=7, directed=False),
                        "positive"),
    "grid8": (lambda rng: ShortestPath.grid(3, 3), "positive"),
    "grid4": (lambda rng: ShortestPath.grid(3, 4, neighborhood=4, source=(0, 1),
                                            target=(2, 2)), "positive"),
    "tsp": (lambda rng: TSP(num_nodes=5), "positive"),
    "matching_square": (lambda rng: Matching(rows=4, cols=4), "signed"),
    "matching_rect": (lambda rng: Matching(rows=3, cols=5), "signed"),
    "knapsack": (_knapsack, "positive"),
    "knapsack_min": (lambda rng: Knapsack(weights=[[2, 3, 1, 4, 2, 5]], capacities=[7],
                                          sense="min"), "signed"),
    "topk": (lambda rng: TopK(n=7, k=3), "signed"),
    "bottomk": (lambda rng: TopK(n=6, k=2, sense="min"), "signed"),
    "ranking": (lambda rng: Ranking(n=5), "signed"),
}


def _costs(rng, spec, sign_kind, batch=4):
    costs = rng.random((batch, *spec.cost_shape))
    return costs - 0.5 if sign_kind == "signed" else costs + 0.05


def _matrix():
    for case, (make, _) in CASES.items():
        spec = make(np.random.default_rng(0))
        for backend in capable_backends(spec):
            if backend in MATRIX_BACKENDS:
                yield pytest.param(case, backend, id=f"{case}-{backend}")


@pytest.mark.parametrize(("case", "backend"), list(_matrix()))
def test_every_backend_matches_brute_force(case, backend):
    rng = np.random.default_rng(list(CASES).index(case))  # not hash(): salted per process
    make, sign_kind = CASES[case]
    spec = make(rng)
    solutions = enumerate_solutions(spec)
    costs = _costs(rng, spec, sign_kind)
    y = cl.make_solver(spec, backend).solve(costs)
    assert y.shape == costs.shape
    for b in range(len(costs)):
        # y is one of the feasible solutions, and an optimal one
        assert np.any(np.all(np.isclose(solutions, y[b]), axis=tuple(range(1, y.ndim)))), y[b]
        assert np.sum(costs[b] * y[b]) == pytest.approx(best_value(spec, solutions, costs[b]))


@pytest.mark.parametrize("case", ["dag_path", "grid8", "matching_rect", "knapsack", "topk",
                                  "tsp"])
def test_auto_uses_the_specialised_solver_and_it_agrees(case):
    spec = CASES[case][0](np.random.default_rng(1))
    expected = {"dag_path": "scipy", "grid8": "scipy", "matching_rect": "scipy",
                "knapsack": "scipy", "topk": "torch", "tsp": None}[case]
    solver = cl.make_solver(spec)
    if expected is not None:
        assert solver.backend == expected
    costs = _costs(np.random.default_rng(2), spec, CASES[case][1])
    ref = cl.make_solver(spec, "highs").solve(costs)
    y = solver.solve(costs)
    axes = tuple(range(1, costs.ndim))
    np.testing.assert_allclose((costs * y).sum(axes), (costs * ref).sum(axes), atol=1e-9)


@pytest.mark.parametrize("case", ["dag_path", "matching_rect", "knapsack", "topk", "ranking"])
def test_ilp_feasible_set_is_the_problem(case):
    """to_ilp() has exactly the enumerated solutions as its feasible outputs."""
    # Ranking's ILP has n*n auxiliaries: enumerate a small one
    spec = Ranking(n=3) if case == "ranking" else CASES[case][0](np.random.default_rng(3))
    points = feasible_points(spec.to_ilp())[:, : spec.num_outputs]
    ilp = np.unique(points, axis=0)
    truth = np.unique(enumerate_solutions(spec).reshape(-1, spec.num_outputs), axis=0)
    np.testing.assert_array_equal(ilp, truth)


def test_tsp_mtz_formulation_is_exact():
    spec = TSP(num_nodes=6)
    rng = np.random.default_rng(4)
    costs = rng.random((3, 6, 6))  # asymmetric on purpose
    solutions = enumerate_solutions(spec)
    y = cl.make_solver(spec.to_ilp(), "highs").solve(costs)
    for b in range(3):
        assert np.sum(costs[b] * y[b]) == pytest.approx(best_value(spec, solutions, costs[b]))
        np.testing.assert_array_equal(y[b], y[b].T)
        np.testing.assert_array_equal(y[b].sum(1), 2.0)
        assert np.trace(y[b]) == 0


def test_tsp_separator_cuts_subtours():
    sep = SubtourSeparator(6)
    two_triangles = np.zeros((6, 6))
    for a, b in [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3)]:
        two_triangles[a, b] = two_triangles[b, a] = 1.0
    cuts = sep(two_triangles.ravel())
    assert len(cuts) == 2
    for cut in cuts:
        assert cut.lower == 2.0 and cut.upper == np.inf
        assert two_triangles.ravel()[cut.index] @ cut.value == 0.0  # violated
    tour = np.roll(np.eye(6), 1, axis=1)
    assert sep((tour + tour.T).ravel()) == []


# -- shortest-path specifics -------------------------------------------------------


def test_dag_dp_handles_negative_costs_like_pyepo_grid():
    spec = ShortestPath(num_nodes=25, edges=dag_grid_edges(5, 5), source=0, target=24)
    assert spec.cost_shape == (40,)
    costs = np.random.default_rng(5).normal(size=(6, 40))
    y = cl.make_solver(spec).solve(costs)
    ref = cl.make_solver(spec, "highs").solve(costs)
    np.testing.assert_allclose((costs * y).sum(1), (costs * ref).sum(1), atol=1e-9)
    assert (y.sum(1) == 8).all()  # 4 right + 4 down moves


@pytest.mark.parametrize("backend", ["scipy", "networkx"])
def test_negative_costs_on_cyclic_graph_raise_or_clip(backend):
    spec = ShortestPath.grid(4, 4)
    costs = np.random.default_rng(6).random((2, 4, 4))
    costs[1, 1, 2] = -0.5
    with pytest.raises(ValueError, match="negative costs .* negative_costs='clip'"):
        cl.make_solver(spec, backend).solve(costs)
    clipped = ShortestPath.grid(4, 4, negative_costs="clip")
    y = cl.make_solver(clipped, backend).solve(costs)
    expected = cl.make_solver(clipped, backend).solve(np.maximum(costs, 0.0))
    np.testing.assert_array_equal(y, expected)
    # the source and target costs never matter, negative or not
    costs[0, 0, 0] = costs[0, 3, 3] = -3.0
    assert cl.make_solver(spec, backend).solve(costs[:1])[0, 0, 0] == 1.0


@pytest.mark.parametrize("backend", ["scipy", "networkx", "highs"])
@pytest.mark.parametrize("edges", [[(0, 1), (2, 3)], [(0, 1), (1, 0), (2, 3)]],
                         ids=["acyclic", "cyclic"])
def test_no_path_raises_infeasible(backend, edges):
    spec = ShortestPath(num_nodes=4, edges=edges, source=0, target=3)
    with pytest.raises(cl.InfeasibleError):
        cl.make_solver(spec, backend).solve(np.ones(len(edges)))


def test_grid_solution_includes_source_and_target():
    spec = ShortestPath.grid(5, 6, source=(1, 1), target=(4, 2))
    y = cl.make_solver(spec).solve(np.ones((5, 6)))
    assert y[1, 1] == 1 and y[4, 2] == 1 and y.sum() == 4  # 3 king moves


# -- tie-breaking ------------------------------------------------------------------


def test_topk_and_ranking_break_ties_by_index():
    w = torch.tensor([[3.0, 1.0, 3.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    topk = cl.make_solver(TopK(n=5, k=2)).solve(w)
    np.testing.assert_array_equal(topk, [[1, 0, 1, 0, 0], [1, 1, 0, 0, 0]])
    ranks = cl.make_solver(Ranking(n=5)).solve(w)
    np.testing.assert_array_equal(ranks, [[1, 5, 2, 4, 3], [1, 2, 3, 4, 5]])


@pytest.mark.parametrize("case", ["dag_path", "grid8", "matching_square", "knapsack", "topk",
                                  "ranking", "tsp"])
def test_ties_are_deterministic_and_batch_independent(case):
    spec = CASES[case][0](np.random.default_rng(7))
    tied = np.round(np.random.default_rng(8).random((5, *spec.cost_shape)) * 2) + 1.0
    solver = cl.make_solver(spec)
    first = solver.solve(tied)
    np.testing.assert_array_equal(first, solver.solve(tied))
    np.testing.assert_array_equal(first[2:3], cl.make_solver(spec).solve(tied[2:3]))


def test_torch_path_is_vmap_friendly_and_keeps_device_dtype():
    from combolayer.backends.closed_form import ranks, topk_indicator

    w = torch.randn(3, 4, 10, dtype=torch.float64)
    y = torch.func.vmap(lambda c: topk_indicator(c, 4))(w.reshape(12, 10))
    np.testing.assert_array_equal(y, cl.make_solver(TopK(n=10, k=4, sense="min")).solve(w)
                                  .reshape(12, 10))
    r = torch.func.vmap(ranks)(w.reshape(12, 10))
    solved = cl.make_solver(Ranking(n=10)).solve(w)
    assert solved.dtype == torch.float64 and solved.shape == (3, 4, 10)
    np.testing.assert_array_equal(r, solved.reshape(12, 10))
    assert sorted(r[0].tolist()) == list(range(1, 11))
    assert r[0, w[0, 0].argmax()] == 1.0


# -- specs: validation and serialisation --------------------------------------------

ALL_SPECS = [make(np.random.default_rng(0)) for make, _ in CASES.values()]


@pytest.mark.parametrize("spec", ALL_SPECS, ids=list(CASES))
def test_json_and_yaml_round_trip(spec):
    assert cl.load_spec(spec.model_dump_json()) == spec
    assert cl.load_spec(yaml.safe_dump(spec.model_dump(mode="json"))) == spec
    assert cl.load_spec(json.loads(spec.model_dump_json())) == spec
    assert spec.to_ilp().cost_shape == spec.cost_shape


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: ShortestPath(num_nodes=3, edges=[(0, 1)], source=1, target=1),
         "source and target must differ"),
        (lambda: ShortestPath(num_nodes=3, edges=[(0, 5)], source=0, target=2),
         r"edges\[0\] = \(0, 5\) has a missing node 5"),
        (lambda: ShortestPath(num_nodes=3, edges=[(0, 1), (0, 1)], source=0, target=1),
         "duplicates edges"),
        (lambda: ShortestPath(num_nodes=3, edges=[(0, 1)], source=0, target=7),
         "target=7 is not a node"),
        (lambda: ShortestPath.grid(3, 3, source=(1, 1), target=(1, 1)),
         "source and target must differ"),
        (lambda: ShortestPath.grid(3, 3, target=(3, 0)), "outside the 3x3 grid"),
        (lambda: ShortestPath.grid(3, 3, neighborhood=6), "neighborhood"),
        (lambda: TSP(num_nodes=2), "num_nodes must be >= 3"),
        (lambda: Matching(rows=4, cols=3), "cols=3 < rows=4"),
        (lambda: Knapsack(weights=[[1, 2]], capacities=[-1]), r"capacities\[0\] must be"),
        (lambda: Knapsack(weights=[[1, 2]], capacities=[1, 2]), "capacities has 2 entries"),
        (lambda: Knapsack(weights=[[1, -2]], capacities=[1]), r"weights\[0\]\[1\]"),
        (lambda: TopK(n=4, k=5), "k=5 is outside 1..n=4"),
        (lambda: TopK(n=4, k=0), "k=0 is outside"),
        (lambda: Ranking(n=3, extra=1), "extra"),
    ],
)
def test_invalid_specs_raise_spec_error(make, match):
    with pytest.raises(cl.SpecError, match=match):
        make()


def test_load_spec_rejects_bad_fields_from_yaml():
    with pytest.raises(cl.SpecError, match="k=9 is outside"):
        cl.load_spec("kind: topk\nn: 3\nk: 9\n")
    spec = cl.load_spec("kind: grid_shortest_path\nrows: 4\ncols: 5\n")
    assert spec.target == (3, 4) and spec.cost_shape == (4, 5)


def test_wrong_cost_shape_names_expected_and_got():
    with pytest.raises(ValueError, match=r"trailing shape \(5, 4\) but TSP\(num_nodes=5\)"):
        cl.make_solver(TSP(num_nodes=5)).solve(np.ones((5, 4)))


def test_fractional_knapsack_falls_back_to_a_mip_backend():
    spec = Knapsack(weights=[[1.5, 2.255, 1.0, 3.0]], capacities=[4.0])
    solver = cl.make_solver(spec)
    assert solver.backend != "scipy"
    with pytest.raises(cl.BackendUnavailable, match="at most 2 decimals"):
        cl.make_solver(spec, "scipy")
    y = solver.solve(np.array([3.0, 4.0, 1.0, 5.0]))
    np.testing.assert_array_equal(y, [1, 1, 0, 0])  # 3.755 <= 4, value 7 beats 6


def test_knapsack_dp_scales_decimal_weights():
    rng = np.random.default_rng(11)
    weights = rng.uniform(3, 8, (2, 10)).round(1)  # PyEPO's weights
    spec = Knapsack(weights=weights.tolist(), capacities=[20.0, 20.3])
    assert cl.make_solver(spec).backend == "scipy"
    values = rng.random((4, 10))
    y = cl.make_solver(spec).solve(values)
    assert (y @ weights.T <= np.array([20.0, 20.3]) + 1e-9).all()
    np.testing.assert_allclose((values * y).sum(1), [
        best_value(spec, enumerate_solutions(spec), v) for v in values])


def test_scipy_ranks_behind_scip_only_where_scip_is_faster(monkeypatch):
    from combolayer.backends import registry

    monkeypatch.setenv("COMBOLAYER_AUTO_GUROBI", "0")  # Gurobi's place: test_backends.py

    small = Knapsack(weights=[[3, 4, 5]], capacities=[8])
    large = Knapsack(weights=[[3.5, 4.5, 5.5]] * 2, capacities=[300.0, 300.0])
    assert cl.make_solver(small).backend == "scipy"
    # "enumerate" takes small binary problems first (test_rows.py); behind it, scip then scipy
    assert registry.capable_backends(large)[:4] == ["enumerate", "scip", "scipy", "highs"]
    # TSP: the Held-Karp DP up to TSP_DP_MAX_NODES; above, HiGHS's warm-started LP cut
    # rounds first (docs/problems.md) and scipy's milp loop last
    assert cl.make_solver(TSP(num_nodes=5)).backend == "scipy"
    assert registry.capable_backends(TSP(num_nodes=13))[:3] == ["highs", "scip", "scipy"]
    for spec in (large, TSP(num_nodes=13)):
        assert cl.make_solver(spec, "scipy").backend == "scipy"  # still selectable by name
    monkeypatch.setitem(registry._REGISTRY, "scip", type(
        "MissingScip", (registry.backends()["scip"],), {"requires": ("no_such_pkg",)}))
    assert cl.make_solver(TSP(num_nodes=13)).backend == "highs"
    assert registry.capable_backends(large)[:2] == ["enumerate", "scipy"]


def test_scipy_tsp_kernel_matches_brute_force():
    """The scipy TSP solver, called directly (auto prefers SCIP where installed)."""
    from combolayer.backends.algorithms import ScipyBackend

    spec = TSP(num_nodes=6)
    kernel = ScipyBackend().compile(spec, cl.BackendConfig())
    costs = np.random.default_rng(12).random((3, 6, 6))
    y = kernel(costs.reshape(3, -1)).reshape(3, 6, 6)
    solutions = enumerate_solutions(spec)
    for b in range(3):
        assert np.sum(costs[b] * y[b]) == pytest.approx(best_value(spec, solutions, costs[b]))


@pytest.mark.parametrize("n", [3, 4, 5, 7])
def test_held_karp_matches_brute_force_on_any_costs(n):
    """The TSP DP (auto's choice up to TSP_DP_MAX_NODES cities) on asymmetric,
    negative and tied costs, in chunks smaller than the batch."""
    from combolayer.backends import algorithms

    spec = TSP(num_nodes=n)
    rng = np.random.default_rng(n)
    costs = np.concatenate([rng.normal(size=(6, n, n)), rng.integers(0, 2, (3, n, n))])
    solutions = enumerate_solutions(spec)
    y = algorithms.held_karp(costs.reshape(len(costs), -1), n).reshape(costs.shape)
    for b in range(len(costs)):
        assert np.any(np.all(solutions == y[b], axis=(1, 2))), y[b]  # a tour
        assert np.sum(costs[b] * y[b]) == pytest.approx(best_value(spec, solutions, costs[b]))


def test_held_karp_agrees_with_scip_at_the_size_limit(monkeypatch):
    from combolayer.backends import algorithms

    pytest.importorskip("pyscipopt")
    n = algorithms.TSP_DP_MAX_NODES
    monkeypatch.setattr(algorithms, "_TSP_CHUNK_CELLS", 1)  # one instance per chunk
    spec = TSP(num_nodes=n)
    points = np.random.default_rng(5).random((3, n, 2))
    costs = np.linalg.norm(points[:, :, None] - points[:, None], axis=-1)
    dp = cl.make_solver(spec).solve(costs)
    assert cl.make_solver(spec).backend == "scipy"
    ref = cl.make_solver(spec, "scip").solve(costs)
    np.testing.assert_allclose((costs * dp).sum((1, 2)), (costs * ref).sum((1, 2)), atol=1e-9)


def test_specialised_backends_refuse_other_kinds():
    with pytest.raises(cl.BackendUnavailable, match="backends that can: .*highs"):
        cl.make_solver(Ranking(n=4), "scipy")
    with pytest.raises(cl.BackendUnavailable, match="torch"):
        cl.make_solver(Knapsack(weights=[[1]], capacities=[1]), "torch")


# -- inside the layer ------------------------------------------------------------


LAYER_CASES = ["dag_path", "grid8", "tsp", "matching_rect", "knapsack", "topk", "ranking"]
#: "std" subtracts the mean, which changes the solution where solutions differ in size
#: (grid paths of different lengths, knapsack); scaling alone never does.
PROJECTION = {"grid8": "norm", "knapsack": "norm"}


@pytest.mark.parametrize("method", [cl.Identity(), cl.Blackbox(lam=5.0)],
                         ids=["identity", "blackbox"])
@pytest.mark.parametrize("case", LAYER_CASES)
def test_problem_in_layer_batched(case, method):
    spec = CASES[case][0](np.random.default_rng(9))
    if case == "grid8":  # Blackbox's perturbed costs u + lam * dL/dy can turn negative
        spec = ShortestPath.grid(3, 3, negative_costs="clip")
    layer = cl.ComboLayer(spec, method=method, projection=PROJECTION.get(case, "std"))
    # positive costs: the grid path refuses negative ones (cycles)
    w = (torch.rand(3, *spec.cost_shape) + 0.1).requires_grad_()
    y = layer(w)
    assert y.shape == w.shape
    ref = cl.make_solver(spec).solve(w.detach())
    torch.testing.assert_close(y.detach(), ref)
    (y * torch.randn_like(y)).sum().backward()
    assert w.grad is not None and torch.isfinite(w.grad).all()


@pytest.mark.parametrize("case", LAYER_CASES)
def test_training_reduces_the_loss(case):
    spec = CASES[case][0](np.random.default_rng(10))
    gen = torch.Generator().manual_seed(0)
    true_costs = torch.rand(8, *spec.cost_shape, generator=gen)
    target = cl.make_solver(spec).solve(true_costs)
    w = torch.zeros(8, *spec.cost_shape)
    w = (w + 0.1 * torch.randn(w.shape, generator=gen)).requires_grad_()
    layer = cl.ComboLayer(spec, method="identity", projection=PROJECTION.get(case, "std"))
    optimizer = torch.optim.Adam([w], lr=0.1)
    losses = []
    for _ in range(20):
        # softplus keeps the costs positive, as a model predicting path costs would
        loss = (layer(torch.nn.functional.softplus(w)) - target).abs().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert min(losses[-5:]) < losses[0]


# -- positional arguments ------------------------------------------------------------------


def test_named_problems_take_positional_arguments_as_api_md_writes_them():
    assert cl.problems.TSP(5) == cl.problems.TSP(num_nodes=5)
    assert cl.problems.TopK(10, 3).k == 3 and cl.problems.Matching(2, 3).cols == 3
    with pytest.raises(cl.SpecError, match=r"TopK got two values for 'n'"):
        cl.problems.TopK(10, n=4, k=2)
    with pytest.raises(cl.SpecError, match=r"Ranking takes at most 2 positional arguments"):
        cl.problems.Ranking(3, "min", 1)
    edges = [(0, 1), (1, 2), (0, 2)]
    assert (ShortestPath(3, edges, 0, 2, False)
            == ShortestPath(num_nodes=3, edges=edges, source=0, target=2, directed=False))
    assert cl.problems.GridShortestPath(3, 4, 4).neighborhood == 4


def test_a_shifting_projection_is_refused_without_the_exact_hull_where_two_sums_differ(
        monkeypatch):
    """Paths of different lengths: two optima with different sums refuse "mean" at once;
    the exact hull's 2 N MIP solves (seconds for a 5 x 5 grid, minutes from 7 x 7) run
    only where no such pair shows up."""
    from combolayer.layer import projection as module

    module._sum_fixed.cache_clear()  # decided once per spec: decide it here
    exact_calls = []
    analyze = module.analyze
    monkeypatch.setattr(module, "analyze", lambda spec, exact=False: (
        exact_calls.append(exact), analyze(spec, exact=exact))[1])
    with pytest.raises(ValueError, match="changes the solution"):
        cl.ComboLayer(cl.problems.ShortestPath.grid(12, 12), projection="mean")
    assert True not in exact_calls


@pytest.mark.parametrize("projection", ["mean", "std"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_shifting_projection_is_refused_exactly_where_it_would_change_the_solution(
        case, projection):
    """Shifting w by its mean keeps the argmin iff every solution has the same sum(y)
    (brute force over the solutions); where it would not, the layer refuses to build."""
    spec = CASES[case][0](np.random.default_rng(0))
    sums = {round(float(y.sum()), 6) for y in enumerate_solutions(spec)}
    if len(sums) > 1:
        with pytest.raises(ValueError, match="changes the solution"):
            cl.ComboLayer(spec, projection=projection)
        return
    layer = cl.ComboLayer(spec, projection=projection).eval()
    w = torch.as_tensor(_costs(np.random.default_rng(1), spec, "positive"))
    expected = cl.make_solver(spec).solve(w)
    assert (layer(w) * w).sum() == pytest.approx(float((expected * w).sum()))
