"""The score-function estimator with Gaussian perturbations of any of (w, A, b).

For parameters ``theta`` (the costs, and per-call rows ``A``, ``b`` where asked)
and Gaussian ``eps``, the smoothed solution ``y_sigma(theta) = E[y(theta +
sigma eps)]`` has the gradient (Stein's identity, the score of the Gaussian)

    d/dtheta E[f(y(theta + sigma eps))] = E[f(y(theta + sigma eps)) eps] / sigma,

for any ``f``: no derivative of the solver is needed, only solves at perturbed
inputs. The layer returns the sample mean, so ``f = <dL/dy, .>`` is the
linearisation of any downstream loss at it, and a baseline ``f`` of the other
samples (leave-one-out) removes most of the variance without bias.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import field_validator
from torch import Tensor

from ..backends.solver import inner
from ..errors import InfeasibleError, InputError
from .base import Estimator, Positive, SampleCount

__all__ = ["ScoreFunction"]

Part = Literal["w", "A", "b"]


class ScoreFunction(Estimator):
    """Gaussian score-function (REINFORCE) gradients for the costs and per-call rows.

    Training forward: ``num_samples`` solutions ``y_s = y(c + sigma eps^c_s; A +
    sigma eps^A_s, b + sigma eps^b_s)``, perturbing only the inputs named in
    ``perturb``, all solved in one batched call; the output is their mean.
    Backward, for each perturbed input ``theta``::

        dL/dtheta = 1 / (sigma S) sum_s (r_s - baseline_s) eps^theta_s,   r_s = <dL/dy, y_s>

    ``w`` not perturbed gets a zero gradient; per-call rows not perturbed that require
    a gradient are refused (they would get zeros). Eval mode: the exact solution.

    Perturbing ``b`` (or ``A``) can empty the feasible set of a sample: with
    ``on_infeasible="flag"`` such a sample is zeros (and counted in the
    layer's warning), which is the value the estimator then averages.

    Args:
        sigma: the Gaussian perturbation's scale.
        num_samples: ``S``, the perturbed solutions per instance.
        perturb: the inputs to perturb, any subset of ``"w"``, ``"A"``, ``"b"``. The
            costs are perturbed in training and in ``layer.sample`` whether or not they
            need a gradient (a sample under ``torch.no_grad()`` is still a sample); rows
            that are not given are not perturbed, nor rows that need no gradient (rows
            given as data stay exact).
        baseline: ``"leave_one_out"`` (the mean of the other samples' ``r``; 0 when
            ``S = 1``) or ``"none"``.
        generator: the ``torch.Generator`` the draws come from.

    Examples:
        >>> import torch, combolayer as cl
        >>> spec = cl.ILP(shape=[2], integrality="binary")
        >>> layer = cl.ComboLayer(spec, projection="none", method=cl.ScoreFunction(
        ...     sigma=0.3, num_samples=64, perturb=("b",),
        ...     generator=torch.Generator().manual_seed(0)))
        >>> b = torch.tensor([1.4], requires_grad=True)
        >>> y = layer(torch.tensor([-1.0, -2.0]), A=torch.tensor([[1.0, 1.0]]), b=b)
        >>> y.sum().backward()
        >>> bool(b.grad > 0)  # more capacity, more items
        True

    Reference: Williams, "Simple Statistical Gradient-Following Algorithms for
    Connectionist Reinforcement Learning", Machine Learning 1992 (the score
    function); Gaussian smoothing as in Berthet et al., NeurIPS 2020.
    """

    name: ClassVar[str] = "score_function"
    row_gradients: ClassVar[bool] = True
    compiles_whole: ClassVar[bool] = True

    sigma: Positive = 1.0
    num_samples: SampleCount = 8
    perturb: tuple[Part, ...] = ("w", "A", "b")
    baseline: Literal["leave_one_out", "none"] = "leave_one_out"
    generator: torch.Generator | None = None

    @field_validator("perturb", mode="before")
    @classmethod
    def _check_perturb(cls, value: object) -> tuple:
        parts = (value,) if isinstance(value, str) else tuple(value)
        if not parts or len(set(parts)) != len(parts):
            raise InputError("perturb must name distinct inputs among 'w', 'A', 'b', got "
                             f"{value!r}")
        return parts

    def _noise(self, like: Tensor) -> Tensor:
        generator = self.generator
        device = generator.device if generator is not None else like.device
        z = torch.randn((self.num_samples, *like.shape), generator=generator, device=device,
                        dtype=torch.float64 if like.dtype == torch.float64 else torch.float32)
        return z.to(like)

    def forward(self, solver, costs, *, target, training, A=None, b=None):
        if not training:
            return solver.solve_min(costs), None
        for part, value in (("A", A), ("b", b)):
            if (part not in self.perturb and value is not None and value.requires_grad
                    and torch.is_grad_enabled()):
                raise InputError(
                    f"{part} requires a gradient, but {self} does not perturb it, so it would "
                    f"get zeros: add {part!r} to perturb, or pass {part}.detach() to use it as "
                    "data")
        noise = {}
        for part, value in (("w", costs), ("A", A), ("b", b)):
            # an input is perturbed when named: the costs always (a sample in training or
            # from layer.sample, with or without a gradient), per-call rows when they need
            # a gradient (rows given as data stay as they are)
            if part in self.perturb and value is not None and (part == "w"
                                                                or value.requires_grad):
                noise[part] = self._noise(value)
        A = None if A is None else A.detach()
        b = None if b is None else b.detach()
        c = costs.detach() + self.sigma * noise["w"] if "w" in noise else \
            costs.detach().expand(self.num_samples, *costs.shape)
        if A is None:
            samples = solver.solve_min(c)
        else:
            A_s = A + self.sigma * noise["A"] if "A" in noise else A.expand(self.num_samples,
                                                                              *A.shape)
            b_s = b + self.sigma * noise["b"] if "b" in noise else b.expand(self.num_samples,
                                                                              *b.shape)
            # each sample its own rows (with rows given, the solver is a RowBound)
            try:
                samples = solver.bind_rows(A_s, b_s).solve_min(c)
            except InfeasibleError as error:
                if not {"A", "b"} & noise.keys():
                    raise
                raise InfeasibleError(
                    f"score_function solves {self.num_samples} copies of each instance with "
                    f"{' and '.join(part for part in ('A', 'b') if part in noise)} perturbed "
                    f"(sigma={self.sigma}), and such rows can leave no feasible point where "
                    f"the given ones have one: {error} (a flagged sample counts as zeros in "
                    "the average; a smaller sigma keeps more samples feasible)") from error
        empty = costs.new_zeros(0)
        return samples.mean(0), (samples, noise.get("w", empty), noise.get("A", empty),
                                 noise.get("b", empty))

    def output_aux(self, solves: list[Tensor], count: int) -> Tensor:
        """The mean of the samples' auxiliaries, as the output is their solutions' mean:
        the training solve is sample first, ``(S, *batch)`` (eval mode's is one sample)."""
        aux = solves[0]
        if aux.shape[0] % count:
            raise RuntimeError(f"{self} solved {aux.shape[0]} instances for a batch of "
                               f"{count}: cannot tell which auxiliaries go with the output")
        return aux.reshape(-1, count, aux.shape[-1]).mean(0)

    def saved_like(self, solver, costs, training, A=None, b=None):
        if not training:
            return None
        samples = costs.new_empty((self.num_samples, *costs.shape))
        empty = costs.new_empty(0)

        def noise_like(part: str, value: Tensor | None) -> Tensor:
            # as forward draws it: for a named input, the rows only when they need a gradient
            drawn = part in self.perturb and value is not None and (part == "w"
                                                                    or value.requires_grad)
            return value.new_empty((self.num_samples, *value.shape)) if drawn else empty

        return samples, noise_like("w", costs), noise_like("A", A), noise_like("b", b)

    def backward(self, solver, grad, costs, A, b, samples, z_w, z_A, z_b):
        reward = inner(samples, grad, len(solver.cost_shape))  # (S, *batch)
        S = self.num_samples
        if self.baseline == "leave_one_out" and S > 1:
            reward = (reward - reward.mean(0)) * (S / (S - 1))

        def estimate(z: Tensor, like: Tensor | None) -> Tensor | None:
            if like is None:
                return None
            if z.numel() == 0:
                return torch.zeros_like(like)
            weight = reward.reshape(reward.shape + (1,) * (z.dim() - reward.dim()))
            return (weight * z).mean(0) / self.sigma

        return estimate(z_w, costs), estimate(z_A, A), estimate(z_b, b)
