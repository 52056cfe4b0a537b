"""Declaring problems: the spec models and their canonical matrix form.

- `base`: ``Spec``, ``ILP``, ``Constraint`` and ``register_spec`` (the
  registry every named problem joins);
- `canonical`: the matrices every backend and the analysis read;
- `load`: ``load_spec`` from YAML/JSON text, files and dicts;
- [`files`][combolayer.specs.files]: MPS/LP files (``ILP.from_file``);
- `cvxpy_frontend`: cvxpy problems (``ILP.from_cvxpy``).
"""

from .base import ILP, Constraint, Spec, register_spec
from .canonical import CanonicalForm, canonical_form
from .load import load_spec

__all__ = [
    "ILP",
    "CanonicalForm",
    "Constraint",
    "Spec",
    "canonical_form",
    "load_spec",
    "register_spec",
]
