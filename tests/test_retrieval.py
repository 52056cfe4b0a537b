"""Retrieval pieces against brute force: the loglog recall loss (the paper's
equation for the recall loss), recall@K, and ranking every query of a batch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import combolayer as cl
from combolayer.backends import closed_form


def loglog_by_hand(ranks: np.ndarray, relevance: np.ndarray) -> float:
    """Sahoo et al. 2023, eq. (recall loss): per instance
    1/|rel| sum_{i in rel} log(1 + log(1 + rk(w)_i - rk(w+)_i)), rk(w+)_i the rank
    of i among the relevant items only; averaged over instances."""
    values = []
    for rk, rel in zip(ranks, relevance):
        positives = [i for i in range(len(rk)) if rel[i] == 1]
        if not positives:
            values.append(0.0)
            continue
        total = 0.0
        for i in positives:
            rank_among_positives = 1 + sum(rk[j] < rk[i] for j in positives)
            total += math.log(1 + math.log(1 + rk[i] - rank_among_positives))
        values.append(total / len(positives))
    return float(np.mean(values))


@pytest.mark.parametrize("n", [2, 5, 9])
def test_loglog_recall_matches_the_papers_equation(rng, n):
    ranks = np.stack([rng.permutation(n) + 1 for _ in range(7)]).astype(float)
    relevance = (rng.random((7, n)) < 0.4).astype(float)
    relevance[0] = 0.0  # an instance without positives contributes 0
    relevance[1] = 1.0  # all positive: the loss is 0
    value = cl.losses.loglog_recall(torch.tensor(ranks), torch.tensor(relevance))
    assert value.item() == pytest.approx(loglog_by_hand(ranks, relevance), abs=1e-12)


def test_loglog_recall_gradient_is_sparse_on_the_positives(rng):
    """d/d rk_i of log(1 + log(1 + rk-_i)) is 1 / ((1 + rk-_i)(1 + log(1 + rk-_i))) on
    positives (with rk+ held constant) and exactly 0 on negatives: the sparse gradient
    the paper blames for Identity's gap to Blackbox on retrieval."""
    n, batch = 8, 5
    ranks = torch.tensor(np.stack([rng.permutation(n) + 1 for _ in range(batch)]),
                         dtype=torch.float64, requires_grad=True)
    relevance = torch.tensor(rng.random((batch, n)) < 0.4, dtype=torch.float64)
    relevance[:, 0] = 1.0
    cl.losses.loglog_recall(ranks, relevance).backward()
    expected = torch.zeros(batch, n, dtype=torch.float64)
    for b in range(batch):
        positives = [i for i in range(n) if relevance[b, i] == 1]
        for i in positives:
            rank_among = 1 + sum(bool(ranks[b, j] < ranks[b, i]) for j in positives)
            negatives_above = ranks[b, i].item() - rank_among
            expected[b, i] = 1 / ((1 + negatives_above) * (1 + math.log1p(negatives_above)))
            expected[b, i] /= len(positives) * batch
    torch.testing.assert_close(ranks.grad, expected)
    assert (ranks.grad[relevance == 0] == 0).all()


def recall_by_hand(similarity: np.ndarray, labels: np.ndarray, k: int) -> float:
    """For each query, sort the others by similarity (ties: lower index first) and
    check whether one of the first k has the query's label."""
    n = len(labels)
    hits = 0
    for q in range(n):
        others = sorted((j for j in range(n) if j != q), key=lambda j: (-similarity[q, j], j))
        hits += any(labels[j] == labels[q] for j in others[:k])
    return hits / n


@pytest.mark.parametrize("ties", [False, True])
def test_recall_at_k_matches_brute_force(rng, ties):
    n = 30
    labels = rng.integers(0, 6, n)
    if ties:  # few distinct values: many ties, broken towards the lower index
        similarity = rng.integers(0, 3, (n, n)).astype(float)
    else:
        similarity = rng.normal(size=(n, n))
    got = cl.metrics.recall_at_k(torch.tensor(similarity), torch.tensor(labels),
                                 ks=(1, 2, 4, 8, 29))
    for k, value in got.items():
        assert value == pytest.approx(recall_by_hand(similarity, labels, k))


def test_recall_at_k_from_embeddings_uses_cosine(rng):
    embeddings = rng.normal(size=(25, 4))
    labels = rng.integers(0, 4, 25)
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    got = cl.metrics.recall_at_k(embeddings, labels, ks=(1, 3))
    for k in (1, 3):
        assert got[k] == pytest.approx(recall_by_hand(unit @ unit.T, labels, k))
    # a square (N, N) input is read as similarities unless told otherwise
    square = rng.normal(size=(6, 6))
    six = np.array([0, 0, 1, 1, 2, 2])
    unit = square / np.linalg.norm(square, axis=1, keepdims=True)
    assert cl.metrics.recall_at_k(square, six, ks=(1,), input="embeddings")[1] == \
        pytest.approx(recall_by_hand(unit @ unit.T, six, 1))
    assert cl.metrics.recall_at_k(square, six, ks=(1,))[1] == \
        pytest.approx(recall_by_hand(square, six, 1))
    with pytest.raises(ValueError, match="labels"):
        cl.metrics.recall_at_k(square, six[:5])


def test_perfect_and_worst_retrieval():
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    same = (labels[:, None] == labels[None, :]).double()
    assert cl.metrics.recall_at_k(same, labels, ks=(1,)) == {1: 1.0}
    assert cl.metrics.recall_at_k(-same, labels, ks=(1, 4, 5)) == {1: 0.0, 4: 0.0, 5: 1.0}


def test_query_rows_and_relevance_drop_the_diagonal(rng):
    b = 6
    matrix = torch.tensor(rng.normal(size=(b, b)), requires_grad=True)
    rows = cl.retrieval.query_rows(matrix)
    expected = torch.stack([torch.cat([matrix[i, :i], matrix[i, i + 1:]]) for i in range(b)])
    torch.testing.assert_close(rows, expected)
    rows.sum().backward()
    torch.testing.assert_close(matrix.grad, 1.0 - torch.eye(b, dtype=torch.float64))
    labels = torch.tensor([0, 1, 0, 2, 1, 0])
    relevance = cl.retrieval.query_relevance(labels)
    assert relevance.tolist()[0] == [0, 1, 0, 0, 1]  # items 2 and 5 share label 0
    assert relevance.shape == (b, b - 1) and relevance.sum().item() == 3 * 2 + 2 * 1 + 1 * 0


def test_ranking_layer_ranks_every_query_in_batched_sorts(rng, monkeypatch):
    """(B, B) similarities -> (B, B - 1) rows -> one batched solve, whose sorts each
    take the whole batch (no loop over queries); each row is ranked as brute force
    would (rank 1 = most similar other item)."""
    b = 9
    similarities = cl.retrieval.cosine_similarities(torch.tensor(rng.normal(size=(b, 3))))
    rows = cl.retrieval.query_rows(similarities).requires_grad_()
    layer = cl.ComboLayer(cl.problems.Ranking(n=b - 1), method="identity", projection="std",
                          backend="torch")
    calls = []

    def counting(sort):
        def counted(*args, **kwargs):
            calls.append(tuple(args[0].shape))
            return sort(*args, **kwargs)
        return counted

    # the CPU path: numpy's sort (the tie check) and argsort; the tie path: torch.sort
    monkeypatch.setattr(closed_form.torch, "sort", counting(torch.sort))
    monkeypatch.setattr(closed_form.np, "sort", counting(np.sort))
    monkeypatch.setattr(closed_form.np, "argsort", counting(np.argsort))
    ranks = layer(rows)
    monkeypatch.undo()
    assert calls == [(b, b - 1), (b, b - 1)]
    for i in range(b):
        order = sorted(range(b - 1), key=lambda j: -rows[i, j].item())
        assert [int(ranks[i, j]) for j in order] == list(range(1, b))
    labels = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2])
    cl.losses.loglog_recall(ranks, cl.retrieval.query_relevance(labels)).backward()
    assert rows.grad is not None and torch.isfinite(rows.grad).all()


def test_masking_the_diagonal_would_shrink_projected_gradients(rng):
    """Why query_rows drops the query instead of masking it to a low score: the
    projection is taken over the whole row, so a masked entry sets its scale."""
    b = 8
    scores = torch.tensor(rng.normal(size=(b, b)))
    labels = torch.arange(b) // 2
    layer = cl.ComboLayer(cl.problems.Ranking(n=b), method="identity", projection="std",
                          backend="torch")
    dropped = cl.ComboLayer(cl.problems.Ranking(n=b - 1), method="identity", projection="std",
                            backend="torch")

    masked = scores.clone().fill_diagonal_(-1e4).requires_grad_()
    same = (labels[:, None] == labels[None, :]).double().fill_diagonal_(0.0)
    cl.losses.loglog_recall(layer(masked), same).backward()
    rows = cl.retrieval.query_rows(scores).requires_grad_()
    cl.losses.loglog_recall(dropped(rows), cl.retrieval.query_relevance(labels)).backward()
    off = ~torch.eye(b, dtype=torch.bool)
    assert masked.grad[off].abs().max() < 1e-2 * rows.grad.abs().max()
