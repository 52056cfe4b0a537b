"""The solution pool (combolayer.pool): a pool belongs to one problem, stays
consistent under threads, evicts in place (the oldest unseeded row first), keeps a
seeded row, and its device mirrors follow every eviction; and the solution cache a
layer keeps in it (``solve_ratio``): PyEPO's semantics, checked by counting solves."""

import copy
import itertools
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
from testkit import load_benchmark, run_on_threads

import combolayer as cl
from combolayer.backends.solver import KernelDefaults
from combolayer.pool import CachedSolver, SolutionPool, as_pool

# -- a pool belongs to one problem ---------------------------------------------------------


def test_a_layer_refuses_the_pool_of_another_problem_with_as_many_outputs():
    # Before: a TopK(k=3) layer answered from a TopK(k=2) layer's pool: 2-hot rows.
    two = cl.ComboLayer(cl.problems.TopK(6, 2), solve_ratio=0.0, projection="none")
    two(torch.randn(8, 6))  # the empty pool solves exactly: 2-hot rows go in
    with pytest.raises(ValueError, match=r"this pool holds solutions of TopK\(n=6, k=2"
                                         r".*not of TopK\(n=6, k=3"):
        cl.ComboLayer(cl.problems.TopK(6, 3), solve_ratio=0.0, pool=two.pool)
    # the same problem, another sense: the same feasible set, so sharing is fine
    other = cl.ComboLayer(cl.problems.TopK(6, 2, sense="min"), solve_ratio=0.0, pool=two.pool)
    assert other.pool is two.pool
    y = other.train()(torch.randn(8, 6))
    assert torch.equal(y.sum(-1), torch.full((8,), 2.0))


def test_spo_plus_refuses_a_layers_pool_on_a_knapsack_with_other_weights():
    # Before: 5 of 8 of SPO+'s y~ came from rows infeasible for its own knapsack.
    layer = cl.ComboLayer(cl.problems.Knapsack(weights=[[1, 1, 1, 1]], capacities=[3]),
                          solve_ratio=0.5)
    heavy = cl.problems.Knapsack(weights=[[3, 3, 1, 1]], capacities=[3])
    with pytest.raises(ValueError, match=r"not of Knapsack"):
        cl.losses.SPOPlusLoss(heavy, solve_ratio=0.5, pool=layer.pool)
    for loss in (cl.losses.NCELoss, cl.losses.FenchelYoungLoss):
        with pytest.raises(ValueError, match=r"not of Knapsack"):
            loss(heavy, pool=layer.pool)
    with pytest.raises(ValueError, match=r"not of Knapsack"):
        CachedSolver(cl.make_solver(heavy), 0.5, layer.pool)


def test_as_pool_refuses_solutions_of_another_shape():
    # Before: any tensor whose size was a multiple of N was cut into rows.
    spec = cl.problems.ShortestPath.grid(3, 3)
    with pytest.raises(ValueError, match=r"must have shape \(\.\.\., 3, 3\) or \(\.\.\., 9\), "
                                         r"got \(2, 18\)"):
        as_pool(torch.zeros(2, 18), spec)
    with pytest.raises(ValueError, match=r"must have shape .* got \(4, 9, 1\)"):
        as_pool(torch.zeros(4, 9, 1), spec)
    with pytest.raises(ValueError, match="must be finite"):
        as_pool(torch.full((1, 3, 3), float("nan")), spec)
    y = cl.make_solver(spec).solve(torch.rand(5, 3, 3))
    assert len(as_pool(y, spec)) == len(as_pool(y.reshape(5, 9), spec)) >= 1
    # an unbound pool takes rows whose trailing dimensions multiply to N
    with pytest.raises(ValueError, match="trailing dimensions that multiply to N = 9"):
        SolutionPool(9).seed(torch.zeros(2, 6))


# -- threads -------------------------------------------------------------------------------


@pytest.fixture
def fast_switching():
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # a thread switch every few bytecodes: races show at once
    yield
    sys.setswitchinterval(interval)


def _check_consistent(pool):
    solutions = pool.solutions
    assert len(pool) == len(solutions) <= pool.max_size
    assert len(torch.unique(solutions, dim=0)) == len(solutions)  # distinct rows
    assert len(pool._keys) == len(pool)  # one key per row, none stale


def test_a_pool_shared_by_four_threads_stays_consistent(fast_switching):
    # Before: IndexError / KeyError / RuntimeError, or 19 rows with 23 keys.
    pool = SolutionPool(12, max_size=40)
    seeded = torch.eye(12, dtype=torch.float64)[:5]
    pool.seed(seeded)

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(150):
            rows = (rng.random((4, 12)) < 0.5).astype(np.float64)
            pool.add(torch.from_numpy(rows))
            pool.best(torch.from_numpy(rng.normal(size=(3, 12))))

    run_on_threads(work, 4)
    _check_consistent(pool)
    assert len(pool) == 40
    assert all(any(torch.equal(row, s) for s in pool.solutions) for row in seeded)


def test_a_layer_with_a_cache_on_four_threads(fast_switching):
    # Before: KeyError in 7 of 27 runs; one ended with 41 rows for max_size=40.
    spec = cl.problems.TopK(10, 3)
    layer = cl.ComboLayer(spec, solve_ratio=0.5, pool=SolutionPool(10, max_size=20),
                          projection="none").train()

    def work(seed):
        gen = torch.Generator().manual_seed(seed)
        for _ in range(150):
            y = layer(torch.randn(4, 10, generator=gen))
            assert torch.equal(y.sum(-1), torch.full((4,), 3.0))

    run_on_threads(work, 4)
    _check_consistent(layer.pool)


# -- eviction in place, one copy of the buffer ---------------------------------------------


def test_a_full_pool_takes_new_rows_in_place_and_keeps_one_copy():
    # Before: 1.4 s for 32 rows into a full pool of 10,000 at N = 900 (each row shifted
    # the whole buffer), and a second float64 copy of the buffer for lookups.
    n, size = 900, 10_000
    gen = torch.Generator().manual_seed(0)
    pool = SolutionPool(n, max_size=size)
    pool.add((torch.rand(size, n, generator=gen) < 0.5).double())
    assert len(pool) == size
    pool.best(torch.randn(4, n, generator=gen))  # float32 costs: no float32 copy is kept
    pool.best(torch.randn(4, n, generator=gen, dtype=torch.float64))
    # the memory benchmarks/pool_eviction.py reports: every tensor and array it holds
    assert load_benchmark("pool_eviction").held_bytes(pool) <= 1.01 * size * n * 8
    new = (torch.rand(32, n, generator=gen) < 0.5).double()
    buffer, others = pool._buffer, pool._buffer.clone()
    assert pool.add(new) == 32
    # in place: the same buffer, 32 of its rows replaced and the rest where they were
    # (its time is benchmarks/pool_eviction.py's to measure, not a test's)
    assert pool._buffer.data_ptr() == buffer.data_ptr()
    assert int((pool._buffer != others).any(dim=1).sum()) <= 32
    assert len(pool) == size
    # the 32 oldest rows left, the new ones are found
    assert torch.equal(pool.best(-new), new)


def test_eviction_replaces_the_oldest_unseeded_row_first():
    pool = SolutionPool(3, max_size=3)
    pool.add(torch.tensor([[1.0, 0, 0], [0.0, 1, 0]]))
    pool.seed(torch.tensor([0.0, 0, 1]))
    pool.add(torch.tensor([1.0, 1, 0]))  # evicts [1, 0, 0]
    pool.add(torch.tensor([0.0, 1, 1]))  # evicts [0, 1, 0]
    pool.add(torch.tensor([1.0, 1, 0]))  # already there: nothing happens
    assert {tuple(r) for r in pool.solutions.tolist()} == {(0, 0, 1), (1, 1, 0), (0, 1, 1)}


# -- seeding a row already in the pool, device mirrors -------------------------------------


def test_seeding_a_row_already_in_the_pool_keeps_it():
    # Before: the row kept its unseeded mark and was evicted like any other.
    pool = SolutionPool(4, max_size=3)
    truth = torch.tensor([1.0, 0, 1, 0])
    pool.add(truth)
    assert pool.seed(truth) == 0  # not new, but now seeded
    for row in torch.eye(4):
        pool.add(row)
    assert any(torch.equal(row, truth) for row in pool.solutions)


def test_a_mirror_for_another_device_follows_every_eviction(monkeypatch):
    # The mirrors a CUDA lookup uses are updated row by row, in place; here the CPU
    # stands in for the device (the buffer is then used through a float32 mirror).
    monkeypatch.setattr(SolutionPool, "_buffer_device", "none")
    gen = torch.Generator().manual_seed(3)
    pool = SolutionPool(8, max_size=24)
    pool.seed(torch.eye(8, dtype=torch.float64)[:2])
    for _ in range(40):
        pool.add((torch.rand(5, 8, generator=gen) < 0.5).double())
        costs = torch.randn(6, 8, generator=gen)
        y = pool.best(costs)  # float32: through the mirror
        assert ("cpu", torch.float32) in {(d.type, t) for d, t in pool._mirrors}
        solutions = pool.solutions.float()
        torch.testing.assert_close((costs * y).sum(1), (costs @ solutions.T).min(1).values)
        assert all(any(torch.equal(row, s) for s in solutions) for row in y)


# -- the solution cache (solve_ratio): PyEPO's semantics, checked by counting solves -------


SPEC = cl.problems.Knapsack(weights=[[3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5, 8]],
                            capacities=[10, 12])


N = 6


def feasible() -> torch.Tensor:
    """Every feasible 0/1 solution of SPEC, by enumeration."""
    w = torch.tensor(SPEC.weights, dtype=torch.float64)
    cap = torch.tensor(SPEC.capacities, dtype=torch.float64)
    rows = torch.tensor(list(itertools.product([0.0, 1.0], repeat=N)), dtype=torch.float64)
    return rows[((rows @ w.T) <= cap).all(1)]


class Counter(KernelDefaults):
    """Counts the rows an exact solver's kernel is asked to solve (every path, the
    layer's fused one included, ends in the kernel)."""

    def __init__(self, solver):
        self.rows = 0
        self.kernel = solver.kernel
        self.array_api = self.kernel.array_api
        solver.kernel = self

    def __call__(self, costs):
        self.rows += costs.shape[0]
        return self.kernel(costs)


def cached(ratio, seed=0, pool=None):
    solver = cl.make_solver(SPEC)
    counter = Counter(solver)
    cache = CachedSolver(solver, ratio, pool or SolutionPool(N),
                         torch.Generator().manual_seed(seed))
    return cache, counter


class StartRecorder(Counter):
    """Records the MIP start each kernel call gets (the kernel takes one if it says so)."""

    def __init__(self, solver):
        super().__init__(solver)
        self.takes_start = self.kernel.takes_start
        self.starts = []

    def __call__(self, costs, start=None):
        self.starts.append(start)
        return self.kernel(costs) if start is None else self.kernel(costs, start=start)


@pytest.mark.parametrize("backend", ["highs", "scip"])
def test_exact_solves_start_from_the_pools_best_where_the_kernel_takes_a_start(backend):
    solver = cl.make_solver(SPEC, backend)
    recorder = StartRecorder(solver)
    pool = SolutionPool(N)
    pool.seed(feasible()[::4])
    cache = CachedSolver(solver, 1.0, pool, torch.Generator().manual_seed(0))
    costs = torch.randn(16, N, dtype=torch.float64)
    expected_start = pool.best(costs).numpy()
    y = cache.solve_min(costs)
    np.testing.assert_array_equal(y, cl.make_solver(SPEC, backend).solve_min(costs))
    (start,) = recorder.starts
    if recorder.takes_start:  # HiGHS: a start measured faster (docs/performance.md)
        np.testing.assert_array_equal(start, expected_start)
    else:
        assert start is None


def test_ratio_zero_with_a_seeded_pool_never_solves_and_returns_the_pools_argmin():
    pool = SolutionPool(N)
    pool.seed(feasible()[::3])
    cache, counter = cached(0.0, pool=pool)
    costs = torch.randn(64, N, dtype=torch.float64)
    y = cache.solve_min(costs)
    assert counter.rows == 0
    values = costs @ pool.solutions.T
    np.testing.assert_allclose((costs * y).sum(1), values.min(1).values)
    assert all(any(torch.equal(row, s) for s in pool.solutions) for row in y)


@pytest.mark.parametrize("sense", ["min", "max"])
def test_a_pool_of_every_solution_answers_with_the_optimum_of_a_known_cost(sense):
    """A spec with a known cost and no auxiliaries: the pool ranks its rows by the whole
    objective, so a pool that holds every feasible solution answers as the exact solver
    (it ranked them by <w, y> alone, and SPO+ came out negative)."""
    sign = 1.0 if sense == "min" else -1.0
    spec = cl.ILP(shape=[2], known_cost=[-3.0 * sign, 0.0], sense=sense,
                  constraints=[cl.Constraint(coefs=[1, 1], sense="==", rhs=1)])
    w = sign * torch.tensor([[-1.0, -2.0], [2.0, 1.0]])
    both = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    layer = cl.ComboLayer(spec, projection="none", solve_ratio=0.0)
    layer.pool.seed(both)
    torch.testing.assert_close(layer.train()(w), layer.eval()(w))
    loss = cl.losses.SPOPlusLoss(spec, solve_ratio=0.0)
    loss.pool.seed(both)
    exact = cl.losses.SPOPlusLoss(spec)
    torch.testing.assert_close(loss(w, w), exact(w, w))


def test_ratio_one_always_solves_and_is_exact():
    cache, counter = cached(1.0)
    costs = torch.randn(40, N, dtype=torch.float64)
    y = cache.solve_min(costs)
    assert counter.rows == 40
    best = (costs @ feasible().T).min(1).values
    np.testing.assert_allclose((costs * y).sum(1), best, atol=1e-9)


def test_empty_pool_solves_exactly_instead_of_failing():
    cache, counter = cached(0.0)
    y = cache.solve_min(torch.randn(5, N))
    assert counter.rows == 5 and len(cache.pool) == len(torch.unique(y, dim=0))


def test_the_share_solved_follows_the_ratio_and_the_pool_has_no_duplicates():
    pool = SolutionPool(N)
    pool.seed(feasible()[:1])
    cache, counter = cached(0.3, pool=pool)
    for _ in range(50):
        cache.solve_min(torch.randn(32, N, dtype=torch.float64))
    assert 0.25 < counter.rows / (50 * 32) < 0.35
    solutions = pool.solutions
    assert len(torch.unique(solutions, dim=0)) == len(solutions) > 1


def test_the_pool_bound_is_respected_and_seeded_solutions_stay():
    pool = SolutionPool(N, max_size=4)
    seeded = feasible()[:1]
    pool.seed(seeded)
    cache, _ = cached(1.0, pool=pool)
    for _ in range(20):
        cache.solve_min(torch.randn(16, N, dtype=torch.float64))
    assert len(pool) == 4
    assert any(torch.equal(row, seeded[0]) for row in pool.solutions)


def test_draws_are_reproducible_from_the_generator():
    costs = torch.randn(30, 16, N, dtype=torch.float64)
    runs = []
    for _ in range(2):
        cache, counter = cached(0.5, seed=7)
        runs.append((torch.stack([cache.solve_min(c) for c in costs]), counter.rows))
    assert torch.equal(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]


def test_numpy_costs_go_through_the_cache_too():
    pool = SolutionPool(N)
    pool.seed(feasible())
    cache, counter = cached(0.0, pool=pool)
    costs = np.random.default_rng(0).normal(size=(3, 4, N))
    y = cache.solve_min(costs)
    assert isinstance(y, np.ndarray) and y.shape == costs.shape and counter.rows == 0
    best = (costs @ feasible().numpy().T).min(-1)
    np.testing.assert_allclose((costs * y).sum(-1), best)


@pytest.mark.parametrize("method", ["identity", "blackbox", "perturbed", "imle"])
def test_every_estimator_uses_the_cache_in_training_and_is_exact_in_eval(method):
    layer = cl.ComboLayer(SPEC, method=method, solve_ratio=0.0,
                          generator=torch.Generator().manual_seed(0))
    layer.pool.seed(feasible()[::2])
    counter = Counter(layer.solver)
    w = torch.randn(16, N, requires_grad=True)
    y = layer(w)
    (y * torch.randn(16, N)).sum().backward()
    assert counter.rows == 0, f"{method} solved {counter.rows} rows with solve_ratio=0"
    assert w.grad is not None and w.grad.shape == w.shape
    pooled = layer.pool.solutions.to(y)
    assert all(any(torch.equal(row, s) for s in pooled) for row in y.detach())
    layer.eval()
    y_eval = layer(w.detach())
    assert counter.rows == 16
    # eval is the exact argmax (Knapsack is a max problem) of the projected cost
    exact = layer.solver.solve(layer.projection(w.detach()))
    assert torch.equal(y_eval, exact)


def test_identity_gradient_keeps_its_form_under_the_cache():
    torch.manual_seed(0)
    w = torch.randn(8, N, requires_grad=True)
    grad_out = torch.randn(8, N)
    grads = []
    for ratio in (1.0, 0.0):
        layer = cl.ComboLayer(SPEC, projection="none", solve_ratio=ratio)
        layer.pool.seed(feasible())
        x = w.detach().clone().requires_grad_()
        (layer(x) * grad_out).sum().backward()
        grads.append(x.grad)
    # Identity: dL/dw = +dL/dy for a max problem whatever the forward returned
    torch.testing.assert_close(grads[0], grad_out)
    torch.testing.assert_close(grads[1], grad_out)


def test_layer_with_a_pool_deep_copies_pickles_and_loads_from_config():
    layer = cl.ComboLayer.from_config({"problem": SPEC.model_dump(), "solve_ratio": 0.25})
    assert layer.solve_ratio == 0.25 and "solve_ratio=0.25" in repr(layer)
    layer.pool.seed(feasible()[:3])
    for other in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        assert torch.equal(other.pool.solutions, layer.pool.solutions)
        other(torch.randn(4, N))
    with pytest.raises(ValueError, match="solve_ratio must be in"):
        cl.ComboLayer(SPEC, solve_ratio=1.5)
    with pytest.raises(ValueError, match="pool holds solutions of 3 outputs"):
        cl.ComboLayer(SPEC, pool=SolutionPool(3))


def test_solve_ratio_one_builds_no_cache():
    compiled = cl.ComboLayer(SPEC).compiled
    assert compiled.cached is None


def test_spo_plus_with_the_cache_never_solves_y_tilde_and_keeps_its_formula():
    spo = cl.losses.SPOPlusLoss(SPEC, solve_ratio=0.0, reduction="none")
    spo.pool.seed(feasible())
    c = torch.rand(8, N, dtype=torch.float64)
    y_true = spo.solver.solve(c)
    counter = Counter(spo.solver)
    c_hat = torch.randn(8, N, dtype=torch.float64, requires_grad=True)
    loss = spo(c_hat, c, y_true)
    assert counter.rows == 0
    loss.sum().backward()
    # min-sense costs are -c for this max problem; pooled y~ is the exact one here
    # since the pool holds every feasible solution
    shifted = -(2 * c_hat.detach() - c)
    y_tilde = feasible()[(shifted @ feasible().T).argmin(1)]
    torch.testing.assert_close(c_hat.grad, -2 * (y_true - y_tilde))


def test_spo_plus_and_layer_can_share_one_pool():
    layer = cl.ComboLayer(SPEC, solve_ratio=0.5)
    spo = cl.losses.SPOPlusLoss(layer.spec, backend=layer.solver, solve_ratio=0.5,
                                pool=layer.pool)
    spo(torch.randn(8, N), torch.rand(8, N))
    assert spo.pool is layer.pool and len(layer.pool) > 0


def test_fenchel_young_with_the_cache_never_solves_and_keeps_its_gradient():
    fy = cl.losses.FenchelYoungLoss(SPEC, solve_ratio=0.0, num_samples=3,
                                    generator=torch.Generator().manual_seed(0))
    fy.pool.seed(feasible())
    c = torch.randn(8, N, dtype=torch.float64, requires_grad=True)
    y_true = fy.solver.solve(torch.rand(8, N, dtype=torch.float64))
    counter = Counter(fy.solver)
    fy(c, y_true).backward()
    assert counter.rows == 0
    assert c.grad.shape == c.shape and torch.isfinite(c.grad).all()


def test_training_with_solve_ratio_point_one_still_lowers_regret():
    from combolayer.training.loop import fit
    data = cl.data.knapsack(num_data=300, num_features=5, num_items=12, dim=2, deg=2,
                            noise_width=0.1, seed=3)
    train, test = data.split(200)
    layer = cl.ComboLayer(data.spec, solve_ratio=0.1,
                          generator=torch.Generator().manual_seed(0))
    history = fit(layer, train, test, name="cache", epochs=6, lr=5e-2, batch_size=32,
                  seed=0, loss="spo+")
    assert history.regret[-1] < 0.7 * history.regret[0]


def test_a_pool_that_grows_between_forward_and_backward_keeps_the_gradient():
    """The pool hands out copies: a loss's graph that saved the pool survives later adds."""
    loss = cl.losses.CMAPLoss(SPEC, backend="highs")
    y = loss.solver.solve(torch.randn(4, N, dtype=torch.float64))
    cost = torch.randn(4, N, dtype=torch.float64, requires_grad=True)
    first = loss(cost, y)
    for _ in range(5):  # new exact solutions join the pool before the backward
        loss(5 * torch.randn(4, N, dtype=torch.float64), y)
    first.backward()
    assert torch.isfinite(cost.grad).all()


@pytest.mark.parametrize("bad", [None, "half", "0.5", True])
def test_a_solve_ratio_that_is_no_number_is_named(bad):
    """None raised a bare TypeError from float(), a word a bare 'could not convert', and
    the string '0.5' and True were taken as numbers."""
    with pytest.raises(ValueError, match=r"solve_ratio must be a number in \[0, 1\]"):
        cl.ComboLayer(cl.problems.TopK(n=5, k=2), solve_ratio=bad)


def test_a_seeded_solution_must_be_feasible():
    # an infeasible or fractional seed was answered by the layer in training mode
    spec = cl.problems.Knapsack(weights=[[3, 4, 5]], capacities=[5], sense="max")
    layer = cl.ComboLayer(spec, solve_ratio=0.0)
    for bad in ([[1.0, 1.0, 1.0]], [[0.5, 0.5, 0.0]], [[2.0, 0.0, 0.0]]):  # row, integer, bound
        with pytest.raises(cl.InputError, match=r"seeded solution 0 is not feasible for Knap"):
            layer.pool.seed(torch.tensor(bad))
    assert layer.pool.seed(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])) == 2
    unbound = SolutionPool(3)
    unbound.seed(torch.tensor([[1.0, 1.0, 1.0]]))  # checked when a layer binds it
    with pytest.raises(cl.InputError, match="not feasible"):
        cl.ComboLayer(spec, solve_ratio=0.0, pool=unbound)
    # a solver's answer, within its feasibility tolerance, is taken
    assert layer.pool.seed(torch.tensor([[1e-9, 0.0, 1.0 - 1e-9]], dtype=torch.float64)) == 1


def test_solutions_added_by_a_user_are_checked_as_seeds_are():
    """SPO+'s y_true reached a pool shared with a layer unchecked (pool.add), and the
    layer answered it in training: an infeasible one-hot [1, 1, 1, 1]."""
    spec = cl.ILP(shape=[4], constraints=[cl.Constraint(coefs=[1] * 4, sense="==", rhs=1)])
    layer = cl.ComboLayer(spec, solve_ratio=0.0)
    spo = cl.losses.SPOPlusLoss(spec, solve_ratio=0.0, pool=layer.pool)
    costs = torch.tensor([[1.0, 2, 3, 4]])
    for bad in ([[1.0, 1, 1, 1]], [[0.5, 0.5, 0, 0]]):
        with pytest.raises(cl.InputError, match="added solution 0 is not feasible for ILP"):
            spo(costs, costs, y_true=torch.tensor(bad))
        with pytest.raises(cl.InputError, match="added solution 0 is not feasible for ILP"):
            layer.pool.add(torch.tensor(bad))
    assert len(layer.pool) == 0
    spo(costs, costs, y_true=torch.tensor([[1.0, 0, 0, 0]]))
    assert layer.pool.add_solved(torch.tensor([[0.0, 1, 0, 0]])) == 1  # a solver's: unchecked
    assert len(layer.pool) == 2


def test_seeds_past_max_size_warn():
    # they were dropped silently, and the seed-full pool took no solve any more
    pool = SolutionPool(4, max_size=3)
    rows = torch.tensor(list(itertools.product([0.0, 1.0], repeat=4)))[:5]
    with pytest.warns(RuntimeWarning, match="full of 3 seeded solutions .* larger max_size"):
        assert pool.seed(rows) == 3
    assert pool.add(torch.ones(1, 4)) == 0


def test_a_seeded_tour_must_have_no_subtour():
    # two triangles meet every degree row; the subtour cuts are lazy, not rows
    spec = cl.problems.TSPEdges(6)
    edges = list(itertools.combinations(range(6), 2))
    def tour(*cycles):
        y = torch.zeros(len(edges))
        for cycle in cycles:
            for a, b in zip(cycle, cycle[1:] + cycle[:1]):
                y[edges.index((min(a, b), max(a, b)))] = 1.0
        return y
    pool = SolutionPool(spec)
    with pytest.raises(cl.InputError, match="not feasible"):
        pool.seed(tour((0, 1, 2), (3, 4, 5))[None])
    assert pool.seed(tour((0, 1, 2, 3, 4, 5))[None]) == 1


# -- the old module names ------------------------------------------------------------------


@pytest.mark.parametrize("old, new", [("combolayer.backends.pool", "combolayer.pool"),
                                      ("combolayer.backends.executors", "combolayer.executors")])
def test_the_old_module_names_warn_and_are_the_moved_modules(old, new, monkeypatch):
    """The pool and the executors left backends/; their old names stay for a release, as
    the modules themselves, so that a layer pickled before the move (it names the pool's
    classes by the old module) still loads; the backends' discovery does not import them."""
    import importlib

    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    if new == "combolayer.pool":
        old_pickle = b"ccombolayer.backends.pool\nSeedCheck\n."  # a private class too
        assert pickle.loads(old_pickle) is module.SeedCheck
    # the backends' discovery imports neither: a plain import warns about nothing
    script = ("import sys, combolayer as cl; cl.backends.backends(); "
              f"assert {old!r} not in sys.modules")
    subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", script],
                   check=True, timeout=120)
