"""Learned constraints against learned costs: a "comboptnet" epoch on per-call rows over Identity.

    python benchmarks/learned_constraints.py [--quick] [--rounds 5]
        [--out docs/measurements/training.md]

The ILP and the batches of `combolayer reproduce comboptnet` (binary, 2 true
rows): 16 binary variables, 160 training instances in batches of 8, and 4 rows.
Two training loops, each one epoch a round, rounds interleaved:

- learned constraints: the experiment's model (4 rows in the paper's offset
  form) gives ``A``, ``b`` to ``layer(c, A=A, b=b)`` with ``method="comboptnet"``;
  every step adds the rows to the kept model, solves, and takes them out again;
- cost-only Identity: the same 4 rows (the learned model's starting rows) are
  the spec's own, built into the model once, and a linear model predicts the
  16 costs from the cost vector, with ``method="identity"`` and
  ``projection="none"``.

Both train on the same batches with the same loss (the squared error to the
true solutions) and Adam, on the same backend, the cost predictor starting as
the identity map. Two ways, per backend: *frozen* (learning rate 0: every step
runs forward, backward and the optimiser, but both loops send the solver the
same ILPs, so the ratio is the price of per-call rows and CombOptNet's backward
alone; the goal, learned / Identity <= 1.5) and *training* (learning
rate 5e-3: the rows and the costs move, and so do the ILPs each loop solves,
which can make either side's solves easier). Reported: the median epoch time of
each and their ratio; where a frozen epoch's time goes, part by part (the model,
the layer's forward, the backward, the optimiser step: the same epochs, timed by
the same loop) beside the epoch's solves alone; and CombOptNet's backward alone,
in closed form against autograd through its mismatch.
The block goes between the ``learned-constraints`` markers of docs/measurements/training.md.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

import combolayer as cl
from combolayer.experiments import comboptnet

sys.path.insert(0, str(Path(__file__).parent))
from _doc_blocks import generated_by, page_parser, row, table, write_block  # noqa: E402

PAGE = Path(__file__).resolve().parents[1] / "docs" / "measurements" / "training.md"


PARTS = ("model", "layer forward", "backward", "optimizer step")


class Stopwatch:
    """``tick(part)`` adds the time since the last tick to ``times[part]`` (a list per
    part, one entry per epoch; None: nothing kept), so that an epoch is timed part by
    part by the same code that times it whole."""

    def __init__(self, times: dict[str, list[float]] | None) -> None:
        self.times = times
        if times is not None:
            for part in PARTS:
                times.setdefault(part, []).append(0.0)
        self.last = time.perf_counter()

    def __call__(self, part: str) -> None:
        now = time.perf_counter()
        if self.times is not None:
            self.times[part][-1] += now - self.last
        self.last = now


def loops(data: comboptnet.Data, backend: str, batch_size: int, lr: float):
    """The two training loops, each ``epoch(times=None) -> seconds`` (``times``: a
    `Stopwatch`'s per-part record), at learning rate ``lr``, and ``solves() ->
    (seconds with the per-call rows, seconds with the rows built in)``: an epoch's
    solves alone, by each loop's solver, from the untrained rows."""
    costs, solutions = data.splits["train"]
    model = comboptnet.StaticConstraints(4, 16, data.box, np.random.default_rng(0),
                                         feasible_corner=True)
    rows = cl.ComboLayer(data.spec, method="comboptnet", projection="none", backend=backend,
                         on_infeasible="flag")
    with torch.no_grad():
        A0, b0 = model()
    fixed = cl.ILP.from_matrices(shape=[16], A_ub=A0.numpy(), b_ub=b0.numpy(),
                                 integrality="binary")
    predictor = torch.nn.Linear(16, 16).double()
    with torch.no_grad():  # it starts as the identity map: both loops start on the same ILPs
        predictor.weight.copy_(torch.eye(16))
        predictor.bias.zero_()
    identity = cl.ComboLayer(fixed, method="identity", projection="none", backend=backend)
    row_optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    cost_optimizer = torch.optim.Adam(predictor.parameters(), lr=lr)
    batches = torch.arange(len(costs)).split(batch_size)

    def learned(times: dict | None = None) -> float:
        start = time.perf_counter()
        tick = Stopwatch(times)
        for batch in batches:
            A, b = model()
            tick("model")
            y = rows(costs[batch], A=A, b=b)
            tick("layer forward")
            loss = (y - solutions[batch]).pow(2).mean()
            row_optimizer.zero_grad()
            loss.backward()
            tick("backward")
            row_optimizer.step()
            tick("optimizer step")
        return time.perf_counter() - start

    def cost_only(times: dict | None = None) -> float:
        start = time.perf_counter()
        tick = Stopwatch(times)
        for batch in batches:
            c = predictor(costs[batch])
            tick("model")
            y = identity(c)
            tick("layer forward")
            loss = (y - solutions[batch]).pow(2).mean()
            cost_optimizer.zero_grad()
            loss.backward()
            tick("backward")
            cost_optimizer.step()
            tick("optimizer step")
        return time.perf_counter() - start

    def solves() -> tuple[float, float]:
        seconds = []
        for solve in (lambda batch: rows.solver.solve(costs[batch], A=A0, b=b0),
                      lambda batch: identity.solver.solve(costs[batch])):
            start = time.perf_counter()
            for batch in batches:
                solve(batch)
            seconds.append(time.perf_counter() - start)
        return seconds[0], seconds[1]

    return learned, cost_only, solves


def backward_cost(steps: int) -> tuple[float, float]:
    """CombOptNet's backward alone on a step of 8 instances (m=4 rows, n=16 binary
    variables, random data): ms per step in closed form (`comboptnet.mismatch_grad`)
    and by autograd through the mismatch, the best of 7 interleaved repeats of ``steps``
    steps each."""
    from combolayer.estimators.comboptnet import mismatch, mismatch_grad

    g = torch.Generator().manual_seed(0)
    box = torch.zeros(16, dtype=torch.float64), torch.ones(16, dtype=torch.float64)
    flags = torch.zeros(8, dtype=torch.bool)
    cases = [(torch.randn(8, 16, dtype=torch.float64, generator=g),
              torch.randn(8, 4, 16, dtype=torch.float64, generator=g),
              torch.randn(8, 4, dtype=torch.float64, generator=g),
              (torch.rand(8, 16, generator=g) > 0.5).double(),
              torch.randn(8, 16, dtype=torch.float64, generator=g)) for _ in range(steps)]

    def closed() -> None:
        for c, A, b, y, grad in cases:
            mismatch_grad(c, A, b, y, grad, *box, flags, 0.5)

    def by_autograd() -> None:
        for c, A, b, y, grad in cases:
            inputs = [x.requires_grad_(True) for x in (c, A, b)]
            torch.autograd.grad(mismatch(*inputs, y, grad, *box, flags, 0.5), inputs)

    best = [math.inf, math.inf]
    for _ in range(7):  # interleaved: a change in the machine's load meets both
        for index, run in enumerate((closed, by_autograd)):
            start = time.perf_counter()
            run()
            best[index] = min(best[index], time.perf_counter() - start)
    return 1e3 * best[0] / steps, 1e3 * best[1] / steps


def measure(data: comboptnet.Data, backend: str, rounds: int) -> tuple[list[str], list[str]]:
    """One backend's rows: the two loops' median epochs and their ratio, frozen and
    training, and where the frozen epochs' time goes (the same epochs, part by part,
    beside the epoch's solves alone)."""
    ratios, parts_rows = [], []
    for mode, lr in (("frozen (lr 0): the same solves", 0.0), ("training (lr 5e-3)", 5e-3)):
        learned, cost_only, solves = loops(data, backend, 8, lr)
        times = {"learned": [], "identity": []}
        parts = {"learned": {}, "identity": {}} if lr == 0 else None
        for _ in range(rounds):
            times["learned"].append(learned(None if parts is None else parts["learned"]))
            times["identity"].append(cost_only(None if parts is None else parts["identity"]))
        medians = {key: statistics.median(values) for key, values in times.items()}
        ratio = medians["learned"] / medians["identity"]
        ratios.append(row([backend, mode, f"{medians['learned']:.2f}",
                           f"{medians['identity']:.2f}", f"{ratio:.2f}",
                           "yes" if ratio <= 1.5 else "no"]))
        if parts is None:
            continue
        parts_rows += [row([backend, part, *(f"{1e3 * statistics.median(parts[side][part]):.1f}"
                                             for side in ("learned", "identity"))])
                       for part in PARTS]
        alone = [solves() for _ in range(rounds)]
        parts_rows.append(row([backend, "the solves alone (the solver, no layer)", *(
            f"{1e3 * statistics.median(pair[side] for pair in alone):.1f}" for side in (0, 1))]))
    return ratios, parts_rows


def main(argv: list[str] | None = None) -> list[str]:
    parser = page_parser(__doc__, PAGE)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backends", default="scip,highs")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", RuntimeWarning)  # learned rows that empty an instance
    n_train, rounds = (16, 1) if args.quick else (160, args.rounds)
    data = comboptnet.make_data("binary", 2, 0, 16, (n_train, 8, 8), "highs")
    started = time.perf_counter()
    body, parts_body = [], []
    for backend in args.backends.split(","):
        ratios, parts = measure(data, backend, rounds)
        body += ratios
        parts_body += parts
    steps = 1 if args.quick else 50
    closed, by_autograd = backward_cost(steps)
    lines = [generated_by("benchmarks/learned_constraints.py", time.perf_counter() - started)
             + f": {n_train} instances of the comboptnet experiment's binary ILP (16 "
             f"variables, 4 rows) in batches of 8, median of {rounds} interleaved epochs.", "",
             *table(["backend", "parameters", "learned rows, comboptnet (s/epoch)",
                     "fixed rows, Identity (s/epoch)", "ratio", "<= 1.5"], body), "",
             f"Where a frozen epoch's time goes ({len(data.splits['train'][0]) // 8} steps; "
             "ms per epoch, the median over the same rounds; the solves alone: the epoch's "
             "solves by each loop's solver, from the untrained rows):", "",
             *table(["backend", "part", "learned rows, comboptnet (ms/epoch)",
                     "fixed rows, Identity (ms/epoch)"], parts_body), "",
             "CombOptNet's backward alone, a step of 8 instances (4 rows, 16 binary "
             f"variables): {closed:.2f} ms in closed form (`comboptnet.mismatch_grad`), "
             f"{by_autograd:.2f} ms by autograd through the mismatch (the best of 7 "
             f"interleaved repeats of {steps} steps)."]
    print("\n".join(lines))
    if args.out:
        write_block(Path(args.out), "learned-constraints", "benchmarks/learned_constraints.py",
                    lines, "## Learned constraints against learned costs")
    return lines


if __name__ == "__main__":
    main()
