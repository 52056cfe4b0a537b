"""Gradient estimators: how a layer's backward pass treats the solver.

Every estimator sees minimisation costs: the layer folds the objective sense
into the cost once (``costs = sign * P(w)``) and autograd carries the sign back,
so nothing here tests for min or max.

An estimator is a subclass of `Estimator`: a frozen pydantic model of its
hyperparameters with a ``name`` (which registers it, so ``method="name"`` and
``{"name": ..., **params}`` find it) and two methods,

- ``forward(solver, costs, *, target, training) -> (output, saved)``: the
  layer's output and the tensors its backward needs (``saved=None``: no
  gradient path, e.g. the exact solution in eval mode, whose backward raises
  `no_gradient_error`);
- ``backward(solver, grad, costs, *saved) -> dL/dcosts``.

The autograd shell around them is written once, in `differentiable`.
``build(solver)`` runs once, when a layer is built, and returns the
differentiable solve

    solve(costs, *, target, needs_grad, training=True, A=None, b=None) -> y

where ``needs_grad`` is decided by the layer, outside any autograd.Function,
and ``training`` is the layer's mode. The solver is captured by the returned
closure, never passed through ``.apply``.

Per-call rows ``A x <= b`` (``layer(w, A=A, b=b)``) reach ``solve`` as tensors
``A (*batch, m, num_vars)`` and ``b (*batch, m)``, broadcast to the costs' batch
(the objective sense is folded into the costs only). A cost-only estimator sees
them as per-instance data: its ``forward`` and ``backward`` get a solver with the
rows bound (`combolayer.backends.wrapper.RowBound`), and its gradient reaches the
costs only. An estimator with ``row_gradients = True`` gives them a gradient:

- ``forward(solver, costs, *, target, training, A, b) -> (output, saved)``;
- ``backward(solver, grad, costs, A, b, *saved) -> (dL/dcosts, dL/dA, dL/db)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, ClassVar

import torch
from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    ValidationError,
    ValidationInfo,
)
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..backends.solver import KnownBound, Solver, cast_solutions
from ..backends.wrapper import RowBound, with_sample_axis
from ..errors import InputError
from ..func_transforms import transforms_active, vmapped
from ..specs.base import NoBooleans, is_real, positional_fields
from ..transforms.projection import Normalized, fast_apply

DifferentiableSolve = Callable[..., Tensor]
#: ``solve(w, xi) -> y``: projection, noise ``xi`` (or None), sense and solve in one node.
ProjectedSolve = Callable[[Tensor, Tensor | None], Tensor]
#: ``backward(grad, costs, *saved) -> dL/dcosts``.
Backward = Callable[..., Tensor]

#: Every estimator by name, as in ``method="blackbox"`` or ``{"name": "blackbox", "lam": 10}``;
#: a subclass of `Estimator` with a ``name`` joins it when defined.
METHODS: dict[str, type[Estimator]] = {}

#: The registries `refuse_known_cost` reads to name what counts a known cost, as
#: ``(what, registry)``: the estimators here (by ``method=`` name), the losses added by
#: `combolayer.losses.base` (which imports this module; this one cannot import it back).
KNOWN_COST_REGISTRIES: list[tuple[str, dict[str, type]]] = [("a method", METHODS)]


def solve_samples(solver: Solver, costs: Tensor) -> Tensor:
    """``solver.solve_min`` of ``(S, *batch, *cost_shape)`` costs, a sample axis first,
    handed to the solver instance by instance (each instance's ``S`` samples one after
    another, as PyEPO orders them): a kept LP or MIP model starts from its previous
    solve, which is closest when only the noise changed (PyEPO's 5x5 grid with Gurobi:
    DPOMul's epoch 1.07 -> 0.98 of PyEPO's, against one sample of every instance at a
    time). Per-call rows and a known cost bound to ``solver`` follow their instance
    (`with_sample_axis`), so the solves, and the auxiliaries a `Recorder` keeps of them,
    come in the same order (``(*batch, S)``) with or without them."""
    batch_dims = costs.dim() - 1 - len(solver.cost_shape)
    return with_sample_axis(solver).solve_min(costs.movedim(0, batch_dims)).movedim(
        batch_dims, 0)


def whole_costs(solver: Any, costs: Tensor) -> Tensor:
    """What ``solver`` minimises for ``costs`` ``(*batch, *cost_shape)`` (min space), on
    all its variables, ``(count, num_vars)``: the costs on the outputs (zeros on the
    auxiliaries) plus the spec's known cost and, where the solver has one bound
    (`combolayer.backends.wrapper.KnownBound`, a call's ``known_cost=``), each
    instance's own."""
    n, num_vars = solver.num_outputs, solver.num_vars
    flat = costs.reshape(-1, n)
    whole = torch.cat([flat, flat.new_zeros(len(flat), num_vars - n)], dim=1)
    known = solver.known_like(costs)
    if known is not None:
        whole = whole + known
    # a KnownBound (or rows bound around one) forwards it; a bare solver has none
    instance = getattr(solver, "instance_known", None)
    if instance is not None:
        batch = costs.shape[: costs.dim() - len(solver.cost_shape)]
        whole = whole + torch.as_tensor(instance).to(flat).expand(*batch, num_vars).reshape(
            -1, num_vars)
    return whole


def differentiable_rows(backward: Callable[..., tuple], once: bool = True
                        ) -> Callable[..., Tensor]:
    """The autograd shell with per-call rows: ``apply(costs, A, b, output, *saved) ->
    output`` whose backward is ``(dL/dcosts, dL/dA, dL/db) = backward(grad, costs, A, b,
    *saved)`` (None for an input without a gradient)."""

    def vjp(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        costs, A, b, *saved = ctx.saved_tensors
        if once:
            check_backward_not_vmapped(grad)
        d_costs, d_A, d_b = backward(grad, costs, A, b, *saved)
        return (d_costs, d_A, d_b, None, *(None for _ in saved))

    class _RowShell(torch.autograd.Function):
        @staticmethod
        def forward(costs: Tensor, A: Tensor, b: Tensor, output: Tensor,
                    *saved: Tensor) -> Tensor:
            return output.clone()

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
            costs, A, b, _, *saved = inputs
            ctx.save_for_backward(costs, A, b, *saved)

        backward = staticmethod(once_differentiable(vjp) if once else vjp)

    return fast_apply(_RowShell)


def check_backward_not_vmapped(grad: Tensor) -> None:
    """`InputError` where torch.func.vmap maps over the upstream gradient of a
    once-differentiable backward (``torch.func.jacrev``, ``vmap`` over a ``vjp``): it reads
    the gradient to solve or to weigh its samples, one batch at a time."""
    if transforms_active() and vmapped(grad):
        raise InputError(
            "torch.func cannot map over this estimator's backward (jacrev, or vmap over a "
            "vjp): it is once-differentiable; take the Jacobian with "
            "torch.autograd.functional.jacobian, or use method='identity', whose backward "
            "is pure torch")


def check_upstream(grad: Tensor) -> None:
    """``ValueError`` when the gradient that reaches a ``once_differentiable`` backward
    (one that calls a solver or reuses its samples) is not finite: no solver step
    (Blackbox's ``c + lam dL/dy``, I-MLE's) can be taken from it, and the fault is the
    loss's, not the estimator's hyperparameters."""
    finite = torch.isfinite(grad)
    if not bool(finite.all()):
        bad = ~finite
        index = tuple(int(i) for i in bad.nonzero()[0])
        raise InputError(
            f"the upstream gradient dL/dy is not finite: {int(bad.sum())} of {grad.numel()} "
            f"entries are NaN or inf (the first, {float(grad[index])}, at index {index}); the "
            "loss after the layer made it, not the estimator's settings (such as lam): "
            "check the loss (a log of 0, a division by 0), e.g. under "
            "torch.autograd.detect_anomaly()")


def differentiable(backward: Backward, once: bool = True) -> Callable[..., Tensor]:
    """The one autograd shell of every estimator.

    Returns ``apply(costs, output, *saved) -> output`` whose backward is
    ``dL/dcosts = backward(grad, costs, *saved)``. ``once=True`` marks it
    ``@once_differentiable``, as every backward that calls a solver must be.
    """

    def vjp(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        costs, *saved = ctx.saved_tensors
        if once:
            check_backward_not_vmapped(grad)
            check_upstream(grad)
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

    return fast_apply(_Shell)


def no_gradient_error(estimator: Any) -> InputError:
    """The error for a backward through an output ``estimator`` gave no gradient path
    (``forward``'s ``saved=None``: a sampling or relaxation estimator's exact solution in
    eval mode)."""
    return InputError(
        f"{type(estimator).__name__} gives no gradient in eval mode: its output there is "
        "the exact solution, which its estimate (samples, or a relaxation) is not made "
        "for; train in training mode "
        "(layer.train(), or model.train() after freezing what should stay in eval mode), "
        "or evaluate under torch.no_grad()")


def refusing_backward(estimator: Any, rows: bool = False) -> Callable[..., Tensor]:
    """The shell of an output without a gradient path: ``apply(costs, output, known)``
    (with ``rows``: ``apply(costs, A, b, output, known)``), whose backward raises
    `no_gradient_error`, where autograd would drop the layer's share of a gradient
    silently (a model trained with the layer in eval mode)."""

    def refuse(*_: Any) -> Tensor:
        raise no_gradient_error(estimator)

    return differentiable_rows(refuse) if rows else differentiable(refuse)


def _error_message(error: ValidationError, who: str) -> str:
    parts = []
    for item in error.errors():
        message = item["msg"].removeprefix("Value error, ")
        where = ".".join(str(part) for part in item["loc"])
        parts.append(f"{where}: {message}" if where else message)
    return f"invalid {who} parameters: " + "; ".join(parts)


class Estimator(NoBooleans):
    """Base of every gradient estimator: its validated hyperparameters and the autograd shell.

    Subclasses set ``name`` and define ``forward`` and ``backward`` (see the
    module docstring); a wrapper around another estimator may define ``build``
    instead. Arguments may be given by keyword or in field order.
    """

    # no hyperparameter is infinite or NaN: sigma=inf gave zero gradients, a NaN loss
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True,
                              allow_inf_nan=False)

    #: The name ``method=`` finds this estimator by; set it to register a subclass.
    name: ClassVar[str] = ""
    #: True when ``backward`` is pure torch (no solver call) and may be differentiated again.
    differentiable_backward: ClassVar[bool] = False
    #: Whether the estimator is right with a known cost (`combolayer.ILP.known_cost`),
    #: which the solver adds to every solve. One whose derivation assumes a purely
    #: linear objective in the prediction sets False and `build` refuses such a spec.
    counts_known_cost: ClassVar[bool] = True
    #: True when the estimator gives per-call rows ``A``, ``b`` a gradient (see the
    #: module docstring); the layer refuses rows that require one otherwise.
    row_gradients: ClassVar[bool] = False
    #: Whether the estimator takes a per-call known cost (``layer(w, known_cost=k)``):
    #: True for those that reach the solver only through ``solve_min``, which then
    #: solves with it (`combolayer.backends.wrapper.KnownBound`); one that reads the
    #: spec's known cost itself sets False and `build`'s solve refuses one.
    takes_instance_known_cost: ClassVar[bool] = True
    #: True when ``forward`` and ``backward`` are torch ops and solver calls and
    #: `saved_like` declares what ``forward`` saves: ``torch.compile`` then keeps the
    #: layer's solve whole, as one custom operator (`combolayer.layer.ops`); other
    #: estimators compile with a graph break at the solve.
    compiles_whole: ClassVar[bool] = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs = positional_fields(type(self), args, kwargs, TypeError)
        try:
            super().__init__(**kwargs)
        except ValidationError as error:
            raise InputError(_error_message(error, type(self).__name__)) from None

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

    def saved_like(self, solver: Solver, costs: Tensor,
                   training: bool) -> tuple[Tensor, ...] | None:
        """Empty tensors with the shapes and dtypes of those ``forward(solver, costs,
        training=training)`` saves (None where it saves none), for ``torch.compile``,
        which sees the solve as one operator and needs its outputs' shapes without
        solving (estimators that set `compiles_whole`). ``costs`` requires a gradient
        when the layer asks for one, as in ``forward``."""
        raise NotImplementedError(
            f"{type(self).__name__} does not declare what its forward saves (saved_like)")

    def output_aux(self, solves: list[Tensor], count: int) -> Tensor:
        """The auxiliaries ``(count, num_aux)`` that go with ``forward``'s output for
        ``count`` instances (the layer's ``return_aux``), from those its solver recorded
        (``solves``: one ``(B, num_aux)`` tensor per solve, in order, as a `Recorder`
        keeps them): by default `first_solve_aux`, right where the output is the first
        solve's solutions or their average. An estimator whose output mixes its solves
        otherwise overrides it (`RegularizedFrankWolfe`)."""
        return first_solve_aux(solves, count, str(self))

    def build_projected(self, solver: Solver, projection: Normalized) -> ProjectedSolve | None:
        """The layer's whole forward with a normalized projection folded in, as one
        autograd node, or None (the default): then the layer applies the projection
        and the noise itself and calls `build`'s solve."""
        return None

    def build(self, solver: Solver) -> DifferentiableSolve:
        refuse_known_cost(self, solver)
        # decided once here, not on every solve: a row-gradient estimator's forward takes
        # A and b (None without per-call rows), any other's takes neither
        row_gradients = self.row_gradients
        no_rows = {"A": None, "b": None} if row_gradients else {}

        # ``known``: a per-call known cost (minimisation form), or None; with one, every
        # solve of forward and backward goes through KnownBound
        def backward(grad: Tensor, costs: Tensor, known: Tensor | None,
                     *saved: Tensor) -> Tensor:
            bound = solver if known is None else KnownBound(solver, known)
            return costs_backward(self, bound, grad, costs, *saved)

        once = not self.differentiable_backward
        shell = differentiable(backward, once=once)

        def backward_rows(grad: Tensor, costs: Tensor, A: Tensor, b: Tensor,
                          known: Tensor | None, *saved: Tensor) -> tuple:
            bound = RowBound(solver if known is None else KnownBound(solver, known), A, b)
            if row_gradients:
                return self.backward(bound, grad, costs, A, b, *saved)
            return self.backward(bound, grad, costs, *saved), None, None

        row_shell = differentiable_rows(backward_rows, once=once)
        refused, rows_refused = refusing_backward(self), refusing_backward(self, rows=True)

        def solve(costs: Tensor, *, target: Tensor | None = None, needs_grad: bool,
                  training: bool = True, A: Tensor | None = None,
                  b: Tensor | None = None, known: Tensor | None = None) -> Tensor:
            base = solver
            if known is not None:
                refuse_instance_known_cost(self)
                known = known.detach()
                base = KnownBound(solver, known)
            if A is None:
                output, saved = self.forward(base, costs, target=target, training=training,
                                             **no_rows)
                if not needs_grad:
                    return output
                if saved is None:
                    return refused(costs, output, known)
                return shell(costs, output, known, *saved)
            bound = RowBound(base, A, b)
            # with their graph: a row-gradient estimator may look at which need a gradient
            rows = {"A": A, "b": b} if row_gradients else {}
            output, saved = self.forward(bound, costs, target=target, training=training, **rows)
            if not needs_grad:
                return output
            if saved is None:
                return rows_refused(costs, A, b, output, known)
            return row_shell(costs, A, b, output, known, *saved)

        return solve


def aux_of_output(estimator: Any, solver: Any, y: Tensor, solves: list[Tensor]) -> Tensor:
    """The auxiliaries ``(*batch, num_aux)`` that go with ``estimator``'s output ``y``
    (the layer's ``return_aux``), from those ``solver``'s solves recorded (``solves``: a
    `Recorder`'s ``aux``), as `Estimator.output_aux` says they go with it (for a method
    without one, `first_solve_aux`); zeros when nothing was solved or there are none."""
    count = y.numel() // solver.num_outputs
    batch = y.shape[: y.dim() - len(solver.cost_shape)]
    num_aux = solver.num_aux
    if not solves or count == 0 or num_aux == 0:
        return y.new_zeros((*batch, num_aux))
    # in their own dtype until the end, where a half-precision y's dtype must hold them
    solves = [aux.detach().to(y.device) for aux in solves]
    output_aux = getattr(estimator, "output_aux", None)
    aux = (first_solve_aux(solves, count, str(estimator)) if output_aux is None
           else output_aux(solves, count))
    return cast_solutions(solver, aux, y.dtype, aux=True).reshape(*batch, num_aux)


def first_solve_aux(solves: list[Tensor], count: int, method: str) -> Tensor:
    """The auxiliaries ``(count, num_aux)`` of the first of ``solves`` (the one that gives
    ``method``'s output), averaged over each instance's solutions where it solved several
    per instance (perturbed samples, whose output is the same average)."""
    aux = solves[0]
    if aux.shape[0] % count:
        raise RuntimeError(f"{method} solved {aux.shape[0]} instances for a batch of "
                           f"{count}: cannot tell which auxiliaries go with the output")
    return aux.reshape(count, -1, aux.shape[-1]).mean(dim=1)


def keeps_aux(solver: Any) -> bool:
    """Whether ``solver`` records the auxiliaries of its solves (a `Recorder` with
    ``keep_aux`` under any wrappers: the layer's ``return_aux``). An estimator whose
    output is no solve's solutions then records its output's own after its solves
    (``solver.aux.append``, ``(B, num_aux)``), and its `Estimator.output_aux` reads them
    back with `last_aux`."""
    return bool(getattr(solver, "keep_aux", False))


def last_aux(solves: list[Tensor], count: int, method: str) -> Tensor:
    """The last recorded auxiliaries, ``(count, num_aux)``: those ``method`` recorded for
    its output after its solves (`keeps_aux`), or in eval mode its one solve's."""
    aux = solves[-1]
    if aux.shape[0] != count:
        raise RuntimeError(f"{method} recorded auxiliaries of {aux.shape[0]} instances last, "
                           f"for a batch of {count}")
    return aux


def costs_backward(estimator: Any, solver: Any, grad: Tensor, costs: Tensor,
                   *saved: Tensor) -> Tensor:
    """``dL/dcosts`` from ``estimator.backward`` for a solve without per-call rows: a
    row-gradient estimator's (``row_gradients``) takes ``A`` and ``b``, None here, and
    returns a gradient for each, of which the costs' is kept."""
    if getattr(estimator, "row_gradients", False):
        return estimator.backward(solver, grad, costs, None, None, *saved)[0]
    return estimator.backward(solver, grad, costs, *saved)


def refuse_known_cost(owner: Any, solver: Any) -> None:
    """``ValueError`` when ``owner`` (an estimator or a loss whose ``counts_known_cost`` is
    False) meets a solver whose spec has a known cost: its derivation assumes the
    objective ``<w, y>`` alone, and the answer would be silently off."""
    if getattr(solver, "known", None) is not None and not getattr(owner, "counts_known_cost",
                                                                     True):
        raise InputError(
            f"{type(owner).__name__} does not support a known cost: {solver.spec.label} has "
            "known_cost, and its derivation assumes the objective <w, y> alone; use "
            f"{' or '.join(known_cost_counters())}, or fold the known cost into the "
            "prediction")


def known_cost_counters() -> list[str]:
    """What counts a known cost, read from `KNOWN_COST_REGISTRIES`: one phrase per
    registry with the sorted names of its entries whose ``counts_known_cost`` is True,
    e.g. ``"a method (blackbox, identity, ...)"``."""
    phrases = []
    for what, registry in KNOWN_COST_REGISTRIES:
        names = sorted(name for name, cls in registry.items() if cls.counts_known_cost)
        if names:
            phrases.append(f"{what} ({', '.join(names)})")
    return phrases


def _positive(value: float, info: ValidationInfo) -> float:
    # infinity is refused before, by the model's allow_inf_nan=False
    if not value > 0:
        raise InputError(f"{info.config['title']} {info.field_name} must be > 0, got {value}")
    return value


def _sample_count(value: Any, info: ValidationInfo) -> int:
    if not (is_real(value, integer=True) and value >= 1):
        raise InputError(f"{info.config['title']} num_samples must be an int >= 1, got "
                         f"{value!r}")
    return int(value)


#: A hyperparameter that must be > 0; the error names the estimator and the field.
Positive = Annotated[float, AfterValidator(_positive)]
#: A number of samples: an int >= 1, Python's or numpy's (``2.0`` is refused, not truncated).
SampleCount = Annotated[int, BeforeValidator(_sample_count)]


def refuse_instance_known_cost(estimator: Estimator) -> None:
    """``NotImplementedError`` for a per-call known cost given to an estimator that does
    not take one (`Estimator.takes_instance_known_cost`); the message names those that do."""
    if not estimator.takes_instance_known_cost:
        raise NotImplementedError(
            f"{type(estimator).__name__} does not take a per-call known cost (known_cost=): "
            "it reads the spec's own; put the known cost in the spec, or use a method that "
            f"takes one ({', '.join(instance_known_methods())})")


def instance_known_methods() -> list[str]:
    """The registered estimators that take a per-call known cost."""
    return sorted(name for name, cls in METHODS.items() if cls.takes_instance_known_cost)


def row_gradient_methods() -> list[str]:
    """The registered estimators that give per-call rows ``A``, ``b`` a gradient."""
    return sorted(name for name, cls in METHODS.items() if cls.row_gradients)


def resolve_method(method: str | dict | Estimator) -> Estimator:
    """An estimator from a name, a dict ``{"name": ..., **params}`` or an estimator object
    (anything with ``build(solver)``)."""
    if isinstance(method, str):
        method = {"name": method}
    if isinstance(method, dict):
        params = dict(method)
        name = params.pop("name", None)
        if name not in METHODS:
            raise InputError(f"unknown method {name!r}: expected one of {sorted(METHODS)}")
        try:
            return METHODS[name](**params)
        except TypeError as error:
            raise InputError(f"bad parameters for method {name!r}: {error}") from None
    if not callable(getattr(method, "build", None)):
        raise InputError(
            f"method must be a name, a dict or an estimator with build(solver), got {method!r}"
        )
    return method
