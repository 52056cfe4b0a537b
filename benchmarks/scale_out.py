"""Scale-out from the first epoch: cold and warm worker rows, a scaling curve, and a
model of epoch time against the number of nodes.

    PYTHONPATH=. python benchmarks/scale_out.py [--quick] [--no-ray]

(``PYTHONPATH=.`` so that a checkout other than the installed one is measured.)

Writes docs/measurements/training.md's ``scale-out`` block and docs/img/scale_out.png.

Cold rows: a fresh parallel solver (``make_solver`` included) and a fresh serial
one solve the same batches in turns (parallel first on even calls, serial first
on odd ones); the
ratio is the two sides' summed wall times over the first calls, so the workers'
start-up (which the executor begins in the background at the first call, while the
caller solves) is counted. The Ray rows have ``ray.init`` done before (a user's cluster),
the actors' creation counted.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _doc_blocks import write_block

import combolayer as cl
from combolayer.cli import perf

ROOT = Path(__file__).resolve().parents[1]


def knapsack_2x200(seed: int = 0) -> cl.problems.Knapsack:
    rng = np.random.default_rng(seed)
    weights = rng.uniform(3, 8, (2, 200)).round(1)  # fractional, like PyEPO's
    return cl.problems.Knapsack(weights=weights.tolist(),
                                capacities=(weights.sum(1) / 4).round(1).tolist())


class StartTimes(logging.Handler):
    """The seconds each executor's workers took to start, from the executor's log."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seconds: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "workers started" in str(record.msg):
            self.seconds.append(float(record.args[-1]))


def cold(spec, backend: str, executor: str, batches: list[np.ndarray], workers: int = 2):
    """Summed wall seconds of a fresh parallel and a fresh serial solver, calls in turns,
    the parallel/serial ratio of each call, and the seconds from the first call (which
    starts the workers) until they were ready, or None if they never were."""
    log = logging.getLogger("combolayer.executors")
    started = StartTimes()
    log.addHandler(started)
    log.setLevel(logging.INFO)
    par_t = ser_t = 0.0
    start = time.perf_counter()
    parallel = cl.make_solver(spec, {"name": backend, "executor": executor,
                                     "workers": workers})
    par_t += time.perf_counter() - start
    start = time.perf_counter()
    serial = cl.make_solver(spec, backend)
    ser_t += time.perf_counter() - start
    per_call = []
    for i, costs in enumerate(batches):
        # Alternate which side goes first, so that neither always pays the process's
        # own first-call costs or follows the other's load.
        sides = [(parallel, 0), (serial, 1)] if i % 2 == 0 else [(serial, 1), (parallel, 0)]
        took, out = [0.0, 0.0], [None, None]
        for solver, k in sides:
            start = time.perf_counter()
            out[k] = solver.solve(costs)
            took[k] = time.perf_counter() - start
        if not np.array_equal(out[0], out[1]):
            raise AssertionError("the workers' solutions differ from the serial solver's")
        par_t += took[0]
        ser_t += took[1]
        per_call.append(took[0] / took[1])
    parallel.kernel.close()
    log.removeHandler(started)
    return par_t, ser_t, per_call, (started.seconds[0] if started.seconds else None)


def import_seconds(repeats: int = 3) -> float:
    """What every worker pays before its model: a fresh interpreter importing the module
    that holds the workers' entry points (torch and combolayer come with it)."""
    command = [sys.executable, "-c", "import combolayer.executors"]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def rows_per_second(spec, backend: str, executor: str, workers: int, costs, rounds: int = 3):
    """Warm throughput: the workers started and warmed first, then ``rounds`` batches."""
    if workers == 1:
        solver = cl.make_solver(spec, backend)
    else:
        solver = cl.make_solver(spec, {"name": backend, "executor": executor,
                                       "workers": workers})
        kernel = solver.kernel
        kernel.ready(wait=120)
    solver.solve(costs)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        solver.solve(costs)
        times.append(time.perf_counter() - start)
    if workers > 1:
        solver.kernel.close()
    return len(costs) / statistics.median(times)


def handoff_seconds(executor: str, calls: int = 30) -> float:
    """Round trip of one 1-row chunk to a warm worker, minus the solve itself."""
    spec = cl.problems.TopK(n=5, k=2)
    solver = cl.make_solver(spec, {"name": "highs", "executor": executor, "workers": 2})
    kernel = solver.kernel
    kernel.ready(wait=120)
    row = np.arange(5.0)[None]
    kernel._map([(row, None, None)], None)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        kernel._map([(row, None, None)], None)
        times.append(time.perf_counter() - start)
    kernel.close()
    return statistics.median(times)


def driver_seconds(n: int = 200, batch: int = 32, rounds: int = 50) -> float:
    """The driver's own work per batch of the knapsack training, solve excluded: a linear
    model, the layer's projection, the regret loss, backward and an Adam step."""
    import torch

    layer = cl.ComboLayer(knapsack_2x200())
    model = torch.nn.Linear(5, n)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.randn(batch, 5)
    y = torch.zeros(batch, n)
    proj = layer.projection
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        pred = model(x)
        u = proj(pred)
        loss = ((u - y) * pred).sum(-1).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "docs" / "measurements" / "training.md"))
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    began = time.perf_counter()
    worker_import = import_seconds()
    rows = []
    rng = np.random.default_rng(7)

    tsp = cl.problems.TSP(num_nodes=50)
    tsp_batches = [perf.tsp_costs(50, 32, seed=100 + i) for i in range(12)]
    p, s, calls, ready = cold(tsp, "auto", "process", tsp_batches)
    rows.append(("TSP-50, batch 32, process, 2 workers, the first 12 calls", p, s, calls,
                 ready, "<= 0.65"))
    print(rows[-1], flush=True)

    knap = knapsack_2x200()
    knap_batches = [rng.random((16, 200)) for _ in range(8)]
    p, s, calls, ready = cold(knap, "scip", "process", knap_batches)
    rows.append(("knapsack 2x200, SCIP, batch 16, process, 2 workers, the first 8 calls",
                 p, s, calls, ready, "<= 0.65"))
    print(rows[-1], flush=True)

    ray_note = "not measured (--no-ray)"
    if not args.no_ray:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        ray_batches = [rng.random((16, 200)) for _ in range(8)]
        p, s, calls, ready = cold(knap, "scip", "ray", ray_batches)
        rows.append(("the same on Ray, 2 actors, Ray initialised, actor creation counted",
                     p, s, calls, ready, "<= 0.75"))
        print(rows[-1], flush=True)
        ray_note = ""

    warm = perf.tsp_workers(batch=64, rounds=1 if args.quick else 3)
    print(warm.row(), flush=True)

    # Scaling curve: warm rows/s against workers (1 and 2 on this machine).
    curve_costs = rng.random((32 if args.quick else 64, 200))
    curve = {w: rows_per_second(knap, "scip", "process", w, curve_costs) for w in (1, 2)}
    print("curve", curve, flush=True)

    # The model of epoch time against nodes.
    per_solve = 1.0 / curve[1]
    handoff = {e: handoff_seconds(e) for e in (["process"] + ([] if args.no_ray else ["ray"]))}
    driver = driver_seconds()
    print("per solve", per_solve, "handoff", handoff, "driver", driver, flush=True)

    load = os.getloadavg()
    img = ROOT / "docs" / "img" / "scale_out.png"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot(list(curve), list(curve.values()), "o-", label="measured (process)")
    ax.plot(list(curve), [curve[1] * w for w in curve], "--", label="linear")
    ax.set_xlabel("workers")
    ax.set_ylabel("rows / s")
    ax.set_title("knapsack 2x200, SCIP, batch 64")
    ax.legend()
    fig.tight_layout()
    fig.savefig(img, dpi=100)

    body = [f"Generated by `python benchmarks/scale_out.py{' --quick' if args.quick else ''}"
            f"{' --no-ray' if args.no_ray else ''}` on {datetime.date.today()} in "
            f"{time.perf_counter() - began:.0f} s ({platform.machine()}, "
            f"{len(os.sched_getaffinity(0))} usable cores, load average "
            f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end, shared with other "
            "jobs: the ratios measure the contention as well as the workers).", "",
            "| parallel / serial, summed wall time, start-up included | parallel (s) | "
            "serial (s) | ratio | per call | workers ready after (s) | goal |",
            "|---|---|---|---|---|---|---|"]
    for name, p, s, calls, ready, goal in rows:
        per = " ".join(f"{c:.2f}" for c in calls)
        after = "never" if ready is None else f"{ready:.2f}"
        body.append(f"| {name} | {p:.2f} | {s:.2f} | {p / s:.2f} | {per} | {after} | {goal} |")
    if ray_note:
        body.append(f"| the same on Ray | | | | {ray_note} | | <= 0.75 |")
    body.append(f"| warm: {warm.name} (pool started and warmed first) | {warm.a_ms / 1e3:.2f} "
                f"| {warm.b_ms / 1e3:.2f} | {warm.ratio:.2f} | | | <= 0.56 |")
    body += ["", "\"Workers ready after\": the seconds from the first call, which starts "
             "them in the background, until every worker had built its model; the caller "
             "solves the batches' instances meanwhile, and hands the ones left to the "
             "workers once they are ready. Every worker is a fresh interpreter that "
             f"imports torch and combolayer first: {worker_import:.2f} s on this machine "
             "(median of 3, idle), while the caller goes on solving on the same cores."]
    body += ["", "Scaling curve, warm (workers started and warmed first), knapsack 2x200 "
             "with SCIP, a batch of 64:", "", "| workers | rows / s | speed-up |",
             "|---|---|---|"]
    body += [f"| {w} | {r:.1f} | {r / curve[1]:.2f} |" for w, r in curve.items()]
    body += ["", "![rows per second against workers](../img/scale_out.png)", ""]
    # Epoch model: 1000 instances, batch 32, 2 cores per node, one actor per core.
    batches, batch, cores = 1000 // 32 + 1, 32, 2
    hand = handoff.get("ray", handoff["process"])
    body += ["### Scaling past one machine", "",
             f"A model, not a measurement: the knapsack training (2x200, SCIP, batch {batch}, "
             f"{batches} batches per epoch of 1000 instances) on nodes of {cores} cores, one "
             f"actor per core, from the costs measured above: {per_solve * 1e3:.1f} ms per "
             f"solve, {hand * 1e3:.1f} ms per chunk hand-off "
             f"({'Ray' if 'ray' in handoff else 'process'} round trip on loopback; add "
             f"the network's round trip across machines), and {driver * 1e3:.1f} ms of "
             "driver work per batch (model, projection, loss, backward, Adam step). One "
             "batch takes driver + ceil(rows / actors) solves + the hand-offs that the "
             "driver sends one after another (one chunk per actor):", "",
             "| nodes | actors | epoch (s) | solving (s) | driver + hand-off (s) |",
             "|---|---|---|---|---|"]
    floor_at = None
    sizes = (1, 2, 4, 8, 16, 32)
    for nodes in sizes:
        actors = nodes * cores
        solve = -(-batch // actors) * per_solve
        overhead = driver + min(actors, batch) * hand
        epoch = batches * (solve + overhead)
        if floor_at is None and overhead >= solve:
            floor_at = nodes
        body.append(f"| {nodes} | {actors} | {epoch:.2f} | {batches * solve:.2f} | "
                    f"{batches * overhead:.2f} |")
    full = next(nodes for nodes in sizes if nodes * cores >= batch)  # one row per actor
    if floor_at is not None and floor_at <= full:
        floor = (f"The driver becomes the floor at {floor_at} node(s): from there, each "
                 "batch waits longer on the driver's own step and on handing out one chunk "
                 "per actor than on the solves, so more nodes add hand-offs faster than they "
                 "remove solve time.")
    else:
        floor = (f"The epoch stops falling at {full} nodes, where each of the batch's "
                 f"{batch} rows has an actor of its own; up to there the solves, not the "
                 "driver and the hand-offs, are most of each batch.")
    body += ["", f"{floor} Bigger batches, or several batches in flight, move the floor "
             "out.", ""]
    write_block(Path(args.out), "scale-out", "benchmarks/scale_out.py", body,
                "## Scale-out from the first epoch")
    print(f"wrote {args.out} and {img}")


if __name__ == "__main__":
    main()
