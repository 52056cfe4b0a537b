"""The layer's solve as one custom operator, so that ``torch.compile`` sees one node.

A graph cannot trace a solver, and a custom operator takes no Python objects, so a
layer registers its `CompiledSolve` (estimator, solver) under two names the graph
carries: ``kind`` (`kind_of`: estimator, problem, backend; a constant, the same for
layers alike) and ``slot`` (`new_slot`: this layer's own, a graph input, so a new
model of the same layers meets the graph already compiled):

    combolayer::solve(Tensor costs, Tensor? noise, Tensor? target, Tensor? A, Tensor? b,
                      Tensor? known, Tensor? w, Tensor slot, Tensor call, int kind,
                      bool training, bool needs_grad, bool A_grad, bool b_grad,
                      bool keep_aux, bool aux_known_rescales) -> Tensor[]
    combolayer::solve_backward(Tensor grad, Tensor costs, Tensor? A, Tensor? b,
                               Tensor? known, Tensor[] saved, Tensor slot,
                               int kind) -> Tensor[]
    combolayer::no_gradient(Tensor grad, int kind) -> Tensor

``solve`` checks the values the layer leaves unchecked while traced (``w``,
``target``, per-call rows ``A x <= b``, a per-call known cost), adds the noise
and runs the estimator's forward as eager mode does; it returns the solution, with
``return_aux`` its auxiliaries (`Estimator.output_aux`), and the tensors the
estimator saves for its backward (its noise draws, its samples), and its fake
implementation takes their shapes from `Estimator.saved_like`. Instances the rows
leave infeasible are flagged there too (the layer's ``last_infeasible``).

Its autograd formula is the estimator's backward on those tensors: traced as it is
when the backward is pure torch (``Estimator.differentiable_backward``, Identity's
``-dL/dy``), else ``solve_backward``, a second opaque node (Blackbox's extra solve,
Perturbed's weighted noise), which returns the costs' gradient and, for an
estimator that gives per-call rows one (``row_gradients``), the rows'; where the
forward saved nothing for a call that needs a gradient (eval mode), ``no_gradient``,
which raises as eager mode's shell does. Noise an estimator draws is drawn inside
``solve``, from the estimator's generator or torch's global one, at the point of the
call where eager mode draws it, so a seed gives the same draws in both modes.

Estimators that set ``Estimator.compiles_whole`` use these operators; the layer
keeps its autograd shells for the others, which compile with a graph break at the
solve. Only traced code uses them: eager mode keeps the layer's autograd shells,
the hot path docs/measurements/overhead.md measures.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..backends.rows import check_in_range
from ..backends.solver import Recorder, check_costs, check_values
from ..backends.wrapper import KnownBound, RowBound
from ..estimators.base import (
    aux_of_output,
    check_upstream,
    no_gradient_error,
    refuse_instance_known_cost,
)
from ..specs.base import Spec
from .projection import check_known_on_aux

#: Each layer's `CompiledSolve` by its slot, and the latest of each kind by its kind.
_SLOTS: weakref.WeakValueDictionary[int, CompiledSolve] = weakref.WeakValueDictionary()
_KINDS: weakref.WeakValueDictionary[int, CompiledSolve] = weakref.WeakValueDictionary()
#: The layers whose noise a compiled graph draws (`draw_noise`), by slot.
_NOISY: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_NEXT_SLOT = itertools.count()


def new_slot() -> Tensor:
    """A slot no other layer of this process has: a 0-d int64 tensor on the CPU, an input
    of a compiled graph (an int would be a constant of it, and each new layer would
    compile the graph again: torch.compile fails on the ninth with ``fullgraph=True``)."""
    return torch.tensor(next(_NEXT_SLOT))


def kind_of(estimator: Any, solver: Any) -> int:
    """What a compiled graph of the solve depends on: the estimator (its class and
    fields), the problem and the backend, in 48 bits of their digest. torch.compile's
    caches outlive the process and key a graph by its constants, the kind among them,
    so a cached graph only ever meets a kind that means the same solve (a counter alone
    let a graph traced for Identity's backward serve Blackbox's in a later process)."""
    named = f"{estimator!r}|{solver.spec.model_dump_json()}|{solver.backend}"
    # less the addresses of objects that repr by them (a generator: each model its own),
    # which change nothing a graph traces
    named = _ADDRESS.sub("", named)
    return int.from_bytes(hashlib.blake2b(named.encode(), digest_size=6).digest(), "big")


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


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
    """What ``combolayer::solve`` runs for one layer, found by its `slot`.

    ``solver`` is the one the estimator was built on (with the layer's clipping of
    negative perturbations, or the solution cache, where the layer has them);
    ``floor`` is the mask of entries that must be non-negative, or None; ``flag`` is
    called with the positions of the instances a call's per-call rows left infeasible
    and the rows (the layer's ``last_infeasible``), or None."""

    estimator: Any
    solver: Any
    floor: Tensor | None = None
    flag: Callable[[set[int], Tensor], None] | None = None
    kind: int = field(init=False)
    slot: Tensor = field(init=False)

    def __post_init__(self) -> None:
        self.kind = kind_of(self.estimator, self.solver)
        self.slot = new_slot()
        _SLOTS[int(self.slot)] = _KINDS[self.kind] = self

    def __call__(self, costs: Tensor, noise: Tensor | None, target: Tensor | None = None,
                 training: bool = True, needs_grad: bool = True, *, A: Tensor | None = None,
                 b: Tensor | None = None, known: Tensor | None = None,
                 w: Tensor | None = None, A_grad: bool = False, b_grad: bool = False,
                 keep_aux: bool = False, aux_known_rescales: bool = False
                 ) -> Tensor | tuple[Tensor, Tensor]:
        """The layer's solution for minimisation costs ``costs`` plus ``noise`` (or
        None), differentiable in ``costs`` (and in per-call rows ``A``, ``b`` where
        ``A_grad``, ``b_grad``): one node in a compiled graph. ``target``, ``training``,
        ``needs_grad`` and the known cost ``known`` (minimisation form) reach the
        estimator as in eager mode; with ``keep_aux``, ``(y, aux)``. ``w``, the user's cost
        before the projection, is checked as eager mode checks it. With
        ``aux_known_rescales`` the projection rescaled ``w``, which a known cost on the
        auxiliaries forbids (`project_with_known`): checked on the values here."""
        outputs = torch.ops.combolayer.solve(costs, noise, target, A, b, known, w, self.slot,
                                             call_token(), self.kind, training, needs_grad,
                                             A_grad, b_grad, keep_aux, aux_known_rescales)
        return (outputs[0], outputs[1]) if keep_aux else outputs[0]

    def saved_like(self, costs: Tensor, training: bool, needs_grad: bool,
                   A: Tensor | None = None, b: Tensor | None = None, A_grad: bool = False,
                   b_grad: bool = False) -> tuple[Tensor, ...] | None:
        """Empty tensors shaped as those the estimator's forward saves for ``costs`` (and
        the rows), or None when it saves none (no gradient path)."""
        if not needs_grad:
            return None
        return self.estimator.saved_like(self.solver, _as_given(costs, needs_grad), training,
                                         **self._rows(A, b, A_grad, b_grad))

    def aux_like(self, costs: Tensor) -> Tensor:
        """An empty tensor shaped as ``return_aux``'s auxiliaries for ``costs``."""
        batch = costs.shape[: costs.dim() - len(self.solver.cost_shape)]
        return costs.new_empty((*batch, self.solver.num_aux))

    def forward(self, costs: Tensor, noise: Tensor | None, target: Tensor | None,
                A: Tensor | None, b: Tensor | None, known: Tensor | None, w: Tensor | None,
                training: bool, needs_grad: bool, A_grad: bool, b_grad: bool, keep_aux: bool,
                aux_known_rescales: bool) -> list[Tensor]:
        spec = self.solver.spec
        # the call's own inputs first, as eager mode checks them (a projection normalises
        # a cost of 1e16 back below the bound; a NaN known cost makes the costs NaN too)
        for name, value in (("w", w), ("target", target)):
            if value is not None:
                check_values(spec, value, name)
        for name, value in (("A", A), ("b", b), ("known_cost", known)):
            if value is not None:
                check_in_range(name, value, spec.label)
        check_costs(spec, costs, "w after projection")
        if self.floor is not None:  # on the total the solver sees, the known cost added
            check_floor(spec, self.floor, costs if known is None else
                        costs + known[..., : spec.num_outputs].reshape(costs.shape))
        if aux_known_rescales:
            check_known_on_aux(spec, known)
        if known is not None:
            refuse_instance_known_cost(self.estimator)
        if noise is not None:
            costs = costs + noise
        # what the solves produce besides the solutions: the auxiliaries, the instances
        # the rows left infeasible (eager mode's `Recorder` around the same solver)
        recorder = Recorder(self.solver, keep_aux) if keep_aux or A is not None else None
        solver = self._bound(recorder or self.solver, A, b, known)
        output, saved = self.estimator.forward(
            solver, _as_given(costs, needs_grad), target=target, training=training,
            **self._rows(A, b, A_grad, b_grad))
        if A is not None and self.flag is not None:
            self.flag(recorder.infeasible, A)
        if not needs_grad:
            saved = None
        expected = self.saved_like(costs, training, needs_grad, A, b, A_grad, b_grad)
        got = None if saved is None else tuple(saved)
        if _shapes(got) != _shapes(expected):
            raise RuntimeError(
                f"{type(self.estimator).__name__}.saved_like declares saved tensors "
                f"{_shapes(expected)} but its forward saved {_shapes(got)}: torch.compile "
                "needs the two to agree")
        aux = [aux_of_output(self.estimator, self.solver, output, recorder.aux)] \
            if keep_aux else []
        return _fresh([output, *aux, *(got or ())], (costs, noise, target, A, b, known, w))

    def backward(self, grad: Tensor, costs: Tensor, A: Tensor | None, b: Tensor | None,
                 known: Tensor | None, saved: list[Tensor], slot: Tensor
                 ) -> tuple[Tensor, ...]:
        """``(dL/dcosts, dL/dA, dL/db)``, the rows' None where they have no gradient, for
        the layer in ``slot`` (this one, or one alike: a traced backward is the same)."""
        if self.estimator.differentiable_backward:
            # traced: a backward of torch ops calls no solver, so none is bound (binding
            # a known cost reads its values)
            return self.estimator_backward(grad, costs, A, b, None, saved, bind=False)
        grads = torch.ops.combolayer.solve_backward(grad, costs, A, b, known, saved, slot,
                                                    self.kind)
        return tuple(grads) if len(grads) == 3 else (grads[0], None, None)

    def estimator_backward(self, grad: Tensor, costs: Tensor, A: Tensor | None,
                           b: Tensor | None, known: Tensor | None,
                           saved: list[Tensor], bind: bool = True) -> tuple[Tensor, ...]:
        """``(dL/dcosts, dL/dA, dL/db)`` from the estimator's backward, on the solver with
        the call's rows and known cost bound (``bind``), as eager mode's shells call it."""
        solver = self._bound(self.solver, A, b, known) if bind else self.solver
        if self.estimator.row_gradients:
            return tuple(self.estimator.backward(solver, grad, costs, A, b, *saved))
        return self.estimator.backward(solver, grad, costs, *saved), None, None

    def _bound(self, solver: Any, A: Tensor | None, b: Tensor | None,
               known: Tensor | None) -> Any:
        """``solver`` with the call's known cost, then its rows, bound (eager mode's order)."""
        if known is not None:
            solver = KnownBound(solver, known)
        return solver if A is None else RowBound(solver, A, b)

    def _rows(self, A: Tensor | None, b: Tensor | None, A_grad: bool,
              b_grad: bool) -> dict[str, Any]:
        """The rows as a row-gradient estimator's forward takes them (each requiring a
        gradient where the layer's did), nothing for any other estimator."""
        if not self.estimator.row_gradients:
            return {}
        if A is None:
            return {"A": None, "b": None}
        return {"A": _as_given(A, A_grad), "b": _as_given(b, b_grad)}


def _fresh(outputs: list[Tensor], inputs: tuple[Tensor | None, ...]) -> list[Tensor]:
    """``outputs`` as an operator may return them: aliasing neither its ``inputs`` nor
    each other (a clone where one would), and contiguous, as the fake implementation's
    ``empty_like`` (inductor checks strides; a sample axis moved to the front is not)."""
    seen = {t.untyped_storage().data_ptr() for t in inputs if t is not None and t.numel()}
    fresh = []
    for t in outputs:
        t = t.detach().contiguous()
        pointer = t.untyped_storage().data_ptr() if t.numel() else None
        if pointer in seen:
            t = t.clone()
        seen.add(pointer)
        fresh.append(t)
    return fresh


def _as_given(costs: Tensor, needs_grad: bool) -> Tensor:
    """``costs`` as the estimator sees them in eager mode: requiring a gradient when the
    layer asks for one (inside an operator no tensor does; ScoreFunction perturbs only
    the inputs that require one)."""
    return costs.detach().requires_grad_() if needs_grad else costs


def _shapes(tensors: tuple[Tensor, ...] | None) -> list[tuple] | None:
    if tensors is None:
        return None
    return [(tuple(t.shape), t.dtype) for t in tensors]


def _entry(slot: Tensor) -> CompiledSolve:
    """The layer's own solve, in ``slot`` (a real tensor: the operators' bodies)."""
    entry = _SLOTS.get(int(slot))
    if entry is None:
        raise RuntimeError(f"combolayer::solve: no layer holds slot {int(slot)} any more "
                           "(the layer was deleted); compile the model that holds it again")
    return entry


def _alike(kind: int) -> CompiledSolve:
    """A layer's solve of ``kind``, any alike (what tracing needs: shapes, and a backward
    of torch ops, the same for all of them)."""
    entry = _KINDS.get(kind) or next(
        (entry for entry in list(_SLOTS.values()) if entry.kind == kind), None)
    if entry is None:
        raise RuntimeError(f"combolayer::solve: no layer of kind {kind} is left (the "
                           "layers were deleted); compile the model that holds one again")
    return entry


def call_token() -> Tensor:
    """A tensor of its own for each call of ``solve`` and ``draw_noise`` in a traced graph
    (``call``; never read): two calls alike differ in it, so that AOT autograd's
    common-subexpression elimination, which keeps every ``aten.empty``, keeps both (two
    samples of one layer came out as one, and a solution pool took one solve of two)."""
    return torch.empty(0)


@torch.library.custom_op("combolayer::solve", mutates_args=())
def _solve(costs: Tensor, noise: Tensor | None, target: Tensor | None, A: Tensor | None,
           b: Tensor | None, known: Tensor | None, w: Tensor | None, slot: Tensor,
           call: Tensor, kind: int, training: bool, needs_grad: bool, A_grad: bool,
           b_grad: bool, keep_aux: bool, aux_known_rescales: bool) -> list[Tensor]:
    return _entry(slot).forward(costs, noise, target, A, b, known, w, training, needs_grad,
                                A_grad, b_grad, keep_aux, aux_known_rescales)


@_solve.register_fake
def _(costs: Tensor, noise: Tensor | None, target: Tensor | None, A: Tensor | None,
      b: Tensor | None, known: Tensor | None, w: Tensor | None, slot: Tensor, call: Tensor,
      kind: int, training: bool, needs_grad: bool, A_grad: bool, b_grad: bool,
      keep_aux: bool, aux_known_rescales: bool) -> list[Tensor]:
    entry = _alike(kind)
    saved = entry.saved_like(costs, training, needs_grad, A, b, A_grad, b_grad)
    aux = [entry.aux_like(costs)] if keep_aux else []
    return [torch.empty_like(costs), *aux, *(torch.empty_like(t) for t in saved or ())]


def _setup_context(ctx: Any, inputs: tuple, output: list[Tensor]) -> None:
    (costs, noise, _, A, b, known, _, slot, _, kind, training, needs_grad, A_grad, b_grad,
     keep_aux, _) = inputs
    ctx.kind = kind
    # None: the estimator's forward saved nothing, so no gradient reaches the costs
    ctx.gradient = _alike(kind).saved_like(costs, training, needs_grad, A, b, A_grad,
                                           b_grad) is not None
    # a call that needs a gradient but got no path to one (eval mode): its backward raises
    ctx.refused = needs_grad and not ctx.gradient
    # the backward sees the solver's input, as the estimators' shells save it
    ctx.save_for_backward(costs if noise is None else costs + noise, A, b, known, slot,
                          *output[1 + keep_aux:])


def _backward(ctx: Any, grads: list[Tensor]) -> tuple[Tensor | None, ...]:
    no_grad = (None,) * 9  # the slot, the call's token, the kind and the booleans
    if ctx.refused:
        return (torch.ops.combolayer.no_gradient(grads[0], ctx.kind), None, None, None, None,
                None, None, *no_grad)
    if not ctx.gradient:
        return None, None, None, None, None, None, None, *no_grad
    costs, A, b, known, slot, *saved = ctx.saved_tensors
    d_costs, d_A, d_b = _alike(ctx.kind).backward(grads[0], costs, A, b, known, saved, slot)
    return d_costs, None, None, d_A, d_b, None, None, *no_grad


_solve.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op("combolayer::solve_backward", mutates_args=())
def _solve_backward(grad: Tensor, costs: Tensor, A: Tensor | None, b: Tensor | None,
                    known: Tensor | None, saved: list[Tensor], slot: Tensor,
                    kind: int) -> list[Tensor]:
    check_upstream(grad)
    with torch.no_grad():
        d_costs, d_A, d_b = _entry(slot).estimator_backward(grad, costs, A, b, known, saved)
    grads = [d_costs]
    if _gives_rows(kind, A):
        grads += [torch.zeros_like(A) if d_A is None else d_A,
                  torch.zeros_like(b) if d_b is None else d_b]
    return _fresh(grads, (grad, costs, A, b, known, *saved))


@_solve_backward.register_fake
def _(grad: Tensor, costs: Tensor, A: Tensor | None, b: Tensor | None, known: Tensor | None,
      saved: list[Tensor], slot: Tensor, kind: int) -> list[Tensor]:
    if not _gives_rows(kind, A):
        return [torch.empty_like(costs)]
    return [torch.empty_like(costs), torch.empty_like(A), torch.empty_like(b)]


@torch.library.custom_op("combolayer::no_gradient", mutates_args=())
def _no_gradient(grad: Tensor, kind: int) -> Tensor:
    raise no_gradient_error(_alike(kind).estimator)


@_no_gradient.register_fake
def _(grad: Tensor, kind: int) -> Tensor:
    return torch.empty_like(grad)


def _gives_rows(kind: int, A: Tensor | None) -> bool:
    """Whether ``solve_backward`` returns the rows' gradients too: a row-gradient
    estimator's, on a call with rows."""
    return A is not None and _alike(kind).estimator.row_gradients


def noise_slot(layer: Any) -> Tensor:
    """A slot (`new_slot`) under which a compiled graph finds ``layer``'s noise
    (`draw_noise`)."""
    slot = new_slot()
    _NOISY[int(slot)] = layer
    return slot


def draw_noise(layer: Any, slot: Tensor, w: Tensor, sample: bool) -> Tensor:
    """``layer``'s ``sample_noise`` (``sample``) or margin ``noise``, drawn for costs ``w``
    from its generator (or torch's global one) and cast to ``w``: in eager mode directly,
    and inside a compiled graph as the opaque ``combolayer::draw_noise``, which draws the
    same values at the same point (a graph can trace neither a ``torch.Generator`` nor
    SumOfGamma's rejection loop)."""
    if torch.compiler.is_compiling():
        return torch.ops.combolayer.draw_noise(w.detach(), slot, call_token(), sample)
    noise = layer.sample_noise if sample else layer.noise
    return noise.sample(w.shape, generator=layer.generator).to(w)


@torch.library.custom_op("combolayer::draw_noise", mutates_args=())
def _draw_noise(like: Tensor, slot: Tensor, call: Tensor, sample: bool) -> Tensor:
    layer = _NOISY.get(int(slot))
    if layer is None:
        raise RuntimeError(f"combolayer::draw_noise: no layer holds slot {int(slot)} any "
                           "more (the layer was deleted); compile the model that holds it again")
    return draw_noise(layer, slot, like, sample)


@_draw_noise.register_fake
def _(like: Tensor, slot: Tensor, call: Tensor, sample: bool) -> Tensor:
    return torch.empty_like(like)
