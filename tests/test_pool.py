"""The solution pool (combolayer.backends.pool): a pool belongs to one problem, stays
consistent under threads, evicts in place (the oldest unseeded row first), keeps a
seeded row, and its device mirrors follow every eviction."""

import sys
import time

import numpy as np
import pytest
import torch
from testkit import load_benchmark, run_on_threads

import combolayer as cl
from combolayer.backends.pool import CachedSolver, SolutionPool, as_pool

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
    start = time.perf_counter()
    assert pool.add(new) == 32
    seconds = time.perf_counter() - start
    assert seconds < 0.1, f"32 new rows into a full pool took {seconds:.3f} s"  # goal 5 ms
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
