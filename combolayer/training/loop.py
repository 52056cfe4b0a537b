"""Predict-then-optimise training: features -> cost model -> layer -> loss.

Used by ``combolayer demo`` and ``combolayer train CONFIG``. The config is a
`TrainConfig` (pydantic, unknown keys rejected by name); every key and a
full example are in ``docs/training.md``.
"""

from __future__ import annotations

import csv
import inspect
import json
import math
import os
import time
import typing
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from torch import nn
from tqdm.auto import tqdm

from .. import data as datasets
from .. import metrics
from ..backends.config import BackendConfig
from ..backends.registry import backends, make_solver
from ..backends.solver import check_known_cost, inner
from ..errors import InputError
from ..estimators import resolve_method
from ..layer.combo_layer import ComboLayer
from ..layer.projection import HULL_PROJECTIONS, PROJECTIONS
from ..losses import CaVELoss, FenchelYoungLoss, SPOPlusLoss, binding_cones, hamming
from ..specs.base import NoBooleans, _fields_at, did_you_mean, refuse_booleans
from ..specs.load import load_spec, read_mapping, spec_from_text
from ..specs.paths import config_base, is_path, resolve_path

#: The training losses ``loss`` may name.
LOSSES = ("regret", "l1", "hamming", "spo+", "fenchel_young", "cave")
#: The losses through the layer that are linear in its output y: under them an
#: estimator whose backward ignores y (Identity) gets the same gradient whatever y is.
LINEAR_IN_Y = ("regret", "hamming")
#: The losses that hold their own solver: the layer is not in their training graph.
OWN_SOLVER = ("spo+", "fenchel_young", "cave")
#: The built-in data generators ``data.name`` may name (PyEPO's formulas).
GENERATORS = ("shortest_path", "knapsack", "tsp")
#: Generator arguments the config does not set: the count comes from
#: num_train + num_test, the backend from the layer.
_NOT_CONFIGURABLE = {"num_data", "backend"}


class ConfigError(InputError):
    """An invalid training config; the message names the key and what is expected."""


# -- the config -------------------------------------------------------------------


class _Strict(NoBooleans):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataConfig(BaseModel):
    """Where the training data comes from: exactly one of ``name``, ``npz`` or ``csv``.

    - ``name``: a built-in generator (``shortest_path``, ``knapsack``, ``tsp``,
      see [`combolayer.data`][combolayer.data]); its other arguments (``num_features``,
      ``grid``, ``deg``, ``noise_width``, ``seed``, ...) sit next to ``name``.
      The problem comes with the data.
    - ``npz``: a file with arrays ``features``, ``(n, p)`` per instance or
      ``(n, *cost_shape, p)`` per cost entry, ``costs`` ``(n, *cost_shape)``, and
      optionally ``solutions`` ``(n, *cost_shape)`` (solved when missing) and
      ``known_cost``, each instance's known cost, ``(n, num_vars)`` or
      ``(n, *cost_shape)`` (on the outputs); the config's ``problem`` says what is solved.
    - ``csv``: a file with one row per instance and cost entry (`read_csv`): columns
      ``instance``, ``entry`` (the entry's flat index in ``cost_shape``), ``cost``,
      optional ``known_cost`` and ``solution``, and every other column a feature.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    name: Literal["shortest_path", "knapsack", "tsp"] | None = None
    npz: str | None = None
    csv: str | None = None

    @model_validator(mode="after")
    def _check(self) -> DataConfig:
        extra = sorted(self.model_extra or {})
        given = [key for key in ("name", "npz", "csv") if getattr(self, key) is not None]
        if len(given) != 1:
            raise InputError(
                "needs exactly one of 'name' (a built-in generator: "
                f"{', '.join(GENERATORS)}), 'npz' (a file with features, costs and "
                "optional solutions and known_cost) or 'csv' (one row per instance and cost "
                f"entry){'; got ' + ', '.join(given) if given else ''}"
            )
        if self.name is None:
            if extra:
                raise InputError(f"unknown key {extra[0]!r} next to {given[0]!r}: expected "
                                 f"only {given[0]!r}")
            return self
        parameters = inspect.signature(getattr(datasets, self.name)).parameters
        allowed = [p for p in parameters if p not in _NOT_CONFIGURABLE]
        hints = typing.get_type_hints(getattr(datasets, self.name))
        for key in extra:
            if key not in allowed:
                raise InputError(f"unknown key {key!r} for {self.name}{did_you_mean(key, allowed)}"
                                 f"; expected some of {allowed}")
            refuse_booleans(hints[key], self.model_extra[key], key)
            try:  # the generator's own annotations: grid: tuple[int, int], deg: int, ...
                self.model_extra[key] = TypeAdapter(hints[key]).validate_python(
                    self.model_extra[key])
            except ValidationError as error:
                message = error.errors()[0]["msg"]
                raise InputError(f"{key}: {message} (got {self.model_extra[key]!r})") from None
        missing = [p for p in allowed if parameters[p].default is inspect.Parameter.empty
                   and p not in extra]
        if missing:
            raise InputError(f"{self.name} needs {missing}")
        return self

    @property
    def options(self) -> dict[str, Any]:
        """The generator's arguments (everything but ``name``)."""
        return dict(self.model_extra or {})

    def as_run(self) -> dict[str, Any]:
        """The config as its data was made: with a generator, every argument it takes
        from the config, defaults included (what a run folder's ``config.json`` keeps)."""
        given = self.model_dump()
        if self.name is None:
            return given
        parameters = inspect.signature(getattr(datasets, self.name)).parameters
        defaults = {name: parameter.default for name, parameter in parameters.items()
                    if name not in _NOT_CONFIGURABLE
                    and parameter.default is not inspect.Parameter.empty}
        return defaults | given


class LayerConfig(_Strict):
    """The [`ComboLayer`][combolayer.ComboLayer] arguments (see its docstring)."""

    method: str | dict[str, Any] = "identity"
    projection: str = "auto"
    noise: float = Field(0.0, ge=0.0, allow_inf_nan=False)
    backend: str | dict[str, Any] = "auto"
    solve_ratio: float = Field(1.0, ge=0.0, le=1.0, allow_inf_nan=False)

    # checked when the config is read, not after the data are made and solved
    @field_validator("method")
    @classmethod
    def _method(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        resolve_method(value)
        return value

    @field_validator("projection")
    @classmethod
    def _projection(cls, value: str) -> str:
        names = [*HULL_PROJECTIONS, *PROJECTIONS]
        if value not in names:
            raise InputError(f"unknown projection {value!r}: expected one of {names}"
                             f"{did_you_mean(value, names)}")
        return value

    @field_validator("backend")
    @classmethod
    def _backend(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(value, str) and is_path(value):  # a file: read beside the config
            return value
        name = BackendConfig.load(value).name
        names = ["auto", "race", *sorted(backends())]
        if name not in names:
            raise InputError(f"unknown backend {name!r}: expected one of {names}"
                             f"{did_you_mean(name, names)}")
        return value


class ModelConfig(_Strict):
    """The cost model: a linear map from features to costs, or an MLP with
    ReLU ``hidden`` layers. ``per_entry: true`` (features per cost entry,
    ``(n, *cost_shape, p)``) maps each entry's ``p`` features to its cost with one
    model shared by every entry (`EntryModel`); otherwise per-entry features are
    flattened into one vector per instance."""

    hidden: list[Annotated[int, Field(ge=1, strict=True)]] = []
    per_entry: bool = False


class TrainConfig(_Strict):
    """A ``combolayer train`` run. Unknown keys raise `ConfigError`.

    Attributes:
        data: a `DataConfig` (built-in generator or ``.npz`` file).
        problem: the spec solved, for ``npz`` data: a YAML/JSON spec file, an MPS/LP
            file, or an inline mapping (relative paths are read next to the config
            file). Built-in generators bring their own problem.
        layer: a `LayerConfig`.
        model: a `ModelConfig`.
        loss: through the layer, ``"regret"`` (default: the decision's regret under
            the true costs, PyEPO's ``lossfunc="r"``), ``"l1"`` (``|y - y_true|``,
            the one under which Identity's ``noise`` acts) or ``"hamming"``; or
            ``"spo+"`` / ``"fenchel_young"``, which hold their own solver, or
            ``"cave"`` (CaVE+, `combolayer.losses.CaVELoss`, its cones computed once
            for the training set; the layer's ``solve_ratio`` below 1 makes it CaVE
            Hybrid): the layer then only decides at test time. Default: ``"regret"``
            without a known cost; with one (the spec's, or each instance's from the
            data) ``"spo+"``, which counts it (`default_loss`). A layer setting that
            cannot act under the loss chosen warns (`inactive_settings`).
        epochs, lr, batch_size, seed: the optimisation (Adam).
        num_train, num_test: instances to train and test on. Default: 1000 each
            for generators; for ``npz`` the first 80% train and the rest test.
        out: the run directory for ``history.csv``, ``regret.png``, ``model.pt``,
            ``config.json``, ``spec.json`` and ``model.json`` (default ``runs/train``).

    Relative paths (``problem``, ``data.npz``, ``layer.backend``, and ``out`` when the
    file sets it) are read next to the config file that names them, as in
    ``ComboLayer.from_config``; from the current directory for a dict or string.
    """

    data: DataConfig
    problem: str | dict[str, Any] | None = None
    layer: LayerConfig = LayerConfig()
    model: ModelConfig = ModelConfig()
    loss: Literal["regret", "l1", "hamming", "spo+", "fenchel_young", "cave"] | None = None
    epochs: int = Field(20, ge=1)
    lr: float = Field(1e-2, gt=0.0, allow_inf_nan=False)
    batch_size: int = Field(32, ge=1)
    num_train: int | None = Field(None, ge=1)
    num_test: int | None = Field(None, ge=1)
    seed: int = Field(0, ge=0, lt=2**32)  # numpy's and torch's seed range
    out: str = Field("runs/train", min_length=1)

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.data.name is None and self.problem is None:
            raise InputError("'problem' is required with npz data and with csv data: the spec the "
                             "costs are for (a YAML/JSON spec, an MPS/LP file or a mapping)")
        if self.data.name is not None and self.problem is not None:
            raise InputError(f"'problem' is set by the {self.data.name} generator; "
                             "remove it, or use npz data for your own problem")
        return self


def load_config(source: str | os.PathLike | dict) -> TrainConfig:
    """A `TrainConfig` from a YAML/JSON file path, string or dict.

    Raises:
        ConfigError: unknown or missing keys and bad values, each named, e.g.
            ``unknown key 'epoch' (did you mean 'epochs'?)``.
    """
    raw = dict(read_mapping(source, what="train config"))
    try:
        config = TrainConfig.model_validate(raw)
    except ValidationError as error:
        problems = []
        for item in error.errors():
            loc = tuple(item["loc"])
            where = ".".join(str(p) for p in loc)
            if item["type"] == "extra_forbidden":
                hint = did_you_mean(str(loc[-1]), _fields_at(TrainConfig, loc))
                problems.append(f"unknown key {where!r}{hint}")
            elif item["type"] == "missing":
                problems.append(f"missing key {where!r}")
            else:
                message = item["msg"].removeprefix("Value error, ")
                problems.append(f"{where}: {message}" if where else message)
        raise ConfigError("invalid train config: " + "; ".join(problems)
                          + " (every key: docs/training.md)") from None
    if config.model.per_entry and config.data.name is not None:
        raise ConfigError("model.per_entry needs features per cost entry, (n, *cost_shape, p), "
                          f"from npz or csv data; the {config.data.name} generator gives one "
                          "feature vector per instance")
    # One rule with ComboLayer.from_config: relative to the file that names them.
    base = config_base(source)
    origin = str(source) if base is not None else None
    update: dict[str, Any] = {
        "problem": resolve_path(config.problem, base, "problem", origin, ConfigError)}
    for key in ("npz", "csv"):
        if getattr(config.data, key) is not None:
            update["data"] = DataConfig(**{key: resolve_path(
                getattr(config.data, key), base, f"data.{key}", origin, ConfigError,
                always=True)})
    if isinstance(config.layer.backend, str):  # a backend config may be a YAML/JSON file
        update["layer"] = config.layer.model_copy(update={"backend": resolve_path(
            config.layer.backend, base, "layer.backend", origin, ConfigError)})
    if "out" in config.model_fields_set and base is not None:
        update["out"] = os.path.normpath(base / os.path.expanduser(config.out))
    return config.model_copy(update=update)


# -- data -------------------------------------------------------------------------


def load_spec_or_model_file(problem: Any):
    """A spec from a YAML/JSON path/string/dict, or an MPS/LP file (`load_spec` reads
    both); a dict was written in the config's text, so the text's size limits hold."""
    return spec_from_text(problem) if isinstance(problem, dict) else load_spec(problem)


class TrainData(typing.NamedTuple):
    """A split of training data: `combolayer.data.Data`'s fields, and each instance's
    known cost ``(n, num_vars)`` (the spec's sense, added to the spec's own), or None."""

    features: torch.Tensor
    costs: torch.Tensor
    solutions: torch.Tensor
    spec: Any
    known_cost: torch.Tensor | None = None

    def split(self, num_train: int) -> tuple[TrainData, TrainData]:
        """The first ``num_train`` instances and the rest."""
        datasets._check_split(num_train, len(self.features))

        def part(index: slice) -> TrainData:
            known = None if self.known_cost is None else self.known_cost[index]
            return TrainData(*(t[index] for t in self[:3]), self.spec, known)

        return part(slice(None, num_train)), part(slice(num_train, None))


#: Instances to train and to test on that a generator makes unless the config says.
GENERATED_SPLIT = 1000


def generated_split(config: TrainConfig) -> tuple[int, int]:
    """``(num_train, num_test)`` for data a generator makes."""
    return config.num_train or GENERATED_SPLIT, config.num_test or GENERATED_SPLIT


def load_data(config: TrainConfig) -> tuple[datasets.Data | TrainData,
                                            datasets.Data | TrainData]:
    """The train and test split the config asks for."""
    if config.data.name is not None:
        num_train, num_test = generated_split(config)
        generator = getattr(datasets, config.data.name)
        data = generator(num_data=num_train + num_test, backend=config.layer.backend,
                         **config.data.options)
        return data.split(num_train)
    return _file_data(config)


#: The columns of a CSV data file that are not features (`read_csv`).
CSV_COLUMNS = ("instance", "entry", "cost", "known_cost", "solution")


def read_csv(path: Path, spec: Any) -> dict[str, np.ndarray | None]:
    """Training data from a CSV file with a header and one row per instance and cost
    entry, in any order:

    - ``instance``: the instance's id (instances are ordered by id);
    - ``entry``: the entry's flat index into ``cost_shape`` (row-major), ``0..N-1``;
    - ``cost``: the entry's true cost;
    - ``known_cost`` (optional): the entry's known cost in this instance, added to the
      spec's own (on the outputs; the auxiliaries keep the spec's);
    - ``solution`` (optional): the entry's value in the instance's optimal solution;
    - every other column: a feature of the entry, so ``features`` is
      ``(n, *cost_shape, p)``.

    Every instance has every entry exactly once. Returns the arrays `_file_data` checks."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        rows = list(reader)
    where = f"data.csv: {str(path)!r}"
    if not header or not rows:
        raise ConfigError(f"{where} has no header or no rows: expected a header with "
                          "'instance', 'entry', 'cost', optional 'known_cost' and 'solution', "
                          "and feature columns")
    header = [name.strip() for name in header]
    missing = [name for name in CSV_COLUMNS[:3] if name not in header]
    if missing:
        raise ConfigError(f"{where} has no column {missing[0]!r}: expected 'instance', "
                          f"'entry', 'cost' and feature columns; found {header}")
    feature_names = [name for name in header if name not in CSV_COLUMNS]
    if not feature_names:
        raise ConfigError(f"{where} has no feature column: every column other than "
                          f"{list(CSV_COLUMNS)} is a feature")
    try:
        table = np.array([[float(value) for value in row] for row in rows], dtype=float)
    except ValueError as error:
        raise ConfigError(f"{where} holds a value that is not a number ({error})") from None
    if table.ndim != 2 or table.shape[1] != len(header):
        raise ConfigError(f"{where}: every row needs {len(header)} values, one per column")
    column = {name: table[:, i] for i, name in enumerate(header)}
    ids, instance = np.unique(column["instance"], return_inverse=True)
    n, size = len(ids), math.prod(spec.cost_shape)
    entry = column["entry"]
    if not np.array_equal(entry, np.round(entry)) or entry.min() < 0 or entry.max() >= size:
        raise ConfigError(f"{where}: entry must be a whole number in 0..{size - 1} (the flat "
                          f"index into {spec.label}'s cost shape {spec.cost_shape})")
    entry = entry.astype(np.int64)
    counts = np.zeros((n, size), dtype=np.int64)
    np.add.at(counts, (instance, entry), 1)
    if not (counts == 1).all():
        i, j = np.argwhere(counts != 1)[0]
        raise ConfigError(f"{where}: instance {ids[i]:g} has entry {j} {counts[i, j]} times; "
                          f"every instance needs each of the {size} entries exactly once")

    def grid(values: np.ndarray) -> np.ndarray:
        out = np.empty((n, size, *values.shape[1:]))
        out[instance, entry] = values
        return out.reshape(n, *spec.cost_shape, *values.shape[1:])

    features = grid(np.stack([column[name] for name in feature_names], axis=1))
    known = None
    if "known_cost" in column:
        known = np.zeros((n, spec.num_vars))
        known[:, :size] = grid(column["known_cost"]).reshape(n, size)
    return {"features": features, "costs": grid(column["cost"]),
            "solutions": grid(column["solution"]) if "solution" in column else None,
            "known_cost": known}


def _read_npz(path: Path) -> dict[str, np.ndarray | None]:
    expected = ("expected an npz archive of numeric arrays (numpy.savez) with 'features' (n, p) "
                "or (n, *cost_shape, p), 'costs' (n, *cost_shape) and optional 'solutions' "
                "and 'known_cost'")
    # np.load reads anything that is not a zip or .npy as a pickle, which it refuses
    # with a message about pickled data: say what the file is not instead.
    if not zipfile.is_zipfile(path):
        raise ConfigError(f"data.npz: {str(path)!r} is not an npz archive of arrays: {expected}")
    with np.load(path, allow_pickle=False) as arrays:
        missing = [key for key in ("features", "costs") if key not in arrays]
        if missing:
            raise ConfigError(f"{path} has no array named {missing[0]!r}: expected 'features' "
                              f"(n, p), 'costs' (n, *cost_shape) and optional 'solutions'; "
                              f"found {sorted(arrays)}")
        try:
            features = np.asarray(arrays["features"], dtype=float)
            costs = np.asarray(arrays["costs"], dtype=float)
            solutions = (np.asarray(arrays["solutions"], dtype=float) if "solutions" in arrays
                         else None)
            known = (np.asarray(arrays["known_cost"], dtype=float) if "known_cost" in arrays
                     else None)
        except ValueError as error:  # object (pickled) arrays, or text that is no number
            raise ConfigError(f"data.npz: {str(path)!r} holds an array that is not numeric "
                              f"({error}): {expected}") from None
    return {"features": features, "costs": costs, "solutions": solutions, "known_cost": known}


def _check_optimal(path: Path, spec: Any, backend: Any, costs: np.ndarray,
                   solutions: np.ndarray) -> None:
    """Refuse given solutions that are not optimal for their costs (the regret divides by
    their objective: all-zero solutions of an assignment gave a regret of 1.8e9)."""
    axes = tuple(range(1, costs.ndim))
    given = (costs * solutions).sum(axis=axes)
    best = (costs * make_solver(spec, backend).solve(costs)).sum(axis=axes)
    off = np.flatnonzero(np.abs(given - best) > 1e-6 * np.maximum(1.0, np.abs(best)))
    if len(off):
        i = int(off[0])
        raise ConfigError(f"{path}: solutions row {i} is not optimal for its costs "
                          f"(objective {given[i]:.6g}, the optimum is {best[i]:.6g}; "
                          f"{len(off)} of {len(costs)} rows): pass the optimal solutions, or "
                          "leave solutions out to have them solved")


def _file_data(config: TrainConfig) -> tuple[TrainData, TrainData]:
    """The split of an npz or csv data file, checked against the config's problem."""
    key = "npz" if config.data.npz is not None else "csv"
    path = Path(getattr(config.data, key))
    if not path.is_file():
        raise ConfigError(f"data.{key}: no file named {str(path)!r}")
    spec = load_spec_or_model_file(config.problem)
    arrays = _read_npz(path) if key == "npz" else read_csv(path, spec)
    features, costs = arrays["features"], arrays["costs"]
    solutions, known = arrays["solutions"], arrays["known_cost"]
    n, shape = len(costs), tuple(spec.cost_shape)
    per_entry = features.ndim == 2 + len(shape) and tuple(features.shape[1:-1]) == shape
    if not (features.ndim == 2 or per_entry) or len(features) != n:
        raise ConfigError(f"{path}: features has shape {features.shape}, expected "
                          f"({n}, num_features) or ({n}, {', '.join(map(str, shape))}, "
                          f"num_features) to match costs' {n} rows")
    bad = np.flatnonzero(~np.isfinite(features.reshape(n, -1)).all(axis=1)) if n else []
    if len(bad):
        raise ConfigError(f"{path}: features must be finite, got NaN or inf in row {bad[0]} "
                          f"({len(bad)} of {n} rows)")
    if config.model.per_entry and not per_entry:
        raise ConfigError(f"{path}: model.per_entry needs features per cost entry, "
                          f"({n}, {', '.join(map(str, shape))}, num_features); got "
                          f"{features.shape}")
    if costs.shape[1:] != shape:
        if costs[0].size != math.prod(shape):
            raise ConfigError(f"{path}: costs has shape {costs.shape} but {spec.label} expects "
                              f"({n}, {', '.join(map(str, shape))})")
        costs = costs.reshape(n, *shape)
    if known is not None:
        num_vars = spec.num_vars
        if known.shape[1:] == shape and known.shape[1:] != (num_vars,):
            known = np.concatenate([known.reshape(n, -1),
                                    np.zeros((n, num_vars - math.prod(shape)))], axis=1)
        try:
            known = check_known_cost(spec.label, num_vars, (n,), known, known)
        except ValueError as error:
            raise ConfigError(f"{path}: {error}") from None
    if solutions is None:
        solutions = make_solver(spec, config.layer.backend).solve(costs, known_cost=known)
    elif solutions.shape != costs.shape:
        raise ConfigError(f"{path}: solutions has shape {solutions.shape}, expected {costs.shape}")
    elif known is None:
        _check_optimal(path, spec, config.layer.backend, costs, solutions)
    num_train = config.num_train or max(1, int(0.8 * n))
    num_test = config.num_test or n - num_train
    if num_train + num_test > n or num_test < 1:
        raise ConfigError(f"{path} has {n} instances: not enough for num_train={num_train} "
                          f"and num_test={num_test}")
    as_tensor = lambda a: torch.as_tensor(a, dtype=torch.float32)  # noqa: E731
    # known costs in float64: a float32 rounding would move the objective the data means
    data = TrainData(as_tensor(features), as_tensor(costs), as_tensor(solutions), spec,
                     None if known is None else torch.as_tensor(known, dtype=torch.float64))
    train, test = data.split(num_train)
    return train, test.split(num_test)[0]


# -- the loop ---------------------------------------------------------------------


@dataclass
class History:
    """Per-epoch records of one training run."""

    name: str
    regret: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)

    @property
    def seconds_per_epoch(self) -> float:
        return sum(self.seconds) / max(len(self.seconds), 1)

    def write_csv(self, path: Path) -> Path:
        """``epoch, train_loss, test_regret, seconds`` per epoch."""
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["epoch", "train_loss", "test_regret", "seconds"])
            for i, row in enumerate(zip(self.loss, self.regret, self.seconds), start=1):
                writer.writerow([i, *(f"{v:.6g}" for v in row)])
        return path


#: The most parameters `cost_model` builds (400 MB of float32): a typo such as
#: ``hidden: [10000000]`` is refused instead of exhausting memory.
MAX_MODEL_PARAMETERS = 100_000_000


def cost_model(num_features: int, cost_shape: tuple[int, ...], hidden: list[int] = ()) -> nn.Module:
    """Features ``(B, p)`` to costs ``(B, *cost_shape)``: linear, or an MLP with ReLU
    ``hidden`` layers."""
    sizes = [num_features, *hidden, math.prod(cost_shape)]
    if min(sizes) < 1:
        raise ConfigError(f"model.hidden sizes must be >= 1, got {list(hidden)}")
    parameters = sum((a + 1) * b for a, b in zip(sizes, sizes[1:]))
    if parameters > MAX_MODEL_PARAMETERS:
        raise ConfigError(f"the cost model {' -> '.join(map(str, sizes))} has {parameters:,} "
                          f"parameters, above the limit of {MAX_MODEL_PARAMETERS:,}: expected "
                          "smaller model.hidden sizes")
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    if len(cost_shape) > 1:
        layers.append(nn.Unflatten(1, cost_shape))
    return layers[0] if len(layers) == 1 else nn.Sequential(*layers)


class EntryModel(nn.Module):
    """One model shared by every cost entry: features ``(B, *cost_shape, p)`` to costs
    ``(B, *cost_shape)``, each entry's ``p`` features through the same linear map or
    MLP with ReLU ``hidden`` layers (a driver-request pair's pick-up cost from the
    pair's features, whatever the pair)."""

    def __init__(self, num_features: int, hidden: list[int] = ()) -> None:
        super().__init__()
        self.net = cost_model(num_features, (1,), hidden)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features).squeeze(-1)


def build_model(features_shape: tuple[int, ...], cost_shape: tuple[int, ...],
                config: ModelConfig) -> nn.Module:
    """The cost model for features of shape ``(B, *features_shape)``: `EntryModel` with
    ``config.per_entry``; otherwise `cost_model` on the features, flattened first when
    they are per entry."""
    if config.per_entry:
        return EntryModel(features_shape[-1], config.hidden)
    if len(features_shape) == 1:
        return cost_model(features_shape[0], cost_shape, config.hidden)
    return nn.Sequential(nn.Flatten(1), cost_model(math.prod(features_shape), cost_shape,
                                                   config.hidden))


def default_loss(spec: Any, known_cost: torch.Tensor | None = None) -> str:
    """``combolayer train``'s loss when the config names none: ``"spo+"`` when there is a
    known cost (the spec's, or ``known_cost`` per instance), whose affine formula counts
    it (under the regret, Identity learns only where "auto" can normalise the total cost,
    and SPO+ learned better on the dispatch model: docs/training.md); else
    ``"regret"``."""
    known = getattr(spec, "known_cost", None)
    if (known is not None and any(known)) or known_cost is not None:
        return "spo+"
    return "regret"


def check_loss(loss: str, layer: ComboLayer, known_cost: torch.Tensor | None) -> None:
    """`ConfigError` for a loss that cannot learn here, with the fix: through the layer
    with Identity, a known cost on the auxiliaries (the spec's or the instances') leaves
    nothing to bound the prediction's scale; a loss that does not count a per-instance
    known cost cannot take one."""
    on_aux = layer.solver.weighs_aux(known_cost)
    method = getattr(layer.method, "name", type(layer.method).__name__)
    if on_aux and loss not in OWN_SOLVER and method == "identity":
        raise ConfigError(
            f"loss {loss!r} through method 'identity' does not learn on {layer.spec.label}: "
            "its known cost weighs the auxiliaries, so projection 'auto' cannot normalise the "
            "prediction and its scale grows without bound; use loss: spo+ (the default "
            "with a known cost)")
    if known_cost is not None and loss == "cave":
        raise ConfigError(f"loss {loss!r} does not take a known cost per instance (the data's "
                          "known_cost); use loss: spo+ (the default with a known cost) or a "
                          "loss through the layer")


def normalized_regret(layer: ComboLayer, model: nn.Module, test: datasets.Data) -> float:
    """PyEPO's normalized regret of the model's decisions on ``test``, the model in eval
    mode (its dropout off, its batch norm's statistics read, not updated, by the test
    data), then back in the mode it was in."""
    layer.eval()
    solver = layer.solver
    known = getattr(test, "known_cost", None)  # each instance's own, from the data
    # A known cost on the auxiliaries counts in the objective: their values are needed.
    on_aux = solver.weighs_aux(known)
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            costs = model(test.features)
    finally:
        model.train(training)
    if on_aux:
        y_pred, aux_pred = solver.solve(costs, return_aux=True, known_cost=known)
    else:
        y_pred, aux_pred = solver.solve(costs, known_cost=known), None
    # The data carries the true optima: nothing to re-solve per epoch.
    return float(metrics.normalized_regret(layer.spec, test.costs, y_pred, y_true=test.solutions,
                                           aux_pred=aux_pred, known_cost=known))


def seed_pool(layer: ComboLayer, data: datasets.Data) -> None:
    """Seed ``layer.pool`` with the true solutions of ``data``, as its pool keeps them.

    A pool that keeps the outputs (`pool_width` ``N``) takes ``data.solutions``. One
    that keeps whole solutions ``concat(y, aux)`` (the spec has a known cost, which
    ranks them) takes the optima of ``data.costs`` (with the data's own known cost),
    solved once, whole: the data holds no auxiliaries.
    """
    solver = layer.solver
    if solver.pool_width == solver.num_outputs:
        layer.pool.seed(data.solutions)
        return
    with torch.no_grad():
        y, aux = solver.solve(data.costs, return_aux=True,
                              known_cost=getattr(data, "known_cost", None))
    layer.pool.seed(torch.cat([y.reshape(len(y), -1), aux.reshape(len(aux), -1)], dim=1))


def fit(
    layer: ComboLayer,
    train: datasets.Data,
    test: datasets.Data,
    *,
    name: str = "",
    epochs: int = 20,
    lr: float = 1e-2,
    batch_size: int = 32,
    seed: int = 0,
    model: nn.Module | None = None,
    loss: str = "regret",
    progress: tqdm | None = None,
) -> History:
    """Train a cost model through ``layer``; record the training loss and test regret.

    Args:
        layer: the layer the model's costs go through.
        train: the [`combolayer.data.Data`][combolayer.data.Data] split to train on.
        test: the split the regret is measured on after each epoch.
        model: features ``(B, p)`` -> costs ``(B, *cost_shape)``; default linear.
            Trained in place. Features per cost entry (`TrainData`) need a model built
            for them (`build_model`).
        loss: one of `LOSSES`: ``"regret"`` (default), ``"l1"`` or ``"hamming"``
            (through the layer), ``"spo+"``, ``"fenchel_young"`` or ``"cave"``
            (whose binding cones are computed once, here, for ``train``).

    The regret and the Hamming loss (PyEPO's form) are linear in y: their gradient
    is nonzero on correct outputs too, unlike ``|y - y_true|`` ("l1"), whose
    gradient vanishes there. But under a loss linear in y, Identity's gradient
    does not depend on y at all, so its ``noise`` cannot act; under "l1" it does,
    and is needed (docs/training.md, "Which loss"). A layer setting that cannot
    act under ``loss`` warns once (`inactive_settings`).
    """
    for split_name, part in (("train", train), ("test", test)):
        if not len(part.features):
            # an empty test split measured a regret of 0: a perfect score for no data
            raise InputError(f"fit: the {split_name} split is empty; give it instances")
    for message in inactive_settings(layer, loss):
        warnings.warn(message, UserWarning, stacklevel=2)
    torch.manual_seed(seed)
    if model is None:
        model = cost_model(train.features.shape[1], tuple(layer.spec.cost_shape))
    if layer.solve_ratio < 1.0:
        # PyEPO seeds its cache with the dataset's true solutions; so does fit.
        seed_pool(layer, train)
    known = getattr(train, "known_cost", None)  # each instance's own, from the data
    criterion = _criterion(loss, layer)
    # CaVE's cones of the true solutions, read once, not in every step
    cones = binding_cones(layer.spec, train.solutions) if loss == "cave" else None
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(train.features, train.costs, train.solutions,
                                       torch.arange(len(train.features))),
        batch_size=batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )
    history = History(name)
    for epoch in range(epochs):
        start = time.perf_counter()
        layer.set_epoch(epoch)  # the layer's noise schedule, if it has one
        layer.train()
        model.train()
        total = 0.0
        for x, c, y_true, index in loader:
            if known is not None:
                value = criterion(model(x), c, y_true, known[index])
            elif cones is None:
                value = criterion(model(x), c, y_true)
            else:
                value = criterion(model(x), y_true, binding=cones[index])
            optimizer.zero_grad()
            value.backward()
            optimizer.step()
            total += float(value.detach()) * len(x)
        history.seconds.append(time.perf_counter() - start)
        history.loss.append(total / len(train.features))
        history.regret.append(normalized_regret(layer, model, test))
        if progress is not None:
            progress.set_postfix(method=name, regret=f"{history.regret[-1]:.3f}")
            progress.update()
    return history


def inactive_settings(layer: ComboLayer, loss: str) -> list[str]:
    """What the layer sets that cannot change training under ``loss``, each a sentence.

    - A loss that holds its own solver (``spo+``, ``fenchel_young``) never calls the
      layer while training, and the test regret solves without it: the layer's
      ``method``, ``projection`` and ``noise`` do nothing.
    - A loss linear in y (``regret``, ``hamming``) has a constant ``dL/dy``; Identity's
      backward, ``-(dP/dw)^T dL/dy``, then does not depend on y, so the noise (which
      only changes y) leaves every gradient, and the trained model, as it was.
    """
    method = getattr(layer.method, "name", type(layer.method).__name__)
    if loss in OWN_SOLVER:
        set_here = []
        if method != "identity":
            set_here.append(f"method={method!r}")
        if layer._projection_name != "auto":
            set_here.append(f"projection={layer._projection_name!r}")
        if layer.noise is not None:
            set_here.append(f"noise={layer.noise_level:g}")
        if set_here:
            return [f"layer {', '.join(set_here)} cannot act under loss {loss!r}: the loss "
                    "solves with its own solver, and the layer is used only to decide at "
                    "test time, without them; use loss 'regret' or 'l1' to train through "
                    "the layer"]
        return []
    if loss in LINEAR_IN_Y and method == "identity" and layer.noise is not None:
        return [f"layer noise={layer.noise_level:g} cannot act under loss {loss!r} with "
                "method 'identity': the loss is linear in y, so Identity's gradient does not "
                "depend on the solver's output and the noise changes nothing the model "
                "learns; use loss 'l1' (|y - y_true|), under which it acts, or a method that "
                "solves again in its backward pass (blackbox)"]
    return []


def _criterion(loss: str, layer: ComboLayer):
    """``criterion(w, c, y_true, known=None)``; ``known``: the batch's own known costs."""
    # the true solution goes to the layer too, for an estimator that reads it (Margin)
    if loss == "hamming":
        return lambda w, c, y_true, known=None: hamming(
            layer(w, target=y_true, known_cost=known), y_true)
    if loss == "l1":
        return lambda w, c, y_true, known=None: (layer(w, target=y_true, known_cost=known)
                                                 - y_true).abs().mean()
    if loss == "regret":
        k, sign = len(layer.spec.cost_shape), layer.solver.sign
        shape, n = layer.spec.cost_shape, layer.solver.num_outputs
        spec_known = layer.solver.known_like(torch.zeros((), dtype=torch.float64),
                                             folded=False)

        def regret(w, c, y_true, known=None):
            # the decision's whole objective, known cost counted: its part on the outputs
            # is what dL/dy must see (the auxiliaries' part is no function of y here)
            total = c if spec_known is None else c + spec_known[:n].reshape(shape).to(c)
            if known is not None:
                total = total + known[:, :n].reshape(len(c), *shape).to(c)
            y = layer(w, target=y_true, known_cost=known)
            return (sign * inner(total, y - y_true, k)).mean()

        return regret
    if loss == "spo+":
        spo = SPOPlusLoss(layer.spec, backend=layer.solver, solve_ratio=layer.solve_ratio,
                          pool=layer.pool, generator=layer.generator)
        return lambda w, c, y_true, known=None: spo(w, c, y_true, known_cost=known)
    if loss == "fenchel_young":
        fy = FenchelYoungLoss(layer.spec, backend=layer.solver, solve_ratio=layer.solve_ratio,
                              pool=layer.pool, generator=layer.generator)
        return lambda w, c, y_true, known=None: fy(w, y_true, known_cost=known)
    if loss == "cave":
        return CaVELoss(layer.spec, backend=layer.solver, solve_ratio=layer.solve_ratio,
                        generator=layer.generator)
    raise ConfigError(f"unknown loss {loss!r}: expected one of {list(LOSSES)}")


def save_plot(histories: list[History], path: Path, title: str = "") -> Path | None:
    """Test regret per epoch, one line per history; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        warnings.warn("matplotlib is not installed: no plot (pip install combolayer[plot])",
                      stacklevel=2)
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for h in histories:
        ax.plot(range(1, len(h.regret) + 1), h.regret, marker="o", markersize=3, label=h.name)
    ax.set(xlabel="epoch", ylabel="normalized test regret", title=title)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def run(config: TrainConfig, out: str | os.PathLike | None = None) -> tuple[History, Path]:
    """Train as ``config`` says; write ``history.csv``, ``regret.png``, ``model.pt``
    (the cost model's ``state_dict``), ``config.json`` (the config with every path
    resolved and, for generated data, the generator's defaults and sizes), ``spec.json``
    (the problem) and ``model.json`` (the model's shapes)
    to the run directory, which `load_run` reads back."""
    folder = Path(out if out is not None else config.out).resolve()
    train_data, test_data = load_data(config)
    known = getattr(train_data, "known_cost", None)
    loss = config.loss or default_loss(train_data.spec, known)
    with warnings.catch_warnings():
        if loss == "spo+":  # its gradient is SPO+'s: the layer's advice on Identity is moot
            warnings.filterwarnings("ignore", message=r"projection .* known cost",
                                    category=UserWarning)
        layer = ComboLayer(train_data.spec, **config.layer.model_dump())
    check_loss(loss, layer, known)
    torch.manual_seed(config.seed)
    features_shape = tuple(train_data.features.shape[1:])
    model = build_model(features_shape, tuple(train_data.spec.cost_shape), config.model)
    with tqdm(total=config.epochs, desc="train") as bar:
        history = fit(layer, train_data, test_data, name=_run_name(config, loss),
                      epochs=config.epochs, lr=config.lr, batch_size=config.batch_size,
                      seed=config.seed, model=model, loss=loss, progress=bar)
    folder.mkdir(parents=True, exist_ok=True)
    history.write_csv(folder / "history.csv")
    save_plot([history], folder / "regret.png", title=train_data.spec.label)
    torch.save(model.state_dict(), folder / "model.pt")
    # the config as it ran: an --out given beside it is where the run went, and a backend
    # config file's contents (the folder does not depend on files beside the run)
    saved = config.model_dump() | {"out": str(folder), "loss": loss,
                                   "data": config.data.as_run()}
    if config.data.name is not None:  # the sizes and arguments the generator was given
        saved["num_train"], saved["num_test"] = generated_split(config)
    if isinstance(config.layer.backend, str) and is_path(config.layer.backend):
        saved["layer"]["backend"] = layer.backend_config.model_dump(mode="json")
    (folder / "config.json").write_text(json.dumps(saved, indent=2) + "\n")
    (folder / "spec.json").write_text(train_data.spec.model_dump_json(indent=2) + "\n")
    shapes = {"num_features": int(features_shape[-1]), "features_shape": list(features_shape),
              "per_entry": config.model.per_entry,
              "cost_shape": list(train_data.spec.cost_shape), "hidden": config.model.hidden,
              "backend": layer.solver.backend}
    (folder / "model.json").write_text(json.dumps(shapes, indent=2) + "\n")
    return history, folder


def load_run(path: str | os.PathLike) -> tuple[nn.Module, ComboLayer]:
    """The trained cost model and its layer from a ``combolayer train`` run folder.

    Reads ``model.json`` (the model's shapes), ``model.pt`` (its weights),
    ``spec.json`` (the problem) and ``config.json`` (the layer's arguments). Both come
    back in eval mode, ready to predict and solve: ``layer(model(features))``.

    Args:
        path: the run folder ``combolayer train`` wrote (its ``out``).

    Returns:
        ``(model, layer)``: the cost model and the [`ComboLayer`][combolayer.ComboLayer].

    Raises:
        FileNotFoundError: ``path`` is not a run folder; the message names the
            missing file.
        SpecError: spec.json is invalid or declares a model above the size limits
            of a spec that is read (`combolayer.specs.base.MAX_VARIABLES`), or a
            file is not a JSON mapping.
        ConfigError: model.json or config.json holds a value of the wrong kind, or a
            ``cost_shape`` other than the spec's.

    Examples:
        >>> model, layer = cl.training.load_run("runs/train")  # doctest: +SKIP
        >>> decisions = layer(model(features))                  # doctest: +SKIP
    """
    folder = Path(path)
    needed = ("model.json", "model.pt", "spec.json", "config.json")
    missing = [name for name in needed if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{str(folder)!r} is not a complete combolayer train run folder: no {missing[0]} "
            f"(expected {', '.join(needed)}; runs written before combolayer 0.1's load_run "
            "lack model.json and spec.json)")
    shapes = read_mapping(folder / "model.json", what="model.json")
    config = read_mapping(folder / "config.json", what="config.json")
    # the spec is read like any other: its declared sizes are bounded before it is built
    spec = load_spec(folder / "spec.json")
    num_features, cost_shape = shapes.get("num_features"), shapes.get("cost_shape")
    if isinstance(num_features, bool) or not isinstance(num_features, int) or num_features < 1:
        raise ConfigError(f"{folder / 'model.json'}: num_features must be a whole number >= 1, "
                          f"got {num_features!r}")
    if not isinstance(cost_shape, list) or tuple(cost_shape) != spec.cost_shape:
        raise ConfigError(f"{folder / 'model.json'}: cost_shape is {cost_shape!r} but spec.json's "
                          f"{spec.label} expects {list(spec.cost_shape)}: the files are not from "
                          "one run")
    try:
        model_config = ModelConfig.model_validate({"hidden": shapes.get("hidden", []),
                                                   "per_entry": shapes.get("per_entry", False)})
        layer_arguments = LayerConfig.model_validate(config.get("layer", {})).model_dump()
    except ValidationError as error:
        raise ConfigError(f"{folder}: invalid model.json or config.json: "
                          + "; ".join(f"{'.'.join(map(str, item['loc']))}: {item['msg']}"
                                      for item in error.errors())) from None
    # runs before per-entry features wrote no features_shape: (num_features,) then
    features_shape = shapes.get("features_shape", [num_features])
    if (not isinstance(features_shape, list) or not features_shape
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1
                       for d in features_shape) or features_shape[-1] != num_features):
        raise ConfigError(f"{folder / 'model.json'}: features_shape must be a list of whole "
                          f"numbers >= 1 ending with num_features ({num_features}), got "
                          f"{features_shape!r}")
    model = build_model(tuple(features_shape), spec.cost_shape, model_config)
    model.load_state_dict(torch.load(folder / "model.pt", weights_only=True))
    layer = ComboLayer(spec, **layer_arguments)
    return model.eval(), layer.eval()


def _run_name(config: TrainConfig, loss: str | None = None) -> str:
    layer = config.layer
    method = layer.method if isinstance(layer.method, str) else layer.method.get("name", "method")
    return f"{method}, {layer.projection} projection, {loss or config.loss} loss"


def train(args: Any) -> int:
    """``combolayer train CONFIG [--out DIR]`` (keys: docs/training.md)."""
    config = load_config(args.config)
    history, folder = run(config, out=getattr(args, "out", None))
    print(f"normalized test regret {history.regret[-1]:.4f} after {len(history.regret)} epochs, "
          f"{history.seconds_per_epoch:.3f} s/epoch")
    print(f"wrote {folder / 'history.csv'}, {folder / 'regret.png'}, {folder / 'model.pt'}")
    print(f"reload the model and its layer with cl.training.load_run({str(folder)!r})")
    return 0
