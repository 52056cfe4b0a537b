"""Helpers shared by the estimator, loss and metric tests."""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

import pytest
import torch

import combolayer as cl
from combolayer.backends.registry import backends, capable_backends, missing_packages

#: Every backend, each on a small problem it accepts (a factory: a fresh spec per test).
BACKEND_SPECS = {
    "highs": lambda: cl.problems.TopK(6, 2),
    "scip": lambda: cl.problems.TopK(6, 2),
    "cvxpy": lambda: cl.problems.TopK(6, 2),
    "torch": lambda: cl.problems.TopK(6, 2),
    "scipy": lambda: cl.problems.Matching(3, 3),
    "networkx": lambda: cl.problems.Matching(3, 3),
}


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


def backend_or_skip(name: str, spec) -> str:
    if name not in capable_backends(spec):
        pytest.skip(f"backend {name!r} is not installed or cannot solve {spec.label}")
    return name


def skip_unless_installed(name: str) -> None:
    """Skip the test when backend ``name`` is not registered or its packages are missing."""
    cls = backends().get(name)
    if cls is None or missing_packages(cls):
        pytest.skip(f"backend {name!r} is not installed here")


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


def load_benchmark(name: str):
    """The module of ``benchmarks/<name>.py`` (benchmarks/ is not a package), so that a
    test checks with the benchmark's own measure."""
    path = Path(__file__).parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
