"""``backend="race"``: the capable exact backends race on the run's own costs.

Which exact solver is fastest depends on the costs it is given, and in training
those change (SCIP can be the faster on Identity's projected knapsack costs and
Gurobi on SPO+'s shifted ones). So ``backend="race"`` takes the first
`MAX_CANDIDATES` of ``"auto"``'s ranking and, like cuDNN's ``benchmark`` mode,
times them on the instances the caller asks for anyway. ``"auto"`` itself stays a
fixed, deterministic choice.

1. **Race on a budget.** Instances go to one candidate at a time, so every instance is
   solved once, by one of them: racing costs no extra solve. An instance goes to the
   current best (lowest mean of `MIN_SOLVES` timed solves) unless another
   candidate can afford it: the excess charged so far (its time minus the best's
   mean) plus its estimated excess must stay within `EPSILON` of the run's solve
   time. Untried candidates are priced at `UNTRIED_RATIO` times the best's mean
   (at least the first model's build), rivals at `PRICE_Z` standard errors below
   their mean; a rival takes its instances in bursts of up to `BURST`. Each rival instance
   runs under a time limit of the budget's room; an instance stopped there is solved
   by the best, and the stopped time is charged in full.
2. **Winner.** A candidate drops out when its trimmed mean is `DROP_RATIO` times
   the best's or trails it by `Z` standard errors, both after `MIN_SOLVES`
   timed solves; when one is left, or all have `MAX_SOLVES`, the best wins. Solves
   are timed in process CPU time, so other processes' load does not decide.
3. **Re-check.** The winner then solves whole batches. Costs drift during
   training, so every candidate solves `RECHECK_SOLVES` instances again once the
   winner has spent ``1 / RECHECK_BUDGET`` times the last check's cost; a
   candidate under `SWITCH_MARGIN` times the winner's pace races it again.

Every answer comes from one complete, optimal solve, whoever makes it; two exact
solvers may return different optima of a cost with ties, which is why racing is
opt-in. Backends with an algorithm of their own for the problem (Dijkstra, the
DAG, Held-Karp, LAPJV, top-k, ranking, enumeration) never race. The rules and
their bound are in docs/backends.md; benchmarks/auto_race.py measures them.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import SolverError
from .outcome import OPTIMAL, Outcome, Solved, statuses_of
from .solver import Kernel, ReportingKernel, as_kernel

logger = logging.getLogger(__name__)

#: At most this many backends race: the first of ``"auto"``'s ranking and the one behind
#: it. The third (HiGHS for knapsacks, SCIP for the TSP) was the slowest on every MIP
#: loop, and its first instance alone is a large share of a short run (set by
#: benchmarks/auto_race.py).
MAX_CANDIDATES = 2
#: The share of the run's solve time that instances on slower candidates may cost beyond the
#: best's time for them.
EPSILON = 0.05
#: An untried candidate is priced at this many times the best's mean per solve: it is
#: tried once the run has solved for ``(UNTRIED_RATIO - 1) / EPSILON`` of the best's
#: solves (sooner on credit that a faster candidate earned).
UNTRIED_RATIO = 1.25
#: Timed solves each candidate makes before one drops out (by either rule): a solver's
#: first solves run slower than its later ones, and fewer of them dropped the faster
#: one (set by benchmarks/auto_race.py).
MIN_SOLVES = 5
#: Instances at most that a candidate other than the best takes in one call once its set-up
#: instance has run (each within the budget at its estimate), timed as one call: a rival's
#: single instances between the best's calls start cold, instances one after another do not (set
#: by benchmarks/auto_race.py).
BURST = 4
#: Timed solves after which the lowest mean wins, however close the others are.
MAX_SOLVES = 30
#: Standard errors of the difference of means by which a candidate must trail to drop out.
Z = 3.0
#: ... or the ratio of means past which it drops out whatever the spread: a solver twice
#: as slow costs more in the race than a rare wrong drop, which a re-check undoes.
DROP_RATIO = 2.0
#: A candidate other than the best is priced (not charged) at this many standard errors
#: below its mean: with few instances, one heavy instance among them otherwise prices a faster
#: rival far above its cost (set by benchmarks/auto_race.py).
PRICE_Z = 1.0
#: Instances each candidate solves in a re-check.
RECHECK_SOLVES = 4
#: The largest share of the winner's solve time that a re-check may cost.
RECHECK_BUDGET = 0.02
#: A re-check hands over only to a candidate at most this fraction of the winner's time.
SWITCH_MARGIN = 0.8


def _put(out: np.ndarray, statuses: list[str], span: slice, y: Solved) -> None:
    """``y``'s solutions into ``out[span]`` and their statuses onto ``statuses`` (one per
    instance: the instances are solved in order)."""
    out[span] = np.asarray(y.values, dtype=np.float64).reshape(out[span].shape)
    statuses.extend(statuses_of(y))


class Timings:
    """A candidate's timed solves in one race, as running moments (Welford's), so the
    mean and standard error read per instance cost nothing however many instances it solved."""

    def __init__(self) -> None:
        self.count, self.mean, self._m2, self.largest = 0, 0.0, 0.0, 0.0

    def __len__(self) -> int:
        return self.count

    def add(self, seconds: float, count: int = 1) -> None:
        """``count`` solves of ``seconds`` each (a call's instances at the call's mean)."""
        before, self.count = self.count, self.count + count
        self.largest = max(self.largest, seconds)
        delta = seconds - self.mean
        self.mean += delta * count / self.count
        self._m2 += delta * delta * before * count / self.count

    @property
    def trimmed(self) -> float:
        """The mean without the largest solve (the mean below two solves)."""
        if self.count < 2:
            return self.mean
        return (self.mean * self.count - self.largest) / (self.count - 1)

    @property
    def se(self) -> float:
        """The standard error of `mean` (infinite below two solves)."""
        if self.count < 2:
            return math.inf
        return math.sqrt(self._m2 / (self.count - 1) / self.count)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


class RacingKernel(ReportingKernel):
    """A numpy kernel that spreads instances over candidate kernels until one is the fastest.

    ``first`` is the first-ranked backend's ``(name, kernel)``; ``rivals`` the
    ``(name, build)`` pairs of the others in ``"auto"``'s order, each ``build()``
    returning its kernel, called when the rival is first given an instance (a run too
    short to afford one builds no other model). A kernel may be an executor's: its
    ``local`` model solves the raced instances in the caller, and its workers start only
    if it wins. ``first_reason`` says why the first-ranked backend leads; ``clock``
    times the solves (a test passes a fake one).
    """

    array_api = "numpy"

    def __init__(self, first: tuple[str, Any], rivals: list[tuple[str, Callable[[], Any]]],
                 label: str, first_reason: str = "",
                 clock: Callable[[], float] = time.perf_counter,
                 sample_clock: Callable[[], float] | None = None,
                 first_setup: float = 0.0) -> None:
        if not rivals:
            raise ValueError("a race needs at least one rival to the first-ranked backend")
        self.names = [first[0], *(name for name, _ in rivals)]
        self.kernels: dict[str, Kernel] = {first[0]: as_kernel(first[1])}
        self._builders = dict(rivals)
        self.label = label
        self.first_reason = first_reason
        self.clock = clock
        self.sample_clock = sample_clock or (time.process_time if clock is time.perf_counter
                                             else clock)
        self._lock = threading.RLock()
        #: "race", "won" or "check".
        self.phase = "race"
        #: The share of the solve time the race may spend beyond the best (`EPSILON`;
        #: infinite after `start`: every candidate in turn).
        self.budget = EPSILON
        #: Seconds the first-ranked backend's model took to build: the least an unbuilt
        #: rival is priced at, so a run too short to pay for a second model builds none.
        self.first_setup = first_setup
        #: The run's solve time so far, and the excess of the instances raced on candidates
        #: other than the best over the best's mean (the budget's two sides).
        self.spent, self.excess = 0.0, 0.0
        self.samples: dict[str, Timings] = {name: Timings() for name in self.names}
        #: A candidate's time per solve before it has timed solves in this race: its
        #: first (set-up) instance's, or in a re-race its check mean (the winner: its pace).
        self._guess: dict[str, float] = {}
        #: Instances each candidate solved in the current race, its warm-up instance included.
        self._instances: dict[str, int] = dict.fromkeys(self.names, 0)
        self._warm: set[str] = set()
        self.alive = list(self.names)
        self._racing: list[str] = list(self.names)
        #: The winner's solve time (sample clock) and instances since the last check (or its
        #: win), in whole batches: its pace, which a check's challengers must beat.
        self._winner_time, self._winner_instances = 0.0, 0
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
        #: Instances the race was given, and instances each candidate solved (whole batches too):
        #: every instance is solved once, so the counts add up to `instances_in`.
        self.instances_in = 0
        self.solved: dict[str, int] = dict.fromkeys(self.names, 0)
        #: Instances a candidate began in the race and was stopped on at its time limit (then
        #: solved by the best, which `with_statuses` counts), and the limit it ran past.
        self.stopped: dict[str, int] = dict.fromkeys(self.names, 0)
        self._stop_limit: dict[str, float] = {}
        #: Candidates stopped at the last check's limit (`_check_instance`), and the winner's
        #: pace that check was held against.
        self.check_stopped: set[str] = set()
        self._check_pace = 0.0
        #: Wall and sample-clock seconds of the solves timed on both (`_wall`).
        self._wall_time, self._sample_time = 0.0, 0.0

    # -- what the solver and the layer read ---------------------------------------------

    @property
    def takes_start(self) -> bool:
        """Whether a built candidate takes a MIP start (each is given one only if it does)."""
        return any(k.serial().takes_start for k in self.kernels.values())

    @property
    def takes_rows(self) -> bool:
        """Whether the current backend takes per-call rows: calls with rows go to it whole."""
        return self.kernel(self.current_backend).takes_rows

    @property
    def current_backend(self) -> str:
        """The backend that solves whole batches now: the leader, then the winner."""
        return self.winner or self.names[0]

    @property
    def backend_reason(self) -> str:
        """Why `current_backend` solves, in one sentence, with the race's times once run."""
        if self.winner is None:
            return (f"{self.names[0]} leads ({self.first_reason or 'first by ranking'}); "
                    f"'race' races {', '.join(self.names)} on this run's own instances, the "
                    f"others while their extra time stays within {EPSILON:.0%} of the "
                    f"solve time ({self.spent:.2g} s so far){self._stops()}")
        if self.adopted and not self.samples[self.winner]:
            return (f"{self.winner} won the race against "
                    f"{', '.join(n for n in self.names if n != self.winner)} on the costs of the "
                    f"layer this one was copied from ({self._times()} per solve)")
        last = ""
        if self.checks:
            last = (f"; re-checked {self.checks} times, the last on {RECHECK_SOLVES} "
                    f"instances each: {self._times(self.check_means)}")
            if self.check_stopped:
                last += (f" ({', '.join(sorted(self.check_stopped))} at least: stopped once "
                         f"it could no longer come in under {SWITCH_MARGIN:.0%} of "
                         f"{self.winner}'s pace, {_ms(self._check_pace)})")
        return (f"{self.winner} won the race on this run's own costs: {self._times()} mean per "
                f"solve{self._stops()}{last}")

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
            elif self.phase == "race" and not self._instances[name]:
                verdict = "waiting"
            else:
                verdict = "racing" if name in self.alive and self.phase == "race" else "lost"
            if self.stopped[name]:
                verdict += f" ({self.stopped[name]} stopped at the race's limit)"
            mean = times.mean if times else self.means.get(name)
            rows.append((name, len(times), mean, verdict))
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

    def with_statuses(self, costs: np.ndarray, start: np.ndarray | None = None,
                      **per_call: Any) -> Solved:
        per_call = {key: value for key, value in per_call.items() if value is not None}
        if per_call or len(costs) == 0:
            # per-call rows (A, b) go to the current backend whole: not raced
            with self._lock:
                self.instances_in += len(costs)
            return self._whole(self.current_backend, costs, start, per_call)[0]
        with self._lock:
            self.instances_in += len(costs)
            if self.phase == "won":
                began = self.sample_clock()
                y, seconds = self._whole(self.current_backend, costs, start, {})
                self._winner_time += self.sample_clock() - began
                self._clocked(seconds, self.sample_clock() - began)
                self._winner_instances += len(costs)
                self.since_check += seconds
                self.spent += seconds
                if self.since_check * RECHECK_BUDGET >= self._check_cost():
                    self._begin_check()
                return y
            return self._one_by_one(costs, start)

    def kernel(self, name: str) -> Any:
        """Candidate ``name``'s kernel, built on first use."""
        kernel = self.kernels.get(name)
        if kernel is None:
            kernel = self.kernels[name] = as_kernel(self._builders.pop(name)())
        return kernel

    def close(self) -> None:
        """Close every candidate built so far (their executors' workers)."""
        for kernel in self.kernels.values():
            kernel.close()

    def start(self) -> None:
        """Race without the budget from the next instance: every candidate in turn
        (``combolayer bench --race``, which shows the race on a few instances)."""
        with self._lock:
            self.budget = math.inf

    def _whole(self, name: str, costs: np.ndarray, start: np.ndarray | None,
               per_call: dict) -> tuple[Solved, float]:
        kernel = self.kernel(name)
        kwargs = dict(per_call)
        if start is not None and kernel.takes_start:
            kwargs["start"] = start
        began = self.clock()
        y = kernel.with_statuses(costs, **kwargs)
        self.solved[name] += len(costs)
        return y, self.clock() - began

    def _one_by_one(self, costs: np.ndarray, start: np.ndarray | None) -> Solved:
        """Race or re-check: instances to one candidate at a time, in the caller (executor
        workers start for the winner only), timed: one instance, or in the race the best's
        instances until the other can afford one, in one call. The race can turn into a win
        mid-batch, and the rest of the batch then goes to the winner in one call.
        Exactly one status per instance."""
        out = np.empty_like(costs)
        statuses: list[str] = []
        b = 0
        while b < len(costs) and self.phase in ("race", "check"):
            # a rival's first instance also pays for building its model: spent, but not part
            # of its time per solve
            wall, began = self.clock(), self.sample_clock()
            name = self._next()
            built = self.sample_clock() - began
            if name is None:  # a rival failed to build and sits out
                continue
            best = self._best() if self.phase == "race" else name
            if self.phase != "race":
                count = 1
            elif name == best:
                count = self._run(best, len(costs) - b)
            else:
                count = self._burst(name, best, len(costs) - b)
            span = slice(b, b + count)
            kernel = self.kernels[name].serial()
            if self._limited(name, best, kernel):
                if self.phase == "check":
                    self._check_instance(name, costs, start, b, built, out, statuses)
                    b += 1
                else:
                    b += self._trial(name, best, costs, start, b, count, built, out, statuses)
                continue
            y = kernel.with_statuses(costs[span], **self._start_for(kernel, start, span))
            seconds, wall = self.sample_clock() - began, self.clock() - wall
            solving = seconds - built
            self._clocked(wall, seconds)
            self.solved[name] += count
            _put(out, statuses, span, y)
            b += count
            self.spent += seconds
            if self.phase == "check":
                if name != self.winner:
                    self._check_wall += wall
            elif name != best and self._estimate(best) is not None:
                # a first (set-up) instance is charged in full, its model's build included
                self.excess += seconds - count * self._estimate(best)
            self._observe(name, solving, count)
        if b < len(costs):
            y, seconds = self._whole(self.current_backend, costs[b:],
                                     None if start is None else start[b:], {})
            _put(out, statuses, slice(b, None), y)
            self.since_check += seconds
            self.spent += seconds
        if all(status == OPTIMAL for status in statuses):
            return Solved(out)
        return Solved(out, tuple(statuses))

    def _limited(self, name: str, best: str, kernel: Any) -> bool:
        """Whether ``name``'s instances run under a time limit, its kernel stopping in time
        (`RowKernel.time_limit`: HiGHS, SCIP, Gurobi): in a check, a candidate other
        than the winner (`_check_instance`); in the race on its budget, one other than the
        best (`_trial`)."""
        if not kernel.stops_in_time:
            return False
        if self.phase == "check":
            return name != self.winner
        return (name != best and self.budget != math.inf
                and self._estimate(best) is not None)

    def _trial(self, name: str, best: str, costs: np.ndarray, start: np.ndarray | None,
               b: int, count: int, built: float, out: np.ndarray,
               statuses: list[str]) -> int:
        """Instances ``b .. b + count`` on ``name``, a candidate other than the best, one at a
        time (back to back: still a burst), each under a time limit of the best's mean
        plus the budget's room left, at least the best's mean (`DROP_RATIO` times it for
        a rival estimated faster than the best). An instance stopped at its limit is not its
        answer: the best solves it, the stopped time is charged in full, the instance counts
        once, for ``name`` only, at the larger of its stopped time and the best's, and
        the burst ends. The instances done (the stopped one included)."""
        kernel = self.kernels[name].serial()
        best_mean, room = self._estimate(best), self._room()
        # at least the best's mean (an instance within it adds no excess); DROP_RATIO times it
        # for a rival estimated faster, whose bursts run on credit: stopped at the best's
        # mean, a faster rival's instances lose their slow tail and it looks slower than it is
        least = (DROP_RATIO if self._extra(name, best) < 0 else 1.0) * best_mean
        # the solves' time (the candidate's sample), and with setting its limits (spent)
        solving, spent, cold = 0.0, built, 0.0
        for i in range(count):
            span = slice(b + i, b + i + 1)
            limit = max(best_mean + room - (spent - built - i * best_mean), least)
            setting = self.sample_clock()
            y, status, took = self._limited_instance(kernel, limit, costs, start, span)
            solving += took
            if i == 0:
                cold = took
            spent += self.sample_clock() - setting
            if status[0] != Outcome.TIME_LIMIT.value:
                _put(out, statuses, span, y)
                self.solved[name] += 1
                continue
            self.spent += spent
            self.excess += spent - i * best_mean  # the stopped instance in full
            self.stopped[name] += 1
            self._stop_limit[name] = limit
            logger.debug("backend 'auto' for %s: %s", self.label, self._stop_reason(name))
            seconds = self._resolve(best, costs, start, span, out, statuses)
            # the instance counts at least as slow as the best's solve of it (the stopped time
            # alone, a lower bound, made TSP 100's SCIP look faster than HiGHS, whose own
            # heavy instances ran to the end; the stopped time plus the best's held a faster
            # SCIP off on the 2 x 100 knapsack instances heavy for both); once (counted for
            # every instance of its burst, one such instance dropped a rival twice as fast), and
            # not as a solve of the best's: instances stopped on a rival are chosen for being
            # slow, the best's own instances are not
            if i:  # the burst's instances before it, at their own times
                self._observe_burst(name, solving - took, cold, i)
            self._observe(name, max(took, seconds))
            return i + 1
        self.spent += spent
        self.excess += spent - count * best_mean
        self._observe_burst(name, solving, cold, count)
        return count

    def _limited_instance(self, kernel: Any, limit: float, costs: np.ndarray,
                          start: np.ndarray | None, span: slice
                     ) -> tuple[Solved | None, tuple[str, ...], float]:
        """Instance ``span`` on ``kernel`` under a time limit of ``limit`` seconds of the sample
        clock (`_wall`: the solvers' limits are wall time): its answer (None when stopped
        without one), its status and its time on the sample clock."""
        y = None
        with kernel.time_limit(self._wall(limit)):
            began = self.sample_clock()
            try:
                y = kernel.with_statuses(costs[span], **self._start_for(kernel, start, span))
            except SolverError as error:  # stopped at the limit without a solution
                if getattr(error, "status", None) != Outcome.TIME_LIMIT.value:
                    raise
            took = self.sample_clock() - began
        return y, (Outcome.TIME_LIMIT.value,) if y is None else statuses_of(y), took

    def _resolve(self, name: str, costs: np.ndarray, start: np.ndarray | None, span: slice,
                 out: np.ndarray, statuses: list[str]) -> float:
        """Instance ``span``, stopped at another candidate's limit, solved by ``name`` to the
        end (every answer comes from one complete, optimal solve); its seconds."""
        kernel = self.kernels[name].serial()
        began = self.sample_clock()
        y = kernel.with_statuses(costs[span], **self._start_for(kernel, start, span))
        seconds = self.sample_clock() - began
        _put(out, statuses, span, y)
        self.solved[name] += 1
        self.spent += seconds
        return seconds

    def _check_instance(self, name: str, costs: np.ndarray, start: np.ndarray | None, b: int,
                   built: float, out: np.ndarray, statuses: list[str]) -> None:
        """Instance ``b`` of a re-check on ``name``, a candidate other than the winner, under
        a time limit: what it may still spend before its check mean can no longer come
        in under `SWITCH_MARGIN` times the winner's pace (no instance past that changes the
        check's verdict; unlimited, a slow rival's cold check instances cost many times what
        the check is budgeted at). Stopped there, the winner solves the instance and
        ``name``'s check ends (`check_stopped`)."""
        wall = self.clock()
        allowed = (RECHECK_SOLVES * SWITCH_MARGIN * self._check_pace
                   - math.fsum(self._check_samples[name]))
        y, status, took = self._limited_instance(self.kernels[name].serial(), allowed, costs,
                                            start, slice(b, b + 1))
        self.spent += built + took
        self._check_wall += self.clock() - wall
        if status[0] != Outcome.TIME_LIMIT.value:
            _put(out, statuses, slice(b, b + 1), y)
            self.solved[name] += 1
            self._observe(name, took)
            return
        self._check_samples[name].append(took)
        self.check_stopped.add(name)
        self._resolve(self.winner, costs, start, slice(b, b + 1), out, statuses)
        if self._check_done():
            self._end_check()

    def _clocked(self, wall: float, sample: float) -> None:
        """Solves that took ``wall`` seconds of wall time and ``sample`` of the sample clock."""
        self._wall_time += wall
        self._sample_time += sample

    def _wall(self, seconds: float) -> float:
        """``seconds`` of the sample clock (CPU time) as wall time, the solvers' limits':
        times the run's ratio of wall to sample time so far, at least 1 (1 on an idle
        machine; more when other processes share the core, where a limit in CPU seconds
        set as wall time would stop an instance that could still come in)."""
        if self._sample_time <= 0:
            return seconds
        return seconds * max(1.0, self._wall_time / self._sample_time)

    def _observe_burst(self, name: str, seconds: float, cold: float, count: int) -> None:
        """A burst of ``count`` instances on ``name`` that took ``seconds``: its instances count at
        the mean of those after the first (``cold`` seconds, cold after the best's call:
        timed with it, a rival's bursts read slower than they run once warm, and the
        winner solves whole batches). Left out, the first instance's sample delays a faster
        rival's timed solves (both measured by benchmarks/auto_race.py)."""
        warm = (seconds - cold) / (count - 1) if count > 1 else seconds
        self._observe(name, warm * count, count)

    @staticmethod
    def _start_for(kernel: Any, start: np.ndarray | None, span: slice) -> dict:
        """The keyword giving ``kernel`` its MIP start for ``span``, if it takes one."""
        return ({"start": start[span]} if start is not None
                and kernel.takes_start else {})

    def _stop_reason(self, name: str) -> str:
        count = self.stopped[name]
        return (f"{name}: {count} instance{'s' * (count != 1)} ran past the race's room (the "
                f"last at {self._stop_limit[name]:.2g} s): stopped, and solved by the best")

    def _estimate(self, name: str) -> float | None:
        """``name``'s seconds per solve in this race: its timed mean, else its guess."""
        times = self.samples[name]
        return times.mean if times else self._guess.get(name)

    def _best(self) -> str:
        """Of the candidates with `MIN_SOLVES` timed solves, the one with the lowest mean
        (then ranking); before any has them, the winner or the first-ranked backend. A
        candidate is no sooner the best (its instances charged nothing) than it could drop
        out: one cheap instance of a heavy-tailed problem would make a rival twice as slow the
        best, and its next instances would go uncharged."""
        known = [n for n in self.alive if len(self.samples[n]) >= MIN_SOLVES]
        if not known:
            return self.winner if self.winner in self.alive else self.alive[0]
        return min(known, key=lambda n: (self.samples[n].mean, self.names.index(n)))

    def _extra(self, name: str, best: str) -> float:
        """What an instance on ``name`` is estimated to cost beyond the best's mean (the best
        has an estimate): its timed mean's excess, or before it has one, the price of
        an untried candidate (a first solve pays set-up and is slower than later
        ones), and while its model is not built, at least what
        the first-ranked backend's build took; less once its set-up instance (its guess) ran
        below that: a set-up instance overstates a solve, never understates it."""
        best_mean, times = self._estimate(best), self.samples[name]
        if not times:
            setup = self.first_setup if name not in self.kernels else 0.0
            price = max((UNTRIED_RATIO - 1) * best_mean, setup)
            guess = self._guess.get(name)
            return price if guess is None else min(price, guess - best_mean)
        # optimism under uncertainty: priced at `PRICE_Z` standard errors below its mean
        # (one solve: at most the untried price), never below a free instance; the budget
        # still charges what its instances take
        if len(times) < 2:
            return min(times.mean - best_mean, (UNTRIED_RATIO - 1) * best_mean)
        return max(times.mean - PRICE_Z * times.se, 0.0) - best_mean

    def _affordable(self, name: str, best: str) -> bool:
        """Whether an instance on ``name`` keeps the race's excess within the budget."""
        if self.budget == math.inf:
            return True
        if self._estimate(best) is None:
            return False
        return self._wanted(name) * self._extra(name, best) <= self._room()

    def _room(self) -> float:
        """The excess the budget still allows: `EPSILON` of the run's solve time so far,
        less the excess already charged (negative once an instance overshot it)."""
        return self.budget * self.spent - self.excess

    def _wanted(self, name: str) -> int:
        """Instances a candidate other than the best waits to afford: its set-up instance alone,
        then a burst (`BURST`), so that its instances after that run one after another."""
        return BURST if name in self._warm else 1

    def _run(self, best: str, left: int) -> int:
        """How many instances the best takes in one call: those it solves, at its mean, before
        another candidate can afford an instance (at most ``left``; one until it is timed)."""
        if not self.samples[best] or self.budget == math.inf:
            return 1
        pace = self.budget * self.samples[best].mean
        short = (min(self._wanted(n) * self._extra(n, best) for n in self.alive if n != best)
                 - self._room())
        return max(1, min(left, math.ceil(short / pace))) if pace > 0 else 1

    def _burst(self, name: str, best: str, left: int) -> int:
        """How many instances a candidate other than the best takes in one call: its set-up
        instance alone, then up to `BURST` (at most ``left``), each instance kept within the
        budget at its estimated excess, as `_affordable` checks one (one instance a call
        without the budget: `start` shows every candidate in turn)."""
        if name not in self._warm or self.budget == math.inf or self._estimate(best) is None:
            return 1
        extra, room, count = self._extra(name, best), self._room(), 1
        while count < min(BURST, left) and (count + 1) * extra <= room:
            count += 1
        return count

    def _next(self) -> str | None:
        """The candidate that solves the next instance: in a check, the one with the fewest
        check instances; in the race, of the best and the others that can afford an instance, one
        estimated faster than the best first (it is cheaper, and needs `MIN_SOLVES` to
        become the best), then the one with the fewest instances in this race (then
        ranking). A rival whose model fails to build (a licence, memory) sits out."""
        if self.phase == "check":
            pool = [n for n in self._check_samples if n not in self.check_stopped
                    and len(self._check_samples[n]) < RECHECK_SOLVES]
            return min(pool, key=lambda n: len(self._check_samples[n]))
        best = self._best()
        pool = [n for n in self.alive if n == best or self._affordable(n, best)]
        known = self._estimate(best) is not None
        name = min(pool, key=lambda n: (n == best or not known or self._extra(n, best) >= 0,
                                        self._instances[n], self.names.index(n)))
        if self._built(name):
            return name
        self.alive.remove(name)
        if len(self.alive) == 1:
            self._win(self.alive[0], "is left alone in")
        return None

    def _built(self, name: str) -> bool:
        """Build ``name``'s model if it has none; one that fails to build (a licence,
        memory) sits out of every race and check from then on."""
        try:
            self.kernel(name)
        except Exception as error:
            self._unbuilt.add(name)
            self.dropped[name] = f"could not build its model: {type(error).__name__}"
            logger.info("backend 'auto' for %s: %s sits out of the race: %s: %s",
                        self.label, name, type(error).__name__, error)
            return False
        return True

    def _observe(self, name: str, seconds: float, count: int = 1) -> None:
        if self.phase == "won":  # a stopped instance's re-solve after it ended the race
            return
        if self.phase == "check":
            self._check_samples[name].append(seconds)
            if self._check_done():
                self._end_check()
            return
        self._instances[name] += count
        if name not in self._warm:
            self._warm.add(name)  # the first solve pays one-off set-up: not timed
            self._guess[name] = seconds
            return
        # the best's instances solved in one call count at the call's mean
        self.samples[name].add(seconds / count, count)
        self._decide()

    def _decide(self) -> None:
        best = self._best()
        counts = {n: len(self.samples[n]) for n in self.alive}
        if counts[best] >= MIN_SOLVES:
            best_mean, best_se = self.samples[best].mean, self.samples[best].se
            for name in [n for n in self.alive if n != best and counts[n] >= MIN_SOLVES]:
                mean, se = self.samples[name].mean, self.samples[name].se
                if (mean - best_mean > Z * math.hypot(se, best_se)
                        or self.samples[name].trimmed > DROP_RATIO * best_mean):
                    self.alive.remove(name)
                    self.dropped[name] = f"dropped ({mean / best_mean - 1:+.0%} per solve)"
        if len(self.alive) == 1 or min(counts[n] for n in self.alive) >= MAX_SOLVES:
            self.means.update({n: self._estimate(n) for n in self._racing
                               if self._estimate(n) is not None})
            if self.winner is None:
                self._win(best, "won")
            else:  # a re-race that a check asked for
                self._win(best, "kept the lead in" if best == self.winner else
                          f"took over from {self.winner} in")

    def _win(self, name: str, how: str) -> None:
        changed = name != self.winner
        self.winner, self.phase, self.since_check = name, "won", 0.0
        if changed:
            self._winner_time, self._winner_instances = 0.0, 0
        logger.log(logging.INFO if changed else logging.DEBUG,
                   "backend 'auto' for %s: %s %s the race: %s mean per solve (%s timed "
                   "solves)%s", self.label, name, how, self._times(),
                   ", ".join(f"{n} {len(self.samples[n])}" for n in self.names),
                   self._stops())

    def _stops(self) -> str:
        """The candidates stopped at their time limit in a race, as a clause ("" if none)."""
        return "".join(f"; {self._stop_reason(n)}" for n in self.names if self.stopped[n])

    def _check_cost(self) -> float:
        """What a re-check costs: the wall time of the other candidates' instances in the
        last one, or before any, their race means."""
        if self._last_check_wall is not None:
            return self._last_check_wall
        # a candidate stopped at its limit: at least the time it ran
        others = [self.means.get(n, self.check_means.get(n, self._stop_limit.get(n, 0.0)))
                  for n in self.names if n != self.winner and n not in self._unbuilt]
        return RECHECK_SOLVES * sum(others)

    def _check_done(self) -> bool:
        """Whether every candidate solved its check instances or was stopped at its limit."""
        return all(len(v) >= RECHECK_SOLVES or n in self.check_stopped
                   for n, v in self._check_samples.items())

    def _begin_check(self) -> None:
        self.phase = "check"
        self._check_wall = 0.0
        self.check_stopped = set()
        # the winner's pace over every instance since the last check, not its few check instances
        self._check_pace = (self._winner_time / self._winner_instances if self._winner_instances
                            else self.means.get(self.winner, 0.0))
        # a copy that kept its original's winner builds the others' models now
        self._check_samples = {name: [] for name in self.names
                               if name not in self._unbuilt and self._built(name)}

    def _end_check(self) -> None:
        self.checks += 1
        self._last_check_wall = self._check_wall
        # a candidate stopped at the check's limit: its time over all its check instances, a
        # lower bound of its mean (at least SWITCH_MARGIN times the pace)
        means = {n: math.fsum(v) / (RECHECK_SOLVES if n in self.check_stopped else len(v))
                 for n, v in self._check_samples.items()}
        #: The last check's means (a hint on a few instances; `means` stays the races').
        self.check_means = means
        pace = self._check_pace or means[self.winner]
        self._winner_time, self._winner_instances = 0.0, 0
        challengers = [n for n in means if n != self.winner and n not in self.check_stopped
                       and means[n] < SWITCH_MARGIN * pace]
        if challengers:
            # a few instances are a hint, not a verdict: the winner and the challengers race
            # again from fresh samples, under the budget, each starting from its check
            # mean (the winner from its pace)
            self.alive = [self.winner, *challengers]
            self._racing = list(self.alive)
            self._guess = {**{n: means[n] for n in challengers}, self.winner: pace}
            for name in self.alive:
                self.samples[name] = Timings()
                self._instances[name] = 0
                self._warm.add(name)
                self.dropped.pop(name, None)
            self.phase = "race"
            logger.debug("backend 'auto' for %s: re-check %d: %s looked faster than %s; "
                         "racing them again", self.label, self.checks, challengers, self.winner)
            return
        self.phase, self.since_check = "won", 0.0
        logger.debug("backend 'auto' for %s: re-check %d keeps %s (%s)", self.label,
                     self.checks, self.winner, self._times())
