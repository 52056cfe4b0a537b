"""``backend="race"``: the capable exact solvers take turns on the run's first instances,
and the fastest solves the rest.

Which exact solver is fastest depends on the costs it is given, and a benchmark of
other costs cannot say (SCIP solves Identity's projected knapsack costs faster than
Gurobi, and Gurobi SPO+'s shifted ones). So ``backend="race"``, like cuDNN's
``benchmark`` mode, times the first `MAX_CANDIDATES` of ``"auto"``'s ranking on the
instances the run asks for anyway:

1. **Turns.** The candidates solve the run's first instances one after the other, in
   ``"auto"``'s order, `WARM_UP` + `TIMED` instances each, one instance a call, in
   the calling thread. The first `WARM_UP` build the model and warm the solver up,
   and are not timed; the next `TIMED` are timed in CPU time of the process, so other
   processes' load does not decide (wall time where the solvers run several threads).
   Calls with per-call rows go whole and untimed to the first-ranked backend until the
   race is won, then to the winner.
2. **Winner.** The candidate with the lowest median time per instance wins and solves
   every instance after that, whole batches at a time (with its executor's workers, if
   it has any). The others are closed.

Every instance is solved once, by one candidate, to optimality: racing costs only the
extra time of the instances a slower candidate took. Two exact solvers may return
different optima of a cost with ties, and timing decides which one answers, which is
why racing is opt-in (``"auto"`` is a fixed choice). Racing pays on long runs of
cheap instances; on a few expensive ones (a TSP of 150 nodes) a slow candidate's turn
costs more than the race can win back, and a named backend is the better choice.
Backends with an algorithm of their own for the problem never race.
benchmarks/auto_race.py measures the race against every single backend.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .outcome import OPTIMAL, Solved, statuses_of
from .solver import Kernel, ReportingKernel, as_kernel

logger = logging.getLogger(__name__)

#: At most this many backends race: the first of ``"auto"``'s ranking and the one behind
#: it. The third (HiGHS for knapsacks, SCIP for the TSP) was the slowest on every MIP
#: loop of benchmarks/auto_race.py, 3-28x the fastest.
MAX_CANDIDATES = 2
#: Untimed instances each candidate solves first: its model's build and its first solve
#: (SCIP's took 4.5x its later ones on PyEPO's 50 x 2 knapsack) say little of its pace.
WARM_UP = 1
#: Timed instances each candidate solves: enough for a median that one heavy instance
#: does not move (a knapsack instance can take 30x its median), few enough that a
#: candidate twice as slow costs a run of 1000 instances about 2% (benchmarks/auto_race.py).
TIMED = 15


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


class RacingKernel(ReportingKernel):
    """A numpy kernel whose candidate kernels take turns until the fastest is known.

    ``first`` is the first-ranked backend's ``(name, kernel)``; ``rivals`` the ``(name,
    build)`` pairs of the others in ``"auto"``'s order, each ``build()`` returning its
    kernel when its turn comes (a run that ends before builds no other model). A
    kernel may be an executor's: its ``serial()`` model solves the turns in the caller,
    and its workers start only if it wins. ``first_reason`` says why the first-ranked
    backend leads; ``clock`` times the turns (a test passes a fake one).
    """

    array_api = "numpy"

    def __init__(self, first: tuple[str, Any], rivals: list[tuple[str, Callable[[], Any]]],
                 label: str, first_reason: str = "",
                 clock: Callable[[], float] = time.process_time) -> None:
        if not rivals:
            raise ValueError("a race needs at least one rival to the first-ranked backend")
        self.names = [first[0], *(name for name, _ in rivals)]
        self.kernels: dict[str, Kernel] = {first[0]: as_kernel(first[1])}
        self._builders = dict(rivals)
        self.label = label
        self.first_reason = first_reason
        self.clock = clock
        self._lock = threading.RLock()
        #: Each candidate's timed seconds per instance, in the order solved.
        self.times: dict[str, list[float]] = {name: [] for name in self.names}
        #: Why a candidate sits out (its model failed to build).
        self.dropped: dict[str, str] = {}
        self.winner: str | None = None
        #: Instances the race was given, and instances each candidate solved: every
        #: instance is solved once, so the counts add up to `instances_in`.
        self.instances_in = 0
        self.solved: dict[str, int] = dict.fromkeys(self.names, 0)
        #: Instances each candidate solved in its turn (its warm-up ones included).
        self.turns: dict[str, int] = dict.fromkeys(self.names, 0)
        #: The medians a copy took from its original (`adopt`).
        self._adopted: dict[str, float] = {}

    # -- what the solver and the layer read ---------------------------------------------

    @property
    def takes_start(self) -> bool:
        """Whether a built candidate takes a MIP start (each is given one only if it does)."""
        with self._lock:
            return any(k.serial().takes_start for k in self.kernels.values())

    @property
    def takes_rows(self) -> bool:
        """Whether `rows_backend` takes per-call rows."""
        with self._lock:
            return self.kernels[self.rows_backend].takes_rows

    @property
    def rows_backend(self) -> str:
        """The backend that answers calls with per-call rows, whole and untimed: the
        first-ranked until the race is won (its model is built), then the winner."""
        return self.winner or self.names[0]

    @property
    def current_backend(self) -> str:
        """The backend whose turn it is, then the winner."""
        with self._lock:
            return self.winner or self._turn() or self.names[0]

    @property
    def medians(self) -> dict[str, float]:
        """Each candidate's median seconds per timed instance (those with any)."""
        return {name: statistics.median(t) for name, t in self.times.items() if t}

    @property
    def backend_reason(self) -> str:
        """Why `current_backend` solves, in one sentence, with the race's times once run."""
        with self._lock:
            if self.winner is None:
                return (f"{self.current_backend}'s turn in the race: 'race' gives "
                        f"{', '.join(self.names)} {WARM_UP + TIMED} instances each of this run, "
                        f"one after the other, and keeps the fastest ({self.names[0]} first: "
                        f"{self.first_reason or 'first by ranking'})")
            dropped = "".join(f"; {n} {why}" for n, why in self.dropped.items())
            if not self.times[self.winner]:
                return (f"{self.winner} won the race on the costs of the solver this one was "
                        f"copied from: {self._times()} median per solve{dropped}")
            return (f"{self.winner} won the race on this run's own costs: {self._times()} "
                    f"median per solve{dropped}")

    def _times(self) -> str:
        medians = self._medians
        return ", ".join(f"{name} {_ms(medians[name])}"
                         for name in sorted(medians, key=medians.get))

    @property
    def _medians(self) -> dict[str, float]:
        return self.medians or self._adopted

    def table(self) -> list[tuple[str, int, float | None, str]]:
        """One row per candidate: name, timed solves, median seconds per solve, verdict."""
        medians = self._medians
        rows = []
        for name in self.names:
            if name == self.winner:
                verdict = "winner"
            elif name in self.dropped:
                verdict = self.dropped[name]
            else:
                verdict = "lost" if self.winner else "racing"
            rows.append((name, len(self.times[name]), medians.get(name), verdict))
        return rows

    def outcome(self) -> dict | None:
        """What a copy needs to keep the winner (plain data: pickles), or None before it."""
        if self.winner is None:
            return None
        return {"winner": self.winner, "medians": dict(self._medians)}

    def adopt(self, outcome: dict | None) -> None:
        """Take a race's `outcome` (from the layer or loss this one was copied from)."""
        if not outcome or outcome.get("winner") not in self.names:
            return
        with self._lock:
            self.winner = outcome["winner"]
            self._adopted = {name: float(value) for name, value
                             in outcome.get("medians", {}).items() if name in self.names}

    # -- solving ----------------------------------------------------------------------

    def with_statuses(self, costs: np.ndarray, start: np.ndarray | None = None,
                      **per_call: Any) -> Solved:
        per_call = {key: value for key, value in per_call.items() if value is not None}
        with self._lock:
            self.instances_in += len(costs)
            out = np.empty_like(costs)
            statuses: list[str] = []
            b = 0
            name = None if per_call else self._turn()
            while name is not None and b < len(costs):
                if not self._built(name):  # it sits out
                    name = self._turn()
                    continue
                y, seconds = self._solve(name, costs, start, slice(b, b + 1), serial=True)
                out[b] = np.asarray(y.values, dtype=np.float64)[0]
                statuses.extend(statuses_of(y))
                self.turns[name] += 1
                if self.turns[name] > WARM_UP:
                    self.times[name].append(seconds)
                b += 1
                name = self._turn()  # the race is won as soon as the last turn ends
            if b < len(costs):  # the winner's, or a call with per-call rows
                y, _ = self._solve(self.rows_backend, costs, start, slice(b, None),
                                   serial=self.winner is None, **per_call)
                out[b:] = np.asarray(y.values, dtype=np.float64).reshape(out[b:].shape)
                statuses.extend(statuses_of(y))
        if all(status == OPTIMAL for status in statuses):
            return Solved(out)
        return Solved(out, tuple(statuses))

    def kernel(self, name: str) -> Kernel:
        """Candidate ``name``'s kernel, built on first use."""
        kernel = self.kernels.get(name)
        if kernel is None:
            kernel = self.kernels[name] = as_kernel(self._builders.pop(name)())
        return kernel

    def close(self) -> None:
        """Close every candidate built so far (their executors' workers)."""
        for kernel in self.kernels.values():
            kernel.close()

    def _turn(self) -> str | None:
        """The candidate whose turn it is, or None once the race is won (it is won here,
        once the last turn has ended)."""
        if self.winner is None:
            for name in self.names:
                if name not in self.dropped and len(self.times[name]) < TIMED:
                    return name
            self._win()
        return None

    def _built(self, name: str) -> bool:
        """Build ``name``'s model if it has none; one that fails to build (a licence,
        memory) sits out, and the others race on."""
        try:
            self.kernel(name)
        except Exception as error:
            self.dropped[name] = f"could not build its model: {type(error).__name__}"
            logger.info("backend 'race' for %s: %s sits out: %s: %s", self.label, name,
                        type(error).__name__, error)
            return False
        return True

    def _solve(self, name: str, costs: np.ndarray, start: np.ndarray | None, span: slice,
               serial: bool, **per_call: Any) -> tuple[Solved, float]:
        """Instances ``span`` on ``name`` (its ``serial()`` model for a turn), and the
        seconds they took."""
        kernel = self.kernel(name)
        kernel = kernel.serial() if serial else kernel
        if start is not None and kernel.takes_start:
            per_call["start"] = start[span]
        began = self.clock()
        y = kernel.with_statuses(costs[span], **per_call)
        self.solved[name] += len(costs[span])
        return y, self.clock() - began

    def _win(self) -> None:
        """The candidate with the lowest median wins (the first-ranked one when none was
        timed); the others are closed."""
        medians = self.medians
        self.winner = (min(medians, key=lambda n: (medians[n], self.names.index(n)))
                       if medians else self.names[0])
        for name, kernel in self.kernels.items():
            if name != self.winner:
                kernel.close()
        logger.info("backend 'race' for %s: %s won: %s median per solve (%d timed solves "
                    "each)", self.label, self.winner, self._times(), TIMED)
