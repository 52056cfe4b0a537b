"""Each optional package blocked in turn: combolayer still imports and solves with HiGHS,
and asking for what needs the blocked package raises BackendUnavailable naming what can."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# Hides the package as if it were not installed: every finder on sys.meta_path
# answers None for it, so importlib.util.find_spec gives None and an import
# raises ModuleNotFoundError.
BLOCK = textwrap.dedent("""
    import sys

    BLOCKED = {blocked!r}

    def hide(finder):
        find_spec = finder.find_spec

        def find_spec_hiding(name, *args, **kwargs):
            if name.split(".")[0] == BLOCKED:
                return None
            return find_spec(name, *args, **kwargs)

        return find_spec_hiding

    for finder in sys.meta_path:
        if hasattr(finder, "find_spec"):
            if isinstance(finder, type):
                # A class-level finder (PathFinder): a staticmethod, so that calls on an
                # instance, as dill makes (PathFinder().find_spec(...)), bind no self.
                finder.find_spec = staticmethod(hide(finder))
            else:
                finder.find_spec = hide(finder)
    try:
        __import__(BLOCKED)
    except ImportError:
        pass
    else:
        raise SystemExit("blocking failed")
""")

CHECK = textwrap.dedent("""
    import numpy as np
    import combolayer as cl
    from combolayer.problems import ShortestPath

    spec = cl.ILP.from_matrices(shape=[3], A_eq=np.ones((1, 3)), b_eq=[1.0])
    y = cl.make_solver(spec).solve(np.array([[3.0, 1.0, 2.0]]))
    assert y.tolist() == [[0.0, 1.0, 0.0]], y
    layer = cl.ComboLayer(spec)
    import torch
    assert layer(torch.tensor([3.0, 1.0, 2.0])).tolist() == [0.0, 1.0, 0.0]

    request = {request!r}
    target = ShortestPath(num_nodes=3, edges=[(0, 1), (1, 2), (0, 2)], source=0, target=2)
    try:
        cl.make_solver(target if request["name"] == "networkx" else spec, request)
    except cl.BackendUnavailable as error:
        message = str(error)
    else:
        raise SystemExit("no BackendUnavailable for " + repr(request))
    assert {expected!r} in message, message
    assert BLOCKED not in sys.modules, "imported anyway"
    print("OK", message)
""")

CASES = {
    "pyscipopt": ({"name": "scip"}, "backends that can: "),
    "gurobipy": ({"name": "gurobi"}, "backends that can: "),
    "cvxpy": ({"name": "cvxpy"}, "backends that can: "),
    "networkx": ({"name": "networkx"}, "backends that can: "),
    "ray": ({"name": "highs", "executor": "ray", "workers": 2}, "executors that need nothing"),
}


@pytest.mark.parametrize("blocked", list(CASES))
def test_library_works_without(blocked):
    request, expected = CASES[blocked]
    script = BLOCK.format(blocked=blocked) + CHECK.format(request=request, expected=expected)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("OK"), result.stdout
    if blocked != "ray":
        # The message names backends that can, and the blocked one is not among them.
        able = result.stdout.split("backends that can: ")[1].strip().split(", ")
        assert "highs" in able and request["name"] not in able, able


RELAXATION_CHECK = textwrap.dedent("""
    import torch
    import combolayer as cl

    spec = cl.problems.TopK(3, 1)
    # every other method still trains
    layer = cl.ComboLayer(spec, method="blackbox")
    layer(torch.tensor([3.0, 1.0, 2.0], requires_grad=True)).sum().backward()
    for name in ("qptl", "intopt"):
        try:
            cl.ComboLayer(spec, method=name)
        except cl.BackendUnavailable as error:
            message = str(error)
        else:
            raise SystemExit("no BackendUnavailable for " + name)
        assert "pip install 'combolayer[cvxpylayers]'" in message, message
        assert "'comboptnet' and 'score_function'" in message, message
    assert "cvxpylayers" not in sys.modules, "imported anyway"
    print("OK", message)
""")


def test_relaxation_methods_without_cvxpylayers():
    """Without the [cvxpylayers] extra combolayer imports and trains with the other
    methods, and "qptl"/"intopt" say, when the layer is built, which extra they need."""
    script = BLOCK.format(blocked="cvxpylayers") + RELAXATION_CHECK
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("OK"), result.stdout
