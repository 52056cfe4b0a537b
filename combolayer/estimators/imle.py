"""Implicit MLE (Niepert et al., NeurIPS 2021): perturb-and-MAP samples, Blackbox's backward."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from pydantic import model_validator

from ..transforms.noise import DEFAULT_SOG_K, NOISES, SumOfGamma, make_noise
from .base import Estimator, Positive, SampleCount, solve_samples
from .blackbox import interpolation

__all__ = ["IMLE"]


class IMLE(Estimator):
    """Implicit maximum-likelihood estimation with perturb-and-MAP sampling.

    With ``eps_s = -tau * Z_s`` a min-space noise sample (``Z`` Sum-of-Gamma by
    default, so a max problem sees ``w + tau Z`` as in the paper), training
    forward returns the mean of ``y(c + eps_s)``; the backward pass uses the
    same samples: ``dL/dc = 1/S sum_s (y(c + lam dL/dy + eps_s) - y(c + eps_s)) / lam``,
    Blackbox's target distribution, divided by lam as in the authors' fix
    (github.com/uclnlp/torch-imle/issues/3). Both solves of a step are one batch call each.
    Eval mode returns the exact ``y(c)``.

    Args:
        lam: the interpolation step ``lam``.
        num_samples: ``S``, the perturbed samples per instance.
        noise: ``"sog"`` (SoG(k, tau, s=10), with ``k`` the problem's ``k`` when it
            has one, e.g. TopK), ``"gumbel"``, ``"gaussian"`` or an object with
            ``sample(shape, generator=None)``.
        tau: the noise temperature.
        k: Sum-of-Gamma's ``k`` for a problem without one (None: `DEFAULT_SOG_K`).
        generator: the ``torch.Generator`` the noise comes from.

    Examples:
        >>> import torch, combolayer as cl
        >>> layer = cl.ComboLayer(cl.problems.TopK(n=4, k=2), method=cl.IMLE(lam=10.0))
        >>> layer(torch.tensor([3.0, 1.0, 2.0, 5.0])).sum().item()  # a 2-hot sample
        2.0

    Reference: Niepert, Minervini, Franceschi, "Implicit MLE: Backpropagating
    Through Discrete Exponential Family Distributions", NeurIPS 2021.
    """

    name: ClassVar[str] = "imle"
    compiles_whole: ClassVar[bool] = True

    lam: Positive = 10.0
    num_samples: SampleCount = 1
    noise: Any = "sog"
    tau: Positive = 1.0
    k: float | None = None
    generator: torch.Generator | None = None

    @model_validator(mode="after")
    def _check_noise(self) -> IMLE:
        self._noise(None)
        return self

    def _noise(self, spec: Any) -> Any:
        k = self.k if self.k is not None else getattr(spec, "k", None) or DEFAULT_SOG_K
        allowed = {"sog": lambda: SumOfGamma(k=k), **NOISES}
        return make_noise(self.noise, allowed, "IMLE", ("sample",))

    def forward(self, solver, costs, *, target, training):
        if not training:
            return solver.solve_min(costs), None
        z = self._noise(solver.spec).sample((self.num_samples, *costs.shape),
                                            generator=self.generator)
        eps = -self.tau * z.to(costs)
        samples = solve_samples(solver, costs.detach() + eps)
        return samples.mean(0), (eps, samples)

    def saved_like(self, solver, costs, training):
        if not training:
            return None
        samples = costs.new_empty((self.num_samples, *costs.shape))
        return samples, samples

    def backward(self, solver, grad, costs, eps, samples):
        return interpolation(solver, self.lam, grad, costs, eps, samples)
