"""combolayer's estimators and losses on PyEPO's shortest-path benchmark.

Setting (PyEPO, Tang & Khalil 2022): 5x5 grid of right/down edges (40 costs),
5 features, polynomial degree 4, noise half-width 0.5, 1000 training and 1000
test instances (one seed-135 draw of 2000, split in order), a linear model,
Adam lr 1e-2, batch 32, 20 epochs. Reported: normalized test regret after the
last epoch and seconds per training epoch (the test evaluation is not timed).

Each method trains on the loss PyEPO's documentation pairs it with: DBB and
NID (all Identity variants) on the regret of their decision under the true
costs (``|<c, y> - z*|``, PyEPO's ``lossfunc="r"``); the solution-returning
perturbed layers DPO (Perturbed, sigma 0.5, 10 samples) and I-MLE (lam 10,
SoG, 10 samples) on the squared error to the true solution; SPO+ on the true
costs; PFYL (Fenchel-Young, sigma 0.5, 10 samples) on the true solutions.

    python benchmarks/peer_pyepo.py [--epochs 20] [--plot docs/img/peer_pyepo.png]
        [--out docs/measurements/pyepo.md]

The tables are written into ``--out`` between the ``peer-pyepo`` markers (a
generated block: no number in it is typed by hand).

If ``import pyepo`` works (optional, never a dependency; with gurobipy), PyEPO's
SPO+, NID and DBB run on the same data, batches and initial model, in this
process, and their regret, epoch time and our epoch time over theirs are printed.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from tqdm.auto import tqdm

import combolayer as cl
from combolayer.data import Data, shortest_path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _doc_blocks import write_block  # noqa: E402
from _training import fit_linear  # noqa: E402

PUBLISHED = {"SPO+": 0.076, "PFYL": 0.073, "DPO": 0.099, "I-MLE": 0.121, "DBB": 0.151,
             "NID": 0.089}


def regret_loss(y: torch.Tensor, c: torch.Tensor, y_true: torch.Tensor, sign: float):
    """PyEPO's ``lossfunc="r"``: the mean regret of decisions ``y`` under the true costs."""
    return (sign * ((y - y_true) * c).sum(-1)).mean()


def methods(spec, solver) -> dict[str, tuple[str, Callable, object]]:
    """Name -> (PyEPO's name, loss(pred, batch_costs, batch_solutions), layer or None)."""

    def by_regret(method, projection: str = "none"):
        layer = cl.ComboLayer(spec, method=method, projection=projection, backend=solver.backend)
        return lambda pred, c, y: regret_loss(layer(pred), c, y, solver.sign), layer

    def by_squared_error(method):
        layer = cl.ComboLayer(spec, method=method, projection="none", backend=solver.backend)
        return lambda pred, c, y: torch.nn.functional.mse_loss(layer(pred), y), layer

    spo = cl.losses.SPOPlusLoss(spec, backend=solver)
    fy = cl.losses.FenchelYoungLoss(spec, sigma=0.5, num_samples=10, backend=solver)
    return {
        "SPO+": ("SPO+", lambda pred, c, y: spo(pred, c, y), None),
        "Fenchel-Young (sigma 0.5, 10 samples)": ("PFYL", lambda pred, c, y: fy(pred, y), None),
        "Perturbed (sigma 0.5, 10 samples)": ("DPO", *by_squared_error(
            cl.Perturbed(sigma=0.5, num_samples=10))),
        "I-MLE (lam 10, SoG, 10 samples)": ("I-MLE", *by_squared_error(
            cl.IMLE(lam=10.0, num_samples=10))),
        "Blackbox (lam 20, reduction sum)": ("DBB", *by_regret(
            cl.Blackbox(lam=20.0, reduction="sum"))),  # PyEPO's lambd semantics
        "Identity, projection none": ("NID", *by_regret(cl.Identity(), "none")),
        "Identity, projection std": ("NID", *by_regret(cl.Identity(), "std")),
        "Identity, projection auto": ("NID", *by_regret(cl.Identity(), "auto")),
    }


def run(loss_fn, layer, train: Data, test: Data, solver, epochs: int, bar) -> tuple[list, list]:
    data = torch.utils.data.TensorDataset(train.features, train.costs, train.solutions)
    sizes = (train.features.shape[1], train.costs.shape[1])
    regrets, seconds = [], []
    if layer is not None:
        layer.train()
    model, training = fit_linear(loss_fn, data, sizes, 0, epochs)
    for epoch_seconds in training:
        seconds.append(epoch_seconds)
        with torch.no_grad():
            decisions = solver.solve(model(test.features))
        regrets.append(cl.metrics.normalized_regret(
            test.spec, test.costs, decisions, solver=solver, y_true=test.solutions).item())
        bar.set_postfix(regret=f"{regrets[-1]:.3f}")
        bar.update()
    return regrets, seconds


def pyepo_side_by_side(train: Data, test: Data, epochs: int) -> dict | None:
    """PyEPO's own SPO+, NID and DBB (lam 20) on the same data, batches, initial model and
    epochs, one process: PyEPO's name -> (normalized test regret by ``pyepo.metric.regret``,
    seconds per epoch), or None without pyepo (and gurobipy)."""
    try:
        import pyepo
        optmodel = pyepo.model.grb.shortestPathModel(grid=(5, 5))
    except Exception as error:  # pyepo or its solver missing: skip the side-by-side
        print(f"PyEPO side-by-side skipped: {type(error).__name__}: {error}")
        return None
    trainset = pyepo.data.dataset.optDataset(optmodel, train.features.numpy(),
                                             train.costs.numpy())
    testset = pyepo.data.dataset.optDataset(optmodel, test.features.numpy(), test.costs.numpy())
    by_regret = {"NID": pyepo.func.negativeIdentity(optmodel, processes=1),
                 "DBB": pyepo.func.blackboxOpt(optmodel, lambd=20, processes=1)}
    spop = pyepo.func.SPOPlus(optmodel, processes=1)
    losses = {"SPO+": lambda cp, c, w, z: spop(cp, c, w, z)}
    for peer, layer in by_regret.items():  # PyEPO's lossfunc="r", as regret_loss above
        losses[peer] = lambda cp, c, w, z, layer=layer: (((layer(cp) - w) * c).sum(-1)).mean()
    results = {}
    sizes = (train.features.shape[1], train.costs.shape[1])
    for peer, loss_fn in losses.items():  # same initial model and batch order as run()
        model, training = fit_linear(loss_fn, trainset, sizes, 0, epochs)
        seconds = list(training)
        regret = pyepo.metric.regret(model, optmodel,
                                     torch.utils.data.DataLoader(testset, batch_size=32))
        results[peer] = (regret, sum(seconds) / len(seconds))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--plot", default="docs/img/peer_pyepo.png", help="'' to skip")
    parser.add_argument("--out", default="docs/measurements/pyepo.md", help="'' to skip")
    args = parser.parse_args()

    data = shortest_path(2000, 5, grid=(5, 5), deg=4, noise_width=0.5, seed=135,
                         backend=args.backend)
    train, test = data.split(1000)
    solver = cl.make_solver(data.spec, args.backend)
    print(f"{data.spec.label}, backend {solver.backend!r}, {args.epochs} epochs")
    table = methods(data.spec, solver)
    results = {}
    with tqdm(total=args.epochs * len(table), desc="peer_pyepo") as bar:
        for name, (peer, loss_fn, layer) in table.items():
            bar.set_description(name)
            results[name] = (peer, *run(loss_fn, layer, train, test, solver, args.epochs, bar))

    lines = [f"Generated by `python benchmarks/peer_pyepo.py` on {datetime.date.today()}: "
             f"{data.spec.label}, our backend {solver.backend!r}, {args.epochs} epochs, one "
             "run on a 2-core machine; regrets are deterministic for the seed, seconds per "
             "epoch are not.", "",
             "| method (ours) | normalized test regret | PyEPO published | s / epoch |",
             "|---|---|---|---|"]
    for name, (peer, regrets, seconds) in results.items():
        lines.append(f"| {name} | {regrets[-1]:.3f} | {peer} {PUBLISHED[peer]:.3f} | "
                     f"{sum(seconds) / len(seconds):.3f} |")
    theirs = pyepo_side_by_side(train, test, args.epochs)
    if theirs is None:
        lines += ["", "PyEPO is not installed: no side-by-side rows."]
    else:
        import pyepo

        lines += ["", f"Side by side with PyEPO {pyepo.__version__} (Gurobi, `processes=1`), "
                  "same data, initial model and batches:", "",
                  "| ours | regret | s / epoch | PyEPO | regret | s / epoch | "
                  "ratio ours / PyEPO |", "|---|---|---|---|---|---|---|"]
        for name, peer in [("SPO+", "SPO+"), ("Identity, projection none", "NID"),
                           ("Blackbox (lam 20, reduction sum)", "DBB")]:
            _, regrets, seconds = results[name]
            ours = sum(seconds) / len(seconds)
            regret, epoch = theirs[peer]
            lines.append(f"| {name} | {regrets[-1]:.3f} | {ours:.3f} | {peer} | "
                         f"{regret:.3f} | {epoch:.3f} | {ours / epoch:.2f} |")
    print("\n".join(lines))
    if args.out:
        write_block(Path(args.out), "peer-pyepo", "benchmarks/peer_pyepo.py", lines,
                    "## Against PyEPO: shortest path, 5x5 grid")

    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        for name, (_, regrets, _) in results.items():
            ax.plot(range(1, len(regrets) + 1), regrets, label=name)
        ax.set_xlabel("epoch")
        ax.set_ylabel("normalized test regret")
        ax.set_title("PyEPO shortest path 5x5, deg 4, noise 0.5")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"plot saved to {args.plot}")


if __name__ == "__main__":
    main()
