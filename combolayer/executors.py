"""Parallel executors: threads, processes and Ray actors, each holding its own model.

``BackendConfig(executor=..., workers=n)`` means ``n`` workers. Every executor
returns a numpy `Kernel` that

- solves identical instances of a batch once (deduplication),
- returns the solutions in input order,
- starts its ``n`` workers at first use, in the background (pool or actors, then
  one model build each), while the caller keeps solving the batch's instances itself;
  the instances left go to the workers once they are ready, mid-call too, split
  evenly into chunks,
- turns a crashed worker, or one that runs past the ``time_limit`` budget of
  its chunk, into `SolverError`, and starts fresh workers on the next call,
- carries each instance's status (optimal, time limit, ...) and the warnings a
  worker process or actor raised back with its results, and hands them to the
  caller (`Solver` then warns or raises once per call).

An executor receives the backend class itself (never a name to look up), and
highspy and pyscipopt models cannot be pickled, so workers never receive a
model: each builds its own once (thread: while starting; process: in the pool
initializer; Ray: in the actor constructor) and keeps it across calls.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import queue
import re
import sys
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import torch

from .backends.config import BackendConfig, usable_cores
from .backends.outcome import Solved, joined
from .backends.rows import Rows
from .backends.solver import Kernel, ReportingKernel, as_kernel
from .errors import BackendUnavailable, InputError, SolverError, SpecError
from .specs.base import Spec

#: Chunks per worker: enough to balance uneven solves (TSP-50 solve times vary
#: widely; set by benchmarks/scale_out.py).
CHUNKS_PER_WORKER = 16
#: Instances the caller solves between looks at whether the workers are ready: few, so
#: that the instances left reach the workers soon after they are.
SLICE_INSTANCES = 4

logger = logging.getLogger(__name__)


#: What a worker is handed: ``(costs, start, rows)``, a ``(B, N)`` cost array, the
#: instances' MIP starts (``(B, N)``, for a kernel that `takes_start`) or None, and the
#: chunk's per-call rows (`Rows.subset`: only the entries its instances use) or None.
Chunk = tuple[np.ndarray, np.ndarray | None, Rows | None]


def _timed(kernel: Kernel, chunk: Chunk) -> tuple[Solved, float]:
    costs, start, rows = chunk
    given = {key: value for key, value in (("start", start), ("rows", rows))
             if value is not None}
    began = time.perf_counter()
    out = kernel.with_statuses(costs, **given)
    return (Solved(np.asarray(out.values, dtype=np.float64), out.statuses),
            time.perf_counter() - began)


#: What a worker sends back for a chunk: its solutions with their instances' statuses
#: (`Solved`), seconds, and the warnings it raised, as (category, message) pairs.
Result = tuple[Solved, float, list]


def _solve_recorded(kernel: Kernel, chunk: Chunk, catch: bool = False) -> Result:
    """Solve a chunk in a worker, keeping what the caller must hear. ``catch`` also
    keeps the warnings (processes and actors only: catching warnings is not thread-safe,
    and a worker thread's own warnings already reach the caller's process)."""
    if not catch:
        return (*_timed(kernel, chunk), [])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, seconds = _timed(kernel, chunk)
    return out, seconds, [(w.category, str(w.message)) for w in caught]


class ParallelKernel(ReportingKernel):
    """Dedupe, solve in the caller until the workers are ready, chunk, and reassemble
    in order.

    Subclasses provide ``_start()`` (make workers), ``_warm()`` (have each build its
    model), ``_map(chunks, deadline)`` (solve chunks, return ``[(solved, seconds,
    warnings), ...]`` in order, as `_solve_recorded` makes them) and
    ``_reset()`` (discard broken or hung workers).
    """

    array_api = "numpy"
    executor = "serial"

    def __init__(self, cls: type, spec: Spec, config: BackendConfig) -> None:
        self.cls = cls
        self.spec = spec
        # One solver thread per worker: workers x threads must not exceed the cores
        # (docs/measurements/overhead.md, "Threads under load").
        self.config = config.model_copy(update={"executor": "serial", "workers": 1, "threads": 1})
        self.config_workers = config.workers
        self.workers = self._resolve_workers(config.workers)
        start = time.perf_counter()
        # Compiled here too: spec errors surface at make_solver, and the caller solves
        # with it until the workers are ready.
        self.local = self._build()
        self.build_seconds = time.perf_counter() - start
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._starter: threading.Thread | None = None
        self._start_error: BaseException | None = None

    def _resolve_workers(self, workers: int | str) -> int:
        return usable_cores() if workers == "auto" else int(workers)

    def _build(self) -> Kernel:
        """A new model of the problem, for one worker (or the caller)."""
        return as_kernel(self.cls().compile(self.spec, self.config))

    @property
    def takes_rows(self) -> bool:
        """Whether the workers' kernels take per-call rows (chunks carry theirs)."""
        return self.local.takes_rows

    @property
    def takes_start(self) -> bool:
        """Whether the workers' kernels take MIP starts (chunks carry theirs): the same
        starts as a serial solve, so the same optimum among ties."""
        return self.local.takes_start

    def serial(self) -> Kernel:
        """The caller's own model, ``local``: it solves a race's instances, never the
        workers."""
        return self.local

    def with_statuses(self, costs: np.ndarray, start: np.ndarray | None = None,
                      rows: Rows | None = None) -> Solved:
        costs = np.ascontiguousarray(costs, dtype=np.float64)
        if len(costs) == 0:
            return Solved(np.empty_like(costs))
        # an instance repeats only with the same costs and the same per-call rows (equal
        # costs get equal starts: a solution pool's best under them)
        keyed = costs if rows is None else np.hstack(
            [costs, np.asarray(rows.index, dtype=np.float64)[:, None]])
        _, first, inverse = np.unique(keyed, axis=0, return_index=True, return_inverse=True)
        if start is not None and self.takes_start:
            start = np.asarray(start, dtype=np.float64).reshape(len(costs), -1)[first]
        else:
            start = None
        rows = None if rows is None else rows.subset(first)
        inverse = inverse.reshape(-1)
        with self._lock:  # one batch at a time per kernel
            solved = self._solve_unique(costs[first], start, rows)
        # each unique instance's status, once for every instance that repeats it
        statuses = (None if solved.statuses is None
                    else tuple(solved.statuses[i] for i in inverse.tolist()))
        return Solved(solved.values[inverse], statuses)

    def _solve_unique(self, costs: np.ndarray, start: np.ndarray | None = None,
                      rows: Rows | None = None) -> Solved:
        def chunk(begin: int, stop: int) -> Chunk:
            stop = min(stop, len(costs))
            return (costs[begin:stop], None if start is None else start[begin:stop],
                    None if rows is None else rows.subset(np.arange(begin, stop)))

        parts, done = [], 0
        while done < len(costs) and not self.ready():
            parts.append(_timed(self.local, chunk(done, done + SLICE_INSTANCES))[0])
            done += SLICE_INSTANCES
        if done < len(costs):
            bounds = np.linspace(done, len(costs),
                                 min(len(costs) - done, self.workers * CHUNKS_PER_WORKER) + 1)
            bounds = bounds.round().astype(int)
            parts.extend(self._map_safely([chunk(begin, stop) for begin, stop
                                           in zip(bounds[:-1], bounds[1:])]))
        return joined(parts)

    def ready(self, wait: float | None = 0.0) -> bool:
        """Whether the workers are ready, starting them in the background on first use;
        ``wait`` seconds (None: until they are) are waited for them. A failed start is
        raised here, once."""
        if not self._ready.is_set() and self._starter is None and self._start_error is None:
            # a process start is waited for at exit: a worker process spawned as its
            # parent exits prints a traceback from the half-built pipe it was handed
            self._starter = threading.Thread(target=self._start_and_warm,
                                             daemon=self.executor != "process",
                                             name=f"combolayer-{self.executor}-start")
            logger.info("%s: starting %d %s workers on %r in the background; the caller "
                        "solves until they are ready", self.spec.label, self.workers,
                        self.executor, self.cls.name)
            self._starter.start()
        starter = self._starter
        if wait != 0.0 and starter is not None:
            starter.join(wait)
        if self._start_error is not None:
            error, self._start_error = self._start_error, None
            raise error
        return self._ready.is_set()

    def _start_and_warm(self) -> None:
        began = time.perf_counter()
        try:
            self._start()
            self._warm()
        except BaseException as error:  # said now, and raised in the caller's next look
            if _exiting(error):  # the interpreter exits: there is no next call
                return
            warnings.warn(f"{error} (the instances are solved in the caller meanwhile; the "
                          "next call raises this)", RuntimeWarning, stacklevel=1)
            self._start_error = error
            self._reset_workers()
        else:
            self._ready.set()
            logger.info("%s: %d %s workers started on %r in %.2f s", self.spec.label,
                        self.workers, self.executor, self.cls.name,
                        time.perf_counter() - began)
        finally:
            self._starter = None

    def _deadline(self, chunks: list[Chunk]) -> float | None:
        """Seconds the whole map may take before workers count as hung: none where no
        time limit stops the backend's solves (`Backend.ignored_limits`), which a
        budget from one would cut short."""
        limit = self.config.time_limit
        if limit is None or self.cls.ignored_limits(self.config) is not None:
            return None
        rounds = math.ceil(len(chunks) / self.workers)
        instances = max(len(costs) for costs, _, _ in chunks)
        # Each solve may legitimately use its full time limit; allow a model
        # build per worker and generous slack for start-up on top.
        return 2.0 + 3.0 * self.build_seconds + 1.5 * limit * instances * rounds

    def _map_safely(self, chunks: list[Chunk]) -> list[Solved]:
        """The chunks' solutions, with the warnings the workers raised re-emitted here."""
        try:
            results = self._map(chunks, self._deadline(chunks))
        except _WorkerFailure as failure:
            self._reset_workers()
            raise SolverError(
                f"{self.executor} executor: {failure} while solving {self.spec.label} with "
                f"backend {self.cls.name!r}; the workers were restarted, retry the call"
            ) from failure.__cause__
        for _, _, caught in results:
            for category, message in caught:
                warnings.warn(message, category, stacklevel=3)
        return [out for out, _, _ in results]

    def _reset_workers(self) -> None:
        """Discard the workers; fresh ones start (in the background) on a later call."""
        self._ready.clear()
        self._reset()

    # -- provided by subclasses (the defaults do nothing) ------------------------------

    def _start(self) -> None:
        """Make the workers."""

    def _warm(self) -> None:
        """Have every worker build its model before the workers count as ready."""

    def _map(self, chunks, deadline):
        raise NotImplementedError

    def _reset(self) -> None:
        """Discard broken or hung workers."""

    def close(self) -> None:
        starter = self._starter
        if starter is not None:
            starter.join(timeout=60)
        self._reset_workers()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: modules may be gone
            pass


def _exiting(error: BaseException) -> bool:
    """Whether ``error`` stopped a background start because the interpreter is exiting
    (concurrent.futures refuses new work from then on)."""
    return sys.is_finalizing() or (isinstance(error, RuntimeError)
                                   and "after interpreter shutdown" in str(error))


class _WorkerFailure(Exception):
    """A worker crashed or hung (not an error of the problem itself)."""


# -- threads --------------------------------------------------------------------------


class ThreadKernel(ParallelKernel):
    """``workers`` threads, each with its own model; highspy's ``run()`` and
    pyscipopt's ``optimizeNogil()`` release the GIL, so solves overlap. Nothing to
    start or reset: a hung thread keeps its model, and `_kernel` builds new ones."""

    executor = "thread"

    def __init__(self, cls: type, spec: Spec, config: BackendConfig) -> None:
        super().__init__(cls, spec, config)
        self._idle: list[Kernel] = [self.local]

    def _warm(self) -> None:
        self._idle.extend(self._build() for _ in range(self.workers - len(self._idle)))

    def _kernel(self) -> Kernel:
        return self._idle.pop() if self._idle else self._build()

    def _map(self, chunks, deadline):
        """Without a deadline the caller solves chunks too, beside ``workers - 1``
        threads: one thread fewer to start per call, and no core left waiting. With
        one (a ``time_limit``), the caller only waits, so it can give up on a hung
        thread."""
        todo: queue.Queue = queue.Queue()
        for i, chunk in enumerate(chunks):
            todo.put((i, chunk))
        results: list = [None] * len(chunks)
        errors: list[BaseException] = []
        returned: list[Kernel] = []

        def work(kernel: Kernel) -> None:
            try:
                while not errors:
                    try:
                        i, chunk = todo.get_nowait()
                    except queue.Empty:
                        break
                    results[i] = _solve_recorded(kernel, chunk)
            except BaseException as error:  # re-raised in the caller
                errors.append(error)
            returned.append(kernel)

        n = min(self.workers, len(chunks))
        handed = [self._kernel() for _ in range(n)]
        caller = handed.pop() if deadline is None else None
        # Daemon threads: a hung solve must not block interpreter exit.
        threads = [threading.Thread(target=work, args=(kernel,), daemon=True)
                   for kernel in handed]
        for thread in threads:
            thread.start()
        end = None if deadline is None else time.monotonic() + deadline
        try:
            if caller is not None:
                work(caller)
            for thread in threads:
                thread.join(None if end is None else max(0.0, end - time.monotonic()))
        except BaseException:
            # Ctrl-C in the caller: no thread may go on solving with our models
            # after we return, so stop handing out chunks and wait for the ones
            # in flight (a second Ctrl-C abandons them).
            errors.append(KeyboardInterrupt())
            for thread in threads:
                thread.join()
            self._idle.extend(returned)
            raise
        # Kernels of finished threads are reused; a hung thread keeps its own.
        back = list(returned)
        self._idle.extend(back)
        if any(thread.is_alive() for thread in threads):
            errors.append(TimeoutError())  # stops the hung thread taking more chunks
            if not any(kernel is self.local for kernel in back):
                # The serial path must never share a model with a running thread.
                self.local = self._kernel()
            raise _WorkerFailure(f"a worker thread ran past the {deadline:.1f} s budget")
        if errors:
            raise errors[0]
        return results

    def close(self) -> None:
        self._idle.clear()


# -- processes ------------------------------------------------------------------------

_WORKER_KERNEL: Kernel | None = None
#: Why this pool worker could not build its model (``"Error: message"``), or None.
_WORKER_START_ERROR: str | None = None


def _init_process(cls: type, spec: Spec, config: BackendConfig) -> None:
    global _WORKER_KERNEL
    torch.set_num_threads(1)  # the pool supplies the parallelism, not torch
    _WORKER_KERNEL = as_kernel(cls().compile(spec, config))


def _init_pool_worker(cls: type, spec: Spec, config: BackendConfig) -> None:
    """The process pool's initializer. A model that fails to build is kept as a
    reason for `_started_worker` to report: an initializer that raises breaks the
    pool, and the caller would see BrokenProcessPool without the reason."""
    global _WORKER_START_ERROR
    try:
        _init_process(cls, spec, config)
    except Exception as error:  # raised in the caller, with the solver's context
        _WORKER_START_ERROR = f"{type(error).__name__}: {error}"


def _solve_in_process(chunk: Chunk) -> Result:
    return _solve_recorded(_WORKER_KERNEL, chunk, catch=True)


def _started_worker(pause: float) -> tuple[int, str | None]:
    """This worker's pid and why its model failed to build (None when it did not).
    The pause keeps this worker busy so that the next warm-up task starts (and
    builds its model in) another process."""
    time.sleep(pause)
    return os.getpid(), _WORKER_START_ERROR


def _start_method() -> str:
    """How worker processes start. fork would copy HiGHS's and torch's thread pools in
    a broken state; forkserver (Python 3.14's default) forks workers from a clean
    server; spawn where there is none. Both run the main module again in each."""
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def _process_context():
    method = _start_method()
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload(["combolayer.backends.registry"])
    return context


def _importing_main_in_a_worker() -> bool:
    """Whether this process is a worker that multiprocessing is still starting, by
    running the parent's main module again (forkserver and spawn do)."""
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


class ProcessKernel(ParallelKernel):
    """A pool of ``workers`` processes; each builds the model once in its initializer."""

    executor = "process"
    _pool: ProcessPoolExecutor | None = None

    def with_statuses(self, costs: np.ndarray, start: np.ndarray | None = None,
                      rows: Rows | None = None) -> Solved:
        if _importing_main_in_a_worker():
            # A script that solves at its top level, without `if __name__ ==
            # "__main__":`, solving again inside a worker being started: the worker
            # stops here, quietly (SystemExit prints no traceback), instead of running
            # the script and printing a traceback per worker; the parent says why.
            raise SystemExit(1)
        return super().with_statuses(costs, start, rows)

    def _start(self) -> None:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=_process_context(),
                initializer=_init_pool_worker,
                initargs=(self.cls, self.spec, self.config),
            )

    def _warm(self) -> None:
        """One task per worker: every process starts and builds its model now, not
        in the first call handed to the pool; a worker that could not raises."""
        futures = [self._pool.submit(_started_worker, 0.05) for _ in range(self.workers)]
        try:
            reasons = [future.result()[1] for future in futures]
        except BrokenProcessPool as error:
            raise SolverError(
                f"process executor: a worker process for {self.spec.label} (backend "
                f"{self.cls.name!r}) died while starting: {error} The usual cause: "
                f"workers start by {_start_method()!r}, which runs the main module "
                "again in each, so a script that solves or trains at its top level "
                "must do so under `if __name__ == \"__main__\":`") from error
        failed = [reason for reason in reasons if reason is not None]
        if failed:
            raise SolverError(
                f"process executor: {len(failed)} of the {self.workers} worker processes "
                f"for {self.spec.label} could not build the model (backend "
                f"{self.cls.name!r}): {failed[0]}")

    def _map(self, chunks, deadline):
        futures = []
        end = None if deadline is None else time.monotonic() + deadline
        results = []
        try:
            # inside the try: a pool whose worker died between calls refuses the submit
            futures = [self._pool.submit(_solve_in_process, chunk) for chunk in chunks]
            for future in futures:
                left = None if end is None else max(0.0, end - time.monotonic())
                results.append(future.result(timeout=left))
        except BrokenProcessPool as error:
            raise _WorkerFailure("a worker process crashed") from error
        except FutureTimeout as error:
            message = f"a worker process ran past the {deadline:.1f} s budget"
            raise _WorkerFailure(message) from error
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        return results

    def _reset(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        # A hung worker never returns: kill it rather than wait for it.
        for process in list(getattr(pool, "_processes", {}).values()):
            if process.is_alive():
                process.kill()
        pool.shutdown(wait=False, cancel_futures=True)


# -- Ray ------------------------------------------------------------------------------


class _Actor:
    """Holds one compiled model inside a Ray worker."""

    def __init__(self, cls: type, spec: Spec, config: BackendConfig) -> None:
        _init_process(cls, spec, config)

    def solve(self, chunk: Chunk) -> Result:
        return _solve_in_process(chunk)

    def node(self) -> str:
        """The id of the Ray node this actor runs on (its model is built by now)."""
        import ray

        return ray.get_runtime_context().get_node_id()


def _ray_reason(error: BaseException | None) -> str:
    """Why a Ray actor died, in one line: the exception its creation raised (the last
    ``SomeError: ...`` line of the remote traceback Ray carries), else Ray's own
    first line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Unavailable)\b", line)]
    if raised:
        return raised[-1]
    return lines[0] if lines else type(error).__name__


def _ray():
    try:
        import ray
    except ImportError as error:
        raise BackendUnavailable(
            "executor 'ray' needs the ray package (pip install 'combolayer[ray]'); "
            "executors that need nothing extra: serial, thread, process"
        ) from error
    return ray


class RayKernel(ParallelKernel):
    """``workers`` Ray actors, each holding a compiled model, spread over the nodes.

    Uses the cluster this process is connected to (``ray.init(address=...)``
    before the layer is built), else the one at ``options["ray_address"]`` or
    ``RAY_ADDRESS``, else starts a local one. ``options={"ray_num_cpus": ...}``
    sets the CPUs per actor; ``workers="auto"`` is the cluster's CPUs divided by
    it. The actors are placed with Ray's ``"SPREAD"`` strategy, one per node
    before a second on any. An actor that dies (its node lost) has its chunks
    solved again on the remaining actors, with a warning.
    """

    executor = "ray"

    def __init__(self, cls: type, spec: Spec, config: BackendConfig) -> None:
        _ray()
        self.address = config.options.get("ray_address") or os.environ.get("RAY_ADDRESS") or None
        self.cpus = float(config.options.get("ray_num_cpus", 1))
        if self.cpus <= 0:
            raise SpecError(f"options['ray_num_cpus'] must be a positive number of CPUs per "
                            f"actor, got {self.cpus!r}")
        super().__init__(cls, spec, config)
        self._actors: list = []

    def _resolve_workers(self, workers: int | str) -> int:
        if workers != "auto":
            return int(workers)
        ray = _ray()
        total = ray.cluster_resources().get("CPU", 0.0) if ray.is_initialized() else float(
            usable_cores())  # resolved again against the cluster when the actors start
        return max(1, int(total // self.cpus))

    def _connect(self):
        ray = _ray()
        if not ray.is_initialized():
            if self.address:
                ray.init(address=self.address, log_to_driver=False)
            else:
                ray.init(include_dashboard=False, log_to_driver=False)
        return ray

    def _start(self) -> None:
        if self._actors:
            return
        ray = self._connect()
        total = ray.cluster_resources().get("CPU", 0.0)
        if self.config_workers == "auto":
            self.workers = self._resolve_workers("auto")  # against the cluster now
        if self.workers * self.cpus > total:
            # Actors beyond the cluster's CPUs would stay pending forever.
            raise SolverError(
                f"executor 'ray' asks for workers={self.workers} actors x {self.cpus:g} CPUs, "
                f"but the Ray cluster has {total:g} CPUs: lower workers or "
                f"options['ray_num_cpus'], or add nodes"
            )
        remote = ray.remote(num_cpus=self.cpus, scheduling_strategy="SPREAD")(_Actor)
        self._actors = [remote.remote(self.cls, self.spec, self.config)
                        for _ in range(self.workers)]

    def _warm(self) -> None:
        """Wait for every actor's model; carry on without actors that died starting
        (a node lost meanwhile), and raise with Ray's reason when none is left."""
        ray = _ray()
        from ray.exceptions import RayActorError

        refs = [actor.node.remote() for actor in self._actors]
        live, nodes, reason = [], [], None
        for actor, ref in zip(self._actors, refs):
            try:
                nodes.append(ray.get(ref))
            except RayActorError as error:
                reason = error
            else:
                live.append(actor)
        if not live:
            raise SolverError(
                f"ray executor: none of the {len(refs)} Ray actors for {self.spec.label} "
                f"started (backend {self.cls.name!r}): {_ray_reason(reason)}") from reason
        if len(live) < len(refs):
            warnings.warn(
                f"ray executor: {len(refs) - len(live)} of {len(refs)} Ray actors died "
                f"starting (a lost node, or a killed worker): {_ray_reason(reason)}; "
                f"carrying on with {len(live)}", RuntimeWarning, stacklevel=2)
        self._actors, self.nodes = live, nodes

    def _map(self, chunks, deadline):
        """One chunk per actor at a time, the next to whichever actor is done first
        (solve times vary: a fixed round robin left one actor idle while the other
        finished its share). A chunk whose actor died is solved again on the others."""
        ray = _ray()
        from ray.exceptions import RayActorError, RayTaskError

        end = None if deadline is None else time.monotonic() + deadline
        results: list = [None] * len(chunks)
        todo = list(range(len(chunks)))[::-1]  # popped from the end: in order
        idle, running = list(self._actors), {}  # running: ref -> (chunk, actor)
        retried: set[int] = set()
        dead: list = []
        while todo or running:
            while todo and idle:
                i, actor = todo.pop(), idle.pop()
                running[actor.solve.remote(chunks[i])] = (i, actor)
            if not running:
                raise _WorkerFailure("every Ray actor died")
            left = None if end is None else max(0.0, end - time.monotonic())
            done, _ = ray.wait(list(running), num_returns=1, timeout=left)
            if not done:
                raise _WorkerFailure(f"a Ray actor ran past the {deadline:.1f} s budget")
            i, actor = running.pop(done[0])
            try:
                results[i] = ray.get(done[0])
            except RayActorError as error:
                if i in retried:  # the chunk itself kills its actors
                    raise _WorkerFailure("a Ray actor died") from error
                retried.add(i)
                todo.append(i)
                dead.append(actor)
                continue
            except RayTaskError as error:
                # The kernel raised inside the actor: re-raise the original error.
                cause = getattr(error, "cause", None)
                if isinstance(cause, Exception):
                    raise cause from None
                raise
            idle.append(actor)
        if dead:
            before = len(self._actors)
            self._actors = [a for a in self._actors if not any(a is d for d in dead)]
            warnings.warn(
                f"ray executor: {len(dead)} of {before} Ray actors died (a lost node, "
                f"or a killed worker) while solving {self.spec.label}; their "
                f"{len(retried)} chunks were solved again on the {len(self._actors)} "
                "remaining actors, which carry on", RuntimeWarning, stacklevel=6)
        return results

    def _reset(self) -> None:
        actors, self._actors = self._actors, []
        if not actors:
            return
        ray = _ray()
        if ray.is_initialized():
            for actor in actors:
                try:
                    ray.kill(actor)
                except Exception:  # already gone with its node
                    pass


_EXECUTORS: dict[str, Callable[..., ParallelKernel]] = {
    "thread": ThreadKernel,
    "process": ProcessKernel,
    "ray": RayKernel,
}


def parallel_kernel(cls: type, spec: Spec, config: BackendConfig) -> Kernel:
    """A kernel of backend ``cls`` that spreads batches over ``config.workers`` workers
    of ``config.executor``."""
    if config.executor not in _EXECUTORS:
        raise InputError(
            f"executor must be one of {['serial', *_EXECUTORS]}, got {config.executor!r}"
        )
    return _EXECUTORS[config.executor](cls, spec, config)
