"""What every experiment shares: its config base, the results schema, the
seeds x variants loop with progress bars, the learning-curve plot, and saving.

An experiment module describes *what* to train (its variants, a `control`
among them) and *how one run goes* (``train_one(variant, seed) -> Outcome``);
`tune` chooses each tuned hyperparameter on the validation split (growing its
grid until the choice is bracketed or a stated bound is reached),
`run_variants` runs every row on the same seeds, fixed in the config before
any result, the experiment judges its claims once on all of them, and `finish`
writes ``results.json`` (the schema below, exactly these keys),
``details.json`` (curves, secondary metrics, the spread untrained -> best ->
control, the tuning records) and ``curves.png``. A quick run (``--quick``) is
a smoke run: `finish` replaces every verdict by ``"inconclusive"`` with the
evidence `SMOKE`, so it claims nothing.
"""

from __future__ import annotations

import json
import math
import platform
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr
from tqdm.auto import tqdm

from ..errors import InputError
from ..specs.base import NoBooleans
from . import verdicts

Margin = Literal["noise", "informed"] | None


class ExperimentConfig(NoBooleans):
    """Fields every experiment has; each experiment subclasses it with its own."""

    model_config = ConfigDict(extra="forbid")

    #: every row runs on exactly these seeds, fixed before any result (an
    #: experiment that cannot afford 10 sets a smaller list for all its rows)
    seeds: list[int] = Field(default=list(range(10)), min_length=1)
    #: a tuned value is chosen on the mean validation score over the first this
    #: many of ``seeds`` (`tune`)
    tune_seeds: int = Field(default=2, ge=1)
    device: str = "cpu"
    quick: bool = False
    out: Path | None = None  # default: runs/NAME
    progress: bool = True
    #: torch intra-op threads while the experiment runs: its models are small, and on a
    #: shared 2-core machine one thread was faster than torch's default.
    threads: int = Field(default=1, ge=1)


# -- the results schema (results.json: exactly these keys) -----------------------------


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid")

    method: str
    projection: str | None
    noise: float | None
    margin: Margin
    values: list[float]
    mean: float
    std: float
    train_s: float


class PaperNumber(BaseModel):
    model_config = ConfigDict(extra="forbid")

    method: str
    projection: str | None
    value: float
    note: str


class Claim(BaseModel):
    model_config = ConfigDict(extra="forbid")

    claim: str
    verdict: Literal["agrees", "disagrees", "inconclusive", "invalid"]
    evidence: str
    #: not saved: the labels of the rows the claim compares
    _rows: tuple[str, ...] = PrivateAttr(default=())


class Metric(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    higher_is_better: bool


class Result(BaseModel):
    model_config = ConfigDict(extra="forbid")

    experiment: str
    quick: bool
    seeds: list[int]
    metric: Metric
    rows: list[Row]
    paper: list[PaperNumber]
    claims: list[Claim]
    runtime_s: float
    versions: dict[str, str]

    def row(self, label: str) -> Row:
        """The row whose `label` is ``label``."""
        for row in self.rows:
            if label_of(row) == label:
                return row
        raise KeyError(f"no row {label!r}; rows are {[label_of(r) for r in self.rows]}")


# -- variants and outcomes ------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One compared setting: a method with its projection, noise and margin.

    ``options`` carries whatever else the experiment's ``train_one`` needs (a
    lambda, a setting such as ``k``), and ``setting`` is shown in the row's
    method name, e.g. ``"identity [k=5]"``.
    """

    method: str
    projection: str | None = "none"
    noise: float | None = 0.0
    margin: Margin = None
    setting: str = ""
    options: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def name(self) -> str:
        return f"{self.method} [{self.setting}]" if self.setting else self.method

    @property
    def is_control(self) -> bool:
        return bool(self.options.get("control"))

    @property
    def label(self) -> str:
        return row_label(self.name, self.projection, self.noise, self.margin)


#: A control row learns for this many epochs, then its gradient is zeroed.
CONTROL_EPOCHS = 1


def control(variant: Variant) -> Variant:
    """The row that must lose: ``variant`` with its gradient zeroed after the first
    epoch (`learns`). A task on which it keeps up with the trained rows cannot
    tell methods apart, and "on par" claims there are trivial."""
    setting = ", ".join(part for part in (variant.setting, "control") if part)
    return replace(variant, setting=setting, options={**variant.options, "control": True})


def learns(variant: Variant, epoch: int) -> bool:
    """Whether ``variant`` takes optimiser steps in ``epoch`` (0-based): every row
    does, but a `control` only in its first `CONTROL_EPOCHS`."""
    return not variant.is_control or epoch < CONTROL_EPOCHS


def row_label(method: str, projection: str | None, noise: float | None, margin: Margin) -> str:
    """A short unique name for a row: ``"identity, P=std, noise 0.2"``."""
    parts = [method]
    if projection not in (None, "none"):
        parts.append(f"P={projection}")
    if noise:
        parts.append(f"{margin or 'noise'} {noise:g}")
    return ", ".join(parts)


def label_of(row: Row) -> str:
    return row_label(row.method, row.projection, row.noise, row.margin)


@dataclass
class Outcome:
    """What one training run reports: the headline metric on the test split,
    its curve over epochs, secondary metrics, and the training seconds."""

    value: float
    curve: list[float] = field(default_factory=list)
    extras: dict[str, float] = field(default_factory=dict)
    train_s: float = 0.0
    series: dict[str, list[float]] = field(default_factory=dict)
    #: the headline metric on the validation split before and after training, for
    #: the sanity gate (`verdicts.trained`); None where the experiment has none
    untrained_val: float | None = None
    final_val: float | None = None
    #: the headline metric on the test split before training (the spread's start)
    untrained: float | None = None


@dataclass
class Runs:
    """Every variant's outcomes over the seeds, in run order."""

    variants: list[Variant]
    outcomes: dict[str, list[Outcome]]

    def values(self, variant: Variant | str) -> list[float]:
        key = variant if isinstance(variant, str) else variant.label
        return [o.value for o in self.outcomes[key]]

    def extra(self, variant: Variant | str, name: str) -> list[float]:
        key = variant if isinstance(variant, str) else variant.label
        return [o.extras[name] for o in self.outcomes[key]]

    def gate(self, variant: Variant | str, metric: Metric, margin: float,
             ideal: float | None = None) -> tuple[bool, str] | None:
        """`verdicts.trained` on the row's validation values; None when the
        experiment recorded none (the claim is then not gated)."""
        key = variant if isinstance(variant, str) else variant.label
        outcomes = self.outcomes[key]
        if any(o.untrained_val is None or o.final_val is None for o in outcomes):
            return None
        return verdicts.trained([o.untrained_val for o in outcomes],
                                [o.final_val for o in outcomes], metric.higher_is_better,
                                margin, ideal)

    def extend(self, more: Runs) -> None:
        """Add ``more``'s outcomes (further seeds of some of these variants)."""
        for label, outcomes in more.outcomes.items():
            self.outcomes[label].extend(outcomes)

    def rows(self) -> list[Row]:
        rows = []
        for v in self.variants:
            values = self.values(v)
            rows.append(Row(
                method=v.name, projection=v.projection, noise=v.noise, margin=v.margin,
                values=values, mean=float(np.mean(values)),
                std=float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
                train_s=float(np.mean([o.train_s for o in self.outcomes[v.label]])),
            ))
        return rows


def execute(run: Callable[[Any], Result], config: ExperimentConfig) -> Result:
    """``run(config)`` with torch pinned to ``config.threads``, restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        return run(config)
    finally:
        torch.set_num_threads(threads)


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Torch's global generator seeded inside, restored after: for module
    initialisers that draw from it; data and noise take explicit generators."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def run_variants(variants: Sequence[Variant], seeds: Sequence[int],
                 train_one: Callable[[Variant, int, tqdm | None], Outcome],
                 *, desc: str, progress: bool = True) -> Runs:
    """Train every variant on every seed, seeds outermost, with a progress bar.

    ``train_one(variant, seed, bar)`` may call ``bar.update()`` per epoch; the
    bar's total is ``len(seeds) * len(variants)`` runs.
    """
    labels = [v.label for v in variants]
    if len(set(labels)) != len(labels):
        raise InputError(f"variants must have distinct labels, got {labels}")
    outcomes: dict[str, list[Outcome]] = {label: [] for label in labels}
    with tqdm(total=len(seeds) * len(variants), desc=desc, disable=not progress,
              unit="run") as bar:
        for seed in seeds:
            for variant in variants:
                bar.set_postfix_str(f"seed {seed}: {variant.label}")
                start = time.perf_counter()
                outcome = train_one(variant, seed, bar)
                if not outcome.train_s:
                    outcome.train_s = time.perf_counter() - start
                outcomes[variant.label].append(outcome)
                bar.update()
    return Runs(list(variants), outcomes)


@dataclass(frozen=True)
class Bounds:
    """How far a tuned hyperparameter's grid may grow: ``low`` and ``high`` are the
    values a user of the method would not go beyond, ``why`` says why, and the
    grid grows by ``factor`` a step."""

    low: float
    high: float
    why: str
    factor: float = 10.0

    @classmethod
    def around(cls, value: float, source: str, decades: int = 3) -> Bounds:
        """The project's bound for every tuned value: ``decades`` factors of 10 either
        side of ``value``, the method's published setting (named by ``source``).
        Beyond a thousandfold change from the published setting a user would call
        the method misconfigured rather than tuned."""
        spread = 10.0 ** decades
        return cls(value / spread, value * spread,
                   f"{spread:g}x either side of {source} {value:g}")

    def __post_init__(self) -> None:
        if not 0 < self.low < self.high:
            raise InputError(f"bounds need 0 < low < high, got low={self.low}, high={self.high}")
        if self.factor <= 1:
            raise InputError(f"the grid grows by a factor > 1, got {self.factor}")


@dataclass(frozen=True)
class HandChoice:
    """A value an experiment chose by hand on the validation split, outside `tune` (a
    learning-rate schedule compared on a few runs, say): ``value`` names it, ``evidence``
    gives the validation numbers it rests on. An experiment module lists its choices in
    an optional ``CHOSEN_BY_HAND`` tuple; the report counts and lists them."""

    value: str
    evidence: str

    def __post_init__(self) -> None:
        if not self.value.strip() or not self.evidence.strip():
            raise InputError(f"a hand choice needs a value and its evidence, got "
                             f"value={self.value!r}, evidence={self.evidence!r}")


def tune_seeds(config: ExperimentConfig) -> list[int]:
    """The seeds a tuned value is chosen on: the first ``config.tune_seeds`` of ``config.seeds``."""
    return list(config.seeds[:config.tune_seeds])


def tune(method: str, parameter: str, grid: Sequence[float],
         variant_for: Callable[[float], Variant],
         train_one: Callable[[Variant, int, tqdm | None], Outcome],
         config: ExperimentConfig, metric: Metric, *, bounds: Bounds,
         setting: str = "") -> dict[str, Any]:
    """Choose ``method``'s ``parameter`` on the validation split, bracketed.

    Each value scores the mean of `Outcome.final_val` over `tune_seeds`. While
    the best value is the grid's smallest (largest), the grid grows by
    ``bounds.factor`` below (above) it, clipped to the bound, until the best
    value has a worse neighbour on each side or sits at a bound (``at_bound``
    says which). A quick run scores the given grid only (``grown`` False).
    Returns the record ``details.json`` keeps under ``"tuning"``.
    """
    if not grid:
        raise InputError(f"tuning {method}'s {parameter} needs a grid, got {list(grid)}")
    outside = [v for v in grid if not bounds.low <= v <= bounds.high]
    if outside:
        raise InputError(f"tuning {method}'s {parameter}: grid values {outside} lie outside "
                         f"the bounds [{bounds.low:g}, {bounds.high:g}]")
    seeds = tune_seeds(config)
    per_seed: dict[float, list[float]] = {}
    name = f"tune {method} {parameter}{f' [{setting}]' if setting else ''}"
    bar = tqdm(desc=name, disable=not config.progress, unit="run")

    def score(value: float) -> None:
        found = []
        for seed in seeds:
            bar.set_postfix_str(f"{parameter}={value:g}, seed {seed}")
            found.append(train_one(variant_for(value), seed, None).final_val)
            bar.update()
        if any(v is None for v in found):
            raise InputError(f"tuning {method}'s {parameter} needs validation values, "
                             f"got {found} at {value:g}")
        per_seed[float(value)] = [float(v) for v in found]

    for value in sorted(set(grid)):
        score(value)
    pick = max if metric.higher_is_better else min
    grow = not config.quick
    while True:
        values = sorted(per_seed)
        means = {v: float(np.mean(per_seed[v])) for v in values}
        chosen = pick(values, key=means.get)
        at_bound = None
        if grow and chosen == values[0]:
            if chosen <= bounds.low:
                at_bound = "low"
            else:
                score(max(chosen / bounds.factor, bounds.low))
                continue
        if grow and chosen == values[-1]:
            if chosen >= bounds.high:
                at_bound = "high"
            else:
                score(min(chosen * bounds.factor, bounds.high))
                continue
        break
    bar.close()
    return {"method": method, "parameter": parameter, "setting": setting, "grid": values,
            "validation": means, "validation_per_seed": {v: per_seed[v] for v in values},
            "seeds": seeds, "chosen": chosen, "chosen_validation": means[chosen],
            "bounds": {"low": bounds.low, "high": bounds.high, "why": bounds.why},
            "at_bound": at_bound, "grown": grow}


# -- claims -------------------------------------------------------------------------


def claim(text: str, verdict_and_evidence: tuple[str, str]) -> Claim:
    verdict, evidence = verdict_and_evidence
    return Claim(claim=text, verdict=verdict, evidence=evidence)


#: Default sanity-gate margin: a row must close this fraction of the distance from
#: its untrained validation value to the metric's ideal.
GATE_MARGIN = 0.05


def _gates(runs: Runs, metric: Metric, variants: Sequence[Variant], margin: float,
           ideal: float | None) -> dict[str, tuple[bool, str]]:
    gates = {}
    for v in variants:
        answer = runs.gate(v, metric, margin, ideal)
        if answer is not None:
            gates[v.label] = answer
    return gates


def _judged(text: str, runs: Runs, a: Variant, b: Variant, metric: Metric, rule: str,
            threshold: float, gate_margin: float, ideal: float | None,
            control: Variant | None = None) -> Claim:
    """One claim on rows ``a`` and ``b`` by `verdicts`' ``rule``, gated, and for
    the "on par" rules required to beat ``control``."""
    judge = {"better": verdicts.better, "on_par": verdicts.on_par,
             "on_par_or_better": verdicts.on_par_or_better}[rule]
    values_a, values_b = runs.values(a), runs.values(b)
    numbers = judge(values_a, values_b, metric.higher_is_better, threshold)
    if control is not None:
        numbers = verdicts.require_control(numbers, verdicts.discriminates(
            values_a, values_b, runs.values(control), metric.higher_is_better))
    verdict, evidence = verdicts.gate(numbers, _gates(runs, metric, [a, b], gate_margin, ideal))
    made = Claim(claim=text, verdict=verdict,
                 evidence=f"{_mean(runs, a)} vs {_mean(runs, b)}: {evidence}")
    made._rows = tuple(v.label for v in (a, b, control) if v is not None)
    return made


def claim_better(text: str, runs: Runs, a: Variant, b: Variant, metric: Metric,
                 min_gap: float = 0.0, gate_margin: float = GATE_MARGIN,
                 ideal: float | None = None) -> Claim:
    """"``a`` beats ``b``", judged by `verdicts.better` on the per-seed values,
    and ``invalid`` when either row failed its sanity gate."""
    return _judged(text, runs, a, b, metric, "better", min_gap, gate_margin, ideal)


def claim_on_par(text: str, runs: Runs, a: Variant, b: Variant, metric: Metric,
                 tolerance: float, gate_margin: float = GATE_MARGIN,
                 ideal: float | None = None, control: Variant | None = None,
                 or_better: bool = False) -> Claim:
    """"``a`` is on par with ``b``" (``or_better``: "or better"), judged by
    `verdicts.on_par` (`verdicts.on_par_or_better`); ``invalid`` when either row
    failed its sanity gate, and a trivial ``inconclusive`` instead of ``agrees``
    when ``control`` was not detectably worse than both rows."""
    return _judged(text, runs, a, b, metric, "on_par_or_better" if or_better else "on_par",
                   tolerance, gate_margin, ideal, control)


def claim_collapses(text: str, runs: Runs, variant: Variant, metric: Metric) -> Claim:
    """"``variant`` collapses": its validation metric ends detectably worse than
    before training (`verdicts.better` of the untrained over the final values).
    It is a claim that a row fails its sanity gate, so it is not gated."""
    outcomes = runs.outcomes[variant.label]
    before = [o.untrained_val for o in outcomes]
    after = [o.final_val for o in outcomes]
    if None in before or None in after:
        raise InputError(f"{variant.label} recorded no validation values")
    verdict, evidence = verdicts.better(before, after, metric.higher_is_better)
    made = Claim(claim=text, verdict=verdict,
                 evidence=f"{variant.label}: validation {np.mean(before):.4g} untrained -> "
                          f"{np.mean(after):.4g} trained: {evidence}")
    made._rows = (variant.label,)
    return made


def _mean(runs: Runs, v: Variant) -> str:
    values = runs.values(v)
    std = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return f"{v.label} {np.mean(values):.4g}±{std:.2g}"


# -- finishing: results.json, details.json, curves.png ---------------------------------


#: A quick run's evidence for every claim: it is a smoke run and claims nothing.
SMOKE = "smoke run: no verdicts"


def smoke(claims: Sequence[Claim]) -> list[Claim]:
    """``claims`` as a smoke run states them: the same texts, each with the verdict
    ``"inconclusive"`` (the schema's value for "not decided") and the evidence
    `SMOKE`. A quick run's one seed and few epochs decide nothing."""
    return [Claim(claim=c.claim, verdict="inconclusive", evidence=SMOKE) for c in claims]


def versions() -> dict[str, str]:
    found = {"python": platform.python_version(), "torch": torch.__version__}
    for package in ("combolayer", "numpy", "highspy", "pyscipopt", "scipy", "networkx",
                    "cvxpy"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return found


def output_dir(name: str, config: ExperimentConfig) -> Path:
    return Path(config.out) if config.out is not None else Path("runs") / name


def finish(name: str, config: ExperimentConfig, metric: Metric, runs: Runs,
           paper: Sequence[PaperNumber], claims: Sequence[Claim], started: float,
           curve_label: str | None = None, details: dict[str, Any] | None = None) -> Result:
    """Assemble the `Result`, write it with the details and the plot, return it.

    Every row must have run on exactly ``config.seeds``. In a quick run every
    claim keeps its text but says `SMOKE` (`smoke`)."""
    for v in runs.variants:
        if len(runs.outcomes[v.label]) != len(config.seeds):
            raise InputError(f"every row runs on the config's {len(config.seeds)} seeds; "
                             f"{v.label} has {len(runs.outcomes[v.label])}")
    if config.quick:
        claims = smoke(claims)
    result = Result(
        experiment=name, quick=config.quick, seeds=list(config.seeds), metric=metric,
        rows=runs.rows(), paper=list(paper), claims=list(claims),
        runtime_s=time.perf_counter() - started, versions=versions(),
    )
    out = output_dir(name, config)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(result.model_dump_json(indent=2) + "\n")
    curves = {v.label: _mean_curve([o.curve for o in runs.outcomes[v.label]])
              for v in runs.variants}
    series: dict[str, dict[str, list[float]]] = {}
    for v in runs.variants:
        for key in runs.outcomes[v.label][0].series:
            series.setdefault(key, {})[v.label] = _mean_curve(
                [o.series[key] for o in runs.outcomes[v.label]])
    extras = {
        v.label: {key: _summary([o.extras[key] for o in runs.outcomes[v.label]])
                  for key in runs.outcomes[v.label][0].extras}
        for v in runs.variants
    }
    payload = {"curves": curves, "series": series, "extras": extras,
               "spread": spread(runs, metric),
               "config": json.loads(config.model_dump_json()), **(details or {})}
    (out / "details.json").write_text(json.dumps(payload, indent=2, default=float) + "\n")
    plot_curves({f"test {metric.name}": curves, **series}, out / "curves.png",
                title=f"{name}{' (quick)' if config.quick else ''}")
    return result


def span(runs: Runs, metric: Metric,
         variants: Sequence[Variant]) -> tuple[float | None, Variant | None]:
    """The two ends of ``variants``' spread: the test metric before training (mean
    over every run of theirs that recorded it) and the best row that is not a control."""
    untrained = [o.untrained for v in variants for o in runs.outcomes[v.label]
                 if o.untrained is not None]
    trained = [v for v in variants if not v.is_control]
    pick = max if metric.higher_is_better else min
    best = pick(trained, key=lambda v: float(np.mean(runs.values(v)))) if trained else None
    return (float(np.mean(untrained)) if untrained else None), best


def threshold(runs: Runs, metric: Metric, variants: Sequence[Variant],
              fraction: float) -> tuple[float, str]:
    """A gap or tolerance on the analogue's own scale: `verdicts.scaled_threshold`
    at ``fraction`` of the `span` of ``variants``, with the text a claim states it by."""
    untrained, best = span(runs, metric, variants)
    return verdicts.scaled_threshold(untrained, float(np.mean(runs.values(best))), fraction)


def spread(runs: Runs, metric: Metric) -> list[dict[str, Any]]:
    """Per setting (the rows' ``setting`` without "control"): the test metric
    before training, the best row (`span`), and each control row. A task
    discriminates when best and control lie far apart."""
    groups: dict[str, list[Variant]] = {}
    for v in runs.variants:
        setting = ", ".join(p for p in v.setting.split(", ") if p and p != "control")
        groups.setdefault(setting, []).append(v)
    found = []
    for setting, variants in groups.items():
        untrained, best = span(runs, metric, variants)
        found.append({
            "setting": setting,
            "untrained": untrained,
            "best": ({"row": best.label, "mean": float(np.mean(runs.values(best)))}
                     if best else None),
            "controls": {v.label: float(np.mean(runs.values(v)))
                         for v in variants if v.is_control},
        })
    return found


def _mean_curve(curves: list[list[float]]) -> list[float]:
    length = min((len(c) for c in curves), default=0)
    return [float(np.mean([c[i] for c in curves])) for i in range(length)]


def _summary(values: list[float]) -> dict[str, float]:
    return {"mean": float(np.mean(values)),
            "std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0}


def digits() -> tuple[np.ndarray, np.ndarray]:
    """sklearn's bundled 8x8 digits: ``(1797, 64)`` pixels in 0..16 and their classes;
    an `ImportError` naming the extra to install where sklearn is missing."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ImportError("this experiment's digits come with scikit-learn: pip install "
                          "combolayer[experiments]") from None
    data = load_digits()
    return data.data, data.target


def plot_curves(panels: dict[str, dict[str, list[float]]], path: Path, title: str) -> None:
    """One panel per quantity, one line per row, over epochs (mean over seeds)."""
    panels = {name: lines for name, lines in panels.items() if any(lines.values())}
    if not panels:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # the run's results stand without their picture, as train's do
        warnings.warn(f"matplotlib is not installed: no {path.name} (pip install "
                      "combolayer[plot])", stacklevel=2)
        return

    width = min(len(panels), 3)
    height = math.ceil(len(panels) / width)
    fig, axes = plt.subplots(height, width, figsize=(5.2 * width, 3.8 * height), squeeze=False)
    for ax, (name, lines) in zip(axes.flat, panels.items()):
        # past the default cycle's 10 colours, tab20's; past 20, new line styles too
        colors = plt.get_cmap("tab20").colors if len(lines) > 10 else [None] * 10
        for i, (label, curve) in enumerate(lines.items()):
            ax.plot(range(1, len(curve) + 1), curve, label=label, lw=1.4,
                    color=colors[i % len(colors)], ls=("-", "--", ":", "-.")[(i // 20) % 4])
        ax.set(xlabel="epoch", ylabel=name)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, loc="best")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
