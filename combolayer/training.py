"""A small training loop for predict-then-optimise: features -> costs -> layer -> loss.

Used by ``combolayer demo`` and ``combolayer train CONFIG``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from . import data as datasets
from .io import read_mapping
from .layer import ComboLayer
from .losses import hamming


@dataclass
class History:
    name: str
    regret: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    @property
    def seconds_per_epoch(self) -> float:
        return sum(self.seconds) / max(len(self.seconds), 1)


def normalized_regret(layer: ComboLayer, model: nn.Module, test: datasets.Data) -> float:
    from .metrics import normalized_regret as metric

    layer.eval()
    with torch.no_grad():
        y_pred = layer.solver.solve(model(test.features))
    # The data carries the true optima: nothing to re-solve per epoch.
    return float(metric(layer.spec, test.costs, y_pred, y_true=test.solutions))


def fit(
    layer: ComboLayer,
    train: datasets.Data,
    test: datasets.Data,
    *,
    name: str = "",
    epochs: int = 20,
    lr: float = 1e-2,
    batch_size: int = 32,
    seed: int = 0,
    progress: tqdm | None = None,
) -> History:
    """Train a linear cost model through ``layer`` with the Hamming loss; record test regret.

    The loss is PyEPO's Hamming form, linear in y: its gradient is nonzero on
    correct outputs too, unlike ``|y - y_true|``, whose gradient vanishes there
    (measured on the demo: 0.088 against 0.155 normalized regret for Identity).
    """
    torch.manual_seed(seed)
    num_costs = train.costs.shape[1]
    model = nn.Linear(train.features.shape[1], num_costs)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(train.features, train.solutions),
        batch_size=batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )
    history = History(name)
    for _ in range(epochs):
        start = time.perf_counter()
        layer.train()
        for x, y_true in loader:
            loss = hamming(layer(model(x)), y_true)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        history.seconds.append(time.perf_counter() - start)
        history.regret.append(normalized_regret(layer, model, test))
        if progress is not None:
            progress.set_postfix(method=name, regret=f"{history.regret[-1]:.3f}")
            progress.update()
    return history


def load_data(config: dict[str, Any], num_train: int, num_test: int) -> tuple[datasets.Data, ...]:
    params = dict(config)
    generator = getattr(datasets, params.pop("name"))
    return generator(num_data=num_train + num_test, **params).split(num_train)


def train(args: Any) -> int:
    """``combolayer train CONFIG``.

    Keys: data, layer, epochs, lr, batch_size, num_train, num_test.
    """
    config = dict(read_mapping(args.config, what="train config"))
    train_data, test_data = load_data(
        config["data"], config.get("num_train", 1000), config.get("num_test", 1000)
    )
    layer = ComboLayer(train_data.spec, **config.get("layer", {}))
    epochs = config.get("epochs", 20)
    with tqdm(total=epochs, desc="train") as bar:
        history = fit(layer, train_data, test_data, name="train", epochs=epochs,
                      lr=config.get("lr", 1e-2), batch_size=config.get("batch_size", 32),
                      progress=bar)
    print(f"normalized test regret {history.regret[-1]:.4f}, "
          f"{history.seconds_per_epoch:.3f} s/epoch")
    return 0
