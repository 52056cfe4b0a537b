"""HiGHS's process-global state, handled once for every HiGHS model combolayer makes.

Two pieces of HiGHS state are process-global, and every HiGHS model in
combolayer (kernels, `combolayer.analysis.hull`, model files) is made by
`new_highs` and run by `run_highs` to handle them:

- the banner, which highspy 1.16 prints to the C-level stdout when the first
  model of the process is made, before any option can turn it off;
- the thread scheduler, which the first ``run()`` of the process creates with
  that model's ``threads`` option and never resizes. A later model asking for
  another count gets ``kError`` and model status 'Not Set' (a warning before
  highspy 1.15, an error since). `run_highs` then resets the scheduler,
  with no other solve of ours running, and runs again.

The scheduler also does not survive ``fork``: a child process inherits a
scheduler whose worker threads it does not have, and its first HiGHS solve
(ours, or cvxpy's HiGHS path) waited on them forever once the parent had
solved with ``threads != 1``. A handler registered with
``os.register_at_fork`` resets the scheduler (and this module's locks) in
every forked child, before any code of the child runs.

This module imports nothing else of combolayer but its errors, so that any
module may use it without an import cycle.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from contextlib import contextmanager

import highspy

from ..errors import SolverError


class _SharedLock:
    """Many solves share the scheduler; a reset needs it to itself."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._users = 0

    @contextmanager
    def shared(self):
        with self._condition:
            self._users += 1
        try:
            yield
        finally:
            with self._condition:
                self._users -= 1
                self._condition.notify_all()

    @contextmanager
    def exclusive(self):
        with self._condition:
            self._condition.wait_for(lambda: self._users == 0)
            yield


_SCHEDULER = _SharedLock()
_BANNER_LOCK = threading.Lock()
_banner_done = False


@contextmanager
def _c_stdout_silenced():
    """Point file descriptor 1 at /dev/null, flushing C's and Python's buffers
    on both sides so nothing printed inside leaks out after."""
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        libc.fflush(None)
        os.dup2(saved, 1)
        os.close(devnull)
        os.close(saved)


def _reset_in_forked_child() -> None:
    # Only the forking thread exists in the child: locks another thread held are
    # stuck held there, and the scheduler's worker threads are gone.
    global _SCHEDULER, _BANNER_LOCK
    _SCHEDULER = _SharedLock()
    _BANNER_LOCK = threading.Lock()
    highspy.Highs.resetGlobalScheduler(True)


if hasattr(os, "register_at_fork"):  # POSIX; Windows has no fork
    os.register_at_fork(after_in_child=_reset_in_forked_child)


def absorb_banner() -> None:
    """Make the process's first HiGHS model with stdout silenced, so the banner
    highspy prints then is not seen; also for models made by others (cvxpy)."""
    global _banner_done
    with _BANNER_LOCK:
        if not _banner_done:
            with _c_stdout_silenced():
                highspy.Highs()
            _banner_done = True


def new_highs(threads: int = 1, verbose: bool = False):
    """A ``highspy.Highs`` with its output off (unless ``verbose``) and ``threads`` set
    (0 leaves HiGHS's default)."""
    if not verbose:
        absorb_banner()
    h = highspy.Highs()
    check_status(h.setOptionValue("output_flag", bool(verbose)), "setOptionValue(output_flag)")
    if threads:
        check_status(h.setOptionValue("threads", int(threads)), "setOptionValue(threads)")
    return h


def check_status(status, call: str) -> None:
    """Raise `SolverError` naming ``call`` unless highspy returned kOk or kWarning."""
    if status not in (highspy.HighsStatus.kOk, highspy.HighsStatus.kWarning):
        raise SolverError(f"HiGHS: {call} returned {status.name}, expected kOk")


def run_highs(h) -> None:
    """``h.run()``, resetting HiGHS's process-global scheduler once if another
    thread count created it; any other failure raises [`SolverError`][combolayer.SolverError]."""
    with _SCHEDULER.shared():
        status = h.run()
    if status == highspy.HighsStatus.kError and (
        h.getModelStatus() == highspy.HighsModelStatus.kNotset
    ):
        with _SCHEDULER.exclusive():
            highspy.Highs.resetGlobalScheduler(True)
            status = h.run()
    if status == highspy.HighsStatus.kError:
        threads = h.getOptionValue("threads")
        raise SolverError(
            f"HiGHS: Highs.run() returned kError with model status "
            f"{h.modelStatusToString(h.getModelStatus())!r} (threads={threads}); "
            "rerun with BackendConfig(verbose=True) to see HiGHS's log"
        )
