"""New rows into a full solution pool: the time per batch and the memory the pool holds.

The goal: 32 new rows into a full pool of 10,000 at N = 900 in at most 5 ms
(it took 1.4 s when every row shifted the whole buffer), with one copy of the
buffer. For each N, a pool of ``--size`` random 0/1 rows is filled, looked up
once with float32 and float64 costs (as a layer would), then ``--repeats``
batches of 32 rows it has not seen go in; the table gives the median time per
batch and the bytes of tensors the pool holds over one float64 copy.

Run: python benchmarks/pool_eviction.py [--size 10000] [--repeats 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from tqdm import tqdm

from combolayer.pool import SolutionPool


def held_bytes(pool: SolutionPool) -> int:
    """The bytes of every tensor or array the pool holds (shared storage counted once)."""
    seen, total = set(), 0
    for value in vars(pool).values():
        for item in value.values() if isinstance(value, dict) else [value]:
            if isinstance(item, torch.Tensor) and item.untyped_storage().data_ptr() not in seen:
                seen.add(item.untyped_storage().data_ptr())
                total += item.untyped_storage().nbytes()
            elif isinstance(item, np.ndarray) and item.base is None:
                total += item.nbytes
    return total


def measure(n: int, size: int, repeats: int, gen: torch.Generator) -> tuple[float, float]:
    pool = SolutionPool(n, max_size=size)
    pool.add((torch.rand(size, n, generator=gen) < 0.5).double())
    pool.best(torch.randn(32, n, generator=gen))
    pool.best(torch.randn(32, n, generator=gen, dtype=torch.float64))
    times = []
    for _ in range(repeats):
        new = (torch.rand(32, n, generator=gen) < 0.5).double()
        start = time.perf_counter()
        added = pool.add(new)
        times.append(time.perf_counter() - start)
        assert added == 32 and len(pool) == size
    return statistics.median(times), held_bytes(pool) / (size * n * 8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--sizes", type=int, nargs="+", default=[40, 144, 900])
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    print(f"| N | 32 new rows into a full pool of {args.size} | memory / one float64 copy |")
    print("|---:|---:|---:|")
    for n in tqdm(args.sizes, desc="N", leave=False):
        seconds, copies = measure(n, args.size, args.repeats, gen)
        print(f"| {n} | {seconds * 1e3:.2f} ms | {copies:.3f} |")


if __name__ == "__main__":
    main()
