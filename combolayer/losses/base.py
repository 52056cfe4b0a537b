"""What every loss shares: reductions, checks of its inputs, a solver that survives
copies, and the clipping of the negative costs it makes itself.

Every loss subclasses `SolverLoss` and joins `LOSSES`, so tests parametrised over it
(tests/test_copies.py, tests/test_losses.py) hold each of them to what all must do:
survive ``copy.deepcopy``, ``pickle`` and ``torch.save``, and refuse a NaN or inf target.
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from ..backends.solver import (
    HALF_PRECISION,
    Solver,
    check_known_cost,
    inner,
    rebuild_solver,
)
from ..errors import InputError, InputTypeError
from ..estimators.base import KNOWN_COST_REGISTRIES, refuse_known_cost
from ..func_transforms import check_not_vmapped, transforms_active
from ..pool import CachedSolver, cache_setting
from ..specs.base import is_real

REDUCTIONS = ("mean", "sum", "none")


def check_reduction(reduction: str) -> str:
    if reduction not in REDUCTIONS:
        raise InputError(f"reduction must be one of {list(REDUCTIONS)}, got {reduction!r}")
    return reduction


def as_number(value: Any) -> Any:
    """``value``'s number where it is one (a one-element tensor's item), else ``value``:
    what `is_real` then tells apart from booleans and everything else."""
    return value.item() if isinstance(value, Tensor) and value.numel() == 1 else value


def check_number(name: str, value: Any, *, above: float | None = None,
                 least: float | None = None) -> float:
    """A loss's numeric setting ``value`` as a float: a real number (a one-element tensor
    too; no boolean, which Python takes as 1), finite (``sigma=inf`` gave NaN losses),
    and ``> above`` or ``>= least``; else `InputError` naming ``name`` (``"PGLoss
    sigma"``) and what it got."""
    number = as_number(value)
    bound, fits = ((f"> {above:g}", lambda x: x > above) if above is not None
                   else (f">= {least:g}", lambda x: x >= least) if least is not None
                   else ("", lambda x: True))
    if not (is_real(number) and math.isfinite(number) and fits(number)):
        raise InputError(f"{name} must be a finite number {bound}".rstrip()
                         + f", got {value!r}")
    return float(number)


def reduce(per_instance: Tensor, reduction: str) -> Tensor:
    """``per_instance`` reduced as ``reduction`` says, checked here too: a loss's
    ``reduction`` set after it was built (``"avg"``) returned the losses unreduced."""
    if reduction == "mean":
        return per_instance.mean()
    if reduction == "sum":
        return per_instance.sum()
    if reduction == "none":
        return per_instance
    raise InputError(f"reduction must be one of {list(REDUCTIONS)}, got {reduction!r}")


def check_solution(solver: Solver, y: Tensor, like: Tensor, name: str) -> Tensor:
    if tuple(y.shape) != tuple(like.shape):
        raise InputError(
            f"{name} has shape {tuple(y.shape)} but the costs have {tuple(like.shape)} "
            f"for {solver.spec.label}"
        )
    return torch.as_tensor(y).to(like)


#: The arguments of a loss's ``__call__`` that carry costs or solutions: `LossInputs`
#: turns numpy arrays there into tensors.
TENSOR_ARGUMENTS = ("cost_pred", "cost_true", "y_true")
#: The targets among them: `LossInputs` refuses NaN or inf there (the prediction is
#: checked with the costs, by ``check_costs``).
TARGET_ARGUMENTS = ("cost_true", "y_true")


def check_finite_target(value: Tensor, name: str, owner: str, role: str = "target") -> None:
    """``ValueError`` naming the first NaN or inf entry of the target ``value`` (of a
    prediction where ``role`` says so). Off the CPU, and in a graph that torch.compile
    traces, the check reads nothing back: it is queued on the device, as `check_values`
    queues the costs' (an assertion in the graph with the same message)."""
    finite = torch.isfinite(value)
    if not value.is_cpu or torch.compiler.is_compiling():
        torch._assert_async(finite.all(), f"{owner}: {name} must be finite (a {role} with NaN "
                            "or inf gives a NaN loss)")
        return
    if not bool(finite.all()):
        index = tuple(int(i) for i in (~finite).nonzero()[0])
        raise InputError(f"{owner}: {name} must be finite, got {float(value[index])} at index "
                         f"{index} (a {role} with NaN or inf gives a NaN loss)")


def as_loss_input(value: Any, name: str, owner: str, like: Tensor | None = None) -> Any:
    """``value`` as a tensor: a floating-point tensor as is, an integer or boolean one
    as numbers (``like``'s dtype when given, else torch's default), a numpy array
    converted (to ``like``'s dtype and device when given, else a float tensor), None
    kept; anything else raises TypeError naming what is expected."""
    if value is None:
        return value
    if isinstance(value, Tensor):
        if value.is_floating_point() or value.is_complex():
            return value
        return value.to(torch.get_default_dtype() if like is None else like.dtype)
    if isinstance(value, np.ndarray):
        if not (np.issubdtype(value.dtype, np.number) or value.dtype == np.bool_):
            raise InputTypeError(f"{owner}: {name} must be numeric, got a numpy array of dtype "
                            f"{value.dtype}")
        tensor = torch.from_numpy(np.ascontiguousarray(value))
        if like is not None:
            return tensor.to(dtype=like.dtype, device=like.device)
        return tensor if tensor.is_floating_point() else tensor.to(torch.get_default_dtype())
    raise InputTypeError(f"{owner}: {name} must be a torch.Tensor or a numpy array, got "
                    f"{type(value).__name__}")


class LossInputs:
    """What every loss does with its inputs, done once: the arguments named in
    `TENSOR_ARGUMENTS` may be numpy arrays, which become tensors (the first of them,
    the prediction, a float tensor; the others like it); anything else is a
    TypeError that names what is expected. A ``known_cost=`` given to a loss whose
    ``__call__`` has no such argument is refused with a ValueError that says why
    (`refuse_instance_known_cost`). Integer and boolean tensors are taken as numbers
    (the prediction's dtype, or torch's default), half-precision ones in float32
    (`HALF_PRECISION`). Each subclass's ``__call__`` is wrapped when the
    class is defined, so a loss added later cannot miss it."""

    #: Whether ``__call__`` takes a known cost per instance (``known_cost=``); set from
    #: its signature when the class is defined.
    takes_instance_known_cost: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        call = cls.__dict__.get("__call__")
        if call is None or getattr(call, "_loss_inputs", False):
            return
        signature = inspect.signature(call)
        names = [name for name in signature.parameters if name in TENSOR_ARGUMENTS]
        if not names:
            return
        cls.takes_instance_known_cost = "known_cost" in signature.parameters

        @functools.wraps(call)
        def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
            if "known_cost" in kwargs and not self.takes_instance_known_cost:
                refuse_instance_known_cost(self)
            bound = signature.bind(self, *args, **kwargs)
            if transforms_active():  # torch.func: vmap refused before any check
                check_not_vmapped(*(bound.arguments.get(name)
                                    for name in (*names, "known_cost")))
            like = None
            owner = type(self).__name__
            for name in names:
                if name in bound.arguments:
                    value = as_loss_input(bound.arguments[name], name, owner, like)
                    if isinstance(value, Tensor) and value.dtype in HALF_PRECISION:
                        # in float32, as the layer works: 2 c_hat - c overflowed float16
                        # (a NaN loss), and bfloat16 tied its costs and its noise
                        value = value.float()
                    bound.arguments[name] = value
                    if name in TARGET_ARGUMENTS and isinstance(value, Tensor):
                        check_finite_target(value, name, owner)
                    if like is None and isinstance(value, Tensor) and value.is_floating_point():
                        like = value
            return call(*bound.args, **bound.kwargs)

        checked._loss_inputs = True  # type: ignore[attr-defined]
        cls.__call__ = checked  # type: ignore[method-assign]


def refuse_instance_known_cost(loss: Any) -> None:
    """``ValueError`` for a ``known_cost=`` given to a loss that takes none: why (its
    derivation assumes the objective ``<w, y>`` alone where it counts no known cost, as
    `refuse_known_cost` says of a spec's) and which losses take one."""
    owner = type(loss).__name__
    if loss.counts_known_cost:
        why = "it counts the spec's own known cost only"
    else:
        why = ("its derivation assumes the objective <w, y> alone, and the answer would be "
               "silently off")
    takers = sorted(name for name, cls in LOSSES.items() if cls.takes_instance_known_cost)
    raise InputError(f"{owner} does not take a per-call known cost (known_cost=): {why}; use "
                     f"a loss that takes one ({', '.join(takers)}), or fold the known cost "
                     "into the prediction")


#: Every loss by class name: a subclass of `SolverLoss` joins it when defined, unless
#: its body sets ``_abstract_loss = True`` (a base such as `PooledLoss`).
LOSSES: dict[str, type[SolverLoss]] = {}
KNOWN_COST_REGISTRIES.append(("a loss", LOSSES))


class SolverLoss(LossInputs):
    """The base of every loss: it holds a compiled solver as ``self.solver``, and still
    deep-copies and pickles with every backend.

    A compiled solver holds native models, locks and worker pools, none of which
    can be copied; it copies and pickles as its recipe (`Solver.__reduce__`: the spec
    and the backend config), as in a layer, and is made again on
    ``copy.deepcopy``, ``pickle`` or ``torch.save``'s load. Every loss inherits
    this by subclassing; it only assigns ``self.solver``. Whatever else it builds
    around the solver (a cache, a clipping wrapper) goes under a key of `DERIVED`
    in ``__dict__``, is dropped, and is rebuilt on first use.
    """

    #: ``__dict__`` keys of objects built around the solver: never copied or pickled.
    DERIVED: ClassVar[tuple[str, ...]] = ("_cached", "_clips")
    #: Whether the loss counts a known cost (`combolayer.ILP.known_cost`) in the
    #: objectives it compares; one that does not refuses such a spec (ValueError)
    #: rather than compare the wrong objectives (docs/core.md, "Your whole model",
    #: lists which losses count it and why the others cannot).
    counts_known_cost: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("_abstract_loss", False):
            LOSSES[cls.__name__] = cls

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, cache_setting(name, value, self.__dict__.get("spec")))

    @property
    def solver(self) -> Solver:
        return self.__dict__["_solver"]

    @solver.setter
    def solver(self, solver: Solver) -> None:
        refuse_known_cost(self, solver)
        self.__dict__["_solver"] = solver

    @property
    def cached_solver(self) -> Solver:
        """``self.solver``, or the solution cache around it when ``self.solve_ratio < 1``
        (built on first use, so a copied loss wraps its own rebuilt solver, and again
        when the solver, ``solve_ratio``, ``pool`` or ``generator`` was set since)."""
        if getattr(self, "solve_ratio", 1.0) >= 1.0:
            return self.solver
        cached = self.__dict__.get("_cached")
        if cached is None or cached.solve_ratio != self.solve_ratio or any(
                have is not given for have, given in (
                    (cached.exact, self.solver), (cached.pool, self.pool),
                    (cached.generator, self.generator))):
            cached = self.__dict__["_cached"] = CachedSolver(
                self.solver, self.solve_ratio, self.pool, self.generator)
        return cached

    def known_like(self, like: Tensor) -> Tensor | None:
        """The known cost in minimisation form (``sign * known_cost``, ``(num_vars,)``) on
        ``like``'s device and dtype, or None when the spec has none: the solver's own copy
        there (`Solver.known_like`, made once per device and dtype, not on every call)."""
        return self.solver.known_like(like)

    def target_known_value(self, y: Tensor, known: Tensor | None = None) -> Tensor:
        """``<k[:N], y>`` per instance (``k`` the sense-folded known cost), the known part of
        the objective of flat target decisions ``y`` ``(..., N)``: their auxiliaries,
        which a target does not give, do not depend on the prediction and are left out,
        a constant shift of the loss. 0 without a known cost. ``known``: each instance's own
        known cost ``(..., num_vars)`` (min form, `instance_known`), added to ``k``."""
        spec_known = self.known_like(y)
        n = self.solver.num_outputs
        value = y.new_zeros(y.shape[:-1]) if spec_known is None else y @ spec_known[:n]
        if known is not None:
            value = value + (y * known[..., :n].to(y)).sum(-1)
        return value

    def instance_known(self, known_cost: Any, costs: Tensor) -> Tensor | None:
        """A call's known cost per instance (``known_cost=``: ``(*batch, num_vars)`` or
        ``(num_vars,)``, in the spec's sense, added to the spec's own) checked once
        (`check_known_cost`: shape, finiteness) and returned in minimisation form, ``sign *
        known_cost`` broadcast to ``(*batch, num_vars)`` on ``costs``'s device and dtype
        (``costs`` ``(*batch, *cost_shape)``, the call's); None without one."""
        if known_cost is None:
            return None
        batch = tuple(costs.shape[: costs.dim() - len(self.spec.cost_shape)])
        return self.solver.sign * check_known_cost(self.spec.label, self.solver.num_vars, batch,
                                                   known_cost, costs.detach())

    def solve_whole(self, solver: Any, costs: Tensor) -> tuple[Tensor, Tensor | None]:
        """``solver.solve_min(costs)`` and, when the solves carry a known cost (the spec's or
        a call's bound to it: `Solver.counts_known`), the auxiliaries too
        (``(y, aux)``; ``(y, None)`` without one), so that `min_value` can count the known
        part of each solution's objective."""
        if not solver.counts_known:
            return solver.solve_min(costs), None
        y, aux = solver.solve_min(costs, return_aux=True)
        return y, aux.to(y)

    def min_value(self, costs: Tensor, y: Tensor, aux: Tensor | None,
                  solver: Any = None) -> Tensor:
        """The min-sense objective of whole solutions, one value per instance:
        ``<costs, y> + <k, concat(y, aux)>`` with ``k`` the sense-folded known cost
        (``<costs, y>`` without one); ``costs`` are already sense-folded. ``solver``: the
        one that solved them when a call's known cost is bound to it
        (`combolayer.backends.wrapper.KnownBound`, whose `known_value` counts it too),
        else this loss's."""
        solver = self.solver if solver is None else solver
        value = inner(costs, y, len(self.solver.cost_shape))
        if not solver.counts_known:
            return value
        return value + (solver.sign * solver.known_value(y, aux)).to(value)

    def own_step(self, solver: Any, step: str) -> Any:
        """``solver`` for the costs this loss makes itself in ``step`` (e.g.
        ``"2 c_hat - c"``): on a problem that needs non-negative costs, negatives there
        are set to 0 with one warning per loss and step that names it
        (`combolayer.backends.clip`), as the layer does with its noise; otherwise
        ``solver`` itself. The user's own costs never go through it."""
        from ..backends.clip import clip_negatives

        clips = self.__dict__.setdefault("_clips", {})
        wrapped = clips.get(step)
        if wrapped is None or getattr(wrapped, "_solver", wrapped) is not solver:
            wrapped = clips[step] = clip_negatives(
                solver, f"{type(self).__name__}'s own step {step}", "loss and step")
        return wrapped

    def own_costs(self, costs: Tensor, step: str) -> Tensor:
        """``costs`` that this loss made in ``step``, clipped as `own_step` clips them,
        for a batch that the solver takes together with the user's costs."""
        wrapped = self.own_step(self.solver, step)
        return costs if wrapped is self.solver else wrapped.clip(costs)

    def check_nonnegative(self, costs: Tensor, name: str) -> None:
        """Refuse min-sense ``costs`` that the user gave (``name``) with a negative entry
        where the problem needs non-negative costs, as the layer does with ``w``."""
        floor = self.spec.nonnegative_costs()
        if floor is None:
            return
        given = costs.detach().reshape(-1, self.solver.num_outputs)[
            :, torch.as_tensor(floor, device=costs.device)]
        if bool((given < 0).any()):
            b, j = (given < 0).nonzero()[0].tolist()
            raise self.spec.negative_cost_error(  # the value as the user gave it
                f"{name}, instance {b}, value {self.solver.sign * float(given[b, j]):.4g}")

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for key in self.DERIVED:  # rebuilt around the copied solver on first use
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict) -> None:
        recipe = state.pop("_solver_recipe", None)  # pickled before solvers copied themselves
        race = state.pop("_race", None)
        self.__dict__.update(state)
        if "_solver" not in state and recipe is not None:
            from ..backends.registry import make_solver

            self.__dict__["_solver"] = rebuild_solver(functools.partial(make_solver, *recipe),
                                                      race)
