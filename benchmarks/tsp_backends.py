"""Per-solve TSP time for every exact option, written into docs/problems.md.

    python benchmarks/tsp_backends.py [--quick] [--out docs/problems.md]

On Euclidean instances (uniform points in the unit square), one solver thread,
``torch.set_num_threads(1)``, the median and the mean milliseconds per instance
after a warm-up solve, for n = 10, 20, 50, 100, 150 (fewer instances at the
larger sizes). Solve times have a long tail (the instances whose LP stays fractional
pay MIP solves), so the mean, which sets what a batch costs, is shown beside
the median. The options:

- Held-Karp (the default up to ``TSP_DP_MAX_NODES`` nodes): the scipy
  backend's dynamic program, exponential in n, so only up to that size;
- HiGHS (the default above, up to ``TSP_MAX_NODES_FIRST`` nodes): ``HighsTspKernel``,
  cut rounds on the LP, reduced-cost fixing against a tour, then the MIP;
- the same without the blossom cuts, and without the fixing, to show what
  each part buys;
- SCIP with its lazy constraint handler (the default above);
- OR-Tools CP-SAT with ``AddCircuit`` (optional, when ortools is installed):
  integer costs only, so the costs are scaled by 1e6 and rounded (not exact
  for arbitrary float costs) and each instance gets a time limit.

Every option's tour lengths are checked against the default's. The table goes
between the ``tsp-table`` markers in docs/problems.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from _doc_blocks import write_block

import combolayer as cl
import combolayer.backends.highs as highs_backend
from combolayer.backends.scipy import TSP_DP_MAX_NODES
from combolayer.cli.perf import tsp_costs

ROOT = Path(__file__).resolve().parents[1]
CPSAT_TIME_LIMIT = 10.0


@contextmanager
def _patched(obj, name: str, value):
    saved = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, saved)


def highs_solver(n: int, without: str | None = None) -> Callable:
    """HiGHS's TSP kernel, or with one part switched off around each solve."""
    solve = cl.make_solver(cl.problems.TSP(num_nodes=n), "highs").solve
    if without is None:
        return solve
    patch = {
        "blossoms": lambda: _patched(highs_backend, "violated_blossoms", lambda values: []),
        "fixing": lambda: _patched(highs_backend.HighsTspKernel, "_fix_by_reduced_costs",
                                   lambda self, x, upper: False),
    }[without]

    def solve_without(w: np.ndarray) -> np.ndarray:
        with patch():
            return solve(w)

    return solve_without


def held_karp_solver(n: int):
    """The scipy backend's Held-Karp dynamic program, which "auto" picks up to
    ``TSP_DP_MAX_NODES`` cities; None above (it is exponential in n)."""
    if n > TSP_DP_MAX_NODES:
        return None
    return cl.make_solver(cl.problems.TSP(num_nodes=n), "scipy").solve


def cpsat_solver(n: int):
    """CP-SAT with AddCircuit on arcs; the symmetric cost of an edge on each arc."""
    from ortools.sat.python import cp_model

    def solve(w: np.ndarray) -> np.ndarray:
        sym = w + w.T
        model = cp_model.CpModel()
        arcs = {(i, j): model.new_bool_var(f"a{i}_{j}") for i in range(n) for j in range(n)
                if i != j}
        model.add_circuit([(i, j, literal) for (i, j), literal in arcs.items()])
        model.minimize(sum(int(round(sym[i, j] * 1e6)) * literal
                           for (i, j), literal in arcs.items()))
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.max_time_in_seconds = CPSAT_TIME_LIMIT
        status = solver.solve(model)
        if status != cp_model.OPTIMAL:
            return None
        y = np.zeros((n, n))
        for (i, j), literal in arcs.items():
            if solver.value(literal):
                y[i, j] = y[j, i] = 1.0
        return y

    return solve


def time_option(solve, costs: np.ndarray) -> tuple[float, float, list[float]] | None:
    """Median and mean ms per instance and the tour values, or None as soon as an
    instance hits a limit (the solver returned None)."""
    solve(costs[0])
    times, values = [], []
    for w in costs[1:]:
        start = time.perf_counter()
        y = solve(w)
        times.append(time.perf_counter() - start)
        if y is None:
            return None
        values.append(float(np.sum(w * y)))
    return statistics.median(times) * 1e3, statistics.fmean(times) * 1e3, values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "docs" / "problems.md"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    command = "python " + " ".join(["benchmarks/tsp_backends.py", *sys.argv[1:]])
    instances = ({10: 24, 20: 24, 50: 24, 100: 8, 150: 4} if not args.quick
                 else {10: 4, 20: 4, 50: 4, 100: 2})
    options: dict[str, Callable[[int], Callable | None]] = {
        f"Held-Karp DP (default up to {TSP_DP_MAX_NODES} nodes)": held_karp_solver,
        f"HiGHS (default for {TSP_DP_MAX_NODES + 1} to {highs_backend.TSP_MAX_NODES_FIRST} "
        "nodes)": highs_solver,
        "HiGHS without blossoms": lambda n: highs_solver(n, "blossoms"),
        "HiGHS without reduced-cost fixing": lambda n: highs_solver(n, "fixing"),
        "SCIP, cuts in its constraint handler": lambda n: cl.make_solver(
            cl.problems.TSP(num_nodes=n), "scip").solve,
    }
    try:
        import ortools  # noqa: F401

        options["OR-Tools CP-SAT, AddCircuit"] = cpsat_solver
    except ImportError:
        print("ortools not installed: CP-SAT not measured")
    table: dict[int, dict[str, tuple[float, float] | None]] = {}
    start = time.perf_counter()
    for n, count in instances.items():
        costs = tsp_costs(n, count + 1, seed=n)
        table[n] = {}
        reference = None
        for name, make in list(options.items()):
            solve = make(n)
            if solve is None:
                continue  # not defined at this size: "n/a"
            result = time_option(solve, costs)
            if result is not None:
                median, mean, values = result
                if reference is None:
                    reference = values
                elif "CP-SAT" not in name:
                    assert np.allclose(values, reference, atol=1e-7), (name, n, values)
            table[n][name] = None if result is None else result[:2]
            shown = "limit" if result is None else f"{result[0]:.1f} ms (mean {result[1]:.1f})"
            print(f"TSP-{n} {name}: {shown}", flush=True)
            if result is None:
                options.pop(name)  # larger sizes only take longer
    seconds = time.perf_counter() - start
    names = list(dict.fromkeys(name for row in table.values() for name in row))
    load = np.round(np.array(os.getloadavg()), 1)
    lines = [
        f"Generated by `{command}` in {seconds:.0f} s, load average {load[0]} at the end, "
        "one solver thread; median (mean) ms per solve on Euclidean instances "
        f"(instances per size: {', '.join(f'n={n}: {c}' for n, c in instances.items())}). "
        f"CP-SAT: costs scaled by 1e6 and rounded, {CPSAT_TIME_LIMIT:g} s limit per "
        "instance, 'limit' = an instance not solved to optimality within it (then not run "
        "at larger n).",
        "",
        "| n | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for n, row in table.items():
        cells = []
        for name in names:
            cell = row.get(name, "n/a")
            cells.append(cell if isinstance(cell, str) else "limit" if cell is None
                         else f"{cell[0]:.1f} ({cell[1]:.1f})")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    path = Path(args.out)
    write_block(path, "tsp-table", "benchmarks/tsp_backends.py", lines, "## TSP backends")
    print(f"wrote the TSP table into {path}")


if __name__ == "__main__":
    main()
