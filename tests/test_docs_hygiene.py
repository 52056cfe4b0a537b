"""The docs and docstrings state the contract, not the history: no issue or stop
numbers and no investigation stories in docs/*.md or the package's code, module
docstrings of a screenful, docs/projections.md's projection table naming exactly the
projections the code accepts, and every public function and class documenting its
arguments in a Google-style ``Args:`` section, as the API reference renders them."""

import ast
import inspect
import re
from pathlib import Path

import pytest

from combolayer.layer import projection

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "combolayer"
DOC_PAGES = sorted([
    *(ROOT / "docs").glob("*.md"),
    *(ROOT / "docs" / "measurements").glob("*.md"),
])
MODULES = sorted(PACKAGE.rglob("*.py"))

#: Words that point at where a sentence came from (a tracker item, a work session, a
#: review) instead of what it says: that belongs in git and CHANGELOG.md.
HISTORY = re.compile(r"\bissues? #?\d+|\bstops? #?\d+|found in this stop|review (round|mend)",
                     re.IGNORECASE)
#: The most lines a module docstring may have: what the module is for and why.
MAX_MODULE_DOCSTRING_LINES = 40


def history_mentions(text: str) -> list[str]:
    """Each line of ``text`` that points at history, as ``"LINE: text"``."""
    return [f"{number}: {line.strip()}" for number, line in enumerate(text.splitlines(), 1)
            if HISTORY.search(line)]


@pytest.mark.parametrize("text, found", [
    ("the ratios (issue 15)", True), ("Issue #3 of torch-imle", True),
    ("a run borrowed in stop 45", True), ("The cause, found in this stop: a row", True),
    ("as the last review round asked", True), ("review mend: one rule", True),
    ("the solver stopped 3 rows", False), ("issues/3 on GitHub", False),
    ("an issue with 2 rows", False), ("nonstop 4", False),
])
def test_history_pattern(text, found):
    assert bool(history_mentions(text)) is found


@pytest.mark.parametrize("path", DOC_PAGES + MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_history_in_docs_or_code(path):
    mentions = history_mentions(path.read_text(encoding="utf-8"))
    assert not mentions, (f"{path.relative_to(ROOT)} points at history (issue/stop numbers, "
                          f"review rounds); say what holds and leave the story to git: "
                          f"{mentions}")


def test_the_scan_sees_the_package_and_the_docs():
    assert len(MODULES) > 50 and PACKAGE / "backends" / "race.py" in MODULES
    assert ROOT / "docs" / "core.md" in DOC_PAGES and len(DOC_PAGES) > 5


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_module_docstring_fits_a_screen(path):
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    lines = len(docstring.splitlines())
    assert lines <= MAX_MODULE_DOCSTRING_LINES, (
        f"{path.relative_to(ROOT)}'s module docstring has {lines} lines, expected at most "
        f"{MAX_MODULE_DOCSTRING_LINES}: say what the module is for and why; results "
        "belong in generated pages, history in git")


def core_projection_names() -> list[str]:
    """The names in the first column of docs/projections.md's table under "## Which
    projection"."""
    text = (ROOT / "docs" / "projections.md").read_text(encoding="utf-8")
    section = text.split("\n## Which projection\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert rows, "docs/projections.md's 'Which projection' section has no table"
    return [match.group(1) for line in rows[2:]
            if (match := re.match(r'\|\s*`"([^"`]+)"`', line))]


def test_core_projection_table_names_every_projection():
    documented = core_projection_names()
    accepted = [*projection.PROJECTIONS, *projection.HULL_PROJECTIONS]
    assert len(documented) == len(set(documented)), f"a projection listed twice: {documented}"
    assert sorted(documented) == sorted(accepted), (
        f"docs/projections.md's projection table lists {sorted(documented)}, expected the "
        f"projections combolayer.layer.projection accepts: {sorted(accepted)}")


def test_every_docs_page_the_code_names_exists():
    """A docstring or comment that sends the reader to docs/PAGE.md names a page that
    is there (pages move; the reference must move with them)."""
    named = {}
    for folder in ("combolayer", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for page in re.findall(r"\bdocs/[\w/]+\.md\b", path.read_text()):
                named.setdefault(page, str(path.relative_to(ROOT)))
    missing = {page: where for page, where in named.items() if not (ROOT / page).exists()}
    assert not missing, f"pages named in code but not in docs/: {missing}"


#: A Google-style section item: ``name: text``, ``*args: text`` or ``name (type): text``.
SECTION_ITEM = re.compile(r"(\**\w+)(?: \([^)]*\))?:(?:\s|$)")


def section_names(docstring: str, header: str = "Args:") -> list[str] | None:
    """The names the ``header`` section of a Google-style docstring documents (stars
    dropped), or None when it has no such section."""
    lines = docstring.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == header]
    if not starts:
        return None
    names = []
    for start in starts:
        indent = len(lines[start]) - len(lines[start].lstrip())
        item_indent = None
        for line in lines[start + 1:]:
            if not line.strip():
                continue
            depth = len(line) - len(line.lstrip())
            if depth <= indent:
                break
            item_indent = item_indent or depth
            if depth == item_indent and (match := SECTION_ITEM.match(line.strip())):
                names.append(match.group(1).lstrip("*"))
    return names


@pytest.mark.parametrize("docstring, names", [
    ("Sum.\n\nArgs:\n    x: a tensor.\n    y (int): more,\n        continued: not a name.\n"
     "    *args: extra.\n\nReturns:\n    z: not an argument.", ["x", "y", "args"]),
    ("Sum.\n\nArgs:\n    x: a tensor.\nExamples:\n    y: no.", ["x"]),
    ("Sum of x and y: no section.", None),
    ("Sum.\n\n    Args:\n        x: one.\n\n        **kwargs: the rest.", ["x", "kwargs"]),
])
def test_section_names(docstring, names):
    assert section_names(docstring) == names


def parameters(obj) -> list[str]:
    """What a user passes to ``obj``: a function's parameters, a class's ``__init__``'s
    (a pydantic model's fields, a spec's ``kind`` tag left out), without self/cls."""
    import pydantic

    if inspect.isclass(obj) and issubclass(obj, pydantic.BaseModel):
        return [name for name in obj.model_fields if name != "kind"]
    if inspect.isclass(obj):
        init = obj.__init__
        if not getattr(init, "__module__", "").startswith("combolayer"):
            return []  # an exception's or a plain object's own constructor
        obj = init
    return [name for name in inspect.signature(obj).parameters if name not in ("self", "cls")]


def public_callables() -> dict[str, object]:
    """Every public function and class of the API contract: the ``__all__`` of
    ``combolayer``, ``cl.problems``, ``cl.losses`` and ``cl.training``, the functions
    and classes of ``cl.metrics`` and ``cl.data``, and the methods the contract names."""
    import combolayer as cl
    from combolayer import training

    found = {}
    for module in (cl, cl.problems, cl.losses, training):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                found[f"{module.__name__}.{name}"] = obj
    for module in (cl.metrics, cl.data):
        for name, obj in vars(module).items():
            if (not name.startswith("_") and (inspect.isclass(obj) or inspect.isfunction(obj))
                    and obj.__module__ == module.__name__):
                found[f"{module.__name__}.{name}"] = obj
    methods = [cl.ILP.from_matrices, cl.ILP.from_cvxpy, cl.ILP.from_file, cl.ILP.split,
               cl.problems.ShortestPath.grid, cl.backends.Solver.solve,
               cl.ComboLayer.from_config, cl.ComboLayer.forward, cl.AffineHull.project,
               cl.backends.from_pyepo]
    found.update({f"{obj.__module__}.{obj.__qualname__}": obj for obj in methods})
    return found


def test_the_public_walk_sees_the_contract():
    names = public_callables()
    for name in ("combolayer.ComboLayer", "combolayer.problems.TSP", "combolayer.metrics.regret",
                 "combolayer.losses.SPOPlusLoss", "combolayer.data.shortest_path",
                 "combolayer.training.load_run", "combolayer.specs.base.ILP.from_matrices"):
        assert name in names, name
    assert parameters(names["combolayer.problems.TopK"]) == ["n", "k", "sense"]
    assert parameters(names["combolayer.SpecError"]) == []


def test_every_public_callable_documents_its_arguments():
    """Each public function and class with parameters has an ``Args:`` section (a
    class's in its docstring, which the reference merges with ``__init__``) naming
    every parameter, and no parameter it does not have."""
    problems = []
    for name, obj in public_callables().items():
        expected = parameters(obj)
        if not expected:
            continue
        docstring = inspect.getdoc(obj) or ""
        documented = section_names(docstring)
        if documented is None:
            problems.append(f"{name}: no Args: section (expected {expected})")
            continue
        missing = [p for p in expected if p not in documented]
        unknown = [d for d in documented if d not in expected]
        if missing or unknown:
            problems.append(f"{name}: Args: lacks {missing}" + (f", names unknown {unknown}"
                                                               if unknown else ""))
    assert not problems, ("public callables whose docstring does not document every "
                          "argument in Args: (name: one line; types are in the "
                          "signature):\n" + "\n".join(problems))
