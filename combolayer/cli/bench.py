"""``combolayer bench``: what the layer costs on top of the raw solver.

For a batch of costs, compares one layer forward + Identity backward (default
projection "auto") against the raw kept-model HiGHS loop (``changeColsCost``,
``clearSolver``, ``run``) on the same model and the same solver inputs (the
projected costs: HiGHS's work depends on the costs), measured in one run, best
of ``repeats``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from .. import data, problems
from ..backends.config import BackendConfig
from ..backends.highs import _build_model, run_highs
from ..errors import InputError
from ..layer.combo_layer import ComboLayer
from ..specs.canonical import canonical_form
from .main import RACE_ROWS


def best_times(fns: list, repeats: int) -> list[float]:
    """The best of ``repeats`` for each function, timed in turns so that all see
    the same machine load."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def raw_highs_loop(spec, costs: np.ndarray):
    """The floor: a bare highspy loop over a kept model on minimisation costs,
    no checks, no conversions."""
    form = canonical_form(spec)
    model = _build_model(form, _default_config())
    columns = np.arange(form.num_outputs, dtype=np.int32)
    flat = np.ascontiguousarray(costs, dtype=np.float64).reshape(len(costs), -1)

    def solve_all() -> list:
        return [solve_one(cost) for cost in flat]

    def solve_one(cost: np.ndarray) -> list[float]:
        model.changeColsCost(len(columns), columns, cost)
        model.clearSolver()
        run_highs(model)
        return model.getSolution().col_value

    return solve_all


def overhead(spec, costs: np.ndarray, repeats: int = 3, **layer_args: Any) -> tuple[float, float]:
    """Seconds for the raw HiGHS loop and for layer forward + backward, same solver inputs."""
    layer = ComboLayer(spec, method="identity", backend="highs", **layer_args)
    w = torch.tensor(costs, requires_grad=True)
    grad = torch.randn_like(w)
    with torch.no_grad():
        solver_inputs = (layer.solver.sign * layer.projection(w)).numpy()

    def forward_backward() -> None:
        layer(w).backward(grad)

    raw, layered = best_times([raw_highs_loop(spec, solver_inputs), forward_backward], repeats)
    return raw, layered


def _default_config():
    return BackendConfig(name="highs")


def cases():
    return {
        "shortest path 5x5 (PyEPO, 40 edges)": data.shortest_path_spec((5, 5)),
        "assignment 20x20": problems.Matching(rows=20, cols=20),
    }


def run(batch: int = 256, repeats: int = 3) -> list[tuple[str, float, float]]:
    rng = np.random.default_rng(0)
    rows = []
    for name, spec in tqdm(cases().items(), desc="layer overhead"):
        costs = rng.uniform(0.1, 1.0, (batch, *spec.cost_shape))
        rows.append((name, *overhead(spec, costs, repeats)))
    print(f"batch {batch}, HiGHS kept model, best of {repeats}; goal: ratio <= 1.10")
    print(f"{'problem':<38} {'raw ms':>9} {'layer ms':>9} {'ratio':>6}")
    for name, raw, layer in rows:
        print(f"{name:<38} {raw * 1e3:>9.1f} {layer * 1e3:>9.1f} {layer / raw:>6.3f}")
    return rows


def main(args: Any) -> int:
    rows = getattr(args, "rows", None)
    if rows is not None and not getattr(args, "race", None):
        raise InputError("--rows counts the instances --race races on; it needs --race SPEC")
    if getattr(args, "check", False):
        return check()
    if getattr(args, "race", None):
        return race(args.race, rows=RACE_ROWS if rows is None else rows)
    run(batch=args.batch)
    return 0


def check() -> int:
    """``combolayer bench --check``: the quick training-overhead ratios against the
    committed baseline; 1 when one regressed by more than ``perf.CHECK_FACTOR``."""
    from . import perf

    if not perf.BASELINE.exists():
        print(f"combolayer bench --check: no baseline at {perf.BASELINE} (it lives in the "
              "source tree; write it with benchmarks/training_overhead.py --baseline)")
        return 2
    results = perf.measure_all(quick=True)
    baseline = json.loads(perf.BASELINE.read_text())
    print(f"{'ratio':<40} {'now':>9} {'baseline':>9}")
    for r in results:
        base = baseline.get(perf.key(r.name), float("nan"))
        print(f"{perf.key(r.name)[:40]:<40} {r.ratio:>9.3f} {base:>9.3f}")
    failures = perf.check(results)
    for failure in failures:
        print(f"REGRESSION {failure}")
    print("bench --check:", "FAILED" if failures else f"ok (limit {perf.CHECK_FACTOR}x baseline)")
    return 1 if failures else 0


def race(spec_source: Any, rows: int = RACE_ROWS, seed: int = 0) -> int:
    """``combolayer bench --race SPEC``: ``backend="race"`` for a spec on ``rows`` random
    costs, 8 instances a call, and its table."""
    from ..backends.race import RacingKernel
    from ..backends.registry import make_solver
    from ..specs.load import load_spec

    spec = load_spec(spec_source)
    solver = make_solver(spec, "race")
    kernel = solver.kernel
    if not isinstance(kernel, RacingKernel):
        print(f"{spec.label}: no race: {solver.backend_reason}")
        return 0
    costs = np.random.default_rng(seed).uniform(0.0, 1.0, (rows, *spec.cost_shape))
    for chunk in tqdm(np.array_split(costs, -(-rows // 8)), desc="race"):
        solver.solve(chunk)
    print(f"{spec.label}, {rows} random instances (uniform in [0, 1)), up to 8 a call:")
    print(f"{'backend':<12} {'timed solves':>12} {'solved':>11} {'ms per solve':>12}  verdict")
    for name, timed, mean, verdict in kernel.table():
        shown = "-" if mean is None else f"{mean * 1e3:.3g}"
        print(f"{name:<12} {timed:>12} {kernel.solved[name]:>11} {shown:>12}  {verdict}")
    print(f"instances asked {kernel.instances_in}, solved {sum(kernel.solved.values())} "
          f"(the first {kernel.tried} by every candidate still in the race)")
    print(f"backend {solver.backend!r}: {solver.backend_reason}")
    return 0
