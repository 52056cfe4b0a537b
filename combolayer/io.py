"""Reading specs from YAML, JSON and dicts: the only (de)serialisation entry point.

Loading never evaluates code: YAML goes through ``yaml.safe_load`` and the
result through one pydantic ``TypeAdapter`` over the discriminated union of
every spec kind.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Union

import yaml
from pydantic import Discriminator, TypeAdapter, ValidationError

from .errors import SpecError
from .problems import TSP, GridShortestPath, Knapsack, Matching, Ranking, ShortestPath, TopK
from .specs import ILP, Spec, _as_spec_error

AnySpec = Annotated[
    Union[ILP, ShortestPath, GridShortestPath, TSP, Matching, Knapsack, TopK, Ranking],  # noqa: UP007
    Discriminator("kind"),
]
SPEC_ADAPTER: TypeAdapter[Spec] = TypeAdapter(AnySpec)


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

    ``spec.model_dump_json()`` round-trips through it. Loading never evaluates
    code (``yaml.safe_load``, no pickle). MPS/LP files go through
    :meth:`combolayer.ILP.from_file` instead.

    Args:
        source: a spec (returned as is), a path, a YAML/JSON string, or a dict
            with a ``kind`` tag (``"ilp"``, ``"shortest_path"``, ``"tsp"``, ...).

    Returns:
        The spec: an :class:`~combolayer.ILP` or a problem from
        :mod:`combolayer.problems`.

    Raises:
        SpecError: malformed text, a missing file, an unknown kind or an invalid
            field (the message names it).

    Examples:
        >>> import combolayer as cl
        >>> cl.load_spec("{kind: topk, n: 5, k: 2}").label
        'TopK(n=5, k=2)'
    """
    if isinstance(source, Spec):
        return source
    data = read_mapping(source)
    try:
        return SPEC_ADAPTER.validate_python(data)
    except ValidationError as error:
        raise _as_spec_error(error) from None
