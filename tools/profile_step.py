"""Where the Warcraft step's time goes on a CUDA device: the grid kernel alone (batch 70,
grids 12 and 30), then the torch profiler's top ops over 5 steps of the two-stage step and
of Identity's (benchmarks/gpu.py's Warcraft step). Printed only; tools/device_check.sh
runs it after the benchmark.

Run: python tools/profile_step.py
"""

import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import combolayer as cl  # noqa: E402
from benchmarks.gpu import warcraft_step  # noqa: E402


def main() -> None:
    if not torch.cuda.is_available():
        print("no CUDA device on this machine: the profile needs one")
        return
    cuda = torch.device("cuda")
    torch.set_num_threads(1)
    for grid in (12, 30):
        spec = cl.problems.ShortestPath.grid(grid, grid, neighborhood=8)
        kernel = cl.make_solver(spec, backend="bellman_ford")
        costs = torch.rand(70, grid, grid, device=cuda) + 0.1
        for _ in range(3):
            kernel.solve_min(costs)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(50):
            kernel.solve_min(costs)
        torch.cuda.synchronize()
        print(f"grid {grid}: kernel alone {1e3 * (time.perf_counter() - start) / 50:.3f} ms")
        for method in ("two-stage", "identity"):
            step = warcraft_step(grid, method, "auto", cuda)
            for _ in range(5):
                step()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    step()
                torch.cuda.synchronize()
            print(f"\n== grid {grid}, {method}: 5 steps")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


if __name__ == "__main__":
    main()
