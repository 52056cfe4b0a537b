"""Per-solve TSP time for every exact option, written into docs/measurements/solvers.md.

    python benchmarks/tsp_backends.py [--quick] [--out docs/measurements/solvers.md]

On Euclidean instances (uniform points in the unit square), one solver thread,
``torch.set_num_threads(1)``, the median and the mean milliseconds per instance
after a warm-up solve, for n = 10, 20, 50, 60, 100, 150 (fewer instances at the
larger sizes). Solve times have a long tail (the instances whose LP stays fractional
pay MIP solves), so the mean, which sets what a batch costs, is shown beside
the median. The options are interleaved: each instance is solved by every option
in turn before the next, so a load change on a shared machine hits all of them
alike, and the ratio HiGHS / Gurobi of the means is printed per size. The options:

- Held-Karp (the default up to ``TSP_DP_MAX_NODES`` nodes): the scipy
  backend's dynamic program, exponential in n, so only up to that size;
- HiGHS (the default above, up to ``TSP_MAX_NODES_FIRST`` nodes): ``HighsTspKernel``,
  cut rounds on the LP, reduced-cost fixing against a tour, then the MIP;
- the same without the blossom cuts, and without the fixing, to show what
  each part buys;
- SCIP with its lazy constraint handler (the default above);
- Gurobi with subtour eliminations as lazy constraints in a callback (optional,
  when gurobipy is installed and its licence covers the model: the pip licence's
  2000 variables allow up to 63 nodes);
- OR-Tools CP-SAT with ``AddCircuit`` (optional, when ortools is installed):
  integer costs only, so the costs are scaled by 1e6 and rounded (not exact
  for arbitrary float costs) and each instance gets a time limit.

Every option's tour lengths are checked against the default's. The table goes
between the ``tsp-table`` markers in docs/measurements/solvers.md.
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
from combolayer.backends.algorithms import TSP_DP_MAX_NODES
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


def gurobi_solver(n: int):
    """Gurobi's lazy subtour cuts; None where gurobipy is missing or its licence is
    too small for TSP-n."""
    spec = cl.problems.TSP(num_nodes=n)
    if "gurobi" not in cl.backends.registry.capable_backends(spec):
        return None
    return cl.make_solver(spec, "gurobi").solve


def time_options(solvers: dict[str, Callable], costs: np.ndarray
                 ) -> dict[str, tuple[float, float, list[float]] | None]:
    """Median and mean ms per instance and the tour values of each option, the options
    interleaved per instance after a warm-up solve each; None for an option once an
    instance hits its limit (the solver returned None), which then drops out."""
    for solve in solvers.values():
        solve(costs[0])
    times: dict[str, list[float]] = {name: [] for name in solvers}
    values: dict[str, list[float]] = {name: [] for name in solvers}
    failed: set[str] = set()
    for w in costs[1:]:
        for name, solve in solvers.items():
            if name in failed:
                continue
            start = time.perf_counter()
            y = solve(w)
            times[name].append(time.perf_counter() - start)
            if y is None:
                failed.add(name)
                continue
            values[name].append(float(np.sum(w * y)))
    return {name: None if name in failed else (statistics.median(times[name]) * 1e3,
                                               statistics.fmean(times[name]) * 1e3,
                                               values[name])
            for name in solvers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "docs" / "measurements" / "solvers.md"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    command = "python " + " ".join(["benchmarks/tsp_backends.py", *sys.argv[1:]])
    instances = ({10: 24, 20: 24, 50: 24, 60: 24, 100: 8, 150: 4} if not args.quick
                 else {10: 4, 20: 4, 50: 4, 60: 4, 100: 2})
    highs_name = (f"HiGHS (default for {TSP_DP_MAX_NODES + 1} to "
                  f"{highs_backend.TSP_MAX_NODES_FIRST} nodes)")
    gurobi_name = "Gurobi, lazy cuts in a callback"
    options: dict[str, Callable[[int], Callable | None]] = {
        f"Held-Karp DP (default up to {TSP_DP_MAX_NODES} nodes)": held_karp_solver,
        highs_name: highs_solver,
        "HiGHS without blossoms": lambda n: highs_solver(n, "blossoms"),
        "HiGHS without reduced-cost fixing": lambda n: highs_solver(n, "fixing"),
        "SCIP, cuts in its constraint handler": lambda n: cl.make_solver(
            cl.problems.TSP(num_nodes=n), "scip").solve,
    }
    try:
        import gurobipy  # noqa: F401

        options[gurobi_name] = gurobi_solver
    except ImportError:
        print("gurobipy not installed: Gurobi not measured")
    try:
        import ortools  # noqa: F401

        options["OR-Tools CP-SAT, AddCircuit"] = cpsat_solver
    except ImportError:
        print("ortools not installed: CP-SAT not measured")
    table: dict[int, dict[str, tuple[float, float] | None]] = {}
    ratios: dict[int, float] = {}
    start = time.perf_counter()
    for n, count in instances.items():
        costs = tsp_costs(n, count + 1, seed=n)
        # not defined at this size: "n/a"
        solvers = {name: solve for name, make in options.items()
                   if (solve := make(n)) is not None}
        results = time_options(solvers, costs)
        reference = next((r[2] for r in results.values() if r is not None), None)
        table[n] = {}
        for name, result in results.items():
            if result is not None and "CP-SAT" not in name:
                assert np.allclose(result[2], reference, atol=1e-7), (name, n, result[2])
            table[n][name] = None if result is None else result[:2]
            shown = "limit" if result is None else f"{result[0]:.1f} ms (mean {result[1]:.1f})"
            print(f"TSP-{n} {name}: {shown}", flush=True)
            if result is None:
                options.pop(name)  # larger sizes only take longer
        if results.get(highs_name) and results.get(gurobi_name):
            ratios[n] = results[highs_name][1] / results[gurobi_name][1]
            print(f"TSP-{n} mean HiGHS / Gurobi: {ratios[n]:.2f}", flush=True)
    seconds = time.perf_counter() - start
    names = list(dict.fromkeys(name for row in table.values() for name in row))
    load = np.round(np.array(os.getloadavg()), 1)
    lines = [
        f"Generated by `{command}` in {seconds:.0f} s, load average {load[0]} at the end, "
        "one solver thread; median (mean) ms per solve on Euclidean instances "
        f"(instances per size: {', '.join(f'n={n}: {c}' for n, c in instances.items())}). "
        f"CP-SAT: costs scaled by 1e6 and rounded, {CPSAT_TIME_LIMIT:g} s limit per "
        "instance, 'limit' = an instance not solved to optimality within it (then not run "
        "at larger n). Gurobi: 'n/a' where its licence does not cover the model (the pip "
        "licence's 2000 variables stop at 63 nodes). The options run interleaved, instance "
        "by instance; mean HiGHS / Gurobi: "
        + (", ".join(f"n={n}: {r:.2f}" for n, r in ratios.items()) or "not measured") + ".",
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
