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

from ..specs.base import Spec
from .base import Capability, FunctionBackend, Tier
from .registry import register_backend


def _host_readable(costs: Tensor) -> bool:
    """Whether reading one value back is free: a CPU tensor outside vmap/grad
    transforms (where ``bool(tensor)`` is not allowed) and outside tracing."""
    return (costs.device.type == "cpu" and not torch._C._are_functorch_transforms_active()
            and not torch.compiler.is_compiling())


def topk_indicator(costs: Tensor, k: int) -> Tensor:
    """The 0/1 indicator of the ``k`` smallest entries along the last axis.

    Ties at the k-th value go to the lowest indices. On the CPU, where reading
    one number back costs no device sync, one ``torch.topk`` of ``k + 1`` and a
    scatter do it whenever no entry left out ties the k-th value, that is
    when the sorted (k+1)-th value differs from the k-th in every row (one
    comparison of two columns); otherwise, and always on other devices (no host
    round trip), ``torch.kthvalue`` finds the threshold (measured 1.35x a bare
    ``torch.topk``) and equal entries are admitted in index order.
    """
    if _host_readable(costs) and costs.ndim == 2 and k < costs.shape[1]:
        values, index = torch.topk(costs, k + 1, dim=-1, largest=False)
        if not bool(values[:, k].eq(values[:, k - 1]).any()):
            return torch.zeros_like(costs).scatter_(-1, index[:, :k], 1.0)
    threshold = torch.kthvalue(costs, k, dim=-1, keepdim=True).values
    below = costs < threshold
    tied = costs == threshold
    room = k - below.sum(dim=-1, keepdim=True)
    chosen = below | (tied & (torch.cumsum(tied, dim=-1) <= room))
    return chosen.to(costs.dtype)


def ranks(costs: Tensor) -> Tensor:
    """``argmin <costs, y>`` over permutations y of 1..n: rank 1 for the largest cost.

    A stable descending sort gives the lower index the better rank on ties. On
    the CPU an unstable sort (measured ~1.3x faster) is used when it has no
    equal neighbours, where both sorts agree.
    """
    position = torch.arange(1, costs.shape[-1] + 1, device=costs.device, dtype=costs.dtype)
    if _host_readable(costs):
        values, order = torch.sort(costs, dim=-1, descending=True)
        if not bool(values[..., 1:].eq(values[..., :-1]).any()):
            return torch.empty_like(costs).scatter_(-1, order, position.expand_as(costs))
    order = torch.sort(costs, dim=-1, descending=True, stable=True).indices
    return torch.zeros_like(costs).scatter(-1, order, position.expand_as(costs))  # vmap-able


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
