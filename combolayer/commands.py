"""Functions behind the ``combolayer`` subcommands (see :mod:`combolayer.cli`).

Each takes the parsed ``argparse`` namespace, prints for a person, and returns
an exit code (``None`` means 0).
"""

from __future__ import annotations

import argparse


def analyze(args: argparse.Namespace) -> int:
    """``combolayer analyze SPEC [--exact]``: the hull dimension, its equations,
    the fixed outputs and the projection ``"auto"`` will use."""
    from .analysis import analyze as analyze_spec
    from .analysis import describe
    from .io import load_spec

    spec = load_spec(args.spec)
    print(describe(spec, analyze_spec(spec, exact=args.exact)))
    return 0
