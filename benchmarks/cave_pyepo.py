"""CaVE, CaVE+ and CaVE Hybrid against PyEPO's on the CaVE paper's settings: CPU time and regret.

Tang & Khalil (CPAIOR 2024): PyEPO's shortest path on the 5x5 grid (5 features,
degree 4, noise half-width 0.5) and its TSP on 20 nodes (degree 4, the same noise),
a linear model, Adam 1e-2, batches of 32. Both libraries train from the same initial
weights on the same batches and seeds, epoch by epoch in turn (so machine load hits
both alike), each with its own cones computed once before training (PyEPO's
``optDatasetConstrs`` with its Gurobi model, combolayer's `binding_cones`; not
timed) and its own batching of them (timed): PyEPO pads them per batch
(``collate_tight_constraints``), combolayer indexes its `BindingCones`. Times are the
process's CPU time per epoch, one thread each (torch, Gurobi). Regret is the
normalised regret on the test set, every model's decisions solved by combolayer's
exact solver. On TSP20 combolayer also trains on PyEPO's cones (``binding=`` the padded
tensor), which shows that the two losses agree where their cones do.

    python benchmarks/cave_pyepo.py            # writes the block into docs/measurements/pyepo.md
    python benchmarks/cave_pyepo.py --quick    # a toy size, end to end
"""

from __future__ import annotations

import copy
import platform
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _doc_blocks import generated_by, page_parser, row, table, write_block  # noqa: E402
from _training import one_thread  # noqa: E402

import combolayer as cl  # noqa: E402

PAGE = Path(__file__).resolve().parents[1] / "docs" / "measurements" / "pyepo.md"
#: Clarabel's own default iteration cap: the exact projection (it converges in ~10-20).
EXACT = 200
#: The paper's CaVE Hybrid: the QP on this share of the batches, else the heuristic.
HYBRID_SOLVE_RATIO = 0.3


def methods(problem: str) -> dict[str, dict]:
    if problem == "tsp":
        return {"CaVE+": dict(max_iter=3), "SPO+": {}}
    return {"CaVE": dict(max_iter=EXACT), "CaVE+": dict(max_iter=3),
            "CaVE Hybrid": dict(max_iter=3, solve_ratio=HYBRID_SOLVE_RATIO)}


def datasets(problem: str, num_train: int, num_test: int, seed: int):
    if problem == "tsp":
        from pyepo.model.grb import tspDFJModel

        data = cl.data.tsp(num_train + num_test, 5, num_nodes=20, deg=4, noise_width=0.5,
                           seed=seed, edges=True)
        model = one_thread(tspDFJModel(20))
    else:
        from pyepo.model.grb import shortestPathModel

        data = cl.data.shortest_path(num_train + num_test, 5, grid=(5, 5), deg=4,
                                     noise_width=0.5, seed=seed)
        model = one_thread(shortestPathModel(grid=(5, 5)))
    train, test = data.split(num_train)
    return train, test, model


def losses(problem: str, name: str, settings: dict, train, optmodel):
    """``{side: (loss(pred, index) -> Tensor)}`` for PyEPO and combolayer, and the
    seconds each spent on its cones before training."""
    import pyepo.func
    from pyepo.data.dataset import collate_tight_constraints, optDatasetConstrs

    spec = train.spec
    objectives = (train.costs * train.solutions).sum(-1, keepdim=True)
    if name == "SPO+":
        theirs = pyepo.func.SPOPlus(optmodel, processes=1)
        ours = cl.losses.SPOPlusLoss(spec)
        return {"PyEPO": lambda p, i: theirs(p, train.costs[i], train.solutions[i],
                                             objectives[i]),
                "combolayer": lambda p, i: ours(p, train.costs[i], train.solutions[i])}, {}
    start = time.process_time()
    dataset = optDatasetConstrs(optmodel, train.features.numpy(), train.costs.numpy())
    their_setup = time.process_time() - start
    start = time.process_time()
    cones = cl.losses.binding_cones(spec, train.solutions)
    our_setup = time.process_time() - start
    theirs = pyepo.func.CaVE(optmodel, **settings)
    # Hybrid: both draw the batch's branch from one seeded stream (PyEPO: draw <= ratio,
    # combolayer: draw < ratio), so the two take the same branches
    theirs._branch_rng = _TorchDraws(torch.Generator().manual_seed(0))
    ours = cl.losses.CaVELoss(spec, generator=torch.Generator().manual_seed(0), **settings)

    def their_loss(pred, index):
        batch = collate_tight_constraints([dataset[int(i)] for i in index])
        return theirs(pred, batch[4])

    sides = {"PyEPO": their_loss,
             "combolayer": lambda p, i: ours(p, train.solutions[i], binding=cones[i])}
    if problem == "tsp":  # PyEPO's cones in combolayer's loss: the same loss
        padded = collate_tight_constraints([dataset[i] for i in range(len(dataset))])[4]
        sides["combolayer, PyEPO's cones"] = lambda p, i: ours(p, train.solutions[i],
                                                               binding=padded[i])
    return sides, {"PyEPO": their_setup, "combolayer": our_setup}


class _TorchDraws:
    """PyEPO's ``_branch_rng`` drawing combolayer's draws: ``torch.rand`` of a generator."""

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator

    def uniform(self) -> float:
        return float(torch.rand((), generator=self.generator))


def train_side_by_side(sides: dict, train, test, solver, epochs: int, seed: int) -> dict:
    """Every side trains its own copy of one seeded ``nn.Linear`` on the same batches,
    epoch by epoch in turn; returns ``{side: (CPU seconds per epoch, final regret)}``."""
    torch.manual_seed(seed)
    init = torch.nn.Linear(train.features.shape[1], train.costs.shape[1])
    runs = {side: dict(model=copy.deepcopy(init), seconds=[]) for side in sides}
    for run in runs.values():
        run["opt"] = torch.optim.Adam(run["model"].parameters(), lr=1e-2)
    order = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        batches = torch.randperm(len(train.features), generator=order).split(32)
        for side, loss in sides.items():
            run = runs[side]
            start = time.process_time()
            for index in batches:
                value = loss(run["model"](train.features[index]), index)
                run["opt"].zero_grad()
                value.backward()
                run["opt"].step()
            run["seconds"].append(time.process_time() - start)
    results = {}
    for side, run in runs.items():
        with torch.no_grad():
            decisions = solver.solve(run["model"](test.features))
        regret = cl.metrics.normalized_regret(solver, test.costs, decisions,
                                              y_true=test.solutions).item()
        results[side] = (float(np.mean(run["seconds"])), regret)
    return results


def main(argv: list[str] | None = None) -> dict:
    parser = page_parser(__doc__, PAGE)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train", type=int, default=1000, help="shortest-path instances")
    parser.add_argument("--tsp-train", type=int, default=200, help="TSP20 instances")
    parser.add_argument("--test", type=int, default=200)
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.epochs, args.train, args.tsp_train, args.test = 1, 1, 64, 32, 32
    torch.set_num_threads(1)
    began = time.perf_counter()
    results: dict = {}
    for problem, label, num_train in (("sp", "shortest path 5x5, deg 4", args.train),
                                      ("tsp", "TSP20 (edge form), deg 4", args.tsp_train)):
        for seed in range(args.seeds):
            train, test, optmodel = datasets(problem, num_train, args.test, 135 + seed)
            solver = cl.make_solver(train.spec)
            for name, settings in methods(problem).items():
                sides, setup = losses(problem, name, settings, train, optmodel)
                measured = train_side_by_side(sides, train, test, solver, args.epochs, seed)
                for side, (seconds, regret) in measured.items():
                    entry = results.setdefault((label, name, side), dict(s=[], r=[], setup=[]))
                    entry["s"].append(seconds)
                    entry["r"].append(regret)
                    if side in setup:
                        entry["setup"].append(setup[side])
                print(label, name, seed, {k: (round(v[0], 3), round(v[1], 5))
                                          for k, v in measured.items()}, flush=True)
    body = [generated_by("benchmarks/cave_pyepo.py", time.perf_counter() - began), "",
            f"Machine: {platform.processor() or platform.machine()}, "
            f"{torch.get_num_threads()} torch thread; {date.today().isoformat()}; "
            f"{args.seeds} seeds x {args.epochs} epochs; {args.train} / {args.tsp_train} "
            f"training instances (shortest path / TSP), {args.test} test.", ""]
    rows = []
    for (label, name, side), entry in results.items():
        base = results.get((label, name, "PyEPO"))
        spo = results.get((label, "SPO+", side))
        ratio = np.mean(entry["s"]) / np.mean(base["s"]) if base else float("nan")
        gap = max(abs(a - b) for a, b in zip(entry["r"], base["r"], strict=True))
        rows.append(row([label, name, side, f"{1e3 * np.mean(entry['s']):.0f}", f"{ratio:.2f}",
                         f"{np.mean(entry['r']):.4f}", f"{gap:.1e}",
                         f"{np.mean(entry['s']) / np.mean(spo['s']):.2f}" if spo and name != "SPO+"
                         else "", f"{np.mean(entry['setup']):.1f}" if entry["setup"] else ""]))
    body += table(["problem", "method", "library", "CPU ms / epoch", "time / PyEPO's",
                   "test regret", "max regret gap to PyEPO", "time / its SPO+",
                   "cones, CPU s"], rows)
    if args.out:
        write_block(Path(args.out), "cave-pyepo", "benchmarks/cave_pyepo.py", body,
                    "## CaVE against PyEPO's")
    print("\n".join(body))
    return results


if __name__ == "__main__":
    main()
