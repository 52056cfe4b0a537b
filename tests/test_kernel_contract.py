"""One kernel contract: `Kernel` declares every capability its callers use, kernels
inherit the defaults from `KernelDefaults`, and a plugin's kernel that has only
``array_api`` and ``__call__`` gets them through `as_kernel`."""

from __future__ import annotations

import numpy as np
import pytest

import combolayer as cl
from combolayer.backends.solver import FunctionKernel, Kernel, KernelDefaults, Solver, as_kernel
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
    assert isinstance(adapted, FunctionKernel) and isinstance(adapted, Kernel)
    assert (adapted.takes_rows, adapted.takes_start, adapted.stops_in_time) == (False,) * 3
    assert adapted.serial() is adapted and adapted.outcome() is None
    assert adapted.current_backend is None and adapted.backend_reason is None
    with pytest.raises(NotImplementedError, match="stops_in_time is False"), \
            adapted.time_limit(1.0):
        pass
    highs = cl.make_solver(cl.ILP(shape=[3]), "highs").kernel
    assert as_kernel(highs) is highs and highs.takes_rows and highs.stops_in_time


def test_a_solver_on_a_minimal_kernel_solves_and_names_its_own_backend():
    spec = cl.ILP(shape=[3])
    solver = Solver(spec, Minimal(), "minimal", cl.BackendConfig())
    assert isinstance(solver.kernel, KernelDefaults)
    assert solver.solve(np.array([-1.0, 2.0, -3.0])).tolist() == [1, 0, 1]
    assert solver.backend == "minimal" and solver.backend_reason == ""
    with pytest.raises(BackendUnavailable, match="cannot take per-call rows"):
        solver.solve(np.zeros(3), A=np.ones((1, 3)), b=np.ones(1))
