"""Copies of everything a model holds: layers, losses, estimators and pools survive
``copy.deepcopy``, ``pickle`` and ``torch.save``/``torch.load`` (and so DataLoader
workers), with every registered backend, and a copy answers as the original does."""

import pytest
import torch

import combolayer as cl
from combolayer.backends.pool import SolutionPool

# -- solution pools ------------------------------------------------------------------------


def test_a_pool_pickles_and_deep_copies_without_its_lock():
    import copy
    import pickle

    pool = SolutionPool(cl.problems.TopK(4, 2), max_size=3)
    pool.seed(torch.tensor([1.0, 1, 0, 0]))
    pool.add(torch.tensor([[0.0, 1, 1, 0], [0.0, 0, 1, 1]]))
    for twin in (copy.deepcopy(pool), pickle.loads(pickle.dumps(pool))):
        assert torch.equal(twin.solutions, pool.solutions) and twin.spec_label == pool.spec_label
        twin.add(torch.tensor([1.0, 0, 0, 1]))  # evicts the oldest unseeded row, as pool would
        assert {tuple(r) for r in twin.solutions.tolist()} == {
            (1, 1, 0, 0), (0, 0, 1, 1), (1, 0, 0, 1)}
        with pytest.raises(ValueError, match="not of TopK"):
            twin.bind(cl.problems.TopK(4, 3))
