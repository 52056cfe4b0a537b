"""The layer's lean hot path computes what the plain formulas compute."""

import dataclasses

import numpy as np
import pytest
import torch

import combolayer as cl
from combolayer.backends.algorithms import DagPlan
from combolayer.backends.solver import all_finite
from combolayer.data import grid_edges
from combolayer.problems.shortest_path import topological_order
from combolayer.transforms.projection import DENSE_PROJECTOR_MAX, project_mean, project_plane


def test_finite_check_is_exact_when_the_sum_overflows():
    huge = np.array([1e308, 1e308, -1e308, 1e308])
    assert all_finite(huge) and all_finite(torch.tensor(huge))
    for bad in (np.nan, np.inf, -np.inf):
        costs = np.array([1.0, bad, 2.0])
        assert not all_finite(costs) and not all_finite(torch.tensor(costs))
    with pytest.raises(ValueError, match="finite"):
        cl.make_solver(cl.problems.TopK(n=3, k=1)).solve(np.array([1.0, np.nan, 0.0]))


@pytest.mark.parametrize("grid", [(2, 3), (5, 5), (4, 7)])
def test_enumerated_paths_agree_with_the_level_dp(grid):
    rows, cols = grid
    tails, heads = np.array(grid_edges(rows, cols)).T
    n = rows * cols
    order = topological_order(n, tails, heads)
    plan = DagPlan.build(n, tails, heads, order, 0, n - 1)
    assert plan.path_arcs is not None
    dp = dataclasses.replace(plan, path_arcs=None)
    rng = np.random.default_rng(0)
    costs = np.concatenate([rng.normal(size=(50, len(tails))),
                            rng.integers(1, 3, size=(50, len(tails))).astype(float)])
    fast, slow = plan.paths(costs), dp.paths(costs)
    np.testing.assert_allclose((fast * costs).sum(1), (slow * costs).sum(1), atol=1e-12)
    assert set(map(tuple, fast)) <= set(map(tuple, plan.path_arcs))


@pytest.mark.parametrize("n, r", [(6, 2), (DENSE_PROJECTOR_MAX + 10, 3), (40, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_plane_projection_matches_the_formula(n, r, dtype):
    normals = torch.linalg.qr(torch.randn(n, r, dtype=torch.float64)).Q.T
    w = torch.randn(7, n, dtype=dtype)
    expected = w.double() - (w.double() @ normals.T) @ normals
    project = project_plane(normals)
    for _ in range(2):  # the second call uses the cached operator
        out = project(w)
        assert out.dtype == dtype
        torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


def test_all_ones_normal_is_the_mean_projection():
    assert project_plane(torch.full((1, 5), 5 ** -0.5)) is project_mean


def test_identity_backward_is_negative_identity_without_a_copy_of_the_solution():
    layer = cl.ComboLayer(cl.problems.TopK(n=5, k=2), projection="none")
    w = torch.randn(3, 5, requires_grad=True)
    grad = torch.randn(3, 5)
    y = layer(w)
    y.backward(grad)
    torch.testing.assert_close(w.grad, grad)  # max problem: dL/dw = +dL/dy
    assert y.grad_fn is not None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize(("n", "k"), [(6, 1), (6, 3), (6, 6), (100, 10)])
def test_topk_and_ranks_agree_with_a_stable_sort_with_and_without_ties(n, k, dtype):
    # float32/float64 on the CPU take numpy's sort unless a tie matters; float16 torch's
    from combolayer.backends.closed_form import ranks, topk_indicator

    rng = np.random.default_rng(k)
    for costs in (torch.tensor(rng.normal(size=(20, n)), dtype=dtype),
                  torch.tensor(rng.integers(0, 3, size=(20, n)), dtype=dtype),
                  torch.tensor(rng.normal(size=(1, n)), dtype=dtype)):
        order = torch.sort(costs, dim=-1, stable=True).indices
        expected = torch.zeros_like(costs).scatter(-1, order[:, :k], 1.0)
        assert torch.equal(topk_indicator(costs, k), expected)
        descending = torch.sort(costs, dim=-1, descending=True, stable=True).indices
        expected_ranks = torch.zeros_like(costs).scatter(
            -1, descending, torch.arange(1, n + 1, dtype=costs.dtype).expand_as(costs))
        assert torch.equal(ranks(costs), expected_ranks)


@pytest.mark.parametrize("plane", ["mean", "dense", "low-rank"])
def test_fused_normalized_projection_matches_the_chain(plane):
    from combolayer.transforms.projection import chain, normalize, normalized

    n = {"mean": 7, "dense": 9, "low-rank": DENSE_PROJECTOR_MAX + 3}[plane]
    if plane == "mean":
        project = project_mean
    else:
        project = project_plane(torch.linalg.qr(torch.randn(n, 2, dtype=torch.float64)).Q.T)
    fused, reference = normalized(project), chain(project, normalize)
    w = torch.randn(4, n, dtype=torch.float64, requires_grad=True)
    w0 = torch.ones(1, n, dtype=torch.float64) * 3.0  # the mean projection of it is 0
    grad = torch.randn(4, n, dtype=torch.float64)
    torch.testing.assert_close(fused(w), reference(w))
    (a,) = torch.autograd.grad(fused(w), w, grad)
    (b,) = torch.autograd.grad(reference(w), w, grad)
    torch.testing.assert_close(a, b)
    torch.autograd.gradcheck(fused, (w,))
    if plane == "mean":
        w0.requires_grad_()
        (a,) = torch.autograd.grad(fused(w0), w0, grad[:1])
        (b,) = torch.autograd.grad(reference(w0), w0, grad[:1])
        torch.testing.assert_close(a, b)


def test_cost_check_refuses_magnitudes_at_the_limit_on_either_side():
    from combolayer.backends.solver import MAX_COST, check_costs

    spec = cl.problems.TopK(n=3, k=1)
    for dtype in (torch.float32, torch.float64):
        check_costs(spec, torch.tensor([-0.5 * MAX_COST, 0.0, 0.5 * MAX_COST], dtype=dtype))
        # (float32 rounds 1e15 down, below the limit)
        limits = (MAX_COST, -MAX_COST) if dtype == torch.float64 else ()
        for bad in (*limits, 2 * MAX_COST, -2 * MAX_COST):
            with pytest.raises(ValueError, match="below 1e\\+15 in magnitude"):
                check_costs(spec, torch.tensor([0.0, bad, 1.0], dtype=dtype))
        for bad in (float("nan"), float("inf"), -float("inf")):
            with pytest.raises(ValueError, match="must be finite"):
                check_costs(spec, torch.tensor([[0.0, 1.0, 2.0], [0.0, bad, 1.0]], dtype=dtype))


def test_topk_fast_path_sees_ties_only_at_the_boundary():
    from combolayer.backends.closed_form import topk_indicator

    costs = torch.tensor([[1.0, 0.0, 0.0, 5.0, 2.0],    # tie inside the 2 smallest: fast path
                          [3.0, 1.0, 2.0, 1.0, 4.0]])   # no tie at the 2nd value
    torch.testing.assert_close(topk_indicator(costs, 2),
                               torch.tensor([[0.0, 1, 1, 0, 0], [0, 1, 0, 1, 0]]))
    tied = torch.tensor([[2.0, 1.0, 2.0, 3.0, 2.0]])    # the 2nd value 2.0 thrice: lowest index
    torch.testing.assert_close(topk_indicator(tied, 2), torch.tensor([[1.0, 1, 0, 0, 0]]))
    assert torch.equal(topk_indicator(tied, 5), torch.ones_like(tied))


def pyepo_grid() -> cl.problems.ShortestPath:
    return cl.data.shortest_path_spec((5, 5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_enumerated_dag_paths_solve_torch_costs_in_their_dtype(dtype):
    from combolayer.backends.algorithms import EnumeratedPaths

    solver = cl.make_solver(pyepo_grid(), "scipy")
    assert isinstance(solver.kernel, EnumeratedPaths) and solver.kernel.array_api == "torch"
    rng = np.random.default_rng(1)
    costs = np.concatenate([rng.normal(size=(40, 40)),
                            rng.integers(0, 2, size=(40, 40)).astype(float)])  # ties too
    expected = solver.kernel.plan.paths(costs)  # numpy, first path in enumeration order
    if dtype == torch.bfloat16:  # rounded to bfloat16 first; solved through float64
        costs = torch.tensor(costs, dtype=dtype).double().numpy()
        expected = solver.kernel.plan.paths(costs)
    y = solver.solve(torch.tensor(costs, dtype=dtype))
    assert y.dtype == dtype
    np.testing.assert_array_equal(y.double().numpy(), expected)
    np.testing.assert_array_equal(solver.solve(costs), expected)


def test_enumerated_dag_paths_through_executor_workers(always_parallel):
    spec = pyepo_grid()
    costs = np.random.default_rng(2).normal(size=(16, 40))
    serial = cl.make_solver(spec, "scipy").solve(costs)
    solver = cl.make_solver(spec, {"name": "scipy", "executor": "thread", "workers": 2})
    np.testing.assert_array_equal(solver.solve(costs), serial)
    solver.kernel.close()


# -- the fused default layer: one autograd node for projection, solve and identity --


def unfused(layer: cl.ComboLayer) -> cl.ComboLayer:
    """The same layer on the unfused path: the projection's node, then the estimator's."""
    compiled = layer.compiled
    layer.__dict__["_compiled"] = dataclasses.replace(
        compiled, exact=dataclasses.replace(compiled.exact, fused=None))
    return layer


def fused_cases():
    low_rank = cl.ILP.from_matrices(  # more outputs than DENSE_PROJECTOR_MAX: two-matmul plane
        shape=[DENSE_PROJECTOR_MAX + 2],
        A_eq=np.kron(np.eye(2), np.ones((1, DENSE_PROJECTOR_MAX // 2 + 1))), b_eq=[3, 4])
    return {
        "topk max, auto (mean)": (cl.problems.TopK(n=7, k=3), "auto"),
        "topk min, std": (cl.problems.TopK(n=7, k=3, sense="min"), "std"),
        "dag min, auto (dense plane)": (pyepo_grid(), "auto"),
        "dag max, auto-exact": (cl.ILP.from_matrices(shape=[5], A_eq=np.ones((1, 5)), b_eq=[2],
                                                     sense="max"), "auto-exact"),
        "assignment 3x3, auto (cost shape 2-d)": (cl.problems.Matching(rows=3, cols=3), "auto"),
        "low-rank plane": (low_rank, "auto"),
    }


@pytest.mark.parametrize("case", list(fused_cases()))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch", [(), (4,), (2, 3)])
@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_fused_layer_equals_the_unfused_composition_bit_for_bit(case, dtype, batch, noise):
    spec, projection = fused_cases()[case]
    make = lambda: cl.ComboLayer(spec, projection=projection, noise=noise,  # noqa: E731
                                 generator=torch.Generator().manual_seed(7))
    fused, reference = make(), unfused(make())
    assert fused.compiled.exact.fused is not None
    w = torch.randn(*batch, *spec.cost_shape, dtype=dtype)
    g = torch.randn(*batch, *spec.cost_shape, dtype=dtype)
    for training in (True, False):
        fused.train(training), reference.train(training)
        outputs = []
        for layer in (fused, reference):
            v = w.clone().requires_grad_()
            y = layer(v)
            (grad,) = torch.autograd.grad(y, v, g)
            outputs.append((y, grad))
        (y, grad), (y_ref, grad_ref) = outputs
        assert y.shape == w.shape and y.dtype == dtype and grad.dtype == dtype
        assert torch.equal(y, y_ref) and torch.equal(grad, grad_ref)
        # and it is -sign J_P(w)^T g, whatever the noise did to y
        v = w.clone().requires_grad_()
        (expected,) = torch.autograd.grad(fused.projection(v), v, -fused.solver.sign * g)
        torch.testing.assert_close(grad, expected, rtol=0,
                                   atol=1e-5 if dtype == torch.float32 else 1e-12)


def test_fused_layer_samples_noise_like_the_unfused_one_and_records_nothing_without_grad():
    spec = cl.problems.TopK(n=6, k=2)
    fused = cl.ComboLayer(spec, noise=1.0, generator=torch.Generator().manual_seed(3))
    reference = unfused(cl.ComboLayer(spec, noise=1.0, generator=torch.Generator().manual_seed(3)))
    w = torch.randn(50, 6)
    assert torch.equal(fused(w), reference(w))
    assert not torch.equal(fused(w), fused.eval()(w))  # the noise changed some solutions
    y = fused(w.requires_grad_())
    assert y.grad_fn is not None
    with torch.no_grad():
        assert fused(w).grad_fn is None


@pytest.mark.parametrize("kwargs", [
    {"projection": "plane"}, {"projection": "mean"}, {"projection": "none"},
    {"projection": "norm"}, {"projection": project_mean}, {"method": "blackbox"},
    {"method": {"name": "margin", "method": "identity"}},
])
def test_other_layers_stay_on_the_unfused_path(kwargs):
    assert cl.ComboLayer(cl.problems.TopK(n=5, k=2), **kwargs).compiled.exact.fused is None


def test_problems_with_a_cost_floor_stay_on_the_unfused_path():
    # a grid with cycles needs non-negative costs: the layer adds its hull offset
    layer = cl.ComboLayer(cl.problems.ShortestPath.grid(3, 3))
    assert layer.compiled.floor is not None and layer.compiled.exact.fused is None


def test_fused_layer_under_torch_func_grad_gives_the_eager_gradient():
    # functorch transforms refuse the old-style Function: the layer switches to its twin
    layer = cl.ComboLayer(cl.problems.TopK(n=6, k=2))
    assert layer.compiled.exact.fused is not None
    w, g = torch.randn(3, 6, dtype=torch.float64), torch.randn(3, 6, dtype=torch.float64)
    grad = torch.func.grad(lambda v: (layer(v) * g).sum())(w)
    (expected,) = torch.autograd.grad((layer(w.requires_grad_()) * g).sum(), w)
    assert torch.equal(grad, expected)


# -- the call depth from the layer to the solver --------------------------------------


def frames_to_highs(layer: cl.ComboLayer, w: torch.Tensor) -> list[str]:
    """The Python frames of one ``layer(w)`` from ``ComboLayer.forward`` (included) down
    to the frame that makes the first highspy call (included), outermost first."""
    import sys

    forward = cl.ComboLayer.forward.__code__
    seen: list[list[str]] = []

    def profile(frame, event, arg):
        # highspy's methods are pybind11 builtins of its module highspy._core
        if seen or event != "c_call" or not str(getattr(arg, "__module__", "")).startswith(
                "highspy"):
            return
        names = []
        while frame is not None and frame.f_code is not forward:
            names.append(f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:"
                         f"{frame.f_code.co_qualname}")
            frame = frame.f_back
        seen.append([] if frame is None else ["combo_layer.py:ComboLayer.forward",
                                              *reversed(names)])

    sys.setprofile(profile)
    try:
        layer(w)
    finally:
        sys.setprofile(None)
    assert seen and seen[0], "layer(w) made no highspy call below ComboLayer.forward"
    return seen[0]


@pytest.mark.parametrize(("projection", "most"), [("auto", 6), ("none", 7)])
@pytest.mark.parametrize("problem", ["grid", "knapsack"])
def test_identity_layer_reaches_highs_within_a_few_frames(problem, projection, most):
    # the fused default node: forward, _forward, the node's forward, Solver.solve_batch,
    # the kernel's batch loop, its solve_one; another projection adds the estimator's
    # solve (the projection is a node of its own, before it)
    pytest.importorskip("highspy")
    spec = {"grid": pyepo_grid(),
            "knapsack": cl.problems.Knapsack(weights=[[3, 4, 5, 2]], capacities=[7])}[problem]
    layer = cl.ComboLayer(spec, backend="highs", projection=projection)
    w = torch.rand(3, *spec.cost_shape, requires_grad=True)
    frames = frames_to_highs(layer, w)
    assert len(frames) <= most, "\n".join(frames)
    assert frames[-1].endswith("HighsKernel.solve_one")
    # the shortened path solves as the plain solver does, gradient included
    y = layer(w)
    assert torch.equal(y, layer.solver.solve(w.detach() if projection == "none" else
                                             layer.projection(w).detach()))
    y.backward(torch.ones_like(y))
    assert w.grad is not None and torch.isfinite(w.grad).all()
