"""Timing the solver inside a training step: what share of it the solver takes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .outcome import Solved


@dataclass
class SolverClock:
    """Seconds spent inside the solvers of some layers, and how many batch calls."""

    seconds: float = 0.0
    calls: int = 0


class _TimedKernel:
    def __init__(self, kernel: Any, clock: SolverClock) -> None:
        self.kernel, self.clock, self.array_api = kernel, clock, kernel.array_api

    def __call__(self, costs: Any) -> Solved:
        """The kernel's solutions with their instances' statuses, which the solver settles."""
        start = time.perf_counter()
        try:
            return self.kernel.with_statuses(costs)
        finally:
            self.clock.seconds += time.perf_counter() - start
            self.clock.calls += 1


@contextmanager
def solver_clock(*layers: Any) -> Iterator[SolverClock]:
    """Time every solver call of ``layers`` inside the block, forward and backward
    (Blackbox's extra solve runs in ``loss.backward()``), to report the share of a
    training step spent in the solver. The layers are restored on exit."""
    clock = SolverClock()
    solvers = list({id(layer.solver): layer.solver for layer in layers}.values())
    kernels = [solver.kernel for solver in solvers]
    for solver, kernel in zip(solvers, kernels):
        solver.kernel = _TimedKernel(kernel, clock)
    try:
        yield clock
    finally:
        for solver, kernel in zip(solvers, kernels):
            solver.kernel = kernel
