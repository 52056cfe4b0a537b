"""Gradient estimators: how a layer's backward pass treats the solver.

Every estimator sees minimisation costs: the layer folds the objective sense
into the cost once (``costs = sign * P(w)``) and autograd carries the sign back,
so nothing here tests for min or max.

An estimator is a subclass of :class:`Estimator`: a frozen pydantic model of its
hyperparameters with a ``name`` (which registers it, so ``method="name"`` and
``{"name": ..., **params}`` find it) and two methods,

- ``forward(solver, costs, *, target, training) -> (output, saved)``: the
  layer's output and the tensors its backward needs (``saved=None``: no
  gradient path, e.g. the exact solution in eval mode);
- ``backward(solver, grad, costs, *saved) -> dL/dcosts``.

The autograd shell around them is written once, in :func:`differentiable`.
``build(solver)`` runs once, when a layer is built, and returns the
differentiable solve

    solve(costs, *, target, needs_grad, training=True) -> y

where ``needs_grad`` is decided by the layer, outside any autograd.Function,
and ``training`` is the layer's mode. The solver is captured by the returned
closure, never passed through ``.apply``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator
from torch import Tensor
from torch.autograd.function import once_differentiable

from .backends.solver import Solver, inner
from .canonical import canonical_form
from .noise import (  # noqa: F401  (GaussianNoise, GumbelNoise, SumOfGamma: moved to .noise)
    DEFAULT_SOG_K,
    NOISES,
    GaussianNoise,
    GumbelNoise,
    SumOfGamma,
    make_noise,
)
from .specs import positional_fields
from .transforms import Normalized, fast_apply

DifferentiableSolve = Callable[..., Tensor]
#: ``backward(grad, costs, *saved) -> dL/dcosts``.
Backward = Callable[..., Tensor]

#: Every estimator by name, as in ``method="blackbox"`` or ``{"name": "blackbox", "lam": 10}``;
#: a subclass of :class:`Estimator` with a ``name`` joins it when defined.
METHODS: dict[str, type[Estimator]] = {}


def differentiable(backward: Backward, once: bool = True) -> Callable[..., Tensor]:
    """The one autograd shell of every estimator.

    Returns ``apply(costs, output, *saved) -> output`` whose backward is
    ``dL/dcosts = backward(grad, costs, *saved)``. ``once=True`` marks it
    ``@once_differentiable``, as every backward that calls a solver must be.
    """

    def vjp(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        costs, *saved = ctx.saved_tensors
        return (backward(grad, costs, *saved), None, *(None for _ in saved))

    class _Shell(torch.autograd.Function):
        @staticmethod
        def forward(costs: Tensor, output: Tensor, *saved: Tensor) -> Tensor:
            return output.clone()

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
            costs, _, *saved = inputs
            ctx.save_for_backward(costs, *saved)

        backward = staticmethod(once_differentiable(vjp) if once else vjp)

    return _Shell.apply


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


def _projected_negative_identity(
        solver: Solver, projection: Normalized) -> Callable[[Tensor, Tensor | None], Tensor]:
    """The default Identity layer in one autograd node, for a normalized projection P
    acting on the flattened cost: ``apply(w, xi) -> y``, forward ``y = solve(sign *
    (P(w) + xi))``, with xi the layer's noise or None; backward ``dL/dw = -sign
    J_P(w)^T dL/dy`` in closed form (:meth:`Normalized.vjp`). Same values and gradient
    as P's node, the noise's add, the sign's ``neg`` (max problems) and
    :func:`_negative_identity`'s node in a row."""
    n = solver.num_outputs
    single_axis = len(solver.cost_shape) == 1
    maximize = solver.sign == -1.0

    def solve(w: Tensor, noise: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(y, u, norm, clamped)``, the last three for :func:`vjp`."""
        flat = w if single_axis and w.dim() == 2 else w.reshape(-1, n)
        if noise is None:
            # a max problem's -u comes out of the division (vjp takes -u as u)
            u, norm, clamped = projection.values(flat, negate=maximize)
            costs = u
        else:
            u, norm, clamped = projection.values(flat)
            costs = u + noise.reshape(u.shape)
            if maximize:
                costs = costs.neg_()
        y = solver.solve_rows(costs) if costs.numel() else costs * 0
        return (y if flat is w else y.reshape(w.shape)), u, norm, clamped

    def vjp(grad: Tensor, u: Tensor, norm: Tensor, clamped: Tensor) -> Tensor:
        flat = grad if single_axis and grad.dim() == 2 else grad.reshape(u.shape)
        # dL/du: the negative identity's -dL/dy, or +dL/dy through a max problem's -u
        out = projection.vjp(flat if maximize else flat.neg(), u, norm, clamped)
        return out if flat is grad else out.reshape(grad.shape)

    class _ProjectedNegativeIdentity(torch.autograd.Function):
        # The old style (forward(ctx, ...)): one output, the intermediates saved on
        # ctx; measured ~3% of a PyEPO training epoch faster than returning them as
        # marked outputs, which functorch transforms need (the class below).
        @staticmethod
        def forward(ctx: Any, w: Tensor, noise: Tensor | None) -> Tensor:
            y, *saved = solve(w, noise)
            ctx.save_for_backward(*saved)
            return y

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
            return vjp(grad, *ctx.saved_tensors), None

    class _UnderTransforms(torch.autograd.Function):
        # the same node with setup_context, for functorch transforms (torch.func.grad)
        @staticmethod
        def forward(w: Tensor, noise: Tensor | None) -> tuple[Tensor, ...]:
            return solve(w, noise)

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
            _, *saved = output
            ctx.mark_non_differentiable(*saved)
            ctx.save_for_backward(*saved)

        @staticmethod
        def backward(ctx: Any, grad: Tensor, *_unused: Any) -> tuple[Tensor, None]:
            return vjp(grad, *ctx.saved_tensors), None

    return fast_apply(_ProjectedNegativeIdentity,
                      under_transforms=lambda w, noise: _UnderTransforms.apply(w, noise)[0])


def _error_message(error: ValidationError, who: str) -> str:
    parts = []
    for item in error.errors():
        message = item["msg"].removeprefix("Value error, ")
        where = ".".join(str(part) for part in item["loc"])
        parts.append(f"{where}: {message}" if where else message)
    return f"invalid {who} parameters: " + "; ".join(parts)


class Estimator(BaseModel):
    """Base of every gradient estimator: its validated hyperparameters and the autograd shell.

    Subclasses set ``name`` and define ``forward`` and ``backward`` (see the
    module docstring); a wrapper around another estimator may define ``build``
    instead. Arguments may be given by keyword or in field order.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    #: The name ``method=`` finds this estimator by; set it to register a subclass.
    name: ClassVar[str] = ""
    #: True when ``backward`` is pure torch (no solver call) and may be differentiated again.
    differentiable_backward: ClassVar[bool] = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs = positional_fields(type(self), args, kwargs, TypeError)
        try:
            super().__init__(**kwargs)
        except ValidationError as error:
            raise ValueError(_error_message(error, type(self).__name__)) from None

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if cls.__dict__.get("name"):
            METHODS[cls.name] = cls

    def __str__(self) -> str:
        return repr(self)

    def forward(self, solver: Solver, costs: Tensor, *, target: Tensor | None,
                training: bool) -> tuple[Tensor, tuple[Tensor, ...] | None]:
        raise NotImplementedError

    def backward(self, solver: Solver, grad: Tensor, costs: Tensor, *saved: Tensor) -> Tensor:
        raise NotImplementedError

    def build(self, solver: Solver) -> DifferentiableSolve:
        def backward(grad: Tensor, costs: Tensor, *saved: Tensor) -> Tensor:
            return self.backward(solver, grad, costs, *saved)

        shell = differentiable(backward, once=not self.differentiable_backward)

        def solve(costs: Tensor, *, target: Tensor | None = None, needs_grad: bool,
                  training: bool = True) -> Tensor:
            output, saved = self.forward(solver, costs, target=target, training=training)
            if not needs_grad or saved is None:
                return output
            return shell(costs, output, *saved)

        return solve


def _positive(value: float, info: Any, who: str) -> float:
    if not value > 0:
        raise ValueError(f"{who} {info.field_name} must be > 0, got {value}")
    return value


def _sample_count(value: Any, who: str) -> int:
    if not (isinstance(value, int) and value >= 1):
        raise ValueError(f"{who} num_samples must be an int >= 1, got {value}")
    return value


class Identity(Estimator):
    """Identity with projection: the solver is a negative identity on the backward pass.

    ``dL/dw = -(dP/dw)^T dL/dy`` for min problems (``+`` for max); no extra solver
    call. Combine it with ``projection`` and ``noise`` on :class:`~combolayer.ComboLayer`.

    Examples:
        >>> import torch, combolayer as cl
        >>> layer = cl.ComboLayer(cl.problems.TopK(n=4, k=2), method=cl.Identity(),
        ...                       projection="none")
        >>> w = torch.tensor([3.0, 1.0, 2.0, 5.0], requires_grad=True)
        >>> y = layer(w)                      # the two largest (TopK is a max problem)
        >>> y.tolist()
        [1.0, 0.0, 0.0, 1.0]
        >>> y.backward(torch.ones(4))
        >>> w.grad.tolist()                   # +dL/dy for a max problem, no extra solve
        [1.0, 1.0, 1.0, 1.0]

    Reference: Sahoo, Paulus, Vlastelica, Musil, Kuleshov, Martius, "Backpropagation
    through Combinatorial Algorithms: Identity with Projection Works", ICLR 2023.
    """

    name: ClassVar[str] = "identity"
    differentiable_backward: ClassVar[bool] = True

    def build(self, solver: Solver) -> DifferentiableSolve:
        # The hot path of every Identity layer: the solve runs inside one autograd
        # Function whose backward is one op, applied without Function.apply's
        # argument binding (docs/performance.md), instead of the shared shell.
        negative_identity = fast_apply(_negative_identity(solver))
        solve_min = solver.solve_min

        def solve(costs: Tensor, *, target: Tensor | None = None, needs_grad: bool,
                  training: bool = True) -> Tensor:
            return negative_identity(costs) if needs_grad else solve_min(costs)

        return solve

    def build_projected(self, solver: Solver,
                        projection: Normalized) -> Callable[[Tensor, Tensor | None], Tensor]:
        """The layer's whole default hot path, projection included, as one autograd node
        (:func:`_projected_negative_identity`): ``solve(w, noise) -> y`` for costs ``w``
        of shape ``(*batch, *cost_shape)`` and the noise ``xi`` added after the
        projection (or None); without gradients it records nothing. The layer uses it
        for projections "auto", "auto-exact" and "std" on problems that take costs of
        any sign."""
        return _projected_negative_identity(solver, projection)

    def forward(self, solver, costs, *, target, training):
        return solver.solve_min(costs), ()

    def backward(self, solver, grad, costs):
        return -grad


def _interpolation(solver: Solver, lam: float, grad: Tensor, costs: Tensor, eps: Tensor,
                   samples: Tensor, per_instance: bool = False) -> Tensor:
    """Blackbox's backward at (perturbed) solver inputs ``c + eps_s``, shared by
    :class:`Blackbox` (``eps = 0``, one sample) and :class:`IMLE`:
    ``dL/dc = 1/S sum_s (y(c + lam dL/dy + eps_s) - samples_s) / lam``, with all
    S shifted solves in one batched call. ``per_instance`` multiplies ``lam`` by
    the number of instances in the batch (see :class:`Blackbox`)."""
    step = lam * (costs.numel() // solver.num_outputs if per_instance else 1)
    shifted = solver.solve_min(costs + step * grad + eps)
    return (shifted - samples).mean(0) / step


class Blackbox(Estimator):
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

    Examples:
        >>> import torch, combolayer as cl
        >>> layer = cl.ComboLayer(cl.problems.TopK(n=4, k=2), method=cl.Blackbox(lam=10.0),
        ...                       projection="none")
        >>> layer(torch.tensor([3.0, 1.0, 2.0, 5.0])).tolist()
        [1.0, 0.0, 0.0, 1.0]

    Reference: Vlastelica, Paulus, Musil, Martius, Rolinek, "Differentiation of
    Blackbox Combinatorial Solvers", ICLR 2020.
    """

    name: ClassVar[str] = "blackbox"

    lam: float = 20.0
    reduction: str = "mean"

    @field_validator("lam")
    @classmethod
    def _check_lam(cls, value: float, info: Any) -> float:
        return _positive(value, info, "Blackbox")

    @field_validator("reduction")
    @classmethod
    def _check_reduction(cls, value: str) -> str:
        if value not in ("mean", "sum"):
            raise ValueError(f"Blackbox reduction must be 'mean' or 'sum' (how the loss "
                             f"reduces over the batch), got {value!r}")
        return value

    def forward(self, solver, costs, *, target, training):
        solution = solver.solve_min(costs)
        # One unperturbed sample: eps = 0, samples = the solution.
        return solution, (costs.new_zeros(()), solution[None])

    def backward(self, solver, grad, costs, eps, samples):
        return _interpolation(solver, self.lam, grad, costs, eps, samples,
                              per_instance=self.reduction == "mean")


# --- Perturbation-based estimators -------------------------------------------
#
# Berthet et al. and Niepert et al. write their layers for a maximiser
# argmax <theta, y>. Estimators here only see minimisation costs c, and
# argmin <c, y> = argmax <-c, y>, so theta = -c and the perturbed solver input
# is c - sigma * Z: for a max problem (c = -w) the solver sees w + sigma * Z,
# exactly the papers' argmax <w + sigma Z, y>. This matters for asymmetric
# noise: a Gumbel perturbation of a max problem is the Gumbel-max trick.


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

    ``noise`` is ``"gaussian"``, ``"gumbel"`` or an object with
    ``sample(shape, generator=None)`` and ``grad_nu(z)``; ``generator`` seeds
    the draws.

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

    sigma: float = 1.0
    num_samples: int = 1
    noise: Any = "gaussian"
    generator: torch.Generator | None = None

    @field_validator("sigma")
    @classmethod
    def _check_sigma(cls, value: float, info: Any) -> float:
        return _positive(value, info, "Perturbed")

    @field_validator("num_samples", mode="before")
    @classmethod
    def _check_samples(cls, value: Any) -> int:
        return _sample_count(value, "Perturbed")

    @model_validator(mode="after")
    def _check_noise(self) -> Perturbed:
        self._noise()
        return self

    def _noise(self) -> Any:
        return make_noise(self.noise, NOISES, "Perturbed", ("sample", "grad_nu"))

    def perturbed_solutions(self, solver: Solver, costs: Tensor) -> tuple[Tensor, Tensor]:
        """``(Z, y(c - sigma Z))``, each ``(num_samples, *costs.shape)``, from one solver call."""
        z = self._noise().sample((self.num_samples, *costs.shape),
                                 generator=self.generator).to(costs)
        return z, solver.solve_min(costs.detach() - self.sigma * z)

    def forward(self, solver, costs, *, target, training):
        if not training:
            return solver.solve_min(costs), None
        z, samples = self.perturbed_solutions(solver, costs)
        return samples.mean(0), (z, samples)

    def backward(self, solver, grad, costs, z, samples):
        weight = inner(samples, grad, len(solver.cost_shape), keepdim=True)
        return -(weight * self._noise().grad_nu(z)).mean(0) / self.sigma


class IMLE(Estimator):
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

    Examples:
        >>> import torch, combolayer as cl
        >>> layer = cl.ComboLayer(cl.problems.TopK(n=4, k=2), method=cl.IMLE(lam=10.0))
        >>> layer(torch.tensor([3.0, 1.0, 2.0, 5.0])).sum().item()  # a 2-hot sample
        2.0

    Reference: Niepert, Minervini, Franceschi, "Implicit MLE: Backpropagating
    Through Discrete Exponential Family Distributions", NeurIPS 2021.
    """

    name: ClassVar[str] = "imle"

    lam: float = 10.0
    num_samples: int = 1
    noise: Any = "sog"
    tau: float = 1.0
    k: float | None = None
    generator: torch.Generator | None = None

    @field_validator("lam", "tau")
    @classmethod
    def _check_positive(cls, value: float, info: Any) -> float:
        return _positive(value, info, "IMLE")

    @field_validator("num_samples", mode="before")
    @classmethod
    def _check_samples(cls, value: Any) -> int:
        return _sample_count(value, "IMLE")

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
        samples = solver.solve_min(costs.detach() + eps)
        return samples.mean(0), (eps, samples)

    def backward(self, solver, grad, costs, eps, samples):
        return _interpolation(solver, self.lam, grad, costs, eps, samples)


def _check_binary(spec: Any, who: str) -> None:
    form = canonical_form(spec)
    n = form.num_outputs
    binary = (
        form.integer[:n].all() and (form.lower[:n] >= 0).all() and (form.upper[:n] <= 1).all()
    )
    if not binary:
        raise ValueError(f"{who} needs a binary problem (0/1 outputs), got {spec.label}")


class Margin(Estimator):
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

    name: ClassVar[str] = "margin"

    alpha: float = 0.1
    method: Any = "identity"

    @field_validator("alpha")
    @classmethod
    def _check_alpha(cls, value: float) -> float:
        if not value >= 0:
            raise ValueError(f"Margin alpha must be >= 0, got {value}")
        return value

    @model_validator(mode="after")
    def _check_method(self) -> Margin:
        resolve_method(self.method)
        return self

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


def resolve_method(method: str | dict | Estimator) -> Estimator:
    """An estimator from a name, a dict ``{"name": ..., **params}`` or an estimator object
    (anything with ``build(solver)``)."""
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
