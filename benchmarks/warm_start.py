"""MIP starts on PyEPO's knapsack: per-solve time with and without a start.

    python benchmarks/warm_start.py [--quick] [--out docs/performance.md]

The instances come back every epoch with slightly different costs, as they do
in training: PyEPO's multi-dimensional knapsack (``cl.data.knapsack``: 5
features, deg 4, noise 0.5, capacity a quarter of each dimension's total
weight), 50 items x 2 dimensions and 200 items x 2 dimensions. Epoch 0 solves
every instance's true costs; each later epoch multiplies them by
``1 + 0.05 z`` (``z`` standard normal, seeded), as a model's predictions move
between epochs. Every instance of every epoch is solved three ways on the same
kept model, interleaved and in rotating order:

- ``cold``: no start;
- ``last``: the instance's solution of the previous epoch as a MIP start;
- ``true``: the instance's true optimal solution as a start (what a solution
  pool seeded with the training set's solutions would offer).

The kernel's ``start=`` hook (:class:`combolayer.backends.solver.RowKernel`)
is called directly on HiGHS, SCIP and Gurobi (when gurobipy is installed), one
solver thread. The objectives are checked equal. The table (median and mean ms
per solve, and the ratio of the means to ``cold``) goes between the
``warm-start`` markers of docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from _doc_blocks import write_block

import combolayer as cl

ROOT = Path(__file__).resolve().parents[1]
MODES = ("cold", "last", "true")


def knapsack_data(num_items: int, num_data: int, seed: int = 135):
    """PyEPO's knapsack, capacity a quarter of each dimension's weight (as issue 23)."""
    probe = cl.data.knapsack(1, 5, num_items, dim=2, deg=4, noise_width=0.5, seed=seed,
                             backend="scip")
    capacities = (0.25 * np.asarray(probe.spec.weights).sum(axis=1)).tolist()
    return cl.data.knapsack(num_data, 5, num_items, dim=2, deg=4, noise_width=0.5, seed=seed,
                            capacities=capacities, backend="scip")


def measure(spec, backend: str, true_costs: np.ndarray, true_solutions: np.ndarray,
            epochs: int, seed: int) -> dict[str, list[float]]:
    """Seconds per solve for each mode over ``epochs`` perturbed epochs."""
    solver = cl.make_solver(spec, backend)
    kernel = solver.kernel
    kernel.takes_start = True  # measured whether or not the backend keeps starts on
    sign = solver.sign
    last = kernel(sign * true_costs)  # epoch 0: every instance's solution
    kernel(sign * true_costs[:1])  # warm-up
    rng = np.random.default_rng(seed)
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    step = 0
    for _ in range(epochs):
        costs = true_costs * (1 + 0.05 * rng.standard_normal(true_costs.shape))
        solutions = np.empty_like(last)
        for i, cost in enumerate(sign * costs):
            starts = {"cold": None, "last": last[i:i + 1], "true": true_solutions[i:i + 1]}
            values = {}
            order = MODES[step % 3:] + MODES[:step % 3]  # rotate who goes first
            step += 1
            for mode in order:
                begin = time.perf_counter()
                y = kernel(cost[None], start=starts[mode])
                times[mode].append(time.perf_counter() - begin)
                values[mode] = float(cost @ y[0])
                solutions[i] = y[0]
            assert max(values.values()) - min(values.values()) < 1e-6, (backend, values)
        last = solutions
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "docs" / "performance.md"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    command = "python " + " ".join(["benchmarks/warm_start.py", *sys.argv[1:]])
    sizes = {50: (24, 3), 200: (16, 3)} if not args.quick else {50: (6, 1), 200: (4, 1)}
    backends = ["highs", "scip"]
    try:
        import gurobipy  # noqa: F401

        backends.append("gurobi")
    except ImportError:
        print("gurobipy not installed: Gurobi not measured")
    rows = []
    start = time.perf_counter()
    for num_items, (count, epochs) in sizes.items():
        data = knapsack_data(num_items, count)
        true_costs = data.costs.double().numpy()
        true_solutions = data.solutions.double().numpy()
        for backend in backends:
            if backend not in cl.backends.registry.capable_backends(data.spec):
                print(f"{backend}: cannot solve {data.spec.label} here (licence?)")
                continue
            times = measure(data.spec, backend, true_costs, true_solutions, epochs,
                            seed=num_items)
            cold = statistics.fmean(times["cold"])
            cells = []
            for mode in MODES:
                median = statistics.median(times[mode]) * 1e3
                mean = statistics.fmean(times[mode]) * 1e3
                ratio = statistics.fmean(times[mode]) / cold
                cells.append(f"{median:.1f} / {mean:.1f}" + ("" if mode == "cold"
                                                             else f" ({ratio:.2f}x)"))
            rows.append(f"| {num_items} x 2 | {backend} | " + " | ".join(cells) + " |")
            print(rows[-1], flush=True)
    seconds = time.perf_counter() - start
    load = np.round(np.array(os.getloadavg()), 1)
    lines = [
        f"Generated by `{command}` in {seconds:.0f} s, load average {load[0]} at the end "
        "(a shared 2-core machine: noisy), one solver thread; median / mean ms per solve, "
        "and the mean against no start. Instances per size: "
        + ", ".join(f"{n} x 2: {c} instances x {e} perturbed epochs"
                    for n, (c, e) in sizes.items()) + "; the three modes interleaved.",
        "",
        "| knapsack | backend | no start | start: last epoch's solution | "
        "start: true solution |",
        "|---|---|---|---|---|",
        *rows,
    ]
    path = Path(args.out)
    write_block(path, "warm-start", "benchmarks/warm_start.py", lines,
                "## Warm starts (issue 23)")
    print(f"wrote the warm-start table into {path}")


if __name__ == "__main__":
    main()
