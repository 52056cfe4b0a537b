"""Layer forward + Identity backward time over the raw kept-model HiGHS solve time.

Run: python benchmarks/layer_overhead.py [--batch 256]
"""

import argparse

from combolayer.cli.bench import run

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    run(batch=args.batch, repeats=args.repeats)
