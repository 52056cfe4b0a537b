"""Learned constraints against learned costs: a "comboptnet" epoch on per-call rows over Identity.

    python benchmarks/learned_constraints.py [--quick] [--rounds 5] [--out docs/performance.md]

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
alone; the issue's goal, learned / Identity <= 1.5) and *training* (learning
rate 5e-3: the rows and the costs move, and so do the ILPs each loop solves,
which can make either side's solves easier). Reported: the median epoch time of
each and their ratio.
The block goes between the ``learned-constraints`` markers of docs/performance.md.
"""

from __future__ import annotations

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

PAGE = Path(__file__).resolve().parents[1] / "docs" / "performance.md"


def loops(data: comboptnet.Data, backend: str, batch_size: int, lr: float):
    """The two training loops, each ``epoch() -> seconds``, at learning rate ``lr``."""
    costs, solutions = data.splits["train"]
    model = comboptnet.StaticConstraints(4, 16, data.box, np.random.default_rng(0),
                                         feasible_corner=True)
    rows = cl.ComboLayer(data.spec, method="comboptnet", projection="none", backend=backend,
                         on_infeasible="flag")
    with torch.no_grad():
        A, b = model()
    fixed = cl.ILP.from_matrices(shape=[16], A_ub=A.numpy(), b_ub=b.numpy(),
                                 integrality="binary")
    predictor = torch.nn.Linear(16, 16).double()
    with torch.no_grad():  # it starts as the identity map: both loops start on the same ILPs
        predictor.weight.copy_(torch.eye(16))
        predictor.bias.zero_()
    identity = cl.ComboLayer(fixed, method="identity", projection="none", backend=backend)
    row_optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    cost_optimizer = torch.optim.Adam(predictor.parameters(), lr=lr)
    batches = torch.arange(len(costs)).split(batch_size)

    def learned() -> float:
        start = time.perf_counter()
        for batch in batches:
            A, b = model()
            y = rows(costs[batch], A=A, b=b)
            loss = (y - solutions[batch]).pow(2).mean()
            row_optimizer.zero_grad()
            loss.backward()
            row_optimizer.step()
        return time.perf_counter() - start

    def cost_only() -> float:
        start = time.perf_counter()
        for batch in batches:
            y = identity(predictor(costs[batch]))
            loss = (y - solutions[batch]).pow(2).mean()
            cost_optimizer.zero_grad()
            loss.backward()
            cost_optimizer.step()
        return time.perf_counter() - start

    return learned, cost_only


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
    body = []
    for backend in args.backends.split(","):
        for mode, lr in (("frozen (lr 0): the same solves", 0.0), ("training (lr 5e-3)", 5e-3)):
            learned, cost_only = loops(data, backend, 8, lr)
            times = {"learned": [], "identity": []}
            for _ in range(rounds):
                times["learned"].append(learned())
                times["identity"].append(cost_only())
            medians = {key: statistics.median(values) for key, values in times.items()}
            ratio = medians["learned"] / medians["identity"]
            body.append(row([backend, mode, f"{medians['learned']:.2f}",
                             f"{medians['identity']:.2f}", f"{ratio:.2f}",
                             "yes" if ratio <= 1.5 else "no"]))
    lines = [generated_by("benchmarks/learned_constraints.py", time.perf_counter() - started)
             + f": {n_train} instances of the comboptnet experiment's binary ILP (16 "
             f"variables, 4 rows) in batches of 8, median of {rounds} interleaved epochs.", "",
             *table(["backend", "parameters", "learned rows, comboptnet (s/epoch)",
                     "fixed rows, Identity (s/epoch)", "ratio", "<= 1.5"], body)]
    print("\n".join(lines))
    if args.out:
        write_block(Path(args.out), "learned-constraints", "benchmarks/learned_constraints.py",
                    lines, "## Learned constraints against learned costs (issue 37)")
    return lines


if __name__ == "__main__":
    main()
