"""``backend="auto"`` that measures: the capable exact backends race on the run's own costs.

Which exact solver is fastest depends on the costs it is given, and in training
those change (SCIP solves Identity's projected knapsack costs 3x faster than
Gurobi, Gurobi is the faster on SPO+'s shifted ones). So when ``"auto"`` has more
than one capable generic exact backend for a problem, `RacingKernel` holds the
first `MAX_CANDIDATES` of its ranking and, like cuDNN's ``benchmark`` mode,
times them on the rows the caller asks for anyway:

1. **Lead.** The first-ranked backend solves every row, one at a time in the
   caller, until it has spent `START_SECONDS` solving (checked after each row, so the
   race can start in the middle of a batch): a run too short for the choice to
   matter never races.
2. **Race.** The rows of the next calls go one at a time, each to one candidate
   (the one that has spent the least race time: equal time, not equal rows), so
   every row is still solved once, by one of them: racing costs no extra solve.
   Each candidate's first solve is a warm-up and is not timed (HiGHS's first solve
   pays its set-up). A candidate whose mean time per solve is more than
   `DROP_RATIO` times the best mean (both with `MIN_RATIO_SOLVES` timed solves),
   or exceeds it by more than `Z` standard errors of the difference (both with
   `MIN_SOLVES`), drops out; when one is left, or all have `MAX_SOLVES`, the
   lowest mean wins (the mean, not the median: the slow tail decides an epoch).
   One INFO line gives the times. A solve is timed in this process's CPU time
   (``time.process_time``; wall time when ``BackendConfig.threads`` is not 1), so
   other processes' load does not decide the race.
3. **Re-check.** The winner then solves whole batches (on the configured
   executor: thread, process or Ray workers start for the winner only). The cost
   distribution drifts during training, so once the winner has spent
   ``1 / RECHECK_BUDGET`` times what the other candidates' rows took in the last
   check (wall time, measured; before the first, their race means), every
   candidate, the winner too, solves `RECHECK_SOLVES` rows one at a time. A check
   so costs at most `RECHECK_BUDGET` of the solve time between checks, and again
   no extra solve. A few rows are a hint, not a verdict: a candidate whose check
   mean is below `SWITCH_MARGIN` times the winner's pace over every row since the
   last check races the winner again, from fresh samples and under the race's
   rule, and takes over only if it wins that.

Every answer is optimal whoever solves it; two exact solvers may return
different optima of a cost with ties, so ``BackendConfig(deterministic=True)``
turns the race off for runs that must repeat bit for bit. Backends with an
algorithm of their own for the problem (Dijkstra, the DAG, Held-Karp, LAPJV,
top-k, ranking, enumeration) rank ahead of every generic solver and are used
without a race.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .outcome import record_all, recording, row_statuses

logger = logging.getLogger(__name__)

#: At most this many backends race: the first of ``"auto"``'s ranking and those behind it.
MAX_CANDIDATES = 3
#: Solve time (seconds) the first-ranked backend spends alone before a race starts.
START_SECONDS = 0.2
#: Timed solves each candidate makes before one drops out by the standard-error rule.
MIN_SOLVES = 5
#: ... and before one drops out by the ratio rule (`DROP_RATIO`).
MIN_RATIO_SOLVES = 3
#: Timed solves after which the lowest mean wins, however close the others are.
MAX_SOLVES = 30
#: Standard errors of the difference of means by which a candidate must trail to drop out.
Z = 3.0
#: ... or the ratio of means past which it drops out whatever the spread: a solver twice
#: as slow costs more in the race than a rare wrong drop, which a re-check undoes.
DROP_RATIO = 2.0
#: Rows each candidate solves in a re-check.
RECHECK_SOLVES = 4
#: The largest share of the winner's solve time that a re-check may cost.
RECHECK_BUDGET = 0.02
#: A re-check hands over only to a candidate at most this fraction of the winner's time.
SWITCH_MARGIN = 0.8


def _serial(kernel: Any) -> Any:
    """The in-caller kernel of an executor's kernel (its ``local`` model), else itself."""
    return getattr(kernel, "local", kernel)


def _mean_se(times: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(times)
    se = statistics.stdev(times) / math.sqrt(len(times)) if len(times) > 1 else math.inf
    return mean, se


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


class RacingKernel:
    """A numpy kernel that spreads rows over candidate kernels until one is the fastest.

    ``first`` is the first-ranked backend's ``(name, kernel)``; ``rivals`` the
    ``(name, build)`` pairs of the others in ``"auto"``'s order, each ``build()``
    returning its kernel, called when the race starts (a run that never races
    builds no other model). A kernel may be an executor's: its ``local`` model
    solves the raced rows in the caller, and its workers start only if it wins.
    ``first_reason`` says why the first-ranked backend leads; ``clock`` times the
    solves (a test passes a fake one).
    """

    array_api = "numpy"

    def __init__(self, first: tuple[str, Any], rivals: list[tuple[str, Callable[[], Any]]],
                 label: str, first_reason: str = "",
                 clock: Callable[[], float] = time.perf_counter,
                 sample_clock: Callable[[], float] | None = None) -> None:
        if not rivals:
            raise ValueError("a race needs at least one rival to the first-ranked backend")
        self.names = [first[0], *(name for name, _ in rivals)]
        self.kernels: dict[str, Any] = {first[0]: first[1]}
        self._builders = dict(rivals)
        self.label = label
        self.first_reason = first_reason
        self.clock = clock
        self.sample_clock = sample_clock or (time.process_time if clock is time.perf_counter
                                             else clock)
        self._lock = threading.RLock()
        #: "lead", "race", "won" or "check".
        self.phase = "lead"
        self.lead_seconds = 0.0
        self.samples: dict[str, list[float]] = {name: [] for name in self.names}
        self._warm: set[str] = set()
        self.alive = list(self.names)
        self._racing: list[str] = []
        #: Race time (sample clock) each candidate's timed solves took in the current race.
        self._spent: dict[str, float] = {}
        #: The winner's solve time (sample clock) and rows since the last check (or its
        #: win), in whole batches: its pace, which a check's challengers must beat.
        self._winner_time, self._winner_rows = 0.0, 0
        self.dropped: dict[str, str] = {}
        #: Candidates whose model failed to build: they sit out of every race and check.
        self._unbuilt: set[str] = set()
        self.winner: str | None = None
        #: The mean seconds per solve each candidate showed in the last race it ran in.
        self.means: dict[str, float] = {}
        self.since_check = 0.0
        self._check_samples: dict[str, list[float]] = {}
        self.checks = 0
        self.check_means: dict[str, float] = {}
        self._check_wall = 0.0
        self._last_check_wall: float | None = None
        self.adopted = False
        #: Rows the race was given, and rows each candidate solved (whole batches too):
        #: every row is solved once, so the counts add up to `rows_in`.
        self.rows_in = 0
        self.solved: dict[str, int] = dict.fromkeys(self.names, 0)

    # -- what the solver and the layer read ---------------------------------------------

    @property
    def takes_start(self) -> bool:
        """Whether a built candidate takes a MIP start (each is given one only if it does)."""
        return any(getattr(_serial(k), "takes_start", False) for k in self.kernels.values())

    @property
    def takes_rows(self) -> bool:
        """Whether the current backend takes per-call rows: calls with rows go to it whole."""
        return bool(getattr(self.kernel(self.current_backend), "takes_rows", False))

    @property
    def current_backend(self) -> str:
        """The backend that solves whole batches now: the leader, then the winner."""
        return self.winner or self.names[0]

    @property
    def backend_reason(self) -> str:
        """Why `current_backend` solves, in one sentence, with the race's times once run."""
        if self.winner is None:
            return (f"{self.names[0]} leads ({self.first_reason or 'first by ranking'}); "
                    f"'auto' races {', '.join(self.names)} on this run's own rows once "
                    f"{self.names[0]} has spent {START_SECONDS:g} s solving "
                    f"({self.lead_seconds:.2g} s so far)")
        if self.adopted and not self.samples[self.winner]:
            return (f"{self.winner} won the race against "
                    f"{', '.join(n for n in self.names if n != self.winner)} on the costs of the "
                    f"layer this one was copied from ({self._times()} per solve)")
        last = ""
        if self.checks:
            last = (f"; re-checked {self.checks} times, the last on {RECHECK_SOLVES} rows each: "
                    f"{self._times(self.check_means)}")
        return (f"{self.winner} won the race on this run's own costs: {self._times()} mean per "
                f"solve{last}")

    def _times(self, times: dict[str, float] | None = None) -> str:
        times = self.means if times is None else times
        return ", ".join(f"{name} {_ms(times[name])}" for name in sorted(times, key=times.get))

    def table(self) -> list[tuple[str, int, float | None, str]]:
        """One row per candidate: name, timed solves, mean seconds per solve, verdict."""
        rows = []
        for name in self.names:
            times = self.samples[name]
            if name == self.winner:
                verdict = "winner"
            elif name in self.dropped:
                verdict = self.dropped[name]
            elif self.phase == "lead":
                verdict = "waiting"
            else:
                verdict = "racing" if name in self.alive and self.phase == "race" else "lost"
            rows.append((name, len(times), self.means.get(name), verdict))
        return rows

    def outcome(self) -> dict | None:
        """What a copy needs to keep the winner (plain data: pickles), or None before it."""
        if self.winner is None:
            return None
        return {"winner": self.winner, "means": dict(self.means)}

    def adopt(self, outcome: dict | None) -> None:
        """Take a race's `outcome` (from the layer or loss this one was copied from)."""
        if not outcome or outcome.get("winner") not in self.names:
            return
        with self._lock:
            self.winner = outcome["winner"]
            self.means = {name: float(value) for name, value in outcome["means"].items()
                            if name in self.names}
            self.phase, self.adopted, self.since_check = "won", True, 0.0

    # -- solving ----------------------------------------------------------------------

    def __call__(self, costs: np.ndarray, start: np.ndarray | None = None,
                 **per_call: Any) -> np.ndarray:
        per_call = {key: value for key, value in per_call.items() if value is not None}
        if per_call or len(costs) == 0:
            # per-call rows (A, b) go to the current backend whole: not raced
            with self._lock:
                self.rows_in += len(costs)
            return self._whole(self.current_backend, costs, start, per_call)[0]
        with self._lock:
            self.rows_in += len(costs)
            if self.phase == "won":
                began = self.sample_clock()
                y, seconds = self._whole(self.current_backend, costs, start, {})
                self._winner_time += self.sample_clock() - began
                self._winner_rows += len(costs)
                self.since_check += seconds
                if self.since_check * RECHECK_BUDGET >= self._check_cost():
                    self._begin_check()
                return y
            return self._one_by_one(costs, start)

    def kernel(self, name: str) -> Any:
        """Candidate ``name``'s kernel, built on first use."""
        kernel = self.kernels.get(name)
        if kernel is None:
            kernel = self.kernels[name] = self._builders.pop(name)()
        return kernel

    def start(self) -> None:
        """Race from the next row, without the lead (``combolayer bench --race``)."""
        with self._lock:
            if self.phase == "lead":
                self._start_race()

    def _start_race(self) -> None:
        """Build the rivals' models; one that fails to build (a licence, memory) sits out."""
        for name in self.names[1:]:
            try:
                self.kernel(name)
            except Exception as error:
                self.alive.remove(name)
                self._unbuilt.add(name)
                self.dropped[name] = f"could not build its model: {type(error).__name__}"
                logger.info("backend 'auto' for %s: %s sits out of the race: %s: %s",
                            self.label, name, type(error).__name__, error)
        if len(self.alive) == 1:
            self.means = {}
            self._win(self.names[0], "is left alone in")
            return
        self.phase, self._racing, self._spent = "race", list(self.alive), {}
        logger.debug("backend 'auto' for %s: %s spent %.2f s; racing %s", self.label,
                     self.names[0], self.lead_seconds, self.alive)

    def _whole(self, name: str, costs: np.ndarray, start: np.ndarray | None,
               per_call: dict) -> tuple[np.ndarray, float]:
        kernel = self.kernel(name)
        kwargs = dict(per_call)
        if start is not None and getattr(kernel, "takes_start", False):
            kwargs["start"] = start
        began = self.clock()
        y = kernel(costs, **kwargs)
        self.solved[name] += len(costs)
        return y, self.clock() - began

    def _one_by_one(self, costs: np.ndarray, start: np.ndarray | None) -> np.ndarray:
        """Lead, race or re-check: each row to one candidate, in the caller (executor
        workers start for the winner only), timed; the lead can turn into the race and
        the race into a win mid-batch, and the rest of the batch then goes to the
        winner in one call. Exactly one status per row."""
        out = np.empty_like(costs)
        statuses: list[str] = []
        b = 0
        while b < len(costs) and self.phase in ("lead", "race", "check"):
            name = self.names[0] if self.phase == "lead" else self._next()
            kernel = _serial(self.kernel(name))
            kwargs = ({"start": start[b : b + 1]} if start is not None
                      and getattr(kernel, "takes_start", False) else {})
            with recording() as log:
                wall, began = self.clock(), self.sample_clock()
                y = kernel(costs[b : b + 1], **kwargs)
                seconds, wall = self.sample_clock() - began, self.clock() - wall
            self.solved[name] += 1
            out[b] = np.asarray(y, dtype=np.float64).reshape(-1)
            statuses.extend(row_statuses(log, 1))
            b += 1
            if self.phase == "lead":
                self.lead_seconds += wall
                if self.lead_seconds >= START_SECONDS:
                    self._start_race()
                continue
            if self.phase == "check" and name != self.winner:
                self._check_wall += wall
            self._observe(name, seconds)
        if b < len(costs):
            with recording() as log:
                y, seconds = self._whole(self.current_backend, costs[b:],
                                         None if start is None else start[b:], {})
            out[b:] = np.asarray(y, dtype=np.float64).reshape(len(costs) - b, -1)
            statuses.extend(row_statuses(log, len(costs) - b))
            self.since_check += seconds
        record_all(statuses)
        return out

    def _next(self) -> str:
        """The candidate that solves the next raced row: the least race time spent, then
        the fewest solves, then ranking."""
        if self.phase == "check":
            pool = [n for n in self._check_samples if len(self._check_samples[n]) < RECHECK_SOLVES]
            return min(pool, key=lambda n: len(self._check_samples[n]))
        # equal time, not equal rows: a solver five times slower gets a fifth of the rows,
        # so what a slow candidate costs the race stays near what the fastest spends
        return min(self.alive, key=lambda n: (self._spent.get(n, 0.0), len(self.samples[n]),
                                              self.names.index(n)))

    def _observe(self, name: str, seconds: float) -> None:
        if self.phase == "check":
            self._check_samples[name].append(seconds)
            if all(len(v) >= RECHECK_SOLVES for v in self._check_samples.values()):
                self._end_check()
            return
        if name not in self._warm and not (name == self.names[0] and self.lead_seconds > 0):
            self._warm.add(name)  # the first solve pays one-off set-up: not timed
            return
        self._spent[name] = self._spent.get(name, 0.0) + seconds
        self._warm.add(name)
        self.samples[name].append(seconds)
        self._decide()

    def _decide(self) -> None:
        counts = {n: len(self.samples[n]) for n in self.alive}
        if min(counts.values()) < MIN_RATIO_SOLVES:
            return
        stats = {n: _mean_se(self.samples[n]) for n in self.alive}
        best = min(stats, key=lambda n: stats[n][0])
        for name in list(self.alive):
            if name == best:
                continue
            gap = stats[name][0] - stats[best][0]
            enough = min(counts[name], counts[best]) >= MIN_SOLVES
            if ((enough and gap > Z * math.hypot(stats[name][1], stats[best][1]))
                    or stats[name][0] > DROP_RATIO * stats[best][0]):
                self.alive.remove(name)
                self.dropped[name] = f"dropped ({gap / stats[best][0]:+.0%} per solve)"
        left = [counts[n] for n in self.alive]
        if (len(self.alive) == 1 or min(left) >= MAX_SOLVES
                or sum(left) >= 3 * MAX_SOLVES * len(left)):
            self.means.update({n: statistics.fmean(self.samples[n]) for n in self._racing
                               if self.samples[n]})
            if self.winner is None:
                self._win(best, "won")
            else:  # a re-race that a check asked for
                self._win(best, "kept the lead in" if best == self.winner else
                          f"took over from {self.winner} in")

    def _win(self, name: str, how: str) -> None:
        changed = name != self.winner
        self.winner, self.phase, self.since_check = name, "won", 0.0
        if changed:
            self._winner_time, self._winner_rows = 0.0, 0
        logger.log(logging.INFO if changed else logging.DEBUG,
                   "backend 'auto' for %s: %s %s the race: %s mean per solve (%s timed "
                   "solves)", self.label, name, how, self._times(),
                   ", ".join(f"{n} {len(self.samples[n])}" for n in self.names))

    def _check_cost(self) -> float:
        """What a re-check costs: the wall time of the other candidates' rows in the
        last one, or before any, their race means."""
        if self._last_check_wall is not None:
            return self._last_check_wall
        others = [self.means.get(n, self.check_means.get(n, 0.0)) for n in self.names
                  if n != self.winner and n not in self._unbuilt]
        return RECHECK_SOLVES * sum(others)

    def _begin_check(self) -> None:
        self.phase = "check"
        self._check_wall = 0.0
        self._check_samples = {name: [] for name in self.names if name not in self._unbuilt}

    def _end_check(self) -> None:
        self.checks += 1
        self._last_check_wall = self._check_wall
        means = {n: statistics.fmean(v) for n, v in self._check_samples.items()}
        #: The last check's means (a hint on a few rows; `means` stays the races').
        self.check_means = means
        # the winner's pace over every row since the last check, not its few check rows
        pace = (self._winner_time / self._winner_rows if self._winner_rows
                else means[self.winner])
        self._winner_time, self._winner_rows = 0.0, 0
        challengers = [n for n in means if n != self.winner
                       and means[n] < SWITCH_MARGIN * pace]
        if challengers:
            # a few rows are a hint, not a verdict: the winner and the challengers race
            # again from fresh samples, under the race's rule
            self.alive = [self.winner, *challengers]
            self._racing, self._spent = list(self.alive), {}
            for name in self.alive:
                self.samples[name] = []
                self.dropped.pop(name, None)
            self.phase = "race"
            logger.debug("backend 'auto' for %s: re-check %d: %s looked faster than %s; "
                         "racing them again", self.label, self.checks, challengers, self.winner)
            return
        self.phase, self.since_check = "won", 0.0
        logger.debug("backend 'auto' for %s: re-check %d keeps %s (%s)", self.label,
                     self.checks, self.winner, self._times())
