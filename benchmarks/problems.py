"""Per-instance solve time of each named problem: specialised solver vs the ILP path.

    python benchmarks/problems.py [--out docs/measurements/solvers.md]   # ~2 minutes on 2 CPU cores

For every problem at two sizes it times the solver ``backend="auto"`` picks
(the specialised one) against the generic MIP path (HiGHS; SCIP too where it
is installed), all on the same random costs, measured in this one run. For
top-k and ranking it also compares the layer's forward pass with the raw
``torch.topk`` / ``torch.argsort`` call it replaces. Both tables go between the
``speed-table`` markers in docs/measurements/solvers.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
from pathlib import Path

import numpy as np
import torch
from _doc_blocks import write_block
from tqdm.auto import tqdm

import combolayer as cl
from combolayer.backends.algorithms import ScipyBackend
from combolayer.problems import TSP, Knapsack, Matching, Ranking, ShortestPath, TopK


def per_instance(solver, costs, repeats: int = 3) -> float:
    """Best-of-``repeats`` seconds per instance for one batched ``solve`` call."""
    solver.solve(costs[:1])  # warm-up (imports, first-call allocations)
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        solver.solve(costs)
        best = min(best, time.perf_counter() - start)
    return best / len(costs)


def best_seconds(fn, repeats: int = 20) -> float:
    fn()
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def tsp_costs(rng, batch: int, n: int) -> np.ndarray:
    points = rng.random((batch, n, 2))
    return np.linalg.norm(points[:, :, None] - points[:, None], axis=-1)


def knapsack_spec(rng, m: int, n: int, decimals: int = 1) -> Knapsack:
    weights = rng.uniform(3, 8, (m, n)).round(decimals)  # fractional, like PyEPO's weights
    return Knapsack(weights=weights.tolist(), capacities=(weights.sum(1) / 4).round(1).tolist())


def cases(rng):
    """(name, spec, costs for the specialised solver, number of instances for the MIPs)."""
    yield "grid path 12x12", ShortestPath.grid(12, 12), rng.random((50, 12, 12)), 5
    yield "grid path 30x30", ShortestPath.grid(30, 30), rng.random((20, 30, 30)), 2
    yield "assignment 20", Matching(rows=20, cols=20), rng.random((200, 20, 20)), 10
    yield "assignment 100", Matching(rows=100, cols=100), rng.random((20, 100, 100)), 2
    yield "knapsack 2x32", knapsack_spec(rng, 2, 32), rng.random((100, 32)), 10
    yield "knapsack 2x100", knapsack_spec(rng, 2, 100), rng.random((20, 100)), 3
    yield "knapsack 2x32 int", knapsack_spec(rng, 2, 32, 0), rng.random((100, 32)), 10
    yield "knapsack 2x100 int", knapsack_spec(rng, 2, 100, 0), rng.random((20, 100)), 3
    yield "TSP 20", TSP(num_nodes=20), tsp_costs(rng, 5, 20), 5
    yield "TSP 50", TSP(num_nodes=50), tsp_costs(rng, 3, 50), 2
    yield "top-10 of 100", TopK(n=100, k=10), torch.rand(256, 100), 10
    yield "ranking 128 (batch 256)", Ranking(n=128), torch.rand(256, 128), 1


def mip_backends() -> list[str]:
    names = ["highs"]
    if importlib.util.find_spec("pyscipopt") is not None:
        names.append("scip")
    return names


def solver_table(rng) -> list[tuple]:
    rows = []
    for name, spec, costs, num_mip in tqdm(list(cases(rng)), desc="problems"):
        auto = cl.make_solver(spec)
        times = {auto.backend: per_instance(auto, costs)}
        mip_costs = costs[:num_mip]
        for backend in mip_backends():
            if backend not in times:
                times[backend] = per_instance(cl.make_solver(spec, backend), mip_costs,
                                              repeats=1)
        if isinstance(spec, TSP) and "scipy" not in times:
            # the scipy fallback auto uses without SCIP, timed through its kernel
            kernel = ScipyBackend().compile(spec, cl.BackendConfig())
            start = time.perf_counter()
            kernel(mip_costs.reshape(len(mip_costs), -1))
            times["scipy"] = (time.perf_counter() - start) / len(mip_costs)
        rows.append((name, auto.backend, times))
    return rows


def torch_row(name: str, spec, w: torch.Tensor, raw) -> tuple[str, float, float, float]:
    solver = cl.make_solver(spec)
    layer = cl.ComboLayer(spec, projection="none").eval()
    with torch.no_grad():
        return (name, best_seconds(raw, 200), best_seconds(lambda: solver.solve(w), 200),
                best_seconds(lambda: layer(w), 200))


def torch_table() -> list[tuple[str, float, float, float]]:
    """(name, raw torch op, solver.solve, layer forward) seconds per batch of 256."""
    w_topk, w_rank = torch.rand(256, 100), torch.rand(256, 128)
    return [
        torch_row("top-10 of 100 (`torch.topk`)", TopK(n=100, k=10), w_topk,
                  lambda: torch.topk(w_topk, 10, dim=-1)),
        torch_row("ranking 128 (`torch.argsort`)", Ranking(n=128), w_rank,
                  lambda: torch.argsort(w_rank, dim=-1)),
    ]


def milliseconds(seconds: float) -> str:
    """Three significant digits, without an exponent."""
    ms = 1e3 * seconds
    return f"{ms:.3g}" if ms < 100 else f"{ms:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs"
                                             / "measurements" / "solvers.md"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    lines = ["| problem | auto | auto ms | HiGHS ms | SCIP ms | scipy ms | speed-up |",
             "|---|---|---|---|---|---|---|"]
    for name, auto, times in solver_table(rng):
        mips = [t for b, t in times.items() if b in ("highs", "scip")]
        special = auto not in ("highs", "scip")
        ratio = f"{min(mips) / times[auto]:,.1f}x" if special and mips else "-"
        cell = {b: milliseconds(t) for b, t in times.items()}
        lines.append(f"| {name} | {auto} | {cell[auto]} | {cell.get('highs', '-')} "
                     f"| {cell.get('scip', '-')} | {cell.get('scipy', '-')} | {ratio} |")
    lines += ["", "Top-k and ranking, batch of 256, ms per batch (`solver.solve`, and "
              "`ComboLayer(spec, projection=\"none\")` forward without grad, against the raw "
              "torch call):", "",
              "| problem | raw torch op | `solver.solve` | layer forward | solve / raw | "
              "layer / raw |", "|---|---|---|---|---|---|"]
    for name, raw, solve, layer in torch_table():
        lines.append(f"| {name} | {1e3 * raw:.4f} | {1e3 * solve:.4f} | {1e3 * layer:.4f} | "
                     f"{solve / raw:.2f}x | {layer / raw:.2f}x |")
    load = os.getloadavg()[0]
    lines.insert(0, f"Generated by `python benchmarks/problems.py` in "
                    f"{time.perf_counter() - start:.0f} s (load average {load:.1f} at the end, "
                    f"torch {torch.__version__} with one thread). Per-instance solve time in "
                    "ms; speed-up = the fastest MIP path / the specialised solver auto picked.")
    lines.insert(1, "")
    print("\n".join(lines))
    write_block(Path(args.out), "speed-table", "benchmarks/problems.py", lines, "## Speed")
    print(f"wrote the speed tables into {args.out}")


if __name__ == "__main__":
    main()
