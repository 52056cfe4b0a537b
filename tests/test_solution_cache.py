"""The solution cache (``solve_ratio``): PyEPO's semantics, checked by counting solves."""

import copy
import itertools
import pickle

import numpy as np
import pytest
import torch

import combolayer as cl
from combolayer.backends.pool import CachedSolver, SolutionPool

SPEC = cl.problems.Knapsack(weights=[[3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5, 8]],
                            capacities=[10, 12])
N = 6


def feasible() -> torch.Tensor:
    """Every feasible 0/1 solution of SPEC, by enumeration."""
    w = torch.tensor(SPEC.weights, dtype=torch.float64)
    cap = torch.tensor(SPEC.capacities, dtype=torch.float64)
    rows = torch.tensor(list(itertools.product([0.0, 1.0], repeat=N)), dtype=torch.float64)
    return rows[((rows @ w.T) <= cap).all(1)]


class Counter:
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
    assert compiled.train_solve is None and compiled.train_fused is None


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
