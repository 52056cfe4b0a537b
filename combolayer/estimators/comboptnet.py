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

``dL/d(c, A, b)`` is the gradient of ``mean_k lambda_k P_k``, per instance. The
reference code (martius-lab/CombOptNet) also averages over the batch; here, as in
every estimator, the upstream gradient carries the loss's own reduction, so
instances are summed. An instance whose rows leave no feasible solution gets the
reference's treatment: its output is a zero vector (the dummy solution) counted
as incorrect, so the constraint mismatch pulls the rows towards the feasible
targets ``y'_k`` (``on_infeasible="flag"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar

import torch
from pydantic import Field
from torch import Tensor

from ..backends.rows import FEASIBILITY_TOL
from ..backends.solver import Solver
from ..specs.canonical import canonical_form
from .base import Estimator

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


def mismatch(c: Tensor, A: Tensor, b: Tensor, y: Tensor, grad: Tensor, lower: Tensor,
             upper: Tensor, infeasible: Tensor, tau: float | None, clip_to_box: bool = True,
             canonical: bool = False, fixed_ok: Callable | None = None) -> Tensor:
    """CombOptNet's total mismatch, summed over instances (a scalar whose gradient in
    ``c``, ``A`` and ``b`` is the backward pass). ``c (B, n)`` minimisation costs on
    every variable, ``A (B, m, n)``, ``b (B, m)``, ``y (B, n)`` the solutions, ``grad``
    ``(B, n)`` the incoming ``dL/dy``, ``lower``/``upper`` ``(n,)`` the box,
    ``infeasible (B,)`` the flagged instances; ``fixed_ok(points) -> bool`` tells
    whether points ``(B, K, n)`` meet the spec's fixed constraints (None: no such)."""
    dy = -grad
    if clip_to_box:
        step = y + torch.sign(dy)
        dy = dy * ((step >= lower) & (step <= upper)).to(dy)
    delta, lambdas = delta_basis(dy, canonical)
    target = y[:, None, :] + delta  # (B, K, n)
    norms = A.norm(dim=-1) + EPS
    to_target = signed_distance(A, b, target, norms)  # (B, K, m)
    feasible_rows = (to_target <= 0).all(dim=-1).to(c)  # (B, K)
    inside = ((target >= lower) & (target <= upper)).all(dim=-1)
    if fixed_ok is not None:
        inside = inside & fixed_ok(target)
    inside = inside.to(c)
    # the target is y itself (delta is exact: steps of -1, 0, 1)
    correct = (delta == 0).all(dim=-1).to(c) * (1 - infeasible.to(c))[:, None]

    cost = torch.relu((delta * c[:, None, :]).sum(-1)) * inside * feasible_rows
    near = softmin(torch.relu(-signed_distance(A, b, y, norms)), tau, dim=-1)  # (B,)
    beyond = torch.relu(to_target).sum(-1)  # (B, K)
    rows = (near[:, None] * feasible_rows + beyond * (1 - feasible_rows)) * inside * (1 - correct)
    return ((rows + cost) * lambdas).mean(dim=-1).sum()


class CombOptNet(Estimator):
    """CombOptNet's backward pass: gradients for the costs and for per-call rows
    ``A x <= b`` (``layer(w, A=A, b=b)`` with ``A``/``b`` requiring grad), from one
    exact solve per instance on the forward pass and none on the backward.

    Without per-call rows it gives the costs' gradient only (the spec's own
    constraints are the fixed part of the feasible set). See the module docstring for
    the formulas; ``tau`` is the softmin temperature over the rows (the paper's
    random-constraints experiments use 0.5; None takes the minimum),
    ``clip_to_box`` drops moves that leave the variables' bounds, and
    ``canonical_basis`` uses unit steps instead of the nested ones.

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

    tau: float | None = Field(default=0.5, ge=0)
    clip_to_box: bool = True
    canonical_basis: bool = False

    def forward(self, solver, costs, *, target, training, A=None, b=None):
        if solver.num_aux:
            y, aux = solver.solve_min(costs, return_aux=True)
        else:
            y = solver.solve_min(costs)
            aux = y.new_zeros((*y.shape[: y.dim() - len(solver.cost_shape)], 0))
        flags = getattr(solver, "last_infeasible", None)
        count = y.numel() // solver.num_outputs
        infeasible = (torch.as_tensor(flags, dtype=torch.bool, device=y.device)
                      if flags is not None and len(flags) == count
                      else torch.zeros(count, dtype=torch.bool, device=y.device))
        return y, (y.detach(), aux.detach(), infeasible)

    def backward(self, solver: Solver, grad: Tensor, costs: Tensor, A: Tensor | None,
                 b: Tensor | None, y: Tensor, aux: Tensor, infeasible: Tensor) -> tuple:
        n_out, n = solver.num_outputs, solver.num_vars
        count = costs.numel() // n_out
        form = canonical_form(solver.spec, lazy=True)
        lower = torch.as_tensor(form.lower[:n]).to(costs)
        upper = torch.as_tensor(form.upper[:n]).to(costs)
        known = getattr(solver, "known", None)
        with torch.enable_grad():
            c = costs.detach().reshape(count, n_out).requires_grad_(True)
            c_full = torch.cat([c, c.new_zeros(count, n - n_out)], dim=1)
            if known is not None:
                c_full = c_full + torch.as_tensor(known[:n]).to(c_full)
            if A is None:  # no per-call rows: the costs' gradient only
                A_in, b_in = costs.new_zeros(count, 0, n), costs.new_zeros(count, 0)
            else:
                A_in = A.detach().to(costs).reshape(count, -1, n).requires_grad_(True)
                b_in = b.detach().to(costs).reshape(count, -1).requires_grad_(True)
            solution = torch.cat([y.reshape(count, n_out), aux.reshape(count, -1)], 1).to(costs)
            g = torch.cat([grad.reshape(count, n_out), grad.new_zeros(count, n - n_out)], 1)
            total = mismatch(c_full, A_in, b_in, solution, g.to(costs), lower, upper,
                             infeasible.reshape(count), self.tau, self.clip_to_box,
                             self.canonical_basis, _fixed_check(form, n))
            inputs = [c] if A is None else [c, A_in, b_in]
            grads = torch.autograd.grad(total, inputs, allow_unused=True)
        grads = [torch.zeros_like(x) if d is None else d for x, d in zip(inputs, grads)]
        d_costs = grads[0].reshape(costs.shape)
        if A is None:
            return d_costs, None, None
        return d_costs, grads[1].reshape(A.shape).to(A), grads[2].reshape(b.shape).to(b)


def _fixed_check(form, n: int):
    """``points (B, K, n) -> (B, K)`` bool: whether points meet the spec's own rows (the
    counterpart of the reference's box: a target outside them is no answer any cost or
    learned row could give), or None when the spec has no rows."""
    if not (form.A_ub.shape[0] or form.A_eq.shape[0]) or form.num_vars != n:
        return None
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
