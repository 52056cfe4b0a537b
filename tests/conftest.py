import numpy as np
import pytest
import torch


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
