"""Where an ``"auto"`` solver sends costs that live on an accelerator.

``"auto"`` ranks backends once, when the solver is built, for costs on the CPU. When
its choice takes numpy arrays (scipy's Dijkstra) and another backend has a batch
kernel of its own for the problem kind that runs on any torch device (the
Bellman-Ford kernels of `combolayer.backends.torch_paths`), a `DeviceRoute` sends
every call whose costs are on an accelerator (CUDA, ...) to that backend's solver,
built on first use: the costs are solved on their device, with no round trip through
the host, and the choice depends only on where the costs are (deterministic). Calls
with CPU costs keep the CPU choice. `Solver._full_batch` is the one place that reads
it; `combolayer.backends.registry.device_route` builds it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .solver import Solver

logger = logging.getLogger(__name__)


class DeviceRoute:
    """The solver for costs on an accelerator: backend ``backend``, built by ``build``
    on the first call that needs it (once, whatever the threads)."""

    def __init__(self, backend: str, reason: str, build: Callable[[], Solver]) -> None:
        self.backend = backend
        #: Why, in one clause, for the owning solver's ``choice_reason``.
        self.reason = reason
        self._build = build
        self._solver: Solver | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"DeviceRoute({self.backend!r})"

    def solver(self, owner: Solver) -> Solver:
        """The routed solver (its solves' statuses go back to ``owner`` as values)."""
        if self._solver is None:
            with self._lock:
                if self._solver is None:
                    solver = self._build()
                    logger.info("%s: costs on an accelerator are solved there by %r (%s); "
                                "costs on the CPU by %r", owner.spec.label, self.backend,
                                self.reason, owner.backend)
                    self._solver = solver
        return self._solver
