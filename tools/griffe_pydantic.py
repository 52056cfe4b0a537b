"""A griffe extension for the API reference: a pydantic model's signature is its fields.

The specs, the estimators and ``BackendConfig`` are pydantic models, whose
``__init__`` griffe reads as ``(*args, **data)``; the reference then shows no
arguments, and an ``Args:`` section naming the fields fails the strict build
("does not appear in the function signature"). As griffe does for dataclasses,
this gives each model without an ``__init__`` of its own one whose parameters are
its annotated fields (the base models' first), with their defaults. The ``kind``
tag of a spec is left out: it is fixed per class. mkdocs.yml loads it.
"""

from __future__ import annotations

from typing import Any

import griffe

MODEL_BASES = {"pydantic.BaseModel", "pydantic.main.BaseModel"}
#: The spec's discriminator: a constant per class, not an argument a user passes.
TAG = "kind"


def _is_model(cls: griffe.Class) -> bool:
    try:
        lineage = [cls, *cls.mro()]
    except ValueError:
        lineage = [cls]
    return any(str(getattr(base, "canonical_path", base)) in MODEL_BASES
               for parent in lineage for base in parent.bases)


def _default(value: Any) -> Any:
    """A field's default: ``Field(default=x, ...)``'s ``x``, else the value as written."""
    if isinstance(value, griffe.ExprCall) and str(value.function).split(".")[-1] == "Field":
        for argument in value.arguments:
            if isinstance(argument, griffe.ExprKeyword) and argument.name == "default":
                return argument.value
        return None
    return value


def _fields(cls: griffe.Class) -> list[griffe.Parameter]:
    """The class's own fields: annotated, public, not ClassVar, as parameters."""
    return [
        griffe.Parameter(member.name, annotation=member.annotation,
                         kind=griffe.ParameterKind.positional_or_keyword,
                         default=_default(member.value), docstring=member.docstring)
        for member in cls.members.values()
        if not member.is_alias and member.is_attribute and member.annotation is not None
        and not member.name.startswith("_") and member.name != TAG
        and "instance-attribute" in member.labels
    ]


def _set_init(cls: griffe.Class) -> None:
    try:
        lineage = [*reversed(cls.mro()), cls]
    except ValueError:
        lineage = [cls]
    fields: dict[str, griffe.Parameter] = {}
    for parent in lineage:
        fields.update({field.name: field for field in _fields(parent)})
    self = griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword)
    cls.set_member("__init__", griffe.Function(
        "__init__", lineno=0, endlineno=0, parent=cls,
        parameters=griffe.Parameters(self, *fields.values()), returns="None"))


def _walk(obj: griffe.Module | griffe.Class, seen: set[str]) -> None:
    if obj.canonical_path in seen:
        return
    seen.add(obj.canonical_path)
    if isinstance(obj, griffe.Class) and "__init__" not in obj.members and _is_model(obj):
        _set_init(obj)
    for member in obj.members.values():
        if not member.is_alias and (member.is_module or member.is_class):
            _walk(member, seen)


class PydanticSignatures(griffe.Extension):
    """Gives every pydantic model in the package an ``__init__`` made of its fields."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        _walk(pkg, set())
