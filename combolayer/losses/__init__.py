"""Losses for decision-focused learning.

A loss maps (cost, target) to a scalar and holds a compiled solver; it is
not a layer. The problem is given as a value: a spec, a compiled
[`Solver`][combolayer.backends.Solver] (``cl.make_solver(...)``) or a
[`ComboLayer`][combolayer.ComboLayer], whose solver is then shared. Like the
estimators, the losses fold the objective sense once, ``c = solver.sign * cost``,
and are written for minimisation only; autograd carries the sign back to the
caller's costs. All solves of a call are one batch call to the solver.

Costs are ``(*batch, *cost_shape)``; a loss raises ``ValueError`` for costs
with NaN/inf or another trailing shape, and for solutions whose shape is not
the costs' (the message names expected and got).

Examples:
    >>> import torch, combolayer as cl
    >>> spec = cl.problems.TopK(n=3, k=1)
    >>> spo = cl.losses.SPOPlusLoss(spec)
    >>> cost_pred = torch.tensor([[0.0, 1.0, 2.0]], requires_grad=True)
    >>> loss = spo(cost_pred, torch.tensor([[3.0, 1.0, 2.0]]))
    >>> loss.backward()                         # cost_pred.grad = 2 (y* - y~), sign-folded
    >>> round(cl.losses.hamming(torch.tensor([1.0, 0, 0]), torch.tensor([0.0, 1, 0])).item(), 4)
    0.6667
"""

from .cave import BindingCones, CaVELoss, binding_cones
from .cmap import CMAPLoss
from .fenchel_young import FenchelYoungLoss
from .functional import hamming, loglog_recall
from .listwise_ltr import ListwiseLTRLoss
from .nce import NCELoss
from .pairwise_difference_ltr import PairwiseDifferenceLTRLoss
from .pairwise_ltr import PairwiseLTRLoss
from .perturbation_gradient import PGLoss
from .pointwise_ltr import PointwiseLTRLoss
from .regularized_fenchel_young import RegularizedFenchelYoungLoss
from .spo_plus import SPOPlusLoss

__all__ = [
    "BindingCones",
    "CMAPLoss",
    "CaVELoss",
    "FenchelYoungLoss",
    "ListwiseLTRLoss",
    "NCELoss",
    "PGLoss",
    "PairwiseDifferenceLTRLoss",
    "PairwiseLTRLoss",
    "PointwiseLTRLoss",
    "RegularizedFenchelYoungLoss",
    "SPOPlusLoss",
    "binding_cones",
    "hamming",
    "loglog_recall",
]
