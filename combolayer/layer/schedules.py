"""Noise schedules: the margin noise level ``alpha`` as a function of the epoch.

The paper keeps the noise on for the whole run in Warcraft and switches it
off after the first half of training in Globe TSP. A schedule is any callable
``epoch -> alpha``; [`ComboLayer`][combolayer.ComboLayer] takes one as
``noise_schedule=`` (a callable, a name, or a dict with ``name`` and its
arguments) and applies it in [`set_epoch`][combolayer.ComboLayer.set_epoch].
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from numbers import Integral

from ..errors import InputError

Schedule = Callable[[int], float]


@dataclass(frozen=True)
class Constant:
    """``alpha`` at every epoch."""

    alpha: float

    def __call__(self, epoch: int) -> float:
        return self.alpha


@dataclass(frozen=True)
class StepOff:
    """``alpha`` for epochs ``0 .. until - 1``, then 0 (the paper's Globe TSP)."""

    alpha: float
    until: int

    def __post_init__(self) -> None:
        if isinstance(self.until, bool) or not isinstance(self.until, Integral) or self.until < 1:
            raise InputError(f"until must be a whole number of epochs >= 1, got {self.until!r}")

    def __call__(self, epoch: int) -> float:
        return self.alpha if epoch < self.until else 0.0


@dataclass(frozen=True)
class LinearDecay(StepOff):
    """``alpha`` at epoch 0, falling linearly to 0 at epoch ``until`` and after."""

    def __call__(self, epoch: int) -> float:
        return self.alpha * max(0.0, 1.0 - epoch / self.until)


SCHEDULES: dict[str, type] = {"constant": Constant, "step_off": StepOff,
                              "linear_decay": LinearDecay}


def make_schedule(schedule: str | dict | Schedule, alpha: float) -> Schedule:
    """A schedule from a callable, a name (``"constant"``) or a dict
    (``{"name": "step_off", "until": 10}``); named ones start at ``alpha``."""
    if callable(schedule):
        return schedule
    spec = {"name": schedule} if isinstance(schedule, str) else dict(schedule)
    name = spec.pop("name", None)
    if name not in SCHEDULES:
        raise InputError(f"unknown noise schedule {name!r}: expected one of {sorted(SCHEDULES)} "
                         "or a callable epoch -> alpha")
    spec.setdefault("alpha", alpha)
    try:
        return SCHEDULES[name](**spec)
    except TypeError as error:
        raise InputError(f"noise schedule {name!r}: {error}") from None
