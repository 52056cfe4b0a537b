"""Every method combolayer and PyEPO both have, side by side on PyEPO's own problems.

Setting: PyEPO's shortest path on a 5x5 grid (40 edge costs) and its 0/1 knapsack
with 50 items and 2 weight dimensions (capacity half of each dimension's total
weight), both from PyEPO's generators (``cl.data.shortest_path`` and
``cl.data.knapsack`` draw PyEPO's numbers for the same seed; tests check it), 5
features, degree 4, noise half-width 0.5, one seed-135 draw split in order into
training and test. For each training seed both libraries get the same data, read
from one ``TensorDataset`` (so data loading is not part of the time difference),
the same initial ``nn.Linear`` and the same batch order (Adam, lr 1e-2, batch 32).
PyEPO solves with Gurobi (``pyepo.model.grb``); combolayer with its open-source
default (what ``"auto"`` picks without Gurobi) and, when installed, ``"gurobi"``.
Reported: normalized test regret after the last epoch (mean over seeds, evaluated
identically for both libraries with combolayer's exact solver) and seconds per
training epoch (evaluation not timed).

Losses follow PyEPO's pairing: DBB and NID on the regret of the decision under the
true costs, DPO and I-MLE on the squared error to the true solution, SPO+ on the true
costs, PFY on the true solutions.

    python benchmarks/pyepo_methods.py [--quick] [--seeds 3] [--epochs 10] [--samples 10]
        [--backends "open source" gurobi]
        [--out docs/measurements/pyepo.md] [--plot docs/img/pyepo_methods.png]

Methods are rows of ``METHODS``: adding one is one line with a factory for each
library. A factory that fails (the method is not in this version of a library, or
PyEPO is not installed) makes its cell "skipped", and the reason is printed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

import combolayer as cl

sys.path.insert(0, str(Path(__file__).parent))
from _doc_blocks import command_line, write_block  # noqa: E402
from _training import fit_linear, one_thread  # noqa: E402

LossFn = Callable[..., torch.Tensor]  # (pred, costs, solutions, objectives) -> scalar


# ---- the two sides: a factory per library builds loss_fn(pred, c, w, z) -----------------

def _by_regret(layer, sign: float) -> LossFn:
    """PyEPO's ``lossfunc="r"``: the mean regret of the layer's decisions."""
    return lambda pred, c, w, z: (sign * ((layer(pred) - w) * c).sum(-1)).mean()


def _by_squared_error(layer) -> LossFn:
    return lambda pred, c, w, z: torch.nn.functional.mse_loss(layer(pred), w)


@dataclass
class Setup:
    """What a factory may use: combolayer's spec and solver, PyEPO's model, the data."""

    spec: object
    solver: object
    sign: float
    optmodel: object
    trainset: object
    train: cl.data.Data
    samples: int
    seed: int


def ours_layer(method, projection="none", loss="regret"):
    def build(s: Setup) -> LossFn:
        layer = cl.ComboLayer(s.spec, method=method(s) if callable(method) else method,
                              projection=projection, backend=s.solver.config)
        return _by_regret(layer, s.sign) if loss == "regret" else _by_squared_error(layer)
    return build


def ours_loss(make, call="cw"):
    """A combolayer loss; ``call`` says what it takes after the prediction."""
    def build(s: Setup) -> LossFn:
        loss = make(s)
        if call == "cw":
            return lambda pred, c, w, z: loss(pred, c, w)
        if call == "c":
            return lambda pred, c, w, z: loss(pred, c)
        return lambda pred, c, w, z: loss(pred, w)
    return build


def theirs(name: str, loss: str, **kwargs):
    """A PyEPO module by name from ``pyepo.func``; ``loss`` says how it is trained."""
    def build(s: Setup) -> LossFn:
        import pyepo.func

        module = getattr(pyepo.func, name)(s.optmodel, processes=1, **kwargs)
        if loss == "regret":
            return _by_regret(module, s.sign)
        if loss == "mse":
            return _by_squared_error(module)
        if loss == "spo":
            return lambda pred, c, w, z: module(pred, c, w, z)
        if loss == "c":
            return lambda pred, c, w, z: module(pred, c)
        return lambda pred, c, w, z: module(pred, w)
    return build


def theirs_pool(name: str, loss: str, **kwargs):
    """A PyEPO module that seeds its solution pool from the training set."""
    def build(s: Setup) -> LossFn:
        return theirs(name, loss, dataset=s.trainset, **kwargs)(s)
    return build


#: Frank-Wolfe iterations for RFWO and RFY on both sides (each is a solver call; the
#: default of 10000 with tol 1e-6 took a minute per 64 instances here).
FW_ITERATIONS = 20

#: (row label, combolayer factory or None, PyEPO factory or None); a None cell is "—".
METHODS: list[tuple[str, Callable | None, Callable | None]] = [
    ("SPO+", ours_loss(lambda s: cl.losses.SPOPlusLoss(s.spec, backend=s.solver)),
     theirs("SPOPlus", "spo")),
    # PyEPO's lambd shifts by the gradient of the batch loss as it comes, which is
    # combolayer's reduction="sum", its default (a per-instance lam 20,
    # reduction="mean", would be a 32 times larger step, and much harder shifted
    # knapsacks, at batch 32).
    ("DBB / Blackbox (lam 20, reduction sum)",
     ours_layer(cl.Blackbox(lam=20.0, reduction="sum")),
     theirs("blackboxOpt", "regret", lambd=20)),
    ("NID / Identity, projection none", ours_layer(cl.Identity()),
     theirs("negativeIdentity", "regret")),
    ("Identity, projection auto", ours_layer(cl.Identity(), "auto"), None),
    ("DPO / Perturbed (sigma 0.5)",
     ours_layer(lambda s: cl.Perturbed(sigma=0.5, num_samples=s.samples), loss="mse"),
     lambda s: theirs("perturbedOpt", "mse", n_samples=s.samples, sigma=0.5, seed=s.seed)(s)),
    ("PFY / Fenchel-Young (sigma 0.5)",
     ours_loss(lambda s: cl.losses.FenchelYoungLoss(s.spec, sigma=0.5, num_samples=s.samples,
                                                    backend=s.solver), call="w"),
     lambda s: theirs("perturbedFenchelYoung", "w", n_samples=s.samples, sigma=0.5,
                      seed=s.seed)(s)),
    ("I-MLE (lam 10, SoG)",
     ours_layer(lambda s: cl.IMLE(lam=10.0, num_samples=s.samples), loss="mse"),
     lambda s: theirs("implicitMLE", "mse", n_samples=s.samples, sigma=1.0, lambd=10)(s)),
    ("PG (sigma 0.1)", ours_loss(lambda s: cl.losses.PGLoss(s.spec, backend=s.solver),
                                 call="c"),
     theirs("perturbationGradient", "c")),
    ("AI-MLE", ours_layer(lambda s: cl.AIMLE(num_samples=s.samples), loss="mse"),
     lambda s: theirs("adaptiveImplicitMLE", "mse", n_samples=s.samples)(s)),
    ("DPOMul (sigma 0.5)",
     ours_layer(lambda s: cl.Perturbed(sigma=0.5, num_samples=s.samples,
                                       perturbation="multiplicative"), loss="mse"),
     lambda s: theirs("perturbedOptMul", "mse", n_samples=s.samples, sigma=0.5,
                      seed=s.seed)(s)),
    ("PFYMul (sigma 0.5)", ours_loss(lambda s: cl.losses.FenchelYoungLoss(
        s.spec, sigma=0.5, num_samples=s.samples, perturbation="multiplicative",
        backend=s.solver), call="w"),
     lambda s: theirs("perturbedFenchelYoungMul", "w", n_samples=s.samples, sigma=0.5,
                      seed=s.seed)(s)),
    # Frank-Wolfe calls the solver once per iteration: both sides stop at FW_ITERATIONS
    ("RFWO (lam 1)", ours_layer(cl.RegularizedFrankWolfe(lam=1.0, max_iter=FW_ITERATIONS)),
     theirs("regularizedFrankWolfeOpt", "regret", lambd=1.0, max_iter=FW_ITERATIONS)),
    ("RFY (lam 1)", ours_loss(lambda s: cl.losses.RegularizedFenchelYoungLoss(
        s.spec, lam=1.0, max_iter=FW_ITERATIONS, backend=s.solver), call="w"),
     theirs("regularizedFrankWolfeFenchelYoung", "w", lambd=1.0, max_iter=FW_ITERATIONS)),
    ("NCE", ours_loss(lambda s: cl.losses.NCELoss(s.spec, pool=s.train.solutions,
                                                  backend=s.solver), call="w"),
     theirs_pool("NCE", "w")),
    ("CMAP", ours_loss(lambda s: cl.losses.CMAPLoss(s.spec, pool=s.train.solutions,
                                                    backend=s.solver), call="w"),
     theirs_pool("CMAP", "w")),
    ("LTR pointwise", ours_loss(lambda s: cl.losses.PointwiseLTRLoss(
        s.spec, pool=s.train.solutions, backend=s.solver), call="c"),
     theirs_pool("pointwiseLearningToRank", "c")),
    ("LTR pairwise", ours_loss(lambda s: cl.losses.PairwiseLTRLoss(
        s.spec, pool=s.train.solutions, backend=s.solver), call="c"),
     theirs_pool("pairwiseLearningToRank", "c")),
    ("LTR listwise", ours_loss(lambda s: cl.losses.ListwiseLTRLoss(
        s.spec, pool=s.train.solutions, backend=s.solver), call="c"),
     theirs_pool("listwiseLearningToRank", "c")),
    # PyEPO's CaVE takes each instance's binding constraints from its optDatasetConstrs;
    # ours derives them from the true solution, so its PyEPO cell is left out.
    ("CaVE", ours_loss(lambda s: cl.losses.CaVELoss(s.spec, backend=s.solver), call="w"),
     None),
]


# ---- problems -----------------------------------------------------------------------------

def problems(n_train: int, n_test: int) -> dict[str, tuple[cl.data.Data, int, Callable]]:
    """Name -> (data, number of training instances, PyEPO model builder)."""
    path = cl.data.shortest_path(n_train + n_test, 5, grid=(5, 5), deg=4, noise_width=0.5,
                                 seed=135)
    knap = cl.data.knapsack(n_train + n_test, 5, 50, dim=2, deg=4, noise_width=0.5, seed=135)

    def path_model():
        from pyepo.model.grb import shortestPathModel
        return one_thread(shortestPathModel(grid=(5, 5)))

    def knap_model():
        from pyepo.model.grb import knapsackModel
        return one_thread(knapsackModel(weights=np.asarray(knap.spec.weights),
                                        capacity=np.asarray(knap.spec.capacities)))

    return {"shortest path 5x5": (path, n_train, path_model),
            "knapsack 50 items, 2 dims": (knap, n_train, knap_model)}


# ---- training, identical for both libraries ------------------------------------------------

def training_sets(train: cl.data.Data, optmodel=None):
    """``(batches, trainset)``: the ``TensorDataset`` of ``(x, c, w, z)`` that both
    libraries read their batches from (so data loading is not part of the time
    difference), and PyEPO's ``optDataset`` of the same instances, which seeds its
    pool losses (None without ``optmodel``)."""
    objectives = (train.costs * train.solutions).sum(-1, keepdim=True)
    batches = torch.utils.data.TensorDataset(train.features, train.costs, train.solutions,
                                             objectives)
    if optmodel is None:
        return batches, None
    import pyepo.data.dataset

    trainset = pyepo.data.dataset.optDataset(optmodel, train.features.numpy(),
                                             train.costs.numpy().reshape(len(train.costs), -1))
    return batches, trainset


def train_once(loss_fn: LossFn, train, test, solver, seed: int, epochs: int, loader_data):
    sizes = (train.features.shape[1], train.costs.shape[1])
    model, training = fit_linear(loss_fn, loader_data, sizes, seed, epochs)
    seconds = list(training)
    with torch.no_grad():
        decisions = solver.solve(model(test.features))
    regret = cl.metrics.normalized_regret(solver, test.costs, decisions,
                                          y_true=test.solutions).item()
    return regret, float(np.mean(seconds))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="64 train / 64 test instances, 2 epochs, 1 seed, 2 samples")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--samples", type=int, default=None)
    parser.add_argument("--train", type=int, default=None,
                        help="training instances (1000; 64 in quick mode)")
    parser.add_argument("--test", type=int, default=None,
                        help="test instances (1000; 64 in quick mode)")
    parser.add_argument("--methods", nargs="*", default=None,
                        help="only the rows whose label starts with one of these")
    parser.add_argument("--problems", nargs="*", default=None,
                        help="only the problems whose name starts with one of these")
    parser.add_argument("--backends", nargs="*", default=None,
                        help="combolayer's sides: 'open source' (what auto picks without "
                             "Gurobi) and/or 'gurobi' (default: both, gurobi when installed)")
    parser.add_argument("--out", default="docs/measurements/pyepo.md", help="'' to skip")
    parser.add_argument("--block", default="pyepo-methods",
                        help="the name of the generated block in --out (one per run size)")
    parser.add_argument("--plot", default="docs/img/pyepo_methods.png", help="'' to skip")
    args = parser.parse_args(argv)
    seeds = args.seeds or (1 if args.quick else 3)
    epochs = args.epochs or (2 if args.quick else 10)
    samples = args.samples or (2 if args.quick else 10)

    try:
        import pyepo
        import pyepo.model.grb  # noqa: F401

        pyepo_version = pyepo.__version__
    except Exception as error:  # optional: the PyEPO columns are skipped
        print(f"PyEPO columns skipped: {type(error).__name__}: {error}")
        pyepo_version = None
    # "open source": what "auto" picks without Gurobi (Gurobi ranks first when installed)
    backends = ["open source"] + (["gurobi"] if "gurobi" in cl.backends.capable_backends(
        cl.data.shortest_path_spec((5, 5))) else [])
    if args.backends is not None:
        backends = [b for b in backends if b in args.backends]
    sides = ([("PyEPO", None)] if pyepo_version else []) + [(f"combolayer ({b})", b)
                                                            for b in backends]

    results: dict = {}  # (problem, method, side) -> (regrets, seconds) or a skip reason
    skipped: list[str] = []
    n_train = args.train or (64 if args.quick else 1000)
    n_test = args.test or (64 if args.quick else 1000)
    instances = {name: value for name, value in problems(n_train, n_test).items()
                 if not args.problems or name.startswith(tuple(args.problems))}
    methods = [row for row in METHODS
               if not args.methods or row[0].startswith(tuple(args.methods))]
    with tqdm(total=len(instances) * len(methods) * len(sides) * seeds,
              desc="pyepo_methods") as bar:
        for problem, (data, n_train, make_model) in instances.items():
            train, test = data.split(n_train)
            open_source = next(name for name in cl.backends.capable_backends(data.spec)
                               if name != "gurobi")
            solver = cl.make_solver(data.spec, open_source)
            optmodel = make_model() if pyepo_version else None
            batches, trainset = training_sets(train, optmodel)
            for label, ours, peer in methods:
                for side, backend in sides:
                    factory = peer if backend is None else ours
                    bar.set_description(f"{problem[:13]} {label[:18]} {side}")
                    key = (problem, label, side)
                    if factory is None:
                        results[key] = "—"
                        bar.update(seeds)
                        continue
                    side_solver = solver if backend in (None, "open source") else (
                        cl.make_solver(data.spec, backend))
                    runs = []
                    try:
                        for seed in range(seeds):
                            setup = Setup(data.spec, side_solver, side_solver.sign, optmodel,
                                          trainset, train, samples, seed)
                            loss_fn = factory(setup)
                            runs.append(train_once(loss_fn, train, test, solver, seed, epochs,
                                                   batches))
                            bar.update()
                    except Exception as error:  # a method missing from this version
                        reason = f"{type(error).__name__}: {str(error)[:120]}"
                        skipped.append(f"{problem} / {label} / {side}: {reason}")
                        results[key] = "skipped"
                        bar.update(seeds - len(runs))
                        continue
                    results[key] = ([r for r, _ in runs], [s for _, s in runs])
    for line in skipped:
        print("skipped:", line)

    mode = ("QUICK MODE (64 train / 64 test, 2 epochs, 1 seed, 2 samples): a smoke run, "
            "not the benchmark" if args.quick else
            f"{n_train} train / {len(test.costs)} test, {epochs} epochs, {seeds} seeds, "
            f"{samples} samples")
    header = "| problem | method | " + " | ".join(
        f"{side} regret | {side} s/epoch" for side, _ in sides) + " |"
    lines = [f"Generated by `{command_line('benchmarks/pyepo_methods.py', argv)}`"
             f"; {mode}; PyEPO {pyepo_version or 'not installed'}, Gurobi on PyEPO's side. "
             "Regret: mean ± std over seeds of the normalized test regret; seconds per "
             "training epoch on a shared 2-core machine (noisy).", "",
             header, "|" + "---|" * (2 + 2 * len(sides))]
    for problem in dict.fromkeys(k[0] for k in results):
        for label, _, _ in methods:
            cells = []
            for side, _ in sides:
                value = results[(problem, label, side)]
                if isinstance(value, str):
                    cells += [value, value]
                else:
                    regrets, seconds = value
                    cells += [f"{np.mean(regrets):.3f} ± {np.std(regrets):.3f}",
                              f"{np.mean(seconds):.3f}"]
            lines.append(f"| {problem} | {label} | " + " | ".join(cells) + " |")
    print("\n".join(lines))
    if args.out:
        write_block(Path(args.out), args.block, "benchmarks/pyepo_methods.py", lines,
                    "## Every shared method side by side with PyEPO (benchmarks/pyepo_methods.py)")
    if args.plot:
        plot(results, sides, Path(args.plot))
    return results


def plot(results: dict, sides, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    problem_names = list(dict.fromkeys(k[0] for k in results))
    fig, axes = plt.subplots(1, len(problem_names), figsize=(6 * len(problem_names), 5),
                             squeeze=False)
    for ax, problem in zip(axes[0], problem_names):
        labels = list(dict.fromkeys(k[1] for k in results))
        for i, (side, _) in enumerate(sides):
            heights = [np.mean(v[0]) if not isinstance(v := results[(problem, m, side)], str)
                       else np.nan for m in labels]
            ax.barh(np.arange(len(labels)) + i * 0.8 / len(sides), heights,
                    height=0.8 / len(sides), label=side)
        ax.set_yticks(np.arange(len(labels)) + 0.4 - 0.4 / len(sides), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("normalized test regret")
        ax.set_title(problem)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"plot saved to {path}")


if __name__ == "__main__":
    main()
