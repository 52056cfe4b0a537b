"""torch.compile on a model that holds a ComboLayer: the layer's solve is one custom
operator (combolayer.layer.ops), so every estimator compiles whole: no graph break
inside combolayer, fullgraph=True works, and answers and gradients are eager mode's,
the estimators' own noise draws included (same seed, same draws), and the relaxations'
gradient through cvxpylayers (solved again in the operator's backward)."""

import copy

import numpy as np
import pytest
import torch

import combolayer as cl
from combolayer.estimators.base import METHODS, resolve_method

#: The library's estimators (tests elsewhere register their own).
OURS = sorted(name for name, cls in METHODS.items() if cls.__module__.startswith("combolayer."))
WHOLE = [name for name in OURS if resolve_method(name).compiles_whole]
#: Settings that keep a method's test short (Frank-Wolfe's default runs to 10,000 steps).
QUICK = {"rfwo": {"name": "rfwo", "max_iter": 50}}
SPECS = {"topk": cl.problems.TopK(n=10, k=3), "grid": cl.problems.ShortestPath.grid(5, 5)}
#: (spec, method) pairs: every method on both specs.
CASES = [(spec, method) for spec in sorted(SPECS) for method in WHOLE]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from scratch: the layers of earlier tests (other estimators,
    problems and options, each a graph of its own) would otherwise fill Dynamo's
    recompile limit (8 per code object) for ComboLayer.forward."""
    torch._dynamo.reset()


class Model(torch.nn.Module):
    """Linear -> ComboLayer -> a loss with weights of both signs (CombOptNet's gradient
    vanishes for weights of one sign); the solution of fixed costs is the target for the
    methods that read one."""

    def __init__(self, spec, method, **options):
        super().__init__()
        self.shape = spec.cost_shape
        self.linear = torch.nn.Linear(4, spec.num_outputs, dtype=torch.float64)
        self.layer = cl.ComboLayer(spec, method=method, **options)
        self.true_costs = torch.rand(spec.num_outputs, dtype=torch.float64,
                                     generator=torch.Generator().manual_seed(1))
        self.target = cl.make_solver(spec).solve(self.true_costs.reshape(spec.cost_shape))
        self.weights = torch.randn(spec.num_outputs, dtype=torch.float64,
                                   generator=torch.Generator().manual_seed(3))

    def forward(self, x):
        w = torch.nn.functional.softplus(self.linear(x)).reshape(-1, *self.shape)
        y = self.layer(w, target=self.target.expand_as(w))
        return (y.reshape(len(x), -1) * self.weights).sum(), y


def quick(method):
    """``method``, or by name its `QUICK` settings where it has some."""
    return QUICK.get(method, method) if isinstance(method, str) else method


def make(spec_name, method, **options):
    torch.manual_seed(0)
    method = quick(method)
    return Model(SPECS[spec_name], method, **options), torch.randn(8, 4, dtype=torch.float64)


def eager_and_compiled(spec_name, method, fullgraph=True, backend="aot_eager", **options):
    """The loss, solution and weight gradient of one call of a model in eager mode and
    one of its twin (same weights, a layer of its own: estimators may keep state) under
    torch.compile."""
    results = []
    for compiled in (False, True):
        model, x = make(spec_name, method, **options)
        torch._dynamo.reset()
        run = torch.compile(model, fullgraph=fullgraph, backend=backend) if compiled else model
        torch.manual_seed(2)  # estimators that draw noise draw the same in both
        loss, y = run(x)
        loss.backward()
        results.append((loss.detach(), y.detach(), model.linear.weight.grad.clone()))
    return results


@pytest.mark.parametrize("method", ["identity", "perturbed", "perturbed with a generator"])
def test_new_models_of_the_same_layers_meet_the_graph_already_compiled(method):
    """A layer's solve and its noise were named by ints, constants of the graph, and its
    projection by a node class of its own: each new model compiled again, and with
    fullgraph=True the ninth failed (seeds, folds, sweeps in one process)."""
    spec = cl.problems.TopK(n=6, k=2)
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for seed in range(10):
        torch.manual_seed(seed)
        generator = torch.Generator()
        estimator = (cl.Perturbed(generator=generator) if method.endswith("generator")
                     else method)  # the generator's repr: its address
        model = torch.nn.Sequential(torch.nn.Linear(2, 6),
                                    cl.ComboLayer(spec, method=estimator, noise=0.5))
        x = torch.randn(3, 2)
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
        torch.manual_seed(seed)
        generator.manual_seed(seed)
        y = compiled(x)
        y.sum().backward()
        grad = model[0].weight.grad.clone()
        model.zero_grad()
        torch.manual_seed(seed)
        generator.manual_seed(seed)
        eager = model(x)
        eager.sum().backward()
        assert torch.equal(y, eager) and torch.equal(grad, model[0].weight.grad)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - before == 1


def test_eager_calls_between_compiled_models_on_a_plane_compile_once():
    # A general plane's projection (a matching's) read its operator cache in the traced
    # graph: Dynamo guarded on the cache's keys, and a model called eagerly first made
    # the next model recompile (and an eager call after compiling, the compiled one).
    from torch._dynamo.testing import CompileCounterWithBackend

    spec = cl.problems.Matching(rows=4, cols=4)
    x = torch.randn(4, 5)
    counter = CompileCounterWithBackend("aot_eager")
    for seed in range(3):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Unflatten(1, (4, 4)),
                                    cl.ComboLayer(spec))
        if seed == 0:
            model(x)  # a sanity check before compiling the first model only
        compiled = torch.compile(model, fullgraph=True, backend=counter)
        compiled(x).sum().backward()
        model(x)
        compiled(x)
    assert counter.frame_count == 1


def test_every_method_compiles_whole():
    assert WHOLE == OURS
    assert cl.Margin(method="blackbox").compiles_whole
    assert cl.Margin(method="qptl").compiles_whole


@pytest.mark.parametrize(("spec_name", "method"), CASES)
def test_no_graph_break(spec_name, method):
    model, x = make(spec_name, method)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


@pytest.mark.parametrize(("spec_name", "method"), CASES)
def test_fullgraph_matches_eager(spec_name, method):
    (loss, y, grad), (compiled_loss, compiled_y, compiled_grad) = eager_and_compiled(
        spec_name, method)
    torch.testing.assert_close(compiled_y, y, rtol=0, atol=0)
    torch.testing.assert_close(compiled_loss, loss)
    torch.testing.assert_close(compiled_grad, grad)
    assert grad.abs().sum() > 0  # a gradient that reaches the weights


@pytest.mark.parametrize("method", WHOLE)
def test_fullgraph_in_eval_mode_and_with_a_cost_projection(method):
    (loss, y, grad), (compiled_loss, compiled_y, compiled_grad) = eager_and_compiled(
        "topk", method, projection="std")
    torch.testing.assert_close(compiled_y, y, rtol=0, atol=0)
    torch.testing.assert_close(compiled_grad, grad)
    model, x = make("topk", method, projection="std")
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(compiled(x)[1], model(x)[1], rtol=0, atol=0)


@pytest.mark.parametrize("method", ["blackbox", "perturbed",
                                    cl.Perturbed(num_samples=3), cl.IMLE(num_samples=3)],
                         ids=["blackbox", "perturbed", "perturbed-3", "imle-3"])
def test_default_backend_matches_eager(method):
    """Inductor draws its own random numbers for traced ops, not for the operator: the
    estimator's noise is eager mode's."""
    (loss, y, grad), (compiled_loss, compiled_y, compiled_grad) = eager_and_compiled(
        "grid", method, backend="inductor")
    torch.testing.assert_close(compiled_y, y, rtol=0, atol=0)
    torch.testing.assert_close(compiled_grad, grad)


def test_two_noisy_calls_in_one_graph_draw_in_eager_order_under_aot_eager():
    """``layer(x)`` and ``layer.sample(x)`` in one graph, both drawing from one seeded
    generator: aot_eager keeps eager mode's order (inductor may reorder the two calls'
    independent draws: docs/core.md)."""
    spec = cl.problems.TopK(6, 2)
    w = torch.randn(3, 6, generator=torch.Generator().manual_seed(1))
    runs = []
    for compiled in (False, True):
        layer = cl.ComboLayer(spec, noise=0.3, sample_noise=cl.SumOfGamma(k=2, tau=1.0),
                              generator=torch.Generator().manual_seed(0))

        def both(x, layer=layer):
            return torch.cat([layer(x), layer.sample(x)])

        run = torch.compile(both, fullgraph=True, backend="aot_eager") if compiled else both
        runs.append(torch.stack([run(w) for _ in range(3)]))
    assert torch.equal(*runs)


@pytest.mark.parametrize("method", ["qptl", "intopt"])
def test_a_relaxation_compiled_whole_takes_an_empty_batch(method):
    layer = cl.ComboLayer(SPECS["topk"], method=method, projection="none")
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    w = torch.rand(0, 10, dtype=torch.float64, requires_grad=True)
    y = compiled(w)
    y.sum().backward()
    assert y.shape == (0, 10) and w.grad.shape == (0, 10)


@pytest.mark.parametrize("method", WHOLE)
def test_compiled_layer_refuses_nan_costs(method):
    layer = cl.ComboLayer(SPECS["topk"], method=method, projection="none")
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    w = torch.rand(3, 10)
    w[1, 4] = float("nan")
    with pytest.raises(ValueError, match="must be finite"):
        compiled(w)
    w[1, 4] = float("inf")
    with pytest.raises(ValueError, match="must be finite"):
        compiled(w)


def test_compiled_layer_refuses_negative_costs_on_a_graph_with_cycles():
    layer = cl.ComboLayer(SPECS["grid"], method="identity")
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    w = torch.rand(2, 5, 5)
    compiled(w)
    w[1, 2, 3] = -1.0
    with pytest.raises(ValueError, match="w after projection, instance 1"):
        compiled(w)


@pytest.mark.parametrize("method", ["aimle", "imle", "perturbed", "score_function"])
def test_estimator_noise_after_the_layers_noise_is_eager_modes(method):
    """The layer's noise is drawn in the graph, the estimator's inside the operator, in
    eager mode's order: one seed gives the same draws in both modes."""
    (loss, y, grad), (compiled_loss, compiled_y, compiled_grad) = eager_and_compiled(
        "topk", method, noise=0.5)
    torch.testing.assert_close(compiled_y, y, rtol=0, atol=0)
    torch.testing.assert_close(compiled_grad, grad)
    other_seed = make("topk", method, noise=0.5)
    torch.manual_seed(3)
    assert not torch.equal(other_seed[0](other_seed[1])[1], y)  # the draws matter


@pytest.mark.parametrize("options", [
    {"noise": 0.5, "generator": torch.Generator().manual_seed(1)},
    {"sample_noise": cl.SumOfGamma(k=3, tau=1.0)},
    {"sample_noise": cl.SumOfGamma(k=3, tau=1.0), "generator": torch.Generator().manual_seed(1)},
], ids=["margin-generator", "sample-noise", "sample-noise-generator"])
def test_the_layers_own_noise_from_a_generator_or_sum_of_gamma_compiles_whole(options):
    """A seeded generator (which a graph cannot trace) and SumOfGamma (a rejection loop)
    are drawn inside an operator: fullgraph works and the draws are eager mode's."""
    results = []
    for compiled in (False, True):
        generator = options.get("generator")
        layer_options = dict(options, generator=None if generator is None
                             else torch.Generator().manual_seed(1))
        layer = cl.ComboLayer(SPECS["topk"], **layer_options).train()
        run = torch.compile(layer, fullgraph=True, backend="aot_eager") if compiled else layer
        torch.manual_seed(2)
        w = torch.randn(2, 6, 10, requires_grad=True)
        y = torch.stack([run(w[0]), run(w[1])])  # two calls: the generator moves on
        (y * torch.arange(10.0)).sum().backward()
        results.append((y.detach(), w.grad))
    (y, grad), (compiled_y, compiled_grad) = results
    torch.testing.assert_close(compiled_y, y, rtol=0, atol=0)
    torch.testing.assert_close(compiled_grad, grad)


@pytest.mark.parametrize("method", ["comboptnet", "rfwo"])
def test_a_new_batch_size_keeps_eager_answers(method):
    """Their saved tensors' shapes follow the number of instances (symbolic after the
    first recompile)."""
    model, x = make("topk", method)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    for size in (8, 5, 3):
        answers = []
        for run in (model, compiled):
            model.zero_grad()
            loss, y = run(x[:size])
            loss.backward()
            answers.append((y, model.linear.weight.grad.clone()))
        (y, grad), (compiled_y, compiled_grad) = answers
        torch.testing.assert_close(compiled_y, y, rtol=0, atol=0)
        torch.testing.assert_close(compiled_grad, grad)


class MisdeclaredPerturbed(cl.Perturbed):
    """Declares one sample more than its forward draws (no name: not registered)."""

    def saved_like(self, solver, costs, training):
        return (costs.new_empty((self.num_samples + 1, *costs.shape)),) * 2


def test_a_saved_like_that_disagrees_with_forward_is_named():
    layer = cl.ComboLayer(SPECS["topk"], method=MisdeclaredPerturbed(), projection="none")
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    with pytest.raises(RuntimeError, match=r"MisdeclaredPerturbed.saved_like declares saved "
                       r"tensors \[\(\(2, 3, 10\), torch.float32\)"):
        compiled(torch.rand(3, 10, requires_grad=True))


@pytest.mark.parametrize("method", WHOLE)
def test_no_graph_break_with_training_noise(method):
    layer = cl.ComboLayer(SPECS["grid"], method=quick(method), noise=0.5)
    target = torch.zeros(4, 5, 5)  # read by the margin
    explained = torch._dynamo.explain(layer)(torch.rand(4, 5, 5) + 1.0, target=target)
    assert explained.graph_break_count == 0, explained.break_reasons


@pytest.mark.parametrize("method", WHOLE)
def test_return_aux_compiles_to_eager_answers(method):
    """The auxiliaries reach the compiled call (x2 = x0 here), not zeros."""
    spec = cl.ILP.from_matrices(shape=[2], A_eq=np.array([[1, 1, 0], [1, 0, -1]]),
                                b_eq=np.array([1, 0]), num_aux=1)
    layer = cl.ComboLayer(spec, method=method, projection="none").eval()
    w = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 2.0]])
    compiled = torch.compile(layer, backend="aot_eager")
    y, aux = compiled(w, return_aux=True)
    torch.testing.assert_close(aux, torch.tensor([[1.0], [0.0], [1.0]]))
    torch.testing.assert_close(y, layer(w))


_ONE_PROCESS = """
import sys, torch, combolayer as cl
layer = cl.ComboLayer(cl.problems.TopK(n=5, k=2), method=sys.argv[1], projection="none")
model = torch.nn.Sequential(torch.nn.Linear(3, 5), layer)
x = torch.tensor([[0.3, -1.0, 2.0], [1.0, 0.5, -0.2]])
g = torch.tensor([[1.0, -2.0, 0.5, 3.0, -1.0], [0.2, 0.1, -0.3, 2.0, 1.0]])
torch.compile(model, fullgraph=True)(x).backward(g)
got = [p.grad.clone() for p in model.parameters()]
model.zero_grad()
model(x).backward(g)
assert all(torch.equal(a, p.grad) for a, p in zip(got, model.parameters())), sys.argv[1]
"""


@pytest.mark.slow
def test_a_graph_cached_by_another_process_never_serves_another_estimator(tmp_path):
    """torch.compile's on-disk caches outlive the process and key a graph by its
    constants, the layer's handle among them: each process's first layer (Identity,
    then Blackbox) must not meet the other's cached graph (a handle from a counter let
    Blackbox run Identity's traced backward: wrong gradients, silently)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    for method in ("identity", "blackbox"):
        done = subprocess.run([sys.executable, "-c", _ONE_PROCESS, method], env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]


#: Three binary outputs and an auxiliary equal to the first (x3 = x0), at most two chosen:
#: the problem the per-call inputs below act on.
PER_CALL = cl.ILP.from_matrices(shape=[3], A_ub=np.array([[1, 1, 1, 0]]), b_ub=np.array([2]),
                                A_eq=np.array([[1, 0, 0, -1]]), b_eq=np.array([0]), num_aux=1)


class PerCallModel(torch.nn.Module):
    """Linear -> ComboLayer with per-call rows (``x1 + x3 <= b``, one instance's rows
    leaving only x1 = x3 = 0), a per-call known cost on the outputs and ``return_aux``;
    the loss weighs the solution and the auxiliaries. ``rows`` is a Linear too when the
    rows learn (``learn_rows``)."""

    def __init__(self, method, learn_rows=False, **options):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3).double()
        self.rows = torch.nn.Linear(4, 1).double() if learn_rows else None
        self.layer = cl.ComboLayer(PER_CALL, method=method, projection="plane", **options)
        self.target = torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64)

    def forward(self, x):
        w = self.linear(x)
        A = torch.tensor([[[0.0, 1.0, 0.0, 1.0]]], dtype=torch.float64).expand(len(x), 1, 4)
        b = torch.tensor([1.0, 0.0, 2.0, 1.0, 0.5, 1.0], dtype=torch.float64)[: len(x), None]
        if self.rows is not None:
            A = A + 0.1 * self.rows(x)[:, :, None]
            b = b + 0.1 * self.rows(x)
        known = torch.tensor([0.3, -0.2, 0.1, 0.0], dtype=torch.float64)
        y, aux = self.layer(w, target=self.target.expand_as(w), return_aux=True, A=A, b=b,
                            known_cost=known)
        loss = (y * torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)).sum()
        return loss, y, aux


def per_call_eager_and_compiled(method, fullgraph=True, learn_rows=False, **options):
    """Loss, solution, auxiliaries and every parameter's gradient, in eager mode and
    compiled (twins with the same weights)."""
    results = []
    for compiled in (False, True):
        torch.manual_seed(0)
        model = PerCallModel(quick(method), learn_rows=learn_rows, **options)
        x = torch.randn(6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
        torch._dynamo.reset()
        run = torch.compile(model, fullgraph=fullgraph, backend="aot_eager") if compiled else model
        torch.manual_seed(2)
        loss, y, aux = run(x)
        loss.backward()
        grads = [p.grad.clone() if p.grad is not None else None for p in model.parameters()]
        results.append((loss.detach(), y.detach(), aux.detach(), grads))
    return results


@pytest.mark.parametrize("method", WHOLE)
def test_per_call_rows_known_cost_and_aux_compile_to_eager_answers(method):
    """Per-call rows, a per-call known cost and return_aux go through the compiled solve
    for every method: fullgraph works, and the answers, auxiliaries and gradients are
    eager mode's (the relaxations' to the conic solver's tolerance)."""
    eager, compiled = per_call_eager_and_compiled(method, on_infeasible="flag")
    for got, expected in zip(compiled[:3], eager[:3]):
        torch.testing.assert_close(got, expected)
    torch.testing.assert_close(compiled[2][:, 0], compiled[1][:, 0])  # x3 = x0
    for got, expected in zip(compiled[3], eager[3]):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("method", [m for m in WHOLE if resolve_method(m).row_gradients])
def test_learned_rows_compile_whole_with_eager_gradients(method):
    """A method that gives per-call rows a gradient (CombOptNet's, the score function's)
    compiles with rows that learn: fullgraph works and the rows' gradients (the second
    Linear's) are eager mode's, not zeros."""
    eager, compiled = per_call_eager_and_compiled(method, learn_rows=True, on_infeasible="flag")
    rows_grads = eager[3][2:]
    assert any(bool(g.abs().sum() > 0) for g in rows_grads)
    for got, expected in zip(compiled[3], eager[3]):
        torch.testing.assert_close(got, expected)


def test_per_call_rows_compile_without_a_graph_break():
    model = PerCallModel("identity", on_infeasible="flag")
    x = torch.randn(6, 4, dtype=torch.float64)
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0, explained.break_reasons


def test_compiled_per_call_rows_flag_infeasible_instances():
    """The instance whose rows leave no point (x1 + x3 <= -1) is zeros, flagged in
    last_infeasible, with eager mode's warning."""
    layer = cl.ComboLayer(PER_CALL, projection="none", on_infeasible="flag")
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    w = -torch.ones(3, 3)
    A = torch.tensor([[0.0, 1.0, 0.0, 1.0]]).expand(3, 1, 4)
    b = torch.tensor([[1.0], [-1.0], [2.0]])
    with pytest.warns(RuntimeWarning, match="1 of 3 instances are infeasible"):
        y = compiled(w, A=A, b=b)
    assert layer.last_infeasible.tolist() == [False, True, False]
    torch.testing.assert_close(y, layer(w, A=A, b=b))
    assert y[1].abs().sum() == 0


@pytest.mark.parametrize("bad", ["A", "b", "known_cost"])
def test_compiled_per_call_inputs_refuse_nan(bad):
    layer = cl.ComboLayer(PER_CALL, projection="none")
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    inputs = {"A": torch.tensor([[0.0, 1.0, 0.0, 1.0]]), "b": torch.tensor([1.0]),
              "known_cost": torch.zeros(4)}
    inputs[bad] = inputs[bad].clone()
    inputs[bad][0] = float("nan")
    with pytest.raises(ValueError, match=f"{bad} must be finite"):
        compiled(-torch.ones(2, 3), **inputs)


def test_compiled_known_cost_on_the_auxiliaries_takes_the_hull_alone_or_is_refused():
    """Under "auto" a call's known cost on the auxiliaries makes the projection the hull
    projection alone, in the traced graph as in eager mode; a projection that always
    rescales w refuses it."""
    layer = cl.ComboLayer(PER_CALL)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    w = torch.randn(2, 3, generator=torch.Generator().manual_seed(0)) * 1e3
    for known in ([1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]):
        known = torch.tensor(known)
        torch.testing.assert_close(compiled(w, known_cost=known), layer(w, known_cost=known))
        torch.testing.assert_close(layer(w, known_cost=known),
                                   layer.solver.solve(w, known_cost=known))
    norm = torch.compile(cl.ComboLayer(PER_CALL, projection="norm"), fullgraph=True,
                         backend="aot_eager")
    norm(w, known_cost=torch.tensor([1.0, 0.0, 0.0, 0.0]))  # the outputs' alone: fine
    with pytest.raises(ValueError, match="weighs its auxiliaries.*projection='plane'"):
        norm(w, known_cost=torch.tensor([0.0, 0.0, 0.0, 1.0]))


def test_a_compiled_path_layer_takes_a_per_call_known_cost_its_solver_takes():
    """The compiled solve checks the total cost the solver sees (the known cost added),
    as eager mode does: a positive total is no negative cost."""
    spec = cl.problems.ShortestPath.grid(3, 3)
    layer = cl.ComboLayer(spec)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    w = torch.ones(3, 3, dtype=torch.float64)
    w[1, 1] = 0.2
    known = torch.full((9,), 0.5, dtype=torch.float64)
    torch.testing.assert_close(compiled(w, known_cost=known),
                               cl.make_solver(spec).solve(w, known_cost=known))


@pytest.mark.parametrize("bad", ["w", "target"])
def test_a_compiled_layer_checks_the_users_costs_before_its_projection(bad):
    """A cost of 1e16 is refused in eager mode; the projection normalises it below the
    bound, so the compiled solve checks the user's w (and target) themselves, with eager
    mode's ValueError (it answered)."""
    spec = cl.ILP(shape=[5], constraints=[cl.Constraint(coefs=[1] * 5, sense="==", rhs=2)])
    layer = cl.ComboLayer(spec, method="margin")
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    w = torch.tensor([[1.0, 2.0, 0.0, 0.0, 0.0]])
    target = torch.tensor([[0.0, 0.0, 0.0, 1.0, 1.0]])
    if bad == "w":
        w = w * 1e16
    else:
        target = target * float("nan")
    with pytest.raises(ValueError, match=f"{bad} must be"):
        layer(w, target=target)
    with pytest.raises(ValueError, match=f"{bad} must be"):
        compiled(w, target=target)


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copied_model_compiles_whole(how):
    """A copy builds its layer when it is made, not on first use: a first use inside the
    trace traced the build (a lock, the hull analysis) and broke the graph."""
    import copy
    import pickle

    model = torch.nn.Sequential(torch.nn.Linear(4, 6), cl.ComboLayer(cl.problems.TopK(6, 2)))
    twin = copy.deepcopy(model) if how == "deepcopy" else pickle.loads(pickle.dumps(model))
    x = torch.randn(8, 4)
    torch.testing.assert_close(torch.compile(twin, fullgraph=True, backend="aot_eager")(x),
                               model(x))


def test_half_precision_compiles_whole_and_a_dtype_too_small_for_the_ranks_is_refused():
    """The check that a half-precision dtype holds the solutions read the spec's bounds
    while traced: fullgraph=True failed on every bfloat16 layer."""
    layer = cl.ComboLayer(cl.problems.TopK(n=6, k=2))
    w = torch.rand(3, 6).to(torch.bfloat16)
    assert torch.equal(torch.compile(layer, fullgraph=True, backend="aot_eager")(w), layer(w))
    # (with fullgraph=True, Dynamo reports any error raised while tracing as Unsupported)
    ranks = torch.compile(cl.ComboLayer(cl.problems.Ranking(n=300)), backend="aot_eager")
    # the compiled check is queued in the graph: a RuntimeError, with the same words
    with pytest.raises((ValueError, RuntimeError), match="solutions of Ranking.*cannot hold"):
        ranks(torch.randn(2, 300).to(torch.bfloat16))


def test_a_loss_compiles_in_one_graph_with_the_layer():
    # the loss's finiteness check read its answer back (`bool(finite.all())`), which
    # stopped fullgraph=True on a model, its layer and its loss compiled as one function
    spec = cl.problems.ShortestPath.grid(5, 5, neighborhood=8)
    layer = cl.ComboLayer(spec, projection="none")
    w = torch.rand(6, 5, 5) + 0.1
    y_true = cl.make_solver(spec).solve(torch.rand(6, 5, 5) + 0.1)

    def loss(w, y_true):
        return cl.losses.hamming(layer(w), y_true)

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(w, y_true), loss(w, y_true), rtol=0, atol=0)
    y_true[2, 1, 1] = float("nan")
    with pytest.raises(RuntimeError, match="y_true must be finite"):
        compiled(w, y_true)


def test_a_half_precision_matching_compiles_whole():
    # while traced, the half-precision check built its message from the spec's label,
    # which a matching reads from pydantic's field defaults: Dynamo could not trace it
    layer = cl.ComboLayer(cl.problems.Matching(rows=3, cols=4))
    w = torch.rand(2, 3, 4).to(torch.bfloat16)
    assert torch.equal(torch.compile(layer, fullgraph=True, backend="aot_eager")(w), layer(w))


@pytest.mark.parametrize("method, options", [("perturbed", {}), ("identity", {"noise": 0.5}),
                                             ("identity", {"solve_ratio": 0.5})],
                         ids=["perturbed", "noise", "solve_ratio"])
def test_two_calls_alike_in_one_graph_stay_two_calls(method, options):
    """AOT autograd's common-subexpression elimination merged two calls of one layer on
    the same costs (with a gradient) into one: one sample where eager mode drew two, and
    a solution pool that took one solve of two."""
    eager = cl.ComboLayer(cl.problems.TopK(6, 3), method=method, projection="none", **options)
    traced = copy.deepcopy(eager)

    def twice(layer, w):
        return torch.stack([layer(w), layer(w)])

    compiled = torch.compile(lambda w: twice(traced, w), fullgraph=True, backend="aot_eager")
    for seed in range(3):
        w = torch.randn(16, 6, requires_grad=True)
        torch.manual_seed(seed)
        want = twice(eager, w)
        torch.manual_seed(seed)
        got = compiled(w)
        assert torch.equal(got, want), seed
    if method == "perturbed":
        assert not torch.equal(want[0], want[1])  # two samples, which the test compares
