"""The wheel `python -m build` makes installs into a fresh environment and works there."""

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

import combolayer as cl

ROOT = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns(".git", ".venv*", "site", "runs", "build", "dist", "*.egg-info",
                                "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis")


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_imports(tmp_path):
    pytest.importorskip("build", reason="the 'build' package is not installed "
                                        "(pip install combolayer[dev])")
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=IGNORE)  # leave the checkout untouched
    dist = tmp_path / "dist"
    # --no-isolation reuses this environment's setuptools instead of downloading one;
    # the default build still goes sdist -> wheel, so the sdist is checked too.
    result = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir",
                             str(dist), str(source)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    wheel = next(dist.glob("combolayer-*.whl"))
    assert wheel.name.startswith(f"combolayer-{cl.__version__}-")
    assert next(dist.glob("combolayer-*.tar.gz"))

    env = tmp_path / "venv"
    venv.create(env, system_site_packages=True, with_pip=False)  # this pip installs into it
    python = env / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    if sys.prefix != sys.base_prefix:
        # Inside a virtual environment, "system" site-packages is the base
        # interpreter's: reach this environment's torch, numpy, plugins, ... with a
        # .pth (a site dir appended after the new site-packages and processed like
        # one, so the wheel's combolayer wins over an editable install here).
        parent = sysconfig.get_paths()["purelib"]
        Path(purelib, "parent_env.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True)
    check = (
        "import importlib.metadata as m, pathlib, numpy as np, combolayer as cl\n"
        "here = pathlib.Path(cl.__file__).parent\n"
        "assert (here / 'py.typed').is_file()\n"
        "assert m.version('combolayer') == cl.__version__\n"
        "y = cl.make_solver(cl.problems.TopK(n=4, k=1)).solve(np.array([3.0, 1, 2, 0]))\n"
        "print(here, y.tolist())\n"
    )
    # The checkout must not shadow the wheel; other PYTHONPATH entries (a plugin's
    # source, say) stay.
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and not (Path(p).resolve() / "combolayer" / "__init__.py").is_file()]
    clean = {**os.environ, "PYTHONPATH": os.pathsep.join(kept)}
    out = subprocess.run([str(python), "-c", check], capture_output=True, text=True,
                         cwd=tmp_path, env=clean)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(purelib) and "[1.0, 0.0, 0.0, 0.0]" in out.stdout
    # the console script
    help_text = subprocess.run([str(env / "bin" / "combolayer"), "--help"], capture_output=True,
                               text=True, check=True, env=clean).stdout
    assert "solve" in help_text
