"""The ``combolayer`` command: demo, solve, analyze, train, bench, reproduce."""

from __future__ import annotations

import argparse
import functools
import importlib
import logging
import os
import sys
import warnings

from ..errors import ComboLayerError

#: Instances ``combolayer bench --race`` races the backends on, unless ``--rows`` says.
RACE_ROWS = 200

# Each subcommand lives next to the code it exercises: "module:function",
# called with the parsed arguments.
COMMANDS = {
    "demo": ("combolayer.cli.demo:main", "train on built-in shortest-path data (the main job)"),
    "solve": ("combolayer.cli.commands:solve", "solve a spec for costs from a file"),
    "analyze": ("combolayer.cli.commands:analyze", "print a spec's invariances"),
    "train": ("combolayer.training.loop:train",
              "train a model through a layer from a YAML/JSON config"),
    "bench": ("combolayer.cli.bench:main", "measure layer overhead against the raw solver"),
    "reproduce": ("combolayer.cli.commands:reproduce", "run a paper experiment (--list)"),
}


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one line on stderr (exit code 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (``--epochs``, ``--batch``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="combolayer", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log the backend chosen and solver times to stderr (DEBUG)")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help=COMMANDS["demo"][1])
    demo.add_argument("--epochs", type=positive_int, default=20)
    demo.add_argument("--out", default="runs/demo", help="folder for the plot (regret.png)")
    demo.add_argument("--seed", type=int, default=135)
    solve = sub.add_parser(
        "solve", help=COMMANDS["solve"][1],
        description="Solve SPEC for each instance. Prints JSON {solution, objective} to "
                    "stdout (pipe it to jq); everything else goes to stderr.")
    solve.add_argument("spec", help=SPEC_HELP)
    solve.add_argument("--costs", help=".npy, .csv/.txt or .json array (default for an "
                                       "MPS/LP file: the file's objective)")
    solve.add_argument("--backend", default="auto")
    analyze = sub.add_parser("analyze", help=COMMANDS["analyze"][1])
    analyze.add_argument("spec", help=SPEC_HELP)
    analyze.add_argument("--exact", action="store_true",
                         help="the hull of the integer solutions (MIP solves), not the LP's")
    analyze.add_argument("--full", action="store_true",
                         help="list every equation and constraint (by default the first 20)")
    train = sub.add_parser(
        "train", help=COMMANDS["train"][1],
        description="Train a cost model through a ComboLayer on built-in PyEPO data or an "
                    ".npz file, writing history.csv, regret.png, model.pt, model.json, "
                    "spec.json and the resolved config.json to the run directory; "
                    "cl.training.load_run(DIR) reloads the model and its layer. Relative "
                    "paths in the config are read next to it.",
        epilog="Every config key, with a full example: docs/training.md in the source, "
               "the 'Training' page of the documentation site (make docs).")
    train.add_argument("config", help="a YAML/JSON file (see docs/training.md)")
    train.add_argument("--out", help="run directory (overrides the config's 'out'; relative "
                                     "to the current directory)")
    bench = sub.add_parser("bench", help=COMMANDS["bench"][1])
    bench.add_argument("--batch", type=positive_int, default=256)
    bench.add_argument("--race", metavar="SPEC",
                       help="show backend='race''s race for SPEC (a YAML/JSON spec file or "
                            "string) on --rows random costs uniform in [0, 1): each "
                            "candidate's timed solves, mean ms per solve and verdict")
    bench.add_argument("--rows", type=positive_int,
                       help=f"instances to race on for --race (default {RACE_ROWS})")
    bench.add_argument("--check", action="store_true",
                       help="run the training-overhead ratios (under a minute) and exit 1 when "
                            "one exceeds 1.5x its committed baseline "
                            "(docs/measurements/overhead.md)")
    add_reproduce_arguments(sub.add_parser(
        "reproduce", help=COMMANDS["reproduce"][1], description=reproduce_description(),
        formatter_class=argparse.RawDescriptionHelpFormatter))
    return parser


def reproduce_description() -> str:
    from ..experiments import describe, experiments

    names = "\n".join(f"  {name:<16} {describe(module)}"
                       for name, module in experiments().items())
    return ("Run a paper experiment at CPU scale and write DIR/results.json, details.json "
            f"and curves.png.\n\nexperiments:\n{names}")


def add_reproduce_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment", nargs="?", help="an experiment name (see --list)")
    parser.add_argument("--list", action="store_true", help="name every experiment")
    parser.add_argument("--quick", action="store_true",
                        help="the seconds-long smoke version of the same code path")
    parser.add_argument("--seeds", type=positive_int, help="number of seeds (0..N-1)")
    parser.add_argument("--scale", choices=["cpu", "paper"], default="cpu",
                        help="cpu: the CPU-scale analogue (default); paper: the paper's model "
                             "sizes, epochs and data sizes, for a machine with an accelerator "
                             "(with --quick: a toy slice of it)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None)
    parser.add_argument("--out", help="output folder (default runs/NAME)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field, e.g. --set epochs=5 (YAML value)")
    parser.add_argument("--report", action="store_true",
                        help="render docs/results.md from docs/results/*/results.json")


SPEC_HELP = "a YAML/JSON spec file or string, or an MPS/LP model file (.mps, .lp)"


def _read_model_files(args: argparse.Namespace) -> None:
    """A SPEC naming an MPS/LP file becomes the ILP HiGHS reads from it."""
    from ..specs.base import ILP
    from ..specs.files import is_model_file

    if isinstance(getattr(args, "spec", None), str) and is_model_file(args.spec):
        args.spec = ILP.from_file(args.spec)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logging.getLogger("combolayer").addHandler(handler)
        logging.getLogger("combolayer").setLevel(logging.DEBUG)
    target, _ = COMMANDS[args.command]
    module, function = target.split(":")
    shown, warnings.showwarning = warnings.showwarning, functools.partial(_warn, args.command)
    try:
        if args.command in ("solve", "analyze"):
            _read_model_files(args)
        return getattr(importlib.import_module(module), function)(args) or 0
    except BrokenPipeError:
        return _reader_left()
    except (ComboLayerError, ValueError, OSError) as error:
        return _refuse(args, error)
    except MemoryError:
        return _refuse(args, MemoryError("ran out of memory: the problem or the data is too "
                                         "large for this machine; try a smaller one"))
    except RecursionError:
        return _refuse(args, RecursionError("the input is nested too deeply to read"))
    except Exception as error:  # noqa: BLE001 -- the command line's edge: never a traceback
        logging.getLogger("combolayer").debug("unexpected error", exc_info=True)
        hint = "" if args.verbose else " (run with -v for the traceback)"
        return _refuse(args, error, hint)
    finally:
        warnings.showwarning = shown


def _reader_left() -> int:
    """``combolayer analyze ... | head``: the reader closed the pipe, so stop quietly, as
    Unix tools do (exit code 141, 128 + SIGPIPE). Standard output now goes nowhere, or
    the interpreter's final flush would raise the same error again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor behind sys.stdout (a test's capture)
        pass
    return 141


def _warn(command: str, message: Warning | str, category: type[Warning], *_: object,
          **__: object) -> None:
    """A warning as one line on stderr naming the command, as errors are (`_refuse`),
    below any progress bar rather than inside it (not Python's file, line and source)."""
    from tqdm import tqdm

    text = " ".join(str(message).split())
    tqdm.write(f"combolayer {command}: {category.__name__}: {text}", file=sys.stderr)


def _refuse(args: argparse.Namespace, error: BaseException, hint: str = "") -> int:
    """One line on stderr naming the command and the error, and exit code 2."""
    text = " ".join(str(error).split()) or "no message"  # one line
    print(f"combolayer {args.command}: {type(error).__name__}: {text}{hint}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
