"""TSP stays exact through every speed-up: the LP cut rounds, the integral-LP
shortcut and the cut pool (initial or lazy rows), against brute force for
n <= 8 and against the compact MTZ formulation (``spec.to_ilp()``) up to n = 15."""

import itertools

import numpy as np
import pytest

import combolayer as cl
import combolayer.backends.highs as highs_backend
import combolayer.problems.tsp as tsp_module
from combolayer.problems import TSP


def tour_lengths(costs: np.ndarray) -> float:
    """The cheapest ``<w, y>`` over every tour, by enumeration (node 0 first)."""
    n = len(costs)
    sym = costs + costs.T
    best = np.inf
    for rest in itertools.permutations(range(1, n)):
        if rest[0] > rest[-1]:
            continue  # each undirected tour once
        order = (0, *rest)
        best = min(best, sum(sym[order[i], order[(i + 1) % n]] for i in range(n)))
    return best


def instances(n: int, count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    points = rng.random((count, n, 2))
    euclid = np.linalg.norm(points[:, :, None] - points[:, None], axis=-1)
    asymmetric = rng.random((count, n, n))
    return np.concatenate([euclid, asymmetric])


@pytest.fixture(params=["off", "initial", "lazy"])
def pool(request, monkeypatch):
    """The cut pool off (the default), or on with either way of seeding it."""
    if request.param != "off":
        monkeypatch.setattr(tsp_module, "CUT_POOL_PER_NODE", 3)
        monkeypatch.setattr(highs_backend, "CUT_POOL_MODE", request.param)
    return request.param


def check_tour(y: np.ndarray) -> None:
    n = len(y)
    np.testing.assert_array_equal(y, y.T)
    np.testing.assert_array_equal(y.sum(1), np.full(n, 2.0))
    assert tsp_module.subtours(y > 0.5) == []


@pytest.mark.parametrize("n", [4, 5, 7, 8])
def test_highs_tsp_matches_brute_force(n, pool):
    costs = instances(n, 3, seed=n)
    solver = cl.make_solver(TSP(num_nodes=n), "highs")
    assert (solver.kernel.cut_pool is not None) == (pool != "off")
    y = solver.solve(costs)  # one batch: later instances see the pool of earlier ones
    for b in range(len(costs)):
        check_tour(y[b])
        assert np.sum(costs[b] * y[b]) == pytest.approx(tour_lengths(costs[b]), abs=1e-9)


@pytest.mark.parametrize("n", [10, 13, 15])
def test_highs_tsp_matches_the_mtz_formulation(n, pool):
    costs = instances(n, 2, seed=100 + n)
    y = cl.make_solver(TSP(num_nodes=n), "highs").solve(costs)
    mtz = cl.make_solver(TSP(num_nodes=n).to_ilp(), "highs").solve(costs)
    for b in range(len(costs)):
        check_tour(y[b])
        assert np.sum(costs[b] * y[b]) == pytest.approx(np.sum(costs[b] * mtz[b]), abs=1e-7)


def test_default_tsp_backend_is_held_karp_then_highs_without_a_pool_then_scip():
    from combolayer.backends.scipy import TSP_DP_MAX_NODES

    assert cl.make_solver(TSP(num_nodes=6)).backend == "scipy"  # the Held-Karp DP
    solver = cl.make_solver(TSP(num_nodes=TSP_DP_MAX_NODES + 1))
    assert solver.backend == "highs" and solver.kernel.cut_pool is None
    large = TSP(num_nodes=highs_backend.TSP_MAX_NODES_FIRST + 1)
    assert cl.backends.registry.capable_backends(large)[0] == "scip"


def test_fractional_separator_finds_violated_min_cuts():
    n = 6
    # two triangles joined by edges of value 0.5: connected support, cut value 1 < 2
    x = np.zeros((n, n))
    for a, b in [(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (3, 5)]:
        x[a, b] = x[b, a] = 0.75
    x[2, 3] = x[3, 2] = x[0, 5] = x[5, 0] = 0.5
    cuts = tsp_module.SubtourSeparator(n).fractional(x.ravel())
    assert cuts
    for cut in cuts:
        assert x.ravel()[cut.index].sum() < 2 - 1e-6


@pytest.mark.parametrize("n", [5, 8, 12, 15])
def test_scip_tsp_with_fractional_cuts_is_exact(n):
    pytest.importorskip("pyscipopt")
    costs = instances(n, 2, seed=200 + n)
    y = cl.make_solver(TSP(num_nodes=n), "scip").solve(costs)
    if n <= 8:
        expected = [tour_lengths(c) for c in costs]
    else:
        mtz = cl.make_solver(TSP(num_nodes=n).to_ilp(), "highs").solve(costs)
        expected = [np.sum(c * m) for c, m in zip(costs, mtz, strict=True)]
    for b in range(len(costs)):
        check_tour(y[b])
        assert np.sum(costs[b] * y[b]) == pytest.approx(expected[b], abs=1e-7)


def test_scip_separates_fractional_lp_solutions(monkeypatch):
    pytest.importorskip("pyscipopt")
    calls = []
    original = tsp_module.SubtourSeparator.fractional
    monkeypatch.setattr(tsp_module.SubtourSeparator, "fractional",
                        lambda self, x, **kw: calls.append(1) or original(self, x, **kw))
    cl.make_solver(TSP(num_nodes=30), "scip").solve(instances(30, 1, seed=3)[0])
    assert calls


def test_stoer_wagner_cuts_find_the_global_minimum_cut():
    rng = np.random.default_rng(5)
    for _ in range(20):
        n = int(rng.integers(3, 9))
        w = rng.random((n, n)) * (rng.random((n, n)) < 0.6)
        w = w + w.T
        np.fill_diagonal(w, 0.0)
        best = min(w[np.ix_(mask, ~mask)].sum()
                   for bits in range(1, 2 ** (n - 1))
                   for mask in [np.array([(bits >> i) & 1 for i in range(n)], dtype=bool)])
        cuts = tsp_module._stoer_wagner_cuts(w, best + 1e-9)
        assert cuts and min(w[np.ix_(c, ~c)].sum() for c in cuts) == pytest.approx(best)
        assert tsp_module._stoer_wagner_cuts(w, best - 1e-9) == []
