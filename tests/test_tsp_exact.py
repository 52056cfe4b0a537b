"""TSP stays exact through every speed-up of HiGHS's TSP kernel: the LP cut rounds
(exact subtour separation with shrinking, blossoms), the integral-LP shortcut,
fixing by reduced costs against a heuristic tour, and the MIP re-solves; against
brute force for n <= 8 and the compact MTZ formulation (``spec.to_ilp()``) up to
n = 15. The separation routines are checked against brute force on their own."""

import itertools

import numpy as np
import pytest

import combolayer as cl
import combolayer.backends.highs as highs_backend
import combolayer.problems.tsp as tsp_module
from combolayer.backends.outcome import Solved
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


@pytest.fixture(params=["default", "no blossoms", "weak tour", "no shortcuts"])
def variant(request, monkeypatch):
    """The kernel as shipped, and with parts switched off so that every path runs:
    without blossoms (more MIPs), with a poor upper-bound tour (few fixings), and
    with neither the integral-LP shortcut nor fixing (every instance reaches the MIP)."""
    if request.param in ("no blossoms", "no shortcuts"):
        monkeypatch.setattr(highs_backend, "violated_blossoms", lambda values: [])
    if request.param in ("weak tour", "no shortcuts"):
        monkeypatch.setattr(highs_backend, "guided_tour",
                            lambda x, cost: np.arange(len(cost)))
        monkeypatch.setattr(highs_backend, "TOUR_KICKS", 0)  # keep it weak
    if request.param == "no shortcuts":
        monkeypatch.setattr(highs_backend.HighsTspKernel, "_fix_by_reduced_costs",
                            lambda self, x, upper: False)
        monkeypatch.setattr(highs_backend.HighsTspKernel, "_lp_rounds",
                            lambda self: Solved(np.full(len(self._columns), 0.5)))  # "fractional"
    return request.param


def check_tour(y: np.ndarray) -> None:
    n = len(y)
    np.testing.assert_array_equal(y, y.T)
    np.testing.assert_array_equal(y.sum(1), np.full(n, 2.0))
    assert tsp_module.subtours(y > 0.5) == []


@pytest.mark.parametrize("n", [4, 5, 7, 8])
def test_highs_tsp_matches_brute_force(n, variant):
    costs = instances(n, 3, seed=n)
    y = cl.make_solver(TSP(num_nodes=n), "highs").solve(costs)
    for b in range(len(costs)):
        check_tour(y[b])
        assert np.sum(costs[b] * y[b]) == pytest.approx(tour_lengths(costs[b]), abs=1e-9)


@pytest.mark.parametrize("n", [10, 13, 15])
def test_highs_tsp_matches_the_mtz_formulation(n, variant):
    costs = instances(n, 2, seed=100 + n)
    y = cl.make_solver(TSP(num_nodes=n), "highs").solve(costs)
    mtz = cl.make_solver(TSP(num_nodes=n).to_ilp(), "highs").solve(costs)
    for b in range(len(costs)):
        check_tour(y[b])
        assert np.sum(costs[b] * y[b]) == pytest.approx(np.sum(costs[b] * mtz[b]), abs=1e-7)


@pytest.mark.parametrize("n", [13, 14])
def test_highs_tsp_is_exact_with_negative_tied_and_constant_costs(n):
    """Costs as training makes them: centred (negative), integer (many ties), constant."""
    rng = np.random.default_rng(n)
    costs = np.stack([rng.normal(size=(n, n)), rng.normal(size=(n, n)) - 5.0,
                      rng.integers(0, 3, size=(n, n)).astype(float), np.ones((n, n))])
    y = cl.make_solver(TSP(num_nodes=n), "highs").solve(costs)
    mtz = cl.make_solver(TSP(num_nodes=n).to_ilp(), "highs").solve(costs)
    for b in range(len(costs)):
        check_tour(y[b])
        assert np.sum(costs[b] * y[b]) == pytest.approx(np.sum(costs[b] * mtz[b]), abs=1e-7)


def test_highs_tsp_takes_every_path_on_euclidean_tsp_30():
    """Instances that end at an integral LP, at a fixed-gap tour and in the MIP, all
    matching SCIP's branch and cut."""
    pytest.importorskip("pyscipopt")
    n = 30
    points = np.random.default_rng(7).random((12, n, 2))
    costs = np.linalg.norm(points[:, :, None] - points[:, None], axis=-1)
    kernel = cl.make_solver(TSP(num_nodes=n), "highs").kernel
    mips = []
    original = kernel._mip
    kernel._mip = lambda *args: mips.append(1) or original(*args)
    y = kernel(costs.reshape(len(costs), -1)).reshape(costs.shape)
    reference = cl.make_solver(TSP(num_nodes=n), "scip").solve(costs)
    assert 0 < len(mips) < len(costs)
    for b in range(len(costs)):
        check_tour(y[b])
        assert np.sum(costs[b] * y[b]) == pytest.approx(np.sum(costs[b] * reference[b]),
                                                        abs=1e-7)


def test_highs_tsp_does_not_return_a_mip_start_that_presolve_misvalued(monkeypatch):
    """On this instance, with these extra (valid) subtour rows, HiGHS 1.16 mapped
    the MIP start into the presolved model with a lower objective, proved that
    value optimal and returned the start itself; the kernel notices the mismatch
    and solves again without the start."""
    from combolayer.cli.perf import tsp_costs

    n = 50
    w = tsp_costs(n, 30, seed=1)[14]
    original = highs_backend.HighsTspKernel._mip

    def with_near_tight_rows(self, tour, edge_cost):
        x = np.asarray(self.model.getSolution().col_value)
        sets = tsp_module._stoer_wagner_cuts(self._values(x), 2.6)
        highs_backend._add_rows(self.model, [self._subtour_row(s) for s in sets
                                             if 2 <= s.sum() <= n - 2])
        return original(self, tour, edge_cost)

    monkeypatch.setattr(highs_backend.HighsTspKernel, "_mip", with_near_tight_rows)
    y = cl.make_solver(TSP(num_nodes=n), "highs").solve(w)
    check_tour(y)
    assert np.sum(w * y) == pytest.approx(12.066629861013446, abs=1e-9)  # SCIP's optimum


def test_highs_tsp_options_win_over_the_kernel_defaults():
    n = 30
    points = np.random.default_rng(7).random((12, n, 2))  # some of them need the MIP
    costs = np.linalg.norm(points[:, :, None] - points[:, None], axis=-1)
    default = cl.make_solver(TSP(num_nodes=n), "highs")
    chosen = cl.make_solver(TSP(num_nodes=n), cl.BackendConfig(
        name="highs", options={"presolve": "on", "mip_allow_restart": True}))
    for solver, presolve, restart in ((default, "off", False), (chosen, "on", True)):
        mips = []
        original = solver.kernel._mip
        solver.kernel._mip = lambda *args, mips=mips, original=original: (
            mips.append(1) or original(*args))
        y = solver.solve(costs)
        assert mips  # the MIP ran, so the kernel would have switched presolve
        for b in range(len(costs)):
            check_tour(y[b])
        model = solver.kernel.model
        assert model.getOptionValue("presolve")[1] == presolve
        assert model.getOptionValue("mip_allow_restart")[1] == restart


def test_default_tsp_backend_is_held_karp_then_highs_then_scip():
    from combolayer.backends.algorithms import TSP_DP_MAX_NODES

    assert cl.make_solver(TSP(num_nodes=6)).backend == "scipy"  # the Held-Karp DP
    solver = cl.make_solver(TSP(num_nodes=TSP_DP_MAX_NODES + 1))
    assert solver.backend == "highs"
    # "auto" races HiGHS's TSP kernel against the next generic solvers: it leads
    assert isinstance(getattr(solver.kernel, "kernel", lambda name: solver.kernel)("highs"),
                      highs_backend.HighsTspKernel)
    large = TSP(num_nodes=highs_backend.TSP_MAX_NODES_FIRST + 1)
    capable = cl.backends.registry.capable_backends(large)
    assert [name for name in capable if name != "gurobi"][0] == "scip"  # gurobi: licence


def degree_two_lp_optima(n: int, count: int, seed: int) -> list[np.ndarray]:
    """Fractional points with degree 2: LP optima of the degree rows plus random
    subtour rows, as the cut rounds see them."""
    rng = np.random.default_rng(seed)
    kernel = highs_backend.HighsTspKernel(TSP(num_nodes=n), cl.BackendConfig())
    points = []
    for _ in range(count):
        w = rng.random((n, n))
        kernel._reset((w + w.T)[kernel._iu, kernel._ju])
        sets = [rng.random(n) < 0.4 for _ in range(int(rng.integers(0, 4)))]
        highs_backend._add_rows(kernel.model, [kernel._subtour_row(s) for s in sets
                                               if 2 <= s.sum() <= n - 2])
        points.append(kernel._values(highs_backend._solve(kernel.model).values))
    return points


def minimum_cut(x: np.ndarray) -> float:
    n = len(x)
    return min(x[np.ix_(mask, ~mask)].sum()
               for bits in range(1, 2 ** (n - 1))
               for mask in [np.array([(bits >> i) & 1 for i in range(n)], dtype=bool)])


def test_violated_subtours_is_exact_on_degree_two_points():
    """Shrinking the 1-edges keeps a violated cut whenever there is one."""
    found = 0
    for x in degree_two_lp_optima(9, 60, seed=11):
        cuts = tsp_module.violated_subtours(x)
        assert bool(cuts) == (minimum_cut(x) < 2 - 1e-6)
        for inside in cuts:
            assert x[np.ix_(inside, ~inside)].sum() < 2 - 1e-6
        found += bool(cuts)
    assert 0 < found < 60


def test_violated_blossoms_hold_for_every_tour_and_cut_the_point():
    n = 8
    tours = []
    for rest in itertools.permutations(range(1, n)):
        order = (0, *rest)
        y = np.zeros((n, n))
        y[order, np.roll(order, -1)] = 1
        tours.append(y + y.T)
    found = 0
    for x in degree_two_lp_optima(n, 80, seed=12):
        for handle, teeth in tsp_module.violated_blossoms(x):
            found += 1
            bound = handle.sum() + (len(teeth) - 1) / 2
            assert len(teeth) % 2 == 1 and len(set(teeth.ravel())) == 2 * len(teeth)

            def lhs(y, handle=handle, teeth=teeth):
                return y[np.ix_(handle, handle)].sum() / 2 + y[teeth[:, 0], teeth[:, 1]].sum()

            assert lhs(x) > bound + 1e-6
            assert max(lhs(y) for y in tours) <= bound
    assert found


def test_iterated_local_search_shortens_a_tour_and_stops_at_the_bound():
    """From a 2-opt/Or-opt local optimum it returns a permutation no longer than it,
    strictly shorter on some of these instances, never below the optimum, the same
    for the same seed; ``stop_at`` at the tour's own length returns it unchanged."""
    improved = 0
    for seed in range(6):
        rng = np.random.default_rng(seed)
        n = 30
        points = rng.random((n, 2))
        cost = np.linalg.norm(points[:, None] - points[None], axis=-1)
        start = tsp_module.local_search(rng.permutation(n), cost)

        def length(tour, cost=cost):
            return cost[tour, np.roll(tour, -1)].sum()

        better = tsp_module.iterated_local_search(start, cost, kicks=32)
        assert sorted(better.tolist()) == list(range(n))
        assert length(better) <= length(start) + 1e-12
        np.testing.assert_array_equal(
            better, tsp_module.iterated_local_search(start, cost, kicks=32))
        y = cl.make_solver(TSP(num_nodes=n), "highs").solve(cost)
        assert length(better) >= np.sum(cost * y) / 2 - 1e-9
        improved += length(better) < length(start) - 1e-9
        same = tsp_module.iterated_local_search(start, cost, kicks=32, stop_at=length(start))
        np.testing.assert_array_equal(same, start)
    assert improved >= 1  # the kicks do find shorter tours from some local optima


def test_guided_tour_is_a_two_opt_and_or_opt_local_optimum():
    rng = np.random.default_rng(3)
    n = 25
    points = rng.random((n, 2))
    cost = np.linalg.norm(points[:, None] - points[None], axis=-1)
    order = tsp_module.guided_tour(np.zeros((n, n)), cost)
    assert sorted(order.tolist()) == list(range(n))

    def length(tour):
        return cost[tour, np.roll(tour, -1)].sum()

    best = length(order)
    for i in range(n):
        for j in range(i + 2, n):  # every 2-opt move
            moved = np.concatenate([order[:i + 1], order[i + 1:j + 1][::-1], order[j + 1:]])
            assert length(moved) >= best - 1e-9
    rotated = list(order)
    for _ in range(n):  # every Or-opt move: a segment of 1-3 nodes, either way round
        rotated = rotated[1:] + rotated[:1]
        for size in (1, 2, 3):
            segment, rest = rotated[:size], rotated[size:]
            for k in range(len(rest)):
                for piece in (segment, segment[::-1]):
                    moved = np.array(rest[:k + 1] + piece + rest[k + 1:])
                    assert length(moved) >= best - 1e-9


def test_local_search_untangles_a_tour_around_a_circle():
    # 8 points on a circle, two neighbours swapped: the best tour is the circle
    angles = np.arange(8) * np.pi / 4
    points = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    cost = np.linalg.norm(points[:, None] - points[None], axis=-1)
    better = tsp_module.local_search(np.array([0, 2, 1, 3, 4, 5, 6, 7]), cost)
    assert sorted(better.tolist()) == list(range(8))
    assert cost[better, np.roll(better, -1)].sum() == pytest.approx(16 * np.sin(np.pi / 8))


def test_components_match_scipy():
    from scipy.sparse.csgraph import connected_components

    rng = np.random.default_rng(4)
    for n in (3, 10, 40, 130):
        a = rng.random((n, n)) < 2.0 / n
        a |= a.T
        expected = connected_components(a, directed=False)[1]
        np.testing.assert_array_equal(tsp_module.components(a), expected)


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


# -- Gurobi: lazy subtour cuts in a callback ---------------------------------------------


def gurobi_kernels():
    """Gurobi's TSP kernel (edge formulation), and its generic kernel on the lazy
    canonical form (adjacency outputs, ``form.separator`` in the callback)."""
    pytest.importorskip("gurobipy", reason="gurobipy is not installed")
    from combolayer.backends import gurobi
    from combolayer.specs.canonical import canonical_form

    def edge(n):
        return cl.make_solver(TSP(num_nodes=n), "gurobi").solve

    def generic(n):
        spec = TSP(num_nodes=n)
        kernel = gurobi.GurobiKernel(canonical_form(spec, lazy=True), cl.BackendConfig())
        return cl.backends.solver.Solver(spec, kernel, "gurobi", None).solve

    return {"edge": edge, "generic": generic}


@pytest.mark.parametrize("form", ["edge", "generic"])
@pytest.mark.parametrize("n", [4, 5, 7, 8])
def test_gurobi_tsp_matches_brute_force(n, form):
    costs = instances(n, 3, seed=n)
    y = gurobi_kernels()[form](n)(costs)
    for b in range(len(costs)):
        check_tour(y[b])
        assert np.sum(costs[b] * y[b]) == pytest.approx(tour_lengths(costs[b]), abs=1e-9)


@pytest.mark.parametrize("n", [10, 12])
def test_gurobi_tsp_matches_held_karp(n):
    """Against the scipy backend's Held-Karp dynamic program, on Euclidean, asymmetric,
    negative, tied and constant costs."""
    rng = np.random.default_rng(n)
    costs = np.concatenate([instances(n, 2, seed=300 + n), np.stack([
        rng.normal(size=(n, n)) - 5.0, rng.integers(0, 3, size=(n, n)).astype(float),
        np.ones((n, n))])])
    y = gurobi_kernels()["edge"](n)(costs)
    dp = cl.make_solver(TSP(num_nodes=n), "scipy").solve(costs)
    for b in range(len(costs)):
        check_tour(y[b])
        assert np.sum(costs[b] * y[b]) == pytest.approx(np.sum(costs[b] * dp[b]), abs=1e-7)


def test_gurobi_tsp_60_fits_the_pip_licence_and_matches_highs():
    """TSP-60 has 1770 edge columns (under the size-limited 2000); lazy rows do not count."""
    solve = gurobi_kernels()["edge"](60)
    costs = instances(60, 1, seed=60)[:1]
    y = solve(costs)
    reference = cl.make_solver(TSP(num_nodes=60), "highs").solve(costs)
    check_tour(y[0])
    assert np.sum(costs * y) == pytest.approx(np.sum(costs * reference), abs=1e-7)


def test_a_process_that_solved_a_tsp_with_scip_exits_cleanly():
    """SCIP's TSP model carries a Python constraint handler (the subtour cuts). Left to
    the interpreter's teardown, freeing it crashed the process after its last line
    (exit code 139); the backend frees such models at exit."""
    import subprocess
    import sys

    pytest.importorskip("pyscipopt")
    script = ("import torch, combolayer as cl\n"  # torch's teardown was part of the crash
              "c = torch.rand(2, 12, 12, generator=torch.Generator().manual_seed(0))\n"
              "c = c + c.transpose(1, 2)\n"
              "solver = cl.make_solver(cl.problems.TSP(num_nodes=12), backend='scip')\n"
              "y = solver.solve(c)\n"  # the solver still alive at exit
              "print(int(y.sum()))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "48"), done.stderr[-2000:]
