"""The ``combolayer`` command: demo, solve, analyze, train, bench, reproduce."""

from __future__ import annotations

import argparse
import importlib
import sys

from .errors import ComboLayerError

# Each subcommand lives next to the code it exercises: "module:function",
# called with the parsed arguments.
COMMANDS = {
    "demo": ("combolayer.demo:main", "train on built-in shortest-path data (the main job)"),
    "solve": ("combolayer.commands:solve", "solve a spec for costs from a file"),
    "analyze": ("combolayer.commands:analyze", "print a spec's invariances"),
    "train": ("combolayer.training:train", "train from a YAML/JSON config"),
    "bench": ("combolayer.bench:main", "measure layer overhead against the raw solver"),
    "reproduce": ("combolayer.commands:reproduce", "re-run an experiment from the docs"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="combolayer", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help=COMMANDS["demo"][1])
    demo.add_argument("--epochs", type=int, default=20)
    demo.add_argument("--out", default="runs/demo", help="folder for the plot and table")
    demo.add_argument("--seed", type=int, default=135)
    solve = sub.add_parser("solve", help=COMMANDS["solve"][1])
    solve.add_argument("spec")
    solve.add_argument("--costs", required=True, help=".npy, .csv/.txt or .json array")
    solve.add_argument("--backend", default="auto")
    analyze = sub.add_parser("analyze", help=COMMANDS["analyze"][1])
    analyze.add_argument("spec")
    analyze.add_argument("--exact", action="store_true")
    train = sub.add_parser("train", help=COMMANDS["train"][1])
    train.add_argument("config")
    bench = sub.add_parser("bench", help=COMMANDS["bench"][1])
    bench.add_argument("--batch", type=int, default=256)
    reproduce = sub.add_parser("reproduce", help=COMMANDS["reproduce"][1])
    reproduce.add_argument("experiment")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    target, _ = COMMANDS[args.command]
    module, function = target.split(":")
    try:
        return getattr(importlib.import_module(module), function)(args) or 0
    except (ComboLayerError, ValueError, OSError) as error:
        print(f"combolayer {args.command}: {type(error).__name__}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
