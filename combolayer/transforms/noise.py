"""Noise distributions: any object with ``sample(shape, generator=None) -> Tensor``.

Draws are float64 and come from the given ``torch.Generator`` (or torch's
global one), on that generator's device (the CPU without one), so a seeded
generator reproduces them and a CUDA generator works. The perturbation-based
estimators also need ``grad_nu(z)``, the gradient of the negative log-density.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from ..errors import InputError


def generator_device(generator: torch.Generator | None) -> torch.device:
    """Where draws from ``generator`` are made: its own device (torch refuses a
    generator of another device), the CPU for torch's global one."""
    return generator.device if generator is not None else torch.device("cpu")


@dataclass(frozen=True)
class SignNoise:
    """xi ~ Uniform({-alpha/2, +alpha/2}^N): the paper's margin-inducing noise (sec. 3.5)."""

    alpha: float

    def sample(self, shape: torch.Size | tuple[int, ...],
               generator: torch.Generator | None = None) -> Tensor:
        signs = torch.randint(0, 2, tuple(shape), generator=generator, dtype=torch.float64,
                              device=generator_device(generator))
        return (2.0 * signs - 1.0) * (self.alpha / 2.0)


@dataclass(frozen=True)
class GaussianNoise:
    """Z ~ N(0, I); its log-density gradient term is ``grad_nu(z) = z``."""

    def sample(self, shape: tuple[int, ...], generator: torch.Generator | None = None) -> Tensor:
        return torch.randn(tuple(shape), generator=generator, dtype=torch.float64,
                           device=generator_device(generator))

    def grad_nu(self, z: Tensor) -> Tensor:
        return z


@dataclass(frozen=True)
class GumbelNoise:
    """Z ~ Gumbel(0, 1) entrywise: ``nu(z) = z + exp(-z)``, ``grad_nu(z) = 1 - exp(-z)``."""

    def sample(self, shape: tuple[int, ...], generator: torch.Generator | None = None) -> Tensor:
        u = torch.rand(tuple(shape), generator=generator, dtype=torch.float64,
                       device=generator_device(generator))
        return -torch.log(-torch.log(u.clamp_min(torch.finfo(torch.float64).tiny)))

    def grad_nu(self, z: Tensor) -> Tensor:
        return 1.0 - torch.exp(-z)


@dataclass(frozen=True)
class SumOfGamma:
    """Sum-of-Gamma noise SoG(k, tau, s) = tau/k (sum_{i=1..s} Gamma(1/k, k/i) - log s).

    Gamma(shape 1/k, scale k/i). The sum of k independent samples is
    approximately Gumbel(0, tau) (exactly in the limit s -> inf), so perturbing
    a k-subset problem with it samples like the Gumbel-max trick; ``tau`` is the
    temperature (the paper's DVAE uses SoG(10, 10, 10)). Drawn in torch from
    ``generator`` (or torch's global one), on the generator's device (or
    ``device``), in float64: all ``s * N`` Gamma variates at once by
    Marsaglia-Tsang rejection, boosted for shape 1/k < 1.

    Args:
        k: the number of summed samples that make a Gumbel (a k-subset's ``k``).
        s: the number of Gamma terms in the sum.
        tau: the temperature.

    Reference: Niepert, Minervini, Franceschi, "Implicit MLE: Backpropagating
    Through Discrete Exponential Family Distributions", NeurIPS 2021.
    """

    k: float = 5.0
    s: int = 10
    tau: float = 1.0

    #: Gamma variates drawn per piece (see `_standard_gamma`).
    CHUNK: ClassVar[int] = 65536

    def __post_init__(self) -> None:
        if not self.k > 0 or self.s < 1 or not self.tau > 0:
            raise InputError(f"SumOfGamma needs k > 0, s >= 1 and tau > 0, got k={self.k}, "
                             f"s={self.s}, tau={self.tau}")

    def sample(self, shape: tuple[int, ...], generator: torch.Generator | None = None,
               device: torch.device | str | None = None) -> Tensor:
        shape = tuple(shape)
        if device is None:
            device = generator_device(generator)
        standard = self._standard_gamma(1.0 / self.k, (self.s, math.prod(shape)), generator,
                                        torch.device(device))
        scale = self.k / torch.arange(1, self.s + 1, dtype=torch.float32, device=device)
        total = (scale @ standard).to(torch.float64)
        return ((total - math.log(self.s)) * (self.tau / self.k)).reshape(shape)

    @staticmethod
    def _standard_gamma(a: float, size: tuple[int, ...], generator: torch.Generator | None,
                        device: torch.device) -> Tensor:
        """Gamma(a, 1) variates: Marsaglia & Tsang (2000) at shape a + 1 when a < 1,
        times U^(1/a). Drawn in float32 (torch's float64 ``randn`` is much slower on
        CPU; a variate underflowing to 0 is harmless in a sum); the rejected few
        (about 2%) are redrawn until none is left."""
        options = {"generator": generator, "device": device, "dtype": torch.float32}
        boost = a < 1.0
        d = (a + 1.0 if boost else a) - 1.0 / 3.0
        c = 1.0 / math.sqrt(9.0 * d)

        def attempt(m: int) -> tuple[Tensor, Tensor]:
            x = torch.randn(m, **options)
            v = (x * c).add_(1.0).pow_(3)
            ok = v > 0
            # accept when log U < x^2/2 + d - d v + d log v; in place, few passes over
            # s * N values. (The clamp keeps torch.log off non-positive inputs: slow there.)
            bound = v.clamp_min(1e-30).log_().sub_(v).add_(1.0).mul_(d).addcmul_(x, x, value=0.5)
            ok &= torch.rand(m, **options).log_() < bound
            return v.mul_(d), ok

        n = math.prod(size)
        if n > SumOfGamma.CHUNK:  # in cache-sized pieces: about 25% faster on a CPU
            out = torch.empty(n, device=device, dtype=torch.float32)
            for start in range(0, n, SumOfGamma.CHUNK):
                piece = out[start:start + SumOfGamma.CHUNK]
                piece.copy_(SumOfGamma._standard_gamma(a, (len(piece),), generator, device))
            return out.reshape(size)
        out, ok = attempt(n)
        todo = torch.nonzero(~ok).flatten()
        while len(todo):
            value, ok = attempt(todo.numel())
            out[todo[ok]] = value[ok]
            todo = todo[~ok]
        if boost:
            out.mul_(torch.rand(n, **options).log_().div_(a).exp_())  # U^(1/a), cheaper than pow
        return out.reshape(size)


#: Noise by name, for estimators that need ``grad_nu`` ([`Perturbed`][combolayer.Perturbed]).
NOISES: dict[str, type] = {"gaussian": GaussianNoise, "gumbel": GumbelNoise}

#: The SoG ``k`` used when the problem does not say (PyEPO's default kappa).
DEFAULT_SOG_K = 5


def make_noise(noise: Any, allowed: dict[str, Any], who: str, need: tuple[str, ...]) -> Any:
    """``allowed[noise]()`` for a name, else the object itself once it has the methods ``need``."""
    if isinstance(noise, str):
        if noise not in allowed:
            raise InputError(
                f"{who} noise must be one of {sorted(allowed)} or an object, got {noise!r}"
            )
        return allowed[noise]()
    missing = [name for name in need if not callable(getattr(noise, name, None))]
    if missing:
        raise InputError(f"{who} noise object {noise!r} lacks method(s) {missing}")
    return noise
