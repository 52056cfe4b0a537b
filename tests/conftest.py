import ast
import functools
from pathlib import Path

import numpy as np
import pytest
import torch


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def always_parallel(monkeypatch):
    """Every batch goes to the workers: the first call waits until they are ready
    (`ParallelKernel.ready` with ``wait=None``) instead of solving in the caller
    meanwhile."""
    from combolayer import executors

    ready = executors.ParallelKernel.ready
    monkeypatch.setattr(executors.ParallelKernel, "ready",
                        lambda self, wait=None: ready(self, wait=None))


@pytest.fixture(scope="session")
def ray_cluster():
    """The session's one Ray cluster (`ray_kit.start_cluster`: a head and a worker node,
    one CPU each), started at the first test that asks for it."""
    ray = pytest.importorskip("ray", reason="the ray executor needs the optional ray package")
    from ray_kit import RAY, start_cluster

    if not RAY.exists():
        pytest.skip("the ray command line is not installed beside this Python")
    cluster = start_cluster(ray)
    yield cluster
    ray.shutdown()
    cluster.stop()


@functools.cache
def _module_functions(path: Path) -> dict[str, ast.FunctionDef]:
    """The functions defined in a test module, by name (the first of each name)."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef):
            found.setdefault(node.name, node)
    return found


def _starts_processes(node: ast.FunctionDef, functions: dict, seen: set) -> bool:
    """Whether ``node``, or a function of its module that it calls, starts Python
    processes: ``sys.executable``, ``subprocess``, ``multiprocessing``, the executor
    ``"process"`` (a literal ``"process"`` in a function that names an executor) or
    DataLoader workers (``num_workers`` other than 0)."""
    seen.add(node.name)
    # the body only: a parametrize decorator's "process" marks that parameter alone
    body = [sub for statement in node.body for sub in ast.walk(statement)]
    compared = {id(leaf) for sub in body if isinstance(sub, ast.Compare)
                for leaf in ast.walk(sub)}  # `if executor == "process":` starts nothing
    words = {sub.value for sub in body if isinstance(sub, ast.Constant)
             and id(sub) not in compared}
    names = {sub.id for sub in body if isinstance(sub, ast.Name)}
    if "process" in words and ("executor" in words or "executor" in names):
        return True
    for sub in body:
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and (
                (sub.value.id, sub.attr) == ("sys", "executable")
                or sub.value.id in ("subprocess", "multiprocessing")):
            return True
        if isinstance(sub, ast.keyword) and (
                (sub.arg == "num_workers" and not (isinstance(sub.value, ast.Constant)
                                                   and sub.value.value == 0))
                or (sub.arg == "executor" and isinstance(sub.value, ast.Constant)
                    and sub.value.value == "process")):
            return True
        if (isinstance(sub, ast.Name) and sub.id in functions and sub.id not in seen
                and _starts_processes(functions[sub.id], functions, seen)):
            return True
    return False


def pytest_collection_modifyitems(items):
    """The markers that the fixtures, parameters, code and files imply: ``ray`` for a
    test on the Ray cluster, ``subprocess`` for one that starts Python processes (by its
    own code or its module's helpers it calls, or an ``executor`` parameter
    ``"process"``), ``cuda`` for tests/test_cuda.py; the Ray tests share one xdist
    group."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        # only the string parameters: an array's == is elementwise
        words = {value for value in params.values() if isinstance(value, str)}
        if "ray_cluster" in getattr(item, "fixturenames", ()) or "ray" in words:
            item.add_marker(pytest.mark.ray)
            # under pytest-xdist (--dist loadgroup) every Ray test runs on one worker,
            # so the session starts one cluster, not one per worker
            item.add_marker(pytest.mark.xdist_group("ray"))
        functions = _module_functions(item.path)
        node = functions.get(getattr(item, "originalname", item.name))
        if "process" in words or (
                node is not None and _starts_processes(node, functions, set())):
            item.add_marker(pytest.mark.subprocess)
        if item.path.name == "test_cuda.py":
            item.add_marker(pytest.mark.cuda)
