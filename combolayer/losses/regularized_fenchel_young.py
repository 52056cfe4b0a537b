"""The L2-regularised Fenchel-Young loss, RFY (Dalle et al. 2022; PyEPO's RFY)."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ..backends.registry import as_solver
from ..backends.solver import KnownBound, check_costs, inner
from ..errors import InputError
from ..estimators.frank_wolfe import away_step_frank_wolfe, known_oracle, working_dtype
from ..specs.base import is_real
from .base import SolverLoss, check_number, check_reduction, check_solution, reduce


class RegularizedFenchelYoungLoss(SolverLoss):
    """The Fenchel-Young loss of the L2 regulariser ``Omega(y) = lam/2 ||y||^2``.

    With ``c`` the predicted min-sense cost and
    ``y_lam = argmin_{mu in conv(Y)} <c, mu> + Omega(mu)`` (computed by
    Frank-Wolfe, see `combolayer.RegularizedFrankWolfe`):

        loss = Omega(y_true) - Omega(y_lam) + <c, y_true - y_lam>    (>= 0, convex in c)
        d loss / d c = y_true - y_lam                                (Danskin)

    so no Jacobian of the Frank-Wolfe iterate is needed. PyEPO's
    ``regularizedFrankWolfeFenchelYoung`` (RFY) with ``lambd = lam``.

    With a known cost ``k`` (`combolayer.ILP.known_cost`, min form) the regulariser
    counts it over whole solutions, ``y_lam`` is the outputs of
    ``mu = argmin_{mu in conv(X)} <c, mu_y> + <k, mu> + Omega(mu_y)`` (as in
    `combolayer.RegularizedFrankWolfe`), and

        loss = Omega(y_true) - Omega(y_lam) + <c, y_true - y_lam> + <k[:N], y_true> - <k, mu>

    with the same gradient ``y_true - y_lam``; the known cost of the target's
    auxiliaries, which ``y_true`` does not give, is a constant, left out (so the value
    is >= 0 up to ``-<k[N:], aux_true>``). A known cost of each instance
    (``known_cost=``) is added to the spec's and counted the same way.

    Args:
        spec: the problem: a spec, a compiled `Solver` or a ComboLayer.
        lam: the regularisation strength (> 0).
        max_iter: Frank-Wolfe's step cap.
        tol: Frank-Wolfe's gap tolerance (each instance stops below it).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` over instances.
        backend: a backend name/config to compile a spec with.

    Reference: Dalle, Baty, Bouvier, Parmentier, "Learning with Combinatorial
    Optimization Layers: a Probabilistic Approach", arXiv:2207.13513, 2022;
    Blondel, Martins, Niculae, "Learning with Fenchel-Young Losses", JMLR 2020.
    """

    counts_known_cost = True  # the regulariser counts it over whole solutions

    def __init__(self, spec: Any, lam: float = 1.0, max_iter: int = 10_000, tol: float = 1e-6,
                 reduction: str = "mean", backend: Any = "auto") -> None:
        lam = check_number("RegularizedFenchelYoungLoss lam", lam, above=0)
        tol = check_number("RegularizedFenchelYoungLoss tol", tol, least=0)
        if not (is_real(max_iter, integer=True) and max_iter >= 1):
            raise InputError(f"RegularizedFenchelYoungLoss max_iter must be an int >= 1, "
                             f"got {max_iter!r}")
        self.solver = as_solver(spec, backend)
        self.spec = self.solver.spec
        self.lam, self.max_iter, self.tol = float(lam), max_iter, float(tol)
        self.reduction = check_reduction(reduction)

    def __repr__(self) -> str:
        return f"RegularizedFenchelYoungLoss({self.spec.label}, lam={self.lam})"

    def __call__(self, cost_pred: Tensor, y_true: Tensor,
                 known_cost: Tensor | None = None) -> Tensor:
        """The loss; ``known_cost``, optional, is a known cost of each instance
        (``(*batch, num_vars)`` or ``(num_vars,)``, the spec's sense), added to the spec's
        own and counted as the spec's is (``k`` above is then per instance). Half-precision
        inputs are computed in float32 (`working_dtype`), the loss returned in their dtype."""
        check_costs(self.spec, cost_pred, "cost_pred")
        y_true = check_solution(self.solver, y_true, cost_pred, "y_true")
        work = working_dtype(cost_pred.dtype)
        y_true = y_true.to(work)
        c = self.solver.sign * cost_pred.to(work)
        n = self.solver.num_outputs
        flat = c.detach().reshape(-1, n)
        known = self.instance_known(known_cost, c)
        if known is None:
            oracle = known_oracle(self.solver, self.lam)
        else:  # flat instances, as Frank-Wolfe hands them to the oracle
            known = known.reshape(-1, self.solver.num_vars)
            oracle = known_oracle(KnownBound(self.solver, known), self.lam)
        mu, _, _, mu_known = away_step_frank_wolfe(
            oracle, -flat / self.lam, self.max_iter, self.tol, linear=True)
        y_lam = mu.reshape(c.shape)
        k = len(self.spec.cost_shape)
        omega = 0.5 * self.lam * (inner(y_true, y_true, k) - inner(y_lam, y_lam, k))
        loss = omega + inner(c, y_true - y_lam, k)
        if self.solver.known is not None or known is not None:
            # <k[:N], y_true> - <k, mu> (mu_known: <k, mu> / lam)
            flat_true = y_true.reshape(-1, n)
            on_true = self.target_known_value(flat_true, known)
            loss = loss + (on_true - self.lam * mu_known).reshape(loss.shape)
        return reduce(loss, self.reduction).to(cost_pred.dtype)

