"""The contract's value checks on costs (NaN, inf, magnitude MAX_COST or more): on the
CPU read at the edge, as before; off the CPU never read back on their own, but checked
by `check_values` where the values are read anyway (the host copy a solve makes) or
queued on the device. A tensor on the "meta" device stands in for one off the CPU:
reading its values back is impossible, so any host read there is counted or fails."""

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import combolayer as cl
from combolayer.backends.solver import MAX_COST, check_costs, check_values
from combolayer.losses.base import check_finite_target

SPEC = cl.problems.TopK(n=4, k=2)


class HostReads(TorchDispatchMode):
    """Counts the reads of one value back to the host (``float()``, ``bool()``, ``.item()``
    of a tensor: ``aten._local_scalar_dense``), the reads that synchronise a device."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.count += 1
        return func(*args, **(kwargs or {}))


BAD = [float("nan"), float("inf"), 2 * MAX_COST]


@pytest.mark.parametrize("value", BAD, ids=["nan", "inf", "huge"])
def test_cpu_costs_are_checked_at_the_edge(value):
    w = torch.zeros(2, 4)
    w[1, 2] = value
    with HostReads() as reads, pytest.raises(ValueError, match="w must be"):
        check_costs(SPEC, w, "w")
    assert reads.count >= 1


@pytest.mark.parametrize("value", BAD, ids=["nan", "inf", "huge"])
def test_off_cpu_costs_are_not_read_back_by_the_check(value):
    w = torch.full((2, 4), value, device="meta")
    with HostReads() as reads:
        check_costs(SPEC, w, "w")
        check_values(SPEC, w, "w")
        check_finite_target(w, "y_true", "SPOPlusLoss")
    assert reads.count == 0
    with pytest.raises(ValueError, match=r"trailing shape \(5,\) but TopK"):
        check_costs(SPEC, torch.zeros(2, 5, device="meta"), "w")  # shapes still at the edge


@pytest.mark.parametrize("value", BAD, ids=["nan", "inf", "huge"])
def test_the_host_copy_check_says_what_the_edge_check_says(value):
    w = torch.zeros(2, 4, dtype=torch.float64)
    w[0, 1] = value
    with pytest.raises(ValueError) as at_edge:
        check_costs(SPEC, w)
    with pytest.raises(ValueError) as on_copy:
        check_values(SPEC, w.numpy())
    assert str(on_copy.value) == str(at_edge.value)
    check_values(SPEC, np.zeros((2, 4)))  # finite costs pass
