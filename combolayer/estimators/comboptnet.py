"""CombOptNet (Paulus et al., ICML 2021): gradients for the costs and the constraints
``A x <= b`` of an ILP solved by any exact solver.

The backward pass reads the incoming gradient as a direction ``dy = -dL/dy`` in
which the solution should move, writes it as a positive combination of integer
steps ``dy = sum_k lambda_k delta_k`` (``delta_k``: the signs of the ``n - k``
largest entries of ``dy``, ``lambda_k`` the gaps between its sorted magnitudes),
and for each target ``y'_k = y + delta_k`` differentiates a "mismatch" that is
zero once the ILP would return ``y'_k``:

- costs: ``max(<c, y'_k> - <c, y>, 0)`` when ``y'_k`` is feasible (otherwise no
  cost could make it the answer);
- constraints, when ``y'_k`` is feasible for the rows: the softmin (temperature
  ``tau``) over the rows of ``max(-d_j(y), 0)``, ``d_j(x) = (a_j x - b_j) /
  ||a_j||`` the signed distance, which moves the nearest row onto ``y``; when
  ``y'_k`` violates rows: ``sum_j max(d_j(y'_k), 0)``, which moves the violated
  rows past ``y'_k``;
- nothing when ``y'_k`` leaves the variables' box (or the spec's own, fixed
  constraints, the box's counterpart here) or equals ``y``.

``dL/d(c, A, b)`` is the gradient of ``mean_k lambda_k P_k``, per instance
(`mismatch`), taken in closed form (`mismatch_grad`) rather than by autograd through
the mismatch's graph: half the time, on a step of 8 instances. The reference code
(martius-lab/CombOptNet) also averages over the batch; here, as in every estimator,
the upstream gradient carries the loss's own reduction, so instances are summed. An
instance whose rows leave no feasible solution gets the reference's treatment: its
output is a zero vector (the dummy solution) counted as incorrect, so the constraint
mismatch pulls the rows towards the feasible targets ``y'_k``
(``on_infeasible="flag"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import ClassVar, NamedTuple

import torch
from pydantic import Field
from torch import Tensor

from ..backends.outcome import INFEASIBLE
from ..backends.rows import FEASIBILITY_TOL
from ..backends.solver import Solver
from ..func_transforms import outside_transforms
from ..specs.canonical import canonical_form
from .base import Estimator, whole_costs

__all__ = ["CombOptNet"]

#: Added to the row norms in the signed distance (the reference's epsilon).
EPS = 1e-8


def delta_basis(dy: Tensor, canonical: bool = False) -> tuple[Tensor, Tensor]:
    """``(delta, lambdas)`` with ``dy = sum_k lambdas[..., k] * delta[..., k, :]``:
    ``delta`` ``(B, n, n)`` integer steps and ``lambdas`` ``(B, n)`` non-negative
    weights. ``canonical``: the unit vectors ``sign(dy_i) e_i`` with ``|dy_i|``;
    otherwise the signed indicators of the ``n - k`` largest ``|dy|`` (CombOptNet's
    default basis, which keeps the largest moves together)."""
    n = dy.shape[-1]
    if canonical:
        return torch.sign(dy)[:, None, :] * torch.eye(n, dtype=dy.dtype, device=dy.device), \
            dy.abs()
    order = dy.abs().argsort(dim=-1, stable=True)
    ranks = order.argsort(dim=-1)
    steps = torch.arange(n, device=dy.device)
    # delta_k includes entry i when its rank (ascending |dy|) is at least k
    delta = (ranks[:, None, :] >= steps[None, :, None]).to(dy) * torch.sign(dy + EPS)[:, None, :]
    sorted_abs = dy.abs().gather(-1, order)
    lambdas = torch.diff(sorted_abs, dim=-1, prepend=torch.zeros_like(sorted_abs[:, :1]))
    return delta, lambdas


def signed_distance(A: Tensor, b: Tensor, x: Tensor, norms: Tensor | None = None) -> Tensor:
    """``(a_j x - b_j) / (||a_j|| + EPS)``: positive where ``x`` violates row ``j``.
    ``A (B, m, n)``, ``b (B, m)``, ``x (B, n)`` or ``(B, K, n)`` -> ``(B, m)`` or
    ``(B, K, m)``; ``norms`` ``(B, m)``, the rows' ``||a_j|| + EPS`` if computed."""
    if norms is None:
        norms = A.norm(dim=-1) + EPS
    points = x if x.dim() == 3 else x[:, None, :]
    distance = (points @ A.transpose(-1, -2) - b[:, None, :]) / norms[:, None, :]
    return distance if x.dim() == 3 else distance[:, 0]


def softmin(values: Tensor, tau: float | None, dim: int) -> Tensor:
    """``-tau * log(mean(exp(-values / tau)))`` (the reference's shifted log-sum-exp);
    the minimum when ``tau`` is None or 0."""
    if values.shape[dim] == 0:  # no rows: nothing to move
        return values.sum(dim=dim)
    if not tau:
        return values.min(dim=dim).values
    return -tau * (torch.logsumexp(-values / tau, dim=dim) - math.log(values.shape[dim]))


def softmin_weights(values: Tensor, tau: float | None, dim: int) -> Tensor:
    """The derivative of `softmin` in ``values``: ``softmax(-values / tau)``, or the
    indicator of the entry the minimum takes (the one autograd picks) when ``tau`` is
    None or 0."""
    if tau:
        return torch.softmax(-values / tau, dim=dim)
    if values.shape[dim] == 0:  # no rows
        return values
    first = values.min(dim=dim, keepdim=True).indices
    return torch.zeros_like(values).scatter_(dim, first, 1.0)


class Moves(NamedTuple):
    """What the mismatch is built from, per instance (``B``), target (``K``) and row
    (``m``): the steps ``delta (B, K, n)`` with their weights ``lambdas (B, K)``, the
    targets ``y'_k = y + delta_k``, the rows' ``norms (B, m)`` (``||a_j|| + EPS``), the
    signed distances ``to_target (B, K, m)`` and ``to_y (B, m)``, and three ``(B, K)``
    masks: ``feasible`` (the target meets every row), ``inside`` (it meets the box and
    the fixed rows) and ``wrong`` (it is not the instance's correct answer)."""

    delta: Tensor
    lambdas: Tensor
    targets: Tensor
    norms: Tensor
    to_target: Tensor
    to_y: Tensor
    feasible: Tensor
    inside: Tensor
    wrong: Tensor


def moves(A: Tensor, b: Tensor, y: Tensor, grad: Tensor, lower: Tensor, upper: Tensor,
          infeasible: Tensor, clip_to_box: bool = True, canonical: bool = False,
          fixed_ok: Callable | None = None) -> Moves:
    """The targets of the incoming gradient ``grad`` and where they lie (the arguments
    are `mismatch`'s)."""
    dy = -grad
    if clip_to_box:
        step = y + torch.sign(dy)
        dy = dy * ((step >= lower) & (step <= upper)).to(dy)
    delta, lambdas = delta_basis(dy, canonical)
    targets = y[:, None, :] + delta
    norms = A.norm(dim=-1) + EPS
    to_target = signed_distance(A, b, targets, norms)
    inside = ((targets >= lower) & (targets <= upper)).all(dim=-1)
    if fixed_ok is not None:
        inside = inside & fixed_ok(targets)
    # the target is y itself (delta is exact: steps of -1, 0, 1) and y is a solution
    correct = (delta == 0).all(dim=-1) & ~infeasible[:, None]
    return Moves(delta, lambdas, targets, norms, to_target, signed_distance(A, b, y, norms),
                 (to_target <= 0).all(dim=-1).to(y), inside.to(y), (~correct).to(y))


def mismatch(c: Tensor, A: Tensor, b: Tensor, y: Tensor, grad: Tensor, lower: Tensor,
             upper: Tensor, infeasible: Tensor, tau: float | None, clip_to_box: bool = True,
             canonical: bool = False, fixed_ok: Callable | None = None) -> Tensor:
    """CombOptNet's total mismatch, summed over instances: the scalar whose gradient in
    ``c``, ``A`` and ``b`` is the backward pass (`mismatch_grad` gives it in closed
    form). ``c (B, n)`` minimisation costs on every variable, ``A (B, m, n)``, ``b (B,
    m)``, ``y (B, n)`` the solutions, ``grad (B, n)`` the incoming ``dL/dy``,
    ``lower``/``upper`` ``(n,)`` the box, ``infeasible (B,)`` the flagged instances;
    ``fixed_ok(points) -> bool`` tells whether points ``(B, K, n)`` meet the spec's
    fixed constraints (None: no such)."""
    at = moves(A, b, y, grad, lower, upper, infeasible, clip_to_box, canonical, fixed_ok)
    cost = torch.relu((at.delta * c[:, None, :]).sum(-1)) * at.inside * at.feasible
    near = softmin(torch.relu(-at.to_y), tau, dim=-1)  # (B,)
    beyond = torch.relu(at.to_target).sum(-1)  # (B, K)
    rows = (near[:, None] * at.feasible + beyond * (1 - at.feasible)) * at.inside * at.wrong
    return ((rows + cost) * at.lambdas).mean(dim=-1).sum()


def mismatch_grad(c: Tensor, A: Tensor, b: Tensor, y: Tensor, grad: Tensor, lower: Tensor,
                  upper: Tensor, infeasible: Tensor, tau: float | None,
                  clip_to_box: bool = True, canonical: bool = False,
                  fixed_ok: Callable | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """``d mismatch / d(c, A, b)`` in closed form (the same arguments; equal to
    autograd's, tests/test_learned_rows.py), without building the mismatch's graph.

    With ``d_j(x) = (a_j x - b_j) / N_j`` and ``N_j = ||a_j|| + EPS``: ``d d_j / d b_j =
    -1 / N_j`` and ``d d_j / d a_j = (x - d_j(x) a_j / ||a_j||) / N_j``, summed over the
    points ``x`` (``y`` and the targets) with the weights the mismatch puts on
    ``d_j(x)``."""
    at = moves(A, b, y, grad, lower, upper, infeasible, clip_to_box, canonical, fixed_ok)
    weight = at.lambdas / at.lambdas.shape[-1]  # the mean over the targets
    # costs: relu(<delta_k, c>) where the target could be the answer
    on_cost = weight * at.inside * at.feasible * ((at.delta * c[:, None, :]).sum(-1) > 0)
    d_c = (on_cost[:, :, None] * at.delta).sum(1)
    # rows: the softmin of relu(-d(y)) for feasible targets, sum relu(d(y'_k)) otherwise
    live = weight * at.inside * at.wrong
    on_near = (live * at.feasible).sum(-1)  # (B,)
    d_to_target = (live * (1 - at.feasible))[:, :, None] * (at.to_target > 0)  # (B, K, m)
    d_to_y = -on_near[:, None] * softmin_weights(torch.relu(-at.to_y), tau, dim=-1) \
        * (at.to_y < 0)  # (B, m)
    pull = d_to_y + d_to_target.sum(1)
    spread = d_to_y * at.to_y + (d_to_target * at.to_target).sum(1)
    points = d_to_y[:, :, None] * y[:, None, :] + d_to_target.transpose(1, 2) @ at.targets
    unit = A / A.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(A.dtype).tiny)
    d_A = (points - spread[:, :, None] * unit) / at.norms[:, :, None]
    return d_c, d_A, -pull / at.norms


class CombOptNet(Estimator):
    """CombOptNet's backward pass: gradients for the costs and for per-call rows
    ``A x <= b`` (``layer(w, A=A, b=b)`` with ``A``/``b`` requiring grad), from one
    exact solve per instance on the forward pass and none on the backward.

    Without per-call rows it gives the costs' gradient only (the spec's own
    constraints are the fixed part of the feasible set). See the module docstring for
    the formulas.

    Args:
        tau: the softmin temperature over the rows (the paper's random-constraints
            experiments use 0.5, the default; None takes the minimum).
        clip_to_box: drop moves that leave the variables' bounds.
        canonical_basis: use unit steps instead of the nested ones.

    Examples:
        >>> import torch, combolayer as cl
        >>> spec = cl.ILP(shape=[3], integrality="binary")
        >>> layer = cl.ComboLayer(spec, method="comboptnet", projection="none")
        >>> A = torch.tensor([[1.0, 1.0, 1.0]], requires_grad=True)
        >>> b = torch.tensor([1.5], requires_grad=True)
        >>> y = layer(torch.tensor([-1.0, -2.0, -3.0]), A=A, b=b)
        >>> y.tolist()
        [0.0, 0.0, 1.0]
        >>> (y - torch.tensor([0.0, 1.0, 1.0])).pow(2).sum().backward()
        >>> bool(b.grad < 0)  # raise b (descend): room for the second item
        True

    Reference: Paulus, Rolínek, Musil, Amos, Martius, "CombOptNet: Fit the Right
    NP-Hard Problem by Learning Integer Programming Constraints", ICML 2021.
    """

    name: ClassVar[str] = "comboptnet"
    row_gradients: ClassVar[bool] = True
    compiles_whole: ClassVar[bool] = True

    tau: float | None = Field(default=0.5, ge=0)
    clip_to_box: bool = True
    canonical_basis: bool = False

    def forward(self, solver, costs, *, target, training, A=None, b=None):
        statuses: list[str] = []
        if solver.num_aux:
            y, aux = solver.solve_min(costs, return_aux=True, statuses=statuses)
        else:
            y = solver.solve_min(costs, statuses=statuses)
            aux = y.new_zeros((*y.shape[: y.dim() - len(solver.cost_shape)], 0))
        count = y.numel() // solver.num_outputs
        if INFEASIBLE in statuses:  # flagged by per-call rows (on_infeasible="flag")
            infeasible = torch.tensor([status == INFEASIBLE for status in statuses],
                                      device=y.device)
        else:
            infeasible = torch.zeros(count, dtype=torch.bool, device=y.device)
        return y, (y.detach(), aux.detach().to(y), infeasible)

    def saved_like(self, solver, costs, training, A=None, b=None):
        batch = costs.shape[: costs.dim() - len(solver.cost_shape)]
        count = costs.numel() // solver.num_outputs
        return (torch.empty_like(costs), costs.new_empty((*batch, solver.num_aux)),
                torch.empty(count, dtype=torch.bool, device=costs.device))

    def backward(self, solver: Solver, grad: Tensor, costs: Tensor, A: Tensor | None,
                 b: Tensor | None, y: Tensor, aux: Tensor, infeasible: Tensor) -> tuple:
        n_out, n = solver.num_outputs, solver.num_vars
        count = costs.numel() // n_out
        form = canonical_form(solver.spec, lazy=True)
        lower = torch.as_tensor(form.lower[:n]).to(costs)
        upper = torch.as_tensor(form.upper[:n]).to(costs)
        c = whole_costs(solver, costs)  # the mismatch is on the whole cost, known ones too
        if A is None:  # no per-call rows: the costs' gradient only
            A_in, b_in = costs.new_zeros(count, 0, n), costs.new_zeros(count, 0)
        else:
            # the row count named, not -1: an empty batch reshapes too
            m = A.shape[-2]
            A_in, b_in = A.to(costs).reshape(count, m, n), b.to(costs).reshape(count, m)
        solution = torch.cat([y.reshape(count, n_out), aux.reshape(count, n - n_out)],
                             1).to(costs)
        g = torch.cat([grad.reshape(count, n_out), grad.new_zeros(count, n - n_out)], 1)
        d_c, d_A, d_b = mismatch_grad(c, A_in, b_in, solution, g.to(costs), lower, upper,
                                      infeasible.reshape(count), self.tau, self.clip_to_box,
                                      self.canonical_basis, _fixed_check(form, n))
        d_costs = d_c[:, :n_out].reshape(costs.shape)
        if A is None:
            return d_costs, None, None
        return d_costs, d_A.reshape(A.shape).to(A), d_b.reshape(b.shape).to(b)


@lru_cache(maxsize=64)
def _fixed_check(form, n: int):
    """``points (B, K, n) -> (B, K)`` bool: whether points meet the spec's own rows (the
    counterpart of the reference's box: a target outside them is no answer any cost or
    learned row could give), or None when the spec has no rows. Built once per form
    (`canonical_form` shares one per spec), not on every backward."""
    if not (form.A_ub.shape[0] or form.A_eq.shape[0]) or form.num_vars != n:
        return None
    with outside_transforms():  # cached: never a torch.func transform's wrapper
        A_ub = torch.as_tensor(form.A_ub.toarray())
        b_ub = torch.as_tensor(form.b_ub)
        A_eq = torch.as_tensor(form.A_eq.toarray())
        b_eq = torch.as_tensor(form.b_eq)
    tol = FEASIBILITY_TOL

    def ok(points: Tensor) -> Tensor:
        result = torch.ones(points.shape[:-1], dtype=torch.bool, device=points.device)
        if A_ub.shape[0]:
            result &= (points @ A_ub.to(points).T <= b_ub.to(points) + tol).all(-1)
        if A_eq.shape[0]:
            result &= ((points @ A_eq.to(points).T - b_eq.to(points)).abs() <= tol).all(-1)
        return result

    return ok
