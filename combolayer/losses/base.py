"""What every loss shares: reductions and shape checks on solutions."""

from __future__ import annotations

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


class SolverLoss:
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
