"""AI-MLE: IMLE's interpolation with lam = alpha ||c|| / ||dL/dy||, alpha adapted; vs PyEPO."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from pyepo_kit import SPEC_MAX, SPEC_MIN, brute_min, pyepo_shortest_path, sign_of
from testkit import FixedNoise

import combolayer as cl


@pytest.mark.parametrize("spec", [SPEC_MIN, SPEC_MAX], ids=["min", "max"])
def test_aimle_matches_its_formula_and_adapts(spec):
    gen = torch.Generator().manual_seed(5)
    samples, batch, tau = 3, 4, 0.5
    z = torch.randn(samples, batch, 4, generator=gen, dtype=torch.float64)
    method = cl.AIMLE(num_samples=samples, noise=FixedNoise(z), tau=tau)
    layer = cl.ComboLayer(spec, method=method, projection="none")
    sign = sign_of(spec)
    alpha = 1.0
    average = 1.0
    for _ in range(3):
        w = torch.randn(batch, 4, generator=gen, dtype=torch.float64, requires_grad=True)
        g = torch.randn(batch, 4, generator=gen, dtype=torch.float64)
        y = layer(w)
        (y * g).sum().backward()
        c = sign * w.detach()
        eps = -tau * z
        ys = brute_min(c + eps)
        assert torch.equal(y.detach(), ys.mean(0))
        # the layer's backward sees dL/dy = g for the caller's y: dL/dc = sign-free g here
        lam = alpha * c.norm() / g.norm()
        grad_c = (brute_min(c + lam * g + eps) - ys).mean(0) / lam
        torch.testing.assert_close(w.grad, sign * grad_c)
        average = 0.9 * average + 0.1 * float((grad_c.abs() > 1e-8).double().mean())
        alpha = alpha + 1e-3 if average < 1.0 else max(0.0, alpha - 1e-3)
        assert method.alpha == pytest.approx(alpha)
        assert method.sparsity == pytest.approx(average)


def test_aimle_two_sided_formula():
    gen = torch.Generator().manual_seed(9)
    z = torch.randn(2, 3, 4, generator=gen, dtype=torch.float64)
    layer = cl.ComboLayer(SPEC_MIN, projection="none",
                          method=cl.AIMLE(num_samples=2, noise=FixedNoise(z), two_sides=True))
    w = torch.randn(3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    g = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    (layer(w) * g).sum().backward()
    lam = w.detach().norm() / g.norm()
    c, eps = w.detach(), -z
    expected = (brute_min(c + lam * g + eps) - brute_min(c - lam * g + eps)).mean(0) / (2 * lam)
    torch.testing.assert_close(w.grad, expected)


def test_aimle_alpha_shrinks_when_the_gradient_is_denser_than_the_target():
    method = cl.AIMLE(target=0.0, initial_alpha=0.0015, step=1e-3)
    layer = cl.ComboLayer(SPEC_MIN, method=method, projection="none")
    for expected in (0.0005, 0.0):
        w = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
        layer(w).sum().backward()
        assert method.alpha == pytest.approx(expected)
    # a zero incoming gradient gives a zero estimate (lam would be infinite)
    w = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    (layer(w) * 0).sum().backward()
    assert torch.equal(w.grad, torch.zeros_like(w))
    assert cl.ComboLayer(SPEC_MIN, method="aimle").method.alpha == 1.0
    with pytest.raises(ValueError, match="momentum"):
        cl.AIMLE(momentum=1.0)


class _Fixed:
    """A PyEPO noise distribution that returns given draws."""

    def __init__(self, draws: torch.Tensor) -> None:
        self.draws = draws

    def sample(self, size, device=None, dtype=None):
        assert tuple(size) == tuple(self.draws.shape)
        return self.draws.clone()


@pytest.mark.parametrize("two_sides", [False, True])
def test_aimle_agrees_with_pyepo(two_sides):
    model, spec = pyepo_shortest_path()
    from pyepo.func import AIMLE as PyepoAIMLE

    gen = torch.Generator().manual_seed(1)
    batch, samples = 3, 2
    draws = torch.randn(batch, samples, 40, generator=gen, dtype=torch.float64)
    theirs = PyepoAIMLE(model, n_samples=samples, sigma=1.0, distribution=_Fixed(draws),
                        two_sides=two_sides)
    # PyEPO perturbs a min problem by c + sigma * noise; ours by c - tau * z.
    ours = cl.ComboLayer(spec, projection="none", method=cl.AIMLE(
        num_samples=samples, noise=FixedNoise(-draws.transpose(0, 1).contiguous()),
        two_sides=two_sides))
    for _ in range(3):
        cost = torch.rand(batch, 40, generator=gen, dtype=torch.float64)
        g = torch.randn(batch, 40, generator=gen, dtype=torch.float64)
        a, b = cost.clone().requires_grad_(), cost.clone().requires_grad_()
        their_y, our_y = theirs(a), ours(b)
        (their_y * g).sum().backward()
        (our_y * g).sum().backward()
        torch.testing.assert_close(our_y, their_y.detach())
        torch.testing.assert_close(b.grad, a.grad)
        assert ours.method.alpha == pytest.approx(theirs.alpha)


# -- with a known cost: the step counts the whole cost the solver minimises ------------


def _split(sense: str, on_outputs: list[float]) -> cl.ILP:
    """Pick two of four (y0 + y1 <= 1, an auxiliary that excludes y3), with a known cost
    ``on_outputs`` on the outputs and -1.5 on the auxiliary."""
    return cl.ILP(shape=[4], num_aux=1, sense=sense, known_cost=[*on_outputs, -1.5],
                  constraints=[cl.Constraint(coefs={0: 1, 1: 1}, sense="<=", rhs=1),
                               cl.Constraint(coefs={3: 1, 4: 1}, sense="<=", rhs=1),
                               cl.Constraint(coefs=[1, 1, 1, 1, 0], sense="==", rhs=2)])


@pytest.mark.parametrize("two_sides", [False, True], ids=["one side", "two sides"])
@pytest.mark.parametrize("sense", ["min", "max"])
def test_aimle_trains_the_same_however_the_objective_is_split(sense, two_sides):
    """<w, y> + <k, x> with k = (k_y, k_aux), and <w + k_y, y> + <(0, k_aux), x>, are one
    objective: the same gradients and the same alpha, step after step (lam reads the
    norm of the whole cost, not of the predicted part alone)."""
    k_y = torch.tensor([2.0, -1.0, 0.0, 0.5], dtype=torch.float64)
    gen = torch.Generator().manual_seed(4)
    z = torch.randn(2, 3, 4, generator=gen, dtype=torch.float64)
    layers = [cl.ComboLayer(_split(sense, on_outputs), projection="none", method=cl.AIMLE(
        num_samples=2, noise=FixedNoise(z), two_sides=two_sides))
        for on_outputs in (k_y.tolist(), [0.0] * 4)]
    for _ in range(3):
        w = torch.randn(3, 4, generator=gen, dtype=torch.float64)
        g = torch.randn(3, 4, generator=gen, dtype=torch.float64)
        grads = []
        for layer, shift in zip(layers, (0.0, k_y), strict=True):
            x = (w + shift).requires_grad_()
            (layer(x) * g).sum().backward()
            grads.append(x.grad)
        torch.testing.assert_close(grads[0], grads[1])
        assert layers[0].method.alpha == layers[1].method.alpha


def test_aimle_step_norm_is_that_of_the_widened_costs():
    """``whole_cost_norm``: the norm of the full-width min-space costs the solver sees
    (`Solver.widen`), the known cost on outputs and auxiliaries counted per instance."""
    from combolayer.estimators.aimle import whole_cost_norm

    for sense in ("min", "max"):
        solver = cl.make_solver(_split(sense, [2.0, -1.0, 0.0, 0.5]), "highs")
        costs = torch.randn(3, 4, dtype=torch.float64)
        expected = float(torch.linalg.vector_norm(solver.widen(costs)))
        assert whole_cost_norm(solver, costs) == pytest.approx(expected, rel=1e-12)
        assert whole_cost_norm(solver, costs) != pytest.approx(float(costs.norm()))
    plain = cl.make_solver(SPEC_MIN, "highs")
    costs = torch.randn(3, 4, dtype=torch.float64)
    assert whole_cost_norm(plain, costs) == float(costs.norm())


def test_an_empty_batch_leaves_the_adaptation_as_it_was():
    layer = cl.ComboLayer(cl.problems.TopK(6, 2), method="aimle")
    layer(torch.randn(0, 6, requires_grad=True)).sum().backward()
    assert (layer.method.alpha, layer.method.sparsity) == (1.0, 1.0)  # was NaN, then alpha fell
    w = torch.randn(4, 6, requires_grad=True)
    (layer(w) * torch.randn(4, 6)).sum().backward()
    assert math.isfinite(layer.method.sparsity) and layer.method.alpha > 0


@pytest.mark.parametrize("copy_of", [copy.copy, lambda method: method.model_copy()],
                         ids=["copy", "model_copy"])
def test_a_shallow_copy_adapts_on_its_own(copy_of):
    original = cl.AIMLE()
    clone = copy_of(original)
    layer = cl.ComboLayer(cl.problems.TopK(6, 2), method=clone)
    w = torch.randn(4, 6, requires_grad=True)
    (layer(w) * torch.randn(4, 6)).sum().backward()
    assert clone.alpha != 1.0 and original.alpha == 1.0
