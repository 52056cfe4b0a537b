"""PyEPO's MPAX models (PDLP through JAX) behind combolayer: from_pyepo reads their
linear program, solves a batch in one vmapped call, and maps MPAX's statuses."""

import numpy as np
import pytest
import torch
from pyepo_kit import own_objectives

import combolayer as cl

pytest.importorskip("pyepo", reason="pyepo is not installed (optional extra [mpax])")
pytest.importorskip("mpax", reason="mpax is not installed (optional extra [mpax])")
mpax_models = pytest.importorskip("pyepo.model.mpax",
                                  reason="pyepo's MPAX models are unavailable")

#: MPAX's PDLP stops at a relative tolerance of 1e-4, in float32; its objective can
#: still be a few percent above the optimum (docs/backends.md).
NEAR = 5e-2


@pytest.fixture(scope="module")
def path_model():
    return mpax_models.shortestPathModel(grid=(5, 5))


@pytest.mark.filterwarnings("ignore::combolayer.NoIntegerWarning")  # an LP on purpose
def test_shortest_path_program_is_read_with_the_flow_conservation(path_model):
    backend = cl.backends.from_pyepo(path_model)
    assert backend.readable
    spec = backend.spec
    assert spec.cost_shape == (40,) and spec.sense == "min"
    assert spec.integrality == ["continuous"] * 40
    assert cl.analyze(spec).dim == cl.analyze(cl.data.shortest_path_spec((5, 5))).dim == 16


def test_a_batch_is_one_call_and_agrees_with_the_models_own_solves(path_model, monkeypatch):
    backend = cl.backends.from_pyepo(path_model)
    solver = cl.make_solver(backend.spec, backend=backend)
    costs = np.random.default_rng(0).random((6, 40))
    calls = []
    batch_optimize = path_model.batch_optimize
    monkeypatch.setattr(path_model, "batch_optimize",
                        lambda c: calls.append(c.shape) or batch_optimize(c))
    y, status = solver.solve(costs, return_status=True)
    assert calls == [(6, 40)] and status == ("optimal",) * 6
    # the vmapped solve is the model's own PDLP, row by row
    np.testing.assert_allclose(np.sum(costs * y, 1), own_objectives(path_model, costs),
                               rtol=1e-5)
    # PDLP's answers are near the exact optimum, never below it beyond float32 rounding
    best = np.sum(costs * cl.make_solver(cl.data.shortest_path_spec((5, 5))).solve(costs), 1)
    assert np.all(np.sum(costs * y, 1) >= best * (1 - 1e-6))
    np.testing.assert_allclose(np.sum(costs * y, 1), best, rtol=NEAR)


@pytest.mark.filterwarnings("ignore::combolayer.NoIntegerWarning")  # an LP on purpose
def test_knapsack_is_read_as_its_lp_relaxation_and_maximised():
    import jax

    weights = np.array([[3.0, 4, 5, 6, 2], [2, 7, 3, 4, 5]])
    values = np.random.default_rng(1).random((4, 5))
    # on the CPU: MPAX 0.2.4 on an H200 stopped at NaN iterates for this LP, which has
    # no equality rows (combolayer raises SolverError then: the last test of this file)
    with jax.default_device(jax.devices("cpu")[0]):
        model = mpax_models.knapsackModel(weights=weights, capacity=[9.0, 9.0])
        backend = cl.backends.from_pyepo(model)
        spec = backend.spec
        theirs = cl.make_solver(spec, backend=backend).solve(values)
    assert spec.sense == "max" and spec.integrality == ["continuous"] * 5
    relaxation = cl.make_solver(spec, backend="highs").solve(values)
    np.testing.assert_allclose(np.sum(values * theirs, 1), np.sum(values * relaxation, 1),
                               rtol=1e-4)


def test_combo_layer_on_the_model_projects_out_the_flow(path_model):
    layer = cl.ComboLayer(cl.backends.from_pyepo(path_model), projection="auto")
    assert layer.solver.backend == "pyepo:shortestPathModel"
    w = torch.rand(3, 40, generator=torch.Generator().manual_seed(4), requires_grad=True)
    y = layer(w)
    y.backward(torch.randn(3, 40, generator=torch.Generator().manual_seed(5)))
    normals = torch.tensor(cl.analyze(layer.spec).normals, dtype=torch.float32)
    torch.testing.assert_close(w.grad @ normals.T, torch.zeros(3, len(normals)), atol=1e-5,
                               rtol=0)


@pytest.mark.parametrize(("status", "expect"), [
    ("ITERATION_LIMIT", "inaccurate"), ("TIME_LIMIT", "inaccurate"),
    ("PRIMAL_INFEASIBLE", cl.InfeasibleError), ("DUAL_INFEASIBLE", cl.SolverError),
    ("NUMERICAL_ERROR", cl.SolverError)])
def test_mpax_statuses_map_onto_the_status_ladder(path_model, monkeypatch, status, expect):
    from mpax.termination import TerminationStatus

    code = int(getattr(TerminationStatus, status))
    monkeypatch.setattr(path_model, "batch_optimize", lambda c: (
        np.zeros(c.shape), np.zeros(c.shape[0]), np.full(c.shape[0], code)))
    backend = cl.backends.from_pyepo(path_model)
    solver = cl.make_solver(cl.data.shortest_path_spec((5, 5)), backend=backend)
    costs = np.ones((2, 40))
    if isinstance(expect, str):
        with pytest.warns(RuntimeWarning, match="not solved to optimality"):
            status = solver.solve(costs, return_status=True)[1]
        assert status == (expect, expect)
    else:
        with pytest.raises(expect):
            solver.solve(costs)


def test_a_quadratic_objective_is_refused(path_model, monkeypatch):
    monkeypatch.setattr(path_model, "Q", np.eye(40))
    with pytest.raises(cl.SpecError, match="quadratic objective"):
        _ = cl.backends.from_pyepo(path_model).spec


def test_a_nan_iterate_raises_instead_of_coming_back(path_model, monkeypatch):
    from mpax.termination import TerminationStatus

    for status in (TerminationStatus.OPTIMAL, TerminationStatus.ITERATION_LIMIT):
        monkeypatch.setattr(path_model, "batch_optimize", lambda c, status=status: (
            np.full(c.shape, np.nan), np.zeros(c.shape[0]), np.full(c.shape[0], int(status))))
        solver = cl.make_solver(cl.data.shortest_path_spec((5, 5)),
                                backend=cl.backends.from_pyepo(path_model))
        with pytest.raises(cl.SolverError, match=f"{status.name}, at a NaN or inf iterate"):
            solver.solve(np.ones((2, 40)))
