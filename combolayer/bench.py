"""``combolayer bench``: what the layer costs on top of the raw solver.

For a batch of costs, compares one layer forward + Identity backward against
the raw kept-model HiGHS loop (``changeColsCost``, ``clearSolver``, ``run``) on
the same model, measured in one run, best of ``repeats``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from .backends.highs import _build_model
from .backends.registry import canonical_form
from .layer import ComboLayer


def best_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def raw_highs_seconds(spec, costs: np.ndarray, repeats: int = 3) -> float:
    """The floor: a bare highspy loop over a kept model, no checks, no conversions."""
    form = canonical_form(spec)
    model = _build_model(form, _default_config())
    columns = np.arange(form.num_outputs, dtype=np.int32)
    flat = (form.sign * costs).reshape(len(costs), -1)

    def solve_all() -> None:
        for row in flat:
            model.changeColsCost(len(columns), columns, row)
            model.clearSolver()
            model.run()
            model.getSolution()

    return best_time(solve_all, repeats)


def layer_seconds(spec, costs: np.ndarray, repeats: int = 3, **layer_args: Any) -> float:
    layer = ComboLayer(spec, method="identity", backend="highs", **layer_args)
    w = torch.tensor(costs, requires_grad=True)
    grad = torch.randn_like(w)

    def forward_backward() -> None:
        layer(w).backward(grad)

    return best_time(forward_backward, repeats)


def _default_config():
    from .backends.config import BackendConfig

    return BackendConfig(name="highs")


def cases():
    from . import data, problems

    return {
        "shortest path 5x5 (PyEPO, 40 edges)": data.shortest_path_spec((5, 5)),
        "assignment 20x20": problems.Matching(rows=20, cols=20),
    }


def run(batch: int = 256, repeats: int = 3) -> list[tuple[str, float, float]]:
    rng = np.random.default_rng(0)
    rows = []
    for name, spec in tqdm(cases().items(), desc="layer overhead"):
        costs = rng.uniform(0.1, 1.0, (batch, *spec.cost_shape))
        raw = raw_highs_seconds(spec, costs, repeats)
        layer = layer_seconds(spec, costs, repeats)
        rows.append((name, raw, layer))
    print(f"batch {batch}, HiGHS kept model, best of {repeats}; goal: ratio <= 1.10")
    print(f"{'problem':<38} {'raw ms':>9} {'layer ms':>9} {'ratio':>6}")
    for name, raw, layer in rows:
        print(f"{name:<38} {raw * 1e3:>9.1f} {layer * 1e3:>9.1f} {layer / raw:>6.3f}")
    return rows


def main(args: Any) -> int:
    run(batch=args.batch)
    return 0
