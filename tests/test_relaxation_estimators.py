"""QPTL and IntOpt against their definition: the smoothed LP relaxation, solved and
finite-differenced independently with cvxpy (Clarabel), in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import combolayer as cl

pytest.importorskip("cvxpylayers", reason="the [cvxpylayers] extra is not installed")
cp = pytest.importorskip("cvxpy")

N, M_SPEC, M_CALL, BATCH = 5, 2, 2, 2


def _problem(seed: int) -> tuple[cl.ILP, np.ndarray, np.ndarray]:
    """A binary ILP with two rows of its own, and per-call rows, all with slack at 0
    (so both relaxations have an interior)."""
    rng = np.random.default_rng(seed)
    A_ub = rng.uniform(0.2, 1.0, (M_SPEC, N))
    spec = cl.ILP.from_matrices(shape=[N], A_ub=A_ub, b_ub=A_ub.sum(1) * 0.6)
    A = rng.uniform(-0.5, 1.0, (BATCH, M_CALL, N))
    b = np.abs(A).sum(-1) * 0.5 + 0.1
    return spec, A, b


def _reference(spec, smoothing, weight, c, A, b):
    """x*(c, A, b) for one instance, straight from the definition, with Clarabel."""
    A_ub, b_ub, _, _ = spec.to_matrices()
    x = cp.Variable(N)
    if smoothing == "quadratic":
        objective = c @ x + weight / 2 * cp.sum_squares(x)
        constraints = [A_ub.toarray() @ x <= b_ub, A @ x <= b, x >= 0, x <= 1]
    else:
        slacks = [b_ub - A_ub.toarray() @ x, b - A @ x, x, 1 - x]
        objective = c @ x - weight * sum(cp.sum(cp.log(s)) for s in slacks)
        constraints = []
    # as tight as Clarabel reaches on each (the barrier's exponential cones stop near 1e-10)
    tol = 1e-12 if smoothing == "quadratic" else 1e-10
    cp.Problem(cp.Minimize(objective), constraints).solve(
        solver=cp.CLARABEL, tol_gap_abs=tol, tol_gap_rel=tol, tol_feas=tol)
    return x.value


# (name, smoothing, weight field, weight, SCS tolerance, gradient atol): SCS's exponential
# cones (the barrier) reach about 1e-3 in the derivative, its quadratic cones 1e-4 and better
CASES = [("qptl", "quadratic", "gamma", 0.5, 1e-8, 2e-4),
         ("intopt", "log_barrier", "mu", 0.2, 1e-7, 2e-3)]


@pytest.mark.parametrize("name, smoothing, field, weight, tolerance, atol", CASES,
                         ids=[case[0] for case in CASES])
def test_gradient_matches_finite_differences_of_the_relaxation(name, smoothing, field, weight,
                                                               tolerance, atol):
    spec, A_np, b_np = _problem(seed=3)
    gen = torch.Generator().manual_seed(0)
    c = torch.randn(BATCH, N, generator=gen, dtype=torch.float64, requires_grad=True)
    A = torch.tensor(A_np, requires_grad=True)
    b = torch.tensor(b_np, requires_grad=True)
    g = torch.randn(BATCH, N, generator=gen, dtype=torch.float64)
    method = cl.estimators.METHODS[name](**{field: weight, "tolerance": tolerance})
    solve = method.build(cl.make_solver(spec))
    x = solve(c, needs_grad=True, training=True, A=A, b=b)
    (x * g).sum().backward()

    def value(i, c_i, A_i, b_i):
        return float(g[i].numpy() @ _reference(spec, smoothing, weight, c_i, A_i, b_i))

    # the quadratic one is piecewise affine (a small step stays off its kinks), the
    # barrier's smooth (a larger step keeps Clarabel's 1e-10 out of the quotient)
    step = 1e-5 if smoothing == "quadratic" else 1e-3
    for i in range(BATCH):
        args = [c.detach()[i].numpy(), A_np[i], b_np[i]]
        assert np.allclose(x.detach()[i].numpy(), _reference(spec, smoothing, weight, *args),
                           atol=1e-5)
        for k, grad in enumerate((c.grad[i], A.grad[i], b.grad[i])):
            numeric = np.zeros(grad.shape)
            for j in np.ndindex(grad.shape):
                plus = [a.copy() for a in args]
                minus = [a.copy() for a in args]
                plus[k][j] += step
                minus[k][j] -= step
                numeric[j] = (value(i, *plus) - value(i, *minus)) / (2 * step)
            assert np.allclose(grad.numpy(), numeric, atol=atol, rtol=2e-3), (k, grad, numeric)
    # every input got a gradient that is not zero: the check above compared something
    assert all(float(t.grad.abs().max()) > 1e-3 for t in (c, A, b))


@pytest.mark.parametrize("name", ["qptl", "intopt"])
def test_training_is_the_relaxation_and_eval_the_exact_ilp(name):
    spec = cl.problems.Knapsack(weights=[[2.0, 3.0, 4.0, 5.0]], capacities=[7.0])
    w = torch.tensor([3.0, 4.0, 5.0, 7.0], dtype=torch.float64, requires_grad=True)
    layer = cl.ComboLayer(spec, method=name, projection="none")
    relaxed = layer(w)
    assert not torch.equal(relaxed, relaxed.round())  # fractional: the smoothed relaxation
    relaxed.sum().backward()
    assert w.grad.abs().sum() > 0
    layer.eval()
    exact = layer(w)
    assert exact.tolist() == [1.0, 0.0, 0.0, 1.0]  # items 0 and 3: value 10, weight 7
    assert exact.tolist() == cl.make_solver(spec).solve(w.detach()).tolist()
    # the exact solution has no gradient path: a backward refuses, eager and compiled
    compiled = torch.compile(layer, backend="aot_eager")
    for each in (layer, compiled):
        with pytest.raises(cl.ComboLayerError, match="gives no gradient in eval mode"):
            (each(w).sum() + w.square().sum()).backward()


def test_unknown_parameters_and_bad_weights_are_refused():
    with pytest.raises(ValueError, match="gamma must be > 0, got -1"):
        cl.ComboLayer(cl.problems.TopK(3, 1), method={"name": "qptl", "gamma": -1.0})
    with pytest.raises(ValueError, match="mu"):
        cl.ComboLayer(cl.problems.TopK(3, 1), method={"name": "intopt", "mu": 0.0})


@pytest.mark.parametrize("name", ["qptl", "intopt"])
def test_rows_that_empty_the_relaxation_raise_or_are_flagged(name):
    spec = cl.problems.TopK(4, 2, sense="min")
    w = torch.tensor([[3.0, 1.0, 2.0, 5.0], [1.0, 2.0, 3.0, 4.0]], requires_grad=True)
    A = torch.ones(2, 1, 4, requires_grad=True)
    b = torch.tensor([[3.0], [1.0]])  # the second leaves no point with two of four chosen
    with pytest.raises(cl.InfeasibleError, match="infeasible"):
        cl.ComboLayer(spec, method=name, projection="none")(w, A=A, b=b)
    layer = cl.ComboLayer(spec, method=name, projection="none", on_infeasible="flag")
    with pytest.warns(RuntimeWarning, match="1 of 2 instances"):
        y = layer(w, A=A, b=b)
    assert layer.last_infeasible.tolist() == [False, True]
    assert y[1].tolist() == [0.0] * 4 and y[0].sum().item() == pytest.approx(2.0, abs=1e-3)
    (y * torch.tensor([1.0, -1.0, 0.5, 2.0])).sum().backward()
    assert A.grad[1].abs().sum() == 0 and A.grad[0].abs().sum() > 0


def test_a_row_that_pins_a_variable_leaves_the_log_barrier_without_a_minimum():
    """x0 <= 0 beside x0 >= 0: the barrier has no minimum, and SCS stopped outside the
    rows (x0 = -0.093) with a warning alone; the instance is refused, or flagged."""
    spec = cl.problems.TopK(4, 1, sense="min")
    w = torch.tensor([[0.3, 0.1, 0.2, 0.4], [0.3, 0.1, 0.2, 0.4]], requires_grad=True)
    A = torch.tensor([[[1.0, 0.0, 0.0, 0.0]], [[1.0, 0.0, 0.0, 0.0]]])
    b = torch.tensor([[0.0], [0.5]])  # the first pins x0 at 0, the second leaves it room
    with pytest.raises(cl.InfeasibleError, match="no point strictly inside the rows of "
                       r"instances \[0\]"):
        cl.ComboLayer(spec, method="intopt", projection="none")(w, A=A, b=b)
    layer = cl.ComboLayer(spec, method="intopt", projection="none", on_infeasible="flag")
    with pytest.warns(RuntimeWarning, match="1 of 2 instances"):
        y = layer(w, A=A, b=b)
    assert layer.last_infeasible.tolist() == [True, False] and y[0].tolist() == [0.0] * 4
    assert y[1].min() > 0 and y[1].sum().item() == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("name", ["qptl", "intopt"])
def test_per_call_rows_on_two_dimensional_costs_match_the_flattened_problem(name):
    # a matching's costs are (rows, cols): the batch is what lies ahead of both dimensions
    matching = cl.problems.Matching(2, 3)
    A_ub, b_ub, A_eq, b_eq = matching.to_ilp().to_matrices()
    flat = cl.ILP.from_matrices(shape=[6], A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq)
    gen = torch.Generator().manual_seed(1)
    c = torch.randn(4, 2, 3, generator=gen, dtype=torch.float64)
    A = torch.rand(4, 1, 6, generator=gen, dtype=torch.float64)
    b = A.sum(-1) / 3 * 1.05  # the uniform point (1/3 each) is strictly inside
    g = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    results = []
    for spec, costs in ((matching, c), (flat, c.reshape(4, 6))):
        costs = costs.clone().requires_grad_(True)
        A_in, b_in = A.clone().requires_grad_(True), b.clone().requires_grad_(True)
        y = cl.ComboLayer(spec, method=name, projection="none")(costs, A=A_in, b=b_in)
        assert y.shape == costs.shape
        (y.reshape(4, 6) * g).sum().backward()
        results.append((y.detach().reshape(4, 6), costs.grad.reshape(4, 6), A_in.grad, b_in.grad))
    for got, expected in zip(*results):
        assert torch.allclose(got, expected, atol=1e-6)
    assert results[0][2].abs().max() > 1e-3  # the rows are active: their gradient is compared
    single = cl.ComboLayer(matching, method=name, projection="none")(c[1], A=A[1], b=b[1])
    assert single.shape == (2, 3)
    assert torch.allclose(single.detach().reshape(6), results[1][0][1], atol=1e-6)


def test_the_log_barrier_keeps_rows_tight_everywhere_as_equations():
    """On the grid the flow equations fix the source and the target to 1, their upper
    bounds: the barrier has no finite minimum on them (SCS stopped at its iteration limit
    with the equations off by 0.05), so they are kept as equations. The relaxation then
    equals an independent solve of that barrier problem, and meets the equations."""
    cp = pytest.importorskip("cvxpy")
    from combolayer.estimators._relaxation import Relaxation

    spec = cl.problems.ShortestPath.grid(4, 4)
    relaxation = Relaxation(spec, "log_barrier", 0.1,
                            solver_args={"eps_abs": 1e-7, "eps_rel": 1e-7})
    form = relaxation.form
    upper_bounds = relaxation.G[relaxation.tight]
    assert upper_bounds.shape[0] == 2 and set(upper_bounds.indices) == {0, 15}
    assert (upper_bounds.data == 1).all()  # x_source <= 1, x_target <= 1
    costs = torch.rand(3, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x = relaxation(costs).numpy()
    G, h, tight = relaxation.G, relaxation.h, relaxation.tight
    for cost, got in zip(costs.numpy(), x, strict=True):
        xv = cp.Variable(form.num_vars)
        linear = np.concatenate([cost, np.zeros(form.num_vars - 16)])
        barrier = cp.sum(cp.log(h[~tight] - G[~tight] @ xv))
        problem = cp.Problem(cp.Minimize(linear @ xv - 0.1 * barrier),
                             [form.A_eq @ xv == form.b_eq, G[tight] @ xv == h[tight]])
        problem.solve(solver="CLARABEL")
        np.testing.assert_allclose(got, xv.value[:16], atol=1e-4)
        assert abs(got[0] - 1) < 1e-5 and abs(got[15] - 1) < 1e-5


@pytest.mark.parametrize(("spec", "tight"), [
    (cl.problems.TopK(n=500, k=1), []),  # one LP, however many one-hot rows
    (cl.problems.ShortestPath.grid(6, 6), [("upper", 0), ("upper", 35)]),
    (cl.ILP.from_matrices(shape=[3], A_eq=[[1.0, 0.0, 0.0]], b_eq=[1.0]), [("upper", 0)]),
    (cl.ILP.from_matrices(shape=[2], A_ub=[[1.0, 1.0]], b_ub=[0.0]),
     [("row", 0), ("lower", 0), ("lower", 1)]),
])
def test_rows_tight_everywhere_are_found_exactly(spec, tight):
    from combolayer.estimators._relaxation import Relaxation

    relaxation = Relaxation(spec, "log_barrier", 0.1)
    form = relaxation.form
    names = ([("row", i) for i in range(form.A_ub.shape[0])]
             + [("lower", j) for j in np.flatnonzero(np.isfinite(form.lower))]
             + [("upper", j) for j in np.flatnonzero(np.isfinite(form.upper))])
    assert [name for name, is_tight in zip(names, relaxation.tight, strict=True)
            if is_tight] == tight


# Problems whose canonical form has columns beyond the spec's variables (a ranking's and
# a tour's auxiliaries, a path's edge flows), with one variable j made attractive:
# (spec, j, its lower bound).
EXTRA_COLUMNS = {
    "ranking": (cl.problems.Ranking(4), 0, 1.0),
    "tsp": (cl.problems.TSP(4), 1, 0.0),
    "grid": (cl.problems.ShortestPath.grid(3, 3), 4, 0.0),
}


def _attractive(spec, j):
    """Costs (2, *cost_shape), float64, under which variable j is relaxed well above its
    lower bound (min sense: j's cost is low)."""
    w = torch.ones(2, spec.num_outputs, dtype=torch.float64)
    w[:, j] = 0.01
    w[1] += torch.rand(spec.num_outputs, generator=torch.Generator().manual_seed(5),
                       dtype=torch.float64) * 0.1
    return w.reshape(2, *spec.cost_shape)


@pytest.mark.parametrize("case", sorted(EXTRA_COLUMNS))
@pytest.mark.parametrize("name", ["qptl", "intopt"])
def test_per_call_rows_and_known_cost_reach_a_form_with_extra_columns(name, case):
    """The call's rows and known cost are on the spec's variables, the first columns of
    the canonical form (its extra ones take zeros): in training a row x_j <= bound holds
    in the relaxed output (at x_j's own lower bound for QPTL: the row pushes it there),
    a known cost on the outputs is the same call with the costs moved by it, and eval
    mode is the exact solve with the rows or the known cost."""
    spec, j, lower = EXTRA_COLUMNS[case]
    slack = 0.0 if name == "qptl" else 0.25  # the log barrier needs an interior
    w = _attractive(spec, j)
    A = torch.zeros(1, spec.num_vars, dtype=torch.float64)
    A[0, j] = 1.0
    b = torch.tensor([lower + slack], dtype=torch.float64)
    layer = cl.ComboLayer(spec, method=name, projection="none")
    free = layer(w).reshape(2, -1)
    assert (free[:, j] > lower + slack + 0.2).all()  # the row below is active
    rowed = layer(w, A=A, b=b).reshape(2, -1)
    assert (rowed[:, j] <= lower + slack + 1e-4).all()
    if name == "qptl":
        assert rowed[:, j].tolist() == pytest.approx([lower] * 2, abs=1e-4)

    known = torch.rand(2, spec.num_vars, generator=torch.Generator().manual_seed(6),
                       dtype=torch.float64) * 0.1
    known[:, j] = 2.0  # j is no longer attractive
    with_known = layer(w, known_cost=known)
    moved = layer(w + known.reshape(w.shape))
    assert torch.allclose(with_known, moved, atol=1e-5)
    assert not torch.allclose(with_known, layer(w), atol=1e-3)  # the known cost counts

    layer.eval()
    solver = cl.make_solver(spec)
    assert torch.equal(layer(w, A=A, b=b), solver.solve(w, A=A, b=b))
    assert torch.equal(layer(w, known_cost=known), solver.solve(w, known_cost=known))
