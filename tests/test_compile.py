"""torch.compile on a model that holds a ComboLayer: the layer's solve is one custom
operator (combolayer.layer.ops), so estimators that compile whole give no graph break
inside combolayer, fullgraph=True works, and answers and gradients are eager mode's.
The others compile with breaks and give eager mode's answers too."""

import numpy as np
import pytest
import torch

import combolayer as cl
from combolayer.estimators.base import METHODS

WHOLE = sorted(name for name, cls in METHODS.items() if cls.compiles_whole)
BROKEN = sorted(name for name, cls in METHODS.items() if not cls.compiles_whole)
SPECS = {"topk": cl.problems.TopK(n=10, k=3), "grid": cl.problems.ShortestPath.grid(5, 5)}


class Model(torch.nn.Module):
    """Linear -> ComboLayer -> a loss against fixed costs (their solution is the target
    for the methods that read one)."""

    def __init__(self, spec, method, **options):
        super().__init__()
        self.shape = spec.cost_shape
        self.linear = torch.nn.Linear(4, spec.num_outputs, dtype=torch.float64)
        self.layer = cl.ComboLayer(spec, method=method, **options)
        self.true_costs = torch.rand(spec.num_outputs, dtype=torch.float64,
                                     generator=torch.Generator().manual_seed(1))
        self.target = cl.make_solver(spec).solve(self.true_costs.reshape(spec.cost_shape))

    def forward(self, x):
        w = torch.nn.functional.softplus(self.linear(x)).reshape(-1, *self.shape)
        y = self.layer(w, target=self.target.expand_as(w))
        return (y.reshape(len(x), -1) * self.true_costs).sum(), y


def make(spec_name, method, **options):
    torch.manual_seed(0)
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


def test_whole_methods_include_the_warcraft_ones():
    assert {"identity", "blackbox"} <= set(WHOLE)


@pytest.mark.parametrize("spec_name", sorted(SPECS))
@pytest.mark.parametrize("method", WHOLE)
def test_no_graph_break(spec_name, method):
    model, x = make(spec_name, method)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


@pytest.mark.parametrize("spec_name", sorted(SPECS))
@pytest.mark.parametrize("method", WHOLE)
def test_fullgraph_matches_eager(spec_name, method):
    (loss, y, grad), (compiled_loss, compiled_y, compiled_grad) = eager_and_compiled(
        spec_name, method)
    torch.testing.assert_close(compiled_y, y, rtol=0, atol=0)
    torch.testing.assert_close(compiled_loss, loss)
    torch.testing.assert_close(compiled_grad, grad)
    assert grad.abs().sum() > 0  # a gradient that reaches the weights


@pytest.mark.parametrize("method", ["identity", cl.Blackbox(lam=5.0)], ids=["identity",
                                                                          "blackbox"])
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


def test_default_backend_matches_eager():
    (loss, y, grad), (compiled_loss, compiled_y, compiled_grad) = eager_and_compiled(
        "grid", "blackbox", backend="inductor")
    torch.testing.assert_close(compiled_y, y, rtol=0, atol=0)
    torch.testing.assert_close(compiled_grad, grad)


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


@pytest.mark.parametrize("method", BROKEN)
def test_other_methods_compile_to_eager_answers(method):
    (loss, y, grad), (compiled_loss, compiled_y, compiled_grad) = eager_and_compiled(
        "topk", method, fullgraph=False)
    torch.testing.assert_close(compiled_y, y)
    torch.testing.assert_close(compiled_grad, grad)


@pytest.mark.parametrize("method", WHOLE)
def test_no_graph_break_with_training_noise(method):
    layer = cl.ComboLayer(SPECS["grid"], method=method, noise=0.5)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(layer)(torch.rand(4, 5, 5) + 1.0)
    assert explained.graph_break_count == 0, explained.break_reasons


@pytest.mark.parametrize("method", WHOLE + ["perturbed"])
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
