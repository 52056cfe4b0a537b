"""The ``combolayer`` command line: :mod:`.main` parses and dispatches to the
subcommands (:mod:`.demo`, :mod:`.commands`, :mod:`.bench`; ``train`` is
:mod:`combolayer.training.loop`, ``reproduce`` runs :mod:`combolayer.experiments`),
and :mod:`.perf` measures the ratios of docs/performance.md."""

from .main import main

__all__ = ["main"]
