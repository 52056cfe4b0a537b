"""combolayer.cli.bench.solver_clock: seconds inside a layer's solver, forward and backward."""

import numpy as np
import pytest
import torch

import combolayer as cl
from combolayer.backends.timing import solver_clock


def test_solver_clock_counts_forward_and_blackbox_backward_and_restores():
    spec = cl.problems.Matching(rows=4, cols=4)
    layer = cl.ComboLayer(spec, method="blackbox", projection="none")
    kernel = layer.solver.kernel
    w = torch.randn(3, 4, 4, dtype=torch.float64, requires_grad=True)
    with solver_clock(layer, layer) as clock:
        y = layer(w)
        assert clock.calls == 1
        y.sum().backward()
    assert clock.calls == 2  # Blackbox's second solve happens in backward
    assert clock.seconds > 0
    assert layer.solver.kernel is kernel
    expected = cl.ComboLayer(spec, method="identity", projection="none")(w.detach())
    assert torch.equal(y.detach(), expected)


def test_solver_clock_keeps_the_rows_statuses():
    """A timed solver still hears each row's status: a solution limit is named and
    warned about once, as without the clock."""
    spec = cl.problems.Knapsack(weights=np.random.default_rng(0).uniform(1, 50, (5, 200))
                                .round(2).tolist(), capacities=[500.0] * 5)
    layer = cl.ComboLayer(spec, projection="none", backend={
        "name": "highs", "options": {"mip_max_improving_sols": 1}})
    w = torch.as_tensor(np.random.default_rng(0).uniform(1, 10, (1, 200)))
    with solver_clock(layer) as clock, pytest.warns(RuntimeWarning) as caught:
        layer(w)
    named = [str(w.message) for w in caught if "(solution limit)" in str(w.message)]
    assert clock.calls == 1 and len(named) == 1 and "1 of 1 instances" in named[0]
