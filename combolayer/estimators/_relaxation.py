"""The smoothed LP relaxation that "qptl" and "intopt" differentiate, as a cvxpylayers layer.

For a spec's canonical form (minimisation costs ``c`` on the N outputs, a known
cost ``k`` on all ``V`` variables, rows ``A_ub x <= b_ub``, ``A_eq x == b_eq``,
bounds ``l <= x <= u``), per-call rows ``A x <= b`` and a per-call known cost ``q``
(``layer(w, known_cost=q)``, zero without one), the relaxation is

    x*(c, A, b) = argmin_x  (c, 0) . x + q . x + k . x + smoothing(x)
                  subject to the rows above, integrality dropped,

with ``smoothing`` either the quadratic ``gamma/2 |x|^2`` (QPTL) or the log
barrier ``-mu * sum(log(slack))`` over every inequality and finite bound (IntOpt)
that some point of the relaxation leaves slack; those tight everywhere (a shortest
path's source and target, fixed to 1 by the flow equations) are kept as equations,
since the barrier has no finite minimum on them.
It is built once per number of per-call rows ``m`` as a `cvxpylayers.torch.CvxpyLayer`
whose parameters are the linear cost ``(c, 0) + q`` on all ``V`` variables and, when
``m > 0``, ``A`` and ``b``; the derivatives
of ``x*`` in all three come from cvxpylayers (diffcp's implicit differentiation
of the conic program's optimality conditions).

cvxpylayers (the optional extra ``[cvxpylayers]``) is imported when the first
relaxation is built, never when combolayer is imported.

Under ``torch.compile`` the layer's solve is one custom operator
(`combolayer.layer.ops`), which can save tensors but not cvxpylayers' autograd
graph: there the relaxation is solved without a graph in `RelaxationEstimator.forward`
and again, with one, in its backward, which differentiates it (twice the conic
solves of eager mode, for a model that stays one graph).
"""

from __future__ import annotations

import concurrent.futures
import math
import threading
import warnings
import weakref
from typing import Any, ClassVar, Literal

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from ..analysis.hull import tight_rows
from ..backends.solver import KnownBound, Recorder, Solver
from ..backends.wrapper import RowBound, SolverWrapper
from ..errors import BackendUnavailable, InfeasibleError, InputError, SolverError
from ..func_transforms import transforms_active
from ..specs.base import Spec
from ..specs.canonical import canonical_form
from .base import (
    DifferentiableSolve,
    Estimator,
    Positive,
    keeps_aux,
    last_aux,
    refusing_backward,
)

Smoothing = Literal["quadratic", "log_barrier"]
#: How far the log barrier's answer may break a row (SCS's tolerance is 1e-6) before it
#: is refused: a barrier without a minimum leaves SCS tenths outside.
BARRIER_SLACK = 1e-4


def _import_cvxpylayers() -> tuple[Any, Any]:
    try:
        import cvxpy as cp
        from cvxpylayers.torch import CvxpyLayer
    except ImportError as error:
        raise BackendUnavailable(
            f"the relaxation methods 'qptl' and 'intopt' need cvxpylayers ({error.name} is "
            "missing): pip install 'combolayer[cvxpylayers]'; the methods that need no extra "
            "package are 'comboptnet' and 'score_function'"
        ) from None
    # cvxpylayers 1.2 copies tensors with np.array(..., copy=False), which numpy 2 reports
    # on every forward and backward; the copy is made either way
    warnings.filterwarnings("ignore", message="__array__ implementation doesn't accept a copy",
                            category=DeprecationWarning, module="cvxpylayers")
    return cp, CvxpyLayer


class Relaxation:
    """``x*(costs, A, b)``, the smoothed LP relaxation of ``spec`` (see the module
    docstring), differentiable in all three through cvxpylayers.

    Args:
        spec: the problem; its canonical form is taken without lazy cuts.
        smoothing: ``"quadratic"`` (``weight = gamma``) or ``"log_barrier"``
            (``weight = mu``).
        weight: the smoothing weight, > 0.
        known: the sense-folded known cost on the spec's ``num_vars`` variables, or None.
        solver_args: keyword arguments for diffcp's solve (SCS's ``eps_abs``,
            ``eps_rel``, ``max_iters``; diffcp's ``mode``).
    """

    def __init__(self, spec: Spec, smoothing: Smoothing, weight: float,
                 known: np.ndarray | None = None, solver_args: dict | None = None) -> None:
        self.form = canonical_form(spec, lazy=False)
        if self.form.separator is not None:
            raise BackendUnavailable(
                f"{spec.label} has constraints added lazily (a separator), which a relaxation "
                "written out once cannot hold; use method 'comboptnet' or 'score_function'"
            )
        self.smoothing = smoothing
        self.weight = float(weight)
        self.num_outputs = self.form.num_outputs
        self.num_vars = self.form.num_vars
        #: The spec's own variables (the outputs, then an ILP's auxiliaries): the width of
        #: a call's rows, of a known cost and of the auxiliaries returned. The canonical
        #: form may add columns after them (a ranking's or a path's flow variables),
        #: which those take as zeros, as the exact solver's rows do.
        self.spec_vars = spec.num_vars
        self.known = None if known is None else self.widen(np.asarray(known, dtype=np.float64))
        self.solver_args = dict(solver_args or {})
        #: The spec's inequalities as one ``G x <= h``: its rows, then the finite bounds.
        self.G, self.h = _inequalities(self.form)
        #: Which of them hold with equality at every point of the LP relaxation: the log
        #: barrier has no finite minimum on those, so it keeps them as equations.
        self.tight = (_tight_everywhere(self.form, self.G, self.h)
                      if smoothing == "log_barrier" else np.zeros(len(self.h), dtype=bool))
        self._layers: dict[int, Any] = {}
        self._lock = threading.Lock()

    def widen(self, values: Any) -> Any:
        """``values`` on the spec's variables (last axis ``spec_vars``), numpy or torch,
        with zeros on the form's extra columns: last axis ``num_vars``."""
        extra = self.num_vars - self.spec_vars
        if not extra:
            return values
        if isinstance(values, np.ndarray):
            return np.pad(values, [(0, 0)] * (values.ndim - 1) + [(0, extra)])
        return torch.nn.functional.pad(values, (0, extra))

    def _layer(self, m: int) -> Any:
        """The CvxpyLayer for ``m`` per-call rows, built on first use."""
        with self._lock:
            if m not in self._layers:
                self._layers[m] = self._build(m)
            return self._layers[m]

    def _build(self, m: int) -> Any:
        cp, CvxpyLayer = _import_cvxpylayers()
        form = self.form
        x = cp.Variable(self.num_vars)
        # on every variable: a call's known cost reaches the auxiliaries too
        cost = cp.Parameter(self.num_vars)
        objective = cost @ x
        if self.known is not None:
            objective = objective + self.known @ x
        parameters = [cost]
        inequalities = []  # (matrix expression, right-hand side): expression <= rhs
        loose = ~self.tight
        if loose.any():
            inequalities.append((self.G[loose] @ x, self.h[loose]))
        if m:
            A = cp.Parameter((m, self.num_vars))
            b = cp.Parameter(m)
            parameters += [A, b]
            inequalities.append((A @ x, b))
        constraints = []
        if form.A_eq.shape[0]:
            constraints.append(form.A_eq @ x == form.b_eq)
        if self.tight.any():
            constraints.append(self.G[self.tight] @ x == self.h[self.tight])
        if self.smoothing == "quadratic":
            objective = objective + self.weight / 2 * cp.sum_squares(x)
            constraints += [lhs <= rhs for lhs, rhs in inequalities]
        else:
            objective = objective - self.weight * sum(cp.sum(cp.log(rhs - lhs))
                                                      for lhs, rhs in inequalities)
        problem = cp.Problem(cp.Minimize(objective), constraints)
        return CvxpyLayer(problem, parameters=parameters, variables=[x])

    def __call__(self, costs: Tensor, A: Tensor | None = None, b: Tensor | None = None,
                 known: Tensor | None = None, whole: bool = False) -> Tensor:
        """``x*[:N]`` (with ``whole``, the spec's variables ``x*[:V]``, ``(B, V)``) for
        ``(B, N)`` minimisation costs, per-call rows ``A`` ``(B, m, V)``, ``b`` ``(B, m)``
        (or None) and a per-call known cost ``known`` ``(B, V)`` in minimisation form (or
        None; it gets no gradient), ``V`` the spec's ``num_vars`` (`widen` adds the
        form's extra columns); float64 on the CPU inside (cvxpylayers reads its parameters
        through numpy), returned in ``costs``'s dtype and on its device.

        Raises:
            InfeasibleError: the relaxation has no (strictly, for the log barrier)
                feasible point for some instance.
            SolverError: the conic solver failed otherwise.
        """
        m = 0 if A is None else A.shape[-2]
        linear = costs
        if self.num_vars > self.num_outputs:  # zero on the auxiliaries, as the solver's widen
            linear = torch.cat([costs, costs.new_zeros(costs.shape[0],
                                                       self.num_vars - self.num_outputs)], -1)
        if known is not None:
            linear = linear + self.widen(known.detach().to(linear))
        if m:
            A = self.widen(A)
        args = [t.to("cpu", torch.float64) for t in (linear, A, b)[: 3 if m else 1]]
        layer = self._layer(m)
        try:
            (x,) = layer(*args, solver_args=self.solver_args)
        except Exception as error:  # diffcp raises its own SolverError, SCS a bare one
            text = str(error)
            kind = InfeasibleError if "infeasible" in text.lower() else SolverError
            raise kind(f"the {self.smoothing} relaxation of {m} per-call rows failed for a batch "
                       f"of {costs.shape[0]}: {text}") from None
        if self.smoothing == "log_barrier":
            self._check_inside(x.detach().numpy(), *[t.detach().numpy() for t in args[1:]])
        return x[..., : self.spec_vars if whole else self.num_outputs].to(costs)

    def _check_inside(self, x: np.ndarray, A: np.ndarray | None = None,
                      b: np.ndarray | None = None) -> None:
        """Raise where the log barrier's answer ``x`` ``(B, V)`` breaks a row by more than
        `BARRIER_SLACK`: the barrier has no finite minimum where a per-call row holds with
        equality at every feasible point (it pins a variable to its bound), and SCS then
        stops at its iteration limit outside the rows ("Solved/Inaccurate")."""
        form = self.form
        broken = (x @ self.G.T - self.h).max(axis=1, initial=-np.inf)
        if len(form.b_eq):
            broken = np.maximum(broken, np.abs(x @ form.A_eq.T - form.b_eq).max(axis=1))
        if A is not None:
            broken = np.maximum(broken, (np.einsum("bmv,bv->bm", A, x) - b).max(axis=1))
        bad = np.flatnonzero(broken > BARRIER_SLACK)
        if not len(bad):
            return
        where = f"instances {bad[:10].tolist()}{' ...' if len(bad) > 10 else ''}"
        if A is None:
            raise SolverError(f"the log-barrier relaxation did not converge for {where} (a "
                              f"row broken by {broken[bad].max():.3g})")
        raise InfeasibleError(
            f"the log-barrier relaxation has no point strictly inside the rows of {where}: "
            f"a per-call row holds with equality wherever the rest hold (it pins a variable "
            f"to its bound), and the barrier has no minimum there (a row broken by "
            f"{broken[bad].max():.3g})")


def _inequalities(form: Any) -> tuple[sp.csr_matrix, np.ndarray]:
    """The canonical form's inequalities as one ``G x <= h``: ``A_ub`` first, then each
    finite lower bound (``-x_j <= -l_j``), then each finite upper bound."""
    n = form.num_vars
    lower = np.flatnonzero(np.isfinite(form.lower))
    upper = np.flatnonzero(np.isfinite(form.upper))
    identity = sp.eye(n, format="csr")
    G = sp.vstack([sp.csr_matrix(form.A_ub), -identity[lower], identity[upper]], format="csr")
    return G, np.concatenate([form.b_ub, -form.lower[lower], form.upper[upper]])


def _tight_everywhere(form: Any, G: sp.csr_matrix, h: np.ndarray) -> np.ndarray:
    """Which rows of ``G x <= h`` hold with equality at every point of ``{x : G x <= h,
    A_eq x == b_eq}`` (a shortest path's source, fixed to 1 by the flow equations): the
    hull analysis's LPs (`combolayer.analysis.hull.tight_rows`). An empty or failing
    relaxation leaves every row to the barrier, which then reports it when solved."""
    tight = np.zeros(len(h), dtype=bool)
    if len(h):
        try:
            tight[tight_rows(form, G, h)[0]] = True
        except (InfeasibleError, SolverError):
            pass
    return tight


def _batched(costs: Tensor, A: Tensor | None, b: Tensor | None, cost_shape: tuple[int, ...],
             num_vars: int) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """``(B, N)`` costs and rows ``(B, m, V)``, ``(B, m)`` broadcast onto their batch:
    the batch is what ``costs`` has ahead of the spec's ``cost_shape`` (which may have
    more than one dimension, as a matching's ``(rows, cols)``)."""
    flat = costs.reshape(-1, math.prod(cost_shape))
    if A is None:
        return flat, None, None
    batch = costs.shape[: costs.dim() - len(cost_shape)]
    m = A.shape[-2]
    A = A.expand(*batch, m, num_vars).reshape(-1, m, num_vars)
    b = b.expand(*batch, m).reshape(-1, m)
    return flat, A, b


def _each_or_dummy(relaxation: Relaxation, costs: Tensor, A: Tensor, b: Tensor,
                   solver: Any, known: Tensor | None = None, whole: bool = False) -> Tensor:
    """The batch instance by instance, after a batch whose per-call rows left some
    relaxation empty, under ``on_infeasible="flag"``: those instances get zeros with a
    zero gradient (the reference code's dummy for its LP baseline) and are flagged
    like the exact solvers' (to the caller's `Recorder` where ``solver`` is one, as the
    layer's is, or one warning with the count)."""
    found, bad = [], []
    for i in range(costs.shape[0]):
        try:
            found.append(relaxation(costs[i : i + 1], A[i : i + 1], b[i : i + 1],
                                    None if known is None else known[i : i + 1], whole))
        except InfeasibleError:
            dummy = costs[i : i + 1] * 0
            if whole:  # zeros on the auxiliaries too
                dummy = torch.cat([dummy, dummy.new_zeros(1, relaxation.spec_vars
                                                          - relaxation.num_outputs)], -1)
            found.append(dummy)
            bad.append(i)
    recorder = _wrapper_of(solver, Recorder)
    if bad and recorder is not None:
        recorder.infeasible.update(bad)
    elif bad:
        warnings.warn(f"{len(bad)} of {costs.shape[0]} instances have an empty relaxation "
                      "with their per-call rows A x <= b: their outputs are zeros, without "
                      "a gradient", RuntimeWarning, stacklevel=4)
    return torch.cat(found)


class RelaxationEstimator(Estimator):
    """Base of the relaxation methods: the training forward is `Relaxation`'s smoothed
    LP solution, differentiated by autograd through cvxpylayers in the costs and in the
    per-call rows; eval mode solves the exact ILP with the layer's solver. Under
    ``on_infeasible="flag"`` an instance whose rows leave the relaxation empty gets
    zeros and no gradient, and is flagged; otherwise `InfeasibleError` is raised. A
    per-call known cost (``layer(w, known_cost=k)``) is a linear term of the relaxed
    objective beside the spec's, and is bound to the exact solve in eval mode.

    Subclasses set ``name``, ``smoothing`` and the field named by ``weight_field``.
    """

    smoothing: ClassVar[Smoothing]
    weight_field: ClassVar[str]
    row_gradients: ClassVar[bool] = True
    compiles_whole: ClassVar[bool] = True

    #: SCS's absolute and relative tolerance for the relaxation (diffcp's solve).
    tolerance: Positive = 1e-6

    def relaxation(self, solver: Solver) -> Relaxation:
        return Relaxation(solver.spec, self.smoothing, getattr(self, self.weight_field),
                          known=getattr(solver, "known", None),
                          solver_args={"eps_abs": self.tolerance, "eps_rel": self.tolerance})

    def forward(self, solver, costs, *, target, training, A=None, b=None):
        # the compiled operator's forward (the rows and a known cost bound to ``solver``):
        # the relaxation's solution without a graph, which a tensor cannot hold; the
        # backward solves again
        if not training:
            return solver.solve_min(costs.detach()), None
        rows = (None, None) if A is None else (A.detach(), b.detach())
        with torch.no_grad():
            x = self._relaxed(_kept_relaxation(self, _unbound(solver)), solver,
                              costs.detach(), *rows, _bound_known(solver))
        return x, ()

    def saved_like(self, solver, costs, training, A=None, b=None):
        return () if training else None

    def output_aux(self, solves: list[Tensor], count: int) -> Tensor:
        """The LP solution's auxiliaries, which the training solve records after any
        solve's (`keeps_aux`); in eval mode the exact solve's."""
        return last_aux(solves, count, str(self))

    def backward(self, solver, grad, costs, A, b):
        relaxation = _kept_relaxation(self, _unbound(solver))
        known = _bound_known(solver)

        def differentiated() -> tuple[Tensor | None, ...]:
            given = [t.detach().requires_grad_() for t in (costs, A, b) if t is not None]
            with warnings.catch_warnings():  # the forward said which instances are empty
                warnings.simplefilter("ignore")
                x = self._relaxed(relaxation, solver, *given, *([None, None] if A is None
                                                                 else []), known)
            grads = torch.autograd.grad(x, given, grad, allow_unused=True)
            grads = [torch.zeros_like(t) if g is None else g for g, t in zip(grads, given,
                                                                             strict=True)]
            return (*grads, None, None) if A is None else tuple(grads)

        # An operator's implementation runs below autograd, which records nothing there
        # whatever the grad mode; a thread starts with autograd on (dispatch keys are
        # per thread), so the relaxation is differentiated on one of its own.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(differentiated).result()

    def build(self, solver: Solver) -> DifferentiableSolve:
        _import_cvxpylayers()  # a missing extra is reported when the layer is built
        relaxation = _kept_relaxation(self, solver)
        refused, rows_refused = refusing_backward(self), refusing_backward(self, rows=True)

        def solve(costs: Tensor, *, target: Tensor | None = None, needs_grad: bool,
                  training: bool = True, A: Tensor | None = None,
                  b: Tensor | None = None, known: Tensor | None = None) -> Tensor:
            if not training:  # the exact solution, which a backward refuses
                exact = solver if known is None else KnownBound(solver, known)
                if A is not None:
                    exact = exact.bind_rows(A.detach(), b.detach())
                y = exact.solve_min(costs.detach())
                if not needs_grad:
                    return y
                return (refused(costs, y, None) if A is None
                        else rows_refused(costs, A, b, y, None))
            if transforms_active():
                raise InputError(
                    f"method {self.name!r} differentiates its relaxation through cvxpylayers, "
                    "which torch.func transforms cannot trace: take this layer's gradient "
                    "with torch.autograd (loss.backward(), torch.autograd.grad)")
            return self._relaxed(relaxation, solver, costs, A, b, known)

        return solve

    def _relaxed(self, relaxation: Relaxation, solver: Any, costs: Tensor,
                 A: Tensor | None, b: Tensor | None, known: Tensor | None) -> Tensor:
        """The training solve: the relaxation's solution for minimisation costs
        ``(*batch, *cost_shape)``, per-call rows ``A``, ``b`` broadcast onto the batch (or
        None) and a per-call known cost ``known`` (minimisation form, or None),
        differentiable in the costs and the rows. Where ``solver`` keeps the auxiliaries
        (the layer's ``return_aux``) the LP solution's are recorded there; under
        ``on_infeasible="flag"`` the instances the rows leave empty are zeros, flagged."""
        flat, A_flat, b_flat = _batched(costs, A, b, relaxation.form.cost_shape,
                                        relaxation.spec_vars)
        known_flat = None
        if known is not None:  # (*batch, V), or one for every instance
            batch = costs.shape[: costs.dim() - len(relaxation.form.cost_shape)]
            known_flat = known.expand(*batch, relaxation.spec_vars).reshape(
                -1, relaxation.spec_vars)
        if flat.shape[0] == 0:  # a zero gradient for the costs and any rows
            rows = () if A is None else (A.sum() * 0, b.sum() * 0)
            return sum(rows, costs * 0)
        # the layer's return_aux: the LP solution's auxiliaries, recorded (output_aux)
        whole = keeps_aux(solver) and relaxation.spec_vars > relaxation.num_outputs
        try:
            x = relaxation(flat, A_flat, b_flat, known_flat, whole)
        except InfeasibleError:
            if A is None or getattr(solver, "on_infeasible", "raise") != "flag":
                raise
            x = _each_or_dummy(relaxation, flat, A_flat, b_flat, solver, known_flat, whole)
        if whole:
            solver.aux.append(x[:, relaxation.num_outputs :].detach())
            x = x[:, : relaxation.num_outputs]
        return x.reshape(costs.shape)


def _wrapper_of(solver: Any, kind: type) -> Any:
    """The first wrapper of type ``kind`` in ``solver``'s chain of wrappers, or None."""
    while isinstance(solver, SolverWrapper):
        if isinstance(solver, kind):
            return solver
        solver = solver._solver
    return solver if isinstance(solver, kind) else None


def _bound_known(solver: Any) -> Tensor | None:
    """The per-call known cost bound to ``solver`` (the compiled solve binds it), or None."""
    bound = _wrapper_of(solver, KnownBound)
    return None if bound is None else torch.as_tensor(bound.instance_known)


def _unbound(solver: Any) -> Any:
    """``solver`` without the wrappers a call binds (rows, a known cost, a recorder): the
    solver whose relaxation is kept (`_kept_relaxation`)."""
    while isinstance(solver, (RowBound, KnownBound, Recorder)):
        solver = solver._solver
    return solver


#: The relaxations the compiled operator solves, per solver and estimator: built once
#: (a CvxpyLayer compiles its problem), dropped with the solver.
_KEPT: weakref.WeakKeyDictionary[Any, dict[RelaxationEstimator, Relaxation]] = (
    weakref.WeakKeyDictionary())
_KEPT_LOCK = threading.Lock()


def _kept_relaxation(estimator: RelaxationEstimator, solver: Any) -> Relaxation:
    with _KEPT_LOCK:
        kept = _KEPT.setdefault(solver, {})
        if estimator not in kept:
            kept[estimator] = estimator.relaxation(solver)
        return kept[estimator]
