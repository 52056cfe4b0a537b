"""IntOpt (Mandi & Guns, NeurIPS 2020): the LP relaxation smoothed by a log barrier,
differentiated through its optimality conditions by cvxpylayers."""

from __future__ import annotations

from typing import ClassVar

from ._relaxation import RelaxationEstimator
from .base import Positive

__all__ = ["IntOpt"]


class IntOpt(RelaxationEstimator):
    """Log-barrier smoothing of the LP relaxation: in training mode the layer returns

        x*(c, A, b) = argmin_x c . x - mu * sum(log(slack))

    where the slacks are those of every inequality (the spec's ``<=`` rows and the
    per-call rows ``A x <= b``) and of every finite variable bound, with the
    equality rows kept as constraints; the gradient is that of ``x*`` in ``c``,
    ``A`` and ``b``, computed by cvxpylayers. Eval mode solves the exact ILP.

    Mandi and Guns stop a homogeneous self-dual interior-point method once the
    barrier weight falls below a threshold ``mu`` and differentiate there; here the
    barrier problem at weight ``mu`` is solved to the conic solver's ``tolerance``
    and differentiated exactly, the same smoothed map without their early stop.
    The barrier needs a strictly feasible point: rows that leave none (an
    equality-tight row, an empty interior) raise `InfeasibleError`.

    Needs the optional extra ``[cvxpylayers]``; the logarithms make each instance an
    exponential-cone program for SCS, slower than QPTL's quadratic one.

    Reference: Mandi, Guns, "Interior Point Solving for LP-based prediction+optimisation",
    NeurIPS 2020.
    """

    name: ClassVar[str] = "intopt"
    smoothing: ClassVar[str] = "log_barrier"
    weight_field: ClassVar[str] = "mu"

    mu: Positive = 0.1
