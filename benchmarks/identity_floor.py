"""What Identity's exact solves cost on PyEPO's knapsack, on every solver and setting.

    python benchmarks/identity_floor.py [--quick] [--out docs/measurements/training.md]

The goal asks Identity (projection "auto", regret loss, the open-source default
backend, ``solve_ratio`` 0.1) to train an epoch no slower than PyEPO's SPO+ with
Gurobi at ``solve_ratio`` 1. This script measures the floor under that goal,
in one run:

1. Ten epochs of each loop train on the 50 x 2 knapsack (``cl.data.knapsack``,
   capacity a quarter of each dimension's weight) with SCIP, and every exact
   solve is recorded (`_training.training_solves`): Identity's at ``solve_ratio``
   0.1 (the projected predictions, nearly uniform), and SPO+'s at 1 (the
   shifted costs ``2 c_hat - c`` of every instance, what PyEPO's SPO+ solves).
2. An evenly spaced sample of each is solved again, one solve after another,
   in two passes (the second in reverse order of solvers), on SCIP as the default
   backend sets it up (the fast mode), on SCIP with its own defaults and with
   the settings a sweep might try (presolve, separation, branching rules), on
   Gurobi and on HiGHS, one thread each. The objectives are checked equal.
3. Each row's solver seconds per epoch is its mean per solve times the loop's
   exact solves per epoch.

The table goes between the ``identity-floor`` markers of docs/measurements/training.md.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from _doc_blocks import generated_by, page_parser, row, table, write_block
from _training import solve_each, training_solves
from warm_start import check_objectives, knapsack_data

import combolayer as cl

ROOT = Path(__file__).resolve().parents[1]


def _settings(presolve: str | None = None, separating: str | None = None,
              heuristics: str | None = None) -> Callable:
    """A change to a SCIP model: these emphasis settings (``SCIP_PARAMSETTING`` names)."""
    def setup(model) -> None:
        from pyscipopt import SCIP_PARAMSETTING

        for setter, level in ((model.setPresolve, presolve), (model.setSeparating, separating),
                              (model.setHeuristics, heuristics)):
            if level is not None:
                setter(getattr(SCIP_PARAMSETTING, level))
    return setup


def _params(**params) -> Callable:
    """A change to a SCIP model: these parameters (``__`` for ``/`` in their names)."""
    def setup(model) -> None:
        for key, value in params.items():
            model.setParam(key.replace("__", "/"), value)
    return setup


#: Row label -> (backend, a change to its kernel's model or None). SCIP's rows are
#: what a sweep of the fast mode would try; "SCIP's own defaults" is SCIP as it ships.
SOLVERS: dict[str, tuple[str, Callable | None]] = {
    "scip, the default backend (fast mode)": ("scip", None),
    "scip, SCIP's own defaults": ("scip", _settings("DEFAULT", "DEFAULT", "DEFAULT")),
    "scip, fast mode + presolve": ("scip", _settings(presolve="DEFAULT")),
    "scip, fast mode + fast separation": ("scip", _settings(separating="FAST")),
    "scip, fast mode + pseudo-cost branching": (
        "scip", _params(branching__pscost__priority=100_000)),
    "scip, fast mode + most-infeasible branching": (
        "scip", _params(branching__mostinf__priority=100_000)),
    "gurobi (one thread)": ("gurobi", None),
    "highs": ("highs", None),
}


def kernel_of(spec, backend: str, setup: Callable | None):
    kernel = cl.make_solver(spec, backend).kernel
    if setup is not None:
        setup(kernel.model)
    return kernel


def replay(spec, costs: np.ndarray, solvers: dict[str, tuple]) -> dict[str, list[float]]:
    """Seconds per solve of every row of ``costs`` on each solver, in two passes (the
    second in reverse order of solvers); the objectives are checked equal."""
    kernels = {name: kernel_of(spec, *solver) for name, solver in solvers.items()}
    times: dict[str, list[float]] = {name: [] for name in kernels}
    solutions = {}
    for order in (list(kernels), list(reversed(kernels))):
        for name in order:
            solutions[name] = solve_each(kernels[name], costs, None, times[name])
    check_objectives("identity_floor", costs, solutions)
    return times


def usable(spec) -> dict[str, tuple]:
    """The rows of `SOLVERS` whose backend can solve ``spec`` here (gurobipy and its
    licence are optional); the others are named as skipped."""
    capable = cl.backends.registry.capable_backends(spec)
    kept = {name: solver for name, solver in SOLVERS.items() if solver[0] in capable}
    for name, (backend, _) in SOLVERS.items():
        if name not in kept:
            print(f"{name}: not measured ({backend} cannot solve {spec.label} here)")
    return kept


def main() -> None:
    parser = page_parser(__doc__, ROOT / "docs" / "measurements" / "training.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    epochs, samples, num_train = (10, 150, 1000) if not args.quick else (1, 6, 64)
    began = time.perf_counter()
    data = knapsack_data(50, num_train)
    solvers = usable(data.spec)
    rows = []
    for loop, ratio in (("Identity", 0.1), ("SPO+", 1.0)):
        costs, _ = training_solves(data, loop, epochs, solve_ratio=ratio)
        per_epoch = len(costs) / epochs
        sample = costs[np.linspace(0, len(costs) - 1, min(samples, len(costs))).astype(int)]
        for name, seconds in replay(data.spec, sample, solvers).items():
            mean = statistics.fmean(seconds)
            rows.append(row([f"{loop} at solve_ratio {ratio:g} ({per_epoch:.0f} solves an "
                             f"epoch)", name, f"{statistics.median(seconds) * 1e3:.2f}",
                             f"{mean * 1e3:.2f}", f"{mean * per_epoch:.3f}"]))
            print(rows[-1], flush=True)
    lines = [
        generated_by("benchmarks/identity_floor.py", time.perf_counter() - began)
        + f", one solver thread; {len(sample)} solves sampled evenly from each loop's "
        f"{epochs} epochs of {num_train} instances, two passes each:",
        "",
        *table(["exact solves of", "solver", "median ms", "mean ms", "solver s per epoch"],
               rows),
    ]
    write_block(Path(args.out), "identity-floor", "benchmarks/identity_floor.py", lines,
                "## Identity's exact solves on the knapsack")
    print(f"wrote the identity-floor table into {args.out}")


if __name__ == "__main__":
    main()
