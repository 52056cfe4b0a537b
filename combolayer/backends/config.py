"""Solver configuration, selectable by name, dict, YAML or JSON."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import SpecError
from ..specs.load import read_mapping

Executor = Literal["serial", "thread", "process", "ray"]
OnLimit = Literal["warn", "raise"]


class BackendConfig(BaseModel):
    """Which backend solves a problem, and how.

    ``name`` is a backend name or ``"auto"`` (the fastest exact backend that
    supports the problem). ``threads`` is the solver's thread count per model,
    1 by default: on a shared or busy machine, solver threads, executor workers
    and torch's intra-op threads multiply, so parallelism comes from
    ``workers`` (whose solvers always run single-threaded) and 0 leaves the
    solver's own default (all cores for HiGHS). ``workers="auto"`` is the usable
    cores (``os.sched_getaffinity``) for thread and process executors, and the
    Ray cluster's CPUs divided by ``options["ray_num_cpus"]`` (default 1) for Ray.
    ``options`` go to the solver verbatim (for HiGHS, ``setOptionValue``; for SCIP
    and Gurobi, ``setParam``; for cvxpy, ``solve(**options)``).

    ``time_limit`` (seconds per solve) may stop a solve before it proves
    optimality. A row stopped with a feasible solution returns that solution,
    and ``on_limit`` says what the caller hears: ``"warn"`` (the default) issues
    one ``RuntimeWarning`` per call that counts the non-optimal rows, from every
    executor (workers' statuses travel back with their results); ``"raise"``
    raises `SolverError` instead. Either way ``solver.last_status`` holds
    each row's status (``"optimal"``, ``"time limit"``, ``"inaccurate"``) after
    the call. A limit hit without any feasible solution always raises.
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
    #: True turns ``"auto"``'s race off (`combolayer.backends.race`): its fixed ranking
    #: decides, so a seeded run repeats bit for bit (racing solvers may return different
    #: optima of a cost with ties; every answer is optimal either way).
    deterministic: bool = False
    on_limit: OnLimit = "warn"

    @field_validator("workers", mode="before")
    @classmethod
    def _workers(cls, value: Any) -> int | str:
        if value == "auto":
            return "auto"
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"expected a positive integer or 'auto', got {value!r}")
        return value

    @classmethod
    def load(cls, source: BackendConfig | str | os.PathLike | dict | None) -> BackendConfig:
        """From a config, a backend name, a dict, or a YAML/JSON file or string."""
        if source is None:
            return cls()
        if isinstance(source, BackendConfig):
            return source
        if isinstance(source, str) and source.isidentifier():
            return cls(name=source)
        data = read_mapping(source, what="backend config")
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            fields = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()
            )
            raise SpecError(f"invalid backend config: {fields}") from None
