"""What every loss and estimator must do, held by tests parametrised over their
registries (issue 38, items 5, 9, 11 and 12): a loss or estimator added later is
tested here without a line of its own."""

import copy
import inspect
import io
import pickle
import warnings

import numpy as np
import pytest
import torch
from testkit import BACKEND_SPECS
from testkit import skip_unless_installed as _available

import combolayer as cl
from combolayer.backends.solver import inner
from combolayer.estimators.base import METHODS
from combolayer.losses.base import LOSSES


def _target_name(loss_cls):
    """``y_true`` or ``cost_true``: what the loss compares its prediction with."""
    parameters = list(inspect.signature(loss_cls.__call__).parameters)
    return parameters[2]


def _inputs(spec, backend, seed=0):
    rng = np.random.default_rng(seed)
    cost_pred = torch.tensor(rng.normal(size=(4, *spec.cost_shape)))
    cost_true = torch.tensor(rng.normal(size=(4, *spec.cost_shape)))
    return cost_pred, cost_true, cl.make_solver(spec, backend).solve(cost_true)


def test_every_loss_is_in_the_registry():
    exported = {name for name in cl.losses.__all__ if name.endswith("Loss")}
    assert exported and exported <= set(LOSSES), exported - set(LOSSES)


# -- 5. every loss survives deepcopy, pickle and torch.save, with every backend ---------


@pytest.mark.parametrize(("backend", "executor"),
                         [(name, "serial") for name in sorted(BACKEND_SPECS)]
                         + [("highs", "thread")])
@pytest.mark.parametrize("loss_name", sorted(LOSSES))
def test_every_loss_deepcopies_pickles_and_saves(loss_name, backend, executor):
    # Before: NCE, CMAP, the LTR losses, PG, RFY and CaVE raised
    # TypeError: cannot pickle '_thread._local' (they held the compiled solver).
    _available(backend)
    spec = BACKEND_SPECS[backend]()
    config = {"name": backend, "executor": executor,
              "workers": 2 if executor == "thread" else 1}
    loss = LOSSES[loss_name](spec, backend=config)
    cost_pred, cost_true, y_true = _inputs(spec, backend)
    target = y_true if _target_name(LOSSES[loss_name]) == "y_true" else cost_true

    def value(fn):
        torch.manual_seed(0)  # for the losses that sample
        return fn(cost_pred, target)

    expected = value(loss)
    buffer = io.BytesIO()
    torch.save({"loss": loss}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)["loss"]
    for twin in (copy.deepcopy(loss), pickle.loads(pickle.dumps(loss)), loaded):
        assert twin.solver is not loss.solver and twin.solver.backend == loss.solver.backend
        torch.testing.assert_close(value(twin), expected)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_estimator_in_a_layer_deepcopies_pickles_and_saves(method):
    spec = cl.problems.TopK(6, 2)
    layer = cl.ComboLayer(spec, method=method, projection="none")
    w = torch.randn(4, 6, dtype=torch.float64)
    y_true = cl.make_solver(spec).solve(torch.randn(4, 6, dtype=torch.float64))
    layer.train()(w, target=y_true)
    expected = layer.eval()(w, target=y_true)
    buffer = io.BytesIO()
    torch.save(layer, buffer)
    buffer.seek(0)
    for twin in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer)),
                 torch.load(buffer, weights_only=False)):
        assert twin.method == layer.method
        torch.testing.assert_close(twin.eval()(w, target=y_true), expected)
        grad_w = w.clone().requires_grad_()
        (twin.train()(grad_w, target=y_true) * torch.randn(4, 6, dtype=torch.float64)
         ).sum().backward()
        assert grad_w.grad is not None and torch.isfinite(grad_w.grad).all()


# -- 11. a NaN or inf target, refused by every loss ------------------------------------


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("loss_name", sorted(LOSSES))
def test_every_loss_refuses_a_target_that_is_not_finite(loss_name, bad):
    # Before: FY, FY-multiplicative, NCE, CMAP and RFY returned a NaN loss silently.
    spec = cl.problems.TopK(6, 2)
    loss = LOSSES[loss_name](spec)
    cost_pred, cost_true, y_true = _inputs(spec, "highs")
    name = _target_name(LOSSES[loss_name])
    target = (y_true if name == "y_true" else cost_true).clone()
    target[1, 3] = bad
    with pytest.raises(ValueError, match=rf"{loss_name}: {name} must be finite, got "
                                         rf"{bad} at index \(1, 3\)"):
        loss(cost_pred, target)


def test_fenchel_young_multiplicative_refuses_a_nan_target_too():
    spec = cl.problems.TopK(6, 2)
    loss = cl.losses.FenchelYoungLoss(spec, perturbation="multiplicative")
    cost_pred, _, y_true = _inputs(spec, "highs")
    y_true[0, 0] = float("nan")
    with pytest.raises(ValueError, match="y_true must be finite"):
        loss(cost_pred.abs(), y_true)


# -- 9. SPO+, PG and Fenchel-Young on grid shortest paths with positive costs ----------

GRID = cl.problems.ShortestPath.grid(4, 4)


def _grid_costs(seed=0):
    gen = torch.Generator().manual_seed(seed)
    cost_pred = torch.rand(8, 4, 4, generator=gen, dtype=torch.float64) * 0.1
    cost_true = torch.rand(8, 4, 4, generator=gen, dtype=torch.float64) + 0.5
    return cost_pred, cost_true


@pytest.mark.parametrize("case", ["spo", "pg", "pg_two_sides", "fy"])
def test_losses_clip_their_own_negative_costs_with_one_warning(case):
    # Before: Dijkstra raised "make the costs non-negative" though every cost was positive.
    cost_pred, cost_true = _grid_costs()
    y_true = cl.make_solver(GRID).solve(cost_true)
    loss, target, step = {
        "spo": (cl.losses.SPOPlusLoss(GRID), cost_true, "SPOPlusLoss's own step 2 c_hat - c"),
        "pg": (cl.losses.PGLoss(GRID, sigma=1.0), cost_true, "PGLoss's own step c_hat - sigma c"),
        "pg_two_sides": (cl.losses.PGLoss(GRID, sigma=1.0, two_sides=True), cost_true,
                         "PGLoss's own step c_hat - sigma c"),
        "fy": (cl.losses.FenchelYoungLoss(GRID, sigma=1.0), y_true,
               "FenchelYoungLoss's own step c - sigma Z"),
    }[case]
    with pytest.warns(RuntimeWarning, match=rf"{step} made some costs negative.*set to 0"):
        value = loss(cost_pred, target)
    assert torch.isfinite(value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per loss and step
        loss(cost_pred, target)
    # a negative prediction is the user's: refused as the layer refuses it, naming it
    with pytest.raises(ValueError, match=r"negative costs \(cost_pred, instance 0"):
        loss(-cost_pred - 0.01, target)


def test_spo_plus_solves_its_clipped_step():
    cost_pred, cost_true = _grid_costs(1)
    solver = cl.make_solver(GRID)
    with pytest.warns(RuntimeWarning):
        value = cl.losses.SPOPlusLoss(GRID, reduction="none")(cost_pred, cost_true)
    shifted = 2 * cost_pred - cost_true
    expected = inner(shifted, solver.solve(cost_true) - solver.solve(shifted.clamp_min(0)), 2)
    torch.testing.assert_close(value, expected)


# -- 12. a non-finite upstream gradient ------------------------------------------------


@pytest.mark.parametrize("method", ["blackbox", "imle", "aimle"])
def test_a_nan_upstream_gradient_is_named_not_blamed_on_lam(method):
    # Before: "... must be finite ...; lower lam (got lam=20)", and AIMLE gave a zero gradient.
    layer = cl.ComboLayer(cl.problems.TopK(6, 2), method=method, projection="none")
    w = torch.randn(3, 6, requires_grad=True)
    loss = (layer(w) * torch.tensor([float("nan")] + [1.0] * 5)).sum()
    with pytest.raises(ValueError, match=r"upstream gradient dL/dy is not finite: 3 of 18 "
                                         r"entries are NaN or inf.*not the estimator's settings"):
        loss.backward()
