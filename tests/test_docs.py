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



ROLE = re.compile(r":(class|meth|func|attr|mod|data|exc|obj):`")


def test_no_docstring_uses_a_sphinx_role():
    # Before: the API reference showed ":meth:`set_noise`" and ":class:`SumOfGamma`".
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in sorted((ROOT / "combolayer").rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if ROLE.search(line)]
    assert not found, "Sphinx roles render literally in mkdocstrings:\n" + "\n".join(found)


def test_the_strict_build_fails_on_a_sphinx_role(caplog):
    sys.path.insert(0, str(ROOT))
    try:
        import mkdocs_hooks
    finally:
        sys.path.remove(str(ROOT))
    page = type("Page", (), {"file": type("File", (), {"src_path": "api/layer.md"})()})()
    with caplog.at_level("WARNING", logger="mkdocs.plugins.sphinx_roles"):
        mkdocs_hooks.on_page_content("<p>see :meth:<code>set_noise</code></p>", page, {}, None)
        mkdocs_hooks.on_page_content("<p>see <code>set_noise</code></p>", page, {}, None)
    assert len(caplog.records) == 1 and "api/layer.md" in caplog.records[0].getMessage()
