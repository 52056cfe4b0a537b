"""The differentiable layer: the stages composed.

- `combo_layer`: ``ComboLayer``, spec -> projection -> noise -> estimator -> solver;
- `projection`: the projection chosen by name for a problem (``"auto"``
  reads the affine hull from `combolayer.analysis`);
- [`schedules`][combolayer.layer.schedules]: noise levels as a function of the epoch.
"""

from .combo_layer import ComboLayer

__all__ = ["ComboLayer"]
