"""Training through a layer: ``combolayer train``'s loop (`loop`), in-batch
retrieval ([`retrieval`][combolayer.retrieval], public as ``cl.retrieval``) and gradient-noise
measurements ([`gradients`][combolayer.gradients], public as ``cl.gradients``).

The losses, metrics and datasets a training loop uses are the public
``cl.losses``, ``cl.metrics`` and ``cl.data`` modules at the package's top level.
"""

from .loop import load_run

__all__ = ["load_run"]
