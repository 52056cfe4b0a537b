"""The training loop the PyEPO comparisons share, so both libraries' rows see it alike.

`fit_linear` builds a fresh ``nn.Linear`` (seeded, so every row starts from the same
weights), Adam 1e-2 and a seeded batch order of 32, and returns the model with an
iterator that trains one epoch per step and yields its wall time, so a caller can
evaluate between epochs without that counting as training. `one_thread` puts
PyEPO's Gurobi model on one thread, as ours; `PYEPO_MIP_GAP` is the relative MIP gap
its models stop at.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import torch


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


#: The relative MIP gap PyEPO's Gurobi models stop at: they keep Gurobi's default,
#: where ours prove optimality (``BackendConfig.mip_gap=0``).
PYEPO_MIP_GAP = 1e-4


def one_thread(optmodel):
    """PyEPO's Gurobi model on one thread, as ours (``BackendConfig.threads``): its own
    default is every core, which its harder knapsacks (DBB's shifted costs, the
    sampled methods, the later epochs of SPO+) use."""
    optmodel._model.Params.Threads = 1
    return optmodel
