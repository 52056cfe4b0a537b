"""torch.func transforms over layers and losses: ``torch.func.grad`` gives every
estimator's and loss's eager gradient (a solve is hidden from the transform in
`Solver.solve_min`, and the autograd shells carry the gradient); ``torch.func.vmap`` is
refused with an error that says what to do (everything takes any batch shape); the
relaxations, which differentiate through cvxpylayers, say that torch.func cannot trace
them."""

from __future__ import annotations

import collections
import inspect

import pytest
import torch

import combolayer as cl
from combolayer.estimators import METHODS
from combolayer.estimators._relaxation import RelaxationEstimator
from combolayer.losses.base import LOSSES

SPEC = cl.problems.GridShortestPath(rows=4, cols=4, target=(3, 3))
TRACED = sorted(name for name, cls in METHODS.items()
                if not issubclass(cls, RelaxationEstimator))
RELAXED = sorted(set(METHODS) - set(TRACED))


def costs_and_target() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    w = torch.rand(3, *SPEC.cost_shape, generator=generator, dtype=torch.float64) + 0.1
    upstream = torch.randn(3, *SPEC.cost_shape, generator=generator, dtype=torch.float64)
    with torch.no_grad():
        target = cl.make_solver(SPEC).solve(torch.rand(3, *SPEC.cost_shape,
                                                       generator=generator,
                                                       dtype=torch.float64))
    return w, upstream, target


@pytest.mark.parametrize("name", TRACED)
def test_func_grad_gives_the_eager_gradient(name):
    """Two fresh layers (AIMLE adapts its state in backward), the same random draws."""
    w, upstream, target = costs_and_target()

    def loss(layer, costs):
        return (layer(costs, target=target) * upstream).sum()

    torch.manual_seed(1)
    eager_w = w.clone().requires_grad_()
    loss(cl.ComboLayer(SPEC, method=name).train(), eager_w).backward()
    torch.manual_seed(1)
    layer = cl.ComboLayer(SPEC, method=name).train()
    transformed = torch.func.grad(lambda costs: loss(layer, costs))(w)
    assert eager_w.grad.abs().sum() > 0  # a gradient that can differ
    torch.testing.assert_close(transformed, eager_w.grad, rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_vmap_over_a_layer_is_refused_with_what_to_do(name):
    w, _, target = costs_and_target()
    layer = cl.ComboLayer(SPEC, method=name).train()
    with pytest.raises(cl.InputError, match="vmap cannot map over a combolayer solve.*whole "
                                            "batch"):
        torch.func.vmap(lambda costs, y: layer(costs, target=y))(w, target)
    # per-sample gradients (vmap over grad) meet the same error
    with pytest.raises(cl.InputError, match="vmap cannot map over a combolayer solve"):
        torch.func.vmap(torch.func.grad(lambda costs, y: layer(costs, target=y).sum()))(
            w, target)


@pytest.mark.parametrize("name", RELAXED)
def test_a_relaxation_says_torch_func_cannot_trace_it(name):
    pytest.importorskip("cvxpylayers")
    w, _, target = costs_and_target()
    layer = cl.ComboLayer(SPEC, method=name).train()
    with pytest.raises(cl.InputError, match=f"method '{name}' .*cvxpylayers.*torch.autograd"):
        torch.func.grad(lambda costs: layer(costs, target=target).sum())(w)


def loss_value(loss: torch.nn.Module, predicted: torch.Tensor, costs: torch.Tensor,
               solutions: torch.Tensor) -> torch.Tensor:
    """The loss on ``predicted``, given what its signature asks for of the true costs
    and the true solutions."""
    given = {"cost_true": costs, "y_true": solutions}
    wanted = inspect.signature(loss.__call__).parameters
    return loss(predicted, **{name: value for name, value in given.items() if name in wanted})


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_func_grad_through_a_loss_gives_the_eager_gradient(name):
    if name == "CaVELoss":
        pytest.importorskip("clarabel")
    w, _, _ = costs_and_target()
    costs = 3 * w.flip(0)  # far enough from w for PG's finite difference to move
    solutions = cl.make_solver(SPEC).solve(costs)
    torch.manual_seed(1)
    eager_w = w.clone().requires_grad_()
    loss_value(LOSSES[name](SPEC), eager_w, costs, solutions).backward()
    torch.manual_seed(1)
    loss = LOSSES[name](SPEC)
    transformed = torch.func.grad(lambda p: loss_value(loss, p, costs, solutions))(w)
    assert eager_w.grad.abs().sum() > 0
    torch.testing.assert_close(transformed, eager_w.grad, rtol=0, atol=0)
    with pytest.raises(cl.InputError, match="vmap cannot map over a combolayer solve"):
        torch.func.vmap(lambda p, c, y: loss_value(loss, p[None], c[None], y[None]))(
            w, costs, solutions)


def test_a_solver_under_func_grad_answers_and_refuses_vmap():
    w, _, _ = costs_and_target()
    solver = cl.make_solver(SPEC)
    expected = solver.solve(w)
    seen = []

    def f(costs):
        seen.append(solver.solve(costs))
        return (costs * seen[-1]).sum()

    assert torch.equal(torch.func.grad(f)(w), expected)  # <costs, y> with y a constant
    assert torch.equal(seen[0], expected)
    with pytest.raises(cl.InputError, match="vmap cannot map over a combolayer solve"):
        torch.func.vmap(solver.solve)(w)


@pytest.mark.parametrize("name", ["identity", "blackbox"])
def test_func_grad_through_a_layer_with_a_solution_cache(name):
    """``solve_ratio < 1``: the pool's lookups and additions run outside the transform,
    so the pool keeps plain tensors (a kept wrapped one would outlive the transform)."""
    w, upstream, target = costs_and_target()

    def layer():
        return cl.ComboLayer(SPEC, method=name, solve_ratio=0.5,
                             generator=torch.Generator().manual_seed(3)).train()

    def loss(model, costs):
        return sum((model(costs + shift, target=target) * upstream).sum()
                   for shift in (0.0, 0.01, 0.02))

    eager_w = w.clone().requires_grad_()
    loss(layer(), eager_w).backward()
    model = layer()
    transformed = torch.func.grad(lambda costs: loss(model, costs))(w)
    torch.testing.assert_close(transformed, eager_w.grad, rtol=0, atol=0)
    pooled = model.pool.solutions
    assert len(pooled) > 0 and not torch._C._functorch.is_functorch_wrapped_tensor(pooled)
    assert torch.equal(model(w, target=target), model(w, target=target))  # usable afterwards


def test_func_grad_reaches_per_call_rows():
    """CombOptNet's gradient for the rows ``A``, ``b`` of a call, through torch.func.grad
    with respect to both: the solves read the rows the transform tracks."""
    spec = cl.ILP(shape=[3], num_aux=1,
                  constraints=[cl.Constraint(coefs=[1, 1, 1, 1], sense="<=", rhs=2)])
    generator = torch.Generator().manual_seed(4)
    w = torch.randn(2, 3, generator=generator, dtype=torch.float64)
    A = torch.rand(2, 2, 4, generator=generator, dtype=torch.float64)
    b = torch.ones(2, 2, dtype=torch.float64) * 1.5
    upstream = torch.randn(2, 3, generator=generator, dtype=torch.float64)

    def loss(layer, A, b):
        return (layer(w, A=A, b=b) * upstream).sum()

    eager_A, eager_b = A.clone().requires_grad_(), b.clone().requires_grad_()
    loss(cl.ComboLayer(spec, method="comboptnet").train(), eager_A, eager_b).backward()
    layer = cl.ComboLayer(spec, method="comboptnet").train()
    grad_A, grad_b = torch.func.grad(lambda A, b: loss(layer, A, b), argnums=(0, 1))(A, b)
    assert eager_A.grad.abs().sum() > 0
    torch.testing.assert_close(grad_A, eager_A.grad, rtol=0, atol=0)
    torch.testing.assert_close(grad_b, eager_b.grad, rtol=0, atol=0)


def test_jacrev_maps_over_a_pure_torch_backward_only():
    """jacrev vmaps the backward pass: Identity's (pure torch) gives autograd's Jacobian;
    a once-differentiable backward (every other estimator's) says what to use instead."""
    w, _, target = costs_and_target()
    identity = cl.ComboLayer(SPEC, method="identity")
    expected = torch.autograd.functional.jacobian(identity, w)
    torch.testing.assert_close(torch.func.jacrev(identity)(w), expected, rtol=0, atol=0)
    for name in ("blackbox", "perturbed"):
        layer = cl.ComboLayer(SPEC, method=name).train()
        with pytest.raises(cl.InputError, match="cannot map over this estimator's backward.*"
                                                "torch.autograd.functional.jacobian"):
            torch.func.jacrev(lambda costs, layer=layer: layer(costs, target=target))(w)


def test_vmap_over_a_target_rows_or_known_cost_alone_is_refused():
    w, _, target = costs_and_target()
    layer = cl.ComboLayer(SPEC, method="blackbox").train()
    with pytest.raises(cl.InputError, match="vmap cannot map over a combolayer solve"):
        torch.func.vmap(lambda y: layer(w, target=y))(target[None].expand(2, *target.shape))
    spec = cl.ILP(shape=[3], num_aux=1,
                  constraints=[cl.Constraint(coefs=[1, 1, 1, 1], sense="<=", rhs=2)])
    solver, costs = cl.make_solver(spec), torch.randn(2, 3)
    with pytest.raises(cl.InputError, match="vmap cannot map over a combolayer solve"):
        torch.func.vmap(lambda k: solver.solve(costs, known_cost=k))(torch.rand(4, 2, 4))
    A = torch.rand(2, 1, 4)
    with pytest.raises(cl.InputError, match="vmap cannot map over a combolayer solve"):
        torch.func.vmap(lambda b: solver.solve(costs, A=A, b=b))(torch.ones(4, 2, 1))


def tensors_reachable(*roots: object, limit: int = 50_000) -> list[torch.Tensor]:
    """Every tensor reachable from ``roots`` through attributes, containers and closures
    (a function's globals, modules and classes are not followed)."""
    import gc
    import types

    seen, queue, found = set(), collections.deque(roots), []
    while queue and len(seen) < limit:
        item = queue.popleft()
        if id(item) in seen or isinstance(item, type | types.ModuleType | str | bytes):
            continue
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, types.FunctionType):
            queue.extend(cell.cell_contents for cell in item.__closure__ or ())
        else:
            queue.extend(gc.get_referents(item))
    return found


def test_nothing_kept_after_a_transform_is_a_transforms_wrapper():
    """The known cost's per-dtype copies and CombOptNet's cached feasibility check are
    made outside the transform: a wrapper kept would outlive it."""
    from combolayer.estimators.comboptnet import _fixed_check

    spec = cl.ILP(shape=[3], num_aux=1, known_cost=[0.5, -0.2, 0.1, 0.3],
                  constraints=[cl.Constraint(coefs=[1, 1, 1, 1], sense="<=", rhs=2)])
    costs = torch.randn(2, 3)
    solutions = cl.make_solver(spec).solve(costs)
    loss = cl.losses.SPOPlusLoss(spec)
    torch.func.grad(lambda p: loss(p, costs, solutions))(costs.flip(0))
    layer = cl.ComboLayer(spec, method="comboptnet").train()
    torch.func.grad(lambda x: (layer(x) * x.detach()).sum())(costs)
    check = _fixed_check(cl.specs.canonical.canonical_form(spec), spec.num_vars)
    kept = tensors_reachable(loss, layer, check)
    assert len(kept) > 4  # the known cost's copies and the check's rows among them
    assert not any(torch._C._functorch.is_functorch_wrapped_tensor(t) for t in kept)
