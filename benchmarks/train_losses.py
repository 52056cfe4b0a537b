"""Which loss lets Identity's noise act: combolayer train's losses with and without noise.

Setting: the demo's data (PyEPO's shortest path on a 5x5 grid, 5 features, deg 4,
noise half-width 0.5, 1000 training and 1000 test instances), a linear model trained
by ``combolayer.training.loop.fit`` (Adam, lr 1e-2, batch 32) through an Identity
layer with projection ``auto``, for each loss of ``combolayer train`` that goes
through the layer and noise 0 or 0.5. Reported: normalized test regret after the
last epoch, mean over the data seeds. Under a loss linear in y (regret, hamming)
the two noise columns are equal: Identity's gradient does not depend on y there.

    python benchmarks/train_losses.py [--epochs 20] [--seeds 135 1 2]
"""

from __future__ import annotations

import argparse
import statistics
import warnings

from tqdm.auto import tqdm

import combolayer as cl
from combolayer.training.loop import fit

LOSSES = ("regret", "hamming", "l1")
NOISES = (0.0, 0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[135, 1, 2])
    args = parser.parse_args()
    regrets: dict[tuple[str, float], list[float]] = {}
    with tqdm(total=len(args.seeds) * len(LOSSES) * len(NOISES), desc="train_losses") as bar:
        for seed in args.seeds:
            train, test = cl.data.shortest_path(2000, 5, grid=(5, 5), deg=4, noise_width=0.5,
                                                seed=seed).split(1000)
            for loss in LOSSES:
                for noise in NOISES:
                    layer = cl.ComboLayer(train.spec, method="identity", projection="auto",
                                          noise=noise)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", UserWarning)  # the point measured
                        history = fit(layer, train, test, epochs=args.epochs, loss=loss)
                    regrets.setdefault((loss, noise), []).append(history.regret[-1])
                    bar.update()
    print(f"normalized test regret after {args.epochs} epochs, mean of data seeds "
          f"{', '.join(map(str, args.seeds))}\n")
    print("| loss | " + " | ".join(f"noise {noise:g}" for noise in NOISES) + " |")
    print("|---|" + "---|" * len(NOISES))
    for loss in LOSSES:
        cells = [f"{statistics.mean(regrets[(loss, noise)]):.4f}" for noise in NOISES]
        print(f"| `{loss}` | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
