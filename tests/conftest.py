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
    """Hand every batch to the workers, however small the solves."""
    from combolayer.backends import executors

    zero = dict.fromkeys(("thread", "process", "ray"), 0.0)
    monkeypatch.setattr(executors, "MIN_CHUNK_SECONDS", zero)
    monkeypatch.setattr(executors, "START_SECONDS", zero)
    monkeypatch.setattr(executors, "MIN_SOLVE_SECONDS", 0.0)
    # A pool also waits until a batch's work exceeds one model build, which a
    # loaded machine makes slow: the thresholds above alone left crash rows
    # in the caller's process.
    original = executors.ParallelKernel._num_chunks

    def eager(self, rows):
        self.build_seconds = 0.0
        return original(self, rows)

    monkeypatch.setattr(executors.ParallelKernel, "_num_chunks", eager)
