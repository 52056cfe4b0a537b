"""Invariance analysis: the affine hull of a problem's solutions.

:mod:`.hull` computes it (``analyze``, ``AffineHull``); :mod:`.text` renders it
for ``combolayer analyze`` and the demo.
"""

from .hull import AffineHull, analyze

__all__ = ["AffineHull", "analyze"]
