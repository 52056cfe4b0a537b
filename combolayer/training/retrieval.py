"""Ranking within a batch for retrieval: each item queries all the others.

Retrieval with a ranking layer (Rolinek et al. 2020; Sahoo et al. 2023, app.
"Rank-based metrics") embeds a batch of ``B`` items, scores every pair, and
ranks, for each query, the ``B - 1`` *other* items by similarity. The query
itself must not take part: it is not a result, and its similarity to itself is
the largest one.

Masking the diagonal to a very low score would put the query last without
changing the other ranks, but the projections of Identity (``"mean"``,
``"norm"``, ``"std"``) are computed over the whole row, so one entry of, say,
``-1e4`` sets the row's mean and norm and shrinks the gradient of every real
score by about that factor. So `query_rows` drops the diagonal instead:
row ``i`` of the ``(B, B)`` matrix becomes the ``B - 1`` scores of the other
items, in their original order, and ``ComboLayer(Ranking(B - 1), ...)`` ranks
all ``B`` queries in one batched call (the torch backend: one sort for the
whole batch).

    rows = cl.retrieval.query_rows(cl.retrieval.cosine_similarities(embeddings))
    ranks = layer(rows)                                  # (B, B - 1), 1 = most similar
    loss = cl.losses.loglog_recall(ranks, cl.retrieval.query_relevance(labels))
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import InputError


def cosine_similarities(embeddings: Tensor) -> Tensor:
    """``(B, D)`` embeddings to the ``(B, B)`` cosine similarities (differentiable)."""
    if embeddings.ndim != 2:
        raise InputError(f"embeddings must have shape (B, D), got {tuple(embeddings.shape)}")
    unit = torch.nn.functional.normalize(embeddings, dim=-1)
    return unit @ unit.T


def _off_diagonal_index(n: int, device: torch.device) -> Tensor:
    """``(n, n - 1)``: the column indices of row ``i`` without ``i``."""
    columns = torch.arange(n - 1, device=device).expand(n, n - 1)
    return columns + (columns >= torch.arange(n, device=device)[:, None]).long()


def query_rows(matrix: Tensor) -> Tensor:
    """The ``(B, B - 1)`` off-diagonal entries of a ``(..., B, B)`` matrix, row by row.

    Entry ``[i, j]`` is ``matrix[i, j]`` for ``j < i`` and ``matrix[i, j + 1]``
    for ``j >= i``; gradients flow back to the off-diagonal entries only.
    """
    if matrix.ndim < 2 or matrix.shape[-1] != matrix.shape[-2] or matrix.shape[-1] < 2:
        raise InputError(f"matrix must have shape (..., B, B) with B >= 2, got "
                         f"{tuple(matrix.shape)}")
    n = matrix.shape[-1]
    index = _off_diagonal_index(n, matrix.device).expand(*matrix.shape[:-2], n, n - 1)
    return matrix.gather(-1, index)


def query_relevance(labels: Tensor) -> Tensor:
    """``(B,)`` class labels to the ``(B, B - 1)`` 0/1 relevance of `query_rows`:
    1 where the other item has the query's label."""
    labels = torch.as_tensor(labels)
    if labels.ndim != 1:
        raise InputError(f"labels must have shape (B,), got {tuple(labels.shape)}")
    same = (labels[:, None] == labels[None, :]).float()
    return query_rows(same)


__all__ = ["cosine_similarities", "query_relevance", "query_rows"]
