"""Gradient estimators: how a layer's backward pass treats the solver.

One file per estimator. Each defines a subclass of
`Estimator` with a ``name``, which
registers it for ``method="name"``; importing this package imports every
module in it (`combolayer.discovery`), so a new file is found without an
import line here.
"""

from ..discovery import export_all, import_submodules
from .aimle import AIMLE as AIMLE
from .base import METHODS, Estimator, differentiable, resolve_method
from .blackbox import Blackbox as Blackbox
from .comboptnet import CombOptNet as CombOptNet
from .frank_wolfe import RegularizedFrankWolfe as RegularizedFrankWolfe
from .identity import Identity as Identity
from .imle import IMLE as IMLE
from .margin import Margin as Margin
from .perturbed import Perturbed as Perturbed
from .score_function import ScoreFunction as ScoreFunction

__all__ = [
    "METHODS",
    "Estimator",
    "differentiable",
    "resolve_method",
    *export_all(globals(), import_submodules(__name__, __path__)),
]
