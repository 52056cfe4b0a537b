"""The ``subprocess`` marker's rule (tests/conftest.py): a test that starts Python
processes is marked by what its code does, so `make test-fast` leaves it out without a
list of names to keep."""

import ast
import textwrap

import pytest
from conftest import _starts_processes


def starts(source: str, name: str = "test_it") -> bool:
    tree = ast.parse(textwrap.dedent(source))
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    return _starts_processes(functions[name], functions, set())


@pytest.mark.parametrize("body", [
    "subprocess.run([sys.executable, '-c', 'pass'])",
    "print(sys.executable)",
    "multiprocessing.get_context('fork')",
    "cl.make_solver(spec, {'name': 'highs', 'executor': 'process', 'workers': 2})",
    "cl.BackendConfig(executor='process', workers=2)",
    "for executor in ('thread', 'process'):\n        make(spec, {'executor': executor})",
    "torch.utils.data.DataLoader(data, num_workers=2)",
    "torch.utils.data.DataLoader(data, num_workers=workers)",
])
def test_code_that_starts_processes_is_marked(body):
    assert starts(f"def test_it():\n    {body}\n")


@pytest.mark.parametrize("body", [
    "cl.make_solver(spec, {'name': 'highs', 'executor': 'thread', 'workers': 2})",
    "torch.utils.data.DataLoader(data, num_workers=0)",
    "if executor == 'process':\n        assert pool",
    "assert 'process' in message",
])
def test_code_that_starts_none_is_not_marked(body):
    assert not starts(f"def test_it(executor):\n    {body}\n")


def test_a_helper_of_the_module_that_starts_processes_marks_its_callers():
    source = """
        def run(*args):
            return subprocess.run([sys.executable, "-m", "combolayer", *args])

        def test_it():
            run("demo")

        def test_other():
            return 1
    """
    assert starts(source) and not starts(source, "test_other")


def test_a_parametrize_decorator_marks_no_parameter_by_itself():
    source = """
        @pytest.mark.parametrize("executor", ["serial", "process"])
        def test_it(executor):
            solve(executor)
    """
    assert not starts(source)  # the "process" parameter is marked by its value instead
