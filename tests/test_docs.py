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



def test_a_pydantic_models_signature_is_its_fields(site):
    # tools/griffe_pydantic.py: without it the reference showed TopK(*args, **data), and an
    # Args: section naming the fields failed the strict build.
    page = (site / "api" / "problems" / "index.html").read_text()
    heading = page.split('id="combolayer.problems.TopK"', 1)[1].split("Bases:", 1)[0]
    signature = " ".join(re.sub(r"<[^>]+>", " ", heading).split())
    assert "n : int , k : int , sense : Sense =" in signature, signature
    assert "args" not in signature, signature


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


def test_the_guides_yaml_ilp_with_variables_loads_and_solves_as_it_says():
    import numpy as np

    text = (ROOT / "docs" / "declare.md").read_text()
    block = re.search(r"```yaml\n(# depot\.yaml.*?)```", text, re.S)
    assert block, "docs/declare.md lost its depot.yaml example"
    spec = cl.load_spec(block.group(1))
    assert spec.known_cost == [0.0, 0.0, 0.0, 1.5] and set(spec.variables) == {"site", "depot"}
    y, aux = cl.make_solver(spec).solve(np.array([-2.0, 0.0, 0.5]), return_aux=True)
    assert y.tolist() == [1.0, 1.0, 0.0] and aux.tolist() == [1.0]
    parts = spec.split(np.concatenate([y, aux]))
    assert parts["site"].tolist() == [1.0, 1.0, 0.0] and parts["depot"].tolist() == 1.0
