"""The ``combolayer`` command line: `main` parses and dispatches to the
subcommands (`demo`, `commands`, `bench`; ``train`` is
`combolayer.training.loop`, ``reproduce`` runs `combolayer.experiments`),
and `perf` measures the ratios of docs/measurements/overhead.md."""

from .main import main

__all__ = ["main"]
