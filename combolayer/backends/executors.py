"""Parallel executors: threads, processes and Ray actors, each holding its own model.

Every executor returns a numpy `Kernel`
that

- solves identical cost rows of a batch once (deduplication),
- returns the solutions in input order,
- falls back to solving in the calling process when the work is too small to
  pay for the hand-off (the first solve is timed, then every solve updates the
  estimate), and otherwise splits the batch into a few chunks per worker,
- turns a crashed worker, or one that runs past the ``time_limit`` budget of
  its chunk, into `SolverError`, and starts fresh
  workers on the next call,
- carries each row's status (optimal, time limit, ...) and the warnings a
  worker process or actor raised back with its results, and hands them to the
  caller (`Solver` then warns or raises once per call).

An executor receives the backend class itself (never a name to look up), and
highspy and pyscipopt models cannot be pickled, so workers never receive a
model: each builds its own once (thread: on first use; process: in the pool
initializer; Ray: in the actor constructor) and keeps it across calls.
"""

from __future__ import annotations

import math
import multiprocessing
import queue
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import torch

from ..errors import BackendUnavailable, SolverError
from ..specs.base import Spec
from .config import BackendConfig
from .outcome import record_all, recording
from .solver import Kernel

#: Work per chunk (seconds) below which handing rows to a worker costs more
#: than it saves; measured hand-off costs are ~0.05 ms (thread), ~0.3 ms
#: (process pipe + pickling) and ~2 ms (Ray task round trip).
MIN_CHUNK_SECONDS = {"thread": 0.5e-3, "process": 3e-3, "ray": 20e-3}
#: Chunks per worker when the work is large: enough to balance uneven solves
#: (TSP-50 solve times vary 5x; 4 chunks per worker left SCIP at 1.7x on 2).
CHUNKS_PER_WORKER = 16
#: Solves shorter than this stay in the caller: their time is mostly Python-side
#: work (setting costs, reading solutions) that holds the GIL or costs as much as
#: the hand-off (measured: SCIP at 0.3 ms/solve ran 5x slower in a fresh pool).
MIN_SOLVE_SECONDS = 1e-3
#: Work a batch must hold before a pool is first started, on top of the model
#: builds (process start-up ~0.1-0.3 s; a local Ray cluster several seconds).
START_SECONDS = {"thread": 0.0, "process": 0.5, "ray": 5.0}


def _serial_config(config: BackendConfig) -> BackendConfig:
    # One solver thread per worker: workers x threads must not exceed the cores
    # (docs/performance.md, "Threads under load").
    return config.model_copy(update={"executor": "serial", "workers": 1, "threads": 1})


def _timed(kernel: Kernel, costs: np.ndarray) -> tuple[np.ndarray, float]:
    start = time.perf_counter()
    out = kernel(costs)
    return np.asarray(out, dtype=np.float64), time.perf_counter() - start


#: What a worker sends back for a chunk: solutions, seconds, the rows' statuses
#: (as recorded by settle; empty for kernels that never stop early) and the
#: warnings it raised, as (category, message) pairs.
Result = tuple[np.ndarray, float, list, list]


def _solve_recorded(kernel: Kernel, costs: np.ndarray, catch: bool = False) -> Result:
    """Solve a chunk in a worker, keeping what the caller must hear. ``catch`` also
    keeps the warnings (processes and actors only: catching warnings is not thread-safe,
    and a worker thread's own warnings already reach the caller's process)."""
    with recording() as log:
        if not catch:
            return (*_timed(kernel, costs), log, [])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out, seconds = _timed(kernel, costs)
    return out, seconds, log, [(w.category, str(w.message)) for w in caught]


def _carry_back(results: list[Result]) -> list[tuple[np.ndarray, float]]:
    """Hand the workers' statuses to the caller's recording and re-emit their warnings
    here, in the caller; keep ``(solution, seconds)`` per chunk."""
    for _, _, statuses, caught in results:
        record_all(statuses)
        for category, message in caught:
            warnings.warn(message, category, stacklevel=4)
    return [(out, seconds) for out, seconds, _, _ in results]


class ParallelKernel:
    """Dedupe, decide serial vs parallel, chunk, and reassemble in order.

    Subclasses provide ``_start()`` (make workers), ``_map(chunks, deadline)``
    (solve chunks, return ``[(solution, seconds, statuses, warnings), ...]`` in
    order, as `_solve_recorded` makes them) and
    ``_reset()`` (discard broken or hung workers).
    """

    array_api = "numpy"
    executor = "serial"

    def __init__(self, cls: type, spec: Spec, config: BackendConfig) -> None:
        self.cls = cls
        self.spec = spec
        self.config = _serial_config(config)
        self.workers = config.workers
        start = time.perf_counter()
        # Compiled here too: spec errors surface at make_solver, and small
        # batches are solved in this process without any hand-off.
        self.local = cls().compile(spec, self.config)
        self.build_seconds = time.perf_counter() - start
        self.per_solve: float | None = None
        self._lock = threading.Lock()

    def __call__(self, costs: np.ndarray) -> np.ndarray:
        costs = np.ascontiguousarray(costs, dtype=np.float64)
        if len(costs) == 0:
            return np.empty_like(costs)
        unique, inverse = np.unique(costs, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        with self._lock, recording() as log:  # one batch at a time per kernel
            solved = self._solve_unique(unique)
        if log:  # each unique row's status, once for every row that repeats it
            record_all(np.asarray(log, dtype=object)[inverse].tolist()
                       if len(log) == len(unique) else log)
        return solved[inverse]

    def _solve_unique(self, costs: np.ndarray) -> np.ndarray:
        done = 0
        parts = []
        if self.per_solve is None:
            # The very first solve pays one-off set-up (HiGHS: 30 ms on a
            # 6-item knapsack that then takes 0.1 ms): time a second one too.
            times = []
            for row in costs[:2]:
                out, seconds = _timed(self.local, row[None])
                parts.append(out)
                times.append(seconds)
            self.per_solve = min(times)
            done = len(times)
        rest = costs[done:]
        n_chunks = self._num_chunks(len(rest))
        if n_chunks <= 1:
            if len(rest):
                out, seconds = _timed(self.local, rest)
                self._update(seconds / len(rest))
                parts.append(out)
        else:
            chunks = np.array_split(rest, n_chunks)
            results = self._map_safely(chunks)
            parts.extend(out for out, _ in results)
            self._update(sum(seconds for _, seconds in results) / len(rest))
        return np.concatenate(parts, axis=0)

    def _num_chunks(self, rows: int) -> int:
        if self.workers < 2 or rows < 2 or self.per_solve < MIN_SOLVE_SECONDS:
            return 1
        work = rows * self.per_solve
        if not self._started() and work < START_SECONDS[self.executor] + self.build_seconds:
            return 1
        minimum = MIN_CHUNK_SECONDS[self.executor]
        by_work = int(work // minimum) if minimum > 0 else rows
        if by_work < 2:
            return 1
        return min(rows, by_work, self.workers * CHUNKS_PER_WORKER)

    def _update(self, seconds: float) -> None:
        self.per_solve = 0.5 * self.per_solve + 0.5 * seconds

    def _deadline(self, chunks: list[np.ndarray]) -> float | None:
        """Seconds the whole map may take before workers count as hung."""
        limit = self.config.time_limit
        if limit is None:
            return None
        rounds = math.ceil(len(chunks) / self.workers)
        rows = max(len(c) for c in chunks)
        # Each solve may legitimately use its full time limit; allow a model
        # build per worker and generous slack for start-up on top.
        return 2.0 + 3.0 * self.build_seconds + 1.5 * limit * rows * rounds

    def _map_safely(self, chunks: list[np.ndarray]) -> list[tuple[np.ndarray, float]]:
        self._start()
        try:
            return _carry_back(self._map(chunks, self._deadline(chunks)))
        except _WorkerFailure as failure:
            self._reset()
            raise SolverError(
                f"{self.executor} executor: {failure} while solving {self.spec.label} with "
                f"backend {self.cls.name!r}; the workers were restarted, retry the call"
            ) from failure.__cause__

    # -- provided by subclasses ---------------------------------------------------

    def _started(self) -> bool:
        return True

    def _start(self) -> None:
        raise NotImplementedError

    def _map(self, chunks, deadline):
        raise NotImplementedError

    def _reset(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._reset()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: modules may be gone
            pass


class _WorkerFailure(Exception):
    """A worker crashed or hung (not an error of the problem itself)."""


# -- threads --------------------------------------------------------------------------


class ThreadKernel(ParallelKernel):
    """``workers`` threads, each with its own model; highspy's ``run()`` and
    pyscipopt's ``optimizeNogil()`` release the GIL, so solves overlap."""

    executor = "thread"

    def __init__(self, cls: type, spec: Spec, config: BackendConfig) -> None:
        super().__init__(cls, spec, config)
        self._idle: list[Kernel] = [self.local]

    def _start(self) -> None:
        pass

    def _kernel(self) -> Kernel:
        return self._idle.pop() if self._idle else self.cls().compile(self.spec, self.config)

    def _map(self, chunks, deadline):
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
        # Daemon threads: a hung solve must not block interpreter exit.
        threads = [threading.Thread(target=work, args=(kernel,), daemon=True)
                   for kernel in handed]
        for thread in threads:
            thread.start()
        end = None if deadline is None else time.monotonic() + deadline
        try:
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

    def _reset(self) -> None:
        pass  # hung threads keep their models; _kernel() builds new ones on demand

    def close(self) -> None:
        self._idle.clear()


# -- processes ------------------------------------------------------------------------

_WORKER_KERNEL: Kernel | None = None


def _init_process(cls: type, spec: Spec, config: BackendConfig) -> None:
    global _WORKER_KERNEL
    torch.set_num_threads(1)  # the pool supplies the parallelism, not torch
    _WORKER_KERNEL = cls().compile(spec, config)


def _solve_in_process(costs: np.ndarray) -> Result:
    return _solve_recorded(_WORKER_KERNEL, costs, catch=True)


def _process_context():
    # fork would copy HiGHS's and torch's thread pools in a broken state;
    # forkserver (Python 3.14's default) forks workers from a clean server.
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload(["combolayer.backends.registry"])
    return context


class ProcessKernel(ParallelKernel):
    """A pool of ``workers`` processes; each builds the model once in its initializer."""

    executor = "process"

    def __init__(self, cls: type, spec: Spec, config: BackendConfig) -> None:
        super().__init__(cls, spec, config)
        self._pool = None

    def _started(self) -> bool:
        return self._pool is not None

    def _start(self) -> None:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=_process_context(),
                initializer=_init_process,
                initargs=(self.cls, self.spec, self.config),
            )

    def _map(self, chunks, deadline):
        futures = [self._pool.submit(_solve_in_process, chunk) for chunk in chunks]
        end = None if deadline is None else time.monotonic() + deadline
        results = []
        try:
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

    def solve(self, costs: np.ndarray) -> Result:
        return _solve_in_process(costs)


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
    """``workers`` Ray actors, each holding a compiled model.

    Uses the connected Ray cluster when ``ray.is_initialized()``, else starts a
    local one. ``options={"ray_num_cpus": ...}`` sets the CPUs per actor.
    """

    executor = "ray"

    def __init__(self, cls: type, spec: Spec, config: BackendConfig) -> None:
        _ray()
        super().__init__(cls, spec, config)
        self._actors: list = []

    def _started(self) -> bool:
        return bool(self._actors)

    def _start(self) -> None:
        if self._actors:
            return
        ray = _ray()
        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False)
        cpus = float(self.config.options.get("ray_num_cpus", 1))
        total = ray.cluster_resources().get("CPU", 0.0)
        if self.workers * cpus > total:
            # Actors beyond the cluster's CPUs would stay pending forever.
            raise SolverError(
                f"executor 'ray' asks for workers={self.workers} actors x {cpus:g} CPUs, "
                f"but the Ray cluster has {total:g} CPUs: lower workers or "
                f"options['ray_num_cpus'], or add nodes"
            )
        remote = ray.remote(num_cpus=cpus)(_Actor)
        self._actors = [remote.remote(self.cls, self.spec, self.config)
                        for _ in range(self.workers)]

    def _map(self, chunks, deadline):
        ray = _ray()
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        refs = [self._actors[i % len(self._actors)].solve.remote(chunk)
                for i, chunk in enumerate(chunks)]
        try:
            return ray.get(refs, timeout=deadline)
        except GetTimeoutError as error:
            raise _WorkerFailure(f"a Ray actor ran past the {deadline:.1f} s budget") from error
        except RayActorError as error:
            raise _WorkerFailure("a Ray actor died") from error
        except RayTaskError as error:
            # The kernel raised inside the actor: re-raise the original error.
            cause = getattr(error, "cause", None)
            if isinstance(cause, Exception):
                raise cause from None
            raise

    def _reset(self) -> None:
        actors, self._actors = self._actors, []
        if not actors:
            return
        ray = _ray()
        if ray.is_initialized():
            for actor in actors:
                ray.kill(actor)


_EXECUTORS: dict[str, Callable[..., ParallelKernel]] = {
    "thread": ThreadKernel,
    "process": ProcessKernel,
    "ray": RayKernel,
}


def parallel_kernel(cls: type, spec: Spec, config: BackendConfig) -> Kernel:
    """A kernel of backend ``cls`` that spreads batches over ``config.workers`` workers
    of ``config.executor``."""
    if config.executor not in _EXECUTORS:
        raise ValueError(
            f"executor must be one of {['serial', *_EXECUTORS]}, got {config.executor!r}"
        )
    return _EXECUTORS[config.executor](cls, spec, config)
