"""Solver configuration, selectable by name, dict, YAML or JSON."""

from __future__ import annotations

import math
import os
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import InputError, SpecError
from ..specs.base import NoBooleans
from ..specs.load import read_mapping

Executor = Literal["serial", "thread", "process", "ray"]
OnLimit = Literal["warn", "raise"]
OnInfeasible = Literal["raise", "flag"]


#: Threads per solver and local workers allowed per usable core (at least
#: `_MIN_PARALLEL` in all): more only oversubscribes the cores, and a million
#: threads abort HiGHS or fork a million processes.
_PER_CORE = 8
_MIN_PARALLEL = 32


def usable_cores() -> int:
    """The cores this process may run on: its affinity mask (``os.sched_getaffinity``)
    where it exists, not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def max_parallel() -> int:
    """The most ``threads`` and local ``workers`` a `BackendConfig` accepts."""
    return max(_PER_CORE * usable_cores(), _MIN_PARALLEL)


def _above_limit(unit: str = "") -> str:
    """The end of the message for a value above `max_parallel`: the limit and why."""
    return (f"is above the limit of {max_parallel()}{unit} ({_PER_CORE} per usable core, "
            f"{usable_cores()} usable here)")


def _invalid(error: ValidationError) -> SpecError:
    fields = "; ".join(  # a field's name, where the error is one field's
        ": ".join(filter(None, (".".join(map(str, e["loc"])),
                                e["msg"].removeprefix("Value error, "))))
        for e in error.errors())
    return SpecError(f"invalid backend config: {fields}")


class _Checked(NoBooleans):
    """Built directly, an invalid config raises SpecError, as `BackendConfig.load` does
    (a base of its own: the API reference reads a model's fields as its signature only
    where it defines no ``__init__``, tools/griffe_pydantic.py)."""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise _invalid(error) from None


class BackendConfig(_Checked):
    """Which backend solves a problem, and how.

    On a shared or busy machine, solver threads, executor workers and torch's
    intra-op threads multiply, so parallelism comes from ``workers`` (whose solvers
    always run single-threaded). An instance stopped by ``time_limit`` with a feasible
    solution returns that solution; ``solver.solve(costs, return_status=True)``
    returns each instance's status (``"optimal"``, ``"time limit"``, ``"inaccurate"``). A
    limit hit without any feasible solution always raises.

    Args:
        name: a backend name or ``"auto"`` (the fastest exact backend that supports
            the problem).
        time_limit: seconds per solve, or None; it may stop a solve before it
            proves optimality. A backend whose solves it cannot stop (an algorithm of
            its own: scipy, torch, networkx; cvxpy with a solver other than HiGHS or
            SCIP) warns that it does nothing with it, and so for ``mip_gap``.
        threads: the solver's thread count per model, 1 by default; 0 leaves the
            solver's own default (all cores for HiGHS).
        mip_gap: the relative optimality gap at which a MIP solve stops (0: exact).
        verbose: let the solver print its log.
        workers: how many solve at once; ``"auto"`` is the usable cores
            (``os.sched_getaffinity``) for thread and process executors, and the Ray
            cluster's CPUs divided by ``options["ray_num_cpus"]`` (default 1) for Ray.
        executor: ``"serial"``, ``"thread"``, ``"process"`` or ``"ray"``; ``"thread"``
            where ``workers`` is given and the executor is not.
        options: passed to the solver verbatim (HiGHS: ``setOptionValue``; SCIP and
            Gurobi: ``setParam``; cvxpy: ``solve(**options)``); a backend with no solver
            settings (scipy, torch, ...) warns that it does nothing with them.
        deterministic: deprecated: ``"auto"`` is always a fixed choice, and racing the
            solvers is the opt-in ``name="race"``; ``False`` under ``"auto"`` still
            races, with a DeprecationWarning naming ``"race"``.
        on_limit: what the caller hears of instances a limit stopped: ``"warn"`` (default,
            one ``RuntimeWarning`` per call counting them, from every executor) or
            ``"raise"`` (`SolverError`).
        on_infeasible: what an instance that per-call rows ``A x <= b`` leave infeasible
            does: ``"raise"`` (default) `InfeasibleError`, or ``"flag"``: its solution is
            zeros, the call warns once with the count, and its status
            ``"infeasible"`` (``return_status=True``) or ``layer.last_infeasible`` say
            which.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "auto"
    time_limit: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    threads: int = Field(default=1, ge=0)
    mip_gap: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    verbose: bool = False
    workers: int | Literal["auto"] = 1
    executor: Executor = "serial"
    options: dict[str, Any] = {}
    deterministic: bool = True
    on_limit: OnLimit = "warn"
    on_infeasible: OnInfeasible = "raise"

    @model_validator(mode="before")
    @classmethod
    def _executor_for_workers(cls, data: Any) -> Any:
        # workers=n means n workers: with no executor named, threads (highspy, pyscipopt
        # and gurobipy release the GIL); it ran serially, with one
        if (isinstance(data, dict) and "executor" not in data
                and data.get("workers", 1) not in (1, None)):
            return {**data, "executor": "thread"}
        return data

    @field_validator("workers", mode="before")
    @classmethod
    def _workers(cls, value: Any) -> int | str:
        if value == "auto":
            return "auto"
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"expected a positive integer or 'auto', got {value!r}")
        return value

    @field_validator("options")
    @classmethod
    def _finite_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        # solvers take a NaN parameter without a word (Gurobi's MIPGap) and then
        # stop wherever the comparison with NaN happens to fall
        for key, option in value.items():
            if isinstance(option, float) and math.isnan(option):
                raise InputError(f"options[{key!r}] is NaN: expected a number")
            # HiGHS's "threads", Gurobi's "Threads", SCIP's "parallel/maxnthreads": the
            # same bound as the threads field
            if ("thread" in str(key).lower() and isinstance(option, int | float)
                    and option > max_parallel()):
                raise InputError(f"options[{key!r}]={option} {_above_limit(' threads')}")
        return value

    @field_validator("threads")
    @classmethod
    def _threads(cls, value: int) -> int:
        # HiGHS aborts the interpreter (std::terminate) when it cannot start them all
        if value > max_parallel():
            raise InputError(f"threads={value} {_above_limit()}: expected 0 (the solver's "
                             "default), 1, or up to the usable cores")
        return value

    @model_validator(mode="after")
    def _bounded_workers(self) -> BackendConfig:
        if self.executor == "serial" and self.workers != 1:
            raise InputError(f"workers={self.workers!r} with executor='serial', which solves in "
                             "the caller alone: expected workers=1, or executor 'thread', "
                             "'process' or 'ray'")
        # Ray counts its cluster's CPUs when it starts its actors; threads and processes
        # run here, one model each
        if (self.executor in ("thread", "process") and isinstance(self.workers, int)
                and self.workers > max_parallel()):
            raise InputError(
                f"workers={self.workers} for executor={self.executor!r} {_above_limit()}: "
                "expected up to the usable cores, or workers='auto'")
        return self

    @classmethod
    def load(cls, source: BackendConfig | str | os.PathLike | dict | None) -> BackendConfig:
        """From a config, a backend name, a dict, a YAML/JSON file or string, or an
        object that stands for a backend and says its config with
        ``to_backend_config()`` (a wrapped PyEPO model: `combolayer.interop.pyepo`)."""
        if source is None:
            return cls()
        if isinstance(source, BackendConfig):
            return source
        if callable(getattr(source, "to_backend_config", None)):
            return cls.load(source.to_backend_config())
        if isinstance(source, str) and source.isidentifier():
            return cls(name=source)
        data = read_mapping(source, what="backend config")
        # built by __init__, whose SpecError model_validate would wrap once more
        return cls(**{str(key): value for key, value in data.items()})
