"""Losses and metrics against their closed forms on enumerable problems."""

from __future__ import annotations

import inspect
import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from testkit import FixedNoise, backend_or_skip

import combolayer as cl
from combolayer.data import shortest_path

# Pick 2 of 4 items under a weight limit: 0/1, enumerable, min and max versions.
SPEC_MIN = cl.ILP(
    shape=[4],
    constraints=[
        cl.Constraint(coefs=[1, 1, 1, 1], sense="==", rhs=2),
        cl.Constraint(coefs=[3, 1, 2, 2], sense="<=", rhs=4),
    ],
)
SPEC_MAX = SPEC_MIN.model_copy(update={"sense": "max"})
POINTS = torch.tensor(
    [p for p in itertools.product([0.0, 1.0], repeat=4)
     if sum(p) == 2 and 3 * p[0] + p[1] + 2 * p[2] + 2 * p[3] <= 4],
    dtype=torch.float64,
)
BACKENDS = ["highs", "scip"]


def best(costs: torch.Tensor, sense: str) -> torch.Tensor:
    values = costs @ POINTS.T
    return POINTS[(values.argmin(-1) if sense == "min" else values.argmax(-1))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", [SPEC_MIN, SPEC_MAX], ids=["min", "max"])
def test_spo_plus_closed_form(spec, backend):
    backend = backend_or_skip(backend, spec)
    gen = torch.Generator().manual_seed(0)
    c_hat = torch.randn(5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    c = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    loss = cl.losses.SPOPlusLoss(spec, reduction="none", backend=backend)(c_hat, c)

    y_star = best(c, spec.sense)
    shifted = 2 * c_hat.detach() - c
    if spec.sense == "min":  # Elmachtoub & Grigas: -min<2c^ - c, y> + 2<c^, y*> - <c, y*>
        y_tilde = best(shifted, "min")
        expected = (-(shifted * y_tilde).sum(-1) + 2 * (c_hat.detach() * y_star).sum(-1)
                    - (c * y_star).sum(-1))
        grad = 2 * (y_star - y_tilde)
    else:  # the same on -c^, -c: max<2c^ - c, y> - 2<c^, y*> + <c, y*>
        y_tilde = best(shifted, "max")
        expected = ((shifted * y_tilde).sum(-1) - 2 * (c_hat.detach() * y_star).sum(-1)
                    + (c * y_star).sum(-1))
        grad = 2 * (y_tilde - y_star)
    torch.testing.assert_close(loss, expected)
    loss.sum().backward()
    torch.testing.assert_close(c_hat.grad, grad)


def test_spo_plus_reductions_and_y_true():
    c_hat, c = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    per = cl.losses.SPOPlusLoss(SPEC_MIN, reduction="none")(c_hat, c)
    torch.testing.assert_close(cl.losses.SPOPlusLoss(SPEC_MIN)(c_hat, c), per.mean())
    summed = cl.losses.SPOPlusLoss(SPEC_MIN, "sum")(c_hat, c, best(c, "min"))
    torch.testing.assert_close(summed, per.sum())
    with pytest.raises(ValueError, match="reduction must be one of"):
        cl.losses.SPOPlusLoss(SPEC_MIN, reduction="max")
    with pytest.raises(ValueError, match=r"y_true has shape \(3, 3\) but the costs have \(3, 4\)"):
        cl.losses.SPOPlusLoss(SPEC_MIN)(c_hat, c, torch.zeros(3, 3))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-3, 3), min_size=8, max_size=8), st.sampled_from(["min", "max"]))
def test_spo_plus_bounds_the_regret(values, sense):
    """SPO+ is an upper bound of the SPO loss (regret of the decision y(c^))."""
    spec = SPEC_MIN if sense == "min" else SPEC_MAX
    c_hat = torch.tensor(values[:4], dtype=torch.float64)
    c = torch.tensor(values[4:], dtype=torch.float64)
    solver = cl.make_solver(spec)
    regret = cl.metrics.regret(solver, c, solver.solve(c_hat))
    assert cl.losses.SPOPlusLoss(solver)(c_hat, c) >= regret - 1e-9


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", [SPEC_MIN, SPEC_MAX], ids=["min", "max"])
def test_fenchel_young_closed_form(spec, backend):
    backend = backend_or_skip(backend, spec)
    gen = torch.Generator().manual_seed(1)
    sigma, samples = 0.5, 3
    cost = torch.randn(2, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    z = torch.randn(samples, 2, 4, generator=gen, dtype=torch.float64)
    y_true = best(torch.randn(2, 4, generator=gen, dtype=torch.float64), spec.sense)
    loss_fn = cl.losses.FenchelYoungLoss(spec, sigma=sigma, num_samples=samples,
                                         noise=FixedNoise(z), reduction="none", backend=backend)
    loss = loss_fn(cost, y_true)

    sign = 1.0 if spec.sense == "min" else -1.0
    c = sign * cost.detach()
    ys = best(c - sigma * z, "min")
    expected = (c * y_true).sum(-1) - ((c - sigma * z) * ys).sum(-1).mean(0)
    torch.testing.assert_close(loss, expected)
    loss.sum().backward()
    # Berthet et al.: grad_theta = y_sigma(theta) - y_true with theta = -c
    torch.testing.assert_close(cost.grad, sign * (y_true - ys.mean(0)))


def test_hamming_and_loglog_recall_values():
    y = torch.tensor([[1.0, 0.0, 1.0, 0.0]], requires_grad=True)
    t = torch.tensor([[1.0, 1.0, 0.0, 0.0]])
    loss = cl.losses.hamming(y, t)
    assert loss.item() == pytest.approx(0.5)
    loss.backward()
    torch.testing.assert_close(y.grad, (1 - 2 * t) / 4)

    # positives at ranks 2 and 5: negatives above them are 1 and 3
    ranks = torch.tensor([[2.0, 1.0, 5.0, 3.0, 4.0]], requires_grad=True)
    relevance = torch.tensor([[1.0, 0.0, 1.0, 0.0, 0.0]])
    value = cl.losses.loglog_recall(ranks, relevance)
    expected = (np.log1p(np.log1p(1.0)) + np.log1p(np.log1p(3.0))) / 2
    assert value.item() == pytest.approx(expected)
    value.backward()
    assert ranks.grad[0, 1] == 0 and ranks.grad[0, 0] > ranks.grad[0, 2] > 0
    perfect = torch.tensor([[1.0, 2.0, 3.0]])
    assert cl.losses.loglog_recall(perfect, torch.tensor([[1.0, 1.0, 0.0]])).item() == 0.0


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("loss, argument, role", [
    ("hamming", "y", "prediction"), ("hamming", "y_true", "target"),
    ("loglog_recall", "ranks", "prediction"), ("loglog_recall", "relevance", "target")])
def test_hamming_and_loglog_recall_refuse_nan_or_inf_as_every_loss_does(loss, argument, role,
                                                                        bad):
    given = {"hamming": {"y": torch.tensor([[1.0, 0.0, 1.0]]),
                         "y_true": torch.tensor([[0.0, 1.0, 1.0]])},
             "loglog_recall": {"ranks": torch.tensor([[2.0, 1.0, 3.0]]),
                               "relevance": torch.tensor([[1.0, 0.0, 0.0]])}}[loss]
    assert torch.isfinite(getattr(cl.losses, loss)(**given))
    given[argument][0, 1] = bad
    with pytest.raises(ValueError, match=rf"{loss}: {argument} must be finite, got {bad} at "
                                         rf"index \(0, 1\) \(a {role} with NaN"):
        getattr(cl.losses, loss)(**given)


@pytest.mark.parametrize("backend", BACKENDS)
def test_metrics_by_hand(backend):
    backend = backend_or_skip(backend, SPEC_MIN)
    c = torch.tensor([[1.0, 2.0, 3.0, 4.0], [4.0, 1.0, 1.0, 2.0]], dtype=torch.float64)
    # feasible pairs: {0,1}, {1,2}, {1,3}, {2,3}; min optima {0,1} (obj 3) and {1,2} (obj 2)
    assert best(c, "min").tolist() == [[1, 1, 0, 0], [0, 1, 1, 0]]
    y_pred = torch.tensor([[0.0, 1.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    regret = cl.metrics.regret(SPEC_MIN, c, y_pred, backend=backend)
    torch.testing.assert_close(regret, torch.tensor([6.0 - 3.0, 5.0 - 2.0], dtype=torch.float64))
    nreg = cl.metrics.normalized_regret(SPEC_MIN, c, y_pred, backend=backend)
    assert nreg.item() == pytest.approx(6.0 / 5.0)
    ratio = cl.metrics.cost_ratio(SPEC_MIN, c, y_pred, backend=backend)
    torch.testing.assert_close(ratio, torch.tensor([6 / 3, 5 / 2], dtype=torch.float64))
    # max optima {2,3} (obj 7) and {0,1} (obj 5); regret is the optimum minus the achieved
    assert best(c, "max").tolist() == [[0, 0, 1, 1], [1, 1, 0, 0]]
    y_max = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]], dtype=torch.float64)
    regret = cl.metrics.regret(SPEC_MAX, c, y_max, backend=backend)
    torch.testing.assert_close(regret, torch.tensor([7.0 - 5.0, 5.0 - 3.0], dtype=torch.float64))
    assert cl.metrics.normalized_regret(SPEC_MAX, c, y_max).item() == pytest.approx(4 / 12)


def test_metrics_accept_solver_and_y_true():
    c = torch.rand(6, 4, dtype=torch.float64)
    solver = cl.make_solver(SPEC_MIN)
    y_star = best(c, "min")
    y_pred = best(torch.rand(6, 4, dtype=torch.float64), "min")
    with_solver = cl.metrics.regret(SPEC_MIN, c, y_pred, backend=solver)
    with_truth = cl.metrics.regret(SPEC_MIN, c.numpy(), y_pred.numpy(), y_true=y_star)
    torch.testing.assert_close(with_solver, with_truth)
    assert (with_solver >= -1e-12).all()
    assert cl.metrics.regret(SPEC_MIN, c, y_star).abs().max() < 1e-12
    with pytest.raises(ValueError, match=r"y_pred has shape \(6, 3\) but cost_true has \(6, 4\)"):
        cl.metrics.regret(SPEC_MIN, c, torch.zeros(6, 3))
    with pytest.raises(ValueError, match="cost_true has trailing shape"):
        cl.metrics.regret(SPEC_MIN, torch.zeros(6, 3), torch.zeros(6, 3))


def test_losses_and_metrics_take_the_solver_as_a_value():
    """A spec, a compiled solver or a layer: the same loss and the same regret, and a
    solver or a layer is used as it is, never recompiled."""
    gen = torch.Generator().manual_seed(2)
    c_hat, c = torch.randn(2, 5, 4, generator=gen, dtype=torch.float64)
    solver = cl.make_solver(SPEC_MIN, "highs")
    layer = cl.ComboLayer(SPEC_MIN, backend="highs")
    losses = [cl.losses.SPOPlusLoss(problem, reduction="none")
              for problem in (SPEC_MIN, solver, layer)]
    assert losses[1].solver is solver and losses[2].solver is layer.solver
    values = [loss(c_hat, c) for loss in losses]
    torch.testing.assert_close(values[1], values[0])
    torch.testing.assert_close(values[2], values[0])
    fy = cl.losses.FenchelYoungLoss(layer, sigma=0.5)
    assert fy.solver is layer.solver
    y_pred = solver.solve(c_hat)
    regrets = [cl.metrics.regret(problem, c, y_pred) for problem in (SPEC_MIN, solver, layer)]
    torch.testing.assert_close(regrets[1], regrets[0])
    torch.testing.assert_close(regrets[2], regrets[0])
    with pytest.raises(ValueError, match="compiled solver twice"):
        cl.losses.SPOPlusLoss(layer, backend=solver)


def test_the_solver_keyword_is_deprecated_for_backend():
    c = torch.rand(3, 4, dtype=torch.float64)
    solver = cl.make_solver(SPEC_MIN)
    y = solver.solve(c)
    renamed = r"regret\(solver=...\) is deprecated: pass backend"
    with pytest.warns(DeprecationWarning, match=renamed):
        old = cl.metrics.regret(SPEC_MIN, c, y, solver=solver)
    torch.testing.assert_close(old, cl.metrics.regret(SPEC_MIN, c, y, backend=solver))


def _train(loss_name: str) -> tuple[float, float]:
    data = shortest_path(300, 5, grid=(3, 3), deg=4, noise_width=0.5, seed=3)
    torch.manual_seed(0)
    model = torch.nn.Linear(5, data.costs.shape[1])
    solver = cl.make_solver(data.spec)
    spo = cl.losses.SPOPlusLoss(data.spec, backend=solver)
    fy = cl.losses.FenchelYoungLoss(data.spec, sigma=0.5, num_samples=2, backend=solver)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)

    def test_regret() -> float:
        with torch.no_grad():
            decisions = solver.solve(model(data.features))
        return cl.metrics.normalized_regret(
            data.spec, data.costs, decisions, y_true=data.solutions
        ).item()

    before = test_regret()
    for _ in range(25):
        optimizer.zero_grad()
        pred = model(data.features)
        if loss_name == "spo":
            loss = spo(pred, data.costs, data.solutions)
        else:
            loss = fy(pred, data.solutions)
        loss.backward()
        optimizer.step()
    return before, test_regret()


@pytest.mark.parametrize("loss_name", ["spo", "fy"])
def test_training_reduces_the_regret(loss_name):
    before, after = _train(loss_name)
    assert after < 0.6 * before


# --- PyEPO-compatible generators (knapsack, TSP) -------------------------------------


def test_knapsack_data_follows_pyepo_and_is_optimal():
    from combolayer.data import knapsack

    data = knapsack(20, 4, 8, dim=2, deg=2, noise_width=0.3, seed=11, backend="highs")
    # PyEPO's per-instance loop, written independently of the vectorised generator
    rnd = np.random.RandomState(11)
    weights = rnd.choice(range(300, 800), size=(2, 8)) / 100
    B = rnd.binomial(1, 0.5, (8, 4))
    x = rnd.normal(0, 1, (20, 4))
    expected = np.zeros((20, 8))
    for i in range(20):
        values = (B @ x[i] / np.sqrt(4) + 3) ** 2 + 1
        values = values * 5 / 3.5**2
        expected[i] = np.ceil(values * rnd.uniform(0.7, 1.3, 8))
    np.testing.assert_allclose(data.spec.weights, weights)
    np.testing.assert_allclose(data.features.numpy(), x, rtol=1e-6)
    np.testing.assert_array_equal(data.costs.numpy(), expected)
    np.testing.assert_allclose(data.spec.capacities, weights.sum(1) / 2)
    # solutions: the brute-force optimum over all 256 subsets
    subsets = np.array(list(itertools.product([0, 1], repeat=8)), dtype=float)
    feasible = subsets[(subsets @ weights.T <= weights.sum(1) / 2 + 1e-9).all(1)]
    np.testing.assert_allclose((data.solutions.numpy() * expected).sum(1),
                               (expected @ feasible.T).max(1))


def test_tsp_data_follows_pyepo_and_is_optimal():
    from scipy.spatial.distance import pdist

    from combolayer.data import tsp

    n, p = 5, 3
    data = tsp(6, p, n, deg=3, noise_width=0.2, seed=4)
    rnd = np.random.RandomState(4)
    coords = np.concatenate((rnd.uniform(-2, 2, (2, 2)), rnd.normal(0, 1, (3, 2))))
    B = rnd.binomial(1, 0.5, (10, p)) * rnd.uniform(-2, 2, (10, p))
    x = rnd.normal(0, 1, (6, p))
    edge = pdist(coords) + ((x @ B.T) / np.sqrt(p) + 3) ** 3 / 9 * rnd.uniform(0.8, 1.2, (6, 10))
    costs = data.costs.numpy()
    np.testing.assert_allclose(costs, np.transpose(costs, (0, 2, 1)))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    np.testing.assert_allclose([[c[i, j] for i, j in pairs] for c in costs],
                               np.around(edge, 4), rtol=1e-6)
    # every tour through 5 cities: the solution's tour is the cheapest
    tours = [(0, *perm) for perm in itertools.permutations(range(1, n))]
    for c, y in zip(costs, data.solutions.numpy(), strict=True):
        lengths = [sum(c[t[k], t[(k + 1) % n]] for k in range(n)) for t in tours]
        assert (y.sum(0) == 2).all() and np.allclose(y, y.T)
        assert (c * y).sum() / 2 == pytest.approx(min(lengths), rel=1e-5)


def test_hamming_makes_margins_inert_under_identity_and_l1_does_not():
    # The documented pitfall: Hamming's gradient 1 - 2 y* ignores y, so noise cannot act.
    spec = cl.problems.Matching(4, 4)
    w = torch.randn(8, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    y_true = cl.make_solver(spec).solve(torch.randn(8, 4, 4, dtype=torch.float64))

    def grad(loss_fn, noise):
        layer = cl.ComboLayer(spec, projection="none", noise=noise,
                              generator=torch.Generator().manual_seed(1))
        x = w.clone().requires_grad_()
        loss_fn(layer(x), y_true).backward()
        return x.grad

    hamming = cl.losses.hamming
    torch.testing.assert_close(grad(hamming, 0.0), grad(hamming, 5.0))

    def l1(y, t):
        return (y - t).abs().mean()

    assert not torch.allclose(grad(l1, 0.0), grad(l1, 5.0))


# -- the metrics' docstrings ---------------------------------------------------------------


def test_metrics_docstrings_call_solver_keyword_deprecated():
    for metric in (cl.metrics.regret, cl.metrics.normalized_regret, cl.metrics.cost_ratio):
        doc = inspect.getdoc(metric)
        assert "deprecated" in doc and "backend=" in doc, metric.__name__
    args = inspect.getdoc(cl.metrics.regret).split("Args:")[1]
    solver_line = next(line for line in args.splitlines() if line.strip().startswith("solver:"))
    assert "deprecated" in solver_line


@pytest.mark.parametrize("metric", [cl.metrics.regret, cl.metrics.normalized_regret,
                                    cl.metrics.cost_ratio], ids=lambda m: m.__name__)
@pytest.mark.parametrize("argument", ["y_pred", "y_true"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_metrics_refuse_decisions_and_optima_with_nan_or_inf(metric, argument, bad):
    spec = cl.problems.TopK(n=3, k=1)
    given = {"cost_true": torch.tensor([[1.0, 3.0, 2.0]]),
             "y_pred": torch.tensor([[0.0, 0.0, 1.0]]), "y_true": torch.tensor([[0.0, 1.0, 0.0]])}
    assert torch.isfinite(torch.as_tensor(metric(spec, **given))).all()
    given[argument][0, 2] = bad
    with pytest.raises(ValueError, match=rf"{argument} must be finite, got {bad} at index "
                                         r"\(0, 2\)"):
        metric(spec, **given)


def test_metrics_refuse_auxiliaries_with_nan():
    # pick one of three; z <= y0 earns 1.5, so the regret needs the decisions' z
    spec = cl.ILP(shape=[3], num_aux=1, known_cost=[0, 0, 0, -1.5], constraints=[
        cl.Constraint(coefs=[1, 1, 1, 0], sense="==", rhs=1),
        cl.Constraint(coefs={3: 1, 0: -1}, sense="<=", rhs=0)])
    cost, y_pred = torch.tensor([[1.0, 0.5, 2.0]]), torch.tensor([[1.0, 0.0, 0.0]])
    assert cl.metrics.regret(spec, cost, y_pred, aux_pred=torch.tensor([[1.0]])).item() == 0.0
    with pytest.raises(ValueError, match=r"aux_pred must be finite, got nan at index \(0, 0\)"):
        cl.metrics.regret(spec, cost, y_pred, aux_pred=torch.tensor([[float("nan")]]))


def test_recall_at_k_refuses_embeddings_with_nan():
    x = torch.eye(4)
    assert cl.metrics.recall_at_k(x, [0, 0, 1, 1], ks=(1,)) == {1: 0.5}
    x[1, 3] = float("nan")
    with pytest.raises(ValueError, match=r"x must be finite, got nan at index \(1, 3\)"):
        cl.metrics.recall_at_k(x, [0, 0, 1, 1], ks=(1,))


def test_cost_ratio_refuses_a_negative_optimum_where_worse_reads_as_better():
    spec = cl.problems.TopK(n=3, k=1, sense="min")
    costs = torch.tensor([[-4.0, -2.0, 1.0]])
    with pytest.raises(ValueError, match=r"instance \(0,\) is -4: .* needs positive optima"):
        cl.metrics.cost_ratio(spec, costs, torch.tensor([[0.0, 0.0, 1.0]]))  # it read -0.25


def test_a_solver_of_another_problem_is_refused_as_a_metric_s_backend():
    """It solved its own problem in the given one's place: regret -3 for an optimum."""
    spec = cl.problems.Knapsack(weights=[[1.0, 1.0, 1.0, 1.0]], capacities=[2.0])
    other = cl.make_solver(cl.problems.Knapsack(weights=[[1.0, 1.0, 1.0, 1.0]], capacities=[1.0]))
    c, y = torch.tensor([[1.0, 2.0, 3.0, 4.0]]), torch.tensor([[0.0, 0.0, 1.0, 1.0]])
    with pytest.raises(ValueError, match=r"compiled for another Knapsack.*capacities differ"):
        cl.metrics.regret(spec, c, y, backend=other)
    assert cl.metrics.regret(spec, c, y, backend=cl.make_solver(spec)).tolist() == [0.0]
    with pytest.raises(ValueError, match="compiled for"):
        cl.losses.SPOPlusLoss(spec, backend=other)
    # the problem's own ILP form is the same problem
    ilp = cl.make_solver(spec.to_ilp())
    assert cl.metrics.regret(spec, c, y, backend=ilp).tolist() == [0.0]
    cl.losses.SPOPlusLoss(spec, backend=ilp)
    # but not where every solver of the spec floors the costs first (graphs with cycles)
    grid = cl.problems.ShortestPath.grid(3, 3)
    with pytest.raises(ValueError, match="its solver would not floor the costs"):
        cl.losses.SPOPlusLoss(grid, backend=cl.make_solver(grid.to_ilp()))


def test_cost_ratio_refuses_an_optimal_objective_of_zero():
    """The ratio has no value where the optimum is 0: it returned NaN (or inf) silently,
    which a later mean spread over the batch."""
    spec = cl.problems.TopK(n=3, k=1)
    costs = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match=r"optimal objective of instance \(1,\) is 0"):
        cl.metrics.cost_ratio(spec, costs, torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]))
    torch.testing.assert_close(
        cl.metrics.cost_ratio(spec, costs[:1], torch.tensor([[0.0, 0.0, 1.0]])),
        torch.tensor([1.0], dtype=torch.float64))


@pytest.mark.parametrize("generator", ["shortest_path", "knapsack", "tsp"])
@pytest.mark.parametrize("argument, value", [("deg", 0), ("deg", -1), ("deg", 2.5),
                                             ("noise_width", -0.5), ("num_features", 0)])
def test_generators_refuse_what_pyepos_refuse(generator, argument, value):
    """deg 0 gave costs that are one constant, unrelated to the features; PyEPO's
    generators refuse these arguments, and so do ours, naming them."""
    size = {"shortest_path": {}, "knapsack": {"num_items": 5}, "tsp": {"num_nodes": 5}}
    arguments = {"num_data": 4, "num_features": 3, **size[generator], argument: value}
    with pytest.raises(ValueError, match=argument):
        getattr(cl.data, generator)(**arguments)


@pytest.mark.parametrize("make, message", [
    (lambda: cl.data.shortest_path(2, 3, grid=5), r"grid must be a pair .* got 5"),
    (lambda: cl.data.shortest_path(2, 3, grid=(2.5, 3)), r"grid must be a pair"),
    (lambda: cl.data.shortest_path(2, 3, grid=(2, 2, 2)), r"grid must be a pair"),
    (lambda: cl.data.shortest_path(2, 3, grid=(-2, 3)), r"grid must be a pair"),
    (lambda: cl.data.knapsack(2, 3, -1), r"num_items must be an integer >= 1, got -1"),
    (lambda: cl.data.knapsack(2, 3, 4, dim=0), r"dim must be an integer >= 1, got 0"),
    (lambda: cl.data.tsp(2, 3, 4.5), r"num_nodes must be an integer >= 1, got 4.5"),
    # numpy's and Python's own errors before (OverflowError, TypeError)
    (lambda: cl.data.shortest_path(2, 3, noise_width=float("inf")), r"finite number >= 0"),
    (lambda: cl.data.shortest_path(2, 3, noise_width="0.5"), r"noise_width must be a finite"),
    (lambda: cl.data.knapsack(2, 3, 5, capacities=10.0), r"one number per weight dimension"),
    (lambda: cl.data.knapsack(2, 3, 5, seed=1.5), r"seed must be None, an integer"),
    (lambda: cl.data.shortest_path(4, 3).split(2.0), r"num_train must be an integer"),
    (lambda: cl.data.shortest_path(2, 3, noise_width=np.array(1 + 1j)), r"noise_width must"),
])
def test_generators_name_a_bad_problem_size(make, message):
    """Python's and numpy's own errors before (cannot unpack an int; negative dimensions)."""
    with pytest.raises(cl.ComboLayerError, match=message):
        make()


def test_generators_take_what_numpy_takes_as_a_seed_and_numbers_of_any_kind():
    for seed in (np.random.PCG64(1), range(3), np.int64(3), [1, 2]):
        cl.data.shortest_path(4, 3, grid=(2, 2), seed=seed)
    data = cl.data.shortest_path(4, 3, grid=(2, 2), noise_width=np.array(0.5))
    assert [len(part.costs) for part in data.split(torch.tensor(2))] == [2, 2]
