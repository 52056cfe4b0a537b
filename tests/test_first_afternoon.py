"""Issue 39's smaller items: an LP warns once, one message per repeated spec mistake,
short reprs, ``analyze | head``, ``help(ComboLayer.__init__)``, numpy inputs to every
loss, and a compiled Solver as a layer's backend."""

import copy
import inspect
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import combolayer as cl
import combolayer.losses as losses
from combolayer.losses.base import LossInputs

# -- item 4: no integer variable ---------------------------------------------------------


def _lp(n):
    # a shape no other test uses: the warning is once per spec, per process
    return cl.ILP(shape=[n], integrality="continuous", upper=1.0,
                  constraints=[cl.Constraint(coefs=[1.0] * n, sense="==", rhs=1.0)])


def test_a_spec_without_integer_variables_warns_once_and_says_how_to_mark_them():
    spec = _lp(7)
    with pytest.warns(cl.NoIntegerWarning, match=r"ILP\(shape=\[7\]\) has no integer "
                                                 r"variable.*integrality='binary'.*boolean=True"):
        cl.make_solver(spec).solve(np.arange(7.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", cl.NoIntegerWarning)
        cl.make_solver(spec).solve(np.arange(7.0))  # once: the second solver is silent
        cl.ComboLayer(spec)(torch.randn(7))


def test_a_spec_with_an_integer_variable_does_not_warn():
    mixed = _lp(8).model_copy(update={"integrality": ["binary"] + ["continuous"] * 7})
    with warnings.catch_warnings():
        warnings.simplefilter("error", cl.NoIntegerWarning)
        cl.make_solver(mixed).solve(np.arange(8.0))
        cl.make_solver(cl.problems.TopK(5, 2)).solve(np.arange(5.0))


def test_cvxpy_without_boolean_warns():
    cp = pytest.importorskip("cvxpy")
    x, w = cp.Variable(9), cp.Parameter(9)  # boolean=True forgotten
    problem = cp.Problem(cp.Minimize(w @ x), [cp.sum(x) == 2, x >= 0, x <= 1])
    spec = cl.ILP.from_cvxpy(problem, cost=w)
    with pytest.warns(cl.NoIntegerWarning, match="boolean=True"):
        cl.make_solver(spec)

# -- item 14: one message for one mistake --------------------------------------------------


def test_a_wrong_sense_in_every_constraint_is_reported_once():
    rows = [{"coefs": [1, 1, 1], "sense": "=", "rhs": 1}] * 8
    with pytest.raises(cl.SpecError) as error:
        cl.load_spec({"kind": "ilp", "shape": [3], "constraints": rows})
    message = str(error.value)
    assert message.count("Input should be '<=', '==' or '>='") == 1
    assert "constraints.0, constraints.1" in message and "and 3 more" in message


def test_different_mistakes_are_each_reported():
    rows = [{"coefs": [1, 1, 1], "sense": "=", "rhs": 1},
            {"coefs": [1, 1, 1], "sense": "<=", "rhs": "x"}]
    with pytest.raises(cl.SpecError) as error:
        cl.load_spec({"kind": "ilp", "shape": [3], "constraints": rows})
    assert "constraints.0: invalid Constraint: sense" in str(error.value)
    assert "constraints.1: invalid Constraint: rhs" in str(error.value)

# -- item 10: short reprs -----------------------------------------------------------------


def test_spec_and_hull_reprs_are_short():
    spec = cl.problems.Matching(30, 30).to_ilp()
    text = repr(spec)
    assert len(text) < 700, text
    assert text.startswith("ILP(kind='ilp', shape=[30, 30]") and "... 60 in all" in text
    knapsack = cl.problems.Knapsack(weights=np.ones((2, 50)).tolist(), capacities=[5.0, 5.0])
    assert "... 50 in all" in repr(knapsack) and len(repr(knapsack)) < 200
    hull = cl.analyze(cl.problems.Matching(30, 30))
    text = repr(hull)
    assert len(text) < 600, text
    assert "cost_shape=(30, 30), dim=841 in R^900, 59 equations" in text
    assert "... 56 more" in text
    small = repr(cl.problems.TopK(4, 2))
    assert small == "TopK(kind='topk', n=4, k=2, sense='max')"

# -- item 11: analyze | head ----------------------------------------------------------------


def test_analyze_into_a_closed_pipe_stops_quietly():
    process = subprocess.Popen(
        [sys.executable, "-m", "combolayer", "analyze", "{kind: matching, rows: 60, cols: 60}",
         "--full"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader leaves before a line is written, as `| head` does
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141
    assert "BrokenPipe" not in stderr and "Traceback" not in stderr, stderr

# -- item 12: help(ComboLayer.__init__) -------------------------------------------------------


def test_help_on_init_shows_the_layers_doc():
    doc = inspect.getdoc(cl.ComboLayer.__init__)
    assert doc == inspect.getdoc(cl.ComboLayer)
    assert "projection" in doc and "Initialize internal Module state" not in doc

# -- item 13: numpy into every loss -------------------------------------------------------------


def _loss_classes():
    found = [getattr(losses, name) for name in losses.__all__]
    return [cls for cls in found if isinstance(cls, type)]


def test_every_loss_class_shares_the_input_conversion():
    assert _loss_classes(), "no loss classes found"
    for cls in _loss_classes():
        assert issubclass(cls, LossInputs), cls.__name__


SPEC = cl.problems.TopK(n=5, k=2)


def _call(cls, cost_pred, cost_true, y_true):
    if cls is losses.CaVELoss:
        pytest.importorskip("gurobipy")
    pool = cl.make_solver(SPEC).solve(np.eye(5))
    loss = cls(SPEC, pool=pool) if "pool" in inspect.signature(cls).parameters else cls(SPEC)
    second = inspect.signature(cls.__call__).parameters
    target = cost_true if "cost_true" in second else y_true
    return loss(cost_pred, target)


@pytest.mark.parametrize("cls", _loss_classes(), ids=lambda cls: cls.__name__)
def test_every_loss_takes_numpy_like_torch(cls):
    rng = np.random.default_rng(0)
    cost_pred, cost_true = rng.normal(size=(4, 5)), rng.normal(size=(4, 5))
    y_true = cl.make_solver(SPEC).solve(cost_true)
    torch.manual_seed(0)
    from_numpy = _call(cls, cost_pred, cost_true, y_true)
    torch.manual_seed(0)
    from_torch = _call(cls, torch.from_numpy(cost_pred), torch.from_numpy(cost_true),
                       torch.from_numpy(y_true))
    assert isinstance(from_numpy, torch.Tensor)
    assert torch.allclose(from_numpy, from_torch)


def test_a_loss_names_what_it_expects():
    with pytest.raises(TypeError, match="SPOPlusLoss: cost_pred must be a torch.Tensor or a "
                                        "numpy array, got list"):
        losses.SPOPlusLoss(SPEC)([[0.0] * 5], torch.zeros(1, 5))
    with pytest.raises(TypeError, match="NCELoss: y_true must be a torch.Tensor or a numpy "
                                        "array, got str"):
        losses.NCELoss(SPEC)(torch.zeros(1, 5), "y")

# -- item 6: a compiled Solver as the layer's backend ------------------------------------------


def test_layer_takes_a_compiled_solver_as_backend_or_in_place_of_the_spec():
    solver = cl.make_solver(SPEC, "highs")
    layer = cl.ComboLayer(SPEC, backend=solver)
    assert layer.solver is solver
    assert cl.ComboLayer(solver).solver is solver
    w = torch.randn(3, 5)
    assert torch.equal(layer(w), solver.solve(w))
    for copied in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        assert copied.solver is not solver and copied.solver.backend == "highs"
        assert torch.equal(copied(w), layer(w))
    with pytest.raises(ValueError, match=r"backend is a Solver compiled for TopK\(n=5, k=2\), "
                                         r"but the layer's spec is TopK\(n=5, k=3\)"):
        cl.ComboLayer(cl.problems.TopK(n=5, k=3), backend=solver)


def test_metrics_docstrings_call_solver_keyword_deprecated():
    for metric in (cl.metrics.regret, cl.metrics.normalized_regret, cl.metrics.cost_ratio):
        doc = inspect.getdoc(metric)
        assert "deprecated" in doc and "backend=" in doc, metric.__name__
    args = inspect.getdoc(cl.metrics.regret).split("Args:")[1]
    solver_line = next(line for line in args.splitlines() if line.strip().startswith("solver:"))
    assert "deprecated" in solver_line
