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
