"""The docs and docstrings state the contract, not the history: no issue or stop
numbers and no investigation stories in docs/*.md or the package's code, module
docstrings of a screenful, and docs/projections.md's projection table naming exactly the
projections the code accepts."""

import ast
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
    root = Path(__file__).resolve().parents[1]
    named = {}
    for folder in ("combolayer", "benchmarks"):
        for path in sorted((root / folder).rglob("*.py")):
            for page in re.findall(r"\bdocs/[\w/]+\.md\b", path.read_text()):
                named.setdefault(page, str(path.relative_to(root)))
    missing = {page: where for page, where in named.items() if not (root / page).exists()}
    assert not missing, f"pages named in code but not in docs/: {missing}"
