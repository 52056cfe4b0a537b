"""Gradient estimators: how a layer's backward pass treats the solver.

Every estimator sees minimisation costs: the layer folds the objective sense
into the cost once (``costs = sign * P(w)``) and autograd carries the sign back,
so nothing here tests for min or max. ``build(solver)`` runs once, when a layer
is built, and returns the differentiable solve

    solve(costs, *, target, needs_grad, training=True) -> y

where ``needs_grad`` is decided by the layer, outside any autograd.Function,
and ``training`` is the layer's mode (sampling estimators return the exact
solution in eval mode).
The solver is captured by the returned closure, never passed through ``.apply``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .backends.solver import Solver, inner
from .transforms import fast_apply

DifferentiableSolve = Callable[..., Tensor]


class Estimator(Protocol):
    def build(self, solver: Solver) -> DifferentiableSolve: ...


def _negative_identity(solver: Solver) -> type[torch.autograd.Function]:
    """Forward: the solution, solved inside (no copy of it). Backward: the negative
    identity, ``dL/dc = -dL/dy``, one op with nothing saved."""

    class _NegativeIdentity(torch.autograd.Function):
        @staticmethod
        def forward(costs: Tensor) -> Tensor:
            return solver.solve_min(costs)

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
            pass

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Tensor:
            return grad.neg()

    return _NegativeIdentity


@dataclass(frozen=True)
class Identity:
    """Identity with projection: the solver is a negative identity on the backward pass.

    ``dL/dw = -(dP/dw)^T dL/dy`` for min problems (``+`` for max); no extra solver
    call. Combine it with ``projection`` and ``noise`` on :class:`~combolayer.ComboLayer`.

    Reference: Sahoo, Paulus, Vlastelica, Musil, Kuleshov, Martius, "Backpropagation
    through Combinatorial Algorithms: Identity with Projection Works", ICLR 2023.
    """

    def build(self, solver: Solver) -> DifferentiableSolve:
        negative_identity = fast_apply(_negative_identity(solver))
        solve_min = solver.solve_min

        def solve(costs: Tensor, *, target: Tensor | None = None, needs_grad: bool,
                  training: bool = True) -> Tensor:
            return negative_identity(costs) if needs_grad else solve_min(costs)

        return solve


@dataclass(frozen=True)
class Blackbox:
    """Blackbox backpropagation: the gradient of a piecewise-linear interpolation.

    With ``c`` the solver input of one instance, ``L_i`` its own loss,
    ``c' = c + lam * dL_i/dy`` and ``dL_i/dc = (y(c') - y(c)) / lam``; one
    extra batched solver call per backward.

    ``lam`` is per instance, so it means the same at every batch size. The
    backward sees the gradient of the batch loss, which a ``"mean"``
    reduction (the default, ``reduction="mean"``) divides by the batch size
    ``B``: the step is then ``lam * B * dL/dy``. With ``reduction="sum"`` the
    gradient is taken as it comes, which is also what the original code did
    at any reduction. To convert a paper's lambda (original code, mean loss
    at batch size ``B``): ``lam_per_instance = lam_paper / B``.

    Reference: Vlastelica, Paulus, Musil, Martius, Rolinek, "Differentiation of
    Blackbox Combinatorial Solvers", ICLR 2020.
    """

    lam: float = 20.0
    reduction: str = "mean"

    def __post_init__(self) -> None:
        if not self.lam > 0:
            raise ValueError(f"Blackbox lam must be > 0, got {self.lam}")
        if self.reduction not in ("mean", "sum"):
            raise ValueError(
                f"Blackbox reduction must be 'mean' or 'sum' (how the loss reduces over "
                f"the batch), got {self.reduction!r}"
            )

    def build(self, solver: Solver) -> DifferentiableSolve:
        interpolation = _interpolation(solver, self.lam, per_instance=self.reduction == "mean")

        def solve(costs: Tensor, *, target: Tensor | None = None, needs_grad: bool,
                  training: bool = True) -> Tensor:
            solution = solver.solve_min(costs)
            if not needs_grad:
                return solution
            # One unperturbed sample: eps = 0, samples = the solution.
            return interpolation.apply(costs, solution, costs.new_zeros(()), solution[None])

        return solve


def _interpolation(solver: Solver, lam: float,
                  per_instance: bool = False) -> type[torch.autograd.Function]:
    """Blackbox's backward at (perturbed) solver inputs ``c + eps_s``, shared by
    :class:`Blackbox` (``eps = 0``, one sample) and :class:`IMLE`.

    ``apply(costs, output, eps, samples)`` returns ``output``; its backward is
    ``dL/dc = 1/S sum_s (y(c + lam dL/dy + eps_s) - samples_s) / lam``, with all
    S shifted solves in one batched call. ``per_instance`` multiplies ``lam``
    by the number of instances in the batch (see :class:`Blackbox`).
    """

    class _Interpolation(torch.autograd.Function):
        @staticmethod
        def forward(costs: Tensor, output: Tensor, eps: Tensor, samples: Tensor) -> Tensor:
            return output.clone()

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
            costs, _, eps, samples = inputs
            ctx.save_for_backward(costs, eps, samples)

        @staticmethod
        @once_differentiable
        def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
            costs, eps, samples = ctx.saved_tensors
            step = lam * (costs.numel() // solver.num_outputs if per_instance else 1)
            shifted = solver.solve_min(costs + step * grad + eps)
            return (shifted - samples).mean(0) / step, None, None, None

    return _Interpolation


# --- Perturbation-based estimators -------------------------------------------
#
# Berthet et al. and Niepert et al. write their layers for a maximiser
# argmax <theta, y>. Estimators here only see minimisation costs c, and
# argmin <c, y> = argmax <-c, y>, so theta = -c and the perturbed solver input
# is c - sigma * Z: for a max problem (c = -w) the solver sees w + sigma * Z,
# exactly the papers' argmax <w + sigma Z, y>. This matters for asymmetric
# noise: a Gumbel perturbation of a max problem is the Gumbel-max trick.


@dataclass(frozen=True)
class GaussianNoise:
    """Z ~ N(0, I); its log-density gradient term is ``grad_nu(z) = z``."""

    def sample(self, shape: tuple[int, ...], generator: torch.Generator | None = None) -> Tensor:
        return torch.randn(tuple(shape), generator=generator, dtype=torch.float64)

    def grad_nu(self, z: Tensor) -> Tensor:
        return z


@dataclass(frozen=True)
class GumbelNoise:
    """Z ~ Gumbel(0, 1) entrywise: ``nu(z) = z + exp(-z)``, ``grad_nu(z) = 1 - exp(-z)``."""

    def sample(self, shape: tuple[int, ...], generator: torch.Generator | None = None) -> Tensor:
        u = torch.rand(tuple(shape), generator=generator, dtype=torch.float64)
        return -torch.log(-torch.log(u.clamp_min(torch.finfo(torch.float64).tiny)))

    def grad_nu(self, z: Tensor) -> Tensor:
        return 1.0 - torch.exp(-z)


@dataclass(frozen=True)
class SumOfGamma:
    """Sum-of-Gamma noise SoG(k, 1, s) = 1/k (sum_{i=1..s} Gamma(1/k, k/i) - log s).

    Gamma(shape 1/k, scale k/i). The sum of k independent samples is
    approximately Gumbel(0, 1) (exactly in the limit s -> inf), so perturbing a
    k-subset problem with it samples like the Gumbel-max trick. The Gamma draws
    come from numpy (9x faster than ``torch.distributions.Gamma`` at shape 1/k,
    measured), seeded from the torch ``generator`` (or torch's global one), so
    ``torch.manual_seed`` reproduces them. Multiply by tau for SoG(k, tau, s).

    Reference: Niepert, Minervini, Franceschi, "Implicit MLE: Backpropagating
    Through Discrete Exponential Family Distributions", NeurIPS 2021.
    """

    k: float = 5.0
    s: int = 10

    def __post_init__(self) -> None:
        if not self.k > 0 or self.s < 1:
            raise ValueError(f"SumOfGamma needs k > 0 and s >= 1, got k={self.k}, s={self.s}")

    def sample(self, shape: tuple[int, ...], generator: torch.Generator | None = None) -> Tensor:
        shape = tuple(shape)
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        standard = np.random.default_rng(seed).standard_gamma(1.0 / self.k, (self.s, *shape))
        scale = self.k / np.arange(1, self.s + 1)
        total = np.tensordot(scale, standard, axes=1)
        return torch.from_numpy((total - math.log(self.s)) / self.k)


#: Noise by name for :class:`Perturbed` (which needs ``grad_nu``).
NOISES: dict[str, type] = {"gaussian": GaussianNoise, "gumbel": GumbelNoise}

#: The SoG ``k`` used when the problem does not say (PyEPO's default kappa).
DEFAULT_SOG_K = 5


def _make_noise(noise: Any, allowed: dict[str, Any], who: str, need: tuple[str, ...]) -> Any:
    if isinstance(noise, str):
        if noise not in allowed:
            raise ValueError(
                f"{who} noise must be one of {sorted(allowed)} or an object, got {noise!r}"
            )
        return allowed[noise]()
    missing = [name for name in need if not callable(getattr(noise, name, None))]
    if missing:
        raise ValueError(f"{who} noise object {noise!r} lacks method(s) {missing}")
    return noise


@dataclass(frozen=True)
class Perturbed:
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

    ``noise`` is ``"gaussian"``, ``"gumbel"`` or an object with
    ``sample(shape, generator=None)`` and ``grad_nu(z)``; ``generator`` seeds
    the draws.

    Reference: Berthet, Blondel, Teboul, Cuturi, Vert, Bach, "Learning with
    Differentiable Perturbed Optimizers", NeurIPS 2020.
    """

    sigma: float = 1.0
    num_samples: int = 1
    noise: Any = "gaussian"
    generator: torch.Generator | None = None

    def __post_init__(self) -> None:
        if not self.sigma > 0:
            raise ValueError(f"Perturbed sigma must be > 0, got {self.sigma}")
        if not (isinstance(self.num_samples, int) and self.num_samples >= 1):
            raise ValueError(f"Perturbed num_samples must be an int >= 1, got {self.num_samples}")
        _make_noise(self.noise, NOISES, "Perturbed", ("sample", "grad_nu"))

    def perturbed_solutions(self, solver: Solver, costs: Tensor) -> tuple[Tensor, Tensor]:
        """``(Z, y(c - sigma Z))``, each ``(num_samples, *costs.shape)``, from one solver call."""
        noise = _make_noise(self.noise, NOISES, "Perturbed", ("sample", "grad_nu"))
        z = noise.sample((self.num_samples, *costs.shape), generator=self.generator).to(costs)
        return z, solver.solve_min(costs.detach() - self.sigma * z)

    def build(self, solver: Solver) -> DifferentiableSolve:
        sigma = self.sigma
        noise = _make_noise(self.noise, NOISES, "Perturbed", ("sample", "grad_nu"))
        num_cost_dims = len(solver.cost_shape)

        class _Perturbed(torch.autograd.Function):
            @staticmethod
            def forward(costs: Tensor, mean: Tensor, z: Tensor, samples: Tensor) -> Tensor:
                return mean.clone()

            @staticmethod
            def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
                _, _, z, samples = inputs
                ctx.save_for_backward(z, samples)

            @staticmethod
            @once_differentiable
            def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
                z, samples = ctx.saved_tensors
                weight = inner(samples, grad, num_cost_dims, keepdim=True)
                return -(weight * noise.grad_nu(z)).mean(0) / sigma, None, None, None

        def solve(costs: Tensor, *, target: Tensor | None = None, needs_grad: bool,
                  training: bool = True) -> Tensor:
            if not training:
                return solver.solve_min(costs)
            z, samples = self.perturbed_solutions(solver, costs)
            mean = samples.mean(0)
            return _Perturbed.apply(costs, mean, z, samples) if needs_grad else mean

        return solve


@dataclass(frozen=True)
class IMLE:
    """Implicit maximum-likelihood estimation with perturb-and-MAP sampling.

    With ``eps_s = -tau * Z_s`` a min-space noise sample (``Z`` Sum-of-Gamma by
    default, so a max problem sees ``w + tau Z`` as in the paper), training
    forward returns the mean of ``y(c + eps_s)``; the backward pass uses the
    same samples: ``dL/dc = 1/S sum_s (y(c + lam dL/dy + eps_s) - y(c + eps_s)) / lam``,
    Blackbox's target distribution, divided by lam as in the authors' fix
    (torch-imle issue #3). Both solves of a step are one batch call each.
    Eval mode returns the exact ``y(c)``.

    ``noise`` is ``"sog"`` (SoG(k, tau, s=10), with ``k`` the problem's ``k``
    when it has one, e.g. TopK, else ``k`` or :data:`DEFAULT_SOG_K`),
    ``"gumbel"``, ``"gaussian"`` or an object with ``sample(shape, generator=None)``.

    Reference: Niepert, Minervini, Franceschi, "Implicit MLE: Backpropagating
    Through Discrete Exponential Family Distributions", NeurIPS 2021.
    """

    lam: float = 10.0
    num_samples: int = 1
    noise: Any = "sog"
    tau: float = 1.0
    k: float | None = None
    generator: torch.Generator | None = None

    def __post_init__(self) -> None:
        if not self.lam > 0:
            raise ValueError(f"IMLE lam must be > 0, got {self.lam}")
        if not self.tau > 0:
            raise ValueError(f"IMLE tau must be > 0, got {self.tau}")
        if not (isinstance(self.num_samples, int) and self.num_samples >= 1):
            raise ValueError(f"IMLE num_samples must be an int >= 1, got {self.num_samples}")
        self._noise(None)

    def _noise(self, spec: Any) -> Any:
        k = self.k if self.k is not None else getattr(spec, "k", None) or DEFAULT_SOG_K
        allowed = {"sog": lambda: SumOfGamma(k=k), **NOISES}
        return _make_noise(self.noise, allowed, "IMLE", ("sample",))

    def build(self, solver: Solver) -> DifferentiableSolve:
        tau, num_samples = self.tau, self.num_samples
        noise = self._noise(solver.spec)
        interpolation = _interpolation(solver, self.lam)

        def solve(costs: Tensor, *, target: Tensor | None = None, needs_grad: bool,
                  training: bool = True) -> Tensor:
            if not training:
                return solver.solve_min(costs)
            z = noise.sample((num_samples, *costs.shape), generator=self.generator)
            eps = -tau * z.to(costs)
            samples = solver.solve_min(costs.detach() + eps)
            mean = samples.mean(0)
            return interpolation.apply(costs, mean, eps, samples) if needs_grad else mean

        return solve


def _check_binary(spec: Any, who: str) -> None:
    from .backends.registry import canonical_form

    form = canonical_form(spec)
    n = form.num_outputs
    binary = (
        form.integer[:n].all() and (form.lower[:n] >= 0).all() and (form.upper[:n] <= 1).all()
    )
    if not binary:
        raise ValueError(f"{who} needs a binary problem (0/1 outputs), got {spec.label}")


@dataclass(frozen=True)
class Margin:
    """Informed margin: wraps any estimator and, in training, adds
    ``(alpha / 2) * (2 y_true - 1)`` to the minimisation cost.

    Use it as ``ComboLayer(spec, method=Margin(alpha=0.1, method="blackbox"))``
    and call ``layer(w, target=y_true)``. Entries of the true solution become
    more expensive and the others cheaper, so the solver's answer must beat the
    truth by a margin (loss-augmented inference). Because it acts on the min
    cost, a max problem's cost ``w`` effectively loses the term: the sign flips
    with the sense, and nothing here tests for it. Binary problems only (checked
    when built); eval mode adds nothing; training without ``target`` raises.

    Reference: Rolinek, Musil, Paulus, Vlastelica, Michaelis, Martius,
    "Optimizing Rank-based Metrics with Blackbox Differentiation", CVPR 2020.
    """

    alpha: float = 0.1
    method: Any = "identity"

    def __post_init__(self) -> None:
        if not self.alpha >= 0:
            raise ValueError(f"Margin alpha must be >= 0, got {self.alpha}")
        resolve_method(self.method)

    def build(self, solver: Solver) -> DifferentiableSolve:
        _check_binary(solver.spec, "Margin")
        base = resolve_method(self.method).build(solver)
        half = self.alpha / 2.0

        def solve(costs: Tensor, *, target: Tensor | None = None, needs_grad: bool,
                  training: bool = True) -> Tensor:
            if training:
                if target is None:
                    raise ValueError(
                        "Margin needs the true solution in training: call layer(w, target=y_true)"
                    )
                costs = costs + half * (2.0 * target - 1.0)
            return base(costs, target=target, needs_grad=needs_grad, training=training)

        return solve


#: Estimators by name, as in ``method="blackbox"`` or ``{"name": "blackbox", "lam": 10}``.
METHODS: dict[str, type] = {
    "identity": Identity,
    "blackbox": Blackbox,
    "perturbed": Perturbed,
    "imle": IMLE,
    "margin": Margin,
}


def resolve_method(method: str | dict | Estimator) -> Estimator:
    if isinstance(method, str):
        method = {"name": method}
    if isinstance(method, dict):
        params = dict(method)
        name = params.pop("name", None)
        if name not in METHODS:
            raise ValueError(f"unknown method {name!r}: expected one of {sorted(METHODS)}")
        try:
            return METHODS[name](**params)
        except TypeError as error:
            raise ValueError(f"bad parameters for method {name!r}: {error}") from None
    if not callable(getattr(method, "build", None)):
        raise ValueError(
            f"method must be a name, a dict or an estimator with build(solver), got {method!r}"
        )
    return method
