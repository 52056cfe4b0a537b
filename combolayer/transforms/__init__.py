"""Cost transforms: projections and noise, small pure pieces the layer composes.

- `projection`: ``project_mean``, ``normalize``, ``project_std``,
  ``project_plane``, composed with ``chain`` (public as ``cl.transforms``);
- [`noise`][combolayer.transforms.noise]: the noise distributions (``SignNoise``, ``GaussianNoise``,
  ``GumbelNoise``, ``SumOfGamma``), any object with ``sample(shape, generator=None)``.

Choosing a projection by name for a problem is `combolayer.layer.projection`.
"""

from .noise import GaussianNoise, GumbelNoise, SignNoise, SumOfGamma
from .projection import (
    DENSE_PROJECTOR_MAX,
    NORM_EPS,
    Transform,
    chain,
    identity,
    normalize,
    normalized,
    on_cost_shape,
    project_mean,
    project_plane,
    project_std,
)

__all__ = [
    "DENSE_PROJECTOR_MAX",
    "NORM_EPS",
    "GaussianNoise",
    "GumbelNoise",
    "SignNoise",
    "SumOfGamma",
    "Transform",
    "chain",
    "identity",
    "normalize",
    "normalized",
    "on_cost_shape",
    "project_mean",
    "project_plane",
    "project_std",
]
