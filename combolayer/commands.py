"""Functions behind the ``combolayer`` subcommands (see :mod:`combolayer.cli`).

Each takes the parsed ``argparse`` namespace, prints for a person, and returns
an exit code (``None`` means 0).
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import numpy as np


def analyze(args: argparse.Namespace) -> int:
    """``combolayer analyze SPEC [--exact]``: the hull dimension, its equations,
    the fixed outputs and the projection ``"auto"`` will use."""
    from .analysis import analyze as analyze_spec
    from .analysis import describe
    from .io import load_spec

    spec = load_spec(args.spec)
    print(describe(spec, analyze_spec(spec, exact=args.exact)))
    return 0


def load_costs(path: Path) -> np.ndarray:
    """Costs from ``.npy``, a JSON array, or whitespace/comma-separated text."""
    if path.suffix == ".npy":
        return np.load(path, allow_pickle=False)
    text = path.read_text()
    if text.lstrip().startswith("["):
        return np.asarray(json.loads(text), dtype=float)
    return np.loadtxt(io.StringIO(text), delimiter="," if "," in text else None, ndmin=1)


def solve(args: argparse.Namespace) -> int:
    """``combolayer solve SPEC [--costs FILE]``: the optimal solution of each cost row.

    Prints one JSON object ``{"solution": ..., "objective": ...}`` to stdout and
    nothing else, so the output pipes into ``jq``; the spec and backend line goes
    to stderr. Without ``--costs``, an MPS/LP file's own objective is solved.
    """
    import logging
    import sys
    import time

    from .backends.registry import make_solver
    from .backends.solver import inner

    solver = make_solver(args.spec, args.backend)
    if args.costs is not None:
        costs = load_costs(Path(args.costs))
    elif getattr(solver.spec, "default_cost", None) is not None:
        costs = np.asarray(solver.spec.default_cost, dtype=float)
    else:
        raise ValueError(
            f"--costs is required for {solver.spec.label}: only MPS/LP files carry a "
            "default cost (their objective)"
        )
    shape = solver.cost_shape
    trailing = costs.shape[max(costs.ndim - len(shape), 0) :]
    if trailing != shape and costs.size % solver.num_outputs == 0:
        costs = costs.reshape(-1, *shape)  # one flat row per instance
    start = time.perf_counter()
    y = solver.solve(costs)
    logging.getLogger(__name__).debug(
        "%s: %d cost rows solved on %r in %.4f s", solver.spec.label,
        y.size // solver.num_outputs, solver.backend, time.perf_counter() - start)
    objective = inner(costs, y, len(shape))
    print(f"{solver.spec.label} on backend {solver.backend!r}", file=sys.stderr)
    print(json.dumps({"solution": y.tolist(), "objective": objective.tolist()}))
    return 0


def reproduce(args: argparse.Namespace) -> int:
    """``combolayer reproduce EXPERIMENT``: re-run a documented experiment: ``demo``,
    or ``benchmarks/EXPERIMENT.py`` from a source checkout."""
    import runpy
    import sys
    from pathlib import Path

    if args.experiment == "demo":
        from .demo import run

        run()
        return 0
    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    experiments = sorted(p.stem for p in folder.glob("*.py")) if folder.is_dir() else []
    if args.experiment not in experiments:
        print(f"unknown experiment {args.experiment!r}: expected one of {['demo', *experiments]}"
              + ("" if experiments else " (the benchmarks/ folder of a source checkout)"),
              file=sys.stderr)
        return 2
    sys.argv = [str(folder / f"{args.experiment}.py")]
    runpy.run_path(sys.argv[0], run_name="__main__")
    return 0
