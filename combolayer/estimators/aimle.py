"""Adaptive I-MLE (Minervini et al., AAAI 2023): I-MLE whose step follows gradient sparsity."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from pydantic import Field, PrivateAttr

from .base import Estimator, Positive, SampleCount, whole_costs
from .blackbox import interpolation
from .imle import IMLE

__all__ = ["AIMLE"]

#: Below this an entry of the estimated gradient counts as zero (PyEPO's ``_EPS``).
ZERO = 1e-8


def whole_cost_norm(solver, costs: torch.Tensor) -> float:
    """``||.||`` over the batch of the costs the solver minimises, on all its variables
    (`whole_costs`: the costs plus the spec's known cost and each instance's own);
    ``||costs||`` without one."""
    if solver.known is None and getattr(solver, "instance_known", None) is None:
        return float(torch.linalg.vector_norm(costs))
    return float(torch.linalg.vector_norm(whole_costs(solver, costs)))


class AIMLE(Estimator):
    """Adaptive implicit MLE: `combolayer.IMLE` with a step chosen per backward.

    The forward pass is IMLE's (perturb-and-MAP samples ``y(c + eps_s)``, the
    same noise options, the exact ``y(c)`` in eval mode). The backward pass is
    IMLE's interpolation with the step

        lam = alpha * ||c|| / ||dL/dy||      (norms over the whole batch)

    so the target ``c + lam dL/dy`` moves by a fixed fraction ``alpha`` of the
    cost's norm whatever the loss's scale. ``c`` is the whole cost the solver
    minimises: with a known cost (`combolayer.ILP.known_cost`, in min space ``k``),
    each instance's ``(c_y + k_y, k_aux)`` over all variables (`whole_cost_norm`),
    so the same objective split differently between prediction and known cost
    takes the same step and trains the same (PyEPO's AI-MLE has no known cost;
    without one this is its step). Then
    ``dL/dc = 1/S sum_s (y(c + lam dL/dy + eps_s) - y(c + eps_s)) / lam``
    (zero when ``dL/dy = 0``). After each backward ``alpha`` adapts to the
    gradient's sparsity: with ``nnz`` the fraction of entries of ``dL/dc``
    above 1e-8 in magnitude, ``avg = momentum * avg + (1 - momentum) * nnz``
    (``avg`` starts at 1), then ``alpha += step`` when ``avg < target`` and
    ``alpha = max(0, alpha - step)`` otherwise. The defaults are PyEPO's
    ``adaptiveImplicitMLE``. The adaptive state lives in the estimator, so a
    layer's backward changes it (see `alpha`); build a new one to start afresh.

    Args:
        num_samples: ``S``, the perturbed samples per instance.
        noise: as for `combolayer.IMLE`: ``"sog"``, ``"gumbel"``, ``"gaussian"`` or
            an object with ``sample(shape, generator=None)``.
        tau: the noise temperature.
        k: Sum-of-Gamma's ``k`` when the problem has none (as for IMLE).
        generator: the ``torch.Generator`` the noise comes from.
        initial_alpha: ``alpha`` before the first backward (1, PyEPO's).
        step: how much ``alpha`` moves per backward (1e-3).
        target: the gradient density ``avg`` is steered to (1: every entry non-zero).
        momentum: the running average's momentum (0.9).
        two_sides: take PyEPO's central difference
            ``1/S sum_s (y(c + lam dL/dy + eps_s) - y(c - lam dL/dy + eps_s)) / (2 lam)``,
            both shifts in one batch call.

    Examples:
        >>> import torch, combolayer as cl
        >>> layer = cl.ComboLayer(cl.problems.TopK(n=4, k=2), method=cl.AIMLE())
        >>> w = torch.tensor([3.0, 1.0, 2.0, 5.0], requires_grad=True)
        >>> (layer(w) * torch.tensor([1.0, -1.0, 0.0, 0.0])).sum().backward()
        >>> layer.method.alpha
        1.001

    Reference: Minervini, Franceschi, Niepert, "Adaptive Perturbation-Based
    Gradient Estimation for Discrete Latent Variable Models", AAAI 2023.
    """

    name: ClassVar[str] = "aimle"
    compiles_whole: ClassVar[bool] = True

    num_samples: SampleCount = 1
    noise: Any = "sog"
    tau: Positive = 1.0
    k: float | None = None
    generator: torch.Generator | None = None
    initial_alpha: float = Field(default=1.0, ge=0)
    step: float = Field(default=1e-3, ge=0)
    target: float = Field(default=1.0, ge=0)
    momentum: float = Field(default=0.9, ge=0, lt=1)
    two_sides: bool = False
    # two floats, not a dict: a shallow copy (copy.copy, model_copy) adapts on its own
    _alpha: float = PrivateAttr()
    _average: float = PrivateAttr()
    _imle: IMLE = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        self._imle = IMLE(num_samples=self.num_samples, noise=self.noise, tau=self.tau,
                          k=self.k, generator=self.generator)
        self._alpha, self._average = self.initial_alpha, 1.0

    @property
    def alpha(self) -> float:
        """The current step magnitude ``alpha``."""
        return self._alpha

    @property
    def sparsity(self) -> float:
        """The running average of the fraction of non-zero gradient entries."""
        return self._average

    def forward(self, solver, costs, *, target, training):
        return self._imle.forward(solver, costs, target=target, training=training)

    def saved_like(self, solver, costs, training):
        return self._imle.saved_like(solver, costs, training)

    def backward(self, solver, grad, costs, eps, samples):
        grad_norm = float(torch.linalg.vector_norm(grad))
        if grad_norm > 0:
            lam = self.alpha * whole_cost_norm(solver, costs) / grad_norm
        else:
            lam = 0.0
        if lam > 0 and self.two_sides:
            step = lam * grad
            shifted = solver.solve_min(torch.stack([costs + step + eps, costs - step + eps]))
            estimate = (shifted[0] - shifted[1]).mean(0) / (2.0 * lam)
        elif lam > 0:
            estimate = interpolation(solver, lam, grad, costs, eps, samples)
        else:
            estimate = torch.zeros_like(costs)
        if estimate.numel():  # an empty batch has no fraction: nothing to adapt to
            self._adapt(float((estimate.abs() > ZERO).to(torch.float64).mean()))
        return estimate

    def _adapt(self, nonzero: float) -> None:
        self._average = self.momentum * self._average + (1.0 - self.momentum) * nonzero
        if self._average < self.target:
            self._alpha += self.step
        else:
            self._alpha = max(0.0, self._alpha - self.step)
