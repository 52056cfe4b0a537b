"""The Ray executor on a multi-node cluster: actors spread over every node, a node lost
mid-epoch, and nothing lost (the call completes on the remaining nodes with a warning).

The session's cluster (conftest.ray_cluster: a head and a worker node) gets a third node
for this test, which the test then stops as a crashed machine would be.
"""

from __future__ import annotations

import numpy as np
import pytest

import combolayer as cl


def knapsack(n: int = 30) -> cl.ILP:
    rng = np.random.default_rng(0)
    return cl.ILP.from_matrices(shape=[n], A_ub=rng.integers(1, 10, size=(2, n)),
                                b_ub=[40, 50], sense="max")


@pytest.mark.slow
def test_actors_spread_over_the_nodes_and_a_lost_node_loses_no_row(ray_cluster,
                                                                    always_parallel):
    import ray

    lost = ray_cluster.add_node(ray)  # a third node, to lose mid-epoch
    spec = knapsack()
    rng = np.random.default_rng(0)
    epoch = [rng.normal(size=(24, 30)) for _ in range(4)]
    serial = cl.make_solver(spec, "highs")
    solver = cl.make_solver(spec, {"name": "highs", "executor": "ray", "workers": "auto"})
    np.testing.assert_array_equal(solver.solve(epoch[0]), serial.solve(epoch[0]))
    kernel = solver.kernel
    assert kernel.workers == 3  # "auto": the cluster's 3 CPUs, 1 per actor
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(alive) == 3 and set(kernel.nodes) == alive  # one actor on each node
    lost.stop()  # the added node dies mid-epoch
    for costs in epoch[1:2]:
        with pytest.warns(RuntimeWarning, match="1 of 3 Ray actors died .* solved again on "
                                                "the 2 remaining actors"):
            out = solver.solve(costs)
        np.testing.assert_array_equal(out, serial.solve(costs))
    for costs in epoch[2:]:  # the rest of the epoch runs on the remaining node
        np.testing.assert_array_equal(solver.solve(costs), serial.solve(costs))
    assert len(kernel._actors) == 2
    solver.kernel.close()
