"""combolayer.cli.bench.solver_clock: seconds inside a layer's solver, forward and backward."""

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
