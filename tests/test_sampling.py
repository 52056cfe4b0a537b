"""Sampling: Sum-of-Gamma with a temperature, sampling noise before the projection,
and a sampled forward in eval mode (``layer.sample``)."""

import math

import pytest
import scipy.stats
import torch
from testkit import FixedNoise

import combolayer as cl
from combolayer.transforms.projection import project_std

TOPK = cl.problems.TopK(n=6, k=3)


def topk(w, k=3):
    """The k-hot vector of the k largest entries, by sorting: the reference solver."""
    y = torch.zeros_like(w)
    return y.scatter_(-1, w.topk(k, dim=-1).indices, 1.0)


def test_sum_of_gamma_gamma_terms_follow_the_gamma_law():
    """The vectorised Marsaglia-Tsang draws match Gamma(1/k, 1) (Kolmogorov-Smirnov)."""
    for a in (0.1, 0.5, 2.0):
        draws = cl.SumOfGamma._standard_gamma(a, (40_000,), torch.Generator().manual_seed(1),
                                              torch.device("cpu"))
        assert draws.min() >= 0
        assert scipy.stats.kstest(draws.double().numpy(), scipy.stats.gamma(a).cdf).pvalue > 1e-3


def test_sum_of_gamma_temperature_scales_the_same_draws():
    shape = (50, 4, 6)
    base = cl.SumOfGamma(k=3, s=10).sample(shape, generator=torch.Generator().manual_seed(5))
    hot = cl.SumOfGamma(k=3, s=10, tau=10.0).sample(shape,
                                                    generator=torch.Generator().manual_seed(5))
    assert base.shape == shape and base.dtype == torch.float64
    torch.testing.assert_close(hot, 10.0 * base)
    # the sum of k draws is about Gumbel(0, tau): mean tau * Euler's gamma, variance (tau pi)^2/6
    summed = cl.SumOfGamma(k=4, s=100, tau=2.0).sample((4, 20_000)).sum(0)
    assert abs(summed.mean().item() - 2.0 * 0.5772) < 0.06
    assert abs(summed.var().item() - (2.0 * math.pi) ** 2 / 6) < 0.4
    with pytest.raises(ValueError, match="tau > 0"):
        cl.SumOfGamma(k=3, tau=0.0)


def test_sum_of_gamma_is_reproducible_from_its_generator():
    a = cl.SumOfGamma(k=10).sample((100, 20, 20), generator=torch.Generator().manual_seed(7))
    b = cl.SumOfGamma(k=10).sample((100, 20, 20), generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)
    assert a.device == torch.device("cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; none here")
def test_sum_of_gamma_draws_on_the_generators_device():
    gen = torch.Generator(device="cuda").manual_seed(0)
    assert cl.SumOfGamma(k=10).sample((8, 20), generator=gen).device.type == "cuda"


@pytest.mark.parametrize("sense", ["max", "min"])
def test_sample_noise_is_added_before_the_projection(sense):
    """Forward: y(P(w + eps)); Identity backward: the Jacobian of P taken at w + eps."""
    spec = cl.problems.TopK(n=6, k=3, sense=sense)
    w = torch.randn(5, 6, dtype=torch.float64, requires_grad=True)
    eps = 3.0 * torch.randn(5, 6, dtype=torch.float64)
    g = torch.randn(5, 6, dtype=torch.float64)
    layer = cl.ComboLayer(spec, projection="std", sample_noise=FixedNoise(eps))
    y = layer(w)
    (y * g).sum().backward()

    sign = 1.0 if sense == "max" else -1.0
    torch.testing.assert_close(y.detach(), topk(sign * (w.detach() + eps)))
    v = w.detach().clone().requires_grad_()
    (project_std(v + eps) * g).sum().backward()  # J_P(w + eps)^T g, the max-problem identity
    torch.testing.assert_close(w.grad, sign * v.grad)
    # not the margin position: P(w) + eps gives other solutions for this noise scale
    assert not torch.equal(y.detach(), topk(sign * (project_std(w.detach()) + eps)))


def test_eval_forward_is_exact_and_sample_draws_in_any_mode():
    w = torch.randn(4, 6, dtype=torch.float64)
    eps = 5.0 * torch.randn(4, 6, dtype=torch.float64)
    layer = cl.ComboLayer(TOPK, projection="std", sample_noise=FixedNoise(eps)).eval()
    torch.testing.assert_close(layer(w), topk(w))
    torch.testing.assert_close(layer.sample(w), topk(w + eps))
    assert not torch.equal(layer.sample(w), layer(w))
    assert not layer.training  # sample() leaves the mode alone


def test_sample_in_eval_mode_draws_imles_own_noise():
    """I-MLE's eval forward is the plain top-k; layer.sample(theta) perturbs it as in training."""
    tau = 2.0
    z = torch.randn(1, 4, 6, dtype=torch.float64)
    layer = cl.ComboLayer(TOPK, method=cl.IMLE(noise=FixedNoise(z), tau=tau),
                          projection="none").eval()
    w = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(layer(w), topk(w.detach()))
    y = layer.sample(w)
    torch.testing.assert_close(y.detach(), topk(w.detach() + tau * z[0]))
    assert y.grad_fn is not None  # differentiable like forward


def test_margin_noise_stays_training_only_under_sample():
    w = torch.randn(300, 6, dtype=torch.float64)
    layer = cl.ComboLayer(TOPK, projection="std", noise=0.5,
                          generator=torch.Generator().manual_seed(0)).eval()
    torch.testing.assert_close(layer.sample(w), topk(w))  # no sample_noise: exact


def test_sample_noise_must_have_a_sample_method():
    with pytest.raises(ValueError, match="sample_noise must be None or an object with sample"):
        cl.ComboLayer(TOPK, sample_noise=0.3)
