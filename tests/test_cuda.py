"""CUDA tensors through every path that takes them: each answer equals the CPU's
and comes back on the input's device. Solvers run on the CPU except the torch
kernels (top-k, ranking) and the enumerated-DAG shortest path, which stay on
the device; the solution cache looks up on the costs' device. The whole module
skips without a CUDA device (CI has none)."""

import numpy as np
import pytest
import torch

import combolayer as cl
from combolayer.backends.pool import CachedSolver, SolutionPool
from combolayer.backends.scipy import EnumeratedPaths

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA device; none on this machine")

CUDA = torch.device("cuda")


def knapsack(n=12, seed=0):
    rng = np.random.default_rng(seed)
    weights = rng.integers(1, 10, size=(2, n)).astype(float)
    return cl.problems.Knapsack(weights=weights.tolist(),
                                capacities=(weights.sum(1) / 4).tolist())


def pyepo_grid():
    """PyEPO's 5 x 5 grid of right and down arcs: a DAG with 70 enumerated paths."""
    return cl.data.shortest_path_spec((5, 5))


@pytest.mark.parametrize("spec", [cl.problems.TopK(n=50, k=7), cl.problems.Ranking(n=30)],
                         ids=["topk", "ranking"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_kernels_run_on_the_device_and_match_the_cpu(spec, dtype):
    solver = cl.make_solver(spec, backend="torch")
    costs = torch.randn(64, *spec.cost_shape, dtype=dtype)
    costs[:4, :5] = 0.5  # ties, which the device path breaks by index as the CPU does
    y = solver.solve(costs.to(CUDA))
    assert y.device.type == "cuda" and y.dtype == dtype
    torch.testing.assert_close(y.cpu(), solver.solve(costs), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_enumerated_dag_paths_stay_on_the_device_and_match_the_cpu(dtype):
    spec = pyepo_grid()
    solver = cl.make_solver(spec, backend="scipy")
    assert isinstance(solver.kernel, EnumeratedPaths)
    costs = torch.rand(256, *spec.cost_shape, dtype=dtype)
    costs[:8] = 1.0  # every path of a row ties: the first in enumeration order wins
    y = solver.solve(costs.to(CUDA))
    assert y.device.type == "cuda" and y.dtype == dtype
    torch.testing.assert_close(y.cpu(), solver.solve(costs), rtol=0, atol=0)


def test_pool_lookup_runs_on_the_costs_device():
    pool = SolutionPool(20)
    pool.seed((torch.rand(300, 20) < 0.5).double())
    costs = torch.randn(64, 20)
    best = pool.best(costs.to(CUDA))
    assert best.device.type == "cuda" and best.dtype == torch.float32
    torch.testing.assert_close(best.cpu(), pool.best(costs), rtol=0, atol=0)


def test_cached_solver_answers_cuda_costs_with_a_cuda_generator():
    spec = knapsack()
    exact = cl.make_solver(spec, backend="highs")
    pool = SolutionPool(exact.num_outputs)
    cached = CachedSolver(exact, 0.5, pool, torch.Generator(CUDA).manual_seed(0))
    costs = -torch.rand(32, spec.num_items, device=CUDA, dtype=torch.float64)
    y = cached.solve_min(costs)
    assert y.device.type == "cuda"
    # every row is a feasible solution: exact or the pool's best
    assert ((torch.as_tensor(spec.weights, device=CUDA, dtype=y.dtype) @ y.T)
            <= torch.as_tensor(spec.capacities, device=CUDA, dtype=y.dtype)[:, None]).all()
    assert len(pool) > 0


@pytest.mark.parametrize("backend", ["highs", "scip"])
@pytest.mark.parametrize("method", ["identity", "blackbox", "perturbed", "imle"])
def test_layer_on_cuda_matches_the_cpu_forward_and_backward(backend, method):
    spec = knapsack()
    w = torch.randn(8, spec.num_items, dtype=torch.float64)
    grad = torch.randn_like(w)
    results = []
    for device in ("cpu", "cuda"):
        torch.manual_seed(1)
        layer = cl.ComboLayer(spec, method=method, backend=backend)
        layer.eval() if method == "identity" else layer.train()
        x = w.detach().to(device).requires_grad_()  # a leaf on either device
        y = layer(x)
        y.backward(grad.to(device))
        assert y.device.type == device and x.grad.device.type == device
        results.append((y.detach().cpu(), x.grad.cpu()))
    if method in ("identity", "blackbox"):  # deterministic: the devices agree exactly
        for cpu, cuda in zip(*results, strict=True):
            torch.testing.assert_close(cuda, cpu)


def test_layer_noise_and_solve_ratio_draw_from_a_cuda_generator():
    spec = knapsack()
    generator = torch.Generator(CUDA).manual_seed(0)
    layer = cl.ComboLayer(spec, noise=0.5, solve_ratio=0.5, generator=generator)
    layer.pool.seed(cl.make_solver(spec).solve(torch.rand(16, spec.num_items)))
    w = torch.randn(16, spec.num_items, device=CUDA, requires_grad=True)
    layer(w).sum().backward()
    assert w.grad.device.type == "cuda" and torch.isfinite(w.grad).all()


@pytest.mark.parametrize("noise", [cl.transforms.SignNoise(1.0), cl.transforms.GaussianNoise(),
                                   cl.transforms.GumbelNoise(), cl.SumOfGamma(k=3)],
                         ids=["sign", "gaussian", "gumbel", "sog"])
def test_noise_draws_on_the_generators_device(noise):
    z = noise.sample((4, 5), generator=torch.Generator(CUDA).manual_seed(0))
    assert z.device.type == "cuda" and z.shape == (4, 5) and torch.isfinite(z).all()


def test_losses_take_cuda_costs():
    spec = knapsack()
    solver = cl.make_solver(spec)
    cost_true = torch.rand(16, spec.num_items, dtype=torch.float64)
    y_true = solver.solve(cost_true)
    pred = torch.randn(16, spec.num_items, dtype=torch.float64, device=CUDA,
                       requires_grad=True)
    losses = [
        cl.losses.SPOPlusLoss(spec)(pred, cost_true.to(CUDA), y_true.to(CUDA)),
        cl.losses.FenchelYoungLoss(spec, generator=torch.Generator(CUDA))(pred, y_true.to(CUDA)),
        cl.losses.SPOPlusLoss(spec, solve_ratio=0.5, generator=torch.Generator(CUDA))(
            pred, cost_true.to(CUDA), y_true.to(CUDA)),
    ]
    for loss in losses:
        assert loss.device.type == "cuda"
        (grad,) = torch.autograd.grad(loss, pred)
        assert grad.device.type == "cuda" and torch.isfinite(grad).all()


def test_gradient_noise_draws_on_a_cuda_generator():
    x = torch.zeros(4, 3, device=CUDA, requires_grad=True)
    y = cl.gradients.add_gradient_noise(x, 0.5, generator=torch.Generator(CUDA).manual_seed(0))
    y.sum().backward()
    assert x.grad.device.type == "cuda" and not torch.equal(x.grad, torch.ones_like(x.grad))
