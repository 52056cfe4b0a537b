"""Per-call rows ``A x <= b``: every backend that solves ILPs equals brute force
with per-instance rows, the executors carry them, infeasible rows raise or are flagged,
and the layer checks them and refuses a gradient no method can give."""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pytest
import torch

import combolayer as cl
from tests.bruteforce import feasible_points, random_ilp

HAS_GUROBI = importlib.util.find_spec("gurobipy") is not None
MIP_BACKENDS = ["highs", "scip", "cvxpy", "enumerate",
                pytest.param("gurobi", marks=pytest.mark.skipif(not HAS_GUROBI,
                                                                 reason="gurobipy missing"))]


def rows_around(rng: np.random.Generator, points: np.ndarray, count: int, m: int = 2):
    """``count`` instances of ``m`` random integer rows, each kept feasible by a random
    feasible point of the spec (slack 0-2, so some rows are tight)."""
    n = points.shape[1]
    A = rng.integers(-2, 3, (count, m, n)).astype(float)
    anchors = points[rng.integers(0, len(points), count)]
    b = np.einsum("imn,in->im", A, anchors) + rng.integers(0, 3, (count, m))
    return A, b


def brute_force_values(spec: cl.ILP, points: np.ndarray, costs: np.ndarray, A: np.ndarray,
                       b: np.ndarray) -> np.ndarray:
    """The optimal objective ``<c, y>`` of each instance over the spec's feasible points
    that also meet its rows (numpy, all instances at once)."""
    ok = (np.einsum("imn,kn->imk", A, points) <= b[..., None] + 1e-9).all(axis=1)
    values = costs @ points[:, : spec.num_outputs].T
    worst = np.inf if spec.sense == "min" else -np.inf
    values = np.where(ok, values, worst)
    return values.min(axis=1) if spec.sense == "min" else values.max(axis=1)


@pytest.mark.parametrize("backend", MIP_BACKENDS)
def test_random_ilps_with_per_instance_rows_equal_brute_force(backend):
    """The issue's goal, 0 wrong of >= 1000 per backend: 8 random ILPs (binary ones for
    "enumerate"; integer and auxiliary variables, min and max, for the others) with 128
    instances each, every instance its own rows, one batched call per spec."""
    rng = np.random.default_rng(37)
    checked = wrong = 0
    while checked < 1000:
        spec = random_ilp(rng, integer=False if backend == "enumerate" else None)
        points = feasible_points(spec)
        A, b = rows_around(rng, points, 128)
        costs = rng.normal(size=(128, spec.num_outputs))
        solver = cl.make_solver(spec, backend)
        y, aux = solver.solve(costs, A=A, b=b, return_aux=True)
        x = np.concatenate([y, aux], axis=1)
        meets = (np.einsum("imn,in->im", A, x) <= b + 1e-6).all(axis=1)
        expected = brute_force_values(spec, points, costs, A, b)
        got = (costs * y).sum(axis=1)
        wrong += int((~meets | ~np.isclose(got, expected, atol=1e-6)).sum())
        checked += len(costs)
    assert wrong == 0, f"{backend}: {wrong} wrong of {checked}"


@pytest.mark.parametrize("executor", ["thread", "process"])  # Ray: tests/test_executors.py
def test_executors_hand_each_chunk_its_rows(executor, monkeypatch):
    """Workers (started before the call) get chunks with their own rows; duplicates are
    solved once only when costs and rows both repeat."""
    rng = np.random.default_rng(5)
    spec = random_ilp(rng, integer=True)
    points = feasible_points(spec)
    A, b = rows_around(rng, points, 40)
    costs = rng.normal(size=(20, spec.num_outputs))
    costs = np.concatenate([costs, costs])  # the same costs, other rows
    solver = cl.make_solver(spec, {"name": "highs", "executor": executor, "workers": 2})
    kernel = solver.kernel
    assert kernel.ready(wait=None)
    mapped = []
    original = type(kernel)._map

    def spy(self, chunks, deadline):
        mapped.extend(chunks)
        return original(self, chunks, deadline)

    monkeypatch.setattr(type(kernel), "_map", spy)
    y = solver.solve(costs, A=A, b=b)
    assert len(mapped) > 1 and all(isinstance(chunk, tuple) for chunk in mapped)
    np.testing.assert_allclose((costs * y).sum(1),
                               brute_force_values(spec, points, costs, A, b), atol=1e-6)
    kernel.close()


def test_unbatched_rows_broadcast_and_torch_keeps_dtype_and_device():
    spec = cl.ILP(shape=[4], integrality="binary")
    solver = cl.make_solver(spec, "scip")
    costs = torch.tensor([[-1.0, -2.0, -3.0, -4.0], [-4.0, -3.0, -2.0, -1.0]],
                         dtype=torch.float32)
    y = solver.solve(costs, A=torch.ones(1, 4), b=torch.tensor([2.0]))
    assert y.dtype == torch.float32
    assert y.tolist() == [[0, 0, 1, 1], [1, 1, 0, 0]]
    # a leading sample axis over a (2,) batch of rows: trailing axes align
    A = torch.ones(2, 1, 4)
    b = torch.tensor([[1.0], [3.0]])
    y = solver.solve(costs.expand(3, 2, 4), A=A, b=b)
    assert y.sum(-1).tolist() == [[1, 3]] * 3


def test_a_backend_without_rows_hands_calls_with_rows_to_one_that_takes_them():
    spec = cl.problems.TopK(n=4, k=2, sense="min")
    solver = cl.make_solver(spec)
    assert solver.backend == "torch"
    y = solver.solve(np.array([1.0, 2.0, 3.0, 4.0]), A=np.array([[1.0, 0, 0, 0]]),
                     b=np.array([0.0]))
    assert y.tolist() == [0, 1, 1, 0]
    assert solver.row_solver().backend != "torch"


@pytest.mark.parametrize(("A", "b", "match"), [
    (np.ones((1, 3)), np.ones(1), "A has 3 columns but .* has 4 variables"),
    (np.ones((2, 4)), np.ones(3), "b must have one entry per row of A: A has m = 2"),
    (np.ones((3, 1, 4)), np.ones((3, 1)), "does not broadcast onto the costs' batch shape"),
    (np.full((1, 4), np.nan), np.ones(1), "A must be finite"),
    (np.ones(4), np.ones(1), r"A must have shape \(\*batch, m, num_vars\)"),
    (np.ones((1, 4)), None, "need both A and b"),
])
def test_bad_rows_are_refused_naming_expected_and_got(A, b, match):
    solver = cl.make_solver(cl.ILP(shape=[4], integrality="binary"), "highs")
    with pytest.raises(ValueError, match=match):
        solver.solve(np.zeros((2, 4)), A=A, b=b)


def test_infeasible_rows_raise_by_default_and_are_flagged_on_request():
    spec = cl.ILP(shape=[3], integrality="binary")
    costs = -np.ones((3, 3))
    A = np.ones((3, 1, 3))
    b = np.array([[1.0], [-1.0], [2.0]])  # the second instance: x >= 0 cannot sum below 0
    for backend in ("highs", "scip", "cvxpy", "enumerate"):
        with pytest.raises(cl.InfeasibleError, match="1 of 3 instances .* infeasible"):
            cl.make_solver(spec, backend).solve(costs, A=A, b=b)
        solver = cl.make_solver(spec, {"name": backend, "on_infeasible": "flag"})
        with pytest.warns(RuntimeWarning, match="1 of 3 instances"):
            y, status = solver.solve(costs, A=A, b=b, return_status=True)
        assert status == ("optimal", "infeasible", "optimal"), backend
        assert y[1].tolist() == [0, 0, 0] and y[0].sum() == 1 and y[2].sum() == 2


def test_layer_flags_infeasible_rows_with_one_warning_and_last_infeasible():
    spec = cl.ILP(shape=[3], integrality="binary")
    layer = cl.ComboLayer(spec, projection="none", on_infeasible="flag")
    b = torch.tensor([[1.0], [-1.0], [-2.0], [2.0]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = layer(-torch.ones(4, 3), A=torch.ones(1, 3), b=b)
    messages = [str(w.message) for w in caught if "per-call rows" in str(w.message)]
    assert len(messages) == 1 and "2 of 4 instances" in messages[0]
    assert layer.last_infeasible.tolist() == [False, True, True, False]
    assert y.sum(1).tolist() == [1, 0, 0, 2]


@pytest.mark.parametrize("method", [
    "identity", cl.Perturbed(sigma=0.5, num_samples=2), cl.Perturbed(sigma=0.5, num_samples=3),
    cl.IMLE(lam=5.0, num_samples=2), cl.AIMLE(num_samples=2),
    cl.ScoreFunction(num_samples=3)], ids=lambda m: getattr(m, "name", m))
@pytest.mark.parametrize("batch", [(4,), (2, 2)])
def test_last_infeasible_names_the_instances_whatever_samples_the_method_solves(method, batch):
    """Methods that solve several samples per instance in training flag the instance
    whose rows are infeasible, not the sample's position (they named other instances)."""
    spec = cl.problems.TopK(3, 1)
    layer = cl.ComboLayer(spec, method=method, on_infeasible="flag")
    b = torch.tensor([[1.0], [1.0], [-1.0], [1.0]]).reshape(*batch, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        y = layer(torch.randn(*batch, 3, generator=torch.Generator().manual_seed(0)),
                  A=torch.ones(1, 3), b=b)
    expected = (b[..., 0] < 0)
    assert layer.last_infeasible.tolist() == expected.tolist()
    assert (y.flatten(0, -2).sum(-1) == 0).tolist() == expected.flatten().tolist()


def test_rows_that_need_a_gradient_need_a_method_that_gives_one():
    spec = cl.ILP(shape=[3], integrality="binary")
    w = torch.randn(2, 3, requires_grad=True)
    A = torch.ones(2, 1, 3, requires_grad=True)
    b = torch.ones(2, 1)
    with pytest.raises(ValueError, match="gives none to per-call rows: use one of .*"
                                         "comboptnet.*score_function"):
        cl.ComboLayer(spec, method="blackbox", projection="none")(w, A=A, b=b)
    # as data (no gradient), every method takes them
    for method in ("identity", "blackbox", "perturbed", "imle", "comboptnet",
                   "score_function"):
        y = cl.ComboLayer(spec, method=method, projection="none")(w, A=A.detach(), b=b)
        y.sum().backward()
        assert w.grad is not None and torch.isfinite(w.grad).all(), method
        w.grad = None


def test_the_hull_of_the_fixed_part_is_sound_with_rows():
    """projection="auto" uses the spec's own hull: every point feasible with more rows
    lies in it, so adding a normal direction to w leaves the solution unchanged."""
    spec = cl.ILP.from_matrices(shape=[4], A_eq=np.ones((1, 4)), b_eq=[2.0])
    hull = cl.analyze(spec)
    assert hull.normals.shape[0] == 1
    layer = cl.ComboLayer(spec, projection="auto")
    rng = torch.Generator().manual_seed(0)
    w = torch.randn(16, 4, generator=rng)
    A = torch.randint(-1, 2, (16, 1, 4), generator=rng).double()
    b = torch.ones(16, 1) * 1.0
    y = layer(w.double(), A=A, b=b.double())
    shifted = layer(w.double() + 5.0 * torch.tensor(hull.normals[0]), A=A, b=b.double())
    assert torch.equal(y, shifted)
    assert ((A @ y.unsqueeze(-1)).squeeze(-1) <= b + 1e-9).all()


def test_enumeration_is_auto_for_small_binary_problems_and_batched_on_torch():
    spec = cl.ILP(shape=[10], integrality="binary",
                  constraints=[cl.Constraint(coefs=[1.0] * 10, sense="<=", rhs=4)])
    solver = cl.make_solver(spec, {"name": "auto", "deterministic": True})
    assert solver.backend == "enumerate"
    costs = torch.randn(300, 10, generator=torch.Generator().manual_seed(1))
    reference = cl.make_solver(spec, "scip").solve(costs)
    np.testing.assert_allclose((solver.solve(costs) * costs).sum(1),
                               (reference * costs).sum(1), atol=1e-6)
    with pytest.raises(cl.BackendUnavailable, match="at most 20 binary variables"):
        cl.make_solver(cl.ILP(shape=[21], integrality="binary"), "enumerate")
    with pytest.raises(cl.BackendUnavailable, match="binary problems only"):
        cl.make_solver(cl.ILP(shape=[3], integrality="integer", upper=2), "enumerate")


def test_enumeration_of_every_binary_point_checks_rows_by_halves_as_brute_force():
    """With every 0/1 point kept (no rows of the spec's own, >= 8 variables) the kernel
    checks ``A x <= b`` from the two halves of the variables: the same mask as the full
    product, and solutions equal to brute force with shared and per-instance rows
    (integer rows, some tight)."""
    from combolayer.backends.enumeration import EnumerationKernel, _binary_form

    rng = np.random.default_rng(5)
    spec = cl.ILP(shape=[10], integrality="binary")
    kernel = EnumerationKernel(_binary_form(spec)[0])
    assert kernel._split == 5
    points = kernel.points
    A = torch.tensor(rng.integers(-2, 3, (7, 3, 10)), dtype=torch.float64)
    b = torch.tensor(rng.integers(-1, 4, (7, 3)), dtype=torch.float64)
    full = ((A @ points.T) <= b[..., None] + 1e-9).all(dim=-2)
    assert torch.equal(kernel._allowed(A, b, points), full)
    solver = cl.make_solver(spec, "enumerate")
    all_points = feasible_points(spec)
    A, b = rows_around(rng, all_points, 64, m=4)
    costs = rng.normal(size=(64, 10))
    for rows in ((A, b), (A[0], b[0])):  # per instance, and one set shared by the batch
        y = solver.solve(torch.tensor(costs), A=torch.tensor(rows[0]), b=torch.tensor(rows[1]))
        A_all, b_all = np.broadcast_to(rows[0], A.shape), np.broadcast_to(rows[1], b.shape)
        np.testing.assert_allclose((y.numpy() * costs).sum(1),
                                   brute_force_values(spec, all_points, costs, A_all, b_all),
                                   atol=1e-9)


def test_enumeration_solves_a_problem_without_rows_of_its_own_variable_by_variable():
    """No rows of the spec's own: the minimum is separable, so "auto" puts enumeration
    first whatever the number of points (16 free variables: 65 536) and a call without
    per-call rows is one comparison per variable, equal to the argmin over every point
    with its lexicographic ties (zero costs stay 0) and bounds (a variable fixed at 1);
    calls with per-call rows still enumerate."""
    from combolayer.backends.enumeration import AUTO_MAX_POINTS

    rng = np.random.default_rng(3)
    spec = cl.ILP(shape=[16], integrality="binary", lower=[0] * 15 + [1])
    assert len(feasible_points(spec)) > AUTO_MAX_POINTS
    solver = cl.make_solver(spec, {"name": "auto", "deterministic": True})
    assert solver.backend == "enumerate"
    assert "points" not in vars(solver.kernel)  # never listed for calls without rows
    costs = rng.normal(size=(64, 16))
    costs[:8, :4] = 0.0  # ties
    all_points = feasible_points(spec)
    expected = all_points[(costs @ all_points.T).argmin(1)]  # the first optimum per row
    np.testing.assert_array_equal(solver.solve(costs), expected)
    A, b = rows_around(rng, all_points, 64, m=2)
    y = solver.solve(torch.tensor(costs), A=torch.tensor(A), b=torch.tensor(b))
    np.testing.assert_allclose((y.numpy() * costs).sum(1),
                               brute_force_values(spec, all_points, costs, A, b), atol=1e-9)


def count_exact_rows(layer: cl.ComboLayer) -> list[int]:
    """The row counts of the layer's exact solves from now on (one entry per call)."""
    counts, original = [], layer.solver._full_batch

    def spy(costs, start=None, full=False, rows=None):
        counts.append(len(costs))
        return original(costs, start, full, rows)

    layer.solver._full_batch = spy
    return counts


def test_the_solution_cache_answers_only_with_pooled_solutions_feasible_for_each_row():
    """solve_ratio < 1 with per-call rows: a row drawn for the pool gets the cheapest
    pooled solution that meets its own rows; a row none meets is solved exactly."""
    rng = np.random.default_rng(3)
    spec = cl.ILP(shape=[6], integrality="binary",
                  constraints=[cl.Constraint(coefs=[1.0] * 6, sense="<=", rhs=4)])
    points = feasible_points(spec)
    layer = cl.ComboLayer(spec, projection="none", solve_ratio=0.2,
                          generator=torch.Generator().manual_seed(0))
    layer.pool.seed(torch.tensor(points))  # every feasible point of the fixed part
    A, b = rows_around(rng, points, 200, m=3)
    A, b = torch.tensor(A), torch.tensor(b)
    costs = torch.tensor(rng.normal(size=(200, 6)))
    exact_rows = count_exact_rows(layer)
    y = layer(costs, A=A, b=b)
    assert ((A @ y.unsqueeze(-1)).squeeze(-1) <= b + 1e-9).all()
    # the pool holds every point: each answer is the optimum under its rows
    np.testing.assert_allclose((costs * y).sum(1).numpy(), brute_force_values(
        spec, points, costs.numpy(), A.numpy(), b.numpy()), atol=1e-9)
    assert 0 < sum(exact_rows) < 100  # about 20% solved, the rest from the pool


def test_the_solution_cache_checks_rows_on_auxiliaries_with_the_ones_it_solved():
    """Per-call rows that weigh auxiliaries the pool does not keep (no known cost): a pooled
    y answers only with the auxiliaries this cache's own exact solve of it returned, on the
    whole solution concat(y, aux). Seeded outputs (no auxiliaries) never answer such rows;
    once solved, the pool answers, and every answer meets its rows for some auxiliaries."""
    rng = np.random.default_rng(4)
    # a_j = 1 lets a pair of outputs both be 1; the per-call rows budget the auxiliaries
    spec = cl.ILP(shape=[4], num_aux=2, integrality="binary", constraints=[
        cl.Constraint(coefs=[1, 1, 0, 0, -1, 0], sense="<=", rhs=1),
        cl.Constraint(coefs=[0, 0, 1, 1, 0, -1], sense="<=", rhs=1)])
    points = feasible_points(spec)
    count = 60
    A = np.zeros((count, 2, 6))
    A[:, 0, 4:] = 1.0  # a_0 + a_1 <= budget
    A[:, 1, :4] = rng.integers(-1, 2, (count, 4))
    b = np.stack([rng.integers(0, 3, count), np.full(count, 2)], axis=1).astype(float)
    A, b = torch.tensor(A), torch.tensor(b)
    layer = cl.ComboLayer(spec, projection="none", solve_ratio=0.0,
                          generator=torch.Generator().manual_seed(0))
    layer.pool.seed(torch.tensor(np.unique(points[:, :4], axis=0)))
    exact_rows = count_exact_rows(layer)

    def meets_its_rows(y: torch.Tensor) -> np.ndarray:
        """Whether each output row has auxiliaries with which the whole point is feasible
        for the spec and meets its instance's rows (brute force)."""
        same = (points[None, :, :4] == y.numpy()[:, None, :]).all(axis=2)  # (count, K)
        ok = (np.einsum("imn,kn->imk", A.numpy(), points) <= b.numpy()[..., None] + 1e-9)
        return (same & ok.all(axis=1)).any(axis=1)

    for round_ in range(2):
        costs = torch.tensor(rng.normal(size=(count, 4)) - 1.0)  # most outputs want to be 1
        exact_rows.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no warning: the pool checks these rows
            y = layer(costs, A=A, b=b)
        assert meets_its_rows(y).all(), round_
        if round_ == 0:
            assert sum(exact_rows) == count  # the seeded outputs have no auxiliaries
        else:
            assert sum(exact_rows) < count // 2  # the pool answers most now
    tight = (b[:, 0] == 0).numpy()
    assert tight.any() and (y.numpy()[tight][:, :2].sum(1) <= 1).all()


def _some_rows_infeasible(count: int, seed: int):
    """A 6-variable binary spec, costs and per-call rows for ``count`` instances; every
    third instance's first row (sum x <= -0.5) leaves it without a feasible point (the
    ``bad`` mask), the others keep x = 0 feasible with slack 1."""
    spec = cl.ILP(shape=[6], integrality="binary",
                  constraints=[cl.Constraint(coefs=[1.0] * 6, sense="<=", rhs=4)])
    generator = torch.Generator().manual_seed(seed)
    w = torch.randn(count, 6, generator=generator, dtype=torch.float64)
    A = torch.randint(-1, 2, (count, 2, 6), generator=generator).double()
    b = torch.ones(count, 2, dtype=torch.float64)
    bad = torch.arange(count) % 3 == 1
    A[bad, 0], b[bad, 0] = 1.0, -0.5
    return spec, w, A, b, bad


def test_the_solution_cache_keeps_every_flagged_row_for_comboptnet(monkeypatch):
    """solve_ratio < 1, on_infeasible="flag": CombOptNet reads the statuses its solve
    returns; under the cache they must cover every instance of the batch (those
    answered from the pool too), with each infeasible instance flagged, as without it."""
    from combolayer.backends.wrapper import SolverWrapper
    from combolayer.estimators.comboptnet import CombOptNet

    spec, w, A, b, bad = _some_rows_infeasible(30, seed=0)
    seen = []
    forward = CombOptNet.forward

    class Spy(SolverWrapper):
        def solve_min(self, costs, **kwargs):
            out = self._solver.solve_min(costs, **kwargs)
            self.statuses = tuple(kwargs["statuses"])
            return out

    def recording(self, solver, costs, **kwargs):
        spy = Spy(solver)
        out = forward(self, spy, costs, **kwargs)
        seen.append((out[1][2].numpy(), spy.statuses))
        return out

    monkeypatch.setattr(CombOptNet, "forward", recording)
    layer = cl.ComboLayer(spec, method="comboptnet", projection="none", on_infeasible="flag",
                          solve_ratio=0.25, generator=torch.Generator().manual_seed(1))
    layer.pool.seed(torch.tensor(feasible_points(spec)))
    for _ in range(3):
        with pytest.warns(RuntimeWarning, match="10 of 30 instances"):
            y = layer(w, A=A.clone().requires_grad_(True), b=b.clone().requires_grad_(True))
        assert layer.last_infeasible.tolist() == bad.tolist()
        assert (y[bad] == 0).all()
    assert len(seen) == 3
    for flags, statuses in seen:
        assert flags.tolist() == bad.tolist()
        assert "pooled" in statuses  # not vacuous: some rows came from the pool
        assert all(status == "infeasible" for status, row in zip(statuses, bad) if row)


def test_the_solution_cache_keeps_every_flagged_sample_for_the_score_function():
    """score_function's samples under the cache: a sample whose rows are infeasible is
    zeros and flagged (it is never answered from the pool), so the layer flags the same
    instances, and their outputs are the same zeros, as with every sample solved exactly."""
    spec, w, A, b, bad = _some_rows_infeasible(30, seed=2)
    runs = []
    for ratio in (1.0, 0.25):
        method = cl.estimators.ScoreFunction(sigma=0.1, num_samples=4, perturb=("w", "b"),
                                             generator=torch.Generator().manual_seed(3))
        layer = cl.ComboLayer(spec, method=method, projection="none", on_infeasible="flag",
                              solve_ratio=ratio, generator=torch.Generator().manual_seed(4))
        layer.pool.seed(torch.tensor(feasible_points(spec)))
        b_in = b.clone().requires_grad_(True)
        with pytest.warns(RuntimeWarning, match="10 of 30 instances"):
            y = layer(w, A=A, b=b_in)
        y.sum().backward()
        assert torch.isfinite(b_in.grad).all()
        runs.append((layer.last_infeasible.tolist(), y[bad]))
    (exact_flags, exact_bad), (pooled_flags, pooled_bad) = runs
    assert exact_flags == pooled_flags == bad.tolist()
    assert (exact_bad == 0).all() and (pooled_bad == 0).all()


def test_per_call_rows_change_the_kept_model_in_place_and_leave_it_as_built():
    """No model is rebuilt for rows: after a call the kept model has its own rows again
    (HiGHS, SCIP, Gurobi), and cvxpy keeps one parameter problem per row count."""
    rng = np.random.default_rng(8)
    spec = random_ilp(rng, integer=True)
    points = feasible_points(spec)
    A, b = rows_around(rng, points, 6)
    costs = rng.normal(size=(6, spec.num_outputs))
    counts = {
        "highs": lambda kernel: kernel.model.getNumRow(),
        "scip": lambda kernel: kernel.model.getNConss(),
        "cvxpy": lambda kernel: len(kernel.problem.constraints),
    }
    if HAS_GUROBI:
        # Gurobi applies removals lazily, at the next optimize or update
        counts["gurobi"] = lambda kernel: (kernel.model.update(),
                                           kernel.model.getAttr("NumConstrs"))[1]
    for backend, count in counts.items():
        solver = cl.make_solver(spec, backend)
        kernel = solver.kernel
        model, before = getattr(kernel, "model", None), count(kernel)
        solver.solve(costs, A=A, b=b)
        solver.solve(costs, A=A[:, :1], b=b[:, :1])
        assert count(kernel) == before, backend
        assert getattr(kernel, "model", None) is model, backend
    cvxpy_kernel = cl.make_solver(spec, "cvxpy").kernel
    cl.make_solver(spec, "cvxpy")  # another solver: its own kernel
    for _ in range(2):
        cvxpy_kernel(costs, rows=cl.backends.rows.Rows(A, b, np.arange(6)))
    assert sorted(cvxpy_kernel._with_rows) == [2]


@pytest.mark.parametrize("backend", ["highs", "enumerate"])
def test_rows_given_once_for_a_batch_are_set_once_and_flag_every_instance(backend):
    """Rows given once (broadcast over the batch, as a learned constraint is) are one
    entry: the kept model gets them once per call, and when they are infeasible every
    instance of the batch is flagged."""
    spec = cl.ILP(shape=[5], integrality="binary")
    layer = cl.ComboLayer(spec, backend=backend, projection="none", on_infeasible="flag")
    kernel = layer.solver.kernel
    calls = []
    if backend == "highs":
        original = kernel._set_rows
        kernel._set_rows = lambda A, b: (calls.append(len(A)), original(A, b))[1]
    w = torch.randn(8, 5, generator=torch.Generator().manual_seed(0))
    y = layer(w, A=torch.ones(1, 5), b=torch.tensor([2.0]))
    assert (y.sum(1) <= 2).all()
    reference = cl.make_solver(spec, "scip").solve(w, A=torch.ones(8, 1, 5),
                                                   b=torch.full((8, 1), 2.0))
    torch.testing.assert_close((y * w).sum(1), (reference * w).sum(1))
    if backend == "highs":
        assert calls == [1]
    with pytest.warns(RuntimeWarning, match="8 of 8 instances"):
        y = layer(w, A=torch.ones(1, 5), b=torch.tensor([-1.0]))
    assert layer.last_infeasible.all() and (y == 0).all()


# -- per-call rows keep their own precision, and answers meet them -------------------

#: Rows that float32 cannot hold: 16777217 rounds to 16777216, so ``y = [1, 1]`` looks
#: feasible in float32 and breaks the row by 1 in float64.
BIG_A = torch.tensor([[16777217.0, 0.0]], dtype=torch.float64)
BIG_b = torch.tensor([16777216.0], dtype=torch.float64)


#: SCIP meets a row of 16777217 only to its relative tolerance unless told otherwise.
TIGHT = {"highs": "highs", "enumerate": "enumerate",
         "scip": cl.BackendConfig(name="scip", options={"numerics/feastol": 1e-10})}


@pytest.mark.parametrize("backend", list(TIGHT))
def test_float32_costs_do_not_round_float64_rows(backend):
    backend = TIGHT[backend]
    spec = cl.ILP(shape=[2], sense="max",
                  constraints=[cl.Constraint(coefs=[1, 1], sense="<=", rhs=2)])
    layer = cl.ComboLayer(spec, backend=backend, projection="none")
    for dtype in (torch.float32, torch.float64):
        y = layer(torch.tensor([[1.0, 1.0]], dtype=dtype), A=BIG_A, b=BIG_b)
        assert y.tolist() == [[0.0, 1.0]], (backend, dtype)
    solver = cl.make_solver(spec, backend)
    y = solver.solve(torch.tensor([[1.0, 1.0]]), A=BIG_A, b=BIG_b)
    assert y.tolist() == [[0.0, 1.0]]


def test_the_solution_cache_checks_float64_rows_in_float64():
    spec = cl.ILP(shape=[2], integrality="binary")
    layer = cl.ComboLayer(spec, projection="none", solve_ratio=0.0,
                          generator=torch.Generator().manual_seed(0))
    layer.pool.seed(torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
    y = layer(torch.tensor([[-1.0, 0.0]]), A=BIG_A, b=BIG_b)  # [1, 0] breaks it
    assert y.tolist() == [[0.0, 0.0]]


@pytest.mark.parametrize("backend", ["highs", "enumerate"])
def test_an_integer_A_keeps_a_fractional_b(backend):
    spec = cl.ILP(shape=[2], constraints=[cl.Constraint(coefs=[1, 1], sense="<=", rhs=2)])
    solver = cl.make_solver(spec, backend)
    expected = solver.solve(np.array([[1.0, 2.0]]), A=np.array([[-1, -1]]), b=np.array([-0.5]))
    assert expected.tolist() == [[1.0, 0.0]]  # x1 + x2 >= 0.5: one of them
    y = solver.solve(torch.tensor([[1.0, 2.0]]), A=torch.tensor([[-1, -1]]),
                     b=torch.tensor([-0.5]))
    assert y.tolist() == [[1.0, 0.0]]


@pytest.mark.parametrize("backend", ["highs", "scip",
                                     pytest.param("gurobi", marks=pytest.mark.skipif(
                                         not HAS_GUROBI, reason="gurobipy missing"))])
def test_an_answer_that_breaks_a_per_call_row_of_integers_is_never_returned(backend):
    """A MIP solver's tolerance is relative: on a per-call row with coefficients of 1e9
    an answer within it may break the row by whole units (SCIP returned [1, 1, 1]). Such
    an answer is an error naming the option that tightens the tolerance, as for the
    spec's own rows; with it tightened the optimum comes back."""
    A, b = np.array([[1e9, 1e9, 1.0]]), np.array([2e9 - 1])
    costs = np.array([10.0, 1.0, 1.0])
    spec = cl.ILP(shape=[3], sense="max", integrality="binary")
    try:
        y = cl.make_solver(spec, backend).solve(costs, A=A, b=b)
    except cl.SolverError as error:
        option = {"highs": "mip_feasibility_tolerance", "scip": "numerics/feastol",
                  "gurobi": "FeasibilityTol"}[backend]
        assert option in str(error) and "per-call row 0 of instance 0" in str(error)
        tight = cl.BackendConfig(name=backend, options={option: 1e-10})
        y = cl.make_solver(spec, tight).solve(costs, A=A, b=b)
    assert y.tolist() == [1.0, 0.0, 1.0]


@pytest.mark.parametrize("backend", ["highs", "scip",
                                     pytest.param("gurobi", marks=pytest.mark.skipif(
                                         not HAS_GUROBI, reason="gurobipy missing"))])
def test_a_per_call_row_of_tiny_coefficients_keeps_its_optimum(backend):
    """Rows scaled by 1e-9 (the same feasible set) lost coefficients below the solvers'
    resolution: HiGHS and SCIP returned [0, 3, 1] (2.91) where [0, 3, 3] (3.69) is
    optimal. Each row whose coefficients are all below 1 is brought up to a unit size
    by a power of two, as small costs are."""
    costs = np.array([-0.75, 0.84, 0.39])
    a, r = np.array([0.01, -0.98, 1.07]), 1.12
    spec = cl.ILP(shape=[3], sense="max", integrality="integer", upper=3)
    solver = cl.make_solver(spec, backend)
    for scale in (1.0, 1e-9):
        y = solver.solve(costs, A=a[None] * scale, b=np.array([r * scale]))
        assert y.tolist() == [0.0, 3.0, 3.0], scale


def test_rows_of_small_coefficients_hold_in_enumeration_and_the_solution_pool():
    """Enumeration and the pool met rows to an absolute 1e-6: a row of 1e-7 took what it
    forbids, an infeasible one (y0 <= -0.5, scaled by 1e-8) was neither raised nor
    flagged, and y0 + y1 <= 1 - 1e-7 took both."""
    spec = cl.problems.Knapsack(weights=[[1.0, 1.0, 1.0, 1.0]], capacities=[4.0])
    values = np.array([1.0, 2.0, 3.0, 4.0])
    solver = cl.make_solver(spec, "enumerate")
    def rows(a, b):
        return np.array([a]), np.array([b])

    A, b = rows([1e-7, 1e-7, 0, 0], 1e-7)
    assert solver.solve(values, A=A, b=b).tolist() == [0, 1, 1, 1]
    A, b = rows([1.0, 1, 0, 0], 1 - 1e-7)
    assert solver.solve(values, A=A, b=b).tolist() == [0, 0, 1, 1]
    A, b = rows([1e-8, 0, 0, 0], -5e-9)
    with pytest.raises(cl.InfeasibleError):
        solver.solve(values, A=A, b=b)
    layer = cl.ComboLayer(cl.problems.TopK(4, 2), solve_ratio=0.01,
                          backend=cl.BackendConfig(name="highs", on_infeasible="flag"))
    torch.manual_seed(0)
    for _ in range(5):
        layer(torch.randn(64, 4))  # the pool fills up
    w = torch.tensor([[4.0, 3.0, 2.0, 1.0]] * 4)
    y = layer(w, A=torch.tensor([[1e-7, 1e-7, 0.0, 0.0]]), b=torch.tensor([1e-7]))
    assert y.tolist() == [[1.0, 0.0, 1.0, 0.0]] * 4
    with pytest.warns(RuntimeWarning, match="infeasible"):
        layer(w, A=torch.tensor([[1e-8, 0.0, 0.0, 0.0]]), b=torch.tensor([-5e-9]))
    assert layer.last_infeasible.all()
