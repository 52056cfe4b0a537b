"""Blackbox backpropagation (Vlastelica et al., ICLR 2020): one extra solver call."""

from __future__ import annotations

from typing import ClassVar

from pydantic import field_validator
from torch import Tensor

from ..backends.solver import Solver, check_costs
from ..errors import InputError
from .base import Estimator, Positive, solve_samples

__all__ = ["Blackbox"]


def interpolation(solver: Solver, lam: float, grad: Tensor, costs: Tensor, eps: Tensor,
                samples: Tensor, per_instance: bool = False) -> Tensor:
    """Blackbox's backward at (perturbed) solver inputs ``c + eps_s``, shared by
    [`Blackbox`][combolayer.Blackbox] (``eps = 0``, one sample) and [`IMLE`][combolayer.IMLE]:
    ``dL/dc = 1/S sum_s (y(c + lam dL/dy + eps_s) - samples_s) / lam``, with all
    S shifted solves in one batched call. ``per_instance`` multiplies ``lam`` by
    the number of instances in the batch (see [`Blackbox`][combolayer.Blackbox])."""
    step = lam * (costs.numel() // solver.num_outputs if per_instance else 1)
    moved = (costs + step * grad + eps).expand_as(samples)  # (S, *costs.shape)
    try:  # checked like forward costs: a huge lam must not reach the solver (SCIP: bare
        # "error in input data!")
        check_costs(solver.spec, moved, "the shifted costs c + lam * dL/dy")
    except ValueError as error:
        raise InputError(f"{error}; lower lam (got lam={lam:g})") from None
    shifted = solve_samples(solver, moved)
    return (shifted - samples).mean(0) / step


class Blackbox(Estimator):
    """Blackbox backpropagation: the gradient of a piecewise-linear interpolation.

    With ``c`` the solver input and ``L`` the loss, ``c' = c + lam * dL/dy`` and
    ``dL/dc = (y(c') - y(c)) / lam``, each instance on its own; one extra batched
    solver call per backward.

    Args:
        lam: the interpolation step on ``dL/dy`` as it comes (the paper's code, PyEPO's
            ``lambd``): ``c' = c + lam * dL/dy``, ``dL/dc = (y(c') - y(c)) / lam``.
        reduction: ``"sum"`` (default: the formula above, for any loss) or ``"mean"``:
            ``lam`` per instance for a loss averaged over the batch, whose gradient is
            divided by the batch size ``B``, undone by a step of ``lam * B * dL/dy``,
            so ``lam`` means the same at every batch size. A paper's lambda for a mean
            loss at batch size ``B`` is ``lam = lambda / B`` there.

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
    compiles_whole: ClassVar[bool] = True

    lam: Positive = 20.0
    reduction: str = "sum"

    @field_validator("reduction")
    @classmethod
    def _check_reduction(cls, value: str) -> str:
        if value not in ("mean", "sum"):
            raise InputError(f"Blackbox reduction must be 'mean' or 'sum' (how the loss "
                             f"reduces over the batch), got {value!r}")
        return value

    def forward(self, solver, costs, *, target, training):
        solution = solver.solve_min(costs)
        # One unperturbed sample: eps = 0, samples = the solution.
        return solution, (costs.new_zeros(()), solution[None])

    def saved_like(self, solver, costs, training):
        return costs.new_empty(()), costs.new_empty((1, *costs.shape))

    def backward(self, solver, grad, costs, eps, samples):
        return interpolation(solver, self.lam, grad, costs, eps, samples,
                              per_instance=self.reduction == "mean")
