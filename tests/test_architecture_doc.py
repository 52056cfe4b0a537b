"""docs/architecture.md's worked examples run as written: a problem, a backend, an
estimator and an experiment, each added as one new file in its folder."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import combolayer

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
PACKAGE = Path(combolayer.__file__).resolve().parent
#: A file block's first line names where it is saved.
FILE_HEADER = re.compile(r"# (combolayer/\S+\.py)\n")


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_page_adds_four_files_each_in_its_own_folder():
    saved = [m.group(1) for block in blocks() if (m := FILE_HEADER.match(block))]
    assert saved == ["combolayer/problems/pick_one.py", "combolayer/backends/argmin.py",
                     "combolayer/estimators/scaled_identity.py",
                     "combolayer/experiments/toy_topk.py"]


def test_each_extension_is_one_new_file(tmp_path):
    # A copy of the package, so that the files join its folders exactly as a
    # contributor's would; nothing else in it changes.
    shutil.copytree(PACKAGE, tmp_path / "combolayer",
                    ignore=shutil.ignore_patterns("__pycache__"))
    usage = []
    for block in blocks():
        header = FILE_HEADER.match(block)
        if header:
            target = tmp_path / header.group(1)
            assert not target.exists(), f"{header.group(1)} is not a new file"
            target.write_text(block[header.end():])
        else:
            usage.append(block)
    script = "\n".join([
        "import combolayer",
        f"assert combolayer.__file__.startswith({str(tmp_path)!r}), combolayer.__file__",
        f"OUT = {str(tmp_path / 'out')!r}", *usage])
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["experiment"] == "toy_topk" and data["quick"] is True
    assert [(row["method"], row["projection"]) for row in data["rows"]] == [
        ("identity", "none"), ("identity", "std"), ("identity [control]", "std")]
    assert data["claims"][0]["verdict"] in {"agrees", "disagrees", "inconclusive", "invalid"}
