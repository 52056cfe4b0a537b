"""``backend="race"``: the capable exact solvers are timed on the run's first instances,
and the fastest solves the rest.

Which exact solver is fastest depends on the costs it is given, and a benchmark of
other costs cannot say (SCIP solves Identity's projected knapsack costs about 3x
faster than Gurobi, and Gurobi SPO+'s shifted ones). So ``backend="race"``, like
cuDNN's ``benchmark`` mode, times the first `MAX_CANDIDATES` of ``"auto"``'s ranking on
the instances the run asks for anyway:

1. **Trial.** Every candidate solves the run's first `WARM_UP` + `TIMED` instances, the
   same instances, in the calls they come in, in the calling thread; the first-ranked
   backend's answers are returned. The first `WARM_UP` warm the solvers up (a first
   solve is slow) and are not timed; the next `TIMED` are timed in CPU time of the
   process, so other processes' load does not decide (wall time where the solvers may
   run several threads).
2. **Winner.** The candidate with the least total time on the timed instances wins and
   solves every instance after that, whole batches at a time (with its executor's
   workers, if it has any). The others are closed. The same instances for every
   candidate, and their total rather than a median: solve times are heavy-tailed (on
   Identity's knapsack Gurobi's median solve was SCIP's, its mean 3x SCIP's). A rival
   whose trial has taken `DROP_RATIO` times the first-ranked backend's time so far (its
   model's build left out) is dropped after that call, unless the call ends the trial.

Racing costs the other candidates' solves of the trial's instances. That pays on long
runs of cheap instances; on a short run, or a few expensive instances (the TSP of 60
nodes in 32 instances), the trial can cost more than the race wins back, and a named
backend is the better choice. Calls with per-call rows go whole and untimed to the
first-ranked backend until the race is won, then to the winner. Two exact solvers may
return different optima of a cost with ties, and timing decides which one answers
after the trial, which is why racing is opt-in (``"auto"`` is a fixed choice).
Backends with an algorithm of their own for the problem never race.
benchmarks/auto_race.py measures the race against every single backend.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import InputError
from .outcome import Solved, joined
from .solver import Kernel, ReportingKernel, as_kernel

logger = logging.getLogger(__name__)

#: At most this many backends race: the first of ``"auto"``'s ranking and the one behind
#: it. The third (HiGHS for knapsacks, SCIP for the TSP) was the slowest on every MIP
#: loop of benchmarks/auto_race.py, 3-28x the fastest.
MAX_CANDIDATES = 2
#: Untimed instances at the start of the trial: a model's build and first solve (SCIP's
#: took 4.5x its later ones on PyEPO's 50 x 2 knapsack) say little of its pace.
WARM_UP = 1
#: Timed instances in the trial: over every window of 15 of the Identity knapsack loop's
#: solves, Gurobi's total was 1.4-4.1x SCIP's (3x over the loop), so 15 told them apart
#: every time; few enough that a slower candidate's share is a small part of a run of
#: hundreds of instances (benchmarks/auto_race.py).
TIMED = 15
#: A rival whose trial so far (its warm-up included) took this many times the first-ranked
#: backend's on the same instances is dropped after that call: it is unlikely to win, and
#: its further trial instances would cost the run up to its ratio each (benchmarks/
#: auto_race.py's TSP loops, a few instances of seconds each).
DROP_RATIO = 2.0


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


class RacingKernel(ReportingKernel):
    """A numpy kernel whose candidate kernels are timed on the same first instances until
    the fastest is known.

    ``first`` is the first-ranked backend's ``(name, kernel)``; ``rivals`` the ``(name,
    build)`` pairs of the others in ``"auto"``'s order, each ``build()`` returning its
    kernel, called for the trial's first instance. A kernel may be an executor's: its
    ``serial()`` model solves the trial in the caller, and its workers start only if it
    wins. ``first_reason`` says why the first-ranked backend leads; ``clock`` times the
    trial (a test passes a fake one).
    """

    array_api = "numpy"

    def __init__(self, first: tuple[str, Any], rivals: list[tuple[str, Callable[[], Any]]],
                 label: str, first_reason: str = "",
                 clock: Callable[[], float] = time.process_time) -> None:
        if not rivals:
            raise InputError("a race needs at least one rival to the first-ranked backend")
        self.names = [first[0], *(name for name, _ in rivals)]
        self.kernels: dict[str, Kernel] = {first[0]: as_kernel(first[1])}
        self._builders = dict(rivals)
        self.label = label
        self.first_reason = first_reason
        self.clock = clock
        self._lock = threading.RLock()
        #: Instances of the trial so far, its warm-up included (`timed`: those after it).
        self.tried = 0
        #: Each candidate's seconds on the trial's timed instances (the same for all), and
        #: on all of its trial (the warm-up included, its model's build not).
        self.seconds: dict[str, float] = dict.fromkeys(self.names, 0.0)
        self.spent: dict[str, float] = dict.fromkeys(self.names, 0.0)
        #: Why a candidate sits out (its model failed to build, or it failed a trial
        #: instance that the first-ranked backend solved).
        self.dropped: dict[str, str] = {}
        self.winner: str | None = None
        #: Instances the race was given, and instances each candidate solved (the
        #: trial's by every candidate).
        self.instances_in = 0
        self.solved: dict[str, int] = dict.fromkeys(self.names, 0)
        #: The seconds per solve a copy took from its original (`adopt`).
        self._adopted: dict[str, float] = {}

    # -- what the solver and the layer read ---------------------------------------------

    @property
    def takes_start(self) -> bool:
        """Whether a built candidate takes a MIP start (each is given one only if it does)."""
        with self._lock:
            return any(k.serial().takes_start for k in self.kernels.values())

    @property
    def takes_rows(self) -> bool:
        """Whether `current_backend` takes per-call rows."""
        with self._lock:
            return self.kernels[self.current_backend].takes_rows

    @property
    def current_backend(self) -> str:
        """The backend whose answers are returned: the first-ranked until the race is won
        (its model is built), then the winner."""
        return self.winner or self.names[0]

    @property
    def timed(self) -> int:
        """The trial's timed instances so far: those after its warm-up."""
        return max(0, self.tried - WARM_UP)

    @property
    def per_solve(self) -> dict[str, float]:
        """Each candidate's mean seconds per timed instance of the trial (those still in
        it), or those a copy took from its original."""
        if not self.timed:
            return dict(self._adopted)
        return {name: self.seconds[name] / self.timed for name in self.names
                if name not in self.dropped}

    @property
    def backend_reason(self) -> str:
        """Why `current_backend` solves, in one sentence, with the race's times once run."""
        with self._lock:
            dropped = "".join(f"; {n} {why}" for n, why in self.dropped.items())
            if self.winner is None:
                return (f"{self.names[0]} answers while 'race' times {', '.join(self.names)} "
                        f"on this run's first {WARM_UP + TIMED} instances ({self.tried} so far) "
                        f"and keeps the fastest ({self.names[0]} first: "
                        f"{self.first_reason or 'first by ranking'}){dropped}")
            if self._adopted or not self.timed and not self.tried:
                return (f"{self.winner} won the race on the costs of the solver this one was "
                        f"copied from: {self._times()} mean per solve{dropped}")
            if not self.timed:  # every rival out before a timed solve
                return f"{self.winner} won the race, alone at its end{dropped}"
            return (f"{self.winner} won the race on this run's first instances: "
                    f"{self._times()} mean per solve{dropped}")

    def _times(self) -> str:
        times = self.per_solve
        return ", ".join(f"{name} {_ms(times[name])}" for name in sorted(times, key=times.get))

    def table(self) -> list[tuple[str, int, float | None, str]]:
        """One row per candidate: name, timed solves, mean seconds per solve, verdict."""
        times = self.per_solve
        rows = []
        for name in self.names:
            if name == self.winner:
                verdict = "winner"
            elif name in self.dropped:
                verdict = self.dropped[name]
            else:
                verdict = "lost" if self.winner else "racing"
            timed = 0 if name in self.dropped else self.timed
            rows.append((name, timed, times.get(name), verdict))
        return rows

    def outcome(self) -> dict | None:
        """What a copy needs to keep the winner (plain data: pickles), or None before it."""
        if self.winner is None:
            return None
        return {"winner": self.winner, "per_solve": self.per_solve}

    def adopt(self, outcome: dict | None) -> None:
        """Take a race's `outcome` (from the layer or loss this one was copied from)."""
        if not outcome or outcome.get("winner") not in self.names:
            return
        with self._lock:
            self.winner = outcome["winner"]
            self._adopted = {name: float(value) for name, value
                             in outcome.get("per_solve", {}).items() if name in self.names}

    # -- solving ----------------------------------------------------------------------

    def with_statuses(self, costs: np.ndarray, start: np.ndarray | None = None,
                      **per_call: Any) -> Solved:
        per_call = {key: value for key, value in per_call.items() if value is not None}
        with self._lock:
            self.instances_in += len(costs)
            trial = (0 if per_call or self.winner is not None
                     else min(len(costs), WARM_UP + TIMED - self.tried))
            parts = [self._trial(costs, start, trial)] if trial else []
            if trial < len(costs):  # the winner's, or a call with per-call rows
                parts.append(self._solve(self.current_backend, costs, start,
                                         slice(trial, None), serial=self.winner is None,
                                         **per_call)[0])
        return joined(parts)

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

    def _trial(self, costs: np.ndarray, start: np.ndarray | None, count: int) -> Solved:
        """The first ``count`` instances of a call, solved by every candidate still in the
        race (its warm-up instances untimed): the first-ranked backend's answers."""
        warm = min(count, max(0, WARM_UP - self.tried))
        first, answer = self.names[0], None
        for name in self.names:
            if name in self.dropped:
                continue
            try:
                self.kernel(name)  # a rival's build: not part of its pace, as the first's is not
            except Exception as error:  # a licence, memory
                self._drop(name, f"sat out: {type(error).__name__}", error)
                continue
            began = self.clock()
            try:
                parts = []
                if warm:
                    parts.append(self._solve(name, costs, start, slice(0, warm), True)[0])
                if warm < count:
                    y, seconds = self._solve(name, costs, start, slice(warm, count), True)
                    parts.append(y)
                    self.seconds[name] += seconds
            except Exception as error:
                if name == first:  # its errors are the call's, as under "auto"
                    raise
                # a limit the first-ranked backend solved within, a numerical failure
                self._drop(name, f"sat out: {type(error).__name__}", error)
                continue
            finally:
                self.spent[name] += self.clock() - began
            if answer is None:  # the first-ranked backend's
                answer = joined(parts)
            elif (self.tried + count < WARM_UP + TIMED  # at the end, the timed totals decide
                  and self.spent[name] > DROP_RATIO * self.spent[first]):
                self._drop(name, f"dropped: {self.spent[name] / self.spent[first]:.2g}x "
                           f"{first}'s time on the same {self.tried + count} instances")
        self.tried += count
        if self.tried >= WARM_UP + TIMED or len(self.dropped) == len(self.names) - 1:
            self._win()
        return answer

    def _drop(self, name: str, why: str, error: Exception | None = None) -> None:
        self.dropped[name] = why
        logger.info("backend 'race' for %s: %s %s%s", self.label, name, why,
                    f": {error}" if error is not None else "")

    def _solve(self, name: str, costs: np.ndarray, start: np.ndarray | None, span: slice,
               serial: bool, **per_call: Any) -> tuple[Solved, float]:
        """Instances ``span`` on ``name`` (its ``serial()`` model in the trial), and the
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
        """The candidate with the least time on the trial wins (ties: the first ranked);
        the others are closed."""
        times = self.per_solve
        self.winner = (min(times, key=lambda n: (times[n], self.names.index(n))) if times
                       else self.names[0])
        for name, kernel in self.kernels.items():
            if name != self.winner:
                kernel.close()
        logger.info("backend 'race' for %s: %s won: %s mean per solve over the same %d "
                    "instances", self.label, self.winner, self._times(), self.timed)
