"""Copies of everything a model holds: layers, losses, estimators and pools survive
``copy.deepcopy``, ``pickle`` and ``torch.save``/``torch.load`` (and so DataLoader
workers), with every registered backend, and a copy answers as the original does."""

import copy
import io
import pickle

import pytest
import torch
from testkit import BACKEND_SPECS
from testkit import loss_inputs as _inputs
from testkit import loss_target_name as _target_name
from testkit import skip_unless_installed as _available

import combolayer as cl
from combolayer.backends.pool import SolutionPool
from combolayer.estimators.base import METHODS
from combolayer.losses.base import LOSSES

# -- solution pools ------------------------------------------------------------------------


def test_a_pool_pickles_and_deep_copies_without_its_lock():
    import copy
    import pickle

    pool = SolutionPool(cl.problems.TopK(4, 2), max_size=3)
    pool.seed(torch.tensor([1.0, 1, 0, 0]))
    pool.add(torch.tensor([[0.0, 1, 1, 0], [0.0, 0, 1, 1]]))
    for twin in (copy.deepcopy(pool), pickle.loads(pickle.dumps(pool))):
        assert torch.equal(twin.solutions, pool.solutions) and twin.spec_label == pool.spec_label
        twin.add(torch.tensor([1.0, 0, 0, 1]))  # evicts the oldest unseeded row, as pool would
        assert {tuple(r) for r in twin.solutions.tolist()} == {
            (1, 1, 0, 0), (0, 0, 1, 1), (1, 0, 0, 1)}
        with pytest.raises(ValueError, match="not of TopK"):
            twin.bind(cl.problems.TopK(4, 3))


# -- losses and estimators -----------------------------------------------------------------


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
