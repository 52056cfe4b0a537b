"""PyEPO's ``optModel`` as a backend: its own solver (Gurobi, COPT, Pyomo, OR-Tools,
MPAX) behind combolayer's solver, layer and losses.

``from_pyepo(optmodel)`` returns a [`PyEPOBackend`][combolayer.backends.PyEPOBackend], a
value accepted wherever a backend is (``cl.make_solver(spec, backend=...)``,
``cl.ComboLayer(spec, backend=...)``, the losses): ``BackendConfig.load`` reads it as
``BackendConfig(name="pyepo", options={"model": wrapper})``, and the registered backend
``"pyepo"`` (``PyEPOModelBackend`` below) compiles the wrapped model's kernel from that
config, so copies and pickles go through the config as for any backend (the wrapper
pickles as a recipe that builds the model again). Like a compiled solver, the wrapper
may stand in place of the spec (``cl.ComboLayer(cl.backends.from_pyepo(m))``): the spec
is then read from the model. PyEPO itself is imported lazily: nothing here needs it
until a model is wrapped.

Reading the model. For a Gurobi model (``pyepo.model.grb``) the constraint matrix, senses,
right-hand sides, bounds and variable types are read through ``model._model.getA()``,
``getConstrs()`` and ``getVars()``; for a Pyomo model (``pyepo.model.omo``, whatever
solver it was given) every active constraint's linear form is read with Pyomo's
``generate_standard_repn``, and the cost of each variable from the objective's
``cost[i]`` parameters; for an OR-Tools model (``pyepo.model.ort``) the pywraplp
solver's ``ExportModelToProto`` or the CP-SAT model's ``Proto()`` gives every linear
row, bound and variable type; for a COPT model (``pyepo.model.copt``) ``getA()``,
``getInfo`` of the rows' and columns' bounds and each column's ``vtype``; for an MPAX
model (``pyepo.model.mpax``) the linear program it hands to MPAX, ``A x = b``,
``G x >= h``, ``l <= x <= u``, all continuous. Each becomes an equivalent
[`ILP`][combolayer.ILP] (the predicted-cost variables first, every other variable
auxiliary), so ``cl.analyze`` and ``projection="auto"`` see the model's affine hull
(flow conservation for shortest path). The objective coefficients a Gurobi, COPT or
pywraplp model holds on its other variables (a facility's opening cost), which PyEPO's
``setObj`` leaves in place, become the ILP's ``known_cost``. An MPAX model solves a
whole batch in one vmapped call of its PDLP solver (``batch_optimize``); every other
model solves row by row. Other models (hand-written ones) hide their constraints behind their own
modelling objects; for them [`spec`][combolayer.backends.PyEPOBackend.spec] raises
[`SpecError`][combolayer.SpecError] saying so, and a spec must be passed by the caller
(``cl.ComboLayer(spec, backend=from_pyepo(m))``): the model still solves, and the
projection is the spec's. Nothing falls back silently to an unconstrained spec.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..backends.base import Backend, Tier
from ..backends.config import BackendConfig
from ..backends.outcome import Outcome, Solved, settle, warn_not_optimal
from ..backends.registry import register_backend
from ..backends.solver import Kernel, KernelDefaults
from ..errors import InputError, InputTypeError, SolverError, SpecError
from ..specs.base import ILP, Spec

__all__ = ["PyEPOBackend", "PyEPOModelBackend", "dataset_solutions", "from_pyepo",
           "ilp_from_copt", "ilp_from_dsl",
           "ilp_from_gurobi", "ilp_from_mpax", "ilp_from_ortools", "ilp_from_pyomo"]

#: Gurobi's (and COPT's) variable types as combolayer's integrality.
_VTYPES = {"B": "binary", "I": "integer", "C": "continuous"}

#: The counts of a COPT model's rows that an ILP cannot state (COPT's attribute names).
_COPT_NONLINEAR = ("QConstrs", "Soss", "Indicators", "Cones", "ExpCones", "AffineCones",
                   "PsdConstrs", "PsdCols", "LmiConstrs", "NLConstrs", "HasQObj", "HasPsdObj",
                   "HasNLObj", "MultiObjs")


def _model_sign(optmodel: Any) -> float:
    """+1 when the PyEPO model minimises, -1 when it maximises (PyEPO's EPO enum)."""
    from pyepo import EPO  # the model exists, so pyepo is installed

    sense = getattr(optmodel, "modelSense", EPO.MINIMIZE)
    if sense == EPO.MINIMIZE:
        return 1.0
    if sense == EPO.MAXIMIZE:
        return -1.0
    raise SpecError(f"PyEPO model {optmodel!r} has modelSense {sense!r}: expected "
                    "EPO.MINIMIZE or EPO.MAXIMIZE")


def _cost_variables(optmodel: Any) -> list:
    """The model's variables of the predicted costs, in PyEPO's cost order."""
    x = optmodel.x
    if not hasattr(x, "tolist"):
        return list(x.values())
    # a Gurobi or COPT MVar: nested lists, row-major, flattened by hand (numpy probes
    # COPT's Var for __array_struct__, which raises KeyError, not AttributeError)
    flat, pending = [], [x.tolist()]
    while pending:
        item = pending.pop()
        if isinstance(item, list):
            pending.extend(reversed(item))
        else:
            flat.append(item)
    return flat


def _not_dsl(optmodel: Any, reader: str) -> None:
    """Refuse a compiled ``pyepo.dsl`` model in a backend's own reader: its costs sit on
    the variables ``c_pred_index`` names (permuted, a subset, with a known part), which
    the reader does not see, so the ILP would be silently another problem."""
    if _dsl_problem(optmodel) is not None:
        raise SpecError(f"PyEPO model {optmodel!r} is a DSL model (pyepo.dsl): its costs "
                        "map onto the variables through c_pred_index, which the "
                        f"{reader} reader does not see; read it with "
                        "cl.backends.ilp_from_dsl(model) or cl.backends.from_pyepo(model).spec")


#: Variable types an ILP cannot state, by Gurobi's and COPT's letter.
_UNSUPPORTED_VTYPES = {"S": "semi-continuous", "N": "semi-integer"}


def _integrality(optmodel: Any, vtypes: list[str], names: list[str]) -> list[str]:
    """Each column's integrality from its type letter; a semi-continuous or semi-integer
    column (``x in {0} or [lb, ub]``), or a letter not known, raises SpecError: read as
    continuous, its lower bound would exclude the 0 it may take."""
    for vtype, name in zip(vtypes, names, strict=True):
        if vtype not in _VTYPES:
            what = (f"a {_UNSUPPORTED_VTYPES[vtype]} variable" if vtype in _UNSUPPORTED_VTYPES
                    else f"a variable of type {vtype!r}")
            raise SpecError(f"PyEPO model {optmodel!r} has {what} ({name}); "
                            "combolayer's ILP has binary, integer and continuous ones: "
                            "pass a spec")
    return [_VTYPES[vtype] for vtype in vtypes]


def ilp_from_gurobi(optmodel: Any) -> ILP:
    """The [`ILP`][combolayer.ILP] of a PyEPO Gurobi model: every row, bound and type.

    The ``num_cost`` predicted-cost variables come first (the spec's ``shape``), the
    model's other variables follow as auxiliary ones (cost 0). Raises SpecError when the
    model has quadratic or general constraints, which an ILP cannot state.
    """
    _not_dsl(optmodel, "Gurobi")
    model = optmodel._model
    model.update()
    if model.NumQConstrs or model.NumGenConstrs or model.NumSOS or model.IsQP:
        raise SpecError(f"PyEPO model {optmodel!r} has quadratic, SOS or general constraints "
                        "or a quadratic objective; combolayer's ILP is linear: pass a spec")
    others = {"more objectives": model.NumObj - 1, "piecewise-linear objective terms":
              model.NumPWLObjVars, "scenarios": model.NumScenarios}
    found = [f"{count} {what}" for what, count in others.items() if count > 0]
    if found:
        raise SpecError(f"PyEPO model {optmodel!r} has {', '.join(found)} beyond one linear "
                        "objective, which an ILP with one cost cannot state: pass a spec")
    if model.Params.LazyConstraints:
        raise SpecError(f"PyEPO model {optmodel!r} adds lazy constraints in a callback "
                        "(subtour or capacity cuts), which its matrix does not hold, so the "
                        "constraints cannot be read: pass a spec")
    variables = model.getVars()
    constrs = model.getConstrs()
    senses = np.array([c.Sense for c in constrs], dtype=str)
    rhs = np.array([c.RHS for c in constrs], dtype=float)
    # Gurobi's infinity is 1e100: any bound from 1e30 on is none
    lower = np.array([v.LB for v in variables], dtype=float)
    upper = np.array([v.UB for v in variables], dtype=float)
    return _ilp_from_rows(
        optmodel, [v.index for v in _cost_variables(optmodel)], model.getA(),
        objective=np.array(model.getAttr("Obj", variables), dtype=float),
        maximize=model.ModelSense == -1,
        row_lower=np.where(senses == "<", -np.inf, rhs),
        row_upper=np.where(senses == ">", np.inf, rhs),
        lower=np.where(lower <= -1e30, -np.inf, lower),
        upper=np.where(upper >= 1e30, np.inf, upper),
        integrality=_integrality(optmodel, [v.VType for v in variables],
                                 [v.VarName for v in variables]),
    )


def ilp_from_copt(optmodel: Any) -> ILP:
    """The [`ILP`][combolayer.ILP] of a PyEPO COPT model (``pyepo.model.copt``).

    Every row's two bounds and every column's bounds are read with ``getInfo``, the
    matrix with ``getA()``, each column's type from its ``vtype``; the ``num_cost``
    predicted-cost variables come first, the model's other variables follow as
    auxiliary ones. Raises SpecError when the model has quadratic, cone, SOS, indicator
    or nonlinear rows or objective, or when its class adds constraints from a COPT
    callback (PyEPO's DFJ TSP and RCI VRP add their subtour and capacity cuts so, and
    the matrix does not hold them), saying to pass a spec.
    """
    _not_dsl(optmodel, "COPT")
    from coptpy import COPT, CallbackBase

    model = optmodel._model
    found = [name for name in _COPT_NONLINEAR if model.getAttr(name)]
    if found:
        raise SpecError(f"PyEPO model {optmodel!r} has {', '.join(found)} (COPT's count of "
                        "rows or objective terms an ILP cannot state); combolayer's ILP is "
                        "linear: pass a spec")
    callbacks = [name for klass in type(optmodel).__mro__ for name, value in vars(klass).items()
                 if isinstance(value, type) and issubclass(value, CallbackBase)]
    if callbacks:
        raise SpecError(f"PyEPO model {optmodel!r} adds constraints from a COPT callback "
                        f"({callbacks[0]}: lazy subtour or capacity cuts), which its matrix "
                        "does not hold, so the constraints cannot be read: pass a spec")
    constrs, variables = model.getConstrs(), model.getVars()

    def bounds(items: Any) -> tuple[np.ndarray, np.ndarray]:
        # COPT's infinity is 1e30: any bound from there on is none
        lower = np.array(model.getInfo(COPT.Info.LB, items), dtype=float).reshape(-1)
        upper = np.array(model.getInfo(COPT.Info.UB, items), dtype=float).reshape(-1)
        return (np.where(lower <= -COPT.INFINITY, -np.inf, lower),
                np.where(upper >= COPT.INFINITY, np.inf, upper))

    (row_lower, row_upper), (lower, upper) = bounds(constrs), bounds(variables)
    return _ilp_from_rows(
        optmodel, [v.index for v in _cost_variables(optmodel)],
        sp.csr_matrix(model.getA(), shape=(len(constrs), len(variables))),
        objective=np.array(model.getInfo(COPT.Info.Obj, variables), dtype=float).reshape(-1),
        maximize=model.ObjSense == COPT.MAXIMIZE,
        row_lower=row_lower, row_upper=row_upper, lower=lower, upper=upper,
        integrality=_integrality(optmodel, [v.vtype for v in variables],
                                 [v.name for v in variables]),
    )


def _is_mpax(optmodel: Any) -> bool:
    """Whether ``optmodel`` is a PyEPO MPAX model (it solves batches: ``batch_optimize``)."""
    return hasattr(optmodel, "batch_optimize")


def ilp_from_mpax(optmodel: Any) -> ILP:
    """The [`ILP`][combolayer.ILP] of a PyEPO MPAX model (``pyepo.model.mpax``).

    The model is the linear program it hands to MPAX's PDLP solver: ``A x = b``,
    ``G x >= h`` and ``l <= x <= u``, one variable per cost, every variable continuous
    (MPAX solves linear programs: PyEPO's MPAX knapsack is the LP relaxation). The
    arrays are read as the model holds them, in float32. Raises SpecError for a
    quadratic objective (``Q``: portfolio), saying to pass a spec.
    """
    _not_dsl(optmodel, "MPAX")
    if getattr(optmodel, "Q", None) is not None:
        raise SpecError(f"PyEPO model {optmodel!r} has a quadratic objective (Q); "
                        "combolayer's ILP is linear: pass a spec")

    def array(name: str) -> np.ndarray:
        value = getattr(optmodel, name)
        value = value.todense() if hasattr(value, "todense") else value  # a sparse BCOO
        return np.asarray(value, dtype=float)

    n = optmodel.num_cost
    A, G = array("A").reshape(-1, n), array("G").reshape(-1, n)
    b, h = array("b").reshape(-1), array("h").reshape(-1)
    return _ilp_from_rows(
        optmodel, list(range(n)), sp.csr_matrix(np.vstack([A, G])),
        row_lower=np.concatenate([b, h]),
        row_upper=np.concatenate([b, np.full(len(h), np.inf)]),
        lower=array("l").reshape(-1), upper=array("u").reshape(-1),
        integrality=["continuous"] * n,
    )


def ilp_from_ortools(optmodel: Any) -> ILP:
    """The [`ILP`][combolayer.ILP] of a PyEPO OR-Tools model (``pyepo.model.ort``).

    A pywraplp model (``optOrtModel``) is exported with ``ExportModelToProto``: each
    constraint's coefficients and two bounds, each variable's bounds and
    ``is_integer``. A CP-SAT model (``optOrtCpModel``) is read from ``Proto()``: every
    constraint must be ``linear`` with a domain of one interval, every variable's domain
    one interval, and every variable is integer. The ``num_cost`` predicted-cost
    variables come first, in cost order, the model's other variables follow as
    auxiliary ones. Raises SpecError otherwise (general constraints, a quadratic
    objective, a CP-SAT ``bool_or`` or ``!=``, a variable without a finite lower
    bound), saying to pass a spec, and for a CP-SAT model that CP-SAT's own
    ``Validate()`` refuses, with its message.
    """
    _not_dsl(optmodel, "OR-Tools")
    if hasattr(optmodel._model, "ExportModelToProto"):
        return _ilp_from_linear_solver(optmodel)
    return _ilp_from_cp_sat(optmodel)


def _ilp_from_linear_solver(optmodel: Any) -> ILP:
    """The ILP of a pywraplp model, through its MPModelProto."""
    from ortools.linear_solver import linear_solver_pb2

    proto = linear_solver_pb2.MPModelProto()
    optmodel._model.ExportModelToProto(proto)
    if len(proto.general_constraint) or len(proto.quadratic_objective.coefficient):
        raise SpecError(f"PyEPO model {optmodel!r} has general constraints or a quadratic "
                        "objective; combolayer's ILP is linear: pass a spec")
    rows = [i for i, c in enumerate(proto.constraint) for _ in c.var_index]
    columns = [j for c in proto.constraint for j in c.var_index]
    values = [a for c in proto.constraint for a in c.coefficient]
    A = sp.csr_matrix((values, (rows, columns)),
                      shape=(len(proto.constraint), len(proto.variable)))
    lower = np.array([v.lower_bound for v in proto.variable], dtype=float)
    upper = np.array([v.upper_bound for v in proto.variable], dtype=float)
    integer = np.array([v.is_integer for v in proto.variable], dtype=bool)
    return _ilp_from_rows(
        optmodel, [v.index() for v in _cost_variables(optmodel)], A,
        objective=np.array([v.objective_coefficient for v in proto.variable], dtype=float),
        maximize=proto.maximize,
        row_lower=np.array([c.lower_bound for c in proto.constraint], dtype=float),
        row_upper=np.array([c.upper_bound for c in proto.constraint], dtype=float),
        lower=lower, upper=upper,
        integrality=_integer_kinds(integer, lower, upper),
    )


#: CP-SAT has no infinity: its bounds are int64, and magnitudes from 2**62 on mean none.
_CP_SAT_INFINITY = 2**62


def _ilp_from_cp_sat(optmodel: Any) -> ILP:
    """The ILP of a CP-SAT model: its variables and linear constraints, all integer."""
    from google.protobuf import text_format
    from ortools.sat import cp_model_pb2

    invalid = optmodel._model.Validate()
    if invalid:
        raise SpecError(f"PyEPO model {optmodel!r} is not a valid CP-SAT model, which its "
                        f"own solver refuses too; CP-SAT's validator says: {invalid}")
    proto = optmodel._model.Proto()
    if not isinstance(proto, cp_model_pb2.CpModelProto):
        # OR-Tools >= 9.12 hands out a C++ wrapper; its text form is the same proto
        proto = text_format.Parse(str(proto), cp_model_pb2.CpModelProto())

    def interval(domain: Any, what: str) -> tuple[float, float]:
        if len(domain) != 2:
            raise SpecError(f"PyEPO model {optmodel!r} has {what} whose domain is "
                            f"{len(domain) // 2} intervals (a '!=' or a domain with holes); "
                            "combolayer's ILP needs one interval: pass a spec")
        low, high = domain
        return (-np.inf if low <= -_CP_SAT_INFINITY else float(low),
                np.inf if high >= _CP_SAT_INFINITY else float(high))

    rows, columns, values, row_bounds = [], [], [], []
    for i, constraint in enumerate(proto.constraints):
        kind = constraint.WhichOneof("constraint")
        if kind != "linear" or len(constraint.enforcement_literal):
            what = "an enforced linear" if kind == "linear" else f"a {kind}"
            raise SpecError(f"PyEPO model {optmodel!r} has {what} constraint (constraint "
                            f"{i}); combolayer's ILP reads only unconditional linear "
                            "constraints: pass a spec")
        for ref, coef in zip(constraint.linear.vars, constraint.linear.coeffs, strict=True):
            # a negative reference is the negation of variable -ref - 1 (OR-Tools
            # before 9.15; the validator of newer ones refuses it in a linear row)
            rows.append(i)
            columns.append(ref if ref >= 0 else -ref - 1)
            values.append(float(coef) if ref >= 0 else -float(coef))
        row_bounds.append(interval(constraint.linear.domain, f"constraint {i}"))
    bounds = np.array([interval(v.domain, f"variable {j} ({v.name})")
                       for j, v in enumerate(proto.variables)], dtype=float).reshape(-1, 2)
    row_bounds = np.array(row_bounds, dtype=float).reshape(-1, 2)
    A = sp.csr_matrix((values, (rows, columns)),
                      shape=(len(proto.constraints), len(proto.variables)))
    return _ilp_from_rows(
        optmodel, [v.index for v in _cost_variables(optmodel)], A,
        row_lower=row_bounds[:, 0], row_upper=row_bounds[:, 1],
        lower=bounds[:, 0], upper=bounds[:, 1],
        integrality=_integer_kinds(np.ones(len(bounds), dtype=bool), bounds[:, 0],
                                   bounds[:, 1]),
    )


def _integer_kinds(integer: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> list[str]:
    """Each column's integrality: binary for an integer within [0, 1]."""
    binary = integer & (lower >= 0) & (upper <= 1)
    return ["binary" if b else "integer" if i else "continuous"
            for b, i in zip(binary, integer)]


def ilp_from_pyomo(optmodel: Any) -> ILP:
    """The [`ILP`][combolayer.ILP] of a PyEPO Pyomo model (``pyepo.model.omo``).

    Every active constraint must be linear (read with ``generate_standard_repn``), and
    the objective must give each of the ``num_cost`` predicted costs (PyEPO's mutable
    ``cost[i]`` parameters) to a variable of its own; those variables come first, in
    cost order, and the model's other variables follow as auxiliary ones. Raises
    SpecError otherwise (a quadratic constraint, a cost shared by two variables as in
    PyEPO's symmetric TSP), saying to pass a spec.
    """
    _not_dsl(optmodel, "Pyomo")
    import pyomo.environ as pe
    from pyomo.repn import generate_standard_repn

    model = optmodel._model
    if not hasattr(model, "cost"):
        raise SpecError(f"PyEPO model {optmodel!r} has no cost parameters (model.cost, as "
                        "PyEPO's Pyomo models have), so its costs cannot be matched to its "
                        "variables: pass a spec")
    _check_pyomo_components(optmodel, model)
    objective = generate_standard_repn(model.obj.expr, compute_values=False)
    cost_index = {id(model.cost[i]): i for i in model.cost}
    cost_vars: list = [None] * optmodel.num_cost
    for coef, var in zip(objective.linear_coefs, objective.linear_vars, strict=True):
        i = cost_index.get(id(coef))
        if i is None or cost_vars[i] is not None:
            cost_vars = []
            break
        cost_vars[i] = var
    if not objective.is_linear() or not cost_vars or any(v is None for v in cost_vars):
        raise SpecError(f"PyEPO model {optmodel!r} does not map its {optmodel.num_cost} "
                        "costs onto variables one to one in its objective, so its "
                        "constraints cannot be read as an ILP on the costs: pass a spec")
    chosen = {id(v) for v in cost_vars}
    ordered = cost_vars + [v for v in model.component_data_objects(pe.Var, active=True)
                           if id(v) not in chosen]
    column = {id(v): j for j, v in enumerate(ordered)}
    rows: dict[str, list] = {"ub": [], "eq": []}  # kind -> [({column: coef}, rhs)]
    for con in model.component_data_objects(pe.Constraint, active=True):
        repn = generate_standard_repn(con.body, compute_values=True)
        if not repn.is_linear():
            raise SpecError(f"PyEPO model {optmodel!r} has a nonlinear constraint "
                            f"({con.name}); combolayer's ILP is linear: pass a spec")
        row: dict[int, float] = {}
        for coef, var in zip(repn.linear_coefs, repn.linear_vars, strict=True):
            row[column[id(var)]] = row.get(column[id(var)], 0.0) + float(coef)
        constant = float(repn.constant)
        if con.equality:
            rows["eq"].append((row, pe.value(con.upper) - constant))
            continue
        if con.has_ub():
            rows["ub"].append((row, pe.value(con.upper) - constant))
        if con.has_lb():
            rows["ub"].append(({j: -a for j, a in row.items()}, constant - pe.value(con.lower)))
    lower, upper, integrality = [], [], []
    for v in ordered:
        low, high = (v.value, v.value) if v.fixed else (v.lb, v.ub)
        if low is None:
            raise SpecError(f"PyEPO model {optmodel!r} has a variable without a lower "
                            f"bound ({v.name}); combolayer's ILP needs finite lower bounds: "
                            "pass a spec")
        lower.append(float(low))
        upper.append(None if high is None else float(high))
        if not (v.is_binary() or v.is_integer() or v.is_continuous()):
            raise SpecError(f"PyEPO model {optmodel!r} has a variable whose domain is not "
                            f"an interval of the reals or the integers ({v.name} in "
                            f"{v.domain}); combolayer's ILP has binary, integer and "
                            "continuous variables: pass a spec")
        integrality.append("binary" if v.is_binary() else
                           "integer" if v.is_integer() else "continuous")

    def matrix(kind: str) -> tuple[sp.csr_matrix, np.ndarray]:
        columns = [j for row, _ in rows[kind] for j in row]
        values = [a for row, _ in rows[kind] for a in row.values()]
        starts = np.cumsum([0] + [len(row) for row, _ in rows[kind]])
        A = sp.csr_matrix((values, columns, starts), shape=(len(rows[kind]), len(ordered)))
        return A, np.array([rhs for _, rhs in rows[kind]], dtype=float)

    return _ilp(optmodel, len(cost_vars), *matrix("ub"), *matrix("eq"), integrality,
                lower, upper)


#: The Pyomo component types an ILP reader accounts for; any other active one (an
#: SOSConstraint, a LogicalConstraint, a GDP Disjunction, a Piecewise block) holds
#: constraints that the linear rows do not, and is refused rather than skipped.
_PYOMO_READ = frozenset({"Var", "Param", "Constraint", "Objective", "Set", "RangeSet",
                         "Expression", "Suffix", "Block"})


def _check_pyomo_components(optmodel: Any, model: Any) -> None:
    import pyomo.environ as pe

    for component in model.component_objects(active=True, descend_into=True):
        kind = component.ctype.__name__
        if kind not in _PYOMO_READ:
            raise SpecError(f"PyEPO model {optmodel!r} has a {kind} ({component.name}), "
                            "which combolayer's reader of linear rows cannot hold: pass a "
                            "spec")
    objectives = list(model.component_data_objects(pe.Objective, active=True))
    if len(objectives) != 1:
        raise SpecError(f"PyEPO model {optmodel!r} has {len(objectives)} active objectives: "
                        "expected one, the costs' (pass a spec)")


def _ilp(optmodel: Any, num_costs: int, A_ub, b_ub, A_eq, b_eq, integrality, lower,
         upper, known: np.ndarray | None = None) -> ILP:
    """The ILP of a read model: its first ``num_costs`` columns are the costs' variables;
    ``known`` is the known cost of every column (None: none)."""
    return ILP.from_matrices(
        shape=[num_costs], A_ub=A_ub if A_ub.shape[0] else None,
        b_ub=b_ub if A_ub.shape[0] else None, A_eq=A_eq if A_eq.shape[0] else None,
        b_eq=b_eq if A_eq.shape[0] else None, integrality=integrality, lower=lower,
        # from_matrices reads an array: an unbounded column is inf there, not None (NaN)
        upper=[np.inf if u is None else u for u in upper],
        sense="min" if _model_sign(optmodel) > 0 else "max",
        num_aux=len(lower) - num_costs,
        known_cost=known if known is not None and known.any() else None,
    )


def _ilp_from_rows(optmodel: Any, cost_columns: list[int], A: Any, row_lower: np.ndarray,
                   row_upper: np.ndarray, lower: np.ndarray, upper: np.ndarray,
                   integrality: list[str], objective: np.ndarray | None = None,
                   maximize: bool = False) -> ILP:
    """The ILP of a model read as ``row_lower <= A x <= row_upper``, ``lower <= x <= upper``
    (+-inf where there is no bound), in the model's column order.

    The costs' variables (``cost_columns``, in PyEPO's cost order) become the first
    columns and every other variable follows as auxiliary; a row with equal bounds is an
    equality, one with two finite bounds two ``<=`` rows. ``objective`` is the model's
    own objective coefficient of each column (``maximize``: its sense): PyEPO's
    ``setObj`` rewrites only the costs' variables, so the coefficients on the others
    (a facility's opening cost) stay in every solve and become the ILP's known cost;
    those on the costs' variables are the last costs set, not a known cost.
    """
    if (len(cost_columns) != optmodel.num_cost
            or len(set(cost_columns)) != len(cost_columns)):
        raise SpecError(f"PyEPO model {optmodel!r} maps its {optmodel.num_cost} costs onto "
                        f"{len(cost_columns)} variables (not one to one), so its constraints "
                        "cannot be read as an ILP on the costs: pass a spec")
    chosen = set(cost_columns)
    order = list(cost_columns) + [j for j in range(A.shape[1]) if j not in chosen]
    unbounded = np.flatnonzero(np.isneginf(lower[order]))
    if unbounded.size:
        raise SpecError(f"PyEPO model {optmodel!r} has a variable without a finite lower "
                        f"bound (variable {order[unbounded[0]]} of the model); combolayer's "
                        "ILP needs finite lower bounds: pass a spec")
    known = None
    if objective is not None:
        known = np.asarray(objective, dtype=float)[order]
        known[: len(cost_columns)] = 0.0
        if known.any() and maximize != (_model_sign(optmodel) < 0):
            raise SpecError(f"PyEPO model {optmodel!r} has modelSense "
                            f"{'min' if _model_sign(optmodel) > 0 else 'max'} but its solver's "
                            f"objective {'maximises' if maximize else 'minimises'} the known "
                            "terms on its other variables: expected the same sense (set both, "
                            "or pass a spec)")
    A = sp.csc_matrix(A)[:, order].tocsr()
    eq = (row_lower == row_upper) & np.isfinite(row_upper)
    le = np.isfinite(row_upper) & ~eq
    ge = np.isfinite(row_lower) & ~eq
    return _ilp(optmodel, len(cost_columns), sp.vstack([A[le], -A[ge]], format="csr"),
                np.concatenate([row_upper[le], -row_lower[ge]]), A[eq], row_upper[eq],
                [integrality[j] for j in order], lower[order].tolist(),
                [None if np.isposinf(u) else float(u) for u in upper[order]], known)


def _on_host(solution: Any) -> np.ndarray:
    """A model's solution as a float64 numpy array (MPAX's is a torch tensor, on the GPU
    where JAX has one)."""
    if hasattr(solution, "cpu"):
        solution = solution.cpu()
    return np.asarray(solution, dtype=np.float64)


class _Auxiliaries:
    """A Gurobi, COPT or pywraplp model's variables other than the costs' (the spec's
    auxiliaries, in its order): their objective coefficients, set for a solve with a
    known cost and put back after it, and their values after a solve."""

    def __init__(self, optmodel: Any, package: str) -> None:
        self.model = model = optmodel._model
        self.package = package
        if package == "ortools":
            variables, index = model.variables(), lambda v: v.index()
        else:
            variables, index = model.getVars(), lambda v: v.index
        chosen = {index(v) for v in _cost_variables(optmodel)}
        self.variables = [v for v in variables if index(v) not in chosen]

    @classmethod
    def of(cls, optmodel: Any) -> _Auxiliaries | None:
        """The model's auxiliaries, or None for a model whose objective is not read here."""
        if _dsl_problem(optmodel) is not None or _is_mpax(optmodel):
            return None
        model = getattr(optmodel, "_model", None)
        if type(model).__module__.startswith(("coptpy", "coptcore")):
            return cls(optmodel, "coptpy")
        if type(model).__module__.startswith("gurobipy"):
            return cls(optmodel, "gurobipy")
        if hasattr(model, "ExportModelToProto"):
            return cls(optmodel, "ortools")
        return None

    def _read(self, gurobi: str, copt: str, ortools: Callable[[Any], float]) -> np.ndarray:
        """One value per variable: Gurobi's attribute ``gurobi``, COPT's info ``copt``, or
        ``ortools(variable)``."""
        if not self.variables:
            return np.zeros(0)
        if self.package == "gurobipy":
            return np.array(self.model.getAttr(gurobi, self.variables), dtype=float)
        if self.package == "coptpy":
            from coptpy import COPT

            return np.array(self.model.getInfo(getattr(COPT.Info, copt), self.variables),
                            dtype=float).reshape(-1)
        return np.array([ortools(v) for v in self.variables], dtype=float)

    def objective(self) -> np.ndarray:
        """The coefficients as the model holds them, its pending changes included: Gurobi
        applies attribute changes lazily and reads back the values of its last update
        (COPT and pywraplp apply them at once)."""
        if self.package == "gurobipy":
            self.model.update()
        return self._read("Obj", "Obj", lambda v: self.model.Objective().GetCoefficient(v))

    def set_objective(self, values: np.ndarray, *, apply: bool = False) -> None:
        """Set the coefficients; ``apply`` makes a Gurobi model apply them now rather
        than at its next solve (a restored objective then reads back as it was)."""
        if not self.variables:
            return
        if self.package == "gurobipy":
            self.model.setAttr("Obj", self.variables, values.tolist())
            if apply:
                self.model.update()
        elif self.package == "coptpy":
            from coptpy import COPT

            self.model.setInfo(COPT.Info.Obj, self.variables, values.tolist())
        else:
            objective = self.model.Objective()
            for v, value in zip(self.variables, values.tolist(), strict=True):
                objective.SetCoefficient(v, value)

    def values(self) -> np.ndarray:
        return self._read("X", "Value", lambda v: v.solution_value())


class _PyEPOKernel(KernelDefaults):
    """Minimise ``<c, y>`` row by row with the model's own solver (setObj, solve).

    The model's sense is folded in once, as ``sign``: a maximising model gets ``-c``.
    Full-width costs (the `Solver`'s known cost, or a call for the auxiliaries) set the
    objective of the model's other variables too, for the batch, and return their
    values (Gurobi, COPT and pywraplp models); the model's own coefficients are put
    back after the batch. One model is not thread-safe, hence the lock.
    """

    array_api = "numpy"

    def __init__(self, optmodel: Any, num_outputs: int) -> None:
        self.optmodel = optmodel
        self.sign = _model_sign(optmodel)
        self.num_outputs = num_outputs
        self._lock = threading.Lock()

    def _auxiliaries(self, width: int) -> _Auxiliaries | None:
        """The model's auxiliaries for costs of ``width`` entries: None for the predicted
        costs alone; SolverError where the model's objective is not read here or the
        width is not the spec's."""
        if width == self.num_outputs:
            return None
        aux = _Auxiliaries.of(self.optmodel)
        if aux is None or width != self.num_outputs + len(aux.variables):
            raise SolverError(f"PyEPO model {self.optmodel!r} takes its {self.num_outputs} "
                              "predicted costs only: it cannot solve with a known cost or "
                              "return the auxiliaries (a pyepo.dsl model, or a Gurobi, COPT "
                              "or pywraplp model with the spec read from it, can)")
        return aux

    def _set_costs(self, row: np.ndarray) -> None:
        self.optmodel.setObj(self.sign * row)

    def _solution(self, solution: Any, width: int) -> np.ndarray:
        return _on_host(solution).reshape(-1)[:width]

    def __call__(self, costs: np.ndarray) -> np.ndarray:
        out = np.empty_like(costs)
        n = self.num_outputs
        with self._lock:
            aux = self._auxiliaries(costs.shape[1])
            kept = None if aux is None else aux.objective()
            try:
                for b, row in enumerate(costs):
                    self._set_costs(row if aux is None else row[:n])
                    if aux is not None:
                        aux.set_objective(self.sign * row[n:])
                    try:
                        solution, _ = self.optmodel.solve()
                    except RuntimeError as error:  # PyEPO's "... found no solution (status 3)"
                        _no_solution(self.optmodel, error)
                    if aux is None:
                        out[b] = self._solution(solution, costs.shape[1])
                    else:
                        out[b, :n] = self._solution(solution, n)
                        out[b, n:] = aux.values()
            finally:
                if aux is not None:
                    aux.set_objective(kept, apply=True)
        # Solvers return integers within their tolerance; snap those to exact values.
        rounded = np.rint(out)
        return np.where(np.abs(out - rounded) < 1e-6, rounded, out) + 0.0


#: Solver status codes PyEPO's bare RuntimeError leaves out, by the model's package:
#: Gurobi's ``Status`` and COPT's ``status`` attributes, OR-Tools' pywraplp status
#: (in PyEPO's message). Any other model is read from the message's words (Pyomo's
#: "termination infeasible").
_STATUS_OUTCOMES = {
    "gurobipy": ("Status", {3: Outcome.INFEASIBLE, 4: Outcome.INFEASIBLE_OR_UNBOUNDED,
                            5: Outcome.UNBOUNDED}),
    "coptpy": ("status", {2: Outcome.INFEASIBLE, 3: Outcome.UNBOUNDED,
                          4: Outcome.INFEASIBLE_OR_UNBOUNDED}),
    "ortools.linear_solver": (None, {2: Outcome.INFEASIBLE, 3: Outcome.UNBOUNDED}),
}


def _no_solution(optmodel: Any, error: RuntimeError) -> None:
    """Raise combolayer's error for a PyEPO solve that found no solution:
    `InfeasibleError` for an infeasible model, `SolverError` otherwise, naming the
    solver's own words; PyEPO raises a bare ``RuntimeError`` for all of them."""
    import re

    model = getattr(optmodel, "_model", None)
    package = type(model).__module__
    outcome = Outcome.STOPPED
    for prefix, (attribute, codes) in _STATUS_OUTCOMES.items():
        if package.startswith(prefix):
            code: Any = None
            if attribute is not None:
                try:
                    code = getattr(model, attribute)
                except Exception:  # noqa: BLE001 -- a status it cannot report
                    code = None
            else:
                found = re.search(r"status (\d+)", str(error))
                code = int(found.group(1)) if found else None
            outcome = codes.get(code, Outcome.STOPPED)
            break
    else:
        words = str(error).lower()
        if "infeasible" in words and "unbounded" not in words:
            outcome = Outcome.INFEASIBLE
        elif "unbounded" in words and "infeasible" not in words:
            outcome = Outcome.UNBOUNDED

    def is_infeasible() -> bool:  # no solution with a zero cost either
        optmodel.setObj(np.zeros(optmodel.num_cost))
        try:
            optmodel.solve()
        except RuntimeError:
            return True
        return False

    settle(outcome, f"PyEPO model {type(optmodel).__name__}", lambda: None,
           has_solution=False, status=str(error), is_infeasible=is_infeasible)


class _MpaxKernel(_PyEPOKernel):
    """An MPAX model's batch in one call of its vmapped, jitted PDLP solve
    (``batch_optimize``), which minimises the costs as given (the model's ``setObj``
    is what folds its sense in). Each row's MPAX status is mapped onto combolayer's:
    an iteration or time limit returns the iterate as ``"inaccurate"`` (a warning, or
    an error under ``on_limit="raise"``) when it is finite, and raises `SolverError`
    when it is not; infeasible and unbounded raise."""

    def __call__(self, costs: np.ndarray) -> np.ndarray:
        return warn_not_optimal(self.with_statuses(costs), "MPAX")

    def with_statuses(self, costs: np.ndarray) -> Solved:
        import jax.numpy as jnp

        with self._lock:
            solutions, _, statuses = self.optmodel.batch_optimize(
                jnp.asarray(self._model_costs(costs), dtype=jnp.float32))
        solutions = self._solutions(np.asarray(solutions, dtype=np.float64), costs.shape[1])
        statuses = np.asarray(statuses)
        finite = np.isfinite(solutions).all(axis=1)  # MPAX can stop at a NaN iterate
        outcomes, optimal = _mpax_outcomes()
        if finite.all() and (statuses == optimal).all():
            return Solved(solutions)  # the common case: no row to settle one by one
        out = np.empty_like(solutions)
        settled = []
        for b, status in enumerate(statuses.tolist()):
            outcome, name = outcomes[status]
            row = settle(outcome, "MPAX", lambda b=b: solutions[b],
                         has_solution=bool(finite[b]),
                         status=name if finite[b] else f"{name}, at a NaN or inf iterate")
            out[b] = row.values
            settled.extend(row.statuses or (Outcome.OPTIMAL.value,))
        return Solved(out, tuple(settled))


    def _model_costs(self, costs: np.ndarray) -> np.ndarray:
        return costs

    def _solutions(self, solutions: np.ndarray, width: int) -> np.ndarray:
        return solutions[:, : self.num_outputs]


class _DslOrder:
    """A compiled ``pyepo.dsl`` model: the spec's variables (the predicted ones in
    ``c_pred_index`` order, then the others) sit at ``order`` in the model. Costs of
    any width (N, or every variable with the known cost added by the `Solver`) go
    into the model's order as one full-length objective, set whole (``_setFullObj``,
    no second scatter onto ``fixed_cost``); solutions come back in the spec's order."""

    optmodel: Any
    sign: float

    def __init__(self, optmodel: Any, num_outputs: int) -> None:
        super().__init__(optmodel, num_outputs)  # type: ignore[call-arg]
        self.order = dsl_order(_dsl_problem(optmodel), optmodel)

    def _model_costs(self, costs: np.ndarray) -> np.ndarray:
        full = np.zeros((len(costs), len(self.order)))
        full[:, self.order[: costs.shape[1]]] = costs
        return full

    def _auxiliaries(self, width: int) -> None:
        return None  # full-width costs go into the model's order whole

    def _set_costs(self, row: np.ndarray) -> None:
        self.optmodel._setFullObj(self.sign * self._model_costs(row[None])[0])

    def _solution(self, solution: Any, width: int) -> np.ndarray:
        return _on_host(solution).reshape(-1)[self.order[:width]]

    def _solutions(self, solutions: np.ndarray, width: int) -> np.ndarray:
        return solutions[:, self.order[:width]]


class _DslKernel(_DslOrder, _PyEPOKernel):
    """A compiled DSL model solved row by row with its own solver."""


class _DslMpaxKernel(_DslOrder, _MpaxKernel):
    """A compiled DSL model for MPAX: the batch in one ``batch_optimize`` call of the
    full-length, minimisation costs in the model's order."""


def _dsl_problem(optmodel: Any) -> Any:
    """The ``pyepo.dsl.Problem`` a compiled DSL model was built from, or None."""
    problem = getattr(optmodel, "problem", None)
    if problem is None or not all(hasattr(problem, name) for name in (
            "c_pred_index", "fixed_cost", "constrs", "num_vars")):
        return None
    return problem


def dsl_order(problem: Any, optmodel: Any) -> np.ndarray:
    """The model positions of the spec's variables: ``c_pred_index`` (the predicted
    costs' variables, in the cost's order), then every other variable in the model's
    order. A mapping that is not one cost per distinct variable raises `SpecError`."""
    index = np.asarray(problem.c_pred_index, dtype=int).reshape(-1)
    n = int(problem.num_vars)
    if (len(index) != optmodel.num_cost or len(np.unique(index)) != len(index)
            or ((index < 0) | (index >= n)).any()):
        raise SpecError(f"PyEPO DSL model {optmodel!r} maps its {optmodel.num_cost} predicted "
                        f"costs onto the variables {index.tolist()} (of {n}): expected one "
                        "distinct variable per cost, so it cannot be read as an ILP")
    return np.concatenate([index, np.setdiff1d(np.arange(n), index)])


def dataset_solutions(dataset: Any, width: int) -> np.ndarray:
    """The first ``width`` columns of a PyEPO ``optDataset``'s true solutions (``sols``) in
    the spec's variable order, as float64 ``(num_data, width)`` rows: the outputs
    (``width`` = N) or, for a DSL model, whole solutions (``width`` = ``num_vars``).

    A compiled ``pyepo.dsl`` model's ``sols`` are whole solutions in the model's variable
    order; they are put in `dsl_order` (the costs' variables first, in the cost's
    order). Any other model's ``sols`` are its costs' variables, in the cost's order.

    Raises:
        ValueError: the solutions hold fewer than ``width`` values per instance (a model
            that is not a DSL one keeps no auxiliaries).
    """
    sols = np.asarray(dataset.sols, dtype=float)
    sols = sols.reshape(len(sols), -1)
    problem = _dsl_problem(dataset.model)
    if problem is not None:
        order = dsl_order(problem, dataset.model)
        if sols.shape[1] != len(order):
            raise InputError(f"PyEPO dataset sols hold {sols.shape[1]} values per instance "
                             f"but its DSL model {dataset.model!r} has {len(order)} variables: "
                             "expected whole solutions in the model's order")
        sols = sols[:, order]
    if sols.shape[1] < width:
        raise InputError(f"PyEPO dataset sols hold {sols.shape[1]} values per instance, "
                         f"expected {width} (the predicted costs' variables"
                         f"{'' if width == dataset.model.num_cost else ' and the others'}); "
                         "a PyEPO model that is not a pyepo.dsl one returns the costs' "
                         "variables only")
    return np.ascontiguousarray(sols[:, :width])


def ilp_from_dsl(optmodel: Any) -> ILP:
    """The ILP of a compiled ``pyepo.dsl`` model (any of its backends: Gurobi, COPT,
    Pyomo, OR-Tools, MPAX), read from the DSL problem itself: the variables the cost
    lands on (``c_pred_index``) are the outputs in the cost's order, the others
    auxiliaries, ``fixed_cost`` the known cost; ``obj_offset`` (a constant) changes no
    argmin. A quadratic term, a quadratic row or an unbounded-below variable raises
    `SpecError`."""
    problem = _dsl_problem(optmodel)
    order = dsl_order(problem, optmodel)
    if getattr(problem, "obj_Q", None) is not None:
        raise SpecError(f"PyEPO DSL model {optmodel!r} has a quadratic objective term: "
                        "combolayer's ILP is linear")
    ub, eq = [], []
    for i, (quadratic, A, sense, b) in enumerate(problem.constrs):
        if quadratic is not None:
            raise SpecError(f"PyEPO DSL model {optmodel!r}: constraint {i} is quadratic; "
                            "combolayer's ILP is linear")
        A, b = sp.csr_matrix(A, dtype=float), np.asarray(b, dtype=float).reshape(-1)
        if sense in ("<=", "<"):
            ub.append((A, b))
        elif sense in (">=", ">"):
            ub.append((-A, -b))
        elif sense in ("==", "="):
            eq.append((A, b))
        else:
            raise SpecError(f"PyEPO DSL model {optmodel!r}: constraint {i} has sense "
                            f"{sense!r}, expected '<=', '>=' or '=='")
    n = len(order)

    def stack(rows: list) -> tuple[sp.csr_matrix, np.ndarray]:
        if not rows:
            return sp.csr_matrix((0, n)), np.zeros(0)
        A = sp.vstack([A for A, _ in rows], format="csc")[:, order].tocsr()
        return A, np.concatenate([b for _, b in rows])

    A_ub, b_ub = stack(ub)
    A_eq, b_eq = stack(eq)
    kinds = [_VTYPES[getattr(t, "value", t)] for t in np.asarray(problem.var_type)[order]]
    lower = np.asarray(problem.var_lb, dtype=float)[order]
    upper = np.asarray(problem.var_ub, dtype=float)[order]
    if np.isneginf(lower).any():
        j = int(order[np.flatnonzero(np.isneginf(lower))[0]])
        raise SpecError(f"PyEPO DSL model {optmodel!r} has a variable without a finite lower "
                        f"bound (variable {j} of the model); combolayer's ILP needs finite "
                        "lower bounds: pass a spec")
    known = np.asarray(problem.fixed_cost, dtype=float)[order]
    num_cost = optmodel.num_cost
    return ILP.from_matrices(
        shape=[num_cost], A_ub=A_ub if A_ub.shape[0] else None,
        b_ub=b_ub if A_ub.shape[0] else None, A_eq=A_eq if A_eq.shape[0] else None,
        b_eq=b_eq if A_eq.shape[0] else None, integrality=kinds, lower=lower.tolist(),
        upper=[None if np.isposinf(u) else float(u) for u in upper],
        sense="min" if _model_sign(optmodel) > 0 else "max", num_aux=n - num_cost,
        known_cost=known if known.any() else None)


@functools.cache
def _mpax_outcomes() -> tuple[dict[int, tuple[Outcome, str]], int]:
    """MPAX's termination codes as ``code -> (combolayer outcome, MPAX's name)``, and
    the code of an optimal row."""
    from mpax.termination import TerminationStatus

    ladder = {TerminationStatus.OPTIMAL: Outcome.OPTIMAL,
              TerminationStatus.PRIMAL_INFEASIBLE: Outcome.INFEASIBLE,
              TerminationStatus.DUAL_INFEASIBLE: Outcome.UNBOUNDED,
              TerminationStatus.ITERATION_LIMIT: Outcome.INACCURATE,
              TerminationStatus.TIME_LIMIT: Outcome.INACCURATE}
    outcomes = {int(code): (ladder.get(code, Outcome.STOPPED), code.name)
                for code in TerminationStatus}
    return outcomes, int(TerminationStatus.OPTIMAL)


class _ModelRecipe:
    """How to build a PyEPO model again: its class and the arguments of its
    constructor, read back from the attributes of the same names (PyEPO's models keep
    them: ``shortestPathModel(grid)`` has ``.grid``, ``knapsackModel(weights,
    capacity)`` has ``.weights`` and ``.capacity``)."""

    def __init__(self, cls: type, kwargs: dict[str, Any], label: str) -> None:
        self.cls, self.kwargs, self.label = cls, kwargs, label

    @classmethod
    def of(cls, optmodel: Any) -> _ModelRecipe:
        import inspect

        kind = type(optmodel)
        label = f"{kind.__module__}.{kind.__qualname__}"
        kwargs, missing = {}, []
        for name, parameter in inspect.signature(kind.__init__).parameters.items():
            if name == "self" or parameter.kind in (parameter.VAR_POSITIONAL,
                                                    parameter.VAR_KEYWORD):
                continue
            if hasattr(optmodel, name):
                kwargs[name] = getattr(optmodel, name)
            else:
                missing.append(name)
        if missing:
            raise InputTypeError(
                f"a layer or solver on the PyEPO model {label} cannot be copied, pickled or "
                f"saved: the model holds its solver's native model, which cannot be pickled, "
                f"and its constructor's argument(s) {missing} are not attributes of the model "
                f"to build it again from. Build the layer again from a new model in the "
                f"other process (docs/core.md, 'Copies and checkpoints')")
        return cls(kind, kwargs, label)

    def build(self, backend: PyEPOBackend) -> Any:
        """The model again; refused when its constraints read differently from the
        original's (a model changed after it was built cannot be rebuilt this way)."""
        optmodel = self.cls(**self.kwargs)
        if backend._spec is not None and PyEPOBackend(optmodel).readable:
            rebuilt = PyEPOBackend(optmodel).spec
            if rebuilt != backend._spec:
                raise InputTypeError(
                    f"the PyEPO model {self.label} built again from {sorted(self.kwargs)} "
                    f"reads as another problem than the original (its variables, bounds or "
                    f"constraints differ): the original was changed after it was built, so "
                    f"a copy cannot be made from its constructor. Build the layer again from "
                    f"a new model instead (docs/core.md, 'Copies and checkpoints')")
        return optmodel


class PyEPOBackend:
    """A PyEPO ``optModel`` as a combolayer backend (see the module docstring).

    Attributes:
        optmodel: the wrapped model; its solver does every solve.
        name: ``"pyepo:<model class>"``, the solver's ``backend`` label.
    """

    def __init__(self, optmodel: Any) -> None:
        for attribute in ("setObj", "solve", "num_cost"):
            if not hasattr(optmodel, attribute):
                raise InputTypeError(f"from_pyepo expects a PyEPO optModel (with setObj, solve and "
                                f"num_cost), got {type(optmodel).__name__}")
        self.optmodel = optmodel
        self.name = f"pyepo:{type(optmodel).__name__}"
        self._spec: ILP | None = None
        self._init_runtime()

    def _init_runtime(self) -> None:
        #: Held by every kernel that solves with `optmodel` itself (one model is not
        #: thread-safe), and whether a kernel has it already (`model_for_kernel`).
        self._lock = threading.Lock()
        self._handed = False

    def __repr__(self) -> str:
        return f"from_pyepo({type(self.optmodel).__name__})"

    def __getstate__(self) -> dict:
        # A PyEPO model holds its solver's native model (Gurobi's, COPT's, ...), which
        # cannot be pickled: a copy keeps how to build the model again instead.
        state = {key: value for key, value in self.__dict__.items()
                 if key not in ("_lock", "_handed")}
        state["optmodel"] = _ModelRecipe.of(self.optmodel)
        return state

    def __setstate__(self, state: dict) -> None:
        recipe = state.pop("optmodel")
        self.__dict__.update(state)
        self._init_runtime()
        self.optmodel = recipe.build(self)

    def model_for_kernel(self) -> tuple[Any, threading.Lock | None]:
        """The model one more kernel solves with, and the lock it must share (None: its
        own): the wrapped model for the first kernel; for each one after (an executor's
        threads) the model built again from its constructor's arguments, a model of its
        own, or where it cannot be built again the wrapped one, the kernels taking turns."""
        if self._handed:
            try:
                return _ModelRecipe.of(self.optmodel).build(self), None
            except TypeError:
                pass
        self._handed = True
        return self.optmodel, self._lock

    @property
    def readable(self) -> bool:
        """Whether the model's constraints can be read into a spec (Gurobi, COPT, MPAX,
        Pyomo and OR-Tools models, pywraplp and CP-SAT)."""
        return self._reader is not None

    @property
    def _reader(self):
        if _dsl_problem(self.optmodel) is not None:
            return ilp_from_dsl  # before the backends: the DSL problem says it all
        if _is_mpax(self.optmodel):
            return ilp_from_mpax
        model = getattr(self.optmodel, "_model", None)
        if type(model).__module__.startswith(("coptpy", "coptcore")):
            return ilp_from_copt
        if hasattr(model, "getA"):
            return ilp_from_gurobi
        if hasattr(model, "component_data_objects") and hasattr(model, "cost"):
            return ilp_from_pyomo
        if hasattr(model, "ExportModelToProto") or hasattr(model, "Proto"):
            return ilp_from_ortools  # a pywraplp Solver or a CP-SAT CpModel
        return None

    @property
    def spec(self) -> ILP:
        """The model's constraints as an [`ILP`][combolayer.ILP] (read once).

        Raises:
            SpecError: the model's constraints cannot be read (not a Gurobi, COPT, MPAX,
                Pyomo or OR-Tools model, or not linear); the message says to pass a spec
                instead.
        """
        if self._spec is None:
            if not self.readable:
                raise SpecError(
                    f"cannot read the constraints of PyEPO model {self.optmodel!r}: only "
                    "Gurobi models (pyepo.model.grb), COPT models (pyepo.model.copt), MPAX "
                    "models (pyepo.model.mpax), Pyomo models (pyepo.model.omo) and OR-Tools "
                    "models (pyepo.model.ort, pywraplp and CP-SAT) expose them. "
                    "Pass the problem's spec yourself: cl.ComboLayer(spec, "
                    "backend=cl.backends.from_pyepo(model)); projection='auto' then analyses "
                    "that spec"
                )
            self._spec = self._reader(self.optmodel)
        return self._spec

    def to_backend_config(self) -> BackendConfig:
        """The config that names this model's backend: ``"pyepo"``, with the wrapper as
        ``options["model"]`` (what `BackendConfig.load` returns for the wrapper)."""
        return BackendConfig(name=PyEPOModelBackend.name, options={"model": self})


@register_backend
class PyEPOModelBackend(Backend):
    """The backend ``"pyepo"``: the PyEPO model in ``config.options["model"]`` (a
    `PyEPOBackend`, from `from_pyepo`) solves every instance with its own solver.

    Without a model in its config it solves nothing, so ``"auto"`` never picks it; its
    solvers' ``backend`` label names the model's class (``"pyepo:shortestPathModel"``).
    """

    name = "pyepo"
    requires = ("pyepo",)
    generic_tier = Tier.LAST
    config_options = ("model",)

    @classmethod
    def label(cls, config: BackendConfig) -> str:
        return _wrapper(config).name

    @classmethod
    def ignored_limits(cls, config: BackendConfig) -> str | None:
        return None  # not ignored: compile refuses them, saying where they belong

    def accepts(self, spec: Spec) -> str | None:
        return None  # any spec of the model's size: checked in compile, with the model

    def compile(self, spec: Spec, config: BackendConfig) -> Kernel:
        if config.time_limit is not None or config.mip_gap:
            raise InputError(
                "backend 'pyepo' cannot apply BackendConfig's time_limit or mip_gap: the "
                "PyEPO model solves with its own solver's settings; set them on the model "
                "(a Gurobi model's optmodel._model.Params.TimeLimit, MIPGap) and leave them "
                "out of the config")
        optmodel, lock = _wrapper(config).model_for_kernel()
        n = optmodel.num_cost
        if spec.num_outputs != n:
            raise SpecError(f"{spec.label} has {spec.num_outputs} outputs but PyEPO model "
                            f"{optmodel!r} predicts {n} costs: expected equal sizes")
        if _dsl_problem(optmodel) is not None:
            kinds = (_DslMpaxKernel, _DslKernel)
        else:
            kinds = (_MpaxKernel, _PyEPOKernel)
        kernel = kinds[0 if _is_mpax(optmodel) else 1](optmodel, n)
        if lock is not None:
            kernel._lock = lock  # kernels on the wrapped model take turns
        return kernel


def _wrapper(config: BackendConfig) -> PyEPOBackend:
    """The wrapped model a ``"pyepo"`` config carries."""
    model = config.options.get("model")
    if not isinstance(model, PyEPOBackend):
        raise InputTypeError(f'backend "pyepo" expects options["model"] = '
                        f"cl.backends.from_pyepo(optmodel), got {type(model).__name__}")
    return model


def from_pyepo(optmodel: Any) -> PyEPOBackend:
    """Wrap a PyEPO ``optModel`` so that it is accepted wherever a backend is.

    Args:
        optmodel: the PyEPO ``optModel`` (any of its backends).

    Returns:
        A [`PyEPOBackend`][combolayer.backends.PyEPOBackend], to pass as ``backend``
        (or in place of the spec) to `make_solver`, `ComboLayer` and the losses.

    Examples:
        >>> import combolayer as cl                                   # doctest: +SKIP
        >>> from pyepo.model.grb import shortestPathModel             # doctest: +SKIP
        >>> backend = cl.backends.from_pyepo(shortestPathModel(grid=(5, 5)))  # doctest: +SKIP
        >>> layer = cl.ComboLayer(backend, method="spo")              # doctest: +SKIP
    """
    return optmodel if isinstance(optmodel, PyEPOBackend) else PyEPOBackend(optmodel)
