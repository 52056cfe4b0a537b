"""The training loop the PyEPO comparisons share, so both libraries' rows see it alike.

`fit_linear` builds a fresh ``nn.Linear`` (seeded, so every row starts from the same
weights), Adam 1e-2 and a seeded batch order of 32, and returns the model with an
iterator that trains one epoch per step and yields its wall time, so a caller can
evaluate between epochs without that counting as training. `interleaved_epochs`
trains several losses from the same initial model on the same batches, epoch by
epoch in turn, so machine load hits all alike. `one_thread` puts
PyEPO's Gurobi model on one thread, as ours; `PYEPO_MIP_GAP` is the relative MIP gap
its models stop at. `training_solves` records the exact solves a training loop
makes under the solution cache (with `Capture` in place of the solver's kernel),
and `solve_each` replays them one after another, as training solves them.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch

import combolayer as cl
from combolayer.backends.solver import KernelDefaults


def fit_linear(loss_fn: Callable[..., torch.Tensor], dataset, sizes: tuple[int, int],
               seed: int, epochs: int) -> tuple[torch.nn.Linear, Iterator[float]]:
    """Train on ``dataset`` (items ``(x, *targets)``) with ``loss_fn(model(x), *targets)``."""
    torch.manual_seed(seed)
    model = torch.nn.Linear(*sizes)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loader = torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=True,
                                         generator=torch.Generator().manual_seed(seed))

    def epoch_seconds() -> Iterator[float]:
        for _ in range(epochs):
            start = time.perf_counter()
            for x, *targets in loader:
                loss = loss_fn(model(x), *targets)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            yield time.perf_counter() - start

    return model, epoch_seconds()


def interleaved_epochs(makers: dict[str, Callable[[], Callable[..., torch.Tensor]]], train,
                       epochs: int, after_epoch: Callable[[str, torch.nn.Module], None]
                       ) -> dict[str, tuple[torch.nn.Module, list[float]]]:
    """Train one ``nn.Linear`` per entry of ``makers`` (``make()`` builds its loss
    ``loss(model(x), costs, solutions)``) on ``train`` (``features``, ``costs``,
    ``solutions``), interleaved epoch by epoch: every model starts from the same
    weights (seed 0), Adam 1e-2, and each epoch's seeded batches of 32 are the same
    for all. ``after_epoch(name, model)`` runs after each timed epoch, untimed.
    Returns ``{name: (model, seconds per epoch)}``."""
    torch.manual_seed(0)
    init = torch.nn.Linear(train.features.shape[1], train.costs.shape[1])
    runs = {}
    for name, make in makers.items():
        model = copy.deepcopy(init)
        runs[name] = dict(loss=make(), model=model, seconds=[],
                          opt=torch.optim.Adam(model.parameters(), lr=1e-2))
    order = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        batches = torch.randperm(len(train.features), generator=order).split(32)
        for name, run in runs.items():
            start = time.perf_counter()
            for index in batches:
                x, c, y = train.features[index], train.costs[index], train.solutions[index]
                value = run["loss"](run["model"](x), c, y)
                run["opt"].zero_grad()
                value.backward()
                run["opt"].step()
            run["seconds"].append(time.perf_counter() - start)
            after_epoch(name, run["model"])
    return {name: (run["model"], run["seconds"]) for name, run in runs.items()}


#: The relative MIP gap PyEPO's Gurobi models stop at: they keep Gurobi's default,
#: where ours prove optimality (``BackendConfig.mip_gap=0``).
PYEPO_MIP_GAP = 1e-4


def one_thread(optmodel):
    """PyEPO's Gurobi model on one thread, as ours (``BackendConfig.threads``): its own
    default is every core, which its harder knapsacks (DBB's shifted costs, the
    sampled methods, the later epochs of SPO+) use."""
    optmodel._model.Params.Threads = 1
    return optmodel


def solve_each(kernel, costs: np.ndarray, starts: np.ndarray | None,
           seconds: list[float]) -> np.ndarray:
    """Solve every row of ``costs`` in turn (with its row of ``starts`` as a MIP start
    when given), appending each solve's time to ``seconds``.

    One mode's solves run one after another, as a training loop's do. Solving a
    row right after the same row in another mode would flatter the second: SCIP
    keeps earlier solutions across solves and tries them as incumbents, and Gurobi
    starts from its previous solution, so the second solve would begin from the
    optimum (measured: the same cost again took 0.78x SCIP's first solve).
    """
    out = np.empty_like(costs)
    for i, cost in enumerate(costs):
        begin = time.perf_counter()
        out[i] = kernel(cost[None], start=None if starts is None else starts[i:i + 1])[0]
        seconds.append(time.perf_counter() - begin)
    return out


class Capture(KernelDefaults):
    """Stands in for an exact solver's kernel in a training run: records each exact
    solve's costs (the kernel's, minimisation) and the start the solution cache hands
    it (none without a cache), and solves without the start, so the recorded run is
    the same whatever the backends measured afterwards do with starts."""

    takes_start = True

    def __init__(self, solver) -> None:
        self.kernel = solver.kernel
        self.array_api = self.kernel.array_api
        self.costs: list[np.ndarray] = []
        self.starts: list[np.ndarray] = []
        solver.kernel = self

    def __call__(self, costs: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
        self.costs.append(np.array(costs, dtype=np.float64))
        if start is not None:
            self.starts.append(np.array(start, dtype=np.float64))
        return self.kernel(costs)


def training_solves(data, loop: str, epochs: int,
                    solve_ratio: float = 0.1) -> tuple[np.ndarray, np.ndarray | None]:
    """The costs and pool starts of every exact solve in ``epochs`` of ``loop``
    ("SPO+" or "Identity", regret loss, projection "auto") on SCIP; below
    ``solve_ratio`` 1 the pool is seeded with ``data``'s solutions and every exact
    solve has a start, at 1 there is no pool and the starts are None."""
    generator = torch.Generator().manual_seed(0)
    if loop == "SPO+":
        cached = cl.losses.SPOPlusLoss(data.spec, backend="scip", solve_ratio=solve_ratio,
                                       generator=generator)
        loss = cached
    else:
        cached = cl.ComboLayer(data.spec, projection="auto", solve_ratio=solve_ratio,
                               backend="scip", generator=generator)
        sign = cached.solver.sign

        def loss(pred, costs, solutions):
            return (sign * ((cached(pred) - solutions) * costs).sum(-1)).mean()
    if solve_ratio < 1:
        cached.pool.seed(data.solutions)
    capture = Capture(cached.solver)
    dataset = torch.utils.data.TensorDataset(data.features, data.costs, data.solutions)
    _, run = fit_linear(loss, dataset, (data.features.shape[1], data.costs.shape[1]), seed=0,
                        epochs=epochs)
    for _ in run:
        pass
    costs = np.concatenate(capture.costs)
    if not capture.starts:
        return costs, None
    starts = np.concatenate(capture.starts)
    assert len(starts) == len(costs), "every exact solve under the cache gets a start"
    return costs, starts
