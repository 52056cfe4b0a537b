"""Decision-quality metrics with PyEPO's definitions.

Each takes the true costs ``c`` of shape ``(*batch, *cost_shape)`` and the
decisions ``y_pred`` taken from predicted costs, and compares against the true
optimum ``y*(c)``. The optimum is solved in one batch call unless ``y_true``
(the optimal solutions, e.g. from [`combolayer.data`][combolayer.data]) is given. The
problem is a spec, a compiled solver or a ComboLayer; pass a compiled one
(as the problem or as ``backend=``) to avoid recompiling per call.

Every metric raises ``ValueError`` when ``cost_true`` has NaN/inf or a trailing
shape other than ``cost_shape``, when ``y_pred`` / ``y_true`` do not have
``cost_true``'s shape (the message names expected and got), or when ``y_pred``,
``y_true``, ``aux_pred`` or ``known_cost`` has NaN/inf (it would make the metric NaN).

Examples:
    >>> import torch, combolayer as cl
    >>> spec = cl.problems.TopK(n=3, k=1)                   # pick the largest value
    >>> cost = torch.tensor([[1.0, 3.0, 2.0]])
    >>> cl.metrics.regret(spec, cost, torch.tensor([[0.0, 0.0, 1.0]])).tolist()
    [1.0]
    >>> round(float(cl.metrics.normalized_regret(spec, cost, torch.tensor([[0.0, 0.0, 1.0]]))), 4)
    0.3333
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor

from .backends.registry import as_solver
from .backends.solver import Solver, check_costs, check_known_cost, inner
from .errors import InputError
from .training.retrieval import cosine_similarities

#: PyEPO's guard against an all-zero optimal objective in normalized regret.
REGRET_EPS = 1e-7


def _renamed_solver_keyword(solver: Any, backend: Any, where: str) -> Any:
    """``backend`` after the deprecated ``solver=`` keyword of ``where``, which it replaces."""
    if solver is None:
        return backend
    warnings.warn(f"{where}(solver=...) is deprecated: pass backend=... (a name, a config or "
                  "a compiled solver), or the solver itself in place of the spec",
                  DeprecationWarning, stacklevel=4)
    return solver


def _as64(x: Any) -> Tensor:
    return torch.as_tensor(x).detach().to("cpu", torch.float64)


def _finite64(x: Any, name: str) -> Tensor:
    """``x`` as a CPU float64 tensor (`_as64`); ``ValueError`` naming its first NaN or
    inf entry."""
    value = _as64(x)
    finite = torch.isfinite(value)
    if not bool(finite.all()):
        index = tuple(int(i) for i in (~finite).nonzero()[0])
        raise InputError(f"{name} must be finite, got {float(value[index])} at index {index} "
                         "(NaN or inf makes the metric NaN)")
    return value


def _objectives(spec: Any, cost_true: Any, y_pred: Any, solver: Solver | None, backend: Any,
                y_true: Any, where: str, aux_pred: Any = None,
                known_cost: Any = None) -> tuple[Tensor, Tensor, float]:
    """``(<c, y_pred>, <c, y*>, sign)`` per instance, as float64 tensors; with a known
    cost (`combolayer.ILP.known_cost`) each objective counts it: ``+ <k, x>`` over the
    full solution, whose auxiliaries ``aux_pred`` gives for ``y_pred``; ``known_cost``
    (per instance, added to the spec's own) is counted the same way."""
    solver = as_solver(spec, _renamed_solver_keyword(solver, backend, where))
    cost, pred = _as64(cost_true), _finite64(y_pred, "y_pred")
    truth = None if y_true is None else _finite64(y_true, "y_true")
    check_costs(solver.spec, cost, "cost_true")
    if pred.shape != cost.shape:
        raise InputError(
            f"y_pred has shape {tuple(pred.shape)} but cost_true has {tuple(cost.shape)}"
        )
    k = len(solver.cost_shape)
    known = None
    if known_cost is not None:
        batch = tuple(cost.shape[: cost.dim() - k])
        known = check_known_cost(solver.spec.label, solver.num_vars, batch, known_cost, cost)
    on_aux = solver.weighs_aux(known)
    if on_aux and aux_pred is None:
        raise InputError(f"{solver.spec.label} has a known cost on its auxiliaries: pass "
                         "aux_pred, the auxiliaries of the decisions (layer(w, return_aux=True) "
                         "or solver.solve(costs, return_aux=True)), to count it")
    aux = None if aux_pred is None else _finite64(aux_pred, "aux_pred")
    # known_value is 0 without a known cost, so one path serves both; a call's known
    # cost is bound in minimisation form, as the solves take it
    counted = solver if known is None else solver.bind_known(solver.sign * known)
    value = inner(cost, pred, k) + _as64(counted.known_value(pred, aux))
    best_aux = None
    if on_aux:  # y_true has no auxiliaries: x* is solved
        best, best_aux = solver.solve(cost, return_aux=True, known_cost=known)
    elif truth is None:
        best = solver.solve(cost, known_cost=known)
    else:
        best = truth
        if best.shape != cost.shape:
            raise InputError(
                f"y_true has shape {tuple(best.shape)} but cost_true has {tuple(cost.shape)}"
            )
    best = _as64(best)
    best_value = inner(cost, best, k) + _as64(counted.known_value(best, best_aux))
    return value, best_value, solver.sign


def regret(spec: Any, cost_true: Any, y_pred: Any, *, solver: Solver | None = None,
           backend: Any = "auto", y_true: Any = None, aux_pred: Any = None,
           known_cost: Any = None) -> Tensor:
    """Per-instance regret: ``<c, y_pred> - <c, y*(c)>`` (min), the reverse for max; >= 0
    for feasible decisions (``y_pred`` is not checked against the constraints).

    With a known cost (`combolayer.ILP.known_cost`) both objectives count it,
    ``<c, y> + <known_cost, x>``; a known cost on the auxiliaries needs ``aux_pred``,
    the auxiliaries of the decisions taken (``y_true`` is then not used: the
    optimum's auxiliaries are solved for).

    Args:
        spec: the problem: a spec, a compiled [`Solver`][combolayer.backends.Solver]
            (``cl.make_solver(...)``, used as is) or a ComboLayer (its solver).
        cost_true: the true costs, ``(*batch, *cost_shape)``.
        y_pred: the decisions taken, same shape.
        solver: deprecated (warns ``DeprecationWarning``): pass the compiled solver
            as ``spec`` or as ``backend=``.
        backend: the backend to compile a spec with: a name, a `BackendConfig`, or a
            compiled [`Solver`][combolayer.backends.Solver] (skips compiling one).
        y_true: the optimal solutions for ``cost_true`` (skips solving them).
        aux_pred: the auxiliaries of ``y_pred``, ``(*batch, num_aux)`` (a known cost).
        known_cost: a known cost of each instance, ``(*batch, num_vars)`` or
            ``(num_vars,)``, the spec's sense, added to the spec's own (as in
            ``solver.solve(costs, known_cost=...)``); ``y_true``, if given, must be
            optimal under it.

    Returns:
        A float64 tensor of shape ``batch``.
    """
    value, best, sign = _objectives(spec, cost_true, y_pred, solver, backend, y_true,
                                    "regret", aux_pred, known_cost)
    return sign * (value - best) + 0.0  # + 0.0: no -0.0 for an optimum of a max problem


def normalized_regret(spec: Any, cost_true: Any, y_pred: Any, *, solver: Solver | None = None,
                      backend: Any = "auto", y_true: Any = None, aux_pred: Any = None,
                      known_cost: Any = None) -> Tensor:
    """Scalar ``sum regret / (sum |<c, y*(c)>| + 1e-7)`` over the batch (PyEPO's ``regret``);
    with a known cost the optimal objectives count it (``+ <known_cost, x*>``).

    Args:
        spec: the problem: a spec, a compiled `Solver` or a ComboLayer, as for `regret`.
        cost_true: the true costs, ``(*batch, *cost_shape)``.
        y_pred: the decisions taken, same shape.
        solver: deprecated (warns ``DeprecationWarning``): pass the compiled solver
            as ``spec`` or as ``backend=``.
        backend: the backend to compile a spec with, or a compiled `Solver`.
        y_true: the optimal solutions for ``cost_true`` (skips solving them).
        aux_pred: the auxiliaries of ``y_pred``, ``(*batch, num_aux)`` (a known cost).
        known_cost: a known cost of each instance, as for `regret`.

    Returns:
        A float64 scalar tensor.
    """
    value, best, sign = _objectives(spec, cost_true, y_pred, solver, backend, y_true,
                                    "normalized_regret", aux_pred, known_cost)
    return (sign * (value - best)).sum() / (best.abs().sum() + REGRET_EPS)


def cost_ratio(spec: Any, cost_true: Any, y_pred: Any, *, solver: Solver | None = None,
               backend: Any = "auto", y_true: Any = None, aux_pred: Any = None,
               known_cost: Any = None) -> Tensor:
    """Per-instance ``<c, y_pred> / <c, y*(c)>`` (1 is optimal; the Warcraft metric).

    Args:
        spec: the problem: a spec, a compiled `Solver` or a ComboLayer, as for `regret`.
        cost_true: the true costs, ``(*batch, *cost_shape)``.
        y_pred: the decisions taken, same shape.
        solver: deprecated (warns ``DeprecationWarning``): pass the compiled solver
            as ``spec`` or as ``backend=``.
        backend: the backend to compile a spec with, or a compiled `Solver`.
        y_true: the optimal solutions for ``cost_true`` (skips solving them).
        aux_pred: the auxiliaries of ``y_pred``, ``(*batch, num_aux)`` (a known cost).
        known_cost: a known cost of each instance, as for `regret`.

    Returns:
        A float64 tensor of shape ``batch``.

    Raises:
        ValueError: an instance's optimal objective is not positive: at 0 the ratio has
            no value, below 0 a worse decision reads as a better one (`regret` holds).
    """
    value, best, _ = _objectives(spec, cost_true, y_pred, solver, backend, y_true,
                                 "cost_ratio", aux_pred, known_cost)
    bad = ~(best > 0)
    if bool(bad.any()):
        index = tuple(int(i) for i in bad.nonzero()[0])
        raise InputError(f"cost_ratio: the optimal objective of instance {index} is "
                         f"{float(best[index]):g}: <c, y_pred> / <c, y*> needs positive optima "
                         "(at 0 it has no value, below 0 a worse decision reads as a better "
                         "one); use regret or normalized_regret there")
    return value / best


def recall_at_k(x: Any, labels: Any, ks: tuple[int, ...] = (1, 2, 4, 8), *,
                input: str = "auto") -> dict[int, float]:
    """Retrieval recall at K: the fraction of queries with a same-class item among
    the K items most similar to them (the query itself excluded).

    Every item queries all the others, as in the usual CUB/SOP evaluation (the
    paper's ``R@K``). Ties go to the lower index (a stable sort), so the result does
    not depend on the platform. Queries whose class has no other item can never score
    and still count.

    Args:
        x: ``(N, D)`` embeddings, compared by cosine similarity, or an ``(N, N)``
            similarity matrix (higher = more similar).
        labels: the ``(N,)`` class of each item.
        ks: the K values to report.
        input: ``"auto"`` (a square ``(N, N)`` input with ``N = len(labels)`` is read
            as similarities), ``"embeddings"`` (needed when ``D == N``) or
            ``"similarities"``.

    Returns:
        ``{K: recall}`` with floats in [0, 1].

    Raises:
        ValueError: a shape other than these, or NaN/inf in ``x`` or ``labels``.
    """
    x = _finite64(x, "x")
    labels = torch.as_tensor(labels).detach().cpu()
    _finite64(labels, "labels")
    n = labels.shape[0] if labels.ndim == 1 else -1
    if labels.ndim != 1 or x.ndim != 2 or x.shape[0] != n:
        raise InputError(f"recall_at_k needs labels (N,) and x (N, D) or (N, N); got labels "
                         f"{tuple(labels.shape)} and x {tuple(x.shape)}")
    if input not in ("auto", "embeddings", "similarities"):
        raise InputError(f"input must be 'auto', 'embeddings' or 'similarities', got {input!r}")
    if input == "similarities" and x.shape[1] != n:
        raise InputError(f"similarities must be (N, N) = ({n}, {n}), got {tuple(x.shape)}")
    is_similarity = input == "similarities" or (input == "auto" and x.shape[1] == n)
    similarity = x if is_similarity else cosine_similarities(x)
    similarity = similarity.clone()
    similarity.fill_diagonal_(-torch.inf)
    if any(int(k) < 1 for k in ks):
        raise InputError(f"ks must be >= 1, got {tuple(ks)}")
    # The rank of the first same-class item, without sorting (O(N^2), no log factor):
    # 1 + the items strictly more similar than the best positive + those as similar
    # with a lower index than the first positive at that similarity (a stable sort's order).
    same = labels[:, None] == labels[None, :]
    same.fill_diagonal_(False)
    best = torch.where(same, similarity, -torch.inf).max(1, keepdim=True).values
    index = torch.arange(n)
    first_positive = torch.where(same & (similarity == best), index, n).min(1, keepdim=True).values
    ahead = (similarity > best) | ((similarity == best) & (index < first_positive))
    first_hit = torch.where(same.any(1), 1.0 + ahead.sum(1), torch.inf)
    return {int(k): float((first_hit <= int(k)).double().mean()) for k in ks}
