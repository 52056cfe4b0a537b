"""Perturbed, IMLE and Margin against their published formulas, on enumerable problems."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from pyepo_kit import SPEC_MAX, SPEC_MIN, brute_min  # the PyEPO tests' 9-point problem
from testkit import FixedNoise, backend_or_skip

import combolayer as cl
from combolayer.backends.registry import capable_backends
from combolayer.data import shortest_path
from combolayer.estimators import METHODS
from combolayer.estimators.base import row_gradient_methods
from combolayer.transforms.noise import GumbelNoise, SumOfGamma

BACKENDS = ["highs", "scip"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", [SPEC_MIN, SPEC_MAX], ids=["min", "max"])
def test_perturbed_matches_berthet_formula(spec, backend):
    backend = backend_or_skip(backend, spec)
    gen = torch.Generator().manual_seed(1)
    sigma, samples, batch = 0.7, 5, 3
    w = torch.randn(batch, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    z = torch.randn(samples, batch, 4, generator=gen, dtype=torch.float64)
    g = torch.randn(batch, 4, generator=gen, dtype=torch.float64)
    method = cl.Perturbed(sigma=sigma, num_samples=samples, noise=FixedNoise(z))
    layer = cl.ComboLayer(spec, method=method, projection="none", backend=backend)
    y = layer(w)
    (y * g).sum().backward()

    sign = 1.0 if spec.sense == "min" else -1.0
    c = sign * w.detach()
    ys = brute_min(c - sigma * z)  # the paper's argmax <theta + sigma Z, y>, theta = -c
    assert torch.equal(y.detach(), ys.mean(0))
    grad_c = -((ys * g).sum(-1, keepdim=True) * z).mean(0) / sigma
    torch.testing.assert_close(w.grad, sign * grad_c)


def test_perturbed_max_sees_w_plus_sigma_z():
    """For a max problem the solver input is w + sigma Z: the Gumbel-max direction."""
    z = torch.tensor([[[3.0, 0.0, 0.0, 0.0]]], dtype=torch.float64)
    layer = cl.ComboLayer(SPEC_MAX, method=cl.Perturbed(noise=FixedNoise(z)), projection="none")
    w = torch.zeros(1, 4, dtype=torch.float64) - torch.tensor([[0.0, 1.0, 0.0, 0.0]])
    assert layer(w)[0, 0] == 1.0  # item 0 pushed up by +3 wins the max


@pytest.mark.parametrize("sense", ["min", "max"])
def test_gumbel_perturbed_mean_is_softmax(sense):
    """On one-hot choices, E[argmax(theta + sigma G)] = softmax(theta / sigma): Gumbel-max."""
    spec = cl.problems.TopK(n=3, k=1, sense=sense)
    sigma = 0.5
    gen = torch.Generator().manual_seed(0)
    method = cl.Perturbed(sigma=sigma, num_samples=20000, noise="gumbel", generator=gen)
    layer = cl.ComboLayer(spec, method=method, projection="none", backend="torch")
    w = torch.tensor([0.1, 0.3, -0.2], dtype=torch.float64)
    theta = w if sense == "max" else -w
    torch.testing.assert_close(layer(w), torch.softmax(theta / sigma, 0), atol=0.015, rtol=0)


def test_gumbel_perturbed_gradient_uses_grad_nu():
    """With the real Gumbel sampler (seeded), the backward equals the formula with 1 - exp(-Z)."""
    sigma, samples = 0.5, 7
    w = torch.tensor([[0.2, -0.4, 0.9, 0.1]], dtype=torch.float64, requires_grad=True)
    g = torch.tensor([[1.0, -2.0, 0.5, 3.0]], dtype=torch.float64)
    method = cl.Perturbed(sigma, samples, "gumbel", generator=torch.Generator().manual_seed(3))
    layer = cl.ComboLayer(SPEC_MIN, method=method, projection="none")
    (layer(w) * g).sum().backward()
    z = GumbelNoise().sample((samples, 1, 4), generator=torch.Generator().manual_seed(3))
    ys = brute_min(w.detach() - sigma * z)
    expected = -((ys * g).sum(-1, keepdim=True) * (1 - torch.exp(-z))).mean(0) / sigma
    torch.testing.assert_close(w.grad, expected)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", [SPEC_MIN, SPEC_MAX], ids=["min", "max"])
def test_imle_matches_niepert_formula(spec, backend):
    backend = backend_or_skip(backend, spec)
    gen = torch.Generator().manual_seed(2)
    lam, tau, samples, batch = 3.0, 0.8, 4, 2
    w = torch.randn(batch, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    z = torch.randn(samples, batch, 4, generator=gen, dtype=torch.float64)
    g = torch.randn(batch, 4, generator=gen, dtype=torch.float64)
    method = cl.IMLE(lam=lam, num_samples=samples, noise=FixedNoise(z), tau=tau)
    layer = cl.ComboLayer(spec, method=method, projection="none", backend=backend)
    y = layer(w)
    (y * g).sum().backward()

    sign = 1.0 if spec.sense == "min" else -1.0
    c, eps = sign * w.detach(), -tau * z  # the same eps in both solves
    forward = brute_min(c + eps)
    assert torch.equal(y.detach(), forward.mean(0))
    grad_c = ((brute_min(c + lam * g + eps) - forward) / lam).mean(0)
    torch.testing.assert_close(w.grad, sign * grad_c)


def test_sum_of_gamma_moments():
    """SoG(k, 1, s): mean (H_s - log s)/k and variance (sum 1/i^2)/k, from its Gamma terms."""
    torch.manual_seed(0)
    k, s = 3.0, 10
    z = SumOfGamma(k=k, s=s).sample((100_000,))
    harmonic = sum(1 / i for i in range(1, s + 1))
    assert abs(z.mean().item() - (harmonic - math.log(s)) / k) < 0.01
    assert abs(z.var().item() - sum(1 / i**2 for i in range(1, s + 1)) / k) < 0.02
    # the sum of k samples approximates a standard Gumbel: mean ~ Euler's gamma, variance ~ pi^2/6
    summed = SumOfGamma(k=4, s=100).sample((4, 20_000)).sum(0)
    assert abs(summed.mean().item() - 0.5772) < 0.03
    assert abs(summed.var().item() - math.pi**2 / 6) < 0.1


def test_imle_takes_k_from_the_problem():
    topk = cl.problems.TopK(n=6, k=2)
    assert cl.IMLE()._noise(topk) == SumOfGamma(k=2)
    assert cl.IMLE()._noise(SPEC_MIN) == SumOfGamma(k=5)
    assert cl.IMLE(k=3)._noise(topk) == SumOfGamma(k=3)


@pytest.mark.parametrize("method", [cl.Perturbed(num_samples=3), cl.IMLE(num_samples=3)])
def test_sampling_estimators_are_exact_in_eval_mode(method):
    layer = cl.ComboLayer(SPEC_MAX, method=method, projection="none").eval()
    w = torch.randn(5, 4, dtype=torch.float64)
    assert torch.equal(layer(w), brute_min(-w))


@pytest.mark.parametrize("spec", [SPEC_MIN, SPEC_MAX], ids=["min", "max"])
def test_margin_adds_rolinek_term_in_training_only(spec):
    alpha = 0.6
    layer = cl.ComboLayer(spec, method=cl.Margin(alpha=alpha), projection="none")
    w = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    sign = 1.0 if spec.sense == "min" else -1.0
    target = brute_min(sign * torch.randn(6, 4, dtype=torch.float64))
    y = layer(w, target=target)
    expected = brute_min(sign * w.detach() + alpha / 2 * (2 * target - 1))
    assert torch.equal(y.detach(), expected)
    y.sum().backward()  # the base (identity) gradient passes through the margin
    torch.testing.assert_close(w.grad, -sign * torch.ones_like(w))
    layer.eval()
    assert torch.equal(layer(w, target=target), brute_min(sign * w.detach()))


def test_margin_errors():
    layer = cl.ComboLayer(SPEC_MIN, method={"name": "margin", "alpha": 0.1, "method": "blackbox"})
    with pytest.raises(ValueError, match="target=y_true"):
        layer(torch.randn(4))
    with pytest.raises(ValueError, match="needs a binary problem"):
        cl.ComboLayer(cl.problems.Ranking(n=3), method=cl.Margin())


def test_bad_parameters_name_the_argument():
    with pytest.raises(ValueError, match="sigma must be > 0"):
        cl.Perturbed(sigma=0)
    with pytest.raises(ValueError, match="num_samples must be an int >= 1"):
        cl.IMLE(num_samples=0)
    with pytest.raises(ValueError, match="noise must be one of"):
        cl.Perturbed(noise="cauchy")
    with pytest.raises(ValueError, match="lacks method"):
        cl.Perturbed(noise=object())
    assert {"perturbed", "imle", "margin"} <= set(METHODS)


PROBLEMS = [
    cl.problems.ShortestPath.grid(3, 3),
    cl.problems.TSP(num_nodes=4),
    cl.problems.Matching(rows=2, cols=3),
    cl.problems.Knapsack(weights=[[2, 3, 4, 1]], capacities=[5]),
    cl.problems.TopK(n=5, k=2),
    cl.problems.Ranking(n=4),
]
CASES = [(spec, name) for spec in PROBLEMS for name in capable_backends(spec)]


# Small noise and positive costs: Dijkstra-based backends reject negative costs on graphs
# with cycles, and a large perturbation would create some.
SMALL_NOISE = [cl.Perturbed(sigma=0.1, num_samples=2), cl.IMLE(lam=0.5, tau=0.1, num_samples=2),
               cl.Margin(alpha=0.2, method=cl.Perturbed(sigma=0.1))]


# Margin is for binary problems only; its refusal of Ranking is tested in test_margin_errors.
METHOD_CASES = [
    pytest.param(spec, backend, method, id=f"{spec.kind}-{backend}-{name}")
    for spec, backend in CASES
    for name, method in zip(["perturbed", "imle", "margin"], SMALL_NOISE, strict=True)
    if not (name == "margin" and spec.kind == "ranking")
]


@pytest.mark.parametrize(("spec", "backend", "method"), METHOD_CASES)
def test_every_estimator_on_every_problem_and_backend(spec, backend, method):
    layer = cl.ComboLayer(spec, method=method, projection="none", backend=backend)
    w = 1.0 + torch.rand(2, *spec.cost_shape, dtype=torch.float64)
    w.requires_grad_(True)
    reference = cl.make_solver(spec, "highs")
    target = reference.solve(torch.rand(2, *spec.cost_shape, dtype=torch.float64))
    y = layer(w, target=target)
    assert y.shape == w.shape
    (y * 0.1 * torch.randn_like(y)).sum().backward()
    assert torch.isfinite(w.grad).all()
    layer.eval()
    np.testing.assert_allclose(layer(w.detach()).numpy(), reference.solve(w.detach()).numpy())


@pytest.mark.parametrize(
    "method",
    [cl.Perturbed(sigma=0.5, num_samples=4), cl.IMLE(lam=5.0, num_samples=2),
     cl.Margin(alpha=0.1, method="blackbox")],
    ids=["perturbed", "imle", "margin"],
)
def test_training_reduces_the_loss(method):
    """A linear model learns PyEPO shortest paths: the Hamming loss to the true paths drops."""
    data = shortest_path(200, 5, grid=(3, 3), deg=2, noise_width=0.0, seed=7)
    torch.manual_seed(0)
    model = torch.nn.Linear(5, data.costs.shape[1]).double()
    layer = cl.ComboLayer(data.spec, method=method, projection="none")
    x, y_true = data.features.double(), data.solutions.double()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)

    def loss_now():
        with torch.no_grad():
            return cl.losses.hamming(layer.eval()(model(x)), y_true).item()

    before = loss_now()
    layer.train()
    for _ in range(30):
        optimizer.zero_grad()
        cl.losses.hamming(layer(model(x), target=y_true), y_true).backward()
        optimizer.step()
    assert loss_now() < 0.7 * before


class CountingKernel:
    """Wraps a kernel and records the batch size of every call."""

    def __init__(self, kernel):
        self.kernel, self.array_api, self.calls = kernel, kernel.array_api, []

    def __call__(self, costs):
        self.calls.append(len(costs))
        return self.kernel(costs)


@pytest.mark.parametrize(("method", "forward", "backward"), [
    (cl.Perturbed(num_samples=5), [15], []),
    (cl.IMLE(num_samples=5), [15], [15]),
    (cl.Margin(alpha=0.1, method=cl.Blackbox()), [3], [3]),
])
def test_all_samples_are_one_solver_call(method, forward, backward):
    layer = cl.ComboLayer(SPEC_MIN, method=method, projection="none")
    layer.solver.kernel = counter = CountingKernel(layer.solver.kernel)
    w = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    y = layer(w, target=brute_min(torch.randn(3, 4, dtype=torch.float64)))
    assert counter.calls == forward
    (y * torch.randn_like(y)).sum().backward()
    assert counter.calls == forward + backward


def test_losses_make_one_solver_call():
    spo = cl.losses.SPOPlusLoss(SPEC_MIN)
    fy = cl.losses.FenchelYoungLoss(SPEC_MIN, num_samples=4)
    spo.solver.kernel = spo_counter = CountingKernel(spo.solver.kernel)
    fy.solver.kernel = fy_counter = CountingKernel(fy.solver.kernel)
    c_hat, c = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    spo(c_hat, c)
    fy(c_hat, brute_min(c))
    assert spo_counter.calls == [6] and fy_counter.calls == [12]


# -- a non-finite upstream gradient --------------------------------------------------------


@pytest.mark.parametrize("method", ["blackbox", "imle", "aimle"])
def test_a_nan_upstream_gradient_is_named_not_blamed_on_lam(method):
    # Before: "... must be finite ...; lower lam (got lam=20)", and AIMLE gave a zero gradient.
    layer = cl.ComboLayer(cl.problems.TopK(6, 2), method=method, projection="none")
    w = torch.randn(3, 6, requires_grad=True)
    loss = (layer(w) * torch.tensor([float("nan")] + [1.0] * 5)).sum()
    with pytest.raises(ValueError, match=r"upstream gradient dL/dy is not finite: 3 of 18 "
                                         r"entries are NaN or inf.*not the estimator's settings"):
        loss.backward()


# -- a Blackbox step that overflows the solver ---------------------------------------------


@pytest.mark.parametrize("backend", ["scip", "highs", "torch"])
@pytest.mark.parametrize("lam", [1e300, 1e20])
def test_a_blackbox_step_too_large_for_the_solver_raises_a_typed_error(backend, lam):
    # Before: SCIP raised a bare "Exception: error in input data!" at lam=1e300.
    layer = cl.ComboLayer(cl.problems.TopK(6, 2), method=cl.Blackbox(lam=lam),
                          backend=backend, projection="none")
    w = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    loss = (layer(w) * torch.randn(3, 6, dtype=torch.float64)).sum()
    with pytest.raises(ValueError, match=r"the shifted costs c \+ lam \* dL/dy must be "
                                         r"(below 1e\+15 in magnitude|finite).*got.*lower lam"):
        loss.backward()


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_estimator_takes_an_empty_batch(name):
    # forward and backward of 0 instances: a (0, 5) output and a (0, 5) gradient
    layer = cl.ComboLayer(cl.problems.TopK(5, 2), method=name, projection="none").train()
    w = torch.zeros(0, 5, dtype=torch.float64, requires_grad=True)
    y = layer(w, target=torch.zeros(0, 5, dtype=torch.float64))
    y.sum().backward()
    assert y.shape == (0, 5) and w.grad.shape == (0, 5)


@pytest.mark.parametrize("name", row_gradient_methods())
def test_every_row_gradient_estimator_takes_an_empty_batch_with_rows(name):
    spec = cl.ILP(shape=[3], num_aux=1,
                  constraints=[cl.Constraint(coefs=[1, 1, 1, 1], sense="==", rhs=2)])
    layer = cl.ComboLayer(spec, method=name, projection="none").train()
    w = torch.zeros(0, 3, dtype=torch.float64, requires_grad=True)
    A = torch.zeros(0, 2, 4, dtype=torch.float64, requires_grad=True)
    b = torch.ones(0, 2, dtype=torch.float64, requires_grad=True)
    layer(w, A=A, b=b).sum().backward()
    assert (w.grad.shape, A.grad.shape, b.grad.shape) == ((0, 3), (0, 2, 4), (0, 2))


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_estimators_training_aux_go_with_its_output(name):
    # y + aux sum to 2 on every solution, so on every average or mix of them
    spec = cl.ILP(shape=[3], num_aux=1,
                  constraints=[cl.Constraint(coefs=[1, 1, 1, 1], sense="==", rhs=2)])
    layer = cl.ComboLayer(spec, method=name, projection="none", noise=0.5,
                          generator=torch.Generator().manual_seed(0)).train()
    w = torch.randn(2, 2, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    target = torch.tensor([1.0, 1, 0], dtype=torch.float64).expand(2, 2, 3)  # Margin's
    y, aux = layer(w, target, return_aux=True)
    assert aux.shape == (2, 2, 1)
    # to the relaxations' conic solver's accuracy; a wrong mix is off by tenths
    torch.testing.assert_close(aux[..., 0], 2 - y.sum(-1), rtol=0, atol=1e-5)


def test_score_function_samples_the_costs_without_a_gradient_too():
    """A sample under torch.no_grad() (layer.sample at test time) is still a sample: the
    costs were perturbed only when they required a gradient."""
    def layer():
        method = cl.ScoreFunction(sigma=1.0, num_samples=64,
                                  generator=torch.Generator().manual_seed(0))
        return cl.ComboLayer(cl.problems.TopK(n=4, k=2), method=method, projection="none")

    w = torch.tensor([1.0, 0.9, 0.8, 0.0])
    with_grad = layer()(w.clone().requires_grad_())
    with torch.no_grad():
        without = layer()(w)
        sampled = layer().eval().sample(w)
    torch.testing.assert_close(without, with_grad.detach())
    torch.testing.assert_close(sampled, with_grad.detach())
    assert not torch.equal(without, cl.make_solver(cl.problems.TopK(n=4, k=2)).solve(w))


def test_margin_around_a_named_estimator_keeps_one_inner_state():
    """Margin built its eager solve on a second copy of a named inner estimator, so a
    stateful one (AIMLE adapts its step) kept two states: eager and compiled diverged."""
    margin = cl.Margin(alpha=0.1, method="aimle")
    layer = cl.ComboLayer(cl.problems.TopK(n=6, k=2), method=margin, projection="none")
    alpha = margin._inner.alpha
    w = torch.randn(4, 6, requires_grad=True, generator=torch.Generator().manual_seed(0))
    for _ in range(3):
        (layer(w, target=torch.zeros(4, 6)) * torch.randn(4, 6)).sum().backward()
    assert margin._inner.alpha != alpha  # the adaptation reached the one inner estimator


SAMPLING = ["perturbed", "imle", "aimle", "score_function", "rfwo",
            {"name": "margin", "method": "perturbed"}]


@pytest.mark.parametrize("method", SAMPLING, ids=str)
def test_a_backward_through_a_sampling_estimator_in_eval_mode_raises(method):
    """In eval mode their output is the exact solution with no gradient path: a model
    trained with the layer in eval mode (BatchNorm frozen by model.eval()) would drop
    the layer's share of the gradient silently."""
    layer = cl.ComboLayer(cl.problems.TopK(5, 2), method=method).eval()
    w = torch.randn(3, 5, requires_grad=True)
    loss = (layer(w) * torch.randn(3, 5)).sum() + w.square().sum()
    with pytest.raises(cl.ComboLayerError, match="gives no gradient in eval mode.*layer.train"):
        loss.backward()
    with torch.no_grad():  # evaluating needs no gradient, and records nothing
        assert not layer(w).requires_grad
    layer.train()
    target = torch.tensor([[1.0, 1, 0, 0, 0]]).expand(3, 5)  # Margin's; the others ignore it
    (layer(w, target=target) * torch.randn(3, 5)).sum().backward()
    assert w.grad is not None


def test_a_compiled_sampling_estimator_in_eval_mode_raises_as_eager_mode_does():
    layer = cl.ComboLayer(cl.problems.TopK(5, 2), method="perturbed").eval()
    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
    w = torch.randn(3, 5, requires_grad=True)
    with pytest.raises(cl.ComboLayerError, match="Perturbed gives no gradient in eval mode"):
        compiled(w).sum().backward()


@pytest.mark.parametrize("make", [
    lambda: cl.Perturbed(sigma=math.inf), lambda: cl.ScoreFunction(sigma=math.inf),
    lambda: cl.RegularizedFrankWolfe(lam=math.inf), lambda: cl.IMLE(tau=math.inf),
    lambda: cl.Margin(alpha=math.inf), lambda: cl.AIMLE(step=math.inf),
    lambda: cl.AIMLE(target=math.nan), lambda: cl.CombOptNet(tau=math.inf),
    lambda: cl.Blackbox(lam=math.inf),
], ids=["perturbed", "score", "rfwo", "imle", "margin", "aimle-step", "aimle-target",
        "comboptnet", "blackbox"])
def test_infinite_or_nan_hyperparameters_are_refused(make):
    with pytest.raises(cl.ComboLayerError, match="finite"):
        make()


@pytest.mark.parametrize("make", [cl.Perturbed, cl.IMLE, cl.ScoreFunction])
def test_numpy_integers_are_sample_counts(make):
    assert make(num_samples=np.int64(4)).num_samples == 4
    with pytest.raises(cl.ComboLayerError, match="num_samples must be an int >= 1"):
        make(num_samples=np.float64(4.0))
