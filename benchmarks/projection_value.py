"""Does the detected projection help? Identity with projections none/mean/std/plane/auto.

Three settings, 5 seeds each, the same budget for every projection, no tuning:

- ``sp``: PyEPO-style 5x5 shortest path (edge costs, deg 4, noise 0.5), linear
  model, Hamming loss; metric: normalised regret on held-out data (lower is better).
- ``topk``: pick the top 5 of 20 items from 5 features, Hamming loss; metric:
  overlap accuracy |y & y*| / k (higher is better).
- ``tsp``: TSP-10 with edge costs from features, Hamming loss, and Gaussian
  noise added to the incoming gradient dL/dy (as large as the gradient itself);
  metric: normalised regret (lower is better).

Then the speed of the analysis itself: ``analyze`` in LP mode on a 30x30 grid
flow LP and TSP-50, and the per-batch cost of the projection.

    python benchmarks/projection_value.py [--seeds 5] [--png docs/img/projection_value.png]
        [--write]

``--write`` puts the tables into docs/measurements/projections.md (``projection-value``)
and docs/measurements/solvers.md (``analyze-speed``).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from _doc_blocks import write_block
from torch import nn
from tqdm import tqdm

import combolayer as cl
from combolayer.analysis.hull import _analyze
from combolayer.data import shortest_path
from combolayer.losses import hamming
from combolayer.metrics import normalized_regret

PROJECTIONS = ("none", "mean", "std", "plane", "auto")
MEASUREMENTS = Path(__file__).resolve().parents[1] / "docs" / "measurements"


@dataclass
class Task:
    name: str
    metric: str
    higher_is_better: bool
    spec: object
    features: tuple[torch.Tensor, torch.Tensor]
    costs: tuple[torch.Tensor, torch.Tensor]
    solutions: tuple[torch.Tensor, torch.Tensor]
    epochs: int
    lr: float
    grad_noise: float = 0.0


def split(tensor: torch.Tensor, num_train: int) -> tuple[torch.Tensor, torch.Tensor]:
    return tensor[:num_train], tensor[num_train:]


def shortest_path_task() -> Task:
    data = shortest_path(num_data=600, num_features=5, grid=(5, 5), deg=4, noise_width=0.5,
                         seed=135)
    return Task("sp", "normalised regret", False, data.spec, split(data.features, 400),
                split(data.costs, 400), split(data.solutions, 400), epochs=5, lr=1e-2)


def topk_task(n: int = 20, k: int = 5, num_train: int = 400, num_test: int = 200) -> Task:
    rnd = np.random.RandomState(7)
    spec = cl.problems.TopK(n=n, k=k)
    B = rnd.binomial(1, 0.5, (n, 5))
    x = rnd.normal(size=(num_train + num_test, 5))
    scores = (x @ B.T) / np.sqrt(5) + 0.5 * rnd.normal(size=(len(x), n))
    solutions = cl.make_solver(spec).solve(scores)
    as_tensor = lambda a: torch.as_tensor(a, dtype=torch.float32)  # noqa: E731
    return Task("topk", "accuracy", True, spec, split(as_tensor(x), num_train),
                split(as_tensor(scores), num_train), split(as_tensor(solutions), num_train),
                epochs=5, lr=1e-2)


def tsp_task(n: int = 10, num_train: int = 40, num_test: int = 20) -> Task:
    rnd = np.random.RandomState(11)
    spec = cl.problems.TSP(num_nodes=n)
    B = rnd.binomial(1, 0.5, (n * n, 5))
    x = rnd.normal(size=(num_train + num_test, 5))
    costs = (((x @ B.T) / np.sqrt(5) + 3.0) ** 2 + 1.0) / 3.5**2
    costs = costs.reshape(-1, n, n)
    costs = (costs + costs.transpose(0, 2, 1)) / 2
    solutions = cl.make_solver(spec).solve(costs)
    as_tensor = lambda a: torch.as_tensor(a, dtype=torch.float32)  # noqa: E731
    return Task("tsp", "normalised regret", False, spec, split(as_tensor(x), num_train),
                split(as_tensor(costs), num_train), split(as_tensor(solutions), num_train),
                epochs=3, lr=2e-2, grad_noise=1.0)


def evaluate(task: Task, layer: cl.ComboLayer, model: nn.Module) -> float:
    layer.eval()
    with torch.no_grad():
        cost = model(task.features[1]).reshape(-1, *task.spec.cost_shape)
        y = layer.solver.solve(cost)
    if task.name == "topk":
        return float((y * task.solutions[1]).sum(-1).mean() / task.spec.k)
    return float(normalized_regret(layer, task.costs[1], y))


def train_one(task: Task, projection: str, seed: int) -> float:
    torch.manual_seed(seed)
    layer = cl.ComboLayer(task.spec, method="identity", projection=projection)
    num_costs = int(np.prod(task.spec.cost_shape))
    model = nn.Linear(task.features[0].shape[1], num_costs)
    optimizer = torch.optim.Adam(model.parameters(), lr=task.lr)
    generator = torch.Generator().manual_seed(seed)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(task.features[0], task.solutions[0]),
        batch_size=16, shuffle=True, generator=generator)
    for _ in range(task.epochs):
        layer.train()
        for x, y_true in loader:
            y = layer(model(x).reshape(-1, *task.spec.cost_shape))
            if task.grad_noise:
                y.register_hook(lambda g: g + task.grad_noise * g.pow(2).mean().sqrt()
                                * torch.randn(g.shape, generator=generator))
            loss = hamming(y, y_true)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return evaluate(task, layer, model)


def value_table(seeds: int) -> tuple[list[str], dict]:
    tasks = [shortest_path_task(), topk_task(), tsp_task()]
    results = {}
    with tqdm(total=len(tasks) * len(PROJECTIONS) * seeds, desc="training") as bar:
        for task in tasks:
            for projection in PROJECTIONS:
                scores = []
                for seed in range(seeds):
                    bar.set_postfix(task=task.name, projection=projection)
                    scores.append(train_one(task, projection, seed))
                    bar.update()
                results[task.name, projection] = np.array(scores)
    lines = ["| task (metric) | " + " | ".join(PROJECTIONS) + " |",
             "|---|" + "---|" * len(PROJECTIONS)]
    for task in tasks:
        arrow = "higher is better" if task.higher_is_better else "lower is better"
        cells = [f"{results[task.name, p].mean():.3f} ± {results[task.name, p].std():.3f}"
                 for p in PROJECTIONS]
        lines.append(f"| {task.name} ({task.metric}, {arrow}) | " + " | ".join(cells) + " |")
    return lines, results


def timed(function, repeat: int = 1) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        function()
    return (time.perf_counter() - start) / repeat


def speed_table() -> list[str]:
    from combolayer.data import shortest_path_spec
    from combolayer.transforms.projection import project_mean

    specs = [shortest_path_spec((30, 30)), cl.problems.ShortestPath.grid(30, 30),
             cl.problems.TSP(num_nodes=50)]
    lines = ["| spec | N | normals r | analyze (LP mode) | project, batch 256 | "
             "project_mean, batch 256 |", "|---|---|---|---|---|---|"]
    for spec in tqdm(specs, desc="speed"):
        _analyze.cache_clear()
        seconds = timed(lambda spec=spec: cl.analyze(spec))
        hull = cl.analyze(spec)
        w = torch.randn(256, hull.num_outputs)
        hull.project(w)  # warm up the device copy
        per_batch = timed(lambda hull=hull, w=w: hull.project(w), repeat=20)
        mean_batch = timed(lambda w=w: project_mean(w), repeat=20)
        lines.append(f"| {spec.label} | {hull.num_outputs} | {len(hull.normals)} | "
                     f"{seconds:.2f} s | {per_batch * 1e3:.2f} ms | {mean_batch * 1e3:.3f} ms |")
    return lines


def plot(results: dict, path: str) -> None:
    import matplotlib.pyplot as plt

    titles = {"sp": "shortest path 5x5", "topk": "top-k subset", "tsp": "TSP-10, noisy gradients"}
    metrics = {"sp": "normalised regret (lower is better)", "topk": "accuracy (higher is better)",
               "tsp": "normalised regret (lower is better)"}
    names = sorted({task for task, _ in results})
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.4))
    for ax, name in zip(np.atleast_1d(axes), names, strict=True):
        values = [results[name, p] for p in PROJECTIONS]
        ax.boxplot(values)
        ax.set_xticks(range(1, len(PROJECTIONS) + 1), PROJECTIONS)
        ax.set(title=titles.get(name, name), ylabel=metrics.get(name, ""), xlabel="projection")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--png", default=None, help="save a box plot here")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--write", action="store_true",
                        help="write the tables into docs/measurements/")
    args = parser.parse_args()
    torch.set_num_threads(1)
    speed = [] if args.skip_speed else speed_table()
    value, results = value_table(args.seeds)
    print("\n".join(value))
    if speed:
        print()
        print("\n".join(speed))
    if args.png:
        plot(results, args.png)
    if args.write:
        command = f"python benchmarks/projection_value.py --seeds {args.seeds}"
        write_block(MEASUREMENTS / "projections.md", "projection-value",
                    "benchmarks/projection_value.py",
                    [f"Generated by `{command} --write`; mean ± std over seeds "
                     f"0-{args.seeds - 1}:", "", *value], "## Training under each projection")
        if speed:
            write_block(MEASUREMENTS / "solvers.md", "analyze-speed",
                        "benchmarks/projection_value.py",
                        [f"Generated by `{command} --write`:", "", *speed],
                        "## `cl.analyze` and the projection")


if __name__ == "__main__":
    main()
