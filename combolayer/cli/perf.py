"""Training-overhead ratios: what a combinatorial layer adds to a training step.

Each ratio times two sides in one process, interleaved (A, B, A, B, ...), and
reports the median of the per-round ratios A/B, so that a load change on a
shared machine hits both sides of a round alike. ``torch.set_num_threads`` is
pinned (default 1) for both sides. Used by ``benchmarks/training_overhead.py``
(which writes docs/measurements/overhead.md) and by ``combolayer bench --check``.
"""

from __future__ import annotations

import json
import math
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

#: The committed baseline ``combolayer bench --check`` compares against.
BASELINE = Path(__file__).resolve().parents[2] / "benchmarks" / "training_overhead_baseline.json"
#: ``--check`` fails when a ratio exceeds its baseline by more than this factor.
CHECK_FACTOR = 1.5


@dataclass
class Ratio:
    """One measured ratio: median milliseconds of each side, the median per-round ratio
    and, for interleaved ratios, the quartiles of the per-round ratios (its spread)."""

    name: str
    a_ms: float
    b_ms: float
    ratio: float
    goal: str
    rounds: int
    quartiles: tuple[float, float] | None = None

    @classmethod
    def interleaved(cls, name: str, goal: str, a: Callable[[], object],
                    b: Callable[[], object], rounds: int, warmup: int = 2) -> Ratio:
        ta, tb, ratios = interleaved(a, b, rounds, warmup)
        low, _, high = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
        return cls(name, ta * 1e3, tb * 1e3, statistics.median(ratios), goal, rounds,
                   (low, high))

    def row(self) -> str:
        spread = "" if self.quartiles is None else (
            f" ({self.quartiles[0]:.2f}-{self.quartiles[1]:.2f})")
        return (f"| {self.name} | {self.a_ms:.3f} | {self.b_ms:.3f} | {self.ratio:.2f}"
                f"{spread} | {self.goal} |")


def interleaved(a: Callable[[], object], b: Callable[[], object], rounds: int,
                warmup: int = 2) -> tuple[float, float, list[float]]:
    """Time ``a`` and ``b`` in turns: (median seconds of a, of b, a/b of every round)."""
    for _ in range(warmup):
        a()
        b()
    times_a, times_b, ratios = [], [], []
    for r in range(rounds):
        # alternate which side goes first, so neither always follows the other
        order = ((a, times_a), (b, times_b)) if r % 2 == 0 else ((b, times_b), (a, times_a))
        for fn, times in order:
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        ratios.append(times_a[-1] / times_b[-1])
    return statistics.median(times_a), statistics.median(times_b), ratios


# -- training epochs on PyEPO's shortest path -------------------------------------


def _epoch_runner(features: torch.Tensor, loss_fn: Callable, num_outputs: int,
                  batch: int = 32, seed: int = 0) -> Callable[[], None]:
    """One epoch of Adam on a linear model, shuffled batches of ``batch``; the same
    initial model and batch order for every side built with the same seed."""
    torch.manual_seed(seed)
    model = torch.nn.Linear(features.shape[1], num_outputs)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(seed)
    n = len(features)

    def epoch() -> None:
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, batch):
            index = order[start:start + batch]
            loss = loss_fn(model(features[index]), index)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    return epoch


def shortest_path_epochs(num_data: int = 1000, rounds: int = 51) -> list[Ratio]:
    """Identity epoch / two-stage epoch, and our Identity / PyEPO's NID when pyepo runs."""
    import combolayer as cl

    data = cl.data.shortest_path(num_data, 5, grid=(5, 5), deg=4, noise_width=0.5, seed=135)
    x, c, y = data.features, data.costs, data.solutions
    layer = cl.ComboLayer(data.spec)  # the defaults: Identity, projection "auto"
    signed_costs = layer.solver.sign * c  # the objective sense, folded in once
    num_outputs = c.shape[1]

    def mse(pred: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.mse_loss(pred, c[index])

    bare_layer = cl.ComboLayer(data.spec, projection="none")
    solve_batch = layer.solver.solve_batch

    class BareSolve(torch.autograd.Function):
        """The same kernel with the negative identity and nothing else: no checks,
        no projection, no layer (the floor of any solver-in-the-loop epoch)."""

        @staticmethod
        def forward(ctx: Any, costs: torch.Tensor) -> torch.Tensor:
            return solve_batch(costs.detach())

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            return grad.neg()

    def regret_with(solve: Callable) -> Callable:
        # PyEPO's lossfunc="r": the regret of the decision under the true costs
        return lambda pred, index: ((solve(pred) - y[index]) * signed_costs[index]).sum(-1).mean()

    identity = _epoch_runner(x, regret_with(layer), num_outputs)
    two_stage = _epoch_runner(x, mse, num_outputs)
    measure = Ratio.interleaved
    results = [measure("Identity epoch / two-stage epoch (shortest path 5x5, linear, "
                       f"batch 32, {num_data} instances)", "<= 2.0", identity, two_stage,
                       rounds),
               measure("Identity epoch, projection none / two-stage epoch", "(floor)",
                       _epoch_runner(x, regret_with(bare_layer), num_outputs), two_stage,
                       rounds),
               measure("the same kernel in a bare autograd.Function (no checks, no "
                       "projection, no layer) / two-stage epoch (the floor)", "(floor)",
                       _epoch_runner(x, regret_with(BareSolve.apply), num_outputs),
                       two_stage, rounds)]
    nid = pyepo_nid_loss(c, y)
    if nid is not None:
        peer = _epoch_runner(x, nid, num_outputs)
        results.append(measure("our Identity epoch / PyEPO NID epoch (same data, model, "
                               "batches)", "<= 0.2", identity, peer, max(3, rounds // 3)))
    return results


def warcraft_cnn_epochs(num_maps: int = 280, rounds: int = 5) -> Ratio:
    """Identity epoch / two-stage epoch for the Warcraft experiment's CNN on its
    generated 12x12 maps (batch 70): where the model should dominate."""
    import combolayer as cl
    from combolayer.experiments import warcraft

    config = warcraft.Config(num_train=num_maps)
    images, costs = warcraft.make_maps(config, num_maps, np.random.default_rng(0))
    costs = costs.float()
    spec = cl.problems.ShortestPath.grid(config.grid, config.grid, neighborhood=8,
                                         negative_costs=config.negative_costs)
    layer = cl.ComboLayer(spec, projection="none")
    paths = layer.solver.solve(costs)

    def runner(loss_fn: Callable) -> Callable[[], None]:
        torch.manual_seed(0)
        model = warcraft.WarcraftCNN(config.grid)
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)

        def epoch() -> None:
            for start in range(0, num_maps, config.batch_size):
                index = slice(start, start + config.batch_size)
                loss = loss_fn(model(images[index]), index)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

        return epoch

    identity = runner(lambda pred, i: (layer(pred) - paths[i]).abs().mean())
    two_stage = runner(lambda pred, i: torch.nn.functional.mse_loss(pred, costs[i]))
    return Ratio.interleaved(f"CNN on Warcraft-like maps: Identity epoch / two-stage epoch "
                             f"(12x12, batch 70, {num_maps} maps)", "<= 1.2", identity,
                             two_stage, rounds)


def pyepo_nid_loss(c: torch.Tensor, y: torch.Tensor) -> Callable | None:
    """PyEPO's negativeIdentity with its OR-Tools (GLOP) shortest-path model, or None
    when pyepo or OR-Tools is missing (pyepo is optional, never a dependency)."""
    try:
        import pyepo
        from pyepo.model.ort import shortestPathModel

        optmodel = shortestPathModel(grid=(5, 5))
        nid = pyepo.func.negativeIdentity(optmodel, processes=1)
    except Exception as error:  # any missing piece means: not measurable here
        warnings.warn(f"PyEPO NID not measured: {type(error).__name__}: {error}",
                      RuntimeWarning, stacklevel=2)
        return None

    def loss(pred: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return (((nid(pred) - y[index]) * c[index]).sum(-1)).mean()

    return loss


# -- top-k and ranking --------------------------------------------------------------


def selection_ratios(batch: int = 256, n: int = 100, k: int = 10,
                     rounds: int = 200) -> list[Ratio]:
    """Layer forward+backward over the raw torch op forward+backward, same input."""
    import combolayer as cl

    generator = torch.Generator().manual_seed(0)
    w = torch.randn(batch, n, generator=generator, requires_grad=True)
    grad = torch.randn(batch, n, generator=generator)
    topk_layer = cl.ComboLayer(cl.problems.TopK(n=n, k=k))
    topk_bare = cl.ComboLayer(cl.problems.TopK(n=n, k=k), projection="none")
    rank_layer = cl.ComboLayer(cl.problems.Ranking(n=n))
    grad_k = grad[:, :k].contiguous()

    def layer_step(layer):
        def step() -> None:
            layer(w).backward(grad)
        return step

    def raw_topk() -> None:
        torch.topk(w, k, dim=-1).values.backward(grad_k)

    def raw_ranks() -> None:
        # ranks as torch users write them; argsort has no backward
        torch.argsort(torch.argsort(w.detach(), dim=-1, descending=True), dim=-1)

    def raw_sort() -> None:
        torch.sort(w, dim=-1).values.backward(grad)

    measure = Ratio.interleaved
    return [
        measure(f"TopK layer / torch.topk, fwd+bwd, batch {batch}, n={n}, k={k}", "<= 1.5",
                layer_step(topk_layer), raw_topk, rounds),
        measure(f"TopK layer, projection none / torch.topk (the floor), batch {batch}",
                "(floor)", layer_step(topk_bare), raw_topk, rounds),
        measure(f"Ranking layer fwd+bwd / raw torch ranks (argsort of argsort), batch "
                f"{batch}, n={n}", "<= 1.0", layer_step(rank_layer), raw_ranks, rounds),
        measure(f"Ranking layer / one torch.sort, fwd+bwd (the floor), batch {batch}, n={n}",
                "(floor)", layer_step(rank_layer), raw_sort, rounds),
    ]


def fixed_overhead(rounds: int = 2000) -> Ratio:
    """A 5-variable top-k, batch 1: layer forward+backward against the raw kernel call
    (the torch solve on the already projected cost), in microseconds."""
    import combolayer as cl

    layer = cl.ComboLayer(cl.problems.TopK(n=5, k=2))
    w = torch.randn(1, 5, requires_grad=True)
    grad = torch.randn(1, 5)
    kernel = layer.solver.kernel
    with torch.no_grad():
        solver_input = layer.solver.sign * layer.projection(w)

    def layer_call() -> None:
        layer(w).backward(grad)

    def raw_call() -> None:
        kernel(solver_input)

    ta, tb, _ = interleaved(layer_call, raw_call, rounds, warmup=50)
    return Ratio("fixed per-call overhead, 5-variable top-k (layer fwd+bwd minus raw kernel), "
                 "us", ta * 1e3, tb * 1e3, (ta - tb) * 1e6, "torch's own floor", rounds)


def _medians_us(fns: dict[str, Callable[[], object]], repeats: int = 2000,
                chunks: int = 40) -> dict[str, float]:
    """Median microseconds per call of each function, timed in chunks taken in turns
    so that every stage sees the same machine load."""
    for fn in fns.values():
        for _ in range(50):
            fn()
    per = max(1, repeats // chunks)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(chunks):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(per):
                fn()
            samples[name].append((time.perf_counter() - start) / per)
    return {name: statistics.median(values) * 1e6 for name, values in samples.items()}


def call_profile(repeats: int = 2000) -> dict[str, float]:
    """The stages of one layer call on a 5-variable top-k (batch 1), in microseconds."""
    import combolayer as cl
    from combolayer.backends.solver import check_costs

    layer = cl.ComboLayer(cl.problems.TopK(n=5, k=2))
    w = torch.randn(1, 5, requires_grad=True)
    grad = torch.randn(1, 5)
    with torch.no_grad():
        u = layer.solver.sign * layer.projection(w)

    def forward_backward() -> None:
        layer(w).backward(grad)

    def one_op() -> None:
        torch.neg(u)

    return _medians_us({
        "one torch op (`neg` on the 5 costs), for scale": one_op,
        "raw kernel (numpy sort + compare on the projected cost)": lambda: layer.solver.kernel(u),
        "shape + finite check": lambda: check_costs(layer.spec, w),
        "projection forward (mean, norm, divide)": lambda: layer.projection(w),
        "`solver.solve_min` (kernel + reshapes)": lambda: layer.solver.solve_min(u),
        "layer forward, no grad": lambda: layer(w.detach()),
        "layer forward + backward": forward_backward,
    }, repeats)


# -- TSP --------------------------------------------------------------------------


def tsp_costs(n: int, batch: int, seed: int = 0) -> np.ndarray:
    """Euclidean distances between uniform random points in the unit square."""
    points = np.random.default_rng(seed).uniform(size=(batch, n, 2))
    return np.linalg.norm(points[:, :, None] - points[:, None, :], axis=-1)


def tsp_per_solve(sizes=(20, 50), instances: int = 24, backend: str = "auto") -> list[Ratio]:
    """Milliseconds per TSP solve on one core over ``instances`` instances (a warm-up
    solve first): the median in ``a_ms`` (the goal's measure) and the mean in
    ``b_ms``. Solve times have a long tail (instances whose LP stays fractional
    pay MIP solves), so the mean, which sets a batch's time, sits well above
    the median; a handful of instances gives neither reliably."""
    import combolayer as cl

    results = []
    for n in sizes:
        solver = cl.make_solver(cl.problems.TSP(num_nodes=n), backend)
        costs = tsp_costs(n, instances + 1, seed=n)
        solver.solve(costs[:1])
        times = []
        for cost in costs[1:]:
            start = time.perf_counter()
            solver.solve(cost)
            times.append(time.perf_counter() - start)
        median, mean = statistics.median(times) * 1e3, statistics.fmean(times) * 1e3
        goal = {20: "<= 4 ms", 50: "<= 25 ms"}.get(n, "")
        results.append(Ratio(f"TSP-{n} per solve ({solver.backend}), ms", median, mean,
                             median, goal, instances))
    return results


def tsp_workers(n: int = 50, batch: int = 64, workers: int = 2, rounds: int = 3,
                executor: str = "process") -> Ratio:
    """``workers`` workers / serial on a batch of TSP-``n`` (time ratio, lower is better).

    The workers are started and have solved the batch before the timing: the
    executor starts its pool in the background once the solve time spent in
    the caller pays for it (one batch here), this waits for it, and that start
    (new processes importing torch, one model build each) is no part of the
    steady state (benchmarks/scale_out.py times it: the cold rows). Both sides
    return the same solutions. A round during which another process takes a core
    measures that contention instead; the median over ``rounds`` keeps a few such
    rounds out."""
    import combolayer as cl

    spec = cl.problems.TSP(num_nodes=n)
    serial = cl.make_solver(spec, "auto")
    parallel = cl.make_solver(spec, cl.BackendConfig(executor=executor, workers=workers))
    costs = tsp_costs(n, batch, seed=1)
    parallel.solve(costs)  # pays for the workers, which start in the background
    ready = getattr(parallel.kernel, "_ready", None)
    if ready is not None:
        ready.wait(120)
    if not np.array_equal(parallel.solve(costs), serial.solve(costs)):
        raise AssertionError("the workers' tours differ from the serial solver's")
    return Ratio.interleaved(f"{workers} {executor} workers / serial, TSP-{n} batch {batch}",
                             "<= 0.56", lambda: parallel.solve(costs),
                             lambda: serial.solve(costs), rounds, warmup=0)


# -- all of it --------------------------------------------------------------------


def measure_all(quick: bool = False, threads: int = 1) -> list[Ratio]:
    """Every ratio; ``quick`` is the under-a-minute version for ``bench --check``."""
    torch.set_num_threads(threads)
    results = []
    results += shortest_path_epochs(rounds=9 if quick else 51)
    results.append(warcraft_cnn_epochs(num_maps=140 if quick else 280, rounds=3 if quick else 5))
    results += selection_ratios(rounds=50 if quick else 200)
    results.append(fixed_overhead(rounds=500 if quick else 2000))
    results += tsp_per_solve(instances=4 if quick else 24)
    # 64 in the quick run too: 16 TSP-50 solves are too little work for
    # the executor to start a pool, so they would measure serial against serial.
    results.append(tsp_workers(batch=64, rounds=1 if quick else 5))
    return results


def key(name: str) -> str:
    """A ratio's stable short key (its name up to the first comma or parenthesis)."""
    return name.split(",")[0].split("(")[0].strip()


def save_baseline(results: list[Ratio], path: Path = BASELINE) -> None:
    values = {key(r.name): round(r.ratio, 4)
              for r in results if math.isfinite(r.ratio)}
    path.write_text(json.dumps(values, indent=1, sort_keys=True) + "\n")


def check(results: list[Ratio], path: Path = BASELINE, factor: float = CHECK_FACTOR) -> list[str]:
    """The regressions: ratios more than ``factor`` times their committed baseline."""
    baseline = json.loads(Path(path).read_text())
    failures = []
    for r in results:
        base = baseline.get(key(r.name))
        if base is not None and r.ratio > factor * base:
            failures.append(f"{key(r.name)}: {r.ratio:.3f} > {factor} x baseline {base:.3f}")
    return failures


def to_json(results: list[Ratio]) -> list[dict]:
    return [asdict(r) for r in results]
