"""RFWO and RFY: the regularised solution is the projection of -c/lam on conv(Y); vs PyEPO."""

from __future__ import annotations

import pytest
import torch
from pyepo_kit import POINTS, SPEC_MAX, SPEC_MIN, brute_min, pyepo_shortest_path, sign_of

import combolayer as cl


def projection(theta: torch.Tensor) -> torch.Tensor:
    """argmin_{mu in conv(POINTS)} ||mu - theta||, by cvxpy, row by row."""
    cp = pytest.importorskip("cvxpy")
    out = []
    for row in theta:
        a = cp.Variable(len(POINTS), nonneg=True)
        mu = POINTS.numpy().T @ a
        problem = cp.Problem(cp.Minimize(cp.sum_squares(mu - row.numpy())), [cp.sum(a) == 1])
        problem.solve(solver=cp.CLARABEL)
        out.append(torch.as_tensor(POINTS.numpy().T @ a.value))
    return torch.stack(out)


@pytest.mark.parametrize("spec", [SPEC_MIN, SPEC_MAX], ids=["min", "max"])
def test_rfwo_forward_is_the_projection_and_backward_its_jacobian(spec):
    gen = torch.Generator().manual_seed(3)
    lam, sign = 0.7, sign_of(spec)
    w = torch.randn(4, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    method = cl.RegularizedFrankWolfe(lam=lam, max_iter=2000, tol=1e-12)
    layer = cl.ComboLayer(spec, method=method, projection="none")
    y = layer(w)
    torch.testing.assert_close(y.detach(), projection(-sign * w.detach() / lam),
                               atol=1e-5, rtol=0)
    g = torch.randn(4, 4, generator=gen, dtype=torch.float64)
    (y * g).sum().backward()
    # the map is piecewise affine: central differences of the forward give its Jacobian
    eps = 1e-5
    with torch.no_grad():
        numeric = torch.zeros_like(w)
        for i in range(4):
            bump = torch.zeros_like(w)
            bump[:, i] = eps
            numeric[:, i] = ((layer(w + bump) - layer(w - bump)) * g).sum(-1) / (2 * eps)
    torch.testing.assert_close(w.grad, numeric, atol=1e-5, rtol=1e-4)
    assert torch.equal(layer.eval()(w.detach()), brute_min(sign * w.detach()))


@pytest.mark.parametrize("spec", [SPEC_MIN, SPEC_MAX], ids=["min", "max"])
def test_rfy_matches_its_formula(spec):
    gen = torch.Generator().manual_seed(4)
    lam, sign = 1.3, sign_of(spec)
    w = torch.randn(4, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    y_true = brute_min(sign * torch.randn(4, 4, generator=gen, dtype=torch.float64))
    loss = cl.losses.RegularizedFenchelYoungLoss(spec, lam=lam, max_iter=2000, tol=1e-12,
                                                 reduction="none")(w, y_true)
    loss.sum().backward()
    c = sign * w.detach()
    y_lam = projection(-c / lam)
    value = (0.5 * lam * (y_true.square().sum(-1) - y_lam.square().sum(-1))
             + (c * (y_true - y_lam)).sum(-1))
    torch.testing.assert_close(loss.detach(), value, atol=1e-5, rtol=0)
    assert (loss >= -1e-9).all()
    torch.testing.assert_close(w.grad, sign * (y_true - y_lam), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="lam must be a finite number > 0, got -1"):
        cl.losses.RegularizedFenchelYoungLoss(spec, lam=-1)


def test_rfwo_and_rfy_agree_with_pyepo():
    # Gurobi and HiGHS return the same vertices; the iterates then agree up to rounding.

    model, spec = pyepo_shortest_path()
    from pyepo.func import RFWO, RFY

    gen = torch.Generator().manual_seed(6)
    cost = torch.rand(3, 40, generator=gen, dtype=torch.float64)
    g = torch.randn(3, 40, generator=gen, dtype=torch.float64)
    a, b = cost.clone().requires_grad_(), cost.clone().requires_grad_()
    theirs = RFWO(model, lambd=0.5, max_iter=300)(a)
    ours = cl.ComboLayer(spec, projection="none",
                         method=cl.RegularizedFrankWolfe(lam=0.5, max_iter=300))(b)
    (theirs * g).sum().backward()
    (ours * g).sum().backward()
    torch.testing.assert_close(ours, theirs.detach(), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(b.grad, a.grad, atol=1e-6, rtol=1e-5)

    y_true = cl.make_solver(spec).solve(torch.rand(3, 40, generator=gen, dtype=torch.float64))
    a, b = cost.clone().requires_grad_(), cost.clone().requires_grad_()
    theirs = RFY(model, lambd=0.5, max_iter=300)(a, y_true)
    ours = cl.losses.RegularizedFenchelYoungLoss(spec, lam=0.5, max_iter=300)(b, y_true)
    theirs.backward()
    ours.backward()
    torch.testing.assert_close(ours, theirs.detach(), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(b.grad, a.grad, atol=1e-6, rtol=1e-5)


def _ilp_with_aux(shape):
    # two of four outputs and an auxiliary sum to 2; the known cost weighs the auxiliary
    return cl.ILP(shape=shape, num_aux=1, known_cost=[0, 0, 0, 0, 0.5],
                  constraints=[cl.Constraint(coefs=[1] * 5, sense="==", rhs=2)])


@pytest.mark.parametrize("batch", [(3,), (1,), ()], ids=["batch3", "batch1", "nobatch"])
def test_rfwo_and_rfy_with_a_known_cost_take_a_multidimensional_cost_shape(batch):
    # a (2, 2) cost shape gives what the same problem with a flat (4,) shape gives
    gen = torch.Generator().manual_seed(11)
    w = 0.3 * torch.randn(*batch, 4, generator=gen, dtype=torch.float64)
    known = torch.randn(*batch, 5, generator=gen, dtype=torch.float64)
    y_true = torch.tensor([1.0, 0, 1, 0], dtype=torch.float64).expand(*batch, 4)
    method = cl.RegularizedFrankWolfe(lam=0.8, max_iter=500, tol=1e-12)
    square, flat = _ilp_with_aux([2, 2]), _ilp_with_aux([4])
    for known_cost in (None, known):
        ys = [cl.ComboLayer(spec, method=method, projection="none").train()(
                  w.reshape(*batch, *spec.cost_shape), known_cost=known_cost).reshape(w.shape)
              for spec in (square, flat)]
        torch.testing.assert_close(ys[0], ys[1])
        assert ((ys[1] > 1e-3) & (ys[1] < 1 - 1e-3)).any()  # a mix, not a vertex
        losses = [cl.losses.RegularizedFenchelYoungLoss(spec, lam=0.8, reduction="none")(
                      w.reshape(*batch, *spec.cost_shape),
                      y_true.reshape(*batch, *spec.cost_shape), known_cost=known_cost)
                  for spec in (square, flat)]
        torch.testing.assert_close(losses[0], losses[1])
        assert losses[0].shape == batch


@pytest.mark.parametrize("solve_ratio", [1.0, 0.5], ids=["exact", "cached"])
def test_rfwo_return_aux_in_training_mixes_the_auxiliaries_as_the_output(solve_ratio):
    # y + aux sum to 2 on every solution, so on every mix of them: aux = 2 - sum(y)
    spec = cl.ILP(shape=[3], num_aux=1, known_cost=[0, 0, 0, 0.3],
                  constraints=[cl.Constraint(coefs=[1, 1, 1, 1], sense="==", rhs=2)])
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(2, 2, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    known = torch.randn(2, 2, 4, generator=gen, dtype=torch.float64)
    layer = cl.ComboLayer(spec, method="rfwo", projection="none", solve_ratio=solve_ratio,
                          generator=torch.Generator().manual_seed(1)).train()
    for known_cost in (None, known):
        layer.generator.manual_seed(1)
        y, aux = layer(w, return_aux=True, known_cost=known_cost)
        assert aux.shape == (2, 2, 1)
        assert ((y > 1e-3) & (y < 1 - 1e-3)).any()  # a mix, not a vertex
        torch.testing.assert_close(aux[..., 0], 2 - y.detach().sum(-1))
        if solve_ratio == 1.0:  # the same output (a cache changes between calls)
            assert torch.equal(y, layer(w, known_cost=known_cost))
        y.sum().backward()  # the gradient is the output's, auxiliaries or not
        assert w.grad.shape == w.shape
    y, aux = layer.eval()(w, return_aux=True)
    torch.testing.assert_close(aux[..., 0], 2 - y.detach().sum(-1))


def test_rfwo_takes_per_call_rows_on_a_multidimensional_batch():
    # the rows x0 <= 0 broadcast onto a (2, 2) batch: every output has y0 = 0
    spec = cl.ILP(shape=[3], num_aux=1,
                  constraints=[cl.Constraint(coefs=[1, 1, 1, 1], sense="==", rhs=2)])
    layer = cl.ComboLayer(spec, method="rfwo", projection="none").train()
    w = torch.randn(2, 2, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    A = torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64).expand(2, 2, 1, 4)
    y, aux = layer(w, A=A, b=torch.zeros(2, 2, 1, dtype=torch.float64), return_aux=True)
    assert y.shape == (2, 2, 3) and torch.equal(y[..., 0], torch.zeros(2, 2, dtype=y.dtype))
    assert ((y > 1e-3) & (y < 1 - 1e-3)).any()  # a mix, not a vertex
    torch.testing.assert_close(aux[..., 0], 2 - y.sum(-1))


HALF = [torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", HALF, ids=["float16", "bfloat16"])
def test_rfy_in_half_precision_is_the_float32_answer(dtype):
    """Frank-Wolfe runs in float32 for half inputs (in float16 its line search gave NaN
    iterates, which Dijkstra reported as a missing path): the loss and its gradient are
    float32's on the same (rounded) inputs, to the dtype's precision; the gradient in the
    dtype, the loss in float32, as every loss class gives it on half inputs."""
    grid = cl.problems.ShortestPath.grid(3, 3)
    costs = torch.rand(2, 3, 3, 3, generator=torch.Generator().manual_seed(3),
                       dtype=torch.float64) + 0.1
    y_true = cl.make_solver(grid).solve(costs + 0.3)
    loss = cl.losses.RegularizedFenchelYoungLoss(grid, max_iter=200)
    low = costs.to(dtype).requires_grad_()
    value = loss(low, y_true.to(dtype))
    value.backward()
    wide = low.detach().float().requires_grad_()
    expected = loss(wide, y_true.float())
    expected.backward()
    eps = torch.finfo(dtype).eps
    assert value.dtype == torch.float32 and low.grad.dtype == dtype
    value, expected = float(value.detach()), float(expected.detach())
    assert value == pytest.approx(expected, abs=eps * max(1.0, expected))
    torch.testing.assert_close(low.grad.float(), wide.grad, atol=eps, rtol=eps)


@pytest.mark.parametrize("dtype", HALF, ids=["float16", "bfloat16"])
def test_rfwo_in_half_precision_is_the_float32_answer(dtype):
    """RFWO's forward and backward (the active face's projection, a linear solve that
    has no half kernel) run in float32 for half inputs and return the dtype."""
    layer = cl.ComboLayer(cl.problems.TopK(5, 2), method="rfwo", projection="none").train()
    gen = torch.Generator().manual_seed(4)
    w = torch.rand(3, 5, generator=gen)
    g = torch.randn(3, 5, generator=gen)
    answers = []
    for given in (w.to(dtype), w.to(dtype).float()):
        given = given.requires_grad_()
        y = layer(given)
        (y * g.to(given.dtype)).sum().backward()
        assert y.dtype == given.dtype and given.grad.dtype == given.dtype
        answers.append((y.detach().float(), given.grad.float()))
    eps = torch.finfo(dtype).eps
    (y_low, grad_low), (y_wide, grad_wide) = answers
    assert ((y_wide > 0.05) & (y_wide < 0.95)).any()  # a mix, not a vertex
    torch.testing.assert_close(y_low, y_wide, atol=eps, rtol=eps)
    torch.testing.assert_close(grad_low, grad_wide, atol=eps, rtol=eps)


@pytest.mark.parametrize("batch", [(0,), (2, 0)], ids=["empty", "empty_inner"])
def test_rfwo_return_aux_on_an_empty_batch_has_the_solvers_shapes(batch):
    """An empty batch with auxiliaries: the outputs and auxiliaries have the exact
    solver's shapes for the same input (its auxiliaries (*batch, num_aux)), and the
    backward gives an empty gradient."""
    spec = cl.ILP(shape=[3], num_aux=1,
                  constraints=[cl.Constraint(coefs=[1, 1, 1, -1], sense="<=", rhs=1)])
    w = torch.zeros(*batch, 3, requires_grad=True)
    y, aux = cl.ComboLayer(spec, method="rfwo", projection="none").train()(w, return_aux=True)
    y_exact, aux_exact = cl.make_solver(spec).solve(w.detach(), return_aux=True)
    assert y.shape == y_exact.shape == (*batch, 3)
    assert aux.shape == aux_exact.shape == (*batch, 1)
    y.sum().backward()
    assert w.grad.shape == w.shape
