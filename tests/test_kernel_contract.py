"""One kernel contract: `Kernel` declares every capability its callers use, kernels
inherit the defaults from `KernelDefaults`, and a plugin's kernel that has only
``array_api`` and ``__call__`` gets them through `as_kernel`."""

from __future__ import annotations

import numpy as np
import pytest

import combolayer as cl
from combolayer.backends.solver import Kernel, KernelDefaults, PluginKernel, Solver, as_kernel
from combolayer.errors import BackendUnavailable


class Minimal:
    """A plugin's kernel as docs/backends.md describes it: array_api and __call__."""

    array_api = "numpy"

    def __call__(self, costs: np.ndarray) -> np.ndarray:
        return (costs < 0).astype(float)


def test_a_minimal_kernel_gets_the_defaults_and_a_full_one_is_kept():
    minimal = Minimal()
    assert not isinstance(minimal, Kernel)
    adapted = as_kernel(minimal)
    assert isinstance(adapted, PluginKernel) and isinstance(adapted, Kernel)
    assert (adapted(np.array([[-1.0, 2.0]])) == [[1, 0]]).all()
    assert (adapted.takes_rows, adapted.takes_start, adapted.checks_values) == (False,) * 3
    assert adapted.serial() is adapted and adapted.outcome() is None
    assert adapted.current_backend is None and adapted.backend_reason is None
    highs = cl.make_solver(cl.ILP(shape=[3]), "highs").kernel
    assert as_kernel(highs) is highs and highs.takes_rows


class WithoutClose:
    """A kernel written before `Kernel.close` joined the contract: per-call rows and a
    status per instance, but no ``close``."""

    array_api = "numpy"
    takes_rows = True
    takes_start = False
    checks_values = False
    current_backend = None
    backend_reason = None

    def __init__(self):
        self.limit = None

    def serial(self):
        return self

    def outcome(self):
        return None

    def adopt(self, outcome):
        return None

    def with_statuses(self, costs, rows=None):
        from combolayer.backends.outcome import Solved

        return Solved((costs < 0).astype(float), ("time limit",) * len(costs))

    def __call__(self, costs, rows=None):
        return self.with_statuses(costs, rows).values


def test_a_kernel_missing_a_capability_keeps_the_ones_it_has():
    kernel = WithoutClose()
    assert not isinstance(kernel, Kernel)  # no close
    adapted = as_kernel(kernel)
    assert adapted.takes_rows and not adapted.takes_start and adapted.limit is None
    adapted.close()  # the default: nothing to hand back
    solver = Solver(cl.ILP(shape=[2]), kernel, "old", cl.BackendConfig())
    with pytest.warns(RuntimeWarning, match="time limit"):
        y, status = solver.solve(np.array([[-1.0, 2.0]]), return_status=True)
    assert y.tolist() == [[1, 0]] and status == ("time limit",)


def test_a_solver_on_a_minimal_kernel_solves_and_names_its_own_backend():
    spec = cl.ILP(shape=[3])
    solver = Solver(spec, Minimal(), "minimal", cl.BackendConfig())
    assert isinstance(solver.kernel, KernelDefaults)
    assert solver.solve(np.array([-1.0, 2.0, -3.0])).tolist() == [1, 0, 1]
    assert solver.backend == "minimal" and solver.backend_reason == ""
    with pytest.raises(BackendUnavailable, match="cannot take per-call rows"):
        solver.solve(np.zeros(3), A=np.ones((1, 3)), b=np.ones(1))


class Switching:
    """A plugin kernel whose per-call rows come and go (a property), with a serial model
    of its own that has no capabilities at all."""

    array_api = "numpy"

    def __init__(self):
        self.rows = False

    @property
    def takes_rows(self):
        return self.rows

    def serial(self):
        return Minimal()

    def __call__(self, costs):
        return (costs < 0).astype(float)


def test_a_plugin_kernel_reads_its_flags_live_copies_and_serves_a_full_serial_kernel():
    import copy
    import pickle

    kernel = Switching()
    adapted = as_kernel(kernel)
    assert not adapted.takes_rows
    kernel.rows = True
    assert adapted.takes_rows  # read on every use, not copied once
    local = adapted.serial()
    assert isinstance(local, Kernel) and local.takes_start is False
    for twin in (copy.deepcopy(adapted), pickle.loads(pickle.dumps(adapted))):
        assert twin.takes_rows and (twin(np.array([[-1.0, 1.0]])) == [[1, 0]]).all()
