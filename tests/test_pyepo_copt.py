"""PyEPO's COPT models behind combolayer: from_pyepo reads their constraints, or says
why it cannot (callbacks, shared costs, quadratic rows)."""

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
pytest.importorskip("coptpy", reason="coptpy is not installed (optional extra [pyepo])")
copt = pytest.importorskip("pyepo.model.copt", reason="pyepo's COPT models are unavailable")


def test_shortest_path_constraints_are_read_with_the_flow_conservation():
    check_grid_model_is_read(copt.shortestPathModel(grid=(5, 5)),
                             np.random.default_rng(0).random((8, 40)))


def test_knapsack_rows_types_and_sense_are_read():
    weights = np.random.default_rng(2).integers(3, 8, (2, 12)).astype(float)
    check_knapsack_model_is_read(copt.knapsackModel(weights=weights, capacity=[20.0, 20.0]),
                                 weights, [20.0, 20.0], np.random.default_rng(3).random((8, 12)))


def test_combo_layer_on_the_model_projects_out_the_flow():
    layer = cl.ComboLayer(cl.backends.from_pyepo(copt.shortestPathModel(grid=(5, 5))),
                          method="identity", projection="auto")
    assert layer.solver.backend == "pyepo:shortestPathModel"
    w = torch.rand(3, 40, generator=torch.Generator().manual_seed(4), requires_grad=True)
    y = layer(w)
    best = cl.make_solver(cl.data.shortest_path_spec((5, 5))).solve(w.detach().double())
    torch.testing.assert_close((w.detach() * y).sum(-1).double(),
                               (w.detach() * best).sum(-1).double())
    y.backward(torch.randn(3, 40, generator=torch.Generator().manual_seed(5)))
    # the projection removed every flow-conservation direction from the gradient
    normals = torch.tensor(cl.analyze(layer.spec).normals, dtype=torch.float32)
    torch.testing.assert_close(w.grad @ normals.T, torch.zeros(3, len(normals)), atol=1e-5,
                               rtol=0)


@pytest.mark.parametrize(("build", "match"), [
    (lambda: copt.tspDFJModel(num_nodes=5), "COPT callback"),
    (lambda: copt.vrpRCIModel(num_nodes=5, demands=[1, 2, 1, 2], capacity=4, num_vehicle=2),
     "COPT callback"),
    (lambda: copt.tspMTZModel(num_nodes=5), "not one to one"),
    (lambda: copt.tspGGModel(num_nodes=5), "not one to one"),
], ids=["dfj-callback", "rci-callback", "mtz-shared-costs", "gg-shared-costs"])
def test_models_whose_constraints_cannot_be_read_say_why(build, match):
    backend = cl.backends.from_pyepo(build())
    with pytest.raises(cl.SpecError, match=match):
        _ = backend.spec


def test_a_quadratic_row_is_refused_and_the_model_still_solves_a_given_spec():
    model = copt.shortestPathModel(grid=(5, 5))
    x = model.x.tolist()
    model._model.addQConstr(x[0] * x[0] + x[1] <= 1.0)
    backend = cl.backends.from_pyepo(model)
    with pytest.raises(cl.SpecError, match="QConstrs"):
        _ = backend.spec
    spec = cl.data.shortest_path_spec((5, 5))
    costs = np.random.default_rng(6).random((2, 40))
    np.testing.assert_allclose(np.sum(costs * cl.make_solver(spec, backend=backend).solve(costs),
                                      1), own_objectives(model, costs), atol=1e-9)


# -- several objectives are refused --------------------------------------------------------


def test_a_copt_model_with_several_objectives_is_refused():
    copt = pytest.importorskip("pyepo.model.copt")
    pytest.importorskip("coptpy")
    model = copt.shortestPathModel(grid=(2, 2))
    assert cl.backends.from_pyepo(model).spec.num_outputs == 4  # one objective: read
    model = copt.shortestPathModel(grid=(2, 2))
    columns = list(model._model.getVars())
    model._model.setObjectiveN(0, columns[0] * 1.0)
    model._model.setObjectiveN(1, columns[1] * 1.0)
    with pytest.raises(cl.SpecError, match="has MultiObjs"):
        _ = cl.backends.from_pyepo(model).spec


def test_objective_terms_on_other_variables_are_the_specs_known_cost():
    from coptpy import COPT, Envr

    class Facility(copt.optCoptModel):
        def _getModel(self):
            m = Envr().createModel()
            x = m.addVars(3, vtype=COPT.BINARY, nameprefix="x")
            z = m.addVar(vtype=COPT.BINARY, obj=5.0, name="z")
            m.addConstr(x.sum() == 2)
            m.addConstr(x[0] <= z)
            return m, x

    check_known_terms_are_read(Facility())
