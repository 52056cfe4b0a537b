"""The layer, the torch kernels and the solution cache on a CUDA device against the CPU.

Three tables, each timed in one run on one machine (medians of repeated calls,
the device synchronised before each clock read):

- the layer (forward and Identity backward) on CUDA tensors over CPU tensors,
  where the solver runs on the CPU (knapsack: a MIP backend) or on the device
  (top-k, ranking and PyEPO's 5 x 5 grid, whose enumerated-path kernel stays on
  the device);
- the kernels alone (top-k, ranking, the enumerated DAG shortest path) on CUDA
  over the CPU, at growing batch sizes;
- the solution cache's lookup (`SolutionPool.best`, one matmul and an argmin)
  on CUDA over the CPU;
- the enumeration kernel (small binary problems, with and without per-call rows)
  and CombOptNet's training step through learned rows, on CUDA over the CPU;
- PyEPO's MPAX model (PDLP through JAX) behind `cl.backends.from_pyepo`, a batch
  in one vmapped call on JAX's device, against the exact kernel, where pyepo and
  mpax are installed.

Without a CUDA device it says so and measures nothing. The tables go into
docs/performance.md (block ``gpu``) unless ``--no-doc``.

Run: python benchmarks/gpu.py [--quick] [--no-doc]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

import combolayer as cl
from benchmarks._doc_blocks import command_line, write_block
from combolayer.backends.pool import SolutionPool
from combolayer.backends.torch import ranks, topk_indicator

DOC = Path(__file__).resolve().parents[1] / "docs" / "performance.md"
CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def median_ms(call: Callable[[], object], device: torch.device, seconds: float) -> float:
    """Median wall time of ``call`` in ms: three warm-up calls, then repeats until
    ``seconds`` have passed (at least 5, at most 200), synchronising ``device``."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(3):
        call()
    sync()
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(times) < 5 or (time.perf_counter() < deadline and len(times) < 200):
        start = time.perf_counter()
        call()
        sync()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def cpu_and_cuda(call_on: Callable[[torch.device], Callable[[], object]],
                 seconds: float) -> tuple[float, float]:
    """`median_ms` of ``call_on(device)`` on the CPU and on CUDA."""
    cpu, cuda = (median_ms(call_on(device), device, seconds) for device in (CPU, CUDA))
    return cpu, cuda


def applied(function: Callable[[torch.Tensor], object], costs: torch.Tensor,
            device: torch.device) -> Callable[[], object]:
    """``function`` on a copy of ``costs`` made on ``device`` beforehand."""
    on_device = costs.to(device)
    return lambda: function(on_device)


def layer_step(layer: cl.ComboLayer, w: torch.Tensor, grad: torch.Tensor,
               device: torch.device) -> Callable[[], object]:
    """A forward and a backward of ``layer`` on copies of ``w`` and ``grad`` on ``device``."""
    x, g = w.to(device).requires_grad_(), grad.to(device)
    return lambda: layer(x).backward(g)


def knapsack_spec(n: int = 50, m: int = 2, seed: int = 0) -> cl.problems.Knapsack:
    """PyEPO's knapsack shape: integer weights 3-7, capacity a quarter of each row."""
    rng = np.random.default_rng(seed)
    weights = rng.integers(3, 8, size=(m, n)).astype(float)
    return cl.problems.Knapsack(weights=weights.tolist(), capacities=(weights.sum(1) / 4).tolist())


def layer_rows(batches: list[int], seconds: float) -> list[str]:
    knapsack, grid = knapsack_spec(), cl.data.shortest_path_spec((5, 5))
    cases = [("knapsack 50 x 2 (on the CPU)", knapsack, "auto"),
             ("knapsack 50 x 2, a MIP (on the CPU)", knapsack, "highs"),
             ("PyEPO grid 5 x 5, enumerated paths", grid, "auto"),
             ("top-k, n = 100, k = 10", cl.problems.TopK(n=100, k=10), "auto"),
             ("ranking, n = 100", cl.problems.Ranking(n=100), "auto")]
    rows = ["| problem | batch | backend | CPU tensors, ms | CUDA tensors, ms | CUDA / CPU |",
            "|---|---|---|---|---|---|"]
    for (label, spec, backend), batch in tqdm([(c, b) for c in cases for b in batches],
                                              desc="layer", leave=False):
        layer = cl.ComboLayer(spec, backend=backend).eval()
        w = torch.randn(batch, *spec.cost_shape)
        cpu, cuda = cpu_and_cuda(partial(layer_step, layer, w, torch.randn_like(w)), seconds)
        rows.append(f"| {label} | {batch} | {layer.solver.backend} | {cpu:.3f} | {cuda:.3f} | "
                    f"{cuda / cpu:.2f} |")
    return rows


def kernel_rows(shapes: list[tuple[int, int]], seconds: float) -> list[str]:
    grid = cl.data.shortest_path_spec((5, 5))
    dag = cl.make_solver(grid, backend="scipy")
    kernels = {"top-k (k = n / 10)": lambda costs: topk_indicator(costs, costs.shape[1] // 10),
               "ranking": ranks}
    rows = ["| kernel | batch x n | CPU, ms | CUDA, ms | CUDA / CPU |", "|---|---|---|---|---|"]
    cases = [(name, kernel, shape) for name, kernel in kernels.items() for shape in shapes]
    cases += [("DAG shortest path, PyEPO grid 5 x 5 (40 arcs, 70 paths)", dag.solve_min,
               (batch, grid.cost_shape[0])) for batch in sorted({batch for batch, _ in shapes})]
    for name, kernel, (batch, n) in tqdm(cases, desc="kernels", leave=False):
        cpu, cuda = cpu_and_cuda(partial(applied, kernel, torch.rand(batch, n)), seconds)
        rows.append(f"| {name} | {batch} x {n} | {cpu:.3f} | {cuda:.3f} | {cuda / cpu:.2f} |")
    return rows


def lookup_rows(cases: list[tuple[int, int, int]], seconds: float) -> list[str]:
    rows = ["| batch | N | pool size | CPU, ms | CUDA, ms | CUDA / CPU |",
            "|---|---|---|---|---|---|"]
    for batch, n, size in tqdm(cases, desc="cache lookup", leave=False):
        pool = SolutionPool(n, max_size=size)
        pool.seed((torch.rand(size, n) < 0.3).double())
        cpu, cuda = cpu_and_cuda(partial(applied, pool.best, torch.randn(batch, n)), seconds)
        rows.append(f"| {batch} | {n} | {len(pool)} | {cpu:.3f} | {cuda:.3f} | "
                    f"{cuda / cpu:.2f} |")
    return rows


def enumeration_rows(batches: list[int], seconds: float) -> list[str]:
    """The enumeration kernel (issue 37) on one knapsack row of its own over ``n`` binary
    variables: without per-call rows, with four rows ``A x <= b`` shared by the batch, and
    with four rows per instance; then CombOptNet's step (forward and backward through the
    learned rows, the binary random-constraints setting of `combolayer reproduce
    comboptnet`: 16 variables, batch 8, the ``"enumerate"`` backend)."""
    rows = ["| problem | per-call rows | batch | CPU, ms | CUDA, ms | CUDA / CPU |",
            "|---|---|---|---|---|---|"]
    cases = [(n, mode, batch) for n in (12, 16) for mode in ("none", "shared", "per instance")
             for batch in batches if not (mode == "per instance" and n == 16 and batch > 256)]
    for n, mode, batch in tqdm(cases, desc="enumeration", leave=False):
        spec = cl.ILP(shape=[n], constraints=[cl.Constraint(
            coefs=torch.rand(n, generator=torch.Generator().manual_seed(n)).tolist(),
            sense="<=", rhs=n / 4)])
        solver = cl.make_solver(spec, backend="enumerate")
        costs = torch.randn(batch, n, dtype=torch.float64)
        A = torch.rand(batch if mode == "per instance" else 1, 4, n, dtype=torch.float64)
        b = A.sum(-1) * 0.4
        if mode == "shared":
            A, b = A[0], b[0]

        def call_on(device: torch.device, A=A, b=b, mode=mode, solver=solver, costs=costs):
            c = costs.to(device)
            if mode == "none":
                return lambda: solver.solve(c)
            rows = {"A": A.to(device), "b": b.to(device)}
            return lambda: solver.solve(c, **rows)

        cpu, cuda = cpu_and_cuda(call_on, seconds)
        rows.append(f"| {n} binary variables, one row of its own ({2 ** n} points) | {mode} "
                    f"| {batch} | {cpu:.3f} | {cuda:.3f} | {cuda / cpu:.2f} |")
    rows += ["", "CombOptNet's training step (forward and backward, learned A and b), "
             "binary random constraints, 16 variables, batch 8:", "",
             "| learned rows m | CPU, ms | CUDA, ms | CUDA / CPU |", "|---|---|---|---|"]
    for m in tqdm((1, 2, 4, 8), desc="comboptnet", leave=False):
        layer = cl.ComboLayer(cl.ILP(shape=[16]), method="comboptnet", projection="none",
                              backend="enumerate", on_infeasible="flag")
        w, A = torch.randn(8, 16, dtype=torch.float64), torch.randn(m, 16, dtype=torch.float64)
        b = A.abs().sum(-1) * 0.2
        target = (torch.rand(8, 16) < 0.5).double()

        def step_on(device: torch.device, layer=layer, w=w, A=A, b=b, target=target):
            x, a, c = (t.to(device).requires_grad_() for t in (w, A, b))
            t = target.to(device)
            return lambda: ((layer(x, A=a, b=c) - t) ** 2).sum().backward()

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # flagged rows, by design
            cpu, cuda = cpu_and_cuda(step_on, seconds)
        rows.append(f"| {m} | {cpu:.3f} | {cuda:.3f} | {cuda / cpu:.2f} |")
    return rows


def mpax_rows(batches: list[int], seconds: float) -> list[str]:
    """PyEPO's MPAX 5 x 5 grid model behind `cl.backends.from_pyepo` (a batch in one
    vmapped PDLP call, on JAX's default device) against combolayer's exact DAG kernel
    on the CPU, with MPAX's worst relative objective gap over the batch."""
    try:
        import jax
        from pyepo.model.mpax import shortestPathModel
    except ImportError as error:
        return [f"MPAX skipped: {error} (the [mpax] extra)"]
    spec = cl.data.shortest_path_spec((5, 5))
    mpax = cl.make_solver(spec, backend=cl.backends.from_pyepo(shortestPathModel(grid=(5, 5))))
    exact = cl.make_solver(spec, backend="scipy")
    rows = [f"PyEPO's MPAX grid model (PDLP in float32, relative tolerance 1e-4) on JAX's "
            f"{jax.devices()[0].platform.upper()}, against the exact DAG kernel on the CPU:",
            "", "| batch | MPAX, ms | exact kernel, ms | MPAX / exact | worst objective gap |",
            "|---|---|---|---|---|"]
    for batch in tqdm(batches, desc="mpax", leave=False):
        costs = torch.rand(batch, spec.cost_shape[0], dtype=torch.float64)
        times = [median_ms(partial(solver.solve, costs), CPU, seconds) for solver in (mpax, exact)]
        best = (costs * exact.solve(costs)).sum(-1)
        gap = float((((costs * mpax.solve(costs)).sum(-1) - best) / best).abs().max())
        rows.append(f"| {batch} | {times[0]:.2f} | {times[1]:.3f} | {times[0] / times[1]:.0f} "
                    f"| {gap:.1e} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, short timings")
    parser.add_argument("--no-doc", action="store_true", help="print only")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device on this machine: nothing to measure (the GPU tables in "
              "docs/performance.md come from a machine that has one)")
        return
    torch.set_num_threads(1)  # the layer's solves and the CPU kernels on one thread, as ours
    seconds = 0.05 if args.quick else 0.5
    batches = [32] if args.quick else [32, 256]
    shapes = [(256, 100)] if args.quick else [(256, 100), (4096, 100), (4096, 1000), (65536, 100)]
    lookups = ([(32, 50, 1000)] if args.quick else
               [(32, 50, 1000), (32, 50, 10_000), (256, 1000, 10_000), (4096, 100, 10_000)])
    header = (f"Measured on {torch.cuda.get_device_name()} with torch {torch.__version__} "
              f"(torch on one CPU thread; {os.cpu_count()} CPU cores), "
              f"by `{command_line('benchmarks/gpu.py', None)}`.")
    body = [header, "", "The layer, forward and Identity backward (projection \"auto\"):", "",
            *layer_rows(batches, seconds), "", "The kernels alone:", "",
            *kernel_rows(shapes, seconds), "", "The solution cache's lookup:", "",
            *lookup_rows(lookups, seconds), "",
            "Enumeration (16 binary variables or fewer) and learned rows:", "",
            *enumeration_rows(batches if args.quick else [256, 4096], seconds), "",
            *mpax_rows(batches, seconds)]
    print("\n".join(body))
    if not args.no_doc:
        write_block(DOC, "gpu", "benchmarks/gpu.py", body, "## On a CUDA device")


if __name__ == "__main__":
    main()
