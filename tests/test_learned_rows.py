"""The row-gradient estimators against their definitions:
"comboptnet" against a numpy transcription of CombOptNet's reference formulas, and
"score_function" against the gradient of the Gaussian-smoothed solution, known in
closed form on one-variable problems, by Monte Carlo."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import combolayer as cl

# -- CombOptNet: the reference code's formulas, written again in numpy ------------------
# The reference (martius-lab/CombOptNet, comboptnet_module) writes rows as
# A y + b <= 0 and averages over the batch; here b_ref = -b and instances are summed.


def _reference_mismatch(c, A, b_ref, y, y_grad, infeasible, lb, ub, tau):
    bs, dim = y.shape
    dy = -y_grad
    step = y + np.sign(dy)
    dy = dy * ((step >= lb) & (step <= ub))
    order = np.argsort(np.abs(dy), axis=-1, kind="stable")
    ranks = np.argsort(order, axis=-1, kind="stable")
    triangular = np.triu(np.ones((dim, dim)))
    delta = np.take_along_axis(triangular[None], ranks[:, None, :], axis=-1)
    delta = delta * np.sign(dy + 1e-8)[:, None, :]
    sorted_abs = np.take_along_axis(np.abs(dy), order, axis=-1)
    lambdas = np.diff(np.concatenate([np.zeros((bs, 1)), sorted_abs], axis=-1), axis=-1)
    y_prime = y[:, None, :] + delta

    def distance(point):  # (bs, K, m): constraints broadcast over the K targets
        lhs = np.einsum("bmn,bkn->bkm", A, point) + b_ref[:, None, :]
        return lhs / (np.linalg.norm(A, axis=-1)[:, None, :] + 1e-8)

    feasible = np.all(distance(y_prime) <= 0, axis=-1).astype(float)
    inside = (np.all(y_prime >= lb, axis=-1) & np.all(y_prime <= ub, axis=-1)).astype(float)
    correct = np.all(np.isclose(y[:, None, :], y_prime), axis=-1) * (1.0 - infeasible)[:, None]
    d_y = distance(y[:, None, :])[:, 0, :]
    positive = np.maximum(-d_y, 0.0)
    if tau:
        near = -tau * (np.log(np.mean(np.exp(-positive / tau), axis=-1)))
    else:
        near = positive.min(axis=-1)
    rows = near[:, None] * feasible + np.maximum(distance(y_prime), 0).sum(-1) * (1 - feasible)
    rows = rows * inside * (1 - correct)
    cost = np.maximum((c[:, None, :] * y_prime).sum(-1) - (c * y).sum(-1)[:, None], 0)
    cost = cost * inside * feasible
    return np.mean((rows + cost) * lambdas, axis=-1).sum()


def _central_differences(f, x, step=1e-6):
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[index] += step
        down[index] -= step
        grad[index] = (f(up) - f(down)) / (2 * step)
    return grad


@pytest.mark.parametrize(("integrality", "lower", "upper", "tau"),
                         [("binary", 0.0, 1.0, 0.5), ("integer", -2.0, 2.0, 0.5),
                          ("binary", 0.0, 1.0, None)])
def test_comboptnet_gradients_equal_the_reference_formulas(integrality, lower, upper, tau):
    rng = np.random.default_rng(11)
    n, m, batch = 5, 3, 6
    spec = cl.ILP(shape=[n], integrality=integrality, lower=lower, upper=upper)
    layer = cl.ComboLayer(spec, method=cl.estimators.CombOptNet(tau=tau), projection="none",
                          backend="scip")
    w = torch.tensor(rng.normal(size=(batch, n)), requires_grad=True)
    A = torch.tensor(rng.normal(size=(batch, m, n)), requires_grad=True)
    b = torch.tensor(rng.uniform(0.5, 2.0, size=(batch, m)), requires_grad=True)
    target = torch.tensor(rng.integers(int(lower), int(upper) + 1, (batch, n)), dtype=torch.float64)
    y = layer(w, A=A, b=b)
    loss = ((y - target) ** 2).sum()
    loss.backward()
    y_np, y_grad = y.detach().numpy(), 2 * (y - target).detach().numpy()
    arrays = dict(c=w.detach().numpy(), A=A.detach().numpy(), b_ref=-b.detach().numpy())

    def with_(name):
        def f(value):
            args = dict(arrays, **{name: value})
            return _reference_mismatch(args["c"], args["A"], args["b_ref"], y_np, y_grad,
                                       np.zeros(batch), lower, upper, tau)
        return f

    expected_c = _central_differences(with_("c"), arrays["c"])
    expected_A = _central_differences(with_("A"), arrays["A"])
    expected_b = -_central_differences(with_("b_ref"), arrays["b_ref"])
    assert np.abs(expected_A).sum() > 0 and np.abs(expected_b).sum() > 0  # not vacuous
    np.testing.assert_allclose(w.grad.numpy(), expected_c, atol=1e-6)
    np.testing.assert_allclose(A.grad.numpy(), expected_A, atol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), expected_b, atol=1e-6)


def _closed_form_case(seed: int) -> tuple:
    """Random mismatch arguments that reach, over the seeds, every branch: rows that are
    all zeros (no direction), no rows, a row through ``y``, the softmin and the plain
    minimum, a fixed row and flagged instances, the unit basis, no clipping, a zero
    incoming gradient."""
    g = torch.Generator().manual_seed(seed)
    B, m, n = 4, seed % 5, 2 + seed % 5
    lower, upper = (0.0, 1.0) if seed % 2 else (-2.0, 2.0)
    c = torch.randn(B, n, dtype=torch.float64, generator=g)
    A = torch.randn(B, m, n, dtype=torch.float64, generator=g)
    if m and seed % 3 == 0:
        A[:, 0] = 0.0
    b = torch.randn(B, m, dtype=torch.float64, generator=g)
    y = torch.randint(int(lower), int(upper) + 1, (B, n), generator=g).double()
    if m and seed % 2:  # y on its last row: the relus' kinks at 0
        b[:, -1] = (y[:, None, :] @ A.transpose(-1, -2))[:, 0, -1]
    grad = torch.randn(B, n, dtype=torch.float64, generator=g)
    grad[0] = 0.0 if seed % 4 == 0 else grad[0]
    box = [torch.full((n,), bound, dtype=torch.float64) for bound in (lower, upper)]
    flagged = torch.rand(B, generator=g) < 0.3
    tau = [0.5, None, 0.0, 2.0][seed % 4]
    fixed_ok = (lambda points: points.sum(-1) <= n / 2) if seed % 3 else None
    return (c.requires_grad_(True), A.requires_grad_(True), b.requires_grad_(True), y, grad,
            *box, flagged, tau, seed % 6 != 1, seed % 8 == 2, fixed_ok)


def test_comboptnet_closed_form_gradient_equals_autograd_of_the_mismatch():
    """The backward's closed form (`mismatch_grad`) against autograd through the
    mismatch it differentiates, on 48 random cases (`_closed_form_case`)."""
    from combolayer.estimators.comboptnet import mismatch, mismatch_grad

    with_row_gradients = 0
    for seed in range(48):
        args = _closed_form_case(seed)
        expected = torch.autograd.grad(mismatch(*args), args[:3], allow_unused=True)
        for want, got in zip(expected, mismatch_grad(*args), strict=True):
            want = torch.zeros_like(got) if want is None else want
            scale = max(1.0, float(want.abs().max()) if want.numel() else 1.0)
            torch.testing.assert_close(got, want, rtol=0, atol=1e-12 * scale)
        with_row_gradients += bool(expected[1] is not None and expected[1].abs().sum() > 0)
    assert with_row_gradients >= 24  # not vacuous: most cases move the rows


def test_comboptnet_flagged_rows_get_the_references_dummy_treatment():
    """An infeasible instance returns zeros (the reference's dummy) counted as incorrect,
    so its rows are pulled towards the feasible targets."""
    spec = cl.ILP(shape=[2], integrality="binary")
    layer = cl.ComboLayer(spec, method="comboptnet", projection="none", on_infeasible="flag")
    A = torch.tensor([[[1.0, 1.0]]], requires_grad=True)
    b = torch.tensor([[-0.5]], requires_grad=True)  # no 0/1 point has a sum below 0
    with pytest.warns(RuntimeWarning, match="1 of 1 instances"):
        y = layer(torch.tensor([[-1.0, -1.0]]), A=A, b=b)
    assert y.tolist() == [[0.0, 0.0]] and layer.last_infeasible.tolist() == [True]
    ((y - torch.tensor([[1.0, 0.0]])) ** 2).sum().backward()
    assert b.grad.item() < 0  # gradient descent raises b towards feasibility


# -- the score-function estimator: its expectation by Monte Carlo -----------------------


def _phi(z: float) -> float:
    return math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


@pytest.mark.parametrize(("part", "expected"), [
    # y = 1 iff cost w < 0 and a <= b: E[y] = Phi(-w / s) (w), Phi((b - a) / s) (a, b)
    ("w", lambda w, a, b, s: -_phi(w / s) / s),
    ("A", lambda w, a, b, s: -_phi((b - a) / s) / s),
    ("b", lambda w, a, b, s: _phi((b - a) / s) / s),
])
def test_score_function_matches_the_smoothed_gradient(part, expected):
    """One binary variable x, cost w, one row a x <= b: the estimator's gradient of the
    output (dL/dy = 1) against d/dtheta E[y(theta + sigma eps)], within 4 standard
    errors of 40 000 samples."""
    w0, a0, b0, sigma = -0.2, 1.0, 1.3, 0.5
    spec = cl.ILP(shape=[1], integrality="binary")
    samples = 40_000
    method = cl.estimators.ScoreFunction(sigma=sigma, num_samples=samples, perturb=(part,),
                                         generator=torch.Generator().manual_seed(3))
    layer = cl.ComboLayer(spec, method=method, projection="none", backend="enumerate",
                          on_infeasible="flag")
    w = torch.tensor([w0], dtype=torch.float64, requires_grad=part == "w")
    A = torch.tensor([[a0]], dtype=torch.float64, requires_grad=part == "A")
    b = torch.tensor([b0], dtype=torch.float64, requires_grad=part == "b")
    y = layer(w, A=A, b=b)
    y.sum().backward()
    got = {"w": w, "A": A, "b": b}[part].grad.item()
    truth = expected(w0, a0, b0, sigma)
    # the per-sample terms are bounded by |eps| / sigma: their spread bounds the error
    standard_error = 1.0 / sigma / math.sqrt(samples)
    assert abs(got - truth) < 4 * standard_error, (got, truth)


def test_score_function_says_when_its_perturbed_rows_leave_no_feasible_point():
    """Rows the user gives feasible, a sample's perturbed copy not: the error says the
    infeasible rows are the estimator's perturbations, and how to handle them."""
    spec = cl.ILP(shape=[2], integrality="binary")
    method = cl.estimators.ScoreFunction(sigma=5.0, num_samples=32, perturb=("b",),
                                         generator=torch.Generator().manual_seed(0))
    layer = cl.ComboLayer(spec, method=method, projection="none", backend="enumerate")
    A, b = torch.tensor([[1.0, 1.0]]), torch.tensor([0.5], requires_grad=True)
    w = torch.tensor([-1.0, -2.0])
    assert layer.eval()(w, A=A, b=b).tolist() == [0.0, 0.0]  # the given rows: feasible
    with pytest.raises(cl.InfeasibleError, match=r"with b perturbed \(sigma=5.0\).*smaller "
                                                 r"sigma"):
        layer.train()(w, A=A, b=b)


def test_score_function_without_rows_perturbs_the_costs_only():
    spec = cl.problems.TopK(n=4, k=2)
    method = cl.estimators.ScoreFunction(sigma=2.0, num_samples=16,
                                         generator=torch.Generator().manual_seed(0))
    layer = cl.ComboLayer(spec, method=method, projection="none")
    w = torch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    y = layer(w)
    assert torch.isclose(y.sum(), torch.tensor(2.0))
    (y * torch.tensor([1.0, 0, 0, 0])).sum().backward()
    assert torch.isfinite(w.grad).all() and w.grad.abs().sum() > 0
    layer.eval()
    assert layer(w).tolist() == [0.0, 0.0, 1.0, 1.0]


def test_learning_a_capacity_with_comboptnet_reaches_the_true_solutions():
    """A knapsack whose capacity b is learned from the true solutions alone: CombOptNet
    moves b until the layer returns them (training reduces the loss to zero)."""
    torch.manual_seed(0)
    n, batch = 6, 32
    weights = torch.rand(1, n) + 0.5
    true_b = torch.tensor([2.0])
    values = -torch.rand(batch, n) - 0.1  # minimisation costs: take as much as fits
    spec = cl.ILP(shape=[n], integrality="binary")
    solver = cl.make_solver(spec, "enumerate")
    targets = solver.solve(values, A=weights, b=true_b)
    b = torch.tensor([0.5], requires_grad=True)
    layer = cl.ComboLayer(spec, method="comboptnet", projection="none", backend="enumerate")
    optimizer = torch.optim.Adam([b], lr=0.1)
    first = None
    for _ in range(80):
        y = layer(values, A=weights, b=b)
        loss = (y - targets).abs().sum(-1).mean()
        first = float(loss.detach()) if first is None else first
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert first > 1.0
    assert float((layer(values, A=weights, b=b.detach()) - targets).abs().sum()) == 0.0


@pytest.mark.parametrize("method", ["comboptnet", "score_function"])
def test_max_problems_and_auxiliaries_fold_the_sense_into_the_costs_only(method):
    """argmax <w, y> is argmin <-w, y>: a max layer's gradient in w is minus the min
    layer's at -w, and A, b get the same gradient; auxiliary columns of A get one too."""
    rng = np.random.default_rng(4)
    base = dict(shape=[3], num_aux=1, integrality="binary",
                constraints=[cl.Constraint(coefs=[1.0, 1.0, 1.0, -1.0], sense="<=", rhs=1.0)])
    grads = {}
    w_min = torch.tensor(rng.normal(size=(4, 3)))
    for sense in ("min", "max"):
        params = {"sigma": 0.5, "num_samples": 64, "generator": torch.Generator().manual_seed(0)}
        estimator = (cl.estimators.ScoreFunction(**params) if method == "score_function"
                     else cl.estimators.CombOptNet())
        layer = cl.ComboLayer(cl.ILP(sense=sense, **base), method=estimator, projection="none",
                              backend="scip")
        w = (w_min if sense == "min" else -w_min).clone().requires_grad_(True)
        A = torch.tensor(np.tile([[0.5, 1.0, 1.5, -1.0]], (4, 1, 1)), requires_grad=True)
        b = torch.full((4, 1), 1.2, dtype=torch.float64, requires_grad=True)
        y = layer(w, A=A, b=b)
        (y * torch.tensor([1.0, -1.0, 0.5])).sum().backward()
        grads[sense] = (w.grad, A.grad, b.grad)
    torch.testing.assert_close(grads["max"][0], -grads["min"][0])
    torch.testing.assert_close(grads["max"][1], grads["min"][1])
    torch.testing.assert_close(grads["max"][2], grads["min"][2])
    assert grads["min"][1].shape == (4, 1, 4)
    assert grads["min"][1].abs().sum() > 0 and grads["min"][0].abs().sum() > 0


@pytest.mark.parametrize("perturb, trained", [(("b",), "A"), (("w", "A"), "b")])
def test_score_function_refuses_rows_that_need_a_gradient_it_does_not_perturb(perturb,
                                                                              trained):
    """Left out of ``perturb``, they got zeros without a word."""
    spec = cl.ILP(shape=[3], integrality="binary", sense="max")
    method = cl.ScoreFunction(sigma=0.3, num_samples=4, perturb=perturb)
    layer = cl.ComboLayer(spec, projection="none", method=method)
    rows = {"A": torch.ones(1, 3), "b": torch.tensor([1.5])}
    rows[trained].requires_grad_(True)
    with pytest.raises(cl.InputError, match=rf"{trained} requires a gradient, but .* does not "
                                            rf"perturb it.*add '{trained}' to perturb"):
        layer(torch.tensor([1.0, 2.0, 3.0]), **rows)
    with torch.no_grad():  # no gradient flows: a rollout in training mode is taken
        layer(torch.tensor([1.0, 2.0, 3.0]), **rows)
    rows[trained] = rows[trained].detach()
    layer(torch.tensor([1.0, 2.0, 3.0]), **rows)  # as data: taken
