"""CUDA tensors through every path that takes them: each answer equals the CPU's
and comes back on the input's device. Solvers run on the CPU except the torch
kernels (top-k, ranking) and the enumerated-DAG shortest path, which stay on
the device; the solution cache looks up on the costs' device. The whole module
skips without a CUDA device (CI has none)."""

import numpy as np
import pytest
import torch

import combolayer as cl
from combolayer.backends.algorithms import EnumeratedPaths
from combolayer.pool import CachedSolver, SolutionPool

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


# -- learned constraints, enumeration, known costs and the race: the per-call rows A, b
# and the auxiliaries on the device -------------------------------------------------------


def binary_rows(n=12, m=3, batch=32, seed=0, shared=False):
    """Costs and rows ``A x <= b`` that cut some of the 0/1 points: per instance, or one
    set for the whole batch (``shared``)."""
    gen = torch.Generator().manual_seed(seed)
    rows = 1 if shared else batch
    A = torch.rand(rows, m, n, generator=gen, dtype=torch.float64)
    b = A.sum(-1) * 0.4
    costs = torch.randn(batch, n, generator=gen, dtype=torch.float64)
    return costs, (A[0], b[0]) if shared else (A, b)


@pytest.mark.parametrize("shared", [False, True], ids=["per-instance", "shared"])
@pytest.mark.parametrize("n", [12, 16])
def test_enumeration_with_per_call_rows_stays_on_the_device_and_matches_the_cpu(n, shared):
    spec = cl.ILP(shape=[n], constraints=[cl.Constraint(coefs=[1.0] * n, sense="<=",
                                                        rhs=n // 2)])
    solver = cl.make_solver(spec, backend="enumerate")
    costs, (A, b) = binary_rows(n=n, shared=shared)
    y = solver.solve(costs.to(CUDA), A=A.to(CUDA), b=b.to(CUDA))
    assert y.device.type == CUDA.type and y.dtype == torch.float64
    expected = solver.solve(costs, A=A, b=b)
    torch.testing.assert_close(y.cpu(), expected, rtol=0, atol=0)
    assert ((A @ expected.unsqueeze(-1)).squeeze(-1) <= b + 1e-9).all()


def test_enumeration_of_a_problem_without_rows_is_separable_on_the_device():
    spec = cl.ILP(shape=[16])
    solver = cl.make_solver(spec, backend="enumerate")
    costs = torch.randn(256, 16, dtype=torch.float32)
    costs[:4, :3] = 0.0  # ties go to the lower bound, as on the CPU
    y = solver.solve(costs.to(CUDA))
    assert y.device.type == CUDA.type and y.dtype == torch.float32
    torch.testing.assert_close(y.cpu(), solver.solve(costs), rtol=0, atol=0)


@pytest.mark.parametrize("backend", ["highs", "scip", "enumerate"])
def test_comboptnet_with_learned_rows_on_cuda_matches_the_cpu(backend):
    """The forward pass and the gradients for w, A and b: the same numbers from CUDA
    tensors (solved on the CPU or, for enumeration, on the device) as from CPU ones."""
    spec = cl.ILP(shape=[10])
    costs, (A, b) = binary_rows(n=10, m=2, batch=8, seed=3)
    target = (torch.rand(8, 10, generator=torch.Generator().manual_seed(4)) < 0.5).double()
    results = []
    for device in ("cpu", CUDA.type):
        layer = cl.ComboLayer(spec, method="comboptnet", projection="none", backend=backend)
        leaves = [t.detach().to(device).requires_grad_() for t in (costs, A, b)]  # leaves
        y = layer(leaves[0], A=leaves[1], b=leaves[2])
        ((y - target.to(device)) ** 2).sum().backward()
        assert y.device.type == device
        assert all(leaf.grad.device.type == device for leaf in leaves)
        results.append([y.detach().cpu()] + [leaf.grad.cpu() for leaf in leaves])
    for cpu, cuda in zip(*results, strict=True):
        torch.testing.assert_close(cuda, cpu)
    assert results[0][2].abs().sum() > 0  # the rows did get a gradient


def test_score_function_draws_its_samples_on_a_cuda_generator():
    spec = cl.ILP(shape=[10])
    costs, (A, b) = binary_rows(n=10, m=2, batch=8, seed=5)
    method = cl.estimators.ScoreFunction(sigma=0.3, num_samples=16, perturb=("w", "A", "b"),
                                         generator=torch.Generator(CUDA).manual_seed(0))
    layer = cl.ComboLayer(spec, method=method, projection="none", backend="enumerate")
    leaves = [t.to(CUDA).requires_grad_() for t in (costs, A, b)]
    y = layer(leaves[0], A=leaves[1], b=leaves[2])
    assert y.device.type == CUDA.type and ((y >= 0) & (y <= 1)).all()
    y.sum().backward()
    for leaf in leaves:
        assert leaf.grad.device.type == CUDA.type and torch.isfinite(leaf.grad).all()
        assert leaf.grad.abs().sum() > 0


@pytest.mark.parametrize("method", ["qptl", "intopt"])
def test_relaxation_methods_take_cuda_rows_and_return_on_the_device(method):
    """The smoothed relaxation (cvxpylayers on the CPU) in training, the exact ILP in
    eval mode: both from CUDA tensors equal the CPU's, gradients included."""
    pytest.importorskip("cvxpylayers", reason="the [cvxpylayers] extra is not installed")
    spec = cl.ILP(shape=[6])
    costs, (A, b) = binary_rows(n=6, m=2, batch=4, seed=6)
    results = []
    for device in ("cpu", CUDA.type):
        layer = cl.ComboLayer(spec, method=method, projection="none", backend="highs")
        leaves = [t.detach().to(device).requires_grad_() for t in (costs, A, b)]  # leaves
        y = layer(leaves[0], A=leaves[1], b=leaves[2])
        y.pow(2).sum().backward()
        layer.eval()
        exact = layer(leaves[0].detach(), A=leaves[1].detach(), b=leaves[2].detach())
        assert y.device.type == device and exact.device.type == device
        results.append([y.detach().cpu(), exact.cpu()] + [leaf.grad.cpu() for leaf in leaves])
    for cpu, cuda in zip(*results, strict=True):
        torch.testing.assert_close(cuda, cpu, rtol=1e-4, atol=1e-5)


def test_infeasible_rows_on_cuda_are_flagged_on_the_device():
    spec = cl.ILP(shape=[2])
    layer = cl.ComboLayer(spec, method="comboptnet", projection="none", on_infeasible="flag")
    A = torch.tensor([[[1.0, 1.0]], [[1.0, 0.0]]], device=CUDA, requires_grad=True)
    b = torch.tensor([[-0.5], [0.5]], device=CUDA, requires_grad=True)  # the first: no point
    with pytest.warns(RuntimeWarning, match="1 of 2 instances"):
        y = layer(torch.tensor([[-1.0, -1.0], [-1.0, -1.0]], device=CUDA), A=A, b=b)
    assert y.device.type == CUDA.type and y.cpu().tolist() == [[0.0, 0.0], [0.0, 1.0]]
    assert layer.last_infeasible.cpu().tolist() == [True, False]
    ((y - torch.tensor([[1.0, 0.0], [0.0, 1.0]], device=CUDA)) ** 2).sum().backward()
    assert b.grad.device.type == CUDA.type and b.grad[0].item() < 0


def facility_location(clients=4, sites=3):
    """Assignments (predicted) and open facilities (auxiliaries, a known opening cost)."""
    n = clients * sites
    constraints = [cl.Constraint(coefs={c * sites + s: 1.0 for s in range(sites)},
                                 sense="==", rhs=1.0) for c in range(clients)]
    constraints += [cl.Constraint(coefs={c * sites + s: 1.0, n + s: -1.0}, sense="<=", rhs=0.0)
                    for c in range(clients) for s in range(sites)]
    return cl.ILP(shape=[clients, sites], num_aux=sites, constraints=constraints,
                  known_cost=[0.0] * n + [0.6, 0.8, 1.0][:sites])


def test_known_costs_and_auxiliaries_come_back_on_the_device():
    """Both parts of the solution and the gradient on CUDA, equal to the CPU's."""
    spec = facility_location()
    w = torch.rand(8, *spec.cost_shape, generator=torch.Generator().manual_seed(7),
                   dtype=torch.float64)
    results = []
    for device in ("cpu", CUDA.type):
        layer = cl.ComboLayer(spec, backend="highs").eval()
        x = w.detach().to(device).requires_grad_()  # a leaf on either device
        y, aux = layer(x, return_aux=True)
        y.sum().backward()
        assert y.device.type == aux.device.type == x.grad.device.type == device
        results.append((y.detach().cpu(), aux.cpu(), x.grad.cpu()))
    for cpu, cuda in zip(*results, strict=True):
        torch.testing.assert_close(cuda, cpu)


def test_auto_races_on_cuda_costs_and_every_answer_is_optimal():
    """`auto` spreads the rows of CUDA costs over its candidates (solved on the CPU) and
    hands each answer back on the device; every answer's objective is the optimum."""
    spec = knapsack(n=20, seed=2)
    solver = cl.make_solver(spec, backend="auto")
    reference = cl.make_solver(spec, backend="highs")
    costs = torch.rand(64, spec.num_items, generator=torch.Generator().manual_seed(8),
                       dtype=torch.float64)
    for chunk in costs.split(8):
        y = solver.solve(chunk.to(CUDA))
        assert y.device.type == CUDA.type
        torch.testing.assert_close((chunk * y.cpu()).sum(-1),
                                   (chunk * reference.solve(chunk)).sum(-1))
    assert solver.backend_reason


def test_spo_plus_and_regret_count_the_known_cost_on_cuda_as_on_the_cpu():
    spec = facility_location()
    gen = torch.Generator().manual_seed(9)
    c_hat = torch.rand(6, *spec.cost_shape, generator=gen, dtype=torch.float64)
    c = torch.rand(6, *spec.cost_shape, generator=gen, dtype=torch.float64)
    loss = cl.losses.SPOPlusLoss(spec, reduction="none", backend="highs")
    y, aux = cl.make_solver(spec, backend="highs").solve(c_hat, return_aux=True)
    results = []
    for device in ("cpu", CUDA.type):
        pred = c_hat.detach().to(device).requires_grad_()  # a leaf on either device
        value = loss(pred, c.to(device))
        value.sum().backward()
        regret = cl.metrics.regret(spec, c.to(device), y.to(device), aux_pred=aux.to(device),
                                   backend="highs")
        assert value.device.type == pred.grad.device.type == device
        results.append((value.detach().cpu(), pred.grad.cpu(), torch.as_tensor(regret).cpu()))
    for cpu, cuda in zip(*results, strict=True):
        torch.testing.assert_close(cuda, cpu)
    assert (results[0][2] >= -1e-9).all() and results[0][0].sum() > 0


@pytest.mark.parametrize("spec", [cl.problems.ShortestPath.grid(18, 18, neighborhood=8),
                                  cl.problems.ShortestPath.grid(7, 9, neighborhood=4,
                                                                source=(3, 4), target=(0, 8)),
                                  cl.data.shortest_path_spec((12, 12))],
                         ids=["grid8", "grid4", "large dag"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_auto_solves_shortest_paths_on_the_device_without_the_host_kernel(spec, dtype):
    solver = cl.make_solver(spec)
    assert solver.backend == "scipy" and solver.device_route.backend == "bellman_ford"
    costs = torch.rand(70, *spec.cost_shape, dtype=dtype) + 0.01
    expected = solver.solve(costs)  # scipy on the host
    solver.kernel = cl.backends.FunctionKernel(_host_kernel_called)  # CUDA costs never reach it
    for _ in range(2):  # the second call replays the captured CUDA graph
        y = solver.solve(costs.to(CUDA))
        assert y.device.type == "cuda" and y.dtype == dtype
        torch.testing.assert_close((costs.double() * y.cpu().double()).flatten(1).sum(1),
                                   (costs.double() * expected.double()).flatten(1).sum(1),
                                   rtol=1e-12, atol=1e-12)


def _host_kernel_called(costs):
    raise AssertionError("CUDA costs went to the host kernel")


def test_layer_with_auto_on_a_grid_trains_on_the_device():
    spec = cl.problems.ShortestPath.grid(12, 12, neighborhood=8)
    layer = cl.ComboLayer(spec)
    w = (torch.rand(16, 12, 12) + 0.1).to(CUDA).requires_grad_()
    y = layer(w)
    assert y.device.type == "cuda"
    y.sum().backward()
    assert w.grad.device.type == "cuda"
    host = cl.make_solver(spec, backend="scipy").solve(w.detach().cpu())
    torch.testing.assert_close((w.detach().cpu() * y.detach().cpu()).flatten(1).sum(1),
                               (w.detach().cpu() * host).flatten(1).sum(1))
    assert "costs on an accelerator: bellman_ford" in layer.backend_reason


def _syncs(run):
    """How many synchronising CUDA operations ``run()`` makes (torch's sync debug mode)."""
    import warnings

    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    return sum("synchroniz" in str(warning.message) for warning in caught)


@pytest.mark.parametrize("spec, backend", [(knapsack(), "highs"),
                                           (cl.problems.TopK(n=50, k=7), "torch")],
                         ids=["host-solver", "device-kernel"])
def test_cost_checks_add_no_synchronisation(spec, backend, monkeypatch):
    from combolayer.backends import solver as solver_module

    layer = cl.ComboLayer(spec, backend=backend, projection="none")
    w = torch.rand(32, *spec.cost_shape, device=CUDA, requires_grad=True)
    layer(w).sum().backward()  # warm: lazy initialisation may synchronise once
    checked = _syncs(lambda: layer(w).sum().backward())
    monkeypatch.setattr(solver_module, "check_values", lambda *args, **kwargs: None)
    unchecked = _syncs(lambda: layer(w).sum().backward())
    assert checked == unchecked


def test_nan_costs_on_a_device_kernel_raise_the_contracts_error():
    # the Bellman-Ford kernels read the check with their first convergence read
    layer = cl.ComboLayer(cl.problems.ShortestPath.grid(6, 6), projection="none")
    w = torch.rand(4, 6, 6, device=CUDA)
    w[2, 3, 3] = float("nan")
    with pytest.raises(ValueError, match="must be finite"):
        layer(w)
    assert layer(torch.rand(4, 6, 6, device=CUDA)).is_cuda  # the context still works


def test_nan_costs_on_the_device_still_raise_before_a_host_solve():
    # checked on the host copy the solve makes; a sync-free device kernel's check (top-k)
    # is a device-side assertion instead, which would end this process's CUDA context
    spec = knapsack()
    layer = cl.ComboLayer(spec, backend="highs")
    solver = cl.make_solver(spec, backend="highs")
    w = torch.rand(4, *spec.cost_shape, device=CUDA)
    w[2, 3] = float("nan")
    with pytest.raises(ValueError, match="must be finite"):
        layer(w)
    with pytest.raises(ValueError, match="must be finite"):
        solver.solve(w)


@pytest.mark.parametrize("method", ["identity", "blackbox"])
def test_a_model_on_the_device_compiles_whole_and_matches_eager(method):
    # one graph (fullgraph=True) with the Bellman-Ford kernel's CUDA graph inside the
    # layer's operator; answers and gradients equal eager mode's
    torch._dynamo.reset()
    spec = cl.problems.ShortestPath.grid(8, 8, neighborhood=8)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Softplus(),
                                torch.nn.Unflatten(1, (8, 8)),
                                cl.ComboLayer(spec, method=method)).to(CUDA)
    x, weights = torch.randn(16, 4, device=CUDA), torch.randn(8, 8, device=CUDA)
    results = []
    for run in (model, torch.compile(model, fullgraph=True, backend="aot_eager")):
        model.zero_grad()
        y = run(x)
        (y * weights).sum().backward()
        results.append((y.detach(), model[0].weight.grad.clone()))
    assert results[1][0].is_cuda and results[1][1].is_cuda
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=0)


@pytest.mark.parametrize("spec", [cl.problems.ShortestPath.grid(12, 12, neighborhood=8),
                                  cl.problems.ShortestPath.grid(9, 7, neighborhood=4),
                                  cl.data.shortest_path_spec((8, 8))],
                         ids=["grid8", "grid4", "graph"])
def test_the_path_kernels_run_as_captured_cuda_graphs(spec):
    # a capture that failed would fall back to launching every op from the host: right
    # answers, several times slower, and nothing else would tell
    kernel = cl.make_solver(spec, backend="bellman_ford").kernel
    costs = torch.rand(70, *spec.cost_shape, dtype=torch.float64) + 0.01
    host = cl.make_solver(spec, backend="scipy").solve(costs)
    flat = costs.reshape(70, -1).to(CUDA)
    answers = [kernel(flat) for _ in range(2)]  # captured at the first call, replayed after
    state = next(iter(kernel._states.values()))
    assert all(isinstance(step.__self__, torch.cuda.CUDAGraph) for step in state.steps)
    assert torch.equal(answers[0], answers[1]) and answers[0].is_cuda
    torch.testing.assert_close((flat.cpu() * answers[0].cpu()).sum(1),
                               (costs * host).reshape(70, -1).sum(1), rtol=1e-12, atol=1e-12)


def test_a_grid_layer_step_synchronises_once_on_the_device():
    # the kernel's one host read of its flags (typical costs settle within its first
    # step); nothing else in the layer, the loss or the backward reads back
    spec = cl.problems.ShortestPath.grid(12, 12, neighborhood=8)
    layer = cl.ComboLayer(spec, projection="none")
    w = (torch.rand(70, 12, 12, device=CUDA) + 0.1).requires_grad_()
    target = layer(torch.rand(70, 12, 12, device=CUDA) + 0.1)

    def step():
        cl.losses.hamming(layer(w), target).backward()

    step()  # the kernel captures its graphs for this batch shape
    assert _syncs(step) == 1
