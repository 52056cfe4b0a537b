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
