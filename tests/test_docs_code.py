"""Every ```python block of README.md and of every docs/*.md page runs as written.

A page's blocks run in order in one namespace, in a temporary working directory, so a
later block may use what an earlier one defined. Around them:

- a ```yaml or ```json block whose first line is a comment naming a file
  (``# depot.yaml: ...``) is that file: it is written into the directory first;
- a ```python block whose first line names a file of the package
  (``# combolayer/backends/argmin.py``) is a new module: it is saved into a copy of
  the package, and the page's other blocks then run in a fresh interpreter that
  imports that copy (docs/architecture.md adds a problem, a backend, an estimator
  and an experiment this way, each one new file).

What cannot run here (a GPU, a cluster, a file the reader has) is written as
```bash or ```text, never as ```python; `test_every_block_names_its_language`
keeps a block from hiding by having none.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import combolayer

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(combolayer.__file__).resolve().parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The languages a block may have; only python runs.
LANGUAGES = {"python", "yaml", "json", "bash", "text", "toml"}
FENCE = re.compile(r"^```(\S*)\n(.*?)^```$", re.S | re.M)
DATA_FILE = re.compile(r"# ([\w.-]+\.(?:yaml|yml|json))\b")
MODULE_FILE = re.compile(r"# (combolayer/\S+\.py)\n")


def blocks(page: Path) -> list[tuple[str, str]]:
    """The page's fenced blocks in order, as (language, text)."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(page.read_text(encoding="utf-8"))]


def python_pages() -> list[Path]:
    return [page for page in PAGES if any(lang == "python" for lang, _ in blocks(page))]


def write_data_files(page: Path, folder: Path) -> None:
    for lang, text in blocks(page):
        if lang in {"yaml", "json"} and (name := DATA_FILE.match(text)):
            (folder / name.group(1)).write_text(text)


def run_with_new_modules(page: Path, folder: Path) -> None:
    """Save the page's module blocks into a copy of the package and run its other python
    blocks, in order, in a fresh interpreter that imports the copy."""
    shutil.copytree(PACKAGE, folder / "combolayer", ignore=shutil.ignore_patterns("__pycache__"))
    usage = []
    for lang, text in blocks(page):
        if lang != "python":
            continue
        if header := MODULE_FILE.match(text):
            target = folder / header.group(1)
            assert not target.exists(), f"{page.name}: {header.group(1)} is not a new file"
            target.write_text(text[header.end():])
        else:
            usage.append(text)
    script = "\n".join(["import combolayer",
                        f"assert combolayer.__file__.startswith({str(folder)!r})",
                        f"OUT = {str(folder / 'out')!r}", *usage])
    env = {**os.environ, "PYTHONPATH": str(folder)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300, cwd=folder, env=env)
    assert result.returncode == 0, f"{page.name}:\n{result.stderr[-3000:]}"


@pytest.mark.parametrize("page", python_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_pages_python_runs(page, tmp_path, monkeypatch):
    write_data_files(page, tmp_path)
    code = [text for lang, text in blocks(page) if lang == "python"]
    if any(MODULE_FILE.match(text) for text in code):
        run_with_new_modules(page, tmp_path)
    else:
        monkeypatch.chdir(tmp_path)
        namespace = {"__name__": "__docs__"}
        for number, text in enumerate(code):
            exec(compile(text, f"{page.name}, python block {number}", "exec"), namespace)
    # An experiment a page adds writes its results where the page says, with verdicts.
    for results in (tmp_path / "out").glob("results.json"):
        data = json.loads(results.read_text())
        assert data["quick"] is True and data["rows"] and data["claims"]
        assert {claim["verdict"] for claim in data["claims"]} <= {
            "agrees", "disagrees", "inconclusive", "invalid"}


def test_architecture_adds_each_extension_as_one_file_in_its_folder():
    page = ROOT / "docs" / "architecture.md"
    saved = [m.group(1) for lang, text in blocks(page)
             if lang == "python" and (m := MODULE_FILE.match(text))]
    assert saved == ["combolayer/problems/pick_one.py", "combolayer/backends/argmin.py",
                     "combolayer/backends/milp.py", "combolayer/estimators/scaled_identity.py",
                     "combolayer/experiments/toy_topk.py"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_names_its_language(page):
    found = [lang for lang, _ in blocks(page)]
    unknown = [lang or "(none)" for lang in found if lang not in LANGUAGES]
    assert not unknown, (f"{page.relative_to(ROOT)} has blocks in {unknown}, expected one of "
                         f"{sorted(LANGUAGES)}: code that cannot run here is bash or text")


def test_the_pages_are_found_and_hold_code():
    assert ROOT / "README.md" in PAGES and ROOT / "docs" / "core.md" in PAGES
    assert len(python_pages()) >= 8


def test_the_home_pages_quickstart_is_the_readmes_first_layer():
    def first_python(page: Path) -> str:
        return next(text for lang, text in blocks(page) if lang == "python")

    assert first_python(ROOT / "docs" / "index.md") == first_python(ROOT / "README.md"), (
        "docs/index.md's quickstart differs from README.md's 'A first layer': keep them equal")
