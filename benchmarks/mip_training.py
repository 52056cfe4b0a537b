"""Training at MIP scale: PyEPO's multi-dimensional knapsack, ours against PyEPO.

Setting (PyEPO's ``pyepo.data.knapsack.genData``): 50 items, 2
dimensions, 5 features, polynomial degree 4, noise half-width 0.5, capacity a
quarter of each dimension's total weight; 1000 training and 1000 test instances;
``nn.Linear``, Adam lr 1e-2, batch 32, torch pinned to one thread. Every row
starts from the same model and sees the same batches; rows are interleaved
epoch by epoch so machine load hits them alike. Reported: seconds per training
epoch, the mean over the epochs (the total a user waits, divided by the epochs:
PyEPO's ``solve_ratio`` draws once per batch whether to solve all of it, so its
epochs vary more than ours, which draw per instance, and a median would favour
the epochs that drew fewer solves; test evaluation not timed), and normalized
test regret after the last epoch, evaluated by one exact solver for all rows.

Rows: PyEPO SPO+ with Gurobi (one thread, as ours) at solve_ratio 1 and 0.1 (its
cache seeded with the training set, ``dataset=``); ours SPO+ at solve_ratio 1 and
0.1 with the default open-source backend (what ``"auto"`` picks without Gurobi:
SCIP here) and with ``backend="gurobi"``; ours Identity, projection "auto",
open-source default, solve_ratio 0.1, trained on the regret of its decision
(PyEPO's NID with ``lossfunc="r"``). With two cores in use on each side: ours
with ``executor="thread", workers=2`` (SPO+ on Gurobi, Identity on the
open-source default) and PyEPO with ``processes=2``. Then the per-solve table:
one knapsack instance at a time, median ms, the open-source default against
Gurobi (one thread).

    python benchmarks/mip_training.py [--epochs 10] [--quick] [--no-doc]

Rows whose package is missing (pyepo, gurobipy) or whose backend is not
registered ("gurobi") are skipped with a printed message.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

import combolayer as cl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _doc_blocks import write_block  # noqa: E402
from _training import PYEPO_MIP_GAP, interleaved_epochs, one_thread  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "measurements" / "training.md"
PLOT = ROOT / "docs" / "img" / "mip_training.png"


IDENTITY = "ours Identity auto, regret loss, open-source default, solve_ratio 0.1"
#: Rows that spread each batch's solves over two threads (``executor="thread",
#: workers=2``; the caller is one of them), against PyEPO's ``processes=2``.
TWO_THREADS = "2 threads"
#: Ours with Gurobi stopped at PyEPO's relative MIP gap (Gurobi's default).
PYEPO_GAP_ROW = "ours SPO+, gurobi at PyEPO's MIP gap 1e-4, solve_ratio 1"


def knapsack_data(num_data: int, num_items: int, dim: int, seed: int = 135):
    """PyEPO's knapsack with capacity a quarter of each dimension's total weight (the
    weights are PyEPO's first draw, so they are known before the data is made)."""
    weights = np.random.RandomState(seed).choice(range(300, 800), size=(dim, num_items)) / 100
    return cl.data.knapsack(num_data, 5, num_items, dim=dim, deg=4, noise_width=0.5, seed=seed,
                            capacities=(0.25 * weights.sum(axis=1)).tolist())


def open_source_default(spec) -> str:
    """The backend ``"auto"`` picks for ``spec`` when Gurobi is not installed: the
    "default open-source backend" of the goal."""
    return next(name for name in cl.backends.capable_backends(spec) if name != "gurobi")


def gurobi_usable(spec) -> str | None:
    """None when ``backend="gurobi"`` is registered and compiles ``spec``; else why not."""
    from combolayer.backends.registry import backends
    if "gurobi" not in backends():
        return "backend 'gurobi' is not registered in this build"
    try:
        cl.make_solver(spec, "gurobi")
    except Exception as error:  # missing package, licence, size limit
        return f"{type(error).__name__}: {error}"
    return None


def our_rows(train, spec, quick: bool) -> dict[str, Callable]:
    """Row name -> factory of ``loss(pred, c, y_true)`` (a new loss with a new cache)."""
    def spo(backend, ratio: float):
        def make():
            loss = cl.losses.SPOPlusLoss(spec, backend=backend, solve_ratio=ratio,
                                         generator=torch.Generator().manual_seed(0))
            if ratio < 1:
                loss.pool.seed(train.solutions)
            return lambda pred, c, y: loss(pred, c, y)
        return make

    def identity(backend):
        def make():
            layer = cl.ComboLayer(spec, projection="auto", solve_ratio=0.1, backend=backend,
                                  generator=torch.Generator().manual_seed(0))
            layer.pool.seed(train.solutions)
            sign = layer.solver.sign
            return lambda pred, c, y: (sign * ((layer(pred) - y) * c).sum(-1)).mean()
        return make

    def threads(name: str) -> cl.BackendConfig:
        return cl.BackendConfig(name=name, executor="thread", workers=2)

    default = open_source_default(spec)
    rows = {"ours SPO+, open-source default, solve_ratio 1": spo(default, 1.0),
            "ours SPO+, open-source default, solve_ratio 0.1": spo(default, 0.1)}
    why = gurobi_usable(spec)
    if why is None:
        rows["ours SPO+, gurobi, solve_ratio 1"] = spo("gurobi", 1.0)
        rows[PYEPO_GAP_ROW] = spo(cl.BackendConfig(name="gurobi", mip_gap=PYEPO_MIP_GAP), 1.0)
        rows[f"ours SPO+, gurobi, {TWO_THREADS}, solve_ratio 1"] = spo(threads("gurobi"), 1.0)
        rows["ours SPO+, gurobi, solve_ratio 0.1"] = spo("gurobi", 0.1)
    else:
        print(f"skipping ours with backend 'gurobi': {why}")
    rows[IDENTITY] = identity(default)
    rows[f"{IDENTITY}, {TWO_THREADS}"] = identity(threads(default))
    return rows


def pyepo_knapsack(spec):
    """PyEPO's Gurobi knapsack model of ``spec``, on one thread as ours."""
    import pyepo

    return one_thread(pyepo.model.grb.knapsackModel(weights=np.array(spec.weights),
                                                    capacity=np.array(spec.capacities)))


def pyepo_rows(train, spec) -> dict[str, Callable]:
    try:
        import pyepo
        optmodel = pyepo_knapsack(spec)
    except Exception as error:  # pyepo or gurobipy missing
        print(f"skipping the PyEPO rows: {type(error).__name__}: {error}")
        return {}
    dataset = pyepo.data.dataset.optDataset(optmodel, train.features.numpy(),
                                            train.costs.numpy())

    def make(ratio: float, processes: int = 1):
        def build():
            loss = pyepo.func.SPOPlus(optmodel, processes=processes, solve_ratio=ratio,
                                      dataset=dataset if ratio < 1 else None)
            def call(pred, c, y):
                return loss(pred, c, y, (c * y).sum(-1, keepdim=True))
            return call
        return build

    return {"PyEPO SPO+, Gurobi, solve_ratio 1": make(1.0),
            "PyEPO SPO+, Gurobi, 2 processes, solve_ratio 1": make(1.0, processes=2),
            "PyEPO SPO+, Gurobi, solve_ratio 0.1": make(0.1)}


def train_interleaved(rows: dict[str, Callable], train, test, spec, epochs: int):
    """Seconds per epoch and test regret after each epoch of every row, interleaved
    epoch by epoch (`_training.interleaved_epochs`)."""
    solver = cl.make_solver(spec)
    regret = {name: [] for name in rows}
    with tqdm(total=epochs * len(rows), desc="mip_training") as bar:
        def evaluate(name, model):
            bar.set_description(name[:40])
            with torch.no_grad():
                y_pred = solver.solve(model(test.features))
            regret[name].append(float(cl.metrics.normalized_regret(
                solver, test.costs, y_pred, y_true=test.solutions)))
            bar.update()

        runs = interleaved_epochs(rows, train, epochs, evaluate)
    return {name: (seconds, regret[name]) for name, (_, seconds) in runs.items()}


class PyepoGurobi:
    """Gurobi through PyEPO's knapsack model, for the per-solve column when this build
    has no ``gurobi`` backend."""

    def __init__(self, model) -> None:
        self.model = model

    def solve(self, costs: torch.Tensor) -> torch.Tensor:
        self.model.setObj(costs.numpy()[0])
        return torch.tensor(self.model.solve()[0])[None]


def per_solve(sizes, repeats: int) -> list[tuple[str, str, float, str, float | None]]:
    """(problem, open-source default backend, median ms, gurobi label, median ms or
    None)."""
    out = []
    for items, dim in sizes:
        data = knapsack_data(repeats, items, dim, seed=1)
        spec, costs = data.spec, data.costs.double()
        ours = cl.make_solver(spec, open_source_default(spec))
        grb, label = None, "skipped"
        why = gurobi_usable(spec)
        if why is None:
            grb, label = cl.make_solver(spec, "gurobi"), "gurobi backend"
        else:
            try:  # Gurobi itself, through PyEPO's model, one thread
                grb, label = PyepoGurobi(pyepo_knapsack(spec)), "gurobipy via PyEPO (one thread)"
                print(f"per-solve Gurobi column through PyEPO's gurobipy model ({why})")
            except Exception as error:
                print(f"per-solve Gurobi column skipped: {type(error).__name__}: {error}")
        t_ours, t_grb = [], []
        for c in costs:  # interleaved, one instance at a time
            start = time.perf_counter()
            y = ours.solve(c[None])
            t_ours.append(time.perf_counter() - start)
            if grb is not None:
                start = time.perf_counter()
                y_g = grb.solve(c[None])
                t_grb.append(time.perf_counter() - start)
                if abs(float((c * y[0]).sum()) - float((c * y_g[0]).sum())) > 1e-6:
                    print(f"WARNING: objectives differ on {items}x{dim}")
        out.append((f"knapsack, {dim} dims, {items} items", ours.backend,
                    1e3 * statistics.median(t_ours), label,
                    1e3 * statistics.median(t_grb) if t_grb else None))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="a toy size, end to end")
    parser.add_argument("--no-doc", action="store_true", help="do not write docs/")
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--num-test", type=int, default=1000,
                        help="test instances (each epoch's evaluation solves them all)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    items, num_train, num_test = (50, 1000, args.num_test) if not args.quick else (10, 64, 32)
    epochs = args.epochs if not args.quick else 2
    sizes = [(200, 2), (1000, 2), (200, 5)] if not args.quick else [(20, 2)]
    repeats = 30 if not args.quick else 3

    lines = []
    if not args.skip_training:
        data = knapsack_data(num_train + num_test, items, 2)
        train, test = data.split(num_train)
        spec = data.spec
        rows = {**pyepo_rows(train, spec), **our_rows(train, spec, args.quick)}
        results = train_interleaved(rows, train, test, spec, epochs)
        lines += [f"{spec.label}, {num_train} train / {num_test} test, {epochs} epochs, "
                  "batch 32, one thread, interleaved:", "",
                  "| training loop | s per epoch | normalized test regret |", "|---|---|---|"]
        summary = {}
        for name, (seconds, regret) in results.items():
            summary[name] = (statistics.fmean(seconds), regret[-1])
            lines.append(f"| {name} | {summary[name][0]:.3f} | {regret[-1]:.3f} |")
        pyepo_1 = "PyEPO SPO+, Gurobi, solve_ratio 1"
        goals = [("ours with gurobi / PyEPO, SPO+, solve_ratio 1", 0.5,
                  "ours SPO+, gurobi, solve_ratio 1", pyepo_1),
                 ("the same, ours at PyEPO's MIP gap (1e-4) / PyEPO", 0.5,
                  PYEPO_GAP_ROW, pyepo_1),
                 ("the same, ours on 2 threads / PyEPO's faster of 1 and 2 processes", 0.5,
                  f"ours SPO+, gurobi, {TWO_THREADS}, solve_ratio 1",
                  min((name for name in (pyepo_1, "PyEPO SPO+, Gurobi, 2 processes, "
                                         "solve_ratio 1") if name in summary),
                      key=lambda name: summary[name][0], default=pyepo_1)),
                 ("ours (open-source default) / PyEPO, SPO+, solve_ratio 0.1", 0.5,
                  "ours SPO+, open-source default, solve_ratio 0.1",
                  "PyEPO SPO+, Gurobi, solve_ratio 0.1"),
                 ("ours with gurobi / PyEPO, SPO+, solve_ratio 0.1", 0.5,
                  "ours SPO+, gurobi, solve_ratio 0.1", "PyEPO SPO+, Gurobi, solve_ratio 0.1"),
                 ("ours Identity 0.1 (open-source default) / PyEPO SPO+ Gurobi 1", 1.0,
                  IDENTITY, pyepo_1),
                 ("the same, ours on 2 threads", 1.0, f"{IDENTITY}, {TWO_THREADS}", pyepo_1)]
        lines += ["", "| goal ratio | time ratio | goal | regret difference |", "|---|---|---|---|"]
        for label, goal, a, b in goals:
            if a in summary and b in summary:
                ratio = summary[a][0] / summary[b][0]
                lines.append(f"| {label} | {ratio:.2f} | <= {goal} | "
                             f"{summary[a][1] - summary[b][1]:+.3f} |")
            else:
                lines.append(f"| {label} | skipped (a row is missing) | <= {goal} | |")
        if not args.no_doc:
            plot(results, PLOT)
    solve_rows = per_solve(sizes, repeats)
    lines += ["", "| problem | open-source default | ms per solve | Gurobi | ms per solve "
              "| ratio |", "|---|---|---|---|---|---|"]
    for problem, backend, ours, label, theirs in solve_rows:
        ratio = f"{ours / theirs:.2f}" if theirs else "-"
        theirs_text = f"{theirs:.1f}" if theirs else "-"
        lines.append(f"| {problem} | {backend} | {ours:.1f} | {label} | {theirs_text} | "
                     f"{ratio} |")
    print("\n".join(lines))
    if not args.no_doc:
        write_block(DOC, "mip_training", "benchmarks/mip_training.py", lines,
                    "## Training at MIP scale: PyEPO's knapsack")
        print(f"wrote {DOC}")
    return 0


def plot(results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, (seconds, regret) in results.items():
        ax.plot(np.cumsum(seconds), regret, marker="o", markersize=3, label=name)
    ax.set(xlabel="training time (s)", ylabel="normalized test regret",
           title="PyEPO knapsack, 50 items x 2 dims: regret against time")
    ax.legend(fontsize=6)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
