"""Quiet by default: the library prints nothing; only the command-line entry points talk."""

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "combolayer"
#: Modules whose job is to talk to a person (the commands), and in other modules
#: the functions that are command entry points.
TALKING_FOLDERS = {"cli"}
TALKING_FUNCTIONS = {("training/loop.py", "train")}


def _print_calls(tree: ast.AST, function: str = "<module>"):
    """(line, enclosing function) of every ``print(...)`` call."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _print_calls(node, node.name)
            continue
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "print"):
            yield node.lineno, function
        yield from _print_calls(node, function)


def test_no_print_outside_command_code():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name.split("/")[0] in TALKING_FOLDERS:
            continue
        for line, function in _print_calls(ast.parse(path.read_text())):
            if (name, function) not in TALKING_FUNCTIONS:
                offenders.append(f"{name}:{line} in {function}")
    assert not offenders, f"print() in library code (use warnings or logging): {offenders}"


QUIET = """
import numpy as np, torch
import combolayer as cl
spec = cl.ILP(shape=[5], constraints=[cl.Constraint(coefs=[1] * 5, sense="==", rhs=2)])
for backend in ["highs", "scip", "gurobi", "cvxpy", "scipy", "auto"]:
    try:
        cl.make_solver(spec, backend).solve(np.arange(5.0))
        cl.ComboLayer(spec, backend=backend)(torch.randn(3, 5))
    except cl.BackendUnavailable:
        pass
cl.analyze(spec, exact=True)
cl.make_solver(spec, {"name": "highs", "executor": "thread", "workers": 2}).solve(
    np.random.rand(4, 5))
cl.ILP.from_file(FILE)
"""


def test_solvers_print_nothing_to_stdout(tmp_path):
    """No banner, log line or warning reaches stdout (file descriptor 1) by default."""
    from test_files import LP_FILE

    (tmp_path / "m.lp").write_text(LP_FILE)
    code = QUIET.replace("FILE", repr(str(tmp_path / "m.lp")))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
