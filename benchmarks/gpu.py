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
  mpax are installed;
- grid shortest paths (8 neighbours): the Warcraft training step (the paper's
  model, ResNet-18's first block and adaptive max pooling to the grid, batch 70,
  Adam; the two-stage MSE step without a solver, Identity, Blackbox at lam 20;
  median of 15 steps) with each backend, and the Bellman-Ford kernels
  (`combolayer.backends.torch_paths`) against scipy's Dijkstra at batches 70 and
  1024, each on the one device measured; on the CPU also at batches 1, 32 and 256
  from grid 4 up, the measurement behind ``"auto"``'s choice for CPU costs; on
  CUDA, last, the Warcraft step compiled whole (``--compile-grids``).

Without a CUDA device it measures the CPU rows of the shortest-path tables only
and says that the device rows need one. With one it measures the shortest paths
first (the CPU's Warcraft steps take seconds each, and are the run without a
device). Each table is written as it ends, into docs/measurements/gpu.md (block
``gpu``), or without a device into benchmarks/results/gpu.md (block
``gpu-cpu``), unless ``--no-doc``; a run stopped early says what it did not
measure.

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
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

import combolayer as cl
from benchmarks._doc_blocks import command_line, generated_by, write_block
from combolayer.backends.closed_form import ranks, topk_indicator
from combolayer.pool import SolutionPool

DOC = Path(__file__).resolve().parents[1] / "docs" / "measurements" / "gpu.md"
CPU_RESULTS = Path(__file__).resolve().parent / "results" / "gpu.md"
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


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 convolutions with batch norm around a shortcut."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(out)))


class WarcraftResNet(nn.Module):
    """The paper's cost model (Vlastelica et al. 2020): ResNet-18's first block (7x7
    stride-2 convolution, batch norm, ReLU, max pooling, one basic block of 64
    channels), adaptive max pooling to the grid, and the mean over the channels."""

    def __init__(self, grid: int, width: int = 64) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, stride=2, padding=1))
        self.block = BasicBlock(width)
        self.pool = nn.AdaptiveMaxPool2d(grid)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.pool(self.block(self.stem(images))).mean(dim=1)


def warcraft_step(grid: int, method: str, backend: str, device: torch.device,
                  batch: int = 70, compiled: bool = False) -> Callable[[], object]:
    """One Adam step of the Warcraft model on a batch of ``8 grid`` pixel square images:
    ``method`` "two-stage" (MSE to the true costs, no solver), "identity" or "blackbox"
    (lam 20; both with the Hamming loss to the true paths). ``compiled``: the model, the
    layer and the loss as one ``torch.compile`` graph (inductor, fullgraph=True)."""
    gen = torch.Generator().manual_seed(grid)
    images = torch.rand(batch, 3, 8 * grid, 8 * grid, generator=gen).to(device)
    spec = cl.problems.ShortestPath.grid(grid, grid, neighborhood=8)
    true_costs = torch.rand(batch, grid, grid, generator=gen) + 0.1
    true_paths = cl.make_solver(spec, backend="scipy").solve(true_costs).to(device)
    true_costs = true_costs.to(device)
    model = WarcraftResNet(grid).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-4)
    if method != "two-stage":
        blackbox = cl.Blackbox(lam=20.0, reduction="mean")
        options = {"method": blackbox} if method == "blackbox" else {}
        layer = cl.ComboLayer(spec, projection="none", backend=backend, **options)

    def loss() -> torch.Tensor:
        costs = model(images)
        if method == "two-stage":
            return F.mse_loss(costs, true_costs)
        return cl.losses.hamming(layer(costs), true_paths)

    loss_of = torch.compile(loss, fullgraph=True) if compiled else loss

    def step() -> None:
        optimizer.zero_grad()
        loss_of().backward()
        optimizer.step()

    return step


def median_of_steps(step: Callable[[], object], device: torch.device, steps: int) -> float:
    """Median wall time of ``steps`` calls of ``step`` in ms, after two warm-up calls."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(2):
        step()
    sync()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def warcraft_rows(grids: list[int], devices: list[torch.device], steps: int) -> list[str]:
    """The training step per grid, method and backend, and its ratio to the two-stage
    step (the step without a solver) on the same device."""
    rows = ["| grid | device | step | backend | ms per step | / two-stage step |",
            "|---|---|---|---|---|---|"]
    cases = [(grid, device) for grid in grids for device in devices]
    for grid, device in tqdm(cases, desc="warcraft", leave=False):
        base = median_of_steps(warcraft_step(grid, "two-stage", "auto", device), device, steps)
        rows.append(f"| {grid} x {grid} | {device.type} | two-stage (MSE) | none | "
                    f"{base:.1f} | 1.00 |")
        backends = ["auto", "bellman_ford" if device.type == "cpu" else "scipy"]
        for method in ("identity", "blackbox"):
            for backend in backends:
                ms = median_of_steps(warcraft_step(grid, method, backend, device), device,
                                     steps)
                label = "Blackbox (lam 20)" if method == "blackbox" else "Identity"
                rows.append(f"| {grid} x {grid} | {device.type} | {label} | {backend} | "
                            f"{ms:.1f} | {ms / base:.2f} |")
    return rows


def path_kernel_rows(grids: list[int], batches: list[int], devices: list[torch.device],
                     seconds: float) -> list[str]:
    """The grid kernels alone (8 neighbours, uniform costs): scipy's Dijkstra on the
    host and Bellman-Ford on each device, per grid and batch."""
    columns = ["scipy (CPU), ms", *(f"bellman_ford ({d.type.upper()}), ms" for d in devices)]
    rows = ["| grid | batch | " + " | ".join(columns) + " | fastest |",
            "|---|---|" + "---|" * (len(columns) + 1)]
    for grid, batch in tqdm([(g, b) for g in grids for b in batches], desc="paths",
                            leave=False):
        spec = cl.problems.ShortestPath.grid(grid, grid, neighborhood=8)
        costs = torch.rand(batch, grid, grid, generator=torch.Generator().manual_seed(grid))
        times = {"scipy (CPU)": median_ms(
            partial(cl.make_solver(spec, backend="scipy").solve_min, costs), CPU, seconds)}
        kernel = cl.make_solver(spec, backend="bellman_ford")
        for device in devices:
            times[f"bellman_ford ({device.type.upper()})"] = median_ms(
                applied(kernel.solve_min, costs, device), device, seconds)
        fastest = min(times, key=times.get)
        rows.append(f"| {grid} x {grid} | {batch} | "
                    + " | ".join(f"{ms:.2f}" for ms in times.values()) + f" | {fastest} |")
    return rows


def compiled_warcraft_rows(grids: list[int], steps: int) -> list[str]:
    """The Warcraft step on CUDA with the model, the layer and the loss compiled as one
    graph: the first call (the compile, an empty cache aside) and the median step, for
    the two-stage step and Identity."""
    rows = ["| grid | step | first call, s | ms per step | / compiled two-stage step |",
            "|---|---|---|---|---|"]
    for grid in tqdm(grids, desc="compiled", leave=False):
        base = None
        for method, label in (("two-stage", "two-stage (MSE)"), ("identity", "Identity")):
            step = warcraft_step(grid, method, "auto", CUDA, compiled=True)
            start = time.perf_counter()
            step()
            torch.cuda.synchronize()
            first = time.perf_counter() - start
            ms = median_of_steps(step, CUDA, steps)
            base = base or ms
            rows.append(f"| {grid} x {grid} | {label} | {first:.1f} | {ms:.1f} | "
                        f"{ms / base:.2f} |")
    return rows


Section = tuple[str, Callable[[], list[str]]]


def shortest_path_sections(args: argparse.Namespace, device: torch.device) -> list[Section]:
    """The grid shortest-path tables on ``device``: the Warcraft step and the kernels at
    the paper's batch and at 1024 against scipy's Dijkstra on the host; on the CPU also
    from grid 4 up at batches 1, 32 and 256."""
    seconds = 0.05 if args.quick else 0.5
    grids = [12] if args.quick else [12, 18, 24, 30]
    steps = 3 if args.quick else args.steps
    warcraft = [12] if args.quick else args.warcraft_grids
    sections = [
        ("Grid shortest paths (8 neighbours), the Warcraft training step: batch 70, "
         f"median of {steps} steps, projection none:",
         partial(warcraft_rows, warcraft, [device], steps)),
        ("The kernels alone, ms per batch:",
         partial(path_kernel_rows, grids, [70] if args.quick else [70, 1024], [device],
                 seconds))]
    if device == CPU and not args.quick:
        sections.append(("On CPU tensors, from grid 4 up (the measurement behind `auto`'s "
                         "choice for CPU costs), ms per batch:",
                         partial(path_kernel_rows, [4, 6, 8, 10, 15, 20, 30], [1, 32, 256], [CPU],
                                 seconds)))
    return sections


def measure(head: list[str], sections: list[Section], write: Callable[[list[str]], None]
            ) -> None:
    """Each section's table in turn, printed and written as it ends (so a run stopped at
    a time limit keeps what it measured, and says what it did not)."""
    body = list(head)

    def write_with(left: list[Section]) -> None:
        names = [(title or "PyEPO's MPAX").rstrip(":") for title, _ in left]
        write(body + (["", "(Written while the run went on; not measured yet: "
                       + "; ".join(names) + ".)"] if names else []))

    write_with(sections)  # a run stopped in its first table leaves no older block behind
    for position, (title, rows) in enumerate(sections):
        part = ["", title, "", *rows()] if title else ["", *rows()]
        print("\n".join(part), flush=True)
        body += part
        write_with(sections[position + 1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, short timings")
    parser.add_argument("--no-doc", action="store_true", help="print only")
    parser.add_argument("--steps", type=int, default=15,
                        help="Warcraft training steps timed per row (the median is shown)")
    parser.add_argument("--warcraft-grids", type=int, nargs="+", default=[12, 18, 24, 30],
                        help="grid sizes of the Warcraft step (a CPU step at 30 x 30 takes "
                             "seconds)")
    parser.add_argument("--compile-grids", type=int, nargs="*", default=[30],
                        help="grid sizes of the compiled Warcraft step on CUDA (none: skip; "
                             "each compiles the model twice)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # the layer's solves and the CPU kernels on one thread, as ours
    began = time.perf_counter()
    if not torch.cuda.is_available():
        print("no CUDA device on this machine: nothing to measure on a device (the GPU tables "
              "in docs/measurements/gpu.md come from a machine that has one; the device rows of "
              "the shortest-path tables need one). The CPU rows of those tables:")
        head = ["How to read it: each Warcraft row is one training step (model, layer, loss, "
                "Adam) over the step without a solver on the same device; on one CPU thread "
                "the model's convolutions take most of a step, so the backends differ by "
                "less than the rows' noise there. The kernel rows time the solver alone; "
                "`fastest` is the quicker per row."]

        def write(body: list[str]) -> None:
            if args.no_doc:
                return
            CPU_RESULTS.parent.mkdir(exist_ok=True)
            if not CPU_RESULTS.exists():
                CPU_RESULTS.write_text("# benchmarks/gpu.py without a CUDA device\n")
            stamp = (f"{generated_by('benchmarks/gpu.py', time.perf_counter() - began)}, on "
                     f"{time.strftime('%Y-%m-%d')} with torch {torch.__version__} on one CPU "
                     f"thread ({os.cpu_count()} CPU cores; no CUDA device: the device rows "
                     "need one).")
            write_block(CPU_RESULTS, "gpu-cpu", "benchmarks/gpu.py", [stamp, "", *body],
                        "## The CPU rows")

        measure(head, shortest_path_sections(args, CPU), write)
        return
    seconds = 0.05 if args.quick else 0.5
    batches = [32] if args.quick else [32, 256]
    shapes = [(256, 100)] if args.quick else [(256, 100), (4096, 100), (4096, 1000), (65536, 100)]
    lookups = ([(32, 50, 1000)] if args.quick else
               [(32, 50, 1000), (32, 50, 10_000), (256, 1000, 10_000), (4096, 100, 10_000)])
    header = (f"Measured on {torch.cuda.get_device_name()} with torch {torch.__version__} "
              f"(torch on one CPU thread; {os.cpu_count()} CPU cores), "
              f"by `{command_line('benchmarks/gpu.py', None)}`, on {time.strftime('%Y-%m-%d')}.")
    # the shortest paths first: the rows a device is lent for (issue 51), then the rest
    sections = [*shortest_path_sections(args, CUDA),
                ("The layer, forward and Identity backward (projection \"auto\"):",
                 partial(layer_rows, batches, seconds)),
                ("The kernels alone:", partial(kernel_rows, shapes, seconds)),
                ("The solution cache's lookup:", partial(lookup_rows, lookups, seconds)),
                ("Enumeration (16 binary variables or fewer) and learned rows:",
                 partial(enumeration_rows, batches if args.quick else [256, 4096], seconds)),
                ("", partial(mpax_rows, batches, seconds))]
    if args.compile_grids:  # last: each grid compiles the model twice (a minute or more)
        steps = 3 if args.quick else args.steps
        sections.append(("The Warcraft step compiled (the model, the layer and the loss as "
                         "one `torch.compile` graph, inductor, fullgraph=True), on CUDA:",
                         partial(compiled_warcraft_rows,
                                 [12] if args.quick else args.compile_grids, steps)))

    def write(body: list[str]) -> None:
        if not args.no_doc:
            write_block(DOC, "gpu", "benchmarks/gpu.py", body, "## On a CUDA device")

    measure([header], sections, write)

if __name__ == "__main__":
    main()
