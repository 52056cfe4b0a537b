"""docs/architecture.md's worked examples run as written: a problem, a backend, an
estimator and an experiment, each added in one place."""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_page_has_the_four_examples():
    assert len(blocks()) == 4


def test_the_examples_run_in_order_and_the_experiment_is_one_file(tmp_path):
    problem, backend, estimator, experiment = blocks()
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "toy_topk.py").write_text(
        "import torch\nimport combolayer as cl\n" + experiment)
    # A fresh interpreter: the examples register a spec kind, a backend and an
    # estimator globally. The experiment joins the package's folder of
    # experiments, exactly as a file saved in combolayer/experiments/ would.
    script = problem + backend + estimator + textwrap.dedent(f"""
        import combolayer.experiments as experiments
        experiments.__path__.append({str(tmp_path / "extra")!r})
        experiments.experiments.cache_clear()
        from combolayer.cli import main
        assert "toy_topk" in experiments.experiments()
        code = main(["reproduce", "toy_topk", "--quick", "--out", {str(tmp_path / "out")!r}])
        assert code == 0, code
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["experiment"] == "toy_topk" and data["quick"] is True
    assert [row["projection"] for row in data["rows"]] == ["none", "std"]
    assert data["claims"][0]["verdict"] in {"agrees", "disagrees", "inconclusive"}
