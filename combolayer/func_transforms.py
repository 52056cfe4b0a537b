"""Where combolayer meets torch.func's transforms (``torch.func.grad``, ``vmap``, ...).

A solve reads its costs on the host, and a tensor a transform tracks is a wrapper with
no storage; every op on a tensor under a transform makes another wrapper. So a solve,
and anything that keeps tensors across calls (the solution pool, a cache), runs on the
values the transform tracks (`tracked`), with functorch's dispatch off
(`outside_transforms`): its answers are constants to the transform, as a solver's are
to autograd, and the estimators' autograd shells carry the gradient. ``vmap`` hides
each instance's costs from the solver, so it is refused with `VMAP_REFUSED`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch._C._functorch as functorch

from .errors import InputError

#: Whether a torch.func transform (vmap, grad, ...) is active: one C call.
transforms_active = torch._C._are_functorch_transforms_active

#: A context in which functorch's dispatch is off: ops on plain tensors make plain
#: tensors, also under an active transform.
outside_transforms = torch._C._DisableFuncTorch

#: Why a solve refuses torch.func.vmap, and what to do instead.
VMAP_REFUSED = (
    "torch.func.vmap cannot map over a combolayer solve (a layer's, a loss's or a solver's): "
    "the solver reads each instance's costs, which vmap hides; layers, losses and solvers "
    "take any leading batch shape, so call them on the whole batch (stack the mapped inputs)")


def wrapped(value: Any) -> bool:
    """Whether ``value`` is a tensor that a torch.func transform tracks (a wrapper)."""
    return isinstance(value, torch.Tensor) and functorch.is_functorch_wrapped_tensor(value)


def vmapped(value: Any) -> bool:
    """Whether torch.func.vmap maps over ``value``, at any level of transforms."""
    while wrapped(value):
        if functorch.is_batchedtensor(value):
            return True
        value = functorch.get_unwrapped(value)
    return False


def tracked(value: Any) -> Any:
    """``value`` as the tensor a torch.func transform tracks (``torch.func.grad``'s
    wrappers taken off, at every level), or ``value`` itself where it is no wrapper;
    `InputError` (`VMAP_REFUSED`) where vmap maps over it."""
    while wrapped(value):
        if functorch.is_batchedtensor(value):
            raise InputError(VMAP_REFUSED)
        value = functorch.get_unwrapped(value)
    return value


def check_not_vmapped(*values: Any) -> None:
    """`InputError` (`VMAP_REFUSED`) where torch.func.vmap maps over one of ``values``
    (None and non-tensors pass)."""
    for value in values:
        tracked(value)


def host_array(tensor: Any) -> np.ndarray:
    """``tensor``'s values as a float64 numpy array on the host, under a transform too
    (the values it tracks): for code outside a solve that reads a batch on the host."""
    with outside_transforms():
        return tracked(torch.as_tensor(tensor)).detach().to("cpu", torch.float64).numpy()


def hidden_from_transforms(method: Callable) -> Callable:
    """``method``, of an object that keeps tensors across calls (the solution pool), run
    on the tensors a transform tracks with functorch's dispatch off: what it returns and
    keeps is plain (a wrapper kept would outlive its transform)."""

    @functools.wraps(method)
    def hidden(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not transforms_active():
            return method(self, *args, **kwargs)
        with outside_transforms():
            return method(self, *map(tracked, args),
                          **{key: tracked(value) for key, value in kwargs.items()})

    return hidden
