"""The layer's hot path on PyEPO's 5x5 grid, batch 32: CPU-time ratios and call depth.

    python benchmarks/hot_path.py [--rounds 11]

Prints, for ``cl.ComboLayer(spec)`` (Identity, projection "auto", the default backend):
the Identity epoch, the epoch with projection "none" and the epoch with the same kernel
in a bare ``autograd.Function`` (the floor), each over the two-stage epoch (the loops of
`combolayer.cli.perf`); the layer's forward + backward over the raw kernel call on the
projected costs; and the Python frames from ``ComboLayer.forward`` to the first highspy
call with ``backend="highs"``. Every side is timed in CPU time (``time.process_time``:
a loaded machine's waiting is left out), interleaved round by round, one torch thread;
the medians of the per-round ratios are printed with the load average. It writes no page.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

import combolayer as cl
from combolayer.cli import perf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = cl.data.shortest_path(1000, 5, grid=(5, 5), deg=4, noise_width=0.5, seed=135)
    x, c, y = data.features, data.costs, data.solutions
    layer, bare = cl.ComboLayer(data.spec), cl.ComboLayer(data.spec, projection="none")
    signed, solve_batch, n = layer.solver.sign * c, layer.solver.solve_batch, c.shape[1]

    class BareSolve(torch.autograd.Function):
        @staticmethod
        def forward(ctx, costs):
            return solve_batch(costs.detach())

        @staticmethod
        def backward(ctx, grad):
            return grad.neg()

    def regret(solve):
        return lambda pred, index: ((solve(pred) - y[index]) * signed[index]).sum(-1).mean()

    w = torch.randn(32, n, requires_grad=True)
    g = torch.randn(32, n)
    with torch.no_grad():
        u = layer.solver.sign * layer.projection(w)
    kernel, calls = layer.solver.kernel, 100

    def repeated(fn):
        def run():
            for _ in range(calls):
                fn()
        return run

    sides = {
        "Identity epoch": perf._epoch_runner(x, regret(layer), n),
        "epoch, projection none": perf._epoch_runner(x, regret(bare), n),
        "epoch, bare Function (floor)": perf._epoch_runner(x, regret(BareSolve.apply), n),
        "two-stage epoch": perf._epoch_runner(
            x, lambda pred, index: torch.nn.functional.mse_loss(pred, c[index]), n),
        "layer fwd+bwd": repeated(lambda: layer(w).backward(g)),
        "raw kernel": repeated(lambda: kernel(u)),
    }
    times = {name: [] for name in sides}
    for fn in sides.values():
        fn()
    for r in range(args.rounds):
        for name in list(sides) if r % 2 == 0 else list(reversed(sides)):
            start = time.process_time()
            sides[name]()
            times[name].append(time.process_time() - start)

    def ratio(a, b):
        return statistics.median(p / q for p, q in zip(times[a], times[b]))

    for name in ("Identity epoch", "epoch, projection none", "epoch, bare Function (floor)"):
        print(f"{name} / two-stage epoch: {ratio(name, 'two-stage epoch'):.2f}")
    print(f"layer fwd+bwd / raw kernel ({layer.solver.backend}), batch 32: "
          f"{ratio('layer fwd+bwd', 'raw kernel'):.2f} "
          f"({statistics.median(times['layer fwd+bwd']) / calls * 1e6:.1f} us / "
          f"{statistics.median(times['raw kernel']) / calls * 1e6:.1f} us)")
    from test_hot_path import frames_to_highs

    highs = cl.ComboLayer(data.spec, backend="highs")
    frames = frames_to_highs(highs, w)
    print(f"Python frames from ComboLayer.forward to highspy: {len(frames)} "
          f"({' > '.join(name.rsplit(':', 1)[-1] for name in frames)})")
    print(f"load average {os.getloadavg()[0]:.1f}, {args.rounds} rounds")


if __name__ == "__main__":
    main()
