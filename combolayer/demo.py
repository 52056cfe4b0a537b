"""``combolayer demo``: the main job on built-in data.

PyEPO's shortest path on a 5x5 grid (40 edges, right/down moves), 5 features,
deg 4, noise 0.5, 1000 train and 1000 test instances. A linear model predicts
edge costs; the Hamming loss compares predicted and true paths. Three methods
are trained for 20 epochs: Identity without projection, Identity with P_std,
and Blackbox (lam=10). Prints a table and saves a plot of regret per epoch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from . import data as datasets
from .layer import ComboLayer
from .training import History, fit

METHODS = {
    "identity, no projection": dict(method="identity", projection="none"),
    "identity, std projection": dict(method="identity", projection="std"),
    "blackbox, lam=10": dict(method={"name": "blackbox", "lam": 10.0}, projection="none"),
}


def run(epochs: int = 20, seed: int = 135, out: str | Path = "runs/demo") -> list[History]:
    data_args = dict(num_features=5, grid=(5, 5), deg=4, noise_width=0.5)
    train, test = datasets.shortest_path(2000, seed=seed, **data_args).split(1000)
    histories = []
    with tqdm(total=epochs * len(METHODS), desc="demo") as bar:
        for name, options in METHODS.items():
            layer = ComboLayer(train.spec, **options)
            histories.append(fit(layer, train, test, name=name, epochs=epochs, progress=bar))
    print(table(histories))
    plot = save_plot(histories, Path(out))
    if plot is not None:
        print(f"plot of regret per epoch: {plot}")
    return histories


def table(histories: list[History]) -> str:
    width = max(len(h.name) for h in histories)
    lines = [f"{'method':<{width}}  normalized test regret  seconds/epoch"]
    for h in histories:
        lines.append(f"{h.name:<{width}}  {h.regret[-1]:>22.4f}  {h.seconds_per_epoch:>13.3f}")
    return "\n".join(lines)


def save_plot(histories: list[History], out: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install combolayer[plot])")
        return None
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    for h in histories:
        ax.plot(range(1, len(h.regret) + 1), h.regret, marker="o", label=h.name)
    ax.set(xlabel="epoch", ylabel="normalized test regret", title="Shortest path 5x5, deg 4")
    ax.legend()
    ax.grid(alpha=0.3)
    path = out / "regret.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def main(args: Any) -> int:
    run(epochs=args.epochs, seed=args.seed, out=args.out)
    return 0
