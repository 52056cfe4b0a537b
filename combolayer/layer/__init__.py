"""The differentiable layer: the stages composed.

- :mod:`.combo_layer`: ``ComboLayer``, spec -> projection -> noise -> estimator -> solver;
- :mod:`.projection`: the projection chosen by name for a problem (``"auto"``
  reads the affine hull from :mod:`combolayer.analysis`);
- :mod:`.schedules`: noise levels as a function of the epoch.
"""

from .combo_layer import ComboLayer

__all__ = ["ComboLayer"]
