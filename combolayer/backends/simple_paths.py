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
from .solver import Kernel, PluginKernel, as_kernel


class SimplePathKernel(PluginKernel):
    """``kernel`` (a numpy one, of a path spec on a graph with cycles) whose answers
    without per-call rows are the cheapest simple paths inside their support; every
    other capability is the kernel's."""

    def __init__(self, kernel: Kernel, search: Callable[[np.ndarray], np.ndarray]) -> None:
        super().__init__(kernel)
        self._search = search

    def serial(self) -> Kernel:
        local = self.kernel.serial()
        return self if local is self.kernel else SimplePathKernel(local, self._search)

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


def simple_paths(spec: Spec, kernel: Kernel,
                 search: Callable[[], Callable[[np.ndarray], np.ndarray]]) -> Kernel:
    """``kernel`` in a `SimplePathKernel` where ``spec`` is a path on a graph with
    cycles and the kernel takes numpy costs, else ``kernel`` itself. ``search()``
    builds the path search: a numpy kernel of a backend with an algorithm of its own."""
    cycles = getattr(spec, "cycle_costs", None)
    if cycles is None or cycles() is None or kernel.array_api != "numpy":
        return kernel
    return SimplePathKernel(as_kernel(kernel), search())
