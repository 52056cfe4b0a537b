"""Reading specs from YAML, JSON and dicts: the only (de)serialisation entry point.

Loading never evaluates code: YAML goes through ``yaml.safe_load`` and the
result through one pydantic ``TypeAdapter`` over the discriminated union of
every spec kind registered in :data:`combolayer.specs.SPEC_KINDS` (built
again when a kind joins).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Union

import yaml
from pydantic import Discriminator, TypeAdapter, ValidationError

from . import problems  # noqa: F401  (the named problems join SPEC_KINDS when imported)
from .errors import SpecError
from .specs import SPEC_KINDS, Spec, _as_spec_error


def spec_adapter() -> TypeAdapter[Spec]:
    """The ``TypeAdapter`` over the discriminated union of every registered spec kind."""
    return _adapter(tuple(SPEC_KINDS.values()))


@lru_cache(maxsize=8)
def _adapter(classes: tuple[type[Spec], ...]) -> TypeAdapter[Spec]:
    any_spec = Annotated[Union[classes], Discriminator("kind")]  # noqa: UP007
    return TypeAdapter(any_spec)


def __getattr__(name: str) -> Any:
    # SPEC_ADAPTER, the name of combolayer 0.1, follows the registry.
    if name == "SPEC_ADAPTER":
        return spec_adapter()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def read_mapping(source: str | os.PathLike | dict, what: str = "spec") -> dict:
    """A dict from a YAML/JSON file path, a YAML/JSON string, or a dict."""
    if isinstance(source, dict):
        return source
    text, origin = _read_text(source)
    try:
        data = json.loads(text) if origin.endswith(".json") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise SpecError(f"could not parse {what} from {origin}: {error}") from None
    if not isinstance(data, dict):
        hint = ""
        if isinstance(source, str) and "\n" not in source and not Path(source).exists():
            hint = f" (there is no file named {source!r} either)"
        raise SpecError(f"{what} from {origin} must be a mapping, got {type(data).__name__}{hint}")
    return data


def _read_text(source: str | os.PathLike) -> tuple[str, str]:
    if isinstance(source, os.PathLike):
        path = Path(source)
        if not path.is_file():
            raise SpecError(f"no file named {str(path)!r}")
        return path.read_text(), str(path)
    if not isinstance(source, str):
        raise SpecError(
            f"expected a path, a YAML/JSON string or a dict, got {type(source).__name__}"
        )
    looks_like_path = (
        "\n" not in source and len(source) < 4096 and not source.lstrip().startswith("{")
    )
    if looks_like_path and Path(source).is_file():
        return Path(source).read_text(), source
    return source, "a string"


def load_spec(source: Spec | str | os.PathLike | dict) -> Spec:
    """Read a spec from a YAML/JSON file path, a YAML/JSON string or a dict.

    ``spec.model_dump_json()`` round-trips through it. Raises
    :class:`~combolayer.SpecError` on malformed text, unknown kinds or invalid fields.
    """
    if isinstance(source, Spec):
        return source
    data = read_mapping(source)
    try:
        return spec_adapter().validate_python(data)
    except ValidationError as error:
        raise _as_spec_error(error) from None
