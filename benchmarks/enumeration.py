"""Enumeration in torch against the MIP solvers on small binary problems, with and without
per-call rows.

    python benchmarks/enumeration.py [--quick] [--out docs/measurements/solvers.md]

Pure binary ILPs of n variables with two knapsack rows of the spec's own
(uniform weights, a quarter of their sum as capacity), and with none (every 0/1
point feasible), get a batch of 256 random costs; "shared rows" adds two per-call
rows ``A x <= b`` for the whole batch,
"per-instance rows" four rows per instance. Enumeration, SCIP and Gurobi (HiGHS's
per-solve set-up, 10-40 ms on these, keeps it out) each solve the batch three
times after a warm-up call; the table shows the best of the three per instance
(one torch thread: on a shared machine torch's intra-op threads cost more than
they give). The objectives are checked equal to SCIP's. This is what
``AUTO_MAX_VARS`` in combolayer/backends/enumeration.py reads.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from _doc_blocks import generated_by, page_parser, row, table, write_block

import combolayer as cl
from combolayer.backends.enumeration import feasible_points
from combolayer.specs.canonical import canonical_form

PAGE = Path(__file__).resolve().parents[1] / "docs" / "measurements" / "solvers.md"


def problem(n: int, rng: np.random.Generator, free: bool = False) -> cl.ILP:
    """Two knapsack rows of the spec's own, or (``free``) none: every 0/1 point."""
    if free:
        return cl.ILP(shape=[n], integrality="binary")
    weights = rng.uniform(0, 1, (2, n))
    return cl.ILP.from_matrices(shape=[n], A_ub=weights, b_ub=weights.sum(1) / 4,
                                integrality="binary")


def per_instance(solver, costs, rows, repeats: int) -> tuple[float, np.ndarray]:
    solver.solve(costs, **rows)  # the warm-up: first-call set-up is not counted
    best, y = float("inf"), None
    for _ in range(repeats):
        began = time.perf_counter()
        y = solver.solve(costs, **rows)
        best = min(best, time.perf_counter() - began)
    return best / len(costs), y


def main() -> None:
    parser = page_parser(__doc__, PAGE)
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.perf_counter()
    sizes, batch, repeats = (((6, False), (8, False)), 16, 1) if args.quick else (
        ((8, False), (12, False), (14, False), (16, False), (12, True), (16, True)), 256, 3)
    backends = ["enumerate", "scip"] + (["gurobi"] if _has("gurobipy") else [])
    rng = np.random.default_rng(0)
    lines = []
    for n, free in sizes:
        spec = problem(n, rng, free)
        points = len(feasible_points(canonical_form(spec)))
        costs = torch.tensor(rng.normal(size=(batch, n)))
        cases = {
            "none": {},
            "shared rows": {"A": torch.tensor(rng.uniform(0, 1, (2, n))),
                            "b": torch.tensor([n / 5.0, n / 6.0])},
            "per-instance rows": {"A": torch.tensor(rng.uniform(0, 1, (batch, 4, n))),
                                  "b": torch.tensor(rng.uniform(n / 8, n / 4, (batch, 4)))},
        }
        for case, rows in cases.items():
            times, reference = {}, None
            for name in backends:
                seconds, y = per_instance(cl.make_solver(spec, name), costs, rows, repeats)
                value = (y * costs).sum(1)
                if reference is None:
                    reference = value
                if not torch.allclose(value, reference, atol=1e-6):
                    raise SystemExit(f"{name} disagrees with {backends[0]} at n={n}, {case}")
                times[name] = seconds
            fastest = min(times, key=times.get)
            lines.append(row([str(n), str(points), case,
                              *(f"{times[name] * 1e3:.3g}" for name in backends), fastest]))
            print(lines[-1], flush=True)
    body = [generated_by("benchmarks/enumeration.py", time.perf_counter() - started), "",
            *table(["variables", "feasible points", "per-call rows",
                    *(f"{name} (ms per instance)" for name in backends), "fastest"], lines)]
    write_block(Path(args.out), "enumeration", "benchmarks/enumeration.py", body,
                "## Enumeration against the MIP solvers")


def _has(package: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(package) is not None


if __name__ == "__main__":
    main()
