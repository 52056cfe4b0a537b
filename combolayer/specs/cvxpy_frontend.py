"""``ILP.from_cvxpy``: a cvxpy problem with integer variables becomes an [`ILP`][combolayer.ILP].

This module owns the conversion: `ilp_arguments` reads a cvxpy problem
into the arguments of ``ILP.from_matrices``, and ``ILP.from_cvxpy`` is the
thin alias that builds the spec from them (so this module never imports the
specs, and cvxpy is imported only when a problem is converted).

cvxpylayers differentiates convex programs but cannot take integer
variables; a cvxpy problem ``Minimize/Maximize(cost @ x)`` with boolean or
integer variables and linear constraints converts here into an ILP that
[`ComboLayer`][combolayer.ComboLayer] differentiates with Identity, Blackbox, ...

cvxpy's own canonicalisation does the work (``problem.get_problem_data``):
it flattens every variable into one vector (column-major, as cvxpy does),
stacks the linear constraints as ``A x == b`` / ``A x <= b`` rows, and keeps
the objective as a matrix linear in the parameters (DPP), from which the
columns the cost parameter multiplies are read off.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..errors import SpecError

#: cvxpy solvers whose problem data is a MIP in the conic "zero + nonneg" form.
_DATA_SOLVERS = ("HIGHS", "SCIP", "SCIPY")


def _check_inputs(problem: Any, cost: Any):
    import cvxpy as cp

    if not isinstance(problem, cp.Problem):
        raise SpecError(f"from_cvxpy expects a cvxpy.Problem, got {type(problem).__name__}")
    if not isinstance(cost, cp.Parameter):
        raise SpecError(
            f"cost must be a cvxpy Parameter (cp.Parameter(shape)) appearing in the objective "
            f"as cost @ x, got {type(cost).__name__}"
        )
    if cost.id not in {p.id for p in problem.objective.parameters()}:
        raise SpecError(f"the cost parameter {cost.name()!r} does not appear in the objective")
    for constraint in problem.constraints:
        if cost.id in {p.id for p in constraint.parameters()}:
            raise SpecError(f"the cost parameter {cost.name()!r} appears in a constraint "
                            f"({constraint}); it may appear only in the objective")
    missing = [p.name() for p in problem.parameters() if p.id != cost.id and p.value is None]
    if missing:
        raise SpecError(f"parameters {missing} have no value; from_cvxpy fixes every parameter "
                        "other than the cost at its current value")
    if not problem.is_dcp(dpp=True):
        raise SpecError(
            "the objective must be linear: Minimize/Maximize(cost @ x) over variables with "
            "linear constraints (the problem is not DPP-compliant: is the cost multiplied by "
            "itself, another parameter or a non-linear function of a variable?)"
        )
    solvers = [name for name in _DATA_SOLVERS if name in cp.installed_solvers()]
    if not solvers:
        raise SpecError(f"from_cvxpy needs one of the cvxpy solvers {_DATA_SOLVERS} installed "
                        "(pip install highspy)")
    return solvers[0]


def _problem_data(problem: Any, cost: Any, solver: str) -> dict:
    import cvxpy as cp

    saved = cost.value
    if saved is None:  # the values do not matter: only the parametric form is read
        cost.value = np.zeros(cost.shape)
    try:
        data, _, _ = problem.get_problem_data(solver)
    except cp.error.DCPError as error:
        raise SpecError(f"the problem must be linear, and is not even DCP: {error}") from None
    except cp.error.SolverError as error:
        raise SpecError(
            "the objective and constraints must be linear: Minimize/Maximize(cost @ x) with "
            f"linear constraints (cvxpy: {error})"
        ) from None
    finally:
        cost.value = saved
    return data


def _check_linear(data: dict, param_prob: Any) -> None:
    dims = data["dims"]
    nonlinear = {"soc": dims.soc, "exp": dims.exp, "psd": dims.psd, "p3d": dims.p3d}
    used = [name for name, value in nonlinear.items() if (value if isinstance(value, int)
                                                           else len(value))]
    quadratic = param_prob.P is not None and sp.csr_matrix(param_prob.P).nnz > 0
    if used or quadratic:
        raise SpecError(
            "the objective and constraints must be linear: Minimize/Maximize(cost @ x) with "
            f"linear constraints, but cvxpy needed {used or ['a quadratic objective']} cones"
        )


def _cost_map(param_prob: Any, cost: Any, sign: float) -> sp.csc_matrix:
    """``M`` with ``objective = cost_F . (M^T x)``, cost flattened column-major as cvxpy does."""
    q = sp.csc_matrix(param_prob.q)
    n = q.shape[0] - 1
    start = param_prob.param_id_to_col[cost.id]
    size = max(cost.size, 1)
    M = sign * q[:n, start : start + size]
    others = sp.hstack([q[:n, :start], q[:n, start + size :]]).tocsc()
    others.eliminate_zeros()
    if others.nnz:
        raise SpecError(
            "the objective must be cost @ x only: it has terms on the variables that are not "
            "multiplied by the cost parameter (give them their own cost, or move them into "
            "constraints)"
        )
    return sp.csc_matrix(M)


def _selected_columns(M: sp.csc_matrix) -> np.ndarray | None:
    """The variable each cost entry multiplies with coefficient 1, if it is that simple."""
    M = M.copy()
    M.eliminate_zeros()
    counts = np.diff(M.indptr)
    if not (counts == 1).all() or not np.allclose(M.data, 1.0):
        return None
    rows = M.indices
    return rows if len(np.unique(rows)) == len(rows) else None


def ilp_arguments(problem: Any, cost: Any) -> dict[str, Any]:
    """The ``ILP.from_matrices`` arguments of the ILP equivalent to ``problem``, whose
    cost vector is the parameter ``cost`` (``ILP.from_cvxpy`` builds it).

    The ILP's ``shape`` is ``cost.shape`` and its solution ``y`` is the
    expression the cost multiplies (usually a variable ``x`` of the same shape):
    ``argmin/argmax <cost, y>`` over the problem's feasible set. Every other
    variable becomes an auxiliary; parameters other than ``cost`` are fixed at
    their current values.
    """
    import cvxpy as cp

    solver = _check_inputs(problem, cost)
    maximize = isinstance(problem.objective, cp.Maximize)
    data = _problem_data(problem, cost, solver)
    param_prob = data[cp.settings.PARAM_PROB]
    _check_linear(data, param_prob)

    # cvxpy minimises -objective for Maximize: undo the flip to read the costs.
    M = _cost_map(param_prob, cost, -1.0 if maximize else 1.0)
    n = M.shape[0]
    shape = [int(d) for d in cost.shape] or [1]
    N = math.prod(shape)
    # Output i (row-major, as combolayer flattens) is cost entry F[i] in cvxpy's order.
    F = np.arange(N).reshape(shape, order="F").ravel()

    kinds = np.array(["continuous"] * n, dtype=object)
    kinds[list(data["int_vars_idx"])] = "integer"
    kinds[list(data["bool_vars_idx"])] = "binary"
    lower = np.full(n, -np.inf) if data["lower_bounds"] is None else np.array(
        data["lower_bounds"], dtype=float)
    upper = np.full(n, np.inf) if data["upper_bounds"] is None else np.array(
        data["upper_bounds"], dtype=float)
    binary = kinds == "binary"
    lower[binary] = np.maximum(lower[binary], 0.0)
    upper[binary] = np.minimum(upper[binary], 1.0)

    A = sp.csr_matrix(data["A"])
    b = np.asarray(data["b"], dtype=float)
    zero = int(data["dims"].zero)
    A_eq, b_eq, A_ub, b_ub = A[:zero], b[:zero], A[zero:], b[zero:]

    selected = _selected_columns(M)
    if selected is not None:
        outputs = selected[F]
        rest = np.setdiff1d(np.arange(n), outputs)  # sorted: keeps cvxpy's order
        order = np.concatenate([outputs, rest])
        A_eq, A_ub = A_eq[:, order], A_ub[:, order]
        kinds, lower, upper = kinds[order], lower[order], upper[order]
    else:
        # y = M^T x as N new free outputs ahead of all the problem's variables.
        link = sp.hstack([sp.identity(N, format="csr"), -M[:, F].T.tocsr()]).tocsr()
        A_eq = sp.vstack([sp.hstack([sp.csr_matrix((zero, N)), A_eq]), link]).tocsr()
        b_eq = np.concatenate([b_eq, np.zeros(N)])
        A_ub = sp.hstack([sp.csr_matrix((A_ub.shape[0], N)), A_ub]).tocsr()
        kinds = np.concatenate([np.array(["continuous"] * N, dtype=object), kinds])
        lower = np.concatenate([np.full(N, -np.inf), lower])
        upper = np.concatenate([np.full(N, np.inf), upper])

    return dict(
        shape=shape,
        A_ub=A_ub if A_ub.shape[0] else None,
        b_ub=b_ub if A_ub.shape[0] else None,
        A_eq=A_eq if A_eq.shape[0] else None,
        b_eq=b_eq if A_eq.shape[0] else None,
        integrality=[str(k) for k in kinds],
        lower=lower.tolist(),
        upper=upper.tolist(),
        sense="max" if maximize else "min",
        num_aux=len(kinds) - N,
    )
