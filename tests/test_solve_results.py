"""A solve hands back what it produced as values: the auxiliaries of the solves an
estimator or a loss makes, and the instances their per-call rows left infeasible, are
kept by the `Recorder` the caller made for the call, never by state shared between
calls or threads."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import torch

import combolayer as cl
from combolayer.backends.solver import Recorder


def mirrored() -> cl.ILP:
    """Two outputs, one chosen, and an auxiliary that equals the first output."""
    return cl.ILP(shape=[2], num_aux=1, constraints=[
        cl.Constraint(coefs=[1, 1, 0], sense="==", rhs=1),
        cl.Constraint(coefs=[1, 0, -1], sense="==", rhs=0)])


def test_the_recorder_keeps_each_solves_auxiliaries_and_returns_what_was_asked():
    solver = cl.make_solver(mirrored(), "highs")
    costs = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 2.0]])
    recorder = Recorder(solver)
    y = recorder.solve_min(costs)
    assert isinstance(y, torch.Tensor) and y.tolist() == [[1, 0], [0, 1], [1, 0]]
    y_np, aux_np = recorder.solve_min(costs.numpy()[:2], return_aux=True)
    assert aux_np.tolist() == [[1.0], [0.0]]
    assert [aux.tolist() for aux in recorder.aux] == [[[1.0], [0.0], [1.0]], [[1.0], [0.0]]]
    # rows bound to the recorder still report to it
    bound = recorder.bind_rows(torch.tensor([[0.0, 1.0, 0.0]]), torch.tensor([0.0]))
    assert bound.solve_min(costs[1:]).tolist() == [[1, 0], [1, 0]]
    assert recorder.aux[-1].tolist() == [[1.0], [1.0]]
    # the solver itself keeps nothing
    assert not hasattr(solver, "aux")


def test_layer_return_aux_follows_the_output_with_a_solution_cache_and_in_threads():
    spec = mirrored()
    layer = cl.ComboLayer(spec, method="identity", backend="highs", solve_ratio=0.5,
                          generator=torch.Generator().manual_seed(0))
    costs = torch.tensor([[0.0, 1.0], [1.0, 0.0]] * 4)
    for training in (True, False):
        layer.train(training)
        y, aux = layer(costs, return_aux=True)
        assert torch.equal(aux[:, 0], y[:, 0]), (training, y, aux)
    layer.eval()
    results: dict[int, tuple] = {}

    def run(i: int) -> None:
        w = costs if i % 2 else costs.flip(-1)
        for _ in range(5):
            results[i] = (w, *layer(w, return_aux=True))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for w, y, aux in results.values():
        assert torch.equal(aux[:, 0], y[:, 0]) and torch.equal(y[:, 0], (w[:, 0] < w[:, 1]).to(y))
    assert np.asarray(layer.solver.solve(costs.numpy(), return_aux=True)[1]).shape == (8, 1)


def test_the_recorder_hears_which_instances_rows_left_infeasible_and_the_solver_stays_quiet():
    spec = cl.ILP(shape=[3], integrality="binary")
    solver = cl.make_solver(spec, {"name": "highs", "on_infeasible": "flag"})
    costs = -torch.ones(4, 3)
    b = torch.tensor([[1.0], [-1.0], [2.0], [-2.0]])
    recorder = Recorder(solver, keep_aux=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the flags go to the recorder, not to a warning
        y = recorder.bind_rows(torch.ones(4, 1, 3), b).solve_min(costs)
    assert recorder.infeasible == {1, 3} and recorder.aux == []
    assert y.sum(1).tolist() == [1, 0, 2, 0]
    # a second recorder's call is its own; a call without one warns
    other = Recorder(solver, keep_aux=False)
    other.bind_rows(torch.ones(1, 3), torch.tensor([1.0])).solve_min(costs)
    assert other.infeasible == set() and recorder.infeasible == {1, 3}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        solver.solve(costs, A=torch.ones(4, 1, 3), b=b)
    assert any("2 of 4 instances" in str(w.message) for w in caught)


def test_layer_flags_with_rows_and_return_aux_together():
    spec = cl.ILP(shape=[2], num_aux=1, integrality="binary", constraints=[
        cl.Constraint(coefs=[1, 0, -1], sense="==", rhs=0)])
    layer = cl.ComboLayer(spec, projection="none", on_infeasible="flag", backend="highs")
    b = torch.tensor([[2.0], [-1.0], [1.0]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y, aux = layer(torch.tensor([[-2.0, -1.0], [-2.0, -1.0], [-1.0, -2.0]]),
                       A=torch.tensor([[1.0, 1.0, 0.0]]), b=b, return_aux=True)
    assert sum("per-call rows" in str(w.message) for w in caught) == 1
    assert layer.last_infeasible.tolist() == [False, True, False]
    assert y.tolist() == [[1, 1], [0, 0], [0, 1]] and aux[:, 0].tolist() == [1, 0, 0]
