"""backend="race" (the opt-in race) against every single backend, side by side.

    python benchmarks/auto_race.py [--epochs 8] [--quick] [--out docs/measurements/race.md]

Setting: PyEPO's 50 x 2 knapsack (``mip_training.knapsack_data``: 1000
training instances, capacity a quarter of each dimension's weight), ``nn.Linear``,
Adam 1e-2, batch 32, torch on one thread. Two training loops:

- Identity, projection "auto", ``solve_ratio`` 0.1, the pool seeded with the
  training set's solutions, trained on the regret of its decision (as
  ``mip_training.py``'s Identity row);
- SPO+ at ``solve_ratio`` 1.

Each loop runs once with ``backend="auto"`` (the static default), once with
``backend="race"`` and once with each capable single backend (Gurobi, SCIP, HiGHS;
one thread each), from the same initial model and the same batches, interleaved epoch
by epoch so that machine load hits all alike.
Reported: seconds per epoch, the mean over all epochs (the race included) and the
mean over the epochs after the first; ``auto`` / the fastest single backend; which
backend the race kept and why (``layer.backend_reason``); and the rows each candidate
solved, the trial's by every one (the solves spent racing beyond a fixed choice).

Then solve loops, one for every MIP row of docs/measurements/solvers.md
(`solve_loops`): PyEPO's knapsacks with their own costs (50 x 2, 200 x 2, 1000 x 2,
200 x 5), solvers.md's knapsacks (2 x 32, 2 x 100), the facility-location example
with its known cost, TSP 20, 50, 60, 100 and 150; 4 to 320 rows each, in batches of 32
(a quarter of the rows below 128), each backend with a fresh solver, so the race's trial is
counted in its time (`interleaved_loops`). ``auto`` and every single backend take
turns batch by batch (a single stops at `GIVE_UP` times ``auto``'s time at the
same batch: it is not the fastest), then the fastest single and ``auto`` again,
each round with fresh solvers on the same rows: two rounds, or `RACES` for a loop
that took ``auto`` under `REPEAT_UNDER` seconds with at least `REPEAT_MIN_ROWS`
rows (the race decides on few, heavy-tailed, cold or warm rows, so one race is one
sample: ten facility-location races took 1.04-1.28x SCIP, same rows). A
loop's ratio is the median of its rounds' ``auto`` / fastest single, with the
range; the times shown are the means of the rounds. Taking turns batch by batch puts a
change in the machine's load on every backend alike (run one after another, the
same loop moved up to 0.1 in its ratio between runs). Rows where ``auto`` does not
race (a named kernel: the knapsack DP, Held-Karp, enumeration) say so instead of
timing, and `NOT_MEASURED` lists the MIP rows no loop here times, and why.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

import combolayer as cl
from combolayer.backends.race import RacingKernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
import enumeration  # noqa: E402
from _doc_blocks import generated_by, page_parser, row, table, write_block  # noqa: E402
from _training import interleaved_epochs  # noqa: E402
from mip_training import knapsack_data  # noqa: E402
from problems import knapsack_spec, tsp_costs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "measurements" / "race.md"
SINGLES = ("gurobi", "scip", "highs")


def singles_for(spec, racing: list[str] = ()) -> list[str]:
    """The single backends of `SINGLES` that are installed and can solve ``spec``, then
    those of ``racing`` (the race's candidates) not among them."""
    capable = cl.backends.capable_backends(spec)
    ours = [name for name in SINGLES if name in capable]
    return ours + [name for name in racing if name not in ours]


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


def solve_loops(quick: bool) -> list[tuple[str, str, object, np.ndarray]]:
    """Every MIP row of docs/measurements/solvers.md as a solve loop:
    (problem, where the docs have it, spec, cost rows). Seeded, so every run solves
    the same problems."""
    rng = np.random.default_rng(0)

    def pyepo(items: int, dim: int, rows: int):
        # mip_training's per-solve table: PyEPO's knapsack and its own costs
        data = knapsack_data(rows, items, dim, seed=1)
        return data.spec, data.costs.double().numpy()

    def problems_md(dim: int, items: int, rows: int, decimals: int = 1):
        # benchmarks/problems.py's knapsack: fractional weights, uniform values
        return knapsack_spec(rng, dim, items, decimals), rng.random((rows, items))

    def tsp(n: int, rows: int):
        return cl.problems.TSP(num_nodes=n), tsp_costs(rng, rows, n)

    if quick:
        return [("knapsack 2 x 32", "solvers.md", *problems_md(2, 32, 16)),
                ("knapsack 2 x 32, integer weights", "solvers.md", *problems_md(2, 32, 16, 0)),
                ("TSP 13", "solvers.md", *tsp(13, 16))]
    sys.path.insert(0, str(ROOT / "examples"))
    import facility_location

    facility = facility_location.model_spec()
    _, facility_costs = facility_location.data(256, torch.Generator().manual_seed(0))
    return [
        ("knapsack 50 x 2 (PyEPO)", "training.md: MIP scale; solvers.md: warm starts; gpu.md",
         *pyepo(50, 2, 320)),
        ("knapsack 200 x 2 (PyEPO)",
         "solvers.md: named problems, warm starts; training.md: scale-out",
         *pyepo(200, 2, 320)),
        ("knapsack 1000 x 2 (PyEPO)", "solvers.md: named problems", *pyepo(1000, 2, 320)),
        ("knapsack 200 x 5 (PyEPO)", "solvers.md: named problems", *pyepo(200, 5, 320)),
        ("knapsack 2 x 32", "solvers.md: named problems", *problems_md(2, 32, 320)),
        ("knapsack 2 x 100", "solvers.md: named problems", *problems_md(2, 100, 160)),
        ("knapsack 2 x 32, integer weights", "solvers.md: named problems",
         *problems_md(2, 32, 320, 0)),
        ("knapsack 2 x 100, integer weights", "solvers.md: named problems",
         *problems_md(2, 100, 160, 0)),
        ("facility location, known cost (18 outputs, 3 auxiliaries)",
         "training.md: known cost", facility, facility_costs.numpy()),
        ("TSP 10", "solvers.md: TSP backends", *tsp(10, 320)),
        ("TSP 20", "solvers.md: named problems, TSP backends", *tsp(20, 320)),
        ("TSP 50", "solvers.md: named problems, TSP backends; training.md: scale-out",
         *tsp(50, 160)),
        ("TSP 60", "solvers.md: TSP backends", *tsp(60, 32)),
        ("TSP 100", "solvers.md: TSP backends", *tsp(100, 16)),
        # 4 rows: a HiGHS row took 0.08-9 s, SCIP's 1.7 and 28 s (its model 0.8 s);
        # 8 rows could cost minutes of SCIP, past this benchmark's 10 minutes
        ("TSP 150", "solvers.md: TSP backends", *tsp(150, 4)),
        ("binary ILP, 16 variables, 65536 points", "solvers.md: enumeration",
         enumeration.problem(16, rng, free=True), rng.normal(size=(320, 16))),
        ("binary ILP, 16 variables, two knapsack rows", "solvers.md: enumeration",
         enumeration.problem(16, rng), rng.normal(size=(320, 16))),
    ]


#: MIP rows of the docs that no solve loop here measures, and why.
NOT_MEASURED = [
    ("VRP 8, 12 (MTZ)", "solvers.md: named problems",
     "not a spec (benchmarks/vrp_mtz.py's own ILP, 0.6-120 s a solve)"),
    ("learned constraints (comboptnet)", "training.md: learned constraints",
     "not raced: calls with per-call rows go whole to the first-ranked backend"),
]

#: Races (rounds of `auto` and the fastest single) of a loop that took `auto` under
#: `REPEAT_UNDER` CPU seconds in the first round and has `REPEAT_MIN_ROWS` rows or more;
#: other loops run two (TSP 150's 4 rows: one SCIP row may take 28 s).
RACES = 3
REPEAT_UNDER = 5.0
REPEAT_MIN_ROWS = 32

#: A single backend that has taken this many times `auto`'s time on a loop stops there:
#: it is not the fastest, and its time is shown as a lower bound.
GIVE_UP = 2.0


def interleaved_loops(spec, backends: list[str], costs: np.ndarray,
                      give_up: float = math.inf) -> dict[str, tuple[float, bool, object]]:
    """CPU seconds of this process for each backend to build a fresh solver and solve
    ``costs`` in batches (32 rows, or a quarter of the rows when fewer than 128), the
    backends taking turns batch by batch, in reverse order every other batch, so that
    the machine's load hits all alike (every backend single-threaded, in this process);
    the builds are counted, and ``auto``'s race. A backend other than the first stops
    once its time exceeds ``give_up`` times the first's at the same batch (from the
    second batch on: it is not the fastest). ``{backend: (seconds, finished, solver)}``."""
    seconds, solvers = dict.fromkeys(backends, 0.0), {}
    for backend in backends:
        began = time.process_time()
        solvers[backend] = cl.make_solver(spec, backend)
        seconds[backend] += time.process_time() - began
    running, first = list(backends), backends[0]
    step = min(32, max(1, len(costs) // 4))
    for i, chunk in enumerate(np.array_split(costs, max(1, len(costs) // step))):
        for backend in running if i % 2 == 0 else running[::-1]:
            began = time.process_time()
            solvers[backend].solve(chunk)
            seconds[backend] += time.process_time() - began
        if i:
            running = [b for b in running if b == first or seconds[b] <= give_up * seconds[first]]
    return {b: (seconds[b], b in running, solvers[b]) for b in backends}


def solve_rows(quick: bool, bar) -> tuple[list[str], list[float]]:
    """The solve-loop table's rows, and the ratios auto / fastest single measured."""
    rows, ratios = [], []
    for label, where, spec, costs in solve_loops(quick):
        auto = cl.make_solver(spec, "race")
        if not isinstance(auto.kernel, RacingKernel):
            rows.append(row([label, where, "-", "-", "-", "-", "-",
                             f"no race: {auto.backend}, {auto.backend_reason.split(': ', 1)[1]}"]))
            bar.update()
            continue
        singles = singles_for(spec, auto.kernel.names)
        # round 1: auto and every single interleaved batch by batch (a single given up
        # past GIVE_UP x auto's time); then the fastest single and auto again,
        # interleaved, fresh solvers each round: one race is one sample
        first = interleaved_loops(spec, ["race", *singles], costs, GIVE_UP)
        runs = {b: [seconds] for b, (seconds, _, _) in first.items()}
        finished = {b: done for b, (_, done, _) in first.items()}
        fastest = min((b for b in singles if finished[b]), key=lambda b: runs[b][0])
        races = [first["race"][2].kernel]
        repeat = runs["race"][0] < REPEAT_UNDER and len(costs) >= REPEAT_MIN_ROWS
        for _ in range((RACES if repeat else 2) - 1):
            again = interleaved_loops(spec, [fastest, "race"], costs)
            for backend in (fastest, "race"):
                runs[backend].append(again[backend][0])
            races.append(again["race"][2].kernel)
        mean = {b: statistics.fmean(t) for b, t in runs.items()}
        bar.update()
        each = [a / f for a, f in zip(runs["race"], runs[fastest])]
        ratio = statistics.median(each)
        ratios.append(ratio)
        shown = " / ".join(f"{b} {mean[b]:.2f}" if finished[b] else f"{b} > {mean[b]:.2f}"
                           for b in singles)
        kept = ", ".join(race.winner or f"none ({race.current_backend} best)" for race in races)
        solved = (f"kept {kept}; last race "
                  + ", ".join(f"{name} {n}" for name, n in races[-1].solved.items()))
        rows.append(row([label, where, str(len(costs)), shown, f"{mean['race']:.2f}", fastest,
                         f"{ratio:.2f} ({min(each):.2f}-{max(each):.2f}, {len(each)} races)",
                         solved]))
    for label, where, why in NOT_MEASURED if not quick else []:
        rows.append(row([label, where, "-", "-", "-", "-", "-", why]))
    return rows, ratios


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
    backends = ["auto", "race", *singles]  # "auto": the static default choice
    rows, goals, reasons = [], [], []
    loops = solve_loops(args.quick)
    with tqdm(total=len(LOOPS) * epochs * len(backends) + len(loops), desc="auto_race") as bar:
        for label, loop in LOOPS.items():
            runs = train_interleaved(loop, spec, data, backends, epochs, bar)
            means = {b: statistics.fmean(r["seconds"]) for b, r in runs.items()}
            later = {b: statistics.fmean(r["seconds"][1:] or r["seconds"])
                     for b, r in runs.items()}
            fastest = min(singles, key=means.get)
            race = runs["race"]["solver"].kernel
            solved = getattr(race, "solved", None)
            for backend in backends:
                rows.append(row([label, backend, f"{means[backend]:.3f}",
                                 f"{later[backend]:.3f}",
                                 f"{means[backend] / means[fastest]:.2f}"]))
            extra = "-" if solved is None else (
                f"{sum(solved.values()) - race.instances_in} "
                f"(rows asked {race.instances_in}; "
                + ", ".join(f"{name} {n}" for name, n in solved.items()) + ")")
            goals.append(row([label, f"{means['auto'] / means[fastest]:.2f}",
                              f"{means['race'] / means[fastest]:.2f}",
                              f"{later['race'] / later[fastest]:.2f}", fastest,
                              runs["auto"]["solver"].backend,
                              runs["race"]["solver"].backend, extra]))
            print(f"{label}: auto kept {runs['race']['solver'].backend}: "
                  f"{runs['race']['solver'].backend_reason}")
            reasons.append(f"- {label}: {runs['race']['solver'].backend_reason}")
        loop_rows, ratios = solve_rows(args.quick, bar)
    body = [generated_by("benchmarks/auto_race.py", time.perf_counter() - began), "",
            f"{spec.label}, {num_train} training instances, {epochs} epochs, batch 32, one "
            "thread, every backend interleaved epoch by epoch:", "",
            *table(["loop", "backend", "s per epoch (all)", "s per epoch (after the first)",
                    "/ fastest single"], rows), "",
            *table(["loop", "static auto / fastest single (all epochs)",
                    "race / fastest single (all epochs)",
                    "race / fastest single (after the first)", "fastest single",
                    "static auto chose", "race kept",
                    "solves spent racing beyond a fixed choice"], goals), "",
            "Why the race kept what it kept (`backend_reason`, as the layer's repr shows it):", "",
            *reasons, "",
            "Solve loops, one for every MIP row of docs/measurements/solvers.md: "
            "the row's problem and costs (PyEPO's knapsack: its own costs; solvers.md's "
            "knapsacks: uniform values; TSP: random points; facility location: its "
            "example's costs) solved in batches of 32 (a quarter of the rows below 128) by "
            "a fresh solver each (its build and `auto`'s race included), timed in CPU "
            "seconds of the process (every backend single-threaded, in-process). The "
            "backends take turns batch by batch (in reverse order every other batch), so "
            "the machine's load hits all alike: `auto` and every single backend (one stops "
            f"at {GIVE_UP:g}x `auto`'s time at the same batch: '>'), then the fastest "
            "single and `auto` again, fresh solvers each round: two rounds, or "
            f"{RACES} for a loop that took `auto` under {REPEAT_UNDER:g} s with "
            f"{REPEAT_MIN_ROWS} rows or more (one race is one sample). Times are the means "
            "of the rounds; the ratio is the median of the rounds' ratios, with their "
            "range. Rows where `auto` does not race say why:", "",
            *table(["problem", "in the docs", "rows", "single backends (s)", "auto (s)",
                    "fastest single", "auto / fastest single (median, range)",
                    "which backend each race kept; rows each solved in the last"],
                   loop_rows), "",
            (f"auto / fastest single over the {len(ratios)} measured loops (each the median "
             f"of its races): median {statistics.median(ratios):.2f}, worst "
             f"{max(ratios):.2f}; {sum(r <= 1.15 for r in ratios)} of {len(ratios)} within "
             "1.15" if ratios else "")]
    print("\n".join(body))
    write_block(Path(args.out), "auto-race", "benchmarks/auto_race.py", body,
                "## `backend=\"race\"`: the exact backends race")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
