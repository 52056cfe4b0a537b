"""Invariance analysis: the affine hull of a problem's solutions.

`hull` computes it (``analyze``, ``AffineHull``); `text` renders it
for ``combolayer analyze`` and the demo.
"""

from .hull import AffineHull, analyze

__all__ = ["AffineHull", "analyze"]
