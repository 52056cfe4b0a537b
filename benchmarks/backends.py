"""Backend speed: kept vs rebuilt models, and serial vs 2 threads / 2 processes.

    python benchmarks/backends.py                 # the numbers in docs/backends.md
    python benchmarks/backends.py --batch 16 --tsp-batch 8 --repeats 3   # quicker

Part 1 prints, per backend and problem, the median latency of one solve on a
kept model (built once, only the objective changes) against a model rebuilt
for every solve. Part 2 prints the wall time of a batch of 64 cost vectors on
TSP-50 and on a 30x30 grid shortest-path LP, serial against the thread and
process executors with 2 workers, and the speedup (goal: >= 1.8x wherever one
solve takes >= 1 ms).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from tqdm import tqdm

import combolayer as cl
from combolayer.backends import backends
from combolayer.problems import TSP, Knapsack, ShortestPath

BACKENDS = {
    "highs": {"name": "highs"},
    "scip": {"name": "scip"},
    "cvxpy/HIGHS": {"name": "cvxpy", "options": {"solver": "HIGHS"}},
    "cvxpy/SCIP": {"name": "cvxpy", "options": {"solver": "SCIP"}},
}


def grid_lp(size: int = 30) -> cl.ILP:
    """The grid shortest path as an LP: its flow matrix is totally unimodular, so the
    LP optimum is a path; solvers see a pure LP with 900 outputs."""
    ilp = ShortestPath.grid(size, size).to_ilp()
    return ilp.model_copy(update={"integrality": "continuous"})


def tsp_costs(rng: np.random.Generator, batch: int, n: int) -> np.ndarray:
    points = rng.random((batch, n, 2))
    return np.linalg.norm(points[:, :, None] - points[:, None], axis=-1)


def problems(args: argparse.Namespace, rng: np.random.Generator) -> dict:
    knapsack = Knapsack(weights=rng.integers(1, 30, size=(2, 50)).tolist(),
                        capacities=[300, 300])
    return {
        "grid LP 30x30": (grid_lp(), lambda b: rng.random((b, 30, 30))),
        "knapsack-50": (knapsack, lambda b: rng.random((b, 50))),
        f"TSP-{args.tsp_nodes}": (TSP(num_nodes=args.tsp_nodes),
                                  lambda b: tsp_costs(rng, b, args.tsp_nodes)),
    }


def latency(args: argparse.Namespace, rng: np.random.Generator) -> None:
    print(f"\n## Per-solve latency, median of {args.repeats} (ms): kept model vs rebuilt")
    print(f"{'problem':<15} {'backend':<12} {'kept':>9} {'rebuilt':>9} {'ratio':>7}")
    for label, (spec, make_costs) in problems(args, rng).items():
        for name, config in BACKENDS.items():
            if label.startswith("TSP") and name.startswith("cvxpy"):
                continue  # MTZ TSP-50 through cvxpy takes minutes per solve
            config = cl.BackendConfig.load(config)
            solver = cl.make_solver(spec, config)
            cls = backends()[config.name]
            costs = make_costs(args.repeats + 1)
            solver.solve(costs[0])  # first solve pays one-off set-up
            kept, rebuilt = [], []
            for cost in tqdm(costs[1:], desc=f"{label} {name}", leave=False):
                start = time.perf_counter()
                solver.solve(cost)
                kept.append(time.perf_counter() - start)
                start = time.perf_counter()
                kernel = cls().compile(spec, config)
                kernel(np.ascontiguousarray(cost.reshape(1, -1) * solver.sign, dtype=float))
                rebuilt.append(time.perf_counter() - start)
            k, r = statistics.median(kept), statistics.median(rebuilt)
            print(f"{label:<15} {name:<12} {1e3 * k:9.2f} {1e3 * r:9.2f} {r / k:6.1f}x")


def headroom() -> float:
    """2-thread speedup of a GIL-free C loop (sha256): what 2 workers can get at best
    on this machine right now (below 2x when other jobs share the cores)."""
    import hashlib
    import threading

    data = b"x" * (128 << 20)

    def work() -> None:
        hashlib.sha256(data).digest()

    start = time.perf_counter()
    work()
    work()
    serial = time.perf_counter() - start
    threads = [threading.Thread(target=work) for _ in range(2)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return serial / (time.perf_counter() - start)


def throughput(args: argparse.Namespace, rng: np.random.Generator) -> None:
    print("\n## Batch throughput: serial vs 2 workers (wall seconds per batch, speedup)")
    print(f"control: sha256 in 2 threads runs {headroom():.2f}x faster than serially "
          "(the ceiling for any executor here)")
    print(f"{'problem':<15} {'backend':<7} {'batch':>5} {'serial':>8} {'thread':>15} "
          f"{'process':>15}")
    cases = {k: v for k, v in problems(args, rng).items() if not k.startswith("knapsack")}
    # Sub-millisecond solves: the executors must fall back to serial, not lose time.
    tiny = cl.ILP.from_matrices(shape=[8], A_ub=np.ones((1, 8)), b_ub=[3],
                                integrality="continuous")
    cases["tiny LP (8 vars)"] = (tiny, lambda b: rng.normal(size=(b, 8)))
    for label, (spec, make_costs) in cases.items():
        batch = args.tsp_batch if label.startswith("TSP") else args.batch
        for name in ("highs", "scip"):
            costs = make_costs(batch)
            # Enough rows to start the pool (executors start one only when a batch
            # pays for it), so the timed batch measures the steady state.
            warm = make_costs(6 if label.startswith("TSP") else 32)
            times = {}
            outputs = {}
            for executor in tqdm(("serial", "thread", "process"), desc=f"{label} {name}",
                                 leave=False):
                solver = cl.make_solver(spec, {"name": name, "executor": executor,
                                               "workers": 1 if executor == "serial" else 2})
                solver.solve(warm)  # starts the workers and builds their models
                start = time.perf_counter()
                outputs[executor] = solver.solve(costs)
                times[executor] = time.perf_counter() - start
                solver.close()
            objective = {e: (y * costs).reshape(batch, -1).sum(1) for e, y in outputs.items()}
            for executor in ("thread", "process"):
                assert np.allclose(objective[executor], objective["serial"]), executor
            serial = times["serial"]
            per_solve = 1e3 * serial / batch
            print(f"{label:<15} {name:<7} {batch:5d} {serial:8.2f} "
                  f"{times['thread']:8.2f} ({serial / times['thread']:3.1f}x) "
                  f"{times['process']:8.2f} ({serial / times['process']:3.1f}x)"
                  f"   [{per_solve:.1f} ms/solve serial]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--tsp-batch", type=int, default=64)
    parser.add_argument("--tsp-nodes", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--skip-latency", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    if not args.skip_latency:
        latency(args, rng)
    throughput(args, rng)
    print(f"\ncontrol again after the runs: {headroom():.2f}x")


if __name__ == "__main__":
    main()
