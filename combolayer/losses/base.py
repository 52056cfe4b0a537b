"""What every loss shares: reductions and shape checks on solutions."""

from __future__ import annotations

import functools
import inspect
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..backends.solver import Solver

REDUCTIONS = ("mean", "sum", "none")


def check_reduction(reduction: str) -> str:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {list(REDUCTIONS)}, got {reduction!r}")
    return reduction


def reduce(per_instance: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return per_instance.mean()
    if reduction == "sum":
        return per_instance.sum()
    return per_instance


def check_solution(solver: Solver, y: Tensor, like: Tensor, name: str) -> Tensor:
    if tuple(y.shape) != tuple(like.shape):
        raise ValueError(
            f"{name} has shape {tuple(y.shape)} but the costs have {tuple(like.shape)} "
            f"for {solver.spec.label}"
        )
    return torch.as_tensor(y).to(like)


#: The arguments of a loss's ``__call__`` that carry costs or solutions: `LossInputs`
#: turns numpy arrays there into tensors.
TENSOR_ARGUMENTS = ("cost_pred", "cost_true", "y_true")


def as_loss_input(value: Any, name: str, owner: str, like: Tensor | None = None) -> Any:
    """``value`` as a tensor: a tensor as is, a numpy array converted (to ``like``'s
    dtype and device when given, else a float tensor), None kept; anything else raises
    TypeError naming what is expected."""
    if value is None or isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        if not (np.issubdtype(value.dtype, np.number) or value.dtype == np.bool_):
            raise TypeError(f"{owner}: {name} must be numeric, got a numpy array of dtype "
                            f"{value.dtype}")
        tensor = torch.from_numpy(np.ascontiguousarray(value))
        if like is not None:
            return tensor.to(dtype=like.dtype, device=like.device)
        return tensor if tensor.is_floating_point() else tensor.to(torch.get_default_dtype())
    raise TypeError(f"{owner}: {name} must be a torch.Tensor or a numpy array, got "
                    f"{type(value).__name__}")


class LossInputs:
    """What every loss does with its inputs, done once: the arguments named in
    `TENSOR_ARGUMENTS` may be numpy arrays, which become tensors (the first of them,
    the prediction, a float tensor; the others like it); anything else is a
    TypeError that names what is expected. Each subclass's ``__call__`` is wrapped
    when the class is defined, so a loss added later cannot miss it."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        call = cls.__dict__.get("__call__")
        if call is None or getattr(call, "_loss_inputs", False):
            return
        signature = inspect.signature(call)
        names = [name for name in signature.parameters if name in TENSOR_ARGUMENTS]
        if not names:
            return

        @functools.wraps(call)
        def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(self, *args, **kwargs)
            like = None
            owner = type(self).__name__
            for name in names:
                if name in bound.arguments:
                    value = as_loss_input(bound.arguments[name], name, owner, like)
                    bound.arguments[name] = value
                    if like is None and isinstance(value, Tensor) and value.is_floating_point():
                        like = value
            return call(*bound.args, **bound.kwargs)

        checked._loss_inputs = True  # type: ignore[attr-defined]
        cls.__call__ = checked  # type: ignore[method-assign]


class SolverLoss(LossInputs):
    """A loss that holds a compiled solver as ``self.solver``, and still deep-copies and
    pickles with every backend.

    A compiled solver holds native models, locks and worker pools, none of which
    can be copied; like a layer, a loss therefore keeps a recipe (the spec and the
    backend config, with the backend that ``"auto"`` chose) and rebuilds its solver
    on first use after ``copy.deepcopy``, ``pickle`` or ``torch.save``. Every loss
    that solves inherits this by subclassing; it only assigns ``self.solver``.
    """

    @property
    def solver(self) -> Solver:
        solver = self.__dict__.get("_solver")
        if solver is None:
            from ..backends.registry import make_solver

            spec, config = self.__dict__["_solver_recipe"]
            solver = self.__dict__["_solver"] = make_solver(spec, config)
            adopt = getattr(solver.kernel, "adopt", None)  # keep the original's race winner
            if adopt is not None:
                adopt(self.__dict__.get("_race"))
        return solver

    @solver.setter
    def solver(self, solver: Solver) -> None:
        self.__dict__["_solver"] = solver
        config = solver.config
        # a BackendConfig: pin the backend "auto" chose, unless "auto" races (a copy then
        # races too, starting from the original's winner: see __getstate__)
        if hasattr(config, "model_copy") and not hasattr(solver.kernel, "adopt"):
            config = config.model_copy(update={"name": solver.backend})
        self.__dict__["_solver_recipe"] = (solver.spec, config)

    @property
    def cached_solver(self) -> Solver:
        """``self.solver``, or the solution cache around it when ``self.solve_ratio < 1``
        (built on first use, so a copied loss wraps its own rebuilt solver)."""
        if getattr(self, "solve_ratio", 1.0) >= 1.0:
            return self.solver
        cached = self.__dict__.get("_cached")
        if cached is None or cached.exact is not self.solver:
            from ..backends.pool import CachedSolver

            cached = self.__dict__["_cached"] = CachedSolver(
                self.solver, self.solve_ratio, self.pool, self.generator)
        return cached

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_solver", None)
        state.pop("_cached", None)  # a cache around the solver, rebuilt with it
        outcome = getattr(getattr(self.__dict__.get("_solver"), "kernel", None), "outcome", None)
        if callable(outcome) and outcome() is not None:
            state["_race"] = outcome()  # "auto"'s race winner (plain data)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
