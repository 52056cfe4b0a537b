"""The documentation site builds with --strict and documents every public name."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import combolayer as cl

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install combolayer[docs])")
    pytest.importorskip("mkdocstrings", reason="mkdocstrings is not installed "
                                               "(pip install combolayer[docs])")
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def test_site_builds_strict(site):
    assert (site / "index.html").is_file()
    for page in ("core", "training", "api/layer", "api/specs"):
        assert (site / page / "index.html").is_file(), page


def test_api_reference_covers_every_public_name(site):
    html = "".join(p.read_text() for p in (site / "api").rglob("*.html"))
    anchors = set(re.findall(r'id="(combolayer\.[\w.]+)"', html))
    missing = [name for name in cl.__all__ if f"combolayer.{name}" not in anchors]
    assert not missing, f"no API reference entry for {missing}"
    for name in ("combolayer.ILP.from_file", "combolayer.ILP.from_matrices",
                 "combolayer.losses.SPOPlusLoss", "combolayer.metrics.regret",
                 "combolayer.data.shortest_path", "combolayer.training.loop.TrainConfig"):
        assert name in anchors, name

