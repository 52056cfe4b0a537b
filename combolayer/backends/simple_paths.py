"""Simple paths from the generic solvers, on graphs with cycles.

A generic solver (HiGHS, SCIP, Gurobi, cvxpy) solves a path spec's arc-flow form,
whose optimum may be the path plus disjoint cycles of cost 0: costs that are 0, the
ones a negative cost is clipped to (``negative_costs="clip"``) or the user's own,
make such a cycle free. Its ``y`` is then no path at all. `SimplePathKernel` keeps
the cheapest path inside the support of the solver's answer, found by the
specialised search (Dijkstra, `combolayer.backends.algorithms`) with the costs off the
support set to infinity: the costs a cycle could pay with are non-negative by then
(`Spec.cost_floor`), so that path costs no more than the answer, which costs no
more than any path; the two are equally good and the kept one is simple. Calls
with per-call rows are left alone: their form cuts every cycle off
(`CanonicalForm.row_separator`), and a shorter path could break a row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import InfeasibleError
from ..specs.base import Spec
from .outcome import Solved, as_solved, warn_not_optimal
from .solver import Kernel, KernelDefaults, as_kernel


class SimplePathKernel(KernelDefaults):
    """``kernel`` (a numpy one, of a path spec on a graph with cycles) whose answers
    without per-call rows are the cheapest simple paths inside their support; every
    other attribute is the kernel's."""

    def __init__(self, kernel: Kernel, search: Callable[[np.ndarray], np.ndarray]) -> None:
        self.kernel = kernel
        self.array_api = kernel.array_api
        self._search = search

    takes_rows = property(lambda self: self.kernel.takes_rows)
    takes_start = property(lambda self: self.kernel.takes_start)
    stops_in_time = property(lambda self: self.kernel.stops_in_time)
    checks_values = property(lambda self: self.kernel.checks_values)
    current_backend = property(lambda self: self.kernel.current_backend)
    backend_reason = property(lambda self: self.kernel.backend_reason)

    def serial(self) -> Kernel:
        local = self.kernel.serial()
        return self if local is self.kernel else SimplePathKernel(local, self._search)

    def time_limit(self, seconds: float) -> Any:
        return self.kernel.time_limit(seconds)

    def outcome(self) -> dict | None:
        return self.kernel.outcome()

    def adopt(self, outcome: dict | None) -> None:
        self.kernel.adopt(outcome)

    def close(self) -> None:
        self.kernel.close()

    def with_statuses(self, costs: np.ndarray, **kwargs: Any) -> Solved:
        solved = as_solved(self.kernel.with_statuses(costs, **kwargs))
        if kwargs.get("rows") is not None:
            return solved
        inside = np.where(np.asarray(solved.values) > 0.5, costs, np.inf)
        try:
            return Solved(self._search(inside), solved.statuses)
        except InfeasibleError:  # a support without a path: no flow the solver vouches for
            return solved

    def __call__(self, costs: np.ndarray, **kwargs: Any) -> np.ndarray:
        return warn_not_optimal(self.with_statuses(costs, **kwargs), type(self).__name__)

    def __getattr__(self, name: str) -> Any:
        # copy and pickle look for dunders before __init__ has set the kernel
        if name.startswith("__") or "kernel" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["kernel"], name)


def simple_paths(spec: Spec, kernel: Kernel,
                 search: Callable[[], Callable[[np.ndarray], np.ndarray]]) -> Kernel:
    """``kernel`` in a `SimplePathKernel` where ``spec`` is a path on a graph with
    cycles and the kernel takes numpy costs, else ``kernel`` itself. ``search()``
    builds the path search: a numpy kernel of a backend with an algorithm of its own."""
    cycles = getattr(spec, "cycle_costs", None)
    if cycles is None or cycles() is None or kernel.array_api != "numpy":
        return kernel
    return SimplePathKernel(as_kernel(kernel), search())
