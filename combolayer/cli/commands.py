"""Functions behind the ``combolayer`` subcommands (see `combolayer.cli.main`).

Each takes the parsed ``argparse`` namespace, prints for a person, and returns
an exit code (``None`` means 0).
"""

from __future__ import annotations

import argparse
import io
import json
import re
from pathlib import Path

import numpy as np

from ..errors import InputError


def analyze(args: argparse.Namespace) -> int:
    """``combolayer analyze SPEC [--exact] [--full]``: the hull dimension, its equations,
    the fixed outputs and the projection ``"auto"`` will use."""
    from ..analysis.hull import analyze as analyze_spec
    from ..analysis.text import describe
    from ..specs.load import load_spec

    spec = load_spec(args.spec)
    print(describe(spec, analyze_spec(spec, exact=args.exact), full=args.full))
    return 0


#: ``--costs`` files larger than this are refused before reading (a cost file of a
#: model within `combolayer.specs.load.MAX_TEXT_VARIABLES` is far smaller).
MAX_COSTS_BYTES = 1 << 30


def load_costs(path: Path) -> np.ndarray:
    """Costs from ``.npy``, ``.npz`` (its one array, or the one named ``costs``), a JSON
    array, or whitespace/comma-separated text.

    Raises:
        ValueError: not a regular file (``/dev/zero``), larger than `MAX_COSTS_BYTES`,
            or not one of those formats; the message names what was expected.
    """
    formats = "expected a .npy or .npz array, a JSON array or comma/space-separated text"
    if not path.is_file():
        what = "no file" if not path.exists() else "not a regular file"
        raise InputError(f"--costs {str(path)!r}: {what}; {formats}")
    if path.stat().st_size > MAX_COSTS_BYTES:
        raise InputError(f"--costs {str(path)!r} has {path.stat().st_size:,} bytes, above the "
                         f"limit of {MAX_COSTS_BYTES:,}")
    if path.suffix == ".npy":
        return _numeric(np.load(path, allow_pickle=False), path)
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as arrays:
            names = list(arrays.files)
            if len(names) != 1 and "costs" not in names:
                raise InputError(f"--costs {str(path)!r} holds the arrays {names}: expected one "
                                 "array, or one named 'costs'")
            return _numeric(arrays["costs" if "costs" in names else names[0]], path)
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise InputError(f"--costs {str(path)!r} is neither text nor a .npy/.npz file "
                         f"(by its suffix); {formats}") from None
    if text.lstrip().startswith("["):
        # JSON reads true/false as 1/0 and null as NaN: a cost is a number
        word = re.search(r"\b(true|false|null)\b", text)
        if word:
            raise InputError(f"--costs {str(path)!r} holds {word.group()}: expected numbers only")
    try:
        if text.lstrip().startswith("["):
            return np.asarray(json.loads(text), dtype=float)
        return np.loadtxt(io.StringIO(text), delimiter="," if "," in text else None, ndmin=1)
    except ValueError as error:  # numpy's and json's own words name neither flag nor file
        first = str(error).split(";")[0].strip()
        raise InputError(f"--costs {str(path)!r} could not be read ({first}); {formats}, "
                         "one instance per row, every row as long") from None


def _numeric(array: np.ndarray, path: Path) -> np.ndarray:
    """``array`` when it holds real numbers; a boolean mask is not a cost."""
    if array.dtype.kind not in "iuf":
        raise InputError(f"--costs {str(path)!r} holds an array of dtype {array.dtype}: expected "
                         "real numbers (integer or float)")
    return array


def solve(args: argparse.Namespace) -> int:
    """``combolayer solve SPEC [--costs FILE]``: the optimal solution of each instance.

    Prints one JSON object ``{"solution": ..., "objective": ...}`` to stdout and
    nothing else, so the output pipes into ``jq``; the spec and backend line goes
    to stderr. The objective is the model's, ``<w, y> + <known_cost, x>``. Without
    ``--costs``, an MPS/LP file's own objective is solved, and its constant term counts.
    """
    import logging
    import sys
    import time

    from ..backends.registry import make_solver
    from ..backends.solver import inner

    solver = make_solver(args.spec, args.backend)
    offset = 0.0  # a model file's constant objective term, with its own objective
    if args.costs is not None:
        costs = load_costs(Path(args.costs))
    elif getattr(solver.spec, "default_cost", None) is not None:
        costs = np.asarray(solver.spec.default_cost, dtype=float)
        offset = getattr(solver.spec, "default_offset", 0.0)
    else:
        raise InputError(
            f"--costs is required for {solver.spec.label}: only MPS/LP files carry a "
            "default cost (their objective)"
        )
    shape = solver.cost_shape
    if costs.size == 0:
        raise InputError(f"--costs holds no numbers (shape {costs.shape}): expected one or more "
                         f"instances' costs of shape {shape} for {solver.spec.label}")
    trailing = costs.shape[max(costs.ndim - len(shape), 0) :]
    if trailing != shape:
        if costs.shape[-1] != solver.num_outputs:
            raise InputError(
                f"--costs has shape {costs.shape}, but {solver.spec.label} takes costs of "
                f"shape {shape} per instance (or one flat row of {solver.num_outputs} per "
                "instance)")
        costs = costs.reshape(*costs.shape[:-1], *shape)  # one flat row per instance
    # The objective counts the spec's known cost, whose part on the auxiliaries needs
    # their values.
    on_aux = solver.weighs_aux()
    start = time.perf_counter()
    y, aux = solver.solve(costs, return_aux=True) if on_aux else (solver.solve(costs), None)
    logging.getLogger(__name__).debug(
        "%s: %d instances solved on %r in %.4f s", solver.spec.label,
        y.size // solver.num_outputs, solver.backend, time.perf_counter() - start)
    objective = inner(costs, y, len(shape)) + solver.known_value(y, aux) + offset
    print(f"{solver.spec.label} on backend {solver.backend!r}", file=sys.stderr)
    print(json.dumps({"solution": y.tolist(), "objective": objective.tolist()}))
    return 0


def reproduce(args: argparse.Namespace) -> int:
    """``combolayer reproduce [NAME] [--list] [--quick] [--seeds N] [--scale cpu|paper]
    [--device D] [--out DIR] [--set KEY=VALUE ...] [--report]``: run a paper
    experiment, list them, or render docs/results.md from the committed runs."""
    import sys
    import time

    from ..experiments import describe, experiments, get
    from ..experiments.core import SMOKE, execute
    from ..experiments.report import render
    from ..specs.load import read_yaml

    benchmarks = _benchmarks()
    if args.list:
        for name, module in experiments().items():
            print(f"{name:<16} {describe(module)}")
        for name, path in benchmarks.items():
            print(f"{name:<16} library benchmark: python {path.relative_to(path.parents[1])}")
        return 0
    if args.report:
        print(f"wrote {render()}", file=sys.stderr)
        return 0
    if args.experiment is None:
        raise InputError("name an experiment, or use --list / --report")
    if args.experiment in benchmarks and args.experiment not in experiments():
        import runpy

        script = benchmarks[args.experiment]
        given = [flag for flag, value in (("--quick", args.quick), ("--seeds", args.seeds),
                                          ("--scale", args.scale != "cpu"),
                                          ("--device", args.device), ("--out", args.out),
                                          ("--set", args.set)) if value]
        if given:  # its own options differ: --out is a page, and some take no --quick
            print(f"combolayer reproduce: {args.experiment} is a library benchmark, run as "
                  f"it is (full length, writing its block into its docs page), without "
                  f"{', '.join(given)}; for its own options: python "
                  f"{script.relative_to(script.parents[1])} --help", file=sys.stderr)
            return 2
        sys.argv = [str(script)]
        sys.path.insert(0, str(script.parent))  # as `python benchmarks/NAME.py` has it
        runpy.run_path(sys.argv[0], run_name="__main__")
        return 0
    try:
        module = get(args.experiment)
    except KeyError as error:
        raise InputError(error.args[0]) from None
    overrides = dict(module.PAPER_SCALE) if args.scale == "paper" else {}
    if args.quick:
        overrides.update(module.QUICK)
        if args.scale == "paper":  # where the paper's model needs a smaller slice still
            overrides.update(getattr(module, "PAPER_QUICK", {}))
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = read_yaml(value, "--set's value", repr(item))
    if args.quick:
        overrides["quick"] = True
    if args.seeds is not None:
        overrides["seeds"] = list(range(args.seeds))
    if args.device is not None:
        overrides["device"] = args.device
    if args.out is not None:
        overrides["out"] = args.out
    config = _experiment_config(module, overrides, args.experiment)
    start = time.perf_counter()
    result = execute(module.run, config)
    if result.quick:  # a smoke run claims nothing (core.smoke): the claims, no verdicts
        print(f"{SMOKE}; the claims a full run judges:")
    for claim in result.claims:
        print(f"- {claim.claim}" if result.quick else
              f"[{claim.verdict}] {claim.claim}: {claim.evidence}")
    out = config.out or f"runs/{args.experiment}"
    print(f"{args.experiment}: {time.perf_counter() - start:.0f} s; results in {out}/",
          file=sys.stderr)
    return 0


def _experiment_config(module, overrides: dict, name: str):
    """``module.Config(**overrides)``, refused with one line naming each bad key and value
    (from ``--set``, ``--seeds``, ``--device``, ``--out``) before anything runs."""
    from pydantic import ValidationError

    from ..specs.base import did_you_mean

    try:
        config = module.Config(**overrides)
    except ValidationError as error:
        problems = []
        for item in error.errors():
            where = ".".join(str(part) for part in item["loc"]) or "config"
            if item["type"] == "extra_forbidden":
                hint = did_you_mean(where, list(module.Config.model_fields))
                problems.append(f"unknown key {where!r}{hint}")
            else:
                message = item["msg"].removeprefix("Value error, ")
                problems.append(f"{where}: {message}, got {item.get('input')!r}")
        raise InputError(f"invalid {name} config: " + "; ".join(problems)) from None
    if getattr(config, "device", None) == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise InputError("--device cuda: torch sees no CUDA device here "
                             "(torch.cuda.is_available() is False); expected --device cpu")
    out = getattr(config, "out", None) or Path("runs") / name
    if Path(out).exists() and not Path(out).is_dir():
        raise InputError(f"--out {str(out)!r} is a file: expected a folder (new or existing) for "
                         "results.json")
    return config


def _benchmarks() -> dict[str, Path]:
    """The library's own benchmarks, ``benchmarks/NAME.py``, when run from a source checkout
    (``_NAME.py`` files are their shared helpers)."""
    folder = Path(__file__).resolve().parents[2] / "benchmarks"
    return ({p.stem: p for p in sorted(folder.glob("[!_]*.py"))} if folder.is_dir() else {})
