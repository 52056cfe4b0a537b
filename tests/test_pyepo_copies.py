"""A layer or loss built on a PyEPO model survives copy.deepcopy, pickle and torch.save
by building the model again from its constructor's arguments, or says why it cannot
(docs/core.md, "Copies and checkpoints")."""

import copy
import io
import pickle

import numpy as np
import pytest
import torch

import combolayer as cl

pytest.importorskip("pyepo")
pytestmark = pytest.mark.filterwarnings("ignore::combolayer.NoIntegerWarning")


def _grb():
    pytest.importorskip("gurobipy")
    from pyepo.model import grb

    return grb


def _copies(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return [copy.deepcopy(obj), pickle.loads(pickle.dumps(obj)),
            torch.load(buffer, weights_only=False)]


def _models():
    grb = _grb()
    yield grb.shortestPathModel(grid=(3, 3))
    yield grb.knapsackModel(weights=np.array([[1.0, 2, 3, 4]]), capacity=np.array([5.0]))
    try:
        from pyepo.model import ort
    except ImportError:
        return
    yield ort.shortestPathModel(grid=(3, 3))


def test_a_layer_on_a_pyepo_model_copies_by_building_the_model_again():
    # Before: TypeError: cannot pickle 'PyCapsule' object.
    for model in _models():
        layer = cl.ComboLayer(cl.backends.from_pyepo(model))
        w = torch.rand(4, model.num_cost, generator=torch.Generator().manual_seed(0))
        y = layer(w)
        for twin in _copies(layer):
            assert twin.backend_config.name == "pyepo"
            optmodel = twin.backend_config.options["model"].optmodel
            assert type(optmodel) is type(model)
            assert optmodel is not model
            assert torch.equal(twin(w), y)


def test_a_loss_on_a_pyepo_model_copies_too():
    model = _grb().shortestPathModel(grid=(3, 3))
    backend = cl.backends.from_pyepo(model)
    loss = cl.losses.SPOPlusLoss(backend.spec, backend=backend)
    gen = torch.Generator().manual_seed(1)
    cost_pred, cost_true = torch.rand(4, 12, generator=gen), torch.rand(4, 12, generator=gen)
    value = loss(cost_pred, cost_true)
    for twin in _copies(loss):
        assert twin.solver.backend == "pyepo:shortestPathModel"
        assert twin.solver.kernel is not loss.solver.kernel
        torch.testing.assert_close(twin(cost_pred, cost_true), value)


def test_a_model_that_cannot_be_built_again_says_why():
    import gurobipy as gp

    grb = _grb()

    class PickOne(grb.optGrbModel):
        def __init__(self, n):
            self.size = n  # not kept as `n`: the constructor's argument cannot be read back
            super().__init__()

        def _getModel(self):
            model = gp.Model()
            model.Params.OutputFlag = 0
            x = model.addVars(self.size, vtype=gp.GRB.BINARY, name="x")
            model.addConstr(gp.quicksum(x.values()) == 1)
            return model, x

    layer = cl.ComboLayer(cl.backends.from_pyepo(PickOne(3)))
    assert layer(torch.tensor([3.0, 1.0, 2.0])).tolist() == [0.0, 1.0, 0.0]
    for attempt in (copy.deepcopy, pickle.dumps, lambda obj: torch.save(obj, io.BytesIO())):
        with pytest.raises(TypeError, match=r"PyEPO model .*PickOne cannot be copied, pickled "
                                            r"or saved.*argument\(s\) \['n'\] are not "
                                            r"attributes.*docs/core.md"):
            attempt(layer)


def test_a_model_changed_after_it_was_built_is_refused():
    model = _grb().knapsackModel(weights=np.array([[1.0, 2, 3, 4]]), capacity=np.array([5.0]))
    layer = cl.ComboLayer(cl.backends.from_pyepo(model))
    model.capacity = np.array([6.0])  # the built model still has capacity 5
    with pytest.raises(TypeError, match="reads as another problem than the original"):
        copy.deepcopy(layer)
