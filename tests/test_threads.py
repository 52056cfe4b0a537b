"""Solvers and layers shared between threads: every answer is the one a single thread
gets for the same input (the docs promise thread safety)."""

import copy
import threading
import warnings

import numpy as np
import pytest
import torch

import combolayer as cl


def in_threads(count: int, work) -> None:
    threads = [threading.Thread(target=work, args=(t,)) for t in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)


@pytest.mark.parametrize("spec", [
    cl.problems.ShortestPath.grid(4, 4),
    cl.problems.ShortestPath(num_nodes=6, edges=[(0, 1), (1, 2), (2, 3), (3, 4), (4, 5),
                                                 (0, 2), (1, 3), (2, 4), (3, 5), (0, 5)],
                             source=0, target=5, directed=False),
], ids=["grid", "undirected graph"])
@pytest.mark.parametrize("backend", ["auto", "networkx"])
def test_a_shared_path_solver_answers_every_thread_as_one(spec, backend):
    """Dijkstra (scipy's, networkx's) refilled the weights of one shared graph per
    instance: a thread's search could run on another's weights and return a costlier
    path."""
    solver = cl.make_solver(spec, backend)
    costs = np.random.default_rng(0).random((1600, *spec.cost_shape)) + 0.1
    expected = solver.solve(costs)
    got = np.zeros_like(costs)

    def work(t: int) -> None:
        for i in range(t, len(costs), 4):
            got[i] = solver.solve(costs[i])

    in_threads(4, work)
    np.testing.assert_array_equal(got, expected)


def test_a_copied_layers_first_calls_from_many_threads_keep_their_flags():
    """A copy builds what it left behind on first use; threads that called it at once each
    built their own, and a thread read another's last_infeasible (None)."""
    spec = cl.ILP(shape=[4], constraints=[cl.Constraint(coefs=[1, 1, 1, 1], sense=">=",
                                                        rhs=2)])
    base = cl.ComboLayer(spec, backend="highs", on_infeasible="flag")
    A, b = torch.ones(1, 4), torch.tensor([1.0])  # every instance infeasible
    lost = []
    for _ in range(10):
        layer = copy.deepcopy(base)
        barrier = threading.Barrier(8)

        def work(t: int, layer=layer, barrier=barrier) -> None:
            barrier.wait()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                layer(torch.randn(3, 4), A=A, b=b)
            flags = layer.last_infeasible
            if flags is None or not bool(flags.all()):
                lost.append(t)

        in_threads(8, work)
    assert lost == []
