"""The one rule for relative paths in config files: read next to the file that names them.

``ComboLayer.from_config`` and ``combolayer train`` both follow it. A config given
as a dict or as a YAML/JSON string is named by no file, so its relative paths are
read from the current directory. A path that is missing is reported as resolved,
so the message shows where it was looked for.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import SpecError

#: Suffixes that make a config value a file path rather than an inline YAML/JSON text.
PATH_SUFFIXES = (".yaml", ".yml", ".json", ".mps", ".lp", ".mps.gz", ".lp.gz", ".npz")


def config_base(source: Any) -> Path | None:
    """The folder of the config file ``source``, or None when it is no file (a dict, a
    YAML/JSON string): relative paths are then read from the current directory."""
    if isinstance(source, os.PathLike):
        return Path(source).resolve().parent
    if isinstance(source, str) and "\n" not in source and not source.lstrip().startswith("{"):
        path = Path(source)
        if path.is_file():
            return path.resolve().parent
    return None


def is_path(value: Any) -> bool:
    """Whether a config value names a file (a path object, or a one-line string ending
    in a file suffix) rather than holding a spec inline."""
    if isinstance(value, os.PathLike):
        return True
    return (isinstance(value, str) and "\n" not in value
            and not value.lstrip().startswith("{")
            and value.strip().lower().endswith(PATH_SUFFIXES))


def resolve_path(value: Any, base: Path | None, key: str, origin: Any = None,
                 error: type[Exception] = SpecError, always: bool = False) -> Any:
    """``value`` as an absolute path string when it names a file (relative ones joined to
    ``base``, the naming file's folder, or the current directory), else unchanged.
    ``always`` reads every string as a path, whatever its suffix.

    Raises ``error`` when the file named is missing; the message gives the
    resolved path and, for a relative one, the file it was read next to.
    """
    if not (is_path(value) or (always and isinstance(value, str))):
        return value
    path = Path(os.path.expanduser(str(value).strip()))
    if not path.is_absolute():
        path = (base if base is not None else Path.cwd()) / path
    path = Path(os.path.normpath(path))
    if not path.is_file():
        typed = str(value)
        where = (f"the relative path {typed!r} is read next to {origin}" if
                 not Path(typed).is_absolute() and origin is not None else
                 f"the relative path {typed!r} is read from the current directory"
                 if not Path(typed).is_absolute() else f"as given: {typed!r}")
        raise error(f"{key}: no file named {str(path)!r} ({where})")
    return str(path)
