"""QPTL (Wilder, Dilkina, Tambe, AAAI 2019): the LP relaxation with a quadratic term,
differentiated through its optimality conditions by cvxpylayers."""

from __future__ import annotations

from typing import ClassVar

from ._relaxation import RelaxationEstimator
from .base import Positive

__all__ = ["QPTL"]


class QPTL(RelaxationEstimator):
    """Quadratic smoothing of the LP relaxation: in training mode the layer returns

        x*(c, A, b) = argmin_x c . x + gamma/2 |x|^2  over the LP relaxation
                      (the spec's rows and bounds, and the per-call rows A x <= b),

    a fractional point, and the gradient is that of ``x*`` in ``c``, ``A`` and ``b``
    (the KKT conditions differentiated by cvxpylayers, exact up to the conic
    solver's ``tolerance``). Eval mode (``layer.eval()``) solves the exact ILP.

    ``gamma`` trades smoothness for closeness to the LP vertex: the relaxed
    solution moves away from a vertex by about ``|c| / gamma``, so scale it with the
    costs. Costs reach the relaxation after the layer's projection and sense folding.

    Needs the optional extra ``[cvxpylayers]``; one cone program per instance on
    each forward (solved in diffcp's thread pool), one linear system per instance
    on each backward.

    Examples:
        >>> import torch, combolayer as cl
        >>> layer = cl.ComboLayer(cl.problems.TopK(n=3, k=1, sense="min"), method="qptl",
        ...                       projection="none")
        >>> y = layer(torch.tensor([0.1, 0.2, 0.9]))  # fractional in training mode

    Reference: Wilder, Dilkina, Tambe, "Melding the Data-Decisions Pipeline:
    Decision-Focused Learning for Combinatorial Optimization", AAAI 2019.
    """

    name: ClassVar[str] = "qptl"
    smoothing: ClassVar[str] = "quadratic"
    weight_field: ClassVar[str] = "gamma"

    gamma: Positive = 0.1
