"""Helpers shared by the estimator, loss and metric tests."""

from __future__ import annotations

import importlib.util
import inspect
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import combolayer as cl
from combolayer.backends.registry import backends, capable_backends, missing_packages

#: Small problems, in order: `backend_cases` gives each backend the first it accepts.
SMALL_SPECS = (
    lambda: cl.problems.TopK(6, 2),
    lambda: cl.problems.Matching(3, 3),
    # random normal costs in the tests: the grid clips its negative ones
    lambda: cl.problems.ShortestPath.grid(3, 3, negative_costs="clip"),
    lambda: cl.problems.TSPEdges(4),
)


def knapsack_ilp():
    """A 0/1 knapsack of 6 items as a generic ILP (no named problem's kernel applies)."""
    return cl.ILP(shape=[6], sense="max", constraints=[
        cl.Constraint(coefs=[3, 1, 4, 1, 5, 2], sense="<=", rhs=7)])


def backend_cases(*factories) -> dict:
    """Every registered backend, installed or not, with the first of ``factories`` (spec
    factories, `SMALL_SPECS` when none are given) whose spec it accepts by its declared
    kinds and capabilities (`Backend.accepts`): ``{name: factory}``. A backend registered
    later is in every test parametrised over this, without a list to edit; one that
    declares options its config must hold (``config_options``, such as a PyEPO model)
    solves nothing by its name alone and is left out."""
    factories = factories or SMALL_SPECS
    cases = {}
    for name, cls in sorted(backends().items()):
        if getattr(cls, "config_options", ()):
            continue
        make = next((make for make in factories if cls().accepts(make()) is None), None)
        if make is not None:
            cases[name] = make
    return cases


def backend_params(cases: dict) -> list:
    """The names of ``cases`` as pytest parameters, sorted; a backend whose packages are
    missing here is a skip that names them."""
    params = []
    for name in sorted(cases):
        missing = missing_packages(backends()[name])
        marks = pytest.mark.skip(reason=f"backend {name!r} needs {', '.join(missing)}, "
                                        f"not installed here") if missing else ()
        params.append(pytest.param(name, marks=marks, id=name))
    return params


#: Every registered backend, each on a small problem it accepts (a fresh spec per call).
BACKEND_SPECS = backend_cases()


class PickMin:
    """A hand-written PyEPO-style model (``setObj``, ``solve``) with no model inside that
    a reader could read: the one-hot argmin of three costs."""

    num_cost = 3
    modelSense = 1  # EPO.MINIMIZE

    def setObj(self, c):
        self.c = np.asarray(c)

    def solve(self):
        y = np.zeros(3)
        y[np.argmin(self.c)] = 1.0
        return y, float(self.c.min())


class FixedNoise:
    """Deterministic 'noise': returns the given draws, so the formulas can be checked exactly."""

    def __init__(self, z: torch.Tensor, grad_nu=lambda z: z) -> None:
        self.z = z
        self._grad_nu = grad_nu

    def sample(self, shape, generator=None):
        assert tuple(shape) == tuple(self.z.shape)
        return self.z.clone()

    def grad_nu(self, z):
        return self._grad_nu(z)


def loss_target_name(loss_cls) -> str:
    """``y_true`` or ``cost_true``: what the loss compares its prediction with."""
    parameters = list(inspect.signature(loss_cls.__call__).parameters)
    return parameters[2]


def loss_inputs(spec, backend, seed=0):
    """``cost_pred, cost_true, y_true`` for a batch of 4 (``y_true`` solved by ``backend``)."""
    rng = np.random.default_rng(seed)
    cost_pred = torch.tensor(rng.normal(size=(4, *spec.cost_shape)))
    cost_true = torch.tensor(rng.normal(size=(4, *spec.cost_shape)))
    return cost_pred, cost_true, cl.make_solver(spec, backend).solve(cost_true)


def backend_or_skip(name: str, spec) -> str:
    if name not in capable_backends(spec):
        pytest.skip(f"backend {name!r} is not installed or cannot solve {spec.label}")
    return name


def skip_unless_installed(name: str) -> None:
    """Skip the test when backend ``name`` is not registered or its packages are missing."""
    cls = backends().get(name)
    if cls is None or missing_packages(cls):
        pytest.skip(f"backend {name!r} is not installed here")


#: The generic MIP backends a known-cost test runs on, each skipped where not installed.
KNOWN_COST_BACKENDS = ("highs", "scip", "gurobi", "cvxpy")


def installed_params(names) -> list:
    """``pytest.param(name)`` for each backend name, skipped where it cannot solve a
    small ILP here (not installed, or refused by its licence)."""
    import combolayer as cl

    small = cl.ILP(shape=[2], constraints=[cl.Constraint(coefs=[1, 1], sense="<=", rhs=1)])
    able = capable_backends(small)
    return [pytest.param(name, marks=pytest.mark.skipif(name not in able,
                                                        reason=f"{name} is not installed"))
            for name in names]


def run_on_threads(work, count: int) -> None:
    """Run ``work(0)`` ... ``work(count - 1)`` on ``count`` threads at once and fail
    with every error they raised (an error in a thread would otherwise be lost)."""
    errors = []

    def run(i):
        try:
            work(i)
        except BaseException as error:  # noqa: BLE001 - any error in a thread fails the test
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def load_script(path: Path, name: str):
    """The module of the script at ``path`` (benchmarks/ and tools/ are not packages),
    entered in ``sys.modules`` as ``name`` before it runs: a dataclass looks its module
    up there."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_benchmark(name: str):
    """The module of ``benchmarks/<name>.py``, so that a test checks with the benchmark's
    own measure."""
    return load_script(Path(__file__).parents[1] / "benchmarks" / f"{name}.py",
                       f"benchmarks_{name}")


def unguarded_process_script() -> str:
    """The top of a script that solves at its top level, without an
    ``if __name__ == "__main__":`` guard, on 2 process workers (started at its first
    call); the test appends the loop that solves ``costs`` and prints."""
    return """
import time, warnings
import numpy as np, combolayer as cl
spec = cl.ILP.from_matrices(shape=[12], A_ub=np.ones((1, 12)), b_ub=[4], sense="max")
solver = cl.make_solver(spec, {"name": "highs", "executor": "process", "workers": 2})
costs = np.random.default_rng(0).normal(size=(64, 12))
"""
