import copy
import inspect
import pickle

import numpy as np
import pytest
import torch
import yaml

import combolayer as cl
from combolayer.transforms.noise import SignNoise
from combolayer.transforms.projection import NORM_EPS, normalize, project_mean, project_std

PROJECTIONS = ["none", "mean", "norm", "std", lambda w: 2.0 * w - w.sum(-1, keepdim=True) / 7]


def choose(k=2, n=5, sense="min"):
    return cl.ILP(
        shape=[n], sense=sense, constraints=[cl.Constraint(coefs=[1] * n, sense="==", rhs=k)]
    )


def assignment(n=3, sense="min"):
    A_eq = np.zeros((2 * n, n * n))
    for i in range(n):
        A_eq[i, i * n : (i + 1) * n] = 1
        A_eq[n + i, i::n] = 1
    return cl.ILP.from_matrices(shape=(n, n), A_eq=A_eq, b_eq=np.ones(2 * n), sense=sense)


def projection_of(layer, w):
    return layer.projection(w)


@pytest.mark.parametrize("sense", ["min", "max"])
@pytest.mark.parametrize("projection", PROJECTIONS)
@pytest.mark.parametrize("spec_fn", [choose, assignment])
def test_identity_gradient_is_minus_projection_jacobian_transpose(sense, projection, spec_fn):
    spec = spec_fn(sense=sense)
    layer = cl.ComboLayer(spec, method="identity", projection=projection)
    w = torch.randn(4, *spec.cost_shape, dtype=torch.float64, requires_grad=True)
    g = torch.randn(4, *spec.cost_shape, dtype=torch.float64)
    (layer(w) * g).sum().backward()
    _, vjp = torch.autograd.functional.vjp(layer.projection, w.detach(), g)
    sign = 1.0 if sense == "min" else -1.0
    torch.testing.assert_close(w.grad, -sign * vjp, rtol=0, atol=1e-12)


@pytest.mark.parametrize("sense", ["min", "max"])
@pytest.mark.parametrize("projection", PROJECTIONS)
@pytest.mark.parametrize("lam", [0.5, 20.0])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_blackbox_gradient_matches_formula(sense, projection, lam, reduction):
    # lam is per instance: with a batch-mean loss (gradient g / B) the solver
    # still sees u + lam * g, the step of each instance's own loss.
    spec = assignment(sense=sense)
    method = cl.Blackbox(lam=lam, reduction=reduction)
    layer = cl.ComboLayer(spec, method=method, projection=projection)
    solver = cl.make_solver(spec, "highs")
    batch = 6
    w = torch.randn(batch, 3, 3, dtype=torch.float64, requires_grad=True)
    g = torch.randn(batch, 3, 3, dtype=torch.float64)
    scale = batch if reduction == "mean" else 1
    ((layer(w) * g).sum() / scale).backward()
    sign = 1.0 if sense == "min" else -1.0
    u = layer.projection(w.detach())
    shifted = u + sign * lam * g
    grad_u = sign * (solver.solve(shifted) - solver.solve(u)) / (lam * scale)
    _, expected = torch.autograd.functional.vjp(layer.projection, w.detach(), grad_u)
    torch.testing.assert_close(w.grad, expected, rtol=0, atol=1e-12)
    assert (shifted != u).any()


@pytest.mark.parametrize("batch", [1, 4])
def test_the_default_blackbox_is_the_contracts_formula_at_any_batch_size(batch):
    """API.md: u' = u + lam * dL/dy, dL/du = (y(u') - y(u)) / lam. The default stepped by
    lam * B * dL/dy and divided by lam * B (per instance for a mean loss): at B = 4 the
    gradient of a summed loss was a quarter of the formula's."""
    spec = cl.problems.TopK(n=2, k=1)  # sense="max"
    layer = cl.ComboLayer(spec, method="blackbox", projection="none")
    w = torch.tensor([[0.0, 0.5]] * batch, dtype=torch.float64, requires_grad=True)
    g = torch.tensor([0.0, 1.0], dtype=torch.float64)
    (layer(w) * g).sum().backward()
    lam, solver = layer.method.lam, cl.make_solver(spec)
    shifted = w.detach() - lam * g  # max: u - lam * dL/dy
    expected = -(solver.solve(shifted) - solver.solve(w.detach())) / lam
    torch.testing.assert_close(w.grad, expected, rtol=0, atol=0)
    assert w.grad[0].tolist() == [-1 / lam, 1 / lam]


@pytest.mark.parametrize("projection", [project_mean, normalize, project_std])
def test_projections_are_idempotent_and_keep_the_solution(projection):
    spec = choose(k=3, n=6)
    solver = cl.make_solver(spec, "highs")
    w = torch.randn(50, 6, dtype=torch.float64) * 3 + 1
    p = projection(w)
    torch.testing.assert_close(projection(p), p)
    torch.testing.assert_close(solver.solve(p), solver.solve(w))


def test_norm_of_zero_cost_is_finite():
    w = torch.zeros(2, 5, dtype=torch.float64, requires_grad=True)
    layer = cl.ComboLayer(choose(), projection="std")
    y = layer(w)
    (y * torch.randn(2, 5, dtype=torch.float64)).sum().backward()
    assert torch.isfinite(w.grad).all() and torch.isfinite(y).all()
    assert torch.equal(normalize(torch.zeros(3)), torch.zeros(3)) and NORM_EPS > 0


def test_noise_is_off_in_eval_and_has_the_right_support_in_train():
    spec = choose(k=2, n=5)
    alpha = 0.8
    layer = cl.ComboLayer(
        spec, projection="std", noise=alpha, generator=torch.Generator().manual_seed(3)
    )
    solver = cl.make_solver(spec, "highs")
    w = torch.randn(200, 5, dtype=torch.float64)
    p = project_std(w)
    layer.eval()
    torch.testing.assert_close(layer(w), solver.solve(p))
    layer.train()
    y = layer(w)
    xi = SignNoise(alpha).sample(w.shape, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(y, solver.solve(p + xi))
    assert set(xi.unique().tolist()) == {-alpha / 2, alpha / 2}
    assert 0.4 < (xi > 0).double().mean() < 0.6
    assert not torch.equal(y, solver.solve(p))


def test_output_keeps_shape_dtype_and_nothing_is_saved_without_grad():
    layer = cl.ComboLayer(assignment(), method="blackbox", projection="std")
    for dtype in (torch.float32, torch.float64):
        w = torch.randn(2, 3, 3, 3, dtype=dtype)
        y = layer(w)
        assert y.shape == w.shape and y.dtype == dtype and y.grad_fn is None
        with torch.no_grad():
            assert layer(w.requires_grad_()).grad_fn is None
    assert layer(torch.randn(3, 3, requires_grad=True)).grad_fn is not None


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device; none on this machine"
)
def test_cuda_tensors_come_back_on_their_device():
    layer = cl.ComboLayer(choose())
    w = torch.randn(4, 5, device="cuda", requires_grad=True)
    y = layer(w)
    assert y.device == w.device
    y.sum().backward()
    assert w.grad.device == w.device


@pytest.mark.parametrize(
    "w, match",
    [
        (torch.randn(3, 4), r"w has trailing shape \(4,\) but ILP\(shape=\[5\]\) expects \(5,\)"),
        (torch.tensor([1.0, float("nan"), 0, 0, 0]), "w must be finite"),
    ],
)
def test_layer_rejects_bad_costs(w, match):
    with pytest.raises(ValueError, match=match):
        cl.ComboLayer(choose())(w)


def test_bad_layer_arguments():
    with pytest.raises(ValueError, match="unknown projection 'center'"):
        cl.ComboLayer(choose(), projection="center")
    # a matrix is no projection's name (it raised numpy's "truth value is ambiguous"), on a
    # path problem too, where the layer looks at the name before building the projection
    for spec in (choose(), cl.problems.ShortestPath.grid(3, 3)):
        for matrix in (np.eye(spec.num_outputs), np.eye(spec.num_outputs).tolist()):
            with pytest.raises(TypeError, match="projection must be a name.*got (ndarray|list)"):
                cl.ComboLayer(spec, projection=matrix)
    with pytest.raises(ValueError, match="unknown method 'magic'"):
        cl.ComboLayer(choose(), method="magic")
    with pytest.raises(ValueError, match="Blackbox lam must be > 0, got 0"):
        cl.Blackbox(lam=0)
    with pytest.raises(ValueError, match="noise must be a finite alpha >= 0"):
        cl.ComboLayer(choose(), noise=-1.0)


def test_from_config_dict_and_yaml(tmp_path):
    config = {
        "problem": choose().model_dump(),
        "method": {"name": "blackbox", "lam": 5.0},
        "projection": "mean",
        "noise": 0.1,
        "backend": {"name": "highs"},
    }
    layer = cl.ComboLayer.from_config(config)
    assert layer.method == cl.Blackbox(lam=5.0) and layer.solver.backend == "highs"
    path = tmp_path / "layer.yaml"
    path.write_text(yaml.safe_dump(config))
    layer = cl.ComboLayer.from_config(path)
    w = torch.tensor([[3.0, 0.0, 1.0, -1.0, 2.0]])
    assert layer.eval()(w).tolist() == [[0, 1, 0, 1, 0]]
    with pytest.raises(ValueError, match="got keys \\['method', 'problme'\\]"):
        cl.ComboLayer.from_config({"problme": {}, "method": "identity"})


def test_training_through_the_layer_reduces_the_loss():
    torch.manual_seed(0)
    spec = assignment(n=4)
    features = torch.randn(64, 6)
    true_costs = features @ torch.randn(6, 16)
    targets = cl.make_solver(spec).solve(true_costs.reshape(64, 4, 4))
    model = torch.nn.Linear(6, 16)
    layer = cl.ComboLayer(spec, projection="std", noise=0.1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)

    def loss():
        return (layer(model(features).reshape(64, 4, 4)) - targets).abs().sum() / 64

    with torch.no_grad():
        before = loss().item()
    for _ in range(40):
        optimizer.zero_grad()
        value = loss()
        value.backward()
        optimizer.step()
    layer.eval()
    with torch.no_grad():
        assert loss().item() < 0.5 * before


@pytest.mark.parametrize("method", ["identity", "blackbox", "perturbed"])
@pytest.mark.parametrize("spec", [cl.problems.TopK(n=5, k=2), choose(),
                                  cl.problems.ShortestPath.grid(3, 3)],
                         ids=["topk", "ilp", "grid"])
def test_return_aux_without_auxiliaries_is_empty(spec, method):
    """A spec with num_aux=0 (every named problem) returns an empty (*batch, 0) aux."""
    layer = cl.ComboLayer(spec, method=method)
    w = torch.rand(2, 3, *spec.cost_shape, dtype=torch.float64, requires_grad=True)
    y, aux = layer(w, return_aux=True)
    assert aux.shape == (2, 3, 0) and aux.dtype == w.dtype
    assert y.shape == w.shape
    y.sum().backward()
    assert w.grad is not None


# -- help() and a compiled Solver as the layer's backend -----------------------------------


def test_help_on_init_shows_the_layers_doc():
    doc = inspect.getdoc(cl.ComboLayer.__init__)
    assert doc == inspect.getdoc(cl.ComboLayer)
    assert "projection" in doc and "Initialize internal Module state" not in doc


SPEC = cl.problems.TopK(n=5, k=2)


def test_layer_takes_a_compiled_solver_as_backend_or_in_place_of_the_spec():
    solver = cl.make_solver(SPEC, "highs")
    layer = cl.ComboLayer(SPEC, backend=solver)
    assert layer.solver is solver
    assert cl.ComboLayer(solver).solver is solver
    w = torch.randn(3, 5)
    assert torch.equal(layer(w), solver.solve(w))
    for copied in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        assert copied.solver is not solver and copied.solver.backend == "highs"
        assert torch.equal(copied(w), layer(w))
    with pytest.raises(ValueError, match=r"backend is a Solver compiled for TopK\(n=5, k=2\), "
                                         r"but the layer's spec is TopK\(n=5, k=3\)"):
        cl.ComboLayer(cl.problems.TopK(n=5, k=3), backend=solver)


# -- inputs the layer checks ---------------------------------------------------------------


def test_a_layer_takes_numpy_and_explains_integer_tensors():
    layer = cl.ComboLayer(choose())
    y = layer(np.array([[0.0, 1, 2, 3, 4]]))
    assert isinstance(y, torch.Tensor) and y.tolist() == [[1, 1, 0, 0, 0]]
    with pytest.raises(TypeError, match=r"w must be a floating-point tensor, got torch.int64: "
                                        r"pass w.float\(\)"):
        layer(torch.tensor([[0, 1, 2, 3, 4]]))
    with pytest.raises(TypeError, match="w must be a torch.Tensor"):
        layer([[0.0, 1, 2, 3, 4]])


@pytest.mark.parametrize("noise", [float("nan"), float("inf"), -0.5])
def test_noise_must_be_a_finite_nonnegative_alpha(noise):
    with pytest.raises(ValueError, match="noise must be a finite alpha >= 0"):
        cl.ComboLayer(choose(), noise=noise)


# -- the projection never changes which backend can solve the problem ----------------------


def test_the_default_layer_solves_positive_costs_on_graphs_with_cycles():
    # "auto" made these costs negative, and the default Dijkstra refused them
    # (52 of 183 random cyclic graphs).
    from test_problems import enumerate_solutions, random_cyclic_graph

    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(40):
        spec = random_cyclic_graph(rng, n=5, m=int(rng.integers(6, 11)),
                                   directed=bool(rng.integers(0, 2)))
        solutions = enumerate_solutions(spec)
        w = torch.tensor(rng.random((8, *spec.cost_shape)) + 0.05)
        for projection in ("auto", "plane"):
            layer = cl.ComboLayer(spec, projection=projection)
            assert layer.solver.backend == "scipy"  # Dijkstra, as before the projection
            y = layer(w).numpy()
            best = (solutions @ w.numpy().T).min(axis=0)
            np.testing.assert_allclose((y * w.numpy()).sum(1), best, atol=1e-9)
            checked += len(w)
    assert checked == 640
    spec = cl.problems.ShortestPath(num_nodes=3, edges=[(0, 1), (1, 0), (1, 2), (0, 2), (2, 1)],
                                    source=0, target=2)
    w = torch.tensor([1.0173, 0.6269, 0.8371, 0.1991, 0.4562])
    assert cl.ComboLayer(spec)(w).tolist() == [0, 0, 0, 1, 0]


def test_a_negative_user_cost_still_raises_the_specs_error():
    spec = cl.problems.ShortestPath.grid(4, 4)
    w = torch.ones(2, 4, 4)
    w[1, 2, 1] = -0.5
    with pytest.raises(ValueError, match=r"got negative costs \(w after projection, instance 1"):
        cl.ComboLayer(spec, projection="none")(w)


def test_noise_and_blackbox_steps_on_a_vertex_grid_are_clipped_with_one_warning():
    # The paper's Warcraft setting: Blackbox (lam 20) perturbs vertex costs, which
    # turn negative; the default Dijkstra would raise on them.
    spec = cl.problems.ShortestPath.grid(6, 6)
    layer = cl.ComboLayer(spec, method=cl.Blackbox(lam=20.0), projection="none", noise=0.5)
    w = torch.rand(4, 6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    w = (w + 0.01).requires_grad_()
    target = cl.make_solver(spec).solve(torch.rand(4, 6, 6, dtype=torch.float64))
    with pytest.warns(RuntimeWarning, match="made some costs negative.*set to 0") as record:
        y = layer(w)
        (y - target).abs().sum().backward()
        layer(w)
    assert len([r for r in record if "made some costs negative" in str(r.message)]) == 1
    assert torch.isfinite(w.grad).all() and w.grad.abs().sum() > 0


def test_auto_exact_uses_the_hull_of_the_integer_solutions():
    # 0.5 <= x2 + x3 <= 1 holds with equality only at integer points: LP mode
    # cannot see x2 + x3 == 1, exact mode (and so "auto-exact") does.
    spec = cl.ILP(shape=[4], constraints=[
        cl.Constraint(coefs=[0, 0, 1, 1], sense="<=", rhs=1),
        cl.Constraint(coefs=[0, 0, 1, 1], sense=">=", rhs=0.5)])
    assert cl.analyze(spec).dim == 4 and cl.analyze(spec, exact=True).dim == 3
    w = torch.tensor([[1.0, 2.0, 3.0, 5.0]])
    exact = cl.ComboLayer(spec, projection="auto-exact").projection(w)
    torch.testing.assert_close(exact[0, 2] + exact[0, 3], torch.tensor(0.0))
    assert not torch.allclose(cl.ComboLayer(spec, projection="auto").projection(w), exact)


@pytest.mark.parametrize("kind", ["numpy", "bool", "int"])
def test_a_target_as_numpy_booleans_or_integers_is_the_same_target(kind):
    """The margin's target may come as w may (a numpy array) or as a 0/1 solution of
    booleans or integers: the answer and gradient are those of the float target (they
    raised an AttributeError and a norm's dtype error)."""
    layer = cl.ComboLayer(cl.problems.TopK(5, 2), method="margin")
    target = torch.tensor([[1.0, 0.0, 0.0, 1.0, 0.0]])
    given = {"numpy": target.numpy(), "bool": target.bool(), "int": target.long()}[kind]
    results = []
    for t in (target, given):
        w = torch.tensor([[0.3, 0.1, 0.5, 0.2, 0.4]], requires_grad=True)
        y = layer(w, target=t)
        (y * torch.arange(5.0)).sum().backward()
        results.append((y.detach(), w.grad))
    torch.testing.assert_close(results[1], results[0])


def test_a_target_for_another_batch_is_refused_by_every_method():
    """Methods that ignore the target refused it only by its trailing shape: a target of
    another batch size was accepted silently."""
    for method in ("identity", "blackbox", "margin"):
        layer = cl.ComboLayer(cl.problems.TopK(5, 2), method=method)
        with pytest.raises(ValueError, match=r"target of shape \(4, 5\) does not broadcast"):
            layer(torch.randn(5, 5), target=torch.zeros(4, 5))
        assert layer(torch.randn(3, 5), target=torch.zeros(5)).shape == (3, 5)


@pytest.mark.parametrize("spec", [cl.problems.TopK(n=5, k=2), cl.problems.Matching(rows=3, cols=3)],
                         ids=lambda spec: spec.label)
def test_auto_reads_the_plane_residue_of_a_tied_cost_as_zero_in_its_gradient(spec):
    # Costs constant on the feasible set (every solution ties) leave the plane as
    # rounding residue, which the normalisation's gradient scaled up: 2e12 on a TopK's
    # all-equal scores, and 1.3e5 in float32 against 3e-3 in float64 on a matching.
    grads = []
    for dtype in (torch.float64, torch.float32):
        layer = cl.ComboLayer(spec)
        w = torch.full((1, *spec.cost_shape), 0.7, dtype=dtype, requires_grad=True)
        g = torch.linspace(-1, 1, spec.num_outputs, dtype=dtype).reshape(w.shape)
        (layer(w) * g).sum().backward()
        grads.append(w.grad.double())
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-5)
    assert float(grads[0].abs().max()) <= 2.0


def test_a_problem_of_one_solution_has_a_zero_gradient():
    spec = cl.ILP(shape=[2], constraints=[cl.Constraint(coefs=[-3, 2], sense="==", rhs=0)])
    layer = cl.ComboLayer(spec, projection="auto-exact")
    w = torch.tensor([[0.3, -1.2]], requires_grad=True)
    layer(w).sum().backward()
    assert float(w.grad.abs().max()) < 1e-6  # was 3.9e-4: residue's normalisation


@pytest.mark.parametrize("case", ["topk 1e4", "topk 1e5", "topk 400", "matching 30"])
def test_costs_with_a_large_offset_keep_their_solution_and_gradient(case):
    # Rules that read ||P w|| small against ||w|| as a tie (the offset counts in ||w||)
    # zeroed real costs (a float32 top 10 of 1e4 + 0.1 randn came out wrong) or took
    # their gradient for P g (11x, 17x and 58x off the float64 one on these costs).
    torch.manual_seed(0)
    spec, offset, spread = {"topk 1e4": (cl.problems.TopK(n=100, k=10), 1e4, 0.1),
                            "topk 1e5": (cl.problems.TopK(n=100, k=10), 1e5, 1.0),
                            "topk 400": (cl.problems.TopK(n=400, k=10), 1e3, 0.003),
                            "matching 30": (cl.problems.Matching(rows=30, cols=30), 1e2,
                                            0.002)}[case]
    w = (offset + spread * torch.randn(2, *spec.cost_shape, dtype=torch.float64)).float()
    g = torch.randn(w.shape, dtype=torch.float64)
    grads, answers = [], []
    for dtype in (torch.float64, torch.float32):
        x = w.to(dtype).requires_grad_()
        y = cl.ComboLayer(spec)(x)
        (y * g.to(dtype)).sum().backward()
        grads.append(x.grad.double())
        answers.append((y.double() * w.double()).flatten(1).sum(1))
    torch.testing.assert_close(answers[1], answers[0])  # the same objective: optimal
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=2e-2 * float(grads[0].norm()))


def test_a_layer_built_under_inference_mode_trains():
    # its mask of costs that must be non-negative was an inference tensor, which autograd
    # refused to save when a later call indexed the costs with it
    with torch.inference_mode():
        layer = cl.ComboLayer(cl.problems.ShortestPath.grid(5, 5))
    w = torch.rand(2, 5, 5, requires_grad=True)
    layer(w).sum().backward()
    assert w.grad is not None


def _std(v):
    centred = v - v.mean(-1, keepdim=True)
    return centred / centred.norm(dim=-1, keepdim=True)


ILP_LE2 = cl.ILP(shape=[5], constraints=[cl.Constraint(coefs=[1] * 5, sense="<=", rhs=2)])


@pytest.mark.parametrize("spec, projection, reference", [
    (cl.problems.TopK(5, 2), "auto", _std),      # the fused node; TopK's hull is the mean's
    (cl.problems.TopK(5, 2), "std", _std),
    (ILP_LE2, "norm", normalize),                # a min problem
], ids=["auto", "std", "norm-min"])
@pytest.mark.parametrize("noise", [0.0, 0.3])
def test_identity_backward_differentiates_again(spec, projection, reference, noise):
    """create_graph=True: a gradient penalty's second derivative through the built-in
    projections equals the same map given as a callable (it was silently zero)."""
    torch.manual_seed(0)
    w = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    g = torch.randn(3, 5, dtype=torch.float64)

    def penalty_grad(layer):
        torch.manual_seed(1)  # the same noise draws on both sides
        first, = torch.autograd.grad((layer(w) * g).sum(), w, create_graph=True)
        second, = torch.autograd.grad((first ** 2).sum(), w)
        return first.detach(), second

    first, second = penalty_grad(cl.ComboLayer(spec, projection=projection, noise=noise))
    want_first, want_second = penalty_grad(cl.ComboLayer(spec, projection=reference,
                                                         noise=noise))
    torch.testing.assert_close(first, want_first)
    torch.testing.assert_close(second, want_second)
    assert second.abs().max() > 1e-3


def test_identity_nested_func_grad_differentiates_the_projection():
    g = torch.randn(5, dtype=torch.float64)
    w = torch.randn(5, dtype=torch.float64)

    def hvp(layer):
        def f(v):
            return (layer(v) * g).sum()
        return torch.func.grad(lambda v: (torch.func.grad(f)(v) ** 2).sum())(w)

    torch.testing.assert_close(hvp(cl.ComboLayer(cl.problems.TopK(5, 2))),
                               hvp(cl.ComboLayer(cl.problems.TopK(5, 2), projection=_std)))


def test_assigned_method_is_the_one_used_and_copied():
    layer = cl.ComboLayer(cl.problems.TopK(5, 2), projection="none")
    layer.method = {"name": "blackbox", "lam": 5.0}
    assert layer.method == cl.Blackbox(lam=5.0)
    g = torch.tensor([[1.0, 0, 0, 0, 0]])
    grads = []
    for each in (layer, copy.deepcopy(layer)):
        w = torch.tensor([[3.0, 1.0, 2.0, 5.0, 0.0]], requires_grad=True)
        (each(w) * g).sum().backward()
        grads.append(w.grad)
    # Blackbox's (y(w + 5 g) - y(w)) / 5 for this max problem, not Identity's g
    torch.testing.assert_close(grads[0], torch.tensor([[0.2, 0.0, -0.2, 0.0, 0.0]]))
    torch.testing.assert_close(grads[1], grads[0])
    with pytest.raises(cl.ComboLayerError, match="unknown method 'nope'"):
        layer.method = "nope"


def test_assigned_noise_is_checked_as_set_noise_checks_it():
    layer = cl.ComboLayer(cl.problems.TopK(5, 2))
    layer.noise = 0.5
    assert layer.noise == SignNoise(0.5) and layer.noise_level == 0.5
    layer(torch.randn(2, 5))
    layer.noise = 0
    assert layer.noise is None
    for bad in ("x", -1.0, True):
        with pytest.raises(cl.ComboLayerError, match="noise must be"):
            layer.noise = bad


@pytest.mark.parametrize("backend", ["auto", "highs"])
def test_a_callable_projection_output_is_checked(backend):
    nan_at_ties = _std  # all-equal costs: 0 / 0
    layer = cl.ComboLayer(cl.problems.TopK(5, 2), projection=nan_at_ties, backend=backend)
    with pytest.raises(ValueError, match="w after projection must be finite"):
        layer(torch.ones(2, 5))
    short = cl.ComboLayer(cl.problems.TopK(5, 2), projection=lambda v: v[..., :-1])
    with pytest.raises(ValueError, match=r"w after projection has trailing shape \(4,\)"):
        short(torch.randn(2, 5))


def test_the_normalized_projection_node_differentiates_again():
    """project_std's own node (the layer's projection outside Identity's fused node:
    other estimators, per-call rows, a known cost) under create_graph=True."""
    w = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    g = torch.randn(3, 5, dtype=torch.float64)
    second = []
    for project in (project_std, _std):
        first, = torch.autograd.grad((project(w) * g).sum(), w, create_graph=True)
        second.append(torch.autograd.grad((first ** 2).sum(), w)[0])
    torch.testing.assert_close(second[0], second[1])
    assert second[0].abs().max() > 1e-3

