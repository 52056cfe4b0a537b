"""A solve hands back what it produced as values: the auxiliaries of the solves an
estimator or a loss makes are kept by the `AuxRecorder` the caller made for the call,
never by state shared between calls or threads."""

from __future__ import annotations

import threading

import numpy as np
import torch

import combolayer as cl
from combolayer.backends.solver import AuxRecorder


def mirrored() -> cl.ILP:
    """Two outputs, one chosen, and an auxiliary that equals the first output."""
    return cl.ILP(shape=[2], num_aux=1, constraints=[
        cl.Constraint(coefs=[1, 1, 0], sense="==", rhs=1),
        cl.Constraint(coefs=[1, 0, -1], sense="==", rhs=0)])


def test_the_recorder_keeps_each_solves_auxiliaries_and_returns_what_was_asked():
    solver = cl.make_solver(mirrored(), "highs")
    costs = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 2.0]])
    recorder = AuxRecorder(solver)
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
