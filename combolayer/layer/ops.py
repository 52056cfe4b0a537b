"""The layer's solve as one custom operator, so that ``torch.compile`` sees one node.

A compiled graph cannot trace a solver (numpy, HiGHS, a worker pool), and a custom
operator cannot take Python objects, so a layer registers what its solve needs,
a `CompiledSolve` (estimator, solver), under an integer handle when it is
built, and the graph carries the handle:

    combolayer::solve(Tensor costs, Tensor? noise, Tensor? target, int handle,
                      bool training, bool needs_grad) -> Tensor[]
    combolayer::solve_backward(Tensor grad, Tensor costs, Tensor[] saved, int handle)
        -> Tensor

``solve`` checks the costs (the values the layer leaves unchecked while it is
traced), adds the noise and runs the estimator's forward; it returns the solution
and the tensors the estimator saves for its backward (its noise draws, its
samples), and its fake implementation takes their shapes from
`Estimator.saved_like`. Its autograd formula is the estimator's backward on those
tensors: traced as it is when the backward is pure torch
(``Estimator.differentiable_backward``, Identity's ``-dL/dy``), else
``solve_backward``, a second opaque node (Blackbox's extra solve, Perturbed's
weighted noise). Noise an estimator draws is drawn inside ``solve``, from the
estimator's generator or torch's global one, at the point of the call where eager
mode draws it, so a seed gives the same draws in both modes.

Estimators that set ``Estimator.compiles_whole`` use these operators; the layer
keeps its autograd shells for the others, which compile with a graph break at the
solve. Only traced code uses them: eager mode keeps the layer's autograd shells,
the hot path docs/measurements/overhead.md measures.
"""

from __future__ import annotations

import hashlib
import itertools
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..backends.solver import check_costs
from ..estimators.base import check_upstream, costs_backward
from ..specs.base import Spec

_HANDLES: weakref.WeakValueDictionary[int, CompiledSolve] = weakref.WeakValueDictionary()
#: The layers whose noise a compiled graph draws (`draw_noise`), by handle.
_NOISY: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_NOISE_HANDLES = itertools.count()


def new_handle(estimator: Any, solver: Any) -> int:
    """A free handle that names what a compiled graph of the solve depends on: the
    estimator (its class and fields), the problem and the backend, in 48 bits of their
    digest, then a count of the layers alike in this process. torch.compile's caches
    outlive the process and key a graph by its constants, the handle among them, so a
    cached graph only ever meets a handle that means the same solve (a counter alone
    let a graph traced for Identity's backward serve Blackbox's in a later process)."""
    named = f"{estimator!r}|{solver.spec.model_dump_json()}|{solver.backend}"
    digest = hashlib.blake2b(named.encode(), digest_size=6).digest()
    base = int.from_bytes(digest, "big") << 14
    return next(handle for handle in itertools.count(base) if handle not in _HANDLES)


def check_floor(spec: Spec, floor: Tensor, costs: Tensor) -> None:
    """`Spec.negative_cost_error` when an entry of ``costs`` (``(*batch,
    *cost_shape)``, the solver's input before the layer's noise) that ``floor`` (a
    flat boolean mask, `Spec.nonnegative_costs`) marks is negative."""
    given = costs.reshape(-1, spec.num_outputs)[:, floor.to(costs.device)]
    if (given < 0).any():
        b, j = (given < 0).nonzero()[0].tolist()
        sign = 1.0 if spec.sense == "min" else -1.0  # the value in the spec's own sense
        raise spec.negative_cost_error(
            f"w after projection, instance {b}, value {sign * float(given[b, j]):.4g}")


@dataclass(eq=False)
class CompiledSolve:
    """What ``combolayer::solve`` runs for one layer, found by `handle`.

    ``solver`` is the one the estimator was built on (with the layer's clipping of
    negative perturbations, or the solution cache, where the layer has them);
    ``floor`` is the mask of entries that must be non-negative, or None."""

    estimator: Any
    solver: Any
    floor: Tensor | None = None
    handle: int = field(init=False)

    def __post_init__(self) -> None:
        self.handle = new_handle(self.estimator, self.solver)
        _HANDLES[self.handle] = self

    def __call__(self, costs: Tensor, noise: Tensor | None, target: Tensor | None = None,
                 training: bool = True, needs_grad: bool = True) -> Tensor:
        """The layer's solution for minimisation costs ``costs`` plus ``noise`` (or
        None), differentiable in ``costs``: one node in a compiled graph. ``target``,
        ``training`` and ``needs_grad`` reach the estimator as in eager mode."""
        return torch.ops.combolayer.solve(costs, noise, target, self.handle, training,
                                          needs_grad)[0]

    def saved_like(self, costs: Tensor, training: bool,
                   needs_grad: bool) -> tuple[Tensor, ...] | None:
        """Empty tensors shaped as those the estimator's forward saves for ``costs``, or
        None when it saves none (no gradient path)."""
        if not needs_grad:
            return None
        return self.estimator.saved_like(self.solver, _as_given(costs, needs_grad), training)

    def forward(self, costs: Tensor, noise: Tensor | None, target: Tensor | None,
                training: bool, needs_grad: bool) -> list[Tensor]:
        check_costs(self.solver.spec, costs, "w after projection")
        if self.floor is not None:
            check_floor(self.solver.spec, self.floor, costs)
        if noise is not None:
            costs = costs + noise
        output, saved = self.estimator.forward(
            self.solver, _as_given(costs, needs_grad), target=target, training=training)
        if not needs_grad:
            saved = None
        expected = self.saved_like(costs, training, needs_grad)
        got = None if saved is None else tuple(saved)
        if _shapes(got) != _shapes(expected):
            raise RuntimeError(
                f"{type(self.estimator).__name__}.saved_like declares saved tensors "
                f"{_shapes(expected)} but its forward saved {_shapes(got)}: torch.compile "
                "needs the two to agree")
        # an operator's outputs may alias neither its inputs nor each other
        seen = {t.untyped_storage().data_ptr() for t in (costs, noise, target)
                if t is not None and t.numel()}
        outputs = []
        for t in (output, *(got or ())):
            # contiguous, as the fake implementation's empty_like: inductor checks strides
            # (a sample axis moved to the front is not)
            t = t.detach().contiguous()
            pointer = t.untyped_storage().data_ptr() if t.numel() else None
            if pointer in seen:
                t = t.clone()
            seen.add(pointer)
            outputs.append(t)
        return outputs

    def backward(self, grad: Tensor, costs: Tensor, saved: list[Tensor]) -> Tensor:
        if self.estimator.differentiable_backward:
            return self.estimator_backward(grad, costs, saved)
        return torch.ops.combolayer.solve_backward(grad, costs, saved, self.handle)

    def estimator_backward(self, grad: Tensor, costs: Tensor, saved: list[Tensor]) -> Tensor:
        """``dL/dcosts`` from the estimator's backward (the layer hands the operator no
        rows: `combolayer.estimators.base.costs_backward`)."""
        return costs_backward(self.estimator, self.solver, grad, costs, *saved)


def _as_given(costs: Tensor, needs_grad: bool) -> Tensor:
    """``costs`` as the estimator sees them in eager mode: requiring a gradient when the
    layer asks for one (inside an operator no tensor does; ScoreFunction perturbs only
    the inputs that require one)."""
    return costs.detach().requires_grad_() if needs_grad else costs


def _shapes(tensors: tuple[Tensor, ...] | None) -> list[tuple] | None:
    if tensors is None:
        return None
    return [(tuple(t.shape), t.dtype) for t in tensors]


def _entry(handle: int) -> CompiledSolve:
    entry = _HANDLES.get(handle)
    if entry is None:
        raise RuntimeError(f"combolayer::solve: no layer holds handle {handle} any more "
                           "(the layer was deleted); compile the model that holds it again")
    return entry


@torch.library.custom_op("combolayer::solve", mutates_args=())
def _solve(costs: Tensor, noise: Tensor | None, target: Tensor | None, handle: int,
           training: bool, needs_grad: bool) -> list[Tensor]:
    return _entry(handle).forward(costs, noise, target, training, needs_grad)


@_solve.register_fake
def _(costs: Tensor, noise: Tensor | None, target: Tensor | None, handle: int,
      training: bool, needs_grad: bool) -> list[Tensor]:
    saved = _entry(handle).saved_like(costs, training, needs_grad)
    return [torch.empty_like(costs), *(torch.empty_like(t) for t in saved or ())]


def _setup_context(ctx: Any, inputs: tuple, output: list[Tensor]) -> None:
    costs, noise, _, handle, training, needs_grad = inputs
    ctx.handle = handle
    # None: the estimator's forward saved nothing, so no gradient reaches the costs
    ctx.gradient = _entry(handle).saved_like(costs, training, needs_grad) is not None
    # the backward sees the solver's input, as the estimators' shells save it
    ctx.save_for_backward(costs if noise is None else costs + noise, *output[1:])


def _backward(ctx: Any, grads: list[Tensor]) -> tuple[Tensor | None, None, None, None, None,
                                                      None]:
    if not ctx.gradient:
        return None, None, None, None, None, None
    costs, *saved = ctx.saved_tensors
    return _entry(ctx.handle).backward(grads[0], costs, saved), None, None, None, None, None


_solve.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op("combolayer::solve_backward", mutates_args=())
def _solve_backward(grad: Tensor, costs: Tensor, saved: list[Tensor], handle: int) -> Tensor:
    check_upstream(grad)
    with torch.no_grad():
        return _entry(handle).estimator_backward(grad, costs, saved)


@_solve_backward.register_fake
def _(grad: Tensor, costs: Tensor, saved: list[Tensor], handle: int) -> Tensor:
    return torch.empty_like(costs)


def noise_handle(layer: Any) -> int:
    """A handle under which a compiled graph finds ``layer``'s noise (`draw_noise`)."""
    handle = next(_NOISE_HANDLES)
    _NOISY[handle] = layer
    return handle


def draw_noise(layer: Any, handle: int, w: Tensor, sample: bool) -> Tensor:
    """``layer``'s ``sample_noise`` (``sample``) or margin ``noise``, drawn for costs ``w``
    from its generator (or torch's global one) and cast to ``w``: in eager mode directly,
    and inside a compiled graph as the opaque ``combolayer::draw_noise``, which draws the
    same values at the same point (a graph can trace neither a ``torch.Generator`` nor
    SumOfGamma's rejection loop)."""
    if torch.compiler.is_compiling():
        return torch.ops.combolayer.draw_noise(w.detach(), handle, sample)
    noise = layer.sample_noise if sample else layer.noise
    return noise.sample(w.shape, generator=layer.generator).to(w)


@torch.library.custom_op("combolayer::draw_noise", mutates_args=())
def _draw_noise(like: Tensor, handle: int, sample: bool) -> Tensor:
    layer = _NOISY.get(handle)
    if layer is None:
        raise RuntimeError(f"combolayer::draw_noise: no layer holds handle {handle} any "
                           "more (the layer was deleted); compile the model that holds it again")
    return draw_noise(layer, handle, like, sample)


@_draw_noise.register_fake
def _(like: Tensor, handle: int, sample: bool) -> Tensor:
    return torch.empty_like(like)
