"""Closed-form top-k and ranking: batched, on the tensor's own device.

No Python loop over the batch, deterministic tie-breaking (the lower index
wins a tie). On the CPU the sorting is numpy's vectorised sort on a view of
the tensor (no copy), faster there than ``torch.topk`` and ``torch.sort``
(benchmarks/problems.py compares them); on other devices,
and under ``torch.func.vmap`` and ``torch.compile``, `topk_indicator`
and `ranks` are pure torch.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from ..func_transforms import transforms_active
from ..specs.base import Spec
from .base import Capability, FunctionBackend, Tier
from .registry import register_backend

#: The dtypes numpy sorts; others (half, bfloat16) take the torch path.
_NUMPY_DTYPES = (torch.float32, torch.float64)


def _host_array(costs: Tensor) -> np.ndarray | None:
    """A numpy view of ``costs`` (no copy) when numpy may sort it: a 2-d float32 or
    float64 CPU tensor outside vmap/grad transforms and outside tracing; else None."""
    if (costs.device.type == "cpu" and costs.ndim == 2 and costs.dtype in _NUMPY_DTYPES
            and not transforms_active()
            and not torch.compiler.is_compiling()):
        return costs.detach().numpy()
    return None


def topk_indicator(costs: Tensor, k: int) -> Tensor:
    """The 0/1 indicator of the ``k`` smallest entries along the last axis.

    Ties at the k-th value go to the lowest indices. On the CPU one numpy sort
    gives each instance's k-th and (k+1)-th smallest values; when they differ in
    every instance (no entry left out ties the k-th), the entries up to the k-th
    value are exactly the k smallest. Otherwise, and on other devices (no host
    round trip), ``torch.kthvalue`` finds the threshold and equal entries are
    admitted in index order.
    """
    array = _host_array(costs)
    if array is not None and k < array.shape[1]:
        ordered = np.sort(array, axis=-1)
        kth = ordered[:, k - 1 : k]
        if not (ordered[:, k : k + 1] == kth).any():
            return torch.from_numpy((array <= kth).astype(array.dtype))
    threshold = torch.kthvalue(costs, k, dim=-1, keepdim=True).values
    below = costs < threshold
    tied = costs == threshold
    room = k - below.sum(dim=-1, keepdim=True)
    chosen = below | (tied & (torch.cumsum(tied, dim=-1) <= room))
    return chosen.to(costs.dtype)


def ranks(costs: Tensor) -> Tensor:
    """``argmin <costs, y>`` over permutations y of 1..n: rank 1 for the largest cost.

    A stable descending sort gives the lower index the better rank on ties. On
    the CPU, when no instance has two equal entries, numpy's (unstable) argsort gives
    the same order; otherwise, and on other devices, torch's stable sort.
    """
    n = costs.shape[-1]
    array = _host_array(costs)
    if array is not None and not (np.diff(np.sort(array, axis=-1), axis=-1) == 0).any():
        out = np.empty_like(array)
        # ascending order: the j-th smallest entry has rank n - j
        np.put_along_axis(out, np.argsort(array, axis=-1), np.arange(n, 0, -1, dtype=array.dtype),
                          axis=-1)
        return torch.from_numpy(out)
    position = torch.arange(1, n + 1, device=costs.device, dtype=costs.dtype)
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
