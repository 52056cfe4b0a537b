"""Per-solve TSP time for every exact option, written into docs/problems.md.

    python benchmarks/tsp_backends.py [--quick] [--out docs/problems.md]

On Euclidean instances (uniform points in the unit square), one solver thread,
``torch.set_num_threads(1)``, the median seconds per instance after a warm-up
solve, for n = 10, 20, 50, 100 (TSP-100 on a few instances only):

- HiGHS (the default): subtour cuts found on warm-started LP rounds, then the
  MIP with them, re-solved while the integer optimum has subtours;
- HiGHS seeded with a bounded pool of recently binding cuts, as initial rows
  or as lazy rows (added when the LP optimum violates them);
- SCIP with its lazy constraint handler;
- OR-Tools CP-SAT with ``AddCircuit`` (optional, when ortools is installed):
  integer costs only, so the costs are scaled by 1e6 and rounded (not exact
  for arbitrary float costs) and each instance gets a time limit.

Every option's tour lengths are checked against the default's. The table goes
between the ``tsp-table`` markers in docs/problems.md.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

import combolayer as cl
import combolayer.backends.highs as highs_backend
import combolayer.problems.tsp as tsp_module
from combolayer.cli.perf import tsp_costs

ROOT = Path(__file__).resolve().parents[1]
CPSAT_TIME_LIMIT = 10.0
#: The cut pool size per node when the pool is on.
POOL_PER_NODE = 2


def highs_solver(n: int, pool: str):
    tsp_module.CUT_POOL_PER_NODE = 0 if pool == "off" else POOL_PER_NODE
    highs_backend.CUT_POOL_MODE = pool if pool != "off" else "lazy"
    try:
        return cl.make_solver(cl.problems.TSP(num_nodes=n), "highs").solve
    finally:
        tsp_module.CUT_POOL_PER_NODE = 0
        highs_backend.CUT_POOL_MODE = "lazy"


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


def time_option(solve, costs: np.ndarray) -> tuple[float | None, list[float | None]]:
    """Median ms per instance (None when any instance hit a limit) and tour values."""
    solve(costs[0])
    times, values = [], []
    for w in costs[1:]:
        start = time.perf_counter()
        y = solve(w)
        times.append(time.perf_counter() - start)
        values.append(None if y is None else float(np.sum(w * y)))
    if any(v is None for v in values):
        return None, values
    return statistics.median(times) * 1e3, values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "docs" / "problems.md"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    command = "python " + " ".join(["benchmarks/tsp_backends.py", *sys.argv[1:]])
    instances = {10: 8, 20: 6, 50: 4, 100: 2} if not args.quick else {10: 3, 20: 2, 50: 2}
    options = {
        "HiGHS, LP cut rounds (default)": lambda n: highs_solver(n, "off"),
        "HiGHS + cut pool, initial rows": lambda n: highs_solver(n, "initial"),
        "HiGHS + cut pool, lazy rows": lambda n: highs_solver(n, "lazy"),
        "SCIP, cuts in its constraint handler": lambda n: cl.make_solver(
            cl.problems.TSP(num_nodes=n), "scip").solve,
    }
    try:
        import ortools  # noqa: F401

        options["OR-Tools CP-SAT, AddCircuit"] = cpsat_solver
    except ImportError:
        print("ortools not installed: CP-SAT not measured")
    table: dict[int, dict[str, float | None]] = {}
    start = time.perf_counter()
    for n, count in instances.items():
        costs = tsp_costs(n, count + 1, seed=n)
        table[n] = {}
        reference = None
        for name, make in options.items():
            ms, values = time_option(make(n), costs)
            if reference is None:
                reference = values
            elif ms is not None and "CP-SAT" not in name:
                assert np.allclose(values, reference, atol=1e-7), (name, n, values, reference)
            table[n][name] = ms
            print(f"TSP-{n} {name}: {'limit' if ms is None else f'{ms:.1f} ms'}", flush=True)
            if ms is None and "CP-SAT" in name:
                options.pop(name)  # larger sizes only take longer
                break
    seconds = time.perf_counter() - start
    names = list(dict.fromkeys(name for row in table.values() for name in row))
    load = np.round(np.array(__import__("os").getloadavg()), 1)
    lines = [
        "<!-- tsp-table:start (generated by benchmarks/tsp_backends.py; do not edit) -->",
        f"Generated by `{command}` in {seconds:.0f} s, load average {load[0]} at the end, "
        "one solver thread; median ms per solve on Euclidean instances "
        f"(instances per size: {', '.join(f'n={n}: {c}' for n, c in instances.items())}). "
        f"CP-SAT: costs scaled by 1e6 and rounded, {CPSAT_TIME_LIMIT:g} s limit per "
        "instance, 'limit' = not solved to optimality within it (then not run at larger n).",
        "",
        "| n | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for n, row in table.items():
        cells = []
        for name in names:
            ms = row.get(name, "n/a")
            cells.append(ms if isinstance(ms, str) else "limit" if ms is None else f"{ms:.1f}")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines.append("<!-- tsp-table:end -->")
    block = "\n".join(lines)
    path = Path(args.out)
    text = path.read_text()
    pattern = re.compile(r"<!-- tsp-table:start.*?<!-- tsp-table:end -->", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = text.rstrip("\n") + "\n\n## TSP backends\n\n" + block + "\n"
    path.write_text(text)
    print(f"wrote the TSP table into {path}")


if __name__ == "__main__":
    main()
