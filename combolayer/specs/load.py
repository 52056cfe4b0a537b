"""Reading specs from YAML, JSON and dicts: the only (de)serialisation entry point.

Loading never evaluates code: YAML goes through ``yaml.safe_load``'s loader (with
YAML 1.2's numbers and booleans, `read_yaml`) and the result through one pydantic
``TypeAdapter`` over the discriminated union of every spec kind registered in
`combolayer.specs.base.SPEC_KINDS` (built again when a kind joins).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Hashable
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Union

import yaml
from pydantic import Discriminator, TypeAdapter, ValidationError

from .. import problems  # noqa: F401  (the named problems join SPEC_KINDS when imported)
from ..errors import SpecError
from .base import (
    ILP,
    MAX_ENTRIES,
    MAX_VARIABLES,
    SPEC_KINDS,
    Spec,
    _as_spec_error,
    bounded,
    refuse_oversized,
)
from .files import is_model_file


def spec_adapter() -> TypeAdapter[Spec]:
    """The ``TypeAdapter`` over the discriminated union of every registered spec kind."""
    return _adapter(tuple(SPEC_KINDS.values()))


@lru_cache(maxsize=8)
def _adapter(classes: tuple[type[Spec], ...]) -> TypeAdapter[Spec]:
    any_spec = Annotated[Union[classes], Discriminator("kind")]  # noqa: UP007
    return TypeAdapter(any_spec)


def read_mapping(source: str | os.PathLike | dict, what: str = "spec") -> dict:
    """A dict from a YAML/JSON file path, a YAML/JSON string, or a dict."""
    if isinstance(source, dict):
        return source
    text, origin = _read_text(source, what)
    try:
        data = (json.loads(text, object_pairs_hook=_unique_pairs) if origin.endswith(".json")
                else read_yaml(text, what, origin))
    except (json.JSONDecodeError, _DuplicateKey) as error:
        raise SpecError(f"could not parse {what} from {origin}: {error}") from None
    except RecursionError:
        raise SpecError(f"could not parse {what} from {origin}: it is nested deeper than "
                        "Python's recursion limit; expected a spec a few levels deep") from None
    if not isinstance(data, dict):
        hint = ""
        if isinstance(source, str) and "\n" not in source and not Path(source).exists():
            hint = f" (there is no file named {source!r} either)"
        raise SpecError(f"{what} from {origin} must be a mapping, got {type(data).__name__}{hint}")
    return data


class _DuplicateKey(ValueError):
    """A mapping that names one key twice (YAML and JSON readers keep the last silently)."""


def _unique_pairs(pairs: list[tuple[Any, Any]]) -> dict:
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(f"the key {key!r} appears twice in one mapping; expected "
                                "each key once")
        seen[key] = value
    return seen


def read_yaml(text: str, what: str = "YAML", origin: str = "text") -> Any:
    """The value YAML ``text`` holds, read as `read_mapping` reads it: safely (no
    code), numbers and booleans as YAML 1.2 writes them, no key twice in a mapping;
    `SpecError` naming ``what`` and ``origin`` where it cannot be read."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except (yaml.YAMLError, _DuplicateKey) as error:
        raise SpecError(f"could not parse {what} from {origin}: {error}") from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load``'s loader, refusing a mapping that names a key twice, with YAML
    1.2's numbers and booleans (`_CORE_SCALARS`)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # a merge (<<) may be overridden by a key of this mapping
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # SafeLoader's own error names it
            if key in seen:
                raise _DuplicateKey(f"the key {key!r} appears twice in one mapping "
                                    f"({node.start_mark.name}, line {node.start_mark.line + 1})"
                                    "; expected each key once")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


#: YAML 1.2's core schema for numbers and booleans, in place of YAML 1.1's, which
#: ``yaml.safe_load`` follows: there ``010`` is octal 8, ``1:30`` is 90 (base 60),
#: ``1e5`` a string and ``no`` a boolean; here numbers are read as written, and
#: ``yes``/``no``/``on``/``off`` are strings. As ``(tag, pattern, first characters)``.
_CORE_SCALARS = (
    ("tag:yaml.org,2002:bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
    ("tag:yaml.org,2002:int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", "-+0123456789"),
    ("tag:yaml.org,2002:float", r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                                r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)", "-+0123456789."),
)
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers
            if tag not in {core for core, _, _ in _CORE_SCALARS}]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
for _tag, _pattern, _first in _CORE_SCALARS:
    _UniqueKeyLoader.add_implicit_resolver(_tag, re.compile(f"^(?:{_pattern})$"), list(_first))


def _core_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    """An integer as YAML 1.2 writes it: decimal (leading zeros too), ``0o`` or ``0x``."""
    text = loader.construct_scalar(node)
    base = {"0o": 8, "0x": 16}.get(text[:2], 10)
    return int(text[2:] if base != 10 else text, base)


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _core_int)


def _read_text(source: str | os.PathLike, what: str) -> tuple[str, str]:
    if isinstance(source, os.PathLike):
        path = Path(source)
        if not path.is_file():
            raise SpecError(f"{what}: no file named {str(path)!r}")
        return _text_of(path), str(path)
    if not isinstance(source, str):
        raise SpecError(f"{what}: expected a path, a YAML/JSON string or a dict, got "
                        f"{type(source).__name__}")
    if not source.strip():
        raise SpecError(f"{what}: got an empty string; expected a path, a YAML/JSON string "
                        "or a dict")
    looks_like_path = (
        "\n" not in source and len(source) < 4096 and not source.lstrip().startswith("{")
    )
    if looks_like_path and Path(source).is_dir():
        raise SpecError(f"{what}: {source!r} is a directory; expected a YAML/JSON file")
    if looks_like_path and Path(source).is_file():
        return _text_of(Path(source)), source
    return source, "a string"


def _text_of(path: Path) -> str:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        raise SpecError(f"{str(path)!r} is not a text file (UTF-8): expected a YAML or JSON "
                        "spec") from None


#: The size limits of a spec that is read (`combolayer.specs.base.MAX_VARIABLES` and
#: `MAX_ENTRIES`, checked by every spec kind from its fields under `bounded`), by the
#: names of combolayer 0.1: ``{kind: ranking, n: 200000}`` has 200,000 outputs but 4e10
#: variables. Pass ``max_variables=None`` to [`load_spec`][combolayer.load_spec] for
#: trusted input.
MAX_TEXT_VARIABLES = MAX_VARIABLES
MAX_TEXT_NONZEROS = MAX_ENTRIES


def load_spec(source: Spec | str | os.PathLike | dict, *,
              max_variables: int | None = MAX_TEXT_VARIABLES) -> Spec:
    """Read a spec from a YAML/JSON file path, a YAML/JSON string, a dict, or an MPS/LP
    file path.

    ``spec.model_dump_json()`` round-trips through it. Loading never evaluates
    code (``yaml.safe_load``, no pickle). A path ending in ``.mps``/``.lp`` (or
    ``.mps.gz``/``.lp.gz``) is read by
    [`combolayer.ILP.from_file`][combolayer.ILP.from_file], every column an output, as
    ``combolayer train`` and the other commands read one; so every reader of specs
    (``ComboLayer``, ``ComboLayer.from_config``, ``make_solver``, ``analyze``) takes one.

    Args:
        source: a spec (returned as is: built in Python, it is trusted), a path, a
            YAML/JSON string, or a dict with a ``kind`` tag (``"ilp"``,
            ``"shortest_path"``, ``"tsp"``, ...).
        max_variables: for a YAML/JSON path, a string or a dict, the most variables its
            model may have (default `MAX_TEXT_VARIABLES`; its matrix entries are held to
            `MAX_TEXT_NONZEROS`), checked from the fields before anything is built;
            ``None`` lifts both limits for trusted input. An MPS/LP file is read whole
            by HiGHS first, and not held to them.

    Returns:
        The spec: an [`ILP`][combolayer.ILP] or a problem from
        [`combolayer.problems`][combolayer.problems].

    Raises:
        SpecError: malformed text, a missing file, an unknown kind, an invalid
            field or an unknown key (the message names it and suggests the
            closest key), or a model above the size limits.

    Examples:
        >>> import combolayer as cl
        >>> cl.load_spec("{kind: topk, n: 5, k: 2}").label
        'TopK(n=5, k=2)'
    """
    if isinstance(source, Spec):
        return source
    one_line = isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source)
    if one_line and is_model_file(str(source).strip()):
        return ILP.from_file(str(source).strip())
    return spec_from_text(read_mapping(source), max_variables=max_variables)


def _validated(data: dict, max_variables: int | None) -> Spec:
    refuse_oversized(data, max_variables)
    try:
        with bounded(max_variables):
            return spec_adapter().validate_python(data)
    except ValidationError as error:
        raise _as_spec_error(error) from None


def spec_from_text(data: dict, *, max_variables: int | None = MAX_TEXT_VARIABLES) -> Spec:
    """The spec of a mapping that was read (a spec file or string, a dict, the ``problem``
    of a train or layer config, a run folder's spec.json), refused when its model would
    exceed ``max_variables`` variables or `MAX_TEXT_NONZEROS` matrix entries
    (`Spec.model_size`), before anything is built; ``None`` lifts the limits."""
    return _validated(data, max_variables)
