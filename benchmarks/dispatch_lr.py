"""The dispatch model's regret across Adam's learning rate: the default layer against SPO+.

examples/dispatch.py (8 drivers, 10 requests, at most 6 rides, each ride's fare a
known cost per call) trained 10 epochs per seed and learning rate; the table gives the
mean normalized test regret over the seeds of the default layer (Identity, projection
"auto" on ``w + known_cost``, trained on the decisions' true cost), of SPO+, and
their difference. Identity's gradient under a loss linear in the decisions turns
``w + k`` towards the true total cost (docs/core.md, "What Identity learns"), so how
fast it gets there depends on the step; SPO+'s gradient is ``2 (y* - y~)``.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from _doc_blocks import generated_by, page_parser, row, table, write_block
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from dispatch import main as train  # noqa: E402

PAGE = Path(__file__).resolve().parents[1] / "docs" / "measurements" / "training.md"
RATES = (0.01, 0.02, 0.03, 0.05, 0.1)


def main(argv: list[str] | None = None) -> None:
    parser = page_parser(__doc__, PAGE)
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0 .. seeds-1 (default 5)")
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args(argv)
    seeds, epochs = (range(2), 2) if args.quick else (range(args.seeds), args.epochs)
    started = time.perf_counter()
    rows = []
    for lr in tqdm(RATES, desc="learning rates"):
        runs = [train(epochs, seed, lr=lr) for seed in seeds]
        mean = {name: statistics.mean(run[name] for run in runs) for name in runs[0]}
        rows.append(row([f"{lr:g}", f"{mean['before']:.4f}", f"{mean['identity']:.4f}",
                         f"{mean['spo+']:.4f}", f"{mean['identity'] - mean['spo+']:+.4f}"]))
    body = [generated_by("benchmarks/dispatch_lr.py", time.perf_counter() - started), "",
            f"{len(seeds)} seeds, {epochs} epochs, batch 20, Adam; mean normalized test "
            "regret.", "",
            *table(["learning rate", "untrained", "default layer (Identity, \"auto\")", "SPO+",
                    "default - SPO+"], rows)]
    print("\n".join(body))
    write_block(Path(args.out), "dispatch-lr", "benchmarks/dispatch_lr.py", body,
                "## The default layer on the dispatch model")


if __name__ == "__main__":
    main()
