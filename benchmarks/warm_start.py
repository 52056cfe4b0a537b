"""MIP starts on PyEPO's knapsack: per-solve time with and without a start.

    python benchmarks/warm_start.py [--quick] [--out docs/measurements/solvers.md]

The instances come back every epoch with slightly different costs, as they do
in training: PyEPO's multi-dimensional knapsack (``cl.data.knapsack``: 5
features, deg 4, noise 0.5, capacity a quarter of each dimension's total
weight), 50 items x 2 dimensions and 200 items x 2 dimensions. Epoch 0 solves
every instance's true costs; each later epoch multiplies them by
``1 + 0.05 z`` (``z`` standard normal, seeded), as a model's predictions move
between epochs. Every epoch is solved three ways on the same kept model, one
way after another (each over all instances, as a training loop solves them),
in rotating order:

- ``cold``: no start;
- ``last``: the instance's solution of the previous epoch as a MIP start;
- ``true``: the instance's true optimal solution as a start (what a solution
  pool seeded with the training set's solutions would offer).

The second table takes the costs a training loop itself sends to the solver,
which is where the layer and the losses pass starts: under the solution cache
(``solve_ratio`` 0.1) every exact solve starts from the pool's best solution
under its cost. Ten epochs of SPO+ (shifted costs ``2 c_hat - c``) and of
Identity (projection "auto", regret loss; the projected predictions, nearly
uniform) train on the 50 x 2 knapsack with SCIP, the pool seeded with the
training set's solutions; every exact solve's costs and the start the cache
handed it are recorded, and an evenly spaced sample of them is then solved
with and without that start, in passes over the sample (cold, start, start,
cold).

The kernel's ``start=`` hook (:class:`combolayer.backends.solver.RowKernel`)
is called directly on HiGHS, SCIP and Gurobi (when gurobipy is installed), one
solver thread. The objectives are checked equal. The tables (median and mean ms
per solve, and the ratio of the means to no start) go between the
``warm-start`` markers of docs/measurements/solvers.md.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
import torch
from _doc_blocks import generated_by, page_parser, row, table, write_block
from _training import solve_each, training_solves

import combolayer as cl

ROOT = Path(__file__).resolve().parents[1]
MODES = ("cold", "last", "true")
#: The training loops whose own exact solves the second table replays.
LOOPS = ("SPO+", "Identity")


def knapsack_data(num_items: int, num_data: int, seed: int = 135):
    """PyEPO's knapsack, capacity a quarter of each dimension's weight."""
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
    rng = np.random.default_rng(seed)
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for epoch in range(epochs):
        costs = sign * true_costs * (1 + 0.05 * rng.standard_normal(true_costs.shape))
        starts = {"cold": None, "last": last, "true": true_solutions}
        order = MODES[epoch % 3:] + MODES[:epoch % 3]  # rotate who goes first
        solutions = {mode: solve_each(kernel, costs, starts[mode], times[mode]) for mode in order}
        check_objectives(backend, costs, solutions)
        last = solutions["cold"]
    return times


def check_objectives(backend: str, costs: np.ndarray, solutions: dict[str, np.ndarray]) -> None:
    values = np.stack([(costs * y).sum(axis=1) for y in solutions.values()])
    spread = float((values.max(axis=0) - values.min(axis=0)).max())
    assert spread < 1e-6, f"{backend}: the modes' optimal objectives differ by {spread}"


def measure_replay(spec, backend: str, costs: np.ndarray,
                   starts: np.ndarray) -> dict[str, list[float]]:
    """Seconds per solve of each recorded solve, with and without its pool start, in
    passes over all of them ordered cold, pool, pool, cold."""
    kernel = cl.make_solver(spec, backend).kernel
    kernel.takes_start = True  # measured whether or not the backend keeps starts on
    times: dict[str, list[float]] = {"cold": [], "pool": []}
    solutions = {}
    for mode in ("cold", "pool", "pool", "cold"):
        solutions[mode] = solve_each(kernel, costs, starts if mode == "pool" else None, times[mode])
    check_objectives(backend, costs, solutions)
    return times


def cells(times: dict[str, list[float]], modes) -> list[str]:
    """``median / mean`` ms per mode, and each mean against the first mode's."""
    first = statistics.fmean(times[modes[0]])
    out = []
    for mode in modes:
        median = statistics.median(times[mode]) * 1e3
        mean = statistics.fmean(times[mode]) * 1e3
        ratio = statistics.fmean(times[mode]) / first
        out.append(f"{median:.1f} / {mean:.1f}" + ("" if mode == modes[0] else f" ({ratio:.2f}x)"))
    return out


def main() -> None:
    parser = page_parser(__doc__, ROOT / "docs" / "measurements" / "solvers.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sizes = {50: (24, 3), 200: (16, 3)} if not args.quick else {50: (6, 1), 200: (4, 1)}
    train_epochs, samples, num_train = (10, 200, 1000) if not args.quick else (1, 8, 64)
    backends = ("highs", "scip", "gurobi")  # each where it can solve the knapsack here
    rows = []
    start = time.perf_counter()
    for num_items, (count, epochs) in sizes.items():
        data = knapsack_data(num_items, count)
        true_costs = data.costs.double().numpy()
        true_solutions = data.solutions.double().numpy()
        for backend in backends:
            if backend not in cl.backends.registry.capable_backends(data.spec):
                print(f"{backend}: cannot solve {data.spec.label} here (not installed, or "
                      "its licence): not measured")
                continue
            times = measure(data.spec, backend, true_costs, true_solutions, epochs,
                            seed=num_items)
            rows.append(row([f"{num_items} x 2", backend, *cells(times, MODES)]))
            print(rows[-1], flush=True)
    replay_rows = []
    train = knapsack_data(50, num_train)
    for loop in LOOPS:
        costs, starts = training_solves(train, loop, train_epochs)
        sample = np.linspace(0, len(costs) - 1, min(samples, len(costs))).astype(int)
        for backend in backends:
            if backend not in cl.backends.registry.capable_backends(train.spec):
                continue
            times = measure_replay(train.spec, backend, costs[sample], starts[sample])
            replay_rows.append(row([loop, backend, *cells(times, ("cold", "pool"))]))
            print(replay_rows[-1], flush=True)
    lines = [
        generated_by("benchmarks/warm_start.py", time.perf_counter() - start)
        + " (a shared 2-core machine: noisy), one solver thread; median / mean ms per solve, "
        "and the mean against no start. Instances per size: "
        + ", ".join(f"{n} x 2: {c} instances x {e} perturbed epochs"
                    for n, (c, e) in sizes.items())
        + "; each mode solves an epoch's instances one after another, the modes in "
        "rotating order.",
        "",
        *table(["knapsack", "backend", "no start", "start: last epoch's solution",
                "start: true solution"], rows),
        "",
        f"The training loops' own exact solves on the 50 x 2 knapsack ({train_epochs} "
        f"epochs of {num_train} instances at solve_ratio 0.1 on SCIP, {samples} solves sampled "
        "evenly from each run, with and without the start the solution cache gave them):",
        "",
        *table(["training loop", "backend", "no start", "start: the pool's best"],
               replay_rows),
    ]
    path = Path(args.out)
    write_block(path, "warm-start", "benchmarks/warm_start.py", lines,
                "## Warm starts")
    print(f"wrote the warm-start table into {path}")


if __name__ == "__main__":
    main()
