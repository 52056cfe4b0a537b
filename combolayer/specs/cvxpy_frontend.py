"""``ILP.from_cvxpy``: a cvxpy problem with integer variables becomes an [`ILP`][combolayer.ILP].

This module owns the conversion: `ilp_arguments` reads a cvxpy problem
into the arguments of ``ILP.from_matrices``, and ``ILP.from_cvxpy`` is the
thin alias that builds the spec from them (so this module never imports the
specs, and cvxpy is imported only when a problem is converted).

cvxpylayers differentiates convex programs but cannot take integer
variables; a cvxpy problem ``Minimize/Maximize(cost @ x + f @ z + ...)`` with boolean
or integer variables and linear constraints converts here into an ILP that
[`ComboLayer`][combolayer.ComboLayer] differentiates with Identity, Blackbox, ...
The objective may be any affine function of the variables in which the cost
parameter enters linearly (``cost @ x``, ``cost @ x[2:]``,
``cp.sum(cp.multiply(C, X))``, sums of such terms); its other linear terms (with
numbers or other parameters at their current values) become the ILP's
``known_cost``, and constants are dropped (they do not change the argmin); a
constant inside the expression the cost multiplies (``cost @ (x + 1)``) is part of
the outputs, which equal that expression.

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
    if not problem.variables():
        raise SpecError("the cvxpy problem has no variables: expected an objective cost @ x "
                        "over at least one cp.Variable")
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
    _check_terms(problem.objective.expr, cost)
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


def _additive_terms(expr: Any) -> list:
    """The summands of an objective (nested sums and subtractions flattened)."""
    from cvxpy.atoms.affine.add_expr import AddExpression
    from cvxpy.atoms.affine.unary_operators import NegExpression

    if isinstance(expr, AddExpression):
        return [term for arg in expr.args for term in _additive_terms(arg)]
    if isinstance(expr, NegExpression):
        return _additive_terms(expr.args[0])
    return [expr]


def _check_terms(objective: Any, cost: Any) -> None:
    """Refuse, naming it, an objective term that is not linear in the variables or in
    which a parameter multiplies another (the cost parameter must enter linearly)."""
    for term in _additive_terms(objective):
        if not term.is_affine():
            raise SpecError(f"the objective term {term} is not linear in the variables (a "
                            "quadratic or other non-linear term); from_cvxpy takes an affine "
                            "objective: the cost parameter times variables, plus known linear "
                            "terms and constants")
        if term.parameters() and not term.is_dpp():
            names = sorted(p.name() for p in term.parameters())
            raise SpecError(f"the objective term {term} multiplies parameters {names} together "
                            f"(or by a non-linear function); the cost parameter "
                            f"{cost.name()!r} must enter linearly: cost @ x, cost @ x[i:j] or "
                            "cp.sum(cp.multiply(C, X))")


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


def _cost_map(param_prob: Any, cost: Any,
              sign: float) -> tuple[sp.csc_matrix, np.ndarray, np.ndarray]:
    """``(M, offset, known)`` with ``objective = cost_F . (M^T x + offset) + known . x +
    constant``, the cost flattened column-major as cvxpy does: ``M^T x + offset`` is the
    expression the cost multiplies; ``known`` is the objective's linear part without the
    cost, other parameters at their current values."""
    q = sp.csc_matrix(param_prob.q)
    n = q.shape[0] - 1
    start = param_prob.param_id_to_col[cost.id]
    size = max(cost.size, 1)
    M = sign * q[:n, start : start + size]
    offset = sign * q[n, start : start + size].toarray().ravel() + 0.0  # + 0.0: no -0.0
    values = np.zeros(q.shape[1])
    for param_id, col in param_prob.param_id_to_col.items():
        if param_id == -1:  # the constant column
            values[col] = 1.0
        elif param_id != cost.id:
            param = param_prob.id_to_param[param_id]
            values[col : col + max(param.size, 1)] = np.ravel(param.value, order="F")
    known = sign * np.asarray(q[:n] @ values).ravel() + 0.0  # + 0.0: no -0.0
    return sp.csc_matrix(M), offset, known


def _selected_columns(M: sp.csc_matrix) -> np.ndarray | None:
    """The variable each cost entry multiplies with coefficient 1, if it is that simple."""
    M = M.copy()
    M.eliminate_zeros()
    counts = np.diff(M.indptr)
    if not (counts == 1).all() or not np.allclose(M.data, 1.0):
        return None
    rows = M.indices
    return rows if len(np.unique(rows)) == len(rows) else None


def _expression_kinds(M: sp.csc_matrix, offset: np.ndarray, kinds: np.ndarray,
                      lower: np.ndarray, upper: np.ndarray,
                      max_coefficient: float) -> tuple[np.ndarray, ...]:
    """The integrality and bounds of the outputs ``y = M^T x + offset`` that ``x``'s imply:
    an output with integer coefficients on integer variables and an integer offset is an
    integer within the bounds its terms reach (binary within [0, 1]); any other output is
    continuous and free, held by its defining equality alone. A bound whose terms reach
    ``max_coefficient`` in magnitude (a spec refuses that much, and float sums of
    integers are exact below it) is left infinite."""
    M = sp.csc_matrix(M, copy=True)
    M.eliminate_zeros()  # no 0 * inf below
    N = M.shape[1]
    column = np.repeat(np.arange(N), np.diff(M.indptr))
    rows, coefs = M.indices, M.data
    fractional = (kinds[rows] == "continuous") | (coefs != np.round(coefs))
    integer = (np.bincount(column, fractional, minlength=N) == 0) & (offset == np.round(offset))
    # integer variables take integer values: their bounds rounded inwards
    low, high = np.ceil(lower[rows]), np.floor(upper[rows])

    def reach(terms: np.ndarray, infinite: float) -> np.ndarray:
        total = offset + np.bincount(column, terms, minlength=N)
        size = np.abs(offset) + np.bincount(column, np.abs(terms), minlength=N)
        return np.where(integer & (size < max_coefficient), total, infinite)

    out_lower = reach(np.where(coefs > 0, coefs * low, coefs * high), -np.inf)
    out_upper = reach(np.where(coefs > 0, coefs * high, coefs * low), np.inf)
    binary = integer & (out_lower >= 0) & (out_upper <= 1)
    out_kinds = np.where(binary, "binary", np.where(integer, "integer", "continuous"))
    return out_kinds.astype(object), out_lower, out_upper


def ilp_arguments(problem: Any, cost: Any, *, max_coefficient: float) -> dict[str, Any]:
    """The ``ILP.from_matrices`` arguments of the ILP equivalent to ``problem``, whose
    cost vector is the parameter ``cost`` (``ILP.from_cvxpy`` builds it), plus
    ``variables`` (each cvxpy variable's name -> its shape and positions in the full
    solution) and ``output_variables`` (the ids of the variables the cost multiplies).

    The ILP's ``shape`` is ``cost.shape`` and its solution ``y`` is the
    expression the cost multiplies, constant included (usually a variable ``x`` of the
    same shape, or a slice of one): ``argmin/argmax <cost, y> + <known_cost, x>`` over the
    problem's feasible set. Every other variable becomes an auxiliary; the
    objective's other linear terms become ``known_cost``; parameters other than
    ``cost`` are fixed at their current values. ``max_coefficient`` is the largest
    magnitude a spec takes: an output's bound derived beyond it is left infinite.
    """
    import cvxpy as cp

    solver = _check_inputs(problem, cost)
    maximize = isinstance(problem.objective, cp.Maximize)
    data = _problem_data(problem, cost, solver)
    param_prob = data[cp.settings.PARAM_PROB]
    _check_linear(data, param_prob)

    # cvxpy minimises -objective for Maximize: undo the flip to read the costs.
    M, offset, known = _cost_map(param_prob, cost, -1.0 if maximize else 1.0)
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

    # an output that is a variable plus a constant is not that variable
    selected = None if np.any(offset) else _selected_columns(M)
    # where cvxpy's column j sits in the full solution
    position = np.arange(n) + N
    if selected is not None:
        outputs = selected[F]
        rest = np.setdiff1d(np.arange(n), outputs)  # sorted: keeps cvxpy's order
        order = np.concatenate([outputs, rest])
        A_eq, A_ub = A_eq[:, order], A_ub[:, order]
        kinds, lower, upper = kinds[order], lower[order], upper[order]
        known = known[order]
        position = np.empty(n, dtype=int)
        position[order] = np.arange(n)
    else:
        # y = M^T x + offset as N new outputs ahead of all the problem's variables.
        link = sp.hstack([sp.identity(N, format="csr"), -M[:, F].T.tocsr()]).tocsr()
        A_eq = sp.vstack([sp.hstack([sp.csr_matrix((zero, N)), A_eq]), link]).tocsr()
        b_eq = np.concatenate([b_eq, offset[F]])
        A_ub = sp.hstack([sp.csr_matrix((A_ub.shape[0], N)), A_ub]).tocsr()
        out_kinds, out_lower, out_upper = _expression_kinds(M[:, F], offset[F], kinds, lower,
                                                            upper, max_coefficient)
        kinds = np.concatenate([out_kinds, kinds])
        lower = np.concatenate([out_lower, lower])
        upper = np.concatenate([out_upper, upper])
        known = np.concatenate([np.zeros(N), known])

    variables = {}
    users = {var.id: var for var in problem.variables()}
    for var_id, col in param_prob.var_id_to_col.items():
        var = param_prob.id_to_var[var_id]
        if var_id not in users or users[var_id].shape != var.shape:
            # one of cvxpy's reformulation (cp.abs's), or a variable it stores as another
            # (symmetric=True, diag=True): not laid out as the user's variable
            continue
        if var.name() in variables:
            # spec.variables is keyed by name: a second variable of that name would
            # overwrite the first, and spec.split would lose one of them
            raise SpecError(
                f"two cvxpy variables are both named {var.name()!r}; spec.variables and "
                "spec.split key the variables by name, so each needs its own: "
                "cp.Variable(..., name=...) with distinct names, or no name (cvxpy then "
                "numbers them)"
            )
        var_shape = [int(d) for d in var.shape]
        # entry i of the variable in row-major order is cvxpy's column col + F-index
        fortran = np.arange(max(var.size, 1)).reshape(var_shape or [1], order="F").ravel()
        variables[var.name()] = {"shape": var_shape,
                                 "index": position[col + fortran].tolist()}
    touched = set(np.flatnonzero(np.diff(sp.csr_matrix(M).indptr)).tolist())
    output_variables = {var_id for var_id, col in param_prob.var_id_to_col.items()
                        if touched & set(range(col, col + max(
                            param_prob.id_to_var[var_id].size, 1)))}

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
        known_cost=known if np.any(known) else None,
        variables=variables,
        output_variables=output_variables,
    )
