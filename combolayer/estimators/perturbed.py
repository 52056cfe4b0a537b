"""The perturbed optimizer (Berthet et al., NeurIPS 2020), the forward of Fenchel-Young losses.

Berthet et al. and Niepert et al. write their layers for a maximiser
argmax <theta, y>. Estimators here only see minimisation costs c, and
argmin <c, y> = argmax <-c, y>, so theta = -c and the perturbed solver input
is c - sigma * Z: for a max problem (c = -w) the solver sees w + sigma * Z,
exactly the papers' argmax <w + sigma Z, y>. This matters for asymmetric
noise: a Gumbel perturbation of a max problem is the Gumbel-max trick.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from pydantic import model_validator
from torch import Tensor

from ..backends.solver import Solver, inner
from ..transforms.noise import NOISES, make_noise
from .base import Estimator, Positive, SampleCount, solve_samples

__all__ = ["Perturbed"]


class Perturbed(Estimator):
    """The perturbed optimizer: ``y_sigma(c) = E[y(c - sigma Z)]`` and its Jacobian.

    Training forward: the mean of ``num_samples`` perturbed solutions
    ``y(c - sigma Z_s)``, all solved in one batch call (samples stacked on a new
    leading dimension). Backward, Berthet et al.'s estimator on theta = -c:
    ``dL/dc = -1/(sigma S) sum_s <dL/dy, y_s> grad_nu(Z_s)`` with
    ``grad_nu(z) = z`` (gaussian) or ``1 - exp(-z)`` (gumbel). The minus sign
    makes a max problem see ``w + sigma Z`` (see the note above this class).

    Eval mode (``layer.eval()``): the exact solution ``y(c)``, one solve, no
    noise, because at test time users want a feasible decision, not a smoothed
    average. In training mode the mean is returned even under ``torch.no_grad``.

    Multiplicative perturbation keeps every cost's sign (and, for Gaussian Z, its
    mean); its factor does not depend on the sense, so a max problem sees
    ``w * exp(sigma Z - sigma^2/2)``. With ``c = exp(l)`` the smoothed map is
    Berthet's in ``l``, and ``dl/dc = 1/c`` gives PyEPO's estimator
    ``dL/dc = 1/(sigma c S) sum_s <dL/dy, y_s> grad_nu(Z_s)``, with ``sigma c``
    kept at least 1e-8 away from 0 (its sign kept), as in PyEPO.

    Args:
        sigma: the perturbation's scale.
        num_samples: ``S``, the perturbed solutions per instance.
        noise: ``"gaussian"``, ``"gumbel"`` or an object with
            ``sample(shape, generator=None)`` and ``grad_nu(z)``.
        generator: the ``torch.Generator`` the draws come from.
        perturbation: ``"additive"`` (default) or ``"multiplicative"`` (PyEPO's
            ``perturbedOptMul``, DPOMul, for costs of a fixed sign, e.g. positive
            edge lengths): ``y_s = y(c * exp(sigma Z_s - sigma^2 / 2))`` entrywise.
        variance_reduction: centre the rewards ``r_s = <dL/dy, y_s>`` on their mean,
            ``r_s -> (r_s - mean r) S / (S - 1)``, a leave-one-out baseline that
            keeps the estimator unbiased; no change at ``S = 1``. PyEPO's default for
            DPO and DPOMul; off here by default.

    Examples:
        >>> import torch, combolayer as cl
        >>> layer = cl.ComboLayer(cl.problems.TopK(n=4, k=2),
        ...                       method=cl.Perturbed(sigma=0.5, num_samples=8))
        >>> y = layer(torch.tensor([3.0, 1.0, 2.0, 5.0]))  # training: a mean of 8 samples
        >>> round(float(y.sum()), 4)
        2.0
        >>> layer.eval()(torch.tensor([3.0, 1.0, 2.0, 5.0])).tolist()  # eval: exact
        [1.0, 0.0, 0.0, 1.0]

    Reference: Berthet, Blondel, Teboul, Cuturi, Vert, Bach, "Learning with
    Differentiable Perturbed Optimizers", NeurIPS 2020.
    """

    name: ClassVar[str] = "perturbed"
    compiles_whole: ClassVar[bool] = True

    sigma: Positive = 1.0
    num_samples: SampleCount = 1
    noise: Any = "gaussian"
    generator: torch.Generator | None = None
    perturbation: Literal["additive", "multiplicative"] = "additive"
    variance_reduction: bool = False

    @model_validator(mode="after")
    def _check_noise(self) -> Perturbed:
        self._noise()
        return self

    def _noise(self) -> Any:
        return make_noise(self.noise, NOISES, "Perturbed", ("sample", "grad_nu"))

    def perturb(self, costs: Tensor, z: Tensor) -> Tensor:
        """The solver inputs for noise ``z``: ``c - sigma Z``, or
        ``c * exp(sigma Z - sigma^2 / 2)`` when ``perturbation="multiplicative"``
        (differentiable in ``costs``, which the Fenchel-Young loss relies on)."""
        if self.perturbation == "multiplicative":
            return costs * torch.exp(self.sigma * z - 0.5 * self.sigma**2)
        return costs - self.sigma * z

    def perturbed_solutions(self, solver: Solver, costs: Tensor) -> tuple[Tensor, Tensor]:
        """``(Z, y(perturb(c, Z)))``, each ``(num_samples, *costs.shape)``, from one solver
        call (`solve_samples`: each instance's samples one after another)."""
        z = self._noise().sample((self.num_samples, *costs.shape),
                                 generator=self.generator).to(costs)
        return z, solve_samples(solver, self.perturb(costs.detach(), z))

    def forward(self, solver, costs, *, target, training):
        if not training:
            return solver.solve_min(costs), None
        z, samples = self.perturbed_solutions(solver, costs)
        return samples.mean(0), (z, samples)

    def saved_like(self, solver, costs, training):
        if not training:
            return None
        samples = costs.new_empty((self.num_samples, *costs.shape))
        return samples, samples

    def backward(self, solver, grad, costs, z, samples):
        weight = inner(samples, grad, len(solver.cost_shape), keepdim=True)
        if self.variance_reduction and self.num_samples > 1:
            weight = (weight - weight.mean(0)) * (self.num_samples / (self.num_samples - 1))
        estimate = (weight * self._noise().grad_nu(z)).mean(0)
        if self.perturbation == "multiplicative":
            scale = self.sigma * costs
            tiny = torch.where(scale >= 0, 1e-8, -1e-8).to(scale)
            return estimate / torch.where(scale.abs() < 1e-8, tiny, scale)
        return -estimate / self.sigma
