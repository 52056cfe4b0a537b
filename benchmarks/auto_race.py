"""backend="auto" against every single backend, side by side: the race of issue 41.

    python benchmarks/auto_race.py [--epochs 8] [--quick] [--out docs/performance.md]

Setting (issue 41): PyEPO's 50 x 2 knapsack (``mip_training.knapsack_data``: 1000
training instances, capacity a quarter of each dimension's weight), ``nn.Linear``,
Adam 1e-2, batch 32, torch on one thread. Two training loops:

- Identity, projection "auto", ``solve_ratio`` 0.1, the pool seeded with the
  training set's solutions, trained on the regret of its decision (as
  ``mip_training.py``'s Identity row);
- SPO+ at ``solve_ratio`` 1.

Each loop runs once with ``backend="auto"`` (the race) and once with each capable
single backend (Gurobi, SCIP, HiGHS; one thread each), from the same initial model and
the same batches, interleaved epoch by epoch so that machine load hits all alike.
Reported: seconds per epoch, the mean over all epochs (the race included) and the
mean over the epochs after the first; ``auto`` / the fastest single backend; which
backend ``auto`` kept and why (``layer.backend_reason``); and the rows the race gave
each candidate, which add up to the rows asked (no solve spent racing that a fixed
choice would not have made).

Then solve loops on the MIP problems where ``auto`` races (docs/problems.md's
knapsack 100 items x 2 and TSP 20, 320 rows each, and mip_training's 200 x 2
knapsack, 96 rows): random costs in batches of 32, each backend with a fresh
solver, so ``auto``'s lead and race are counted in its time; two rounds, the
second in reverse order, and the mean of the two (the rows ``auto`` gave each
candidate are its second round's).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

import combolayer as cl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _doc_blocks import generated_by, page_parser, row, table, write_block  # noqa: E402
from _training import interleaved_epochs  # noqa: E402
from mip_training import knapsack_data  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "performance.md"
SINGLES = ("gurobi", "scip", "highs")


def singles_for(spec) -> list[str]:
    """The single backends of `SINGLES` that are installed and can solve ``spec``."""
    capable = cl.backends.capable_backends(spec)
    return [name for name in SINGLES if name in capable]


def identity_loop(spec, backend, train):
    layer = cl.ComboLayer(spec, projection="auto", solve_ratio=0.1, backend=backend,
                          generator=torch.Generator().manual_seed(0))
    layer.pool.seed(train.solutions)
    sign = layer.solver.sign

    def loss(pred, c, y):
        return (sign * ((layer(pred) - y) * c).sum(-1)).mean()

    return loss, layer.solver


def spo_loop(spec, backend, train):
    spo = cl.losses.SPOPlusLoss(spec, backend=backend)
    return (lambda pred, c, y: spo(pred, c, y)), spo.solver


LOOPS = {"Identity, solve_ratio 0.1, pool seeded": identity_loop,
         "SPO+, solve_ratio 1": spo_loop}


def train_interleaved(loop, spec, train, backends, epochs: int, bar) -> dict:
    """Seconds per epoch of ``loop`` on each backend, interleaved epoch by epoch
    (`_training.interleaved_epochs`): ``{backend: dict(seconds=..., solver=...)}``."""
    solvers = {}

    def maker(backend):
        def make():
            loss, solvers[backend] = loop(spec, backend, train)
            return loss
        return make

    runs = interleaved_epochs({backend: maker(backend) for backend in backends}, train,
                              epochs, lambda name, model: bar.update())
    return {backend: dict(seconds=seconds, solver=solvers[backend])
            for backend, (_, seconds) in runs.items()}


def solve_loops(quick: bool) -> list[tuple[str, object]]:
    """MIP problems on which ``auto`` races (docs/problems.md, docs/performance.md):
    (row label, spec). Seeded, so every run solves the same problems."""
    rng = np.random.default_rng(0)
    n = 20 if quick else 100
    weights = rng.uniform(3, 8, (2, n)).round(1)
    knapsack = cl.problems.Knapsack(weights=weights.tolist(),
                                    capacities=(weights.sum(1) / 4).round(1).tolist())
    heavy = knapsack_data(1, 200 if not quick else 30, 2).spec
    return [(f"knapsack {n} items x 2 (problems.md)", knapsack, 32 if quick else 320),
            (f"knapsack {heavy.num_items} items x 2 (mip_training's per-solve table)", heavy,
             32 if quick else 96),
            ("TSP 20 (problems.md)", cl.problems.TSP(num_nodes=20 if not quick else 13),
             32 if quick else 320)]


def solve_loop(spec, backend, costs: np.ndarray) -> tuple[float, object]:
    """Seconds to solve ``costs`` in batches of 32 with a fresh solver (the race
    included), and the solver."""
    solver = cl.make_solver(spec, backend)
    start = time.perf_counter()
    for chunk in np.array_split(costs, max(1, len(costs) // 32)):
        solver.solve(chunk)
    return time.perf_counter() - start, solver


def solve_rows(quick: bool, bar) -> list[str]:
    rows = []
    for label, spec, count in solve_loops(quick):
        rng = np.random.default_rng(1)
        if isinstance(spec, cl.problems.TSP):
            points = rng.random((count, spec.num_nodes, 2))
            costs = np.linalg.norm(points[:, :, None] - points[:, None], axis=-1)
        else:
            costs = rng.uniform(0, 1, (count, *spec.cost_shape))
        singles = singles_for(spec)
        order = ["auto", *singles]
        runs: dict[str, list[float]] = {backend: [] for backend in order}
        solvers = {}
        for turn in (order, order[::-1]):  # two rounds, the second in reverse order
            for backend in turn:
                seconds, solvers[backend] = solve_loop(spec, backend, costs)
                runs[backend].append(seconds)
        seconds = {backend: statistics.fmean(times) for backend, times in runs.items()}
        bar.update()
        fastest = min(singles, key=seconds.get)
        race = solvers["auto"].kernel
        solved = ("no race (a named kernel)" if not hasattr(race, "solved") else
                  ", ".join(f"{name} {n}" for name, n in race.solved.items())
                  + f"; kept {solvers['auto'].backend}")
        rows.append(row([label, str(count), " / ".join(f"{b} {seconds[b]:.2f}" for b in singles),
                         f"{seconds['auto']:.2f}", fastest,
                         f"{seconds['auto'] / seconds[fastest]:.2f}", solved]))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = page_parser(__doc__, DOC)
    parser.add_argument("--epochs", type=int, default=8)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    began = time.perf_counter()
    items, num_train, epochs = (50, 1000, args.epochs) if not args.quick else (20, 64, 2)
    data = knapsack_data(num_train, items, 2)
    spec = data.spec
    singles = singles_for(spec)
    missing = sorted(set(SINGLES) - set(singles))
    if missing:
        print(f"not measured (not installed or cannot solve {spec.label}): {missing}")
    backends = ["auto", *singles]
    rows, goals, reasons = [], [], []
    loops = solve_loops(args.quick)
    with tqdm(total=len(LOOPS) * epochs * len(backends) + len(loops), desc="auto_race") as bar:
        for label, loop in LOOPS.items():
            runs = train_interleaved(loop, spec, data, backends, epochs, bar)
            means = {b: statistics.fmean(r["seconds"]) for b, r in runs.items()}
            later = {b: statistics.fmean(r["seconds"][1:] or r["seconds"])
                     for b, r in runs.items()}
            fastest = min(singles, key=means.get)
            race = runs["auto"]["solver"].kernel
            solved = getattr(race, "solved", None)
            for backend in backends:
                rows.append(row([label, backend, f"{means[backend]:.3f}",
                                 f"{later[backend]:.3f}",
                                 f"{means[backend] / means[fastest]:.2f}"]))
            extra = "-" if solved is None else (
                f"{sum(solved.values()) - race.rows_in} (rows asked {race.rows_in}; "
                + ", ".join(f"{name} {n}" for name, n in solved.items()) + ")")
            goals.append(row([label, f"{means['auto'] / means[fastest]:.2f}",
                              f"{later['auto'] / later[fastest]:.2f}", fastest,
                              runs["auto"]["solver"].backend, extra]))
            print(f"{label}: auto kept {runs['auto']['solver'].backend}: "
                  f"{runs['auto']['solver'].backend_reason}")
            reasons.append(f"- {label}: {runs['auto']['solver'].backend_reason}")
        loop_rows = solve_rows(args.quick, bar)
    body = [generated_by("benchmarks/auto_race.py", time.perf_counter() - began), "",
            f"{spec.label}, {num_train} training instances, {epochs} epochs, batch 32, one "
            "thread, every backend interleaved epoch by epoch:", "",
            *table(["loop", "backend", "s per epoch (all)", "s per epoch (after the first)",
                    "/ fastest single"], rows), "",
            *table(["loop", "auto / fastest single (all epochs)",
                    "auto / fastest single (after the first)", "fastest single",
                    "auto kept", "solves spent racing beyond a fixed choice"], goals), "",
            "Why `auto` kept what it kept (`backend_reason`, as the layer's repr shows it):", "",
            *reasons, "",
            "Solve loops: the same random costs (uniform in [0, 1); TSP: random points) "
            "solved in batches of 32 by a fresh solver each, `auto`'s race included; the "
            "mean of two rounds, the second in reverse order:", "",
            *table(["problem", "rows", "single backends (s)", "auto (s)", "fastest single",
                    "auto / fastest single", "rows each solved under auto"], loop_rows)]
    print("\n".join(body))
    write_block(Path(args.out), "auto-race", "benchmarks/auto_race.py", body,
                "## backend=\"auto\" races the exact backends (issue 41)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
