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
    from combolayer.backends import executors

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


def pytest_collection_modifyitems(items):
    """The markers that the fixtures and files imply: ``ray`` for a test on the Ray
    cluster, ``cuda`` for tests/test_cuda.py."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "ray_cluster" in getattr(item, "fixturenames", ()) or "ray" in params.values():
            item.add_marker(pytest.mark.ray)
        if item.path.name == "test_cuda.py":
            item.add_marker(pytest.mark.cuda)
