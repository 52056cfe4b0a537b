"""PyEPO's OR-Tools models (pywraplp and CP-SAT) behind combolayer: from_pyepo reads their
constraints."""

import numpy as np
import pytest
import torch
from pyepo_kit import (
    check_grid_model_is_read,
    check_knapsack_model_is_read,
    check_known_terms_are_read,
    own_objectives,
)

import combolayer as cl

pytest.importorskip("pyepo", reason="pyepo is not installed (optional extra [pyepo])")
pytest.importorskip("ortools", reason="ortools is not installed (optional extra [pyepo])")
ort = pytest.importorskip("pyepo.model.ort", reason="pyepo's OR-Tools models are unavailable")

#: pywraplp (GLOP, PyEPO's default for shortest path) and CP-SAT.
PATH_MODELS = [ort.shortestPathModel, ort.shortestPathCpModel]
#: pywraplp (SCIP, PyEPO's default) and CP-SAT.
KNAPSACK_MODELS = [ort.knapsackModel, ort.knapsackCpModel]


def grid_costs(seed: int, shape: tuple[int, int]) -> np.ndarray:
    """Random costs in steps of 1e-3, which CP-SAT's integer scaling (x 1e6) keeps exact."""
    return np.random.default_rng(seed).integers(1, 1000, shape) / 1000


@pytest.mark.parametrize("model_class", PATH_MODELS, ids=lambda m: m.__name__)
@pytest.mark.filterwarnings("ignore::combolayer.NoIntegerWarning")  # an LP on purpose
def test_shortest_path_constraints_are_read_with_the_flow_conservation(model_class):
    check_grid_model_is_read(model_class(grid=(5, 5)), grid_costs(0, (8, 40)))


@pytest.mark.parametrize("model_class", KNAPSACK_MODELS, ids=lambda m: m.__name__)
def test_knapsack_rows_types_and_sense_are_read(model_class):
    weights = np.random.default_rng(2).integers(3, 8, (2, 12)).astype(float)
    read = check_knapsack_model_is_read(model_class(weights=weights, capacity=[20.0, 20.0]),
                                        weights, [20.0, 20.0], grid_costs(3, (8, 12)))
    assert set(np.unique(read)) <= {0.0, 1.0}


@pytest.mark.parametrize("model_class", PATH_MODELS, ids=lambda m: m.__name__)
def test_combo_layer_on_the_model_projects_out_the_flow(model_class):
    layer = cl.ComboLayer(cl.backends.from_pyepo(model_class(grid=(5, 5))), method="identity",
                          projection="auto")
    assert layer.solver.backend == f"pyepo:{model_class.__name__}"
    w = torch.tensor(grid_costs(4, (3, 40)), dtype=torch.float32, requires_grad=True)
    y = layer(w)
    best = cl.make_solver(cl.data.shortest_path_spec((5, 5))).solve(w.detach().double())
    # float32 costs rounded by CP-SAT's scaling: equal objectives up to that rounding
    torch.testing.assert_close((w.detach() * y).sum(-1).double(), (w.detach() * best).sum(-1)
                               .double(), atol=1e-4, rtol=0)
    (y * torch.randn(3, 40, generator=torch.Generator().manual_seed(5))).sum().backward()
    normals = torch.tensor(cl.analyze(layer.spec).normals, dtype=torch.float32)
    torch.testing.assert_close(w.grad @ normals.T, torch.zeros(3, normals.shape[0]),
                               atol=1e-5, rtol=0)


@pytest.mark.filterwarnings("ignore::combolayer.NoIntegerWarning")  # an LP on purpose
def test_two_sided_rows_are_read_and_free_variables_refused():
    class Ranged(ort.shortestPathModel):
        def _getModel(self):
            model, x = super()._getModel()
            # -1 <= x_first <= 0.5: one row with two finite bounds, read as two <= rows
            row = model.Constraint(-1.0, 0.5)
            row.SetCoefficient(next(iter(x.values())), 1.0)
            return model, x

    model = Ranged(grid=(3, 3))
    spec = cl.backends.from_pyepo(model).spec
    assert spec.to_matrices()[0].shape[0] == 2
    costs = np.zeros((1, 12))
    costs[0, 0] = -1.0  # every path costs 0 but through the first arc: the bound decides
    y = cl.make_solver(spec).solve(costs)
    assert y[0, 0] == 0.5  # the LP (GLOP's variables are continuous) sends half the flow
    np.testing.assert_allclose((costs * y).sum(1), own_objectives(model, costs), atol=1e-9)

    class Free(ort.shortestPathModel):
        def _getModel(self):
            model, x = super()._getModel()
            model.NumVar(-model.infinity(), model.infinity(), "free")
            return model, x

    with pytest.raises(cl.SpecError, match="without a finite lower bound.*pass a spec"):
        cl.ComboLayer(cl.backends.from_pyepo(Free(grid=(3, 3))))


@pytest.mark.parametrize(("add", "message"), [
    (lambda model, a, b: model.add_bool_or([a, b]), "has a bool_or constraint"),
    (lambda model, a, b: model.add(a + b != 1), "domain is 2 intervals"),
    (lambda model, a, b: model.add(a <= 0).only_enforce_if(b), "an enforced linear constraint"),
], ids=["bool_or", "not_equal", "enforced"])
def test_cp_sat_constraints_that_are_not_plain_linear_are_refused(add, message):
    class Extra(ort.shortestPathCpModel):
        def _getModel(self):
            model, x = super()._getModel()
            add(model, *list(x.values())[:2])
            return model, x

    backend = cl.backends.from_pyepo(Extra(grid=(3, 3)))
    assert backend.readable  # a CP-SAT model, whose constraints are not all linear
    with pytest.raises(cl.SpecError, match=f"{message}.*pass a spec"):
        _ = backend.spec


def test_cp_sat_negative_references_are_negated_variables():
    class Negated(ort.shortestPathCpModel):
        def _getModel(self):
            model, x = super()._getModel()
            # 2 * (-x_first) >= -1, written with the negative reference of x_first: the
            # first arc is never taken (read as +x_first, the row would hold always)
            row = model.Proto().constraints.add()
            row.linear.vars.append(-next(iter(x.values())).index - 1)
            row.linear.coeffs.append(2)
            row.linear.domain.extend([-1, 2**63 - 1])
            return model, x

    model = Negated(grid=(3, 3))
    if model._model.Validate():  # OR-Tools >= 9.15 forbids negated variables in a linear row
        with pytest.raises(cl.SpecError, match="not a valid CP-SAT model.*negated variable"):
            _ = cl.backends.from_pyepo(model).spec
        return
    costs = grid_costs(6, (4, 12))
    costs[:, 0] = -1.0
    y = cl.make_solver(cl.backends.from_pyepo(model).spec).solve(costs)
    assert (y[:, 0] == 0).all()
    np.testing.assert_allclose(np.sum(costs * y, 1), own_objectives(model, costs), atol=1e-9)


def test_a_cp_sat_model_its_own_validator_refuses_is_refused_with_its_message():
    class OutOfRange(ort.shortestPathCpModel):
        def _getModel(self):
            model, x = super()._getModel()
            row = model.Proto().constraints.add()
            row.linear.vars.append(10_000)  # no such variable
            row.linear.coeffs.append(1)
            row.linear.domain.extend([0, 1])
            return model, x

    with pytest.raises(cl.SpecError, match="not a valid CP-SAT model, which its own solver "
                                           "refuses too; CP-SAT's validator says: Out of "
                                           "bound integer variable 10000"):
        _ = cl.backends.from_pyepo(OutOfRange(grid=(3, 3))).spec


def test_cp_sat_proto_read_from_its_text_form_as_newer_or_tools_hands_it_out():
    class TextOnly:  # OR-Tools >= 9.12: a C++ proto wrapper, whose str is the text format
        def __init__(self, proto):
            self.proto = proto

        def __str__(self):
            return str(self.proto)

    model = ort.shortestPathCpModel(grid=(3, 3))
    direct = cl.backends.from_pyepo(model).spec
    proto = model._model.Proto()
    model._model.Proto = lambda: TextOnly(proto)
    assert cl.backends.from_pyepo(model).spec == direct


def test_objective_terms_on_other_variables_are_the_specs_known_cost():
    from ortools.linear_solver import pywraplp

    class Facility(ort.optOrtModel):
        def _getModel(self):
            m = pywraplp.Solver.CreateSolver("SCIP")
            x = {i: m.BoolVar(f"x{i}") for i in range(3)}
            z = m.BoolVar("z")
            m.Add(sum(x.values()) == 2)
            m.Add(x[0] <= z)
            m.Objective().SetCoefficient(z, 5.0)
            return m, x

    check_known_terms_are_read(Facility())
