"""Known cost terms, partial prediction and the auxiliaries back.

Every check here is against brute-force enumeration (tests/bruteforce.py) or the
definition written out: the objective is ``<w, y> + <known_cost, x>`` over the full
solution ``x = concat(y, aux)``, min or max.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
import yaml
from bruteforce import objective_values, optimum_full, random_known_ilp
from testkit import KNOWN_COST_BACKENDS, installed_params

import combolayer as cl


def _count_wrong(spec: cl.ILP, costs: np.ndarray, y: np.ndarray, aux: np.ndarray) -> int:
    """Rows whose ``concat(y, aux)`` is not an optimal full point under the known cost."""
    wrong = 0
    for i in range(len(costs)):
        best, points = optimum_full(spec, costs[i])
        x = np.concatenate([np.ravel(y[i]), aux[i]])
        value = objective_values(spec, costs[i], x[None])[0]
        wrong += not (np.isclose(value, best) and np.isclose(points, x).all(axis=1).any())
    return wrong


def _cases(seed: int, specs: int, rows: int):
    rng = np.random.default_rng(seed)
    for _ in range(specs):
        spec = random_known_ilp(rng)
        yield spec, rng.integers(-3, 4, (rows, spec.num_outputs)).astype(float)


@pytest.mark.parametrize("backend", installed_params(KNOWN_COST_BACKENDS))
def test_random_ilps_with_known_costs_equal_brute_force_on_every_backend(backend):
    """1000 instances per backend (100 random ILPs x 10 costs, min and max, known costs on
    outputs and auxiliaries): the full solution is optimal, and 0 are wrong."""
    wrong = total = 0
    senses = set()
    for spec, costs in _cases(36, 100, 10):
        y, aux = cl.make_solver(spec, backend).solve(costs, return_aux=True)
        assert y.shape == costs.shape and aux.shape == (len(costs), spec.num_aux)
        wrong += _count_wrong(spec, costs, y, aux)
        total += len(costs)
        senses.add(spec.sense)
    assert senses == {"min", "max"}
    assert (wrong, total) == (0, 1000)


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_executors_solve_known_costs_and_return_the_auxiliaries(executor, always_parallel):
    """1000 instances per executor (4 random ILPs x 250 costs, handed to 2 workers)."""
    config = cl.BackendConfig(name="highs", executor=executor, workers=2)
    wrong = total = 0
    for spec, costs in _cases(360, 4, 250):
        solver = cl.make_solver(spec, config)
        y, aux = solver.solve(costs, return_aux=True)
        wrong += _count_wrong(spec, costs, y, aux)
        total += len(costs)
        # the outputs alone come from the same full-width solve
        assert np.array_equal(solver.solve(costs), y)
    assert (wrong, total) == (0, 1000)


@pytest.mark.parametrize("backend", installed_params(KNOWN_COST_BACKENDS))
def test_layer_with_known_costs_equals_brute_force_in_both_modes(backend):
    """projection "auto" (the hull projection alone, with a known cost) keeps the solution:
    100 random ILPs x 5 costs, each in training and in eval mode, 1000 per backend."""
    wrong = total = 0
    for spec, costs in _cases(3600, 100, 5):
        layer = cl.ComboLayer(spec, projection="auto", backend=backend)
        for training in (True, False):
            layer.train(training)
            w = torch.tensor(costs, requires_grad=True)
            y, aux = layer(w, return_aux=True)
            assert aux.requires_grad is False and aux.dtype == w.dtype
            wrong += _count_wrong(spec, costs, y.detach().numpy(), aux.numpy())
            total += len(costs)
            y.sum().backward()
            assert w.grad is not None and w.grad.shape == w.shape
    assert (wrong, total) == (0, 1000)


def test_return_aux_shapes_kinds_and_dtypes():
    spec = cl.ILP(shape=[2, 2], num_aux=2, known_cost=[0, 0, 0, 0, 1.0, -1.0],
                  constraints=[cl.Constraint(coefs={0: 1, 1: 1, 2: 1, 3: 1, 4: 1}, sense="<=",
                                             rhs=2)])
    solver = cl.make_solver(spec, "highs")
    costs = np.zeros((3, 5, 2, 2))
    y, aux = solver.solve(costs, return_aux=True)
    assert isinstance(aux, np.ndarray) and y.shape == (3, 5, 2, 2) and aux.shape == (3, 5, 2)
    # the aux with known cost -1 is taken, the one with +1 is not
    assert (aux == [0.0, 1.0]).all()
    w = torch.zeros(4, 2, 2, dtype=torch.float32)
    y, aux = solver.solve(w, return_aux=True)
    assert aux.dtype == torch.float32 and aux.shape == (4, 2)
    # empty batches too
    y, aux = solver.solve(np.zeros((0, 2, 2)), return_aux=True)
    assert y.shape == (0, 2, 2) and aux.shape == (0, 2)
    # a named problem has no auxiliaries
    y, aux = cl.make_solver(cl.problems.TopK(4, 2)).solve(np.arange(4.0), return_aux=True)
    assert y.tolist() == [0, 0, 1, 1] and aux.shape == (0,)


def test_known_like_is_the_known_cost_copied_once_per_device_and_dtype():
    """Solver.known_like: the known cost in minimisation form (``folded``) or in the spec's
    sense, on the tensor's dtype, one kept copy per (device, dtype, folded); None without
    a known cost."""
    spec = cl.ILP(shape=[2], num_aux=1, sense="max", known_cost=[0, 1.0, -2.0],
                  constraints=[cl.Constraint(coefs=[1, 1, 1], sense="<=", rhs=2)])
    solver = cl.make_solver(spec, "highs")
    like = torch.zeros(3, dtype=torch.float32)
    folded = solver.known_like(like)
    assert folded.dtype == torch.float32 and folded.tolist() == [0.0, -1.0, 2.0]
    assert solver.known_like(like.clone()) is folded  # kept, not copied again
    assert solver.known_like(like, folded=False).tolist() == [0.0, 1.0, -2.0]
    assert solver.known_like(like.double()).dtype == torch.float64
    assert cl.make_solver(cl.ILP(shape=[2]), "highs").known_like(like) is None


def test_weighs_aux_reads_the_spec_known_cost_a_call_one_and_a_bound_one():
    """Solver.weighs_aux: whether the spec's known cost, or a call's, is non-zero on the
    auxiliaries; a solver with a known cost bound to it (`bind_known`) counts that one
    too, rather than answering for the bare solver."""
    constraints = [cl.Constraint(coefs=[1, 1, 1], sense="<=", rhs=2)]
    plain = cl.make_solver(cl.ILP(shape=[2], num_aux=1, constraints=constraints), "highs")
    on_outputs = cl.make_solver(cl.ILP(shape=[2], num_aux=1, known_cost=[1.0, 0, 0],
                                       constraints=constraints), "highs")
    on_aux = cl.make_solver(cl.ILP(shape=[2], num_aux=1, known_cost=[0, 0, -2.0],
                                   constraints=constraints), "highs")
    assert not plain.weighs_aux() and not on_outputs.weighs_aux() and on_aux.weighs_aux()
    call = torch.tensor([[0.0, 0.0, 0.0], [5.0, 0.0, 1.0]])
    assert plain.weighs_aux(call) and not plain.weighs_aux(torch.tensor([[1.0, 2.0, 0.0]]))
    assert not plain.weighs_aux(np.array([3.0, -1.0, 0.0]))
    assert plain.bind_known(call).weighs_aux() and not plain.bind_known(call[:1]).weighs_aux()
    assert on_aux.bind_known(call[:1]).weighs_aux()


def test_layer_return_aux_in_training_and_eval_mode_and_with_perturbed():
    spec = cl.ILP(shape=[3], num_aux=1, known_cost=[0, 0, 0, -1.5],
                  constraints=[cl.Constraint(coefs=[1, 1, 1, 1], sense="<=", rhs=2)])
    w = torch.tensor([[-2.0, -2.0, 0.5], [1.0, 1.0, 1.0]])
    for method in ["identity", "blackbox", cl.Perturbed(sigma=0.1, num_samples=3)]:
        layer = cl.ComboLayer(spec, method=method, projection="auto", backend="highs")
        for mode in (True, False):
            layer.train(mode)
            y, aux = layer(w.clone().requires_grad_(), return_aux=True)
            assert aux.shape == (2, 1) and not aux.requires_grad
            if not mode or not isinstance(method, cl.Perturbed):
                # row 0: y0 and y1 (-4) beat the aux (-1.5) with either; row 1: the aux only
                assert aux[:, 0].tolist() == pytest.approx([0.0, 1.0], abs=0.34)


@pytest.mark.parametrize("projection", ["norm", "std", "mean"])
def test_scaling_projections_refuse_a_known_cost(projection):
    spec = cl.ILP(shape=[2], num_aux=1, known_cost=[0, 0, 1.0])
    with pytest.raises(ValueError, match=f"projection '{projection}' changes the solution.*"
                                         "known cost"):
        cl.ComboLayer(spec, projection=projection)


def test_auto_is_the_hull_projection_alone_with_a_known_cost():
    """Normalising changes argmin <w, y> + <k, x>; the hull projection does not. Here
    w = (2, 2) with a known cost of -3 on an aux that excludes y: scaled down
    (auto's normalisation would give |w| = 1) the outputs would win instead."""
    spec = cl.ILP(shape=[2], num_aux=1, known_cost=[0, 0, -3.0],
                  constraints=[cl.Constraint(coefs=[1, 1, 1], sense="==", rhs=1)])
    w = torch.tensor([-2.0, -2.5])
    exact = cl.make_solver(spec).solve(w)
    for projection in ["auto", "plane", "none"]:
        assert torch.equal(cl.ComboLayer(spec, projection=projection)(w), exact)
    # the same argmin without a known cost flips under scaling
    assert exact.tolist() == [0.0, 0.0]
    assert cl.make_solver(spec).solve(w * 2).tolist() == [0.0, 1.0]


def test_known_cost_round_trips_and_is_validated():
    spec = cl.ILP(shape=[2], num_aux=1, known_cost=[1.0, 0.0, -2.5],
                  constraints=[cl.Constraint(coefs=[1, 1, 1], sense="==", rhs=1)])
    assert cl.load_spec(spec.model_dump_json()) == spec
    assert cl.load_spec(yaml.safe_dump(json.loads(spec.model_dump_json()))) == spec
    assert cl.load_spec("{kind: ilp, shape: [2], num_aux: 1, known_cost: [1, 0, -2.5], "
                        "constraints: [{coefs: [1, 1, 1], sense: '==', rhs: 1}]}") == spec
    with pytest.raises(cl.SpecError, match="known_cost has 2 entries but the ILP has 3"):
        cl.ILP(shape=[2], num_aux=1, known_cost=[1.0, 0.0])
    with pytest.raises(cl.SpecError, match=r"known_cost\[1\] must be finite"):
        cl.ILP(shape=[2], known_cost=[1.0, float("nan")])
    matrices = cl.ILP.from_matrices(shape=[2], A_eq=np.ones((1, 3)), b_eq=[1.0], num_aux=1,
                                    known_cost=np.array([1.0, 0.0, -2.5]))
    assert matrices.known_cost == spec.known_cost
    assert cl.make_solver(matrices).solve(np.array([0.0, -2.0]), return_aux=True)[1].tolist() \
        == [1.0]


def test_from_cvxpy_facility_location_reads_known_costs_and_splits_by_name():
    cp = pytest.importorskip("cvxpy")
    capacity, fixed = np.array([2.0, 2.0, 3.0]), np.array([3.0, 2.0, 4.0])
    c = cp.Parameter((4, 3), name="c")
    x = cp.Variable((4, 3), boolean=True, name="x")
    z = cp.Variable(3, boolean=True, name="z")
    problem = cp.Problem(cp.Minimize(cp.sum(cp.multiply(c, x)) + fixed @ z + 5),
                         [cp.sum(x, axis=1) == 1, cp.sum(x, axis=0) <= cp.multiply(capacity, z),
                          cp.sum(z) <= 2])
    spec = cl.ILP.from_cvxpy(problem, cost=c)
    assert spec.shape == [4, 3] and spec.num_aux == 3
    assert spec.known_cost == [0.0] * 12 + fixed.tolist()
    assert spec.variables["x"].shape == [4, 3] and spec.variables["z"].index == [12, 13, 14]
    assert cl.load_spec(spec.model_dump_json()) == spec  # known_cost and variables round-trip
    # the hull of the outputs is the known cost's business no more than before
    plain = cl.ILP(**{**spec.model_dump(), "known_cost": None})
    assert np.allclose(cl.analyze(spec).normals, cl.analyze(plain).normals)
    rng = np.random.default_rng(1)
    costs = rng.uniform(0, 5, (6, 4, 3))
    y, aux = cl.make_solver(spec, "highs").solve(costs, return_aux=True)
    for i in range(len(costs)):
        c.value = costs[i]
        problem.solve("HIGHS")
        parts = spec.split(np.concatenate([y[i].ravel(), aux[i]]))
        assert np.array_equal(parts["x"], y[i])
        assert (costs[i] * y[i]).sum() + fixed @ parts["z"] + 5 == pytest.approx(problem.value)
    batched = spec.split(torch.cat([torch.tensor(y).flatten(1), torch.tensor(aux)], dim=1))
    assert batched["x"].shape == (6, 4, 3) and batched["z"].shape == (6, 3)
    with pytest.raises(ValueError, match="x has 12 entries in its last axis but .* 15"):
        spec.split(y.reshape(6, 12))
    with pytest.raises(cl.SpecError, match="has no named variables"):
        cl.ILP(shape=[2]).split(np.zeros(2))


def test_from_cvxpy_partial_prediction_on_a_slice_in_the_parameter_order():
    cp = pytest.importorskip("cvxpy")
    x = cp.Variable(5, boolean=True, name="x")
    c = cp.Parameter(3, name="c")
    g = cp.Parameter(2, name="g", value=np.array([1.0, -1.0]))
    problem = cp.Problem(cp.Maximize(c @ x[[4, 2, 3]] + g @ x[:2] - 1), [cp.sum(x) <= 2])
    spec = cl.ILP.from_cvxpy(problem, cost=c)
    # outputs: x[4], x[2], x[3] in that order; the known cost (g, at its value) on x[0], x[1]
    assert spec.shape == [3] and spec.sense == "max"
    assert spec.variables["x"].index == [3, 4, 1, 2, 0]
    assert spec.known_cost == [0.0, 0.0, 0.0, 1.0, -1.0]
    rng = np.random.default_rng(2)
    for cost in rng.normal(size=(20, 3)):
        y, aux = cl.make_solver(spec, "highs").solve(cost, return_aux=True)
        c.value = cost
        problem.solve("HIGHS")
        assert np.array_equal(spec.split(np.concatenate([y, aux]))["x"],
                              np.rint(x.value)) or cost @ y + g.value @ np.rint(
            x.value[:2]) == pytest.approx(problem.value + 1)
        assert cost @ y + [1.0, -1.0] @ aux[[0, 1]] - 1 == pytest.approx(problem.value)


def test_from_cvxpy_variables_are_the_ones_the_cost_multiplies():
    cp = pytest.importorskip("cvxpy")
    x = cp.Variable(3, boolean=True, name="x")
    z = cp.Variable(1, boolean=True, name="z")
    w = cp.Parameter(3)
    problem = cp.Problem(cp.Minimize(w @ x + 2 * z), [cp.sum(x) <= 2 * z])
    assert cl.ILP.from_cvxpy(problem, parameters=[w], variables=[x]).known_cost == \
        [0, 0, 0, 2.0]
    with pytest.raises(cl.SpecError, match=r"expected \['x'\], got \['x', 'z'\]"):
        cl.ILP.from_cvxpy(problem, parameters=[w], variables=[x, z])


def _brute_spo_plus(spec: cl.ILP, c_hat: np.ndarray, c: np.ndarray) -> tuple[float, np.ndarray]:
    """SPO+ by its definition for the affine objective, min form (docs/losses.md):
    max_x {<c - 2 c_hat, y> - <k, x>} + 2 <c_hat, y*> + 2 <k, x*> - z*(c), and its gradient
    2 (y* - y~) in the spec's sense."""
    sign = 1.0 if spec.sense == "min" else -1.0
    from bruteforce import feasible_points

    points = feasible_points(spec)
    n = spec.num_outputs
    k = sign * np.asarray(spec.known_cost)
    ch, cm = sign * c_hat, sign * c
    shifted_values = points[:, :n] @ (cm - 2 * ch) - points @ k
    tilde = points[shifted_values.argmax()]
    true_values = points[:, :n] @ cm + points @ k
    star = points[true_values.argmin()]
    loss = shifted_values.max() + 2 * ch @ star[:n] + 2 * k @ star - true_values.min()
    return float(loss), sign * 2 * (star[:n] - tilde[:n])


def test_spo_plus_with_a_known_cost_equals_its_definition_by_brute_force():
    rng = np.random.default_rng(11)
    checked = 0
    for _ in range(30):
        spec = random_known_ilp(rng)
        loss = cl.losses.SPOPlusLoss(spec, reduction="none", backend="highs")
        c_hat = torch.tensor(rng.normal(size=(4, spec.num_outputs)), requires_grad=True)
        c = torch.tensor(rng.normal(size=(4, spec.num_outputs)))
        value = loss(c_hat, c)
        value.sum().backward()
        value = value.detach()
        for i in range(4):
            expected, grad = _brute_spo_plus(spec, c_hat[i].detach().numpy(), c[i].numpy())
            assert float(value[i]) == pytest.approx(expected, abs=1e-9)
            assert c_hat.grad[i].numpy() == pytest.approx(grad)
            assert float(value[i]) >= -1e-9
            checked += 1
        # at the true cost the loss is 0
        assert loss(c, c).abs().max() < 1e-9
    assert checked == 120


def test_regret_counts_the_known_cost_and_needs_the_decisions_auxiliaries():
    from bruteforce import feasible_points

    rng = np.random.default_rng(12)
    for _ in range(20):
        spec = random_known_ilp(rng)
        points = feasible_points(spec)
        x = points[rng.integers(len(points), size=3)]
        c = rng.normal(size=(3, spec.num_outputs))
        y_pred, aux_pred = x[:, : spec.num_outputs], x[:, spec.num_outputs :]
        got = cl.metrics.regret(spec, c, y_pred, aux_pred=aux_pred, backend="highs")
        sign = 1.0 if spec.sense == "min" else -1.0
        for i in range(3):
            best, _ = optimum_full(spec, c[i])
            value = objective_values(spec, c[i], x[i][None])[0]
            assert float(got[i]) == pytest.approx(sign * (value - best), abs=1e-9)
            assert float(got[i]) >= -1e-9
        if any(spec.known_cost[spec.num_outputs :]):
            with pytest.raises(ValueError, match="known cost on its auxiliaries: pass aux_pred"):
                cl.metrics.regret(spec, c, y_pred, backend="highs")


def test_solution_cache_ranks_pooled_solutions_with_the_known_cost():
    """solve_ratio < 1: a row answered from the pool gets the pooled whole solution that is
    cheapest under its cost including the known part (the pool keeps whole solutions)."""
    rng = np.random.default_rng(21)
    checked = 0
    for spec, _ in _cases(2100, 8, 1):
        layer = cl.ComboLayer(spec, projection="none", backend="highs", solve_ratio=0.3,
                              generator=torch.Generator().manual_seed(0))
        assert layer.solver.pool_width == spec.num_vars
        for _ in range(6):
            costs = rng.integers(-3, 4, (8, spec.num_outputs)).astype(float)
            y, aux = layer(torch.tensor(costs), return_aux=True)
            pooled = layer.pool.solutions.numpy()
            assert pooled.shape[1] == spec.num_vars
            for i in range(len(costs)):
                x = np.concatenate([y[i].numpy(), aux[i].numpy()])
                value = objective_values(spec, costs[i], x[None])[0]
                best_pooled = objective_values(spec, costs[i], pooled).min()
                feasible = np.isclose(feasible_points_of(spec), x).all(axis=1).any()
                assert feasible and value <= best_pooled + 1e-9 if spec.sense == "min" else \
                    feasible and value >= objective_values(spec, costs[i], pooled).max() - 1e-9
                checked += 1
    assert checked == 8 * 6 * 8


def feasible_points_of(spec: cl.ILP) -> np.ndarray:
    from bruteforce import feasible_points

    return feasible_points(spec)


@pytest.mark.parametrize("backend", installed_params(KNOWN_COST_BACKENDS))
def test_facility_location_is_optimal_and_reads_back_the_open_facilities(backend):
    """The example's model, 200 random cost sets: the solution is the brute-force optimum
    (opening costs counted) and the auxiliaries are exactly its open facilities."""
    import itertools
    import runpy
    from pathlib import Path

    pytest.importorskip("cvxpy")
    example = runpy.run_path(str(Path(__file__).resolve().parents[1] / "examples"
                                 / "facility_location.py"))
    spec = example["model_spec"]()
    customers, facilities = spec.shape
    capacity, opening = example["CAPACITY"], example["OPENING"]
    points = []
    for assign in itertools.product(range(facilities), repeat=customers):
        load = np.bincount(assign, minlength=facilities)
        for z in itertools.product([0, 1], repeat=facilities):
            if sum(z) <= 2 and (load <= capacity * np.array(z)).all():
                x = np.zeros((customers, facilities))
                x[np.arange(customers), assign] = 1
                points.append(np.concatenate([x.ravel(), z]))
    points = np.array(points)
    rng = np.random.default_rng(200)
    costs = rng.uniform(0.0, 6.0, (200, customers, facilities))
    y, aux = cl.make_solver(spec, backend).solve(costs, return_aux=True)
    values = points[:, : spec.num_outputs] @ costs.reshape(200, -1).T + (
        points[:, spec.num_outputs :] @ opening)[:, None]
    best = points[values.argmin(axis=0)]
    assert np.all(values.min(axis=0) < np.sort(values, axis=0)[1] - 1e-9)  # unique optima
    optimal = (np.abs(np.concatenate([y.reshape(200, -1), aux], axis=1) - best) < 1e-6).all(1)
    opened = (aux == best[:, spec.num_outputs :]).all(axis=1)
    assert (int(optimal.sum()), int(opened.sum())) == (200, 200)


def test_fenchel_young_counts_the_known_cost_of_its_samples():
    """FY with a known cost: the loss value is <c, y_true> + <k[:N], y_true> minus the
    samples' mean full objective (min form); its gradient is y_true - mean y_s. With a
    vanishing sigma every sample is the exact optimum x*(c)."""
    rng = np.random.default_rng(31)
    for _ in range(10):
        spec = random_known_ilp(rng)
        sign = 1.0 if spec.sense == "min" else -1.0
        k = sign * np.asarray(spec.known_cost)
        n = spec.num_outputs
        solver = cl.make_solver(spec, "highs")
        y_true = torch.tensor(solver.solve(rng.normal(size=(3, n))))
        c_pred = torch.tensor(rng.normal(size=(3, n)), requires_grad=True)
        loss = cl.losses.FenchelYoungLoss(spec, sigma=1e-9, num_samples=2, reduction="none",
                                          backend="highs")
        value = loss(c_pred, y_true)
        ys, auxs = solver.solve(c_pred.detach(), return_aux=True)
        c = sign * c_pred.detach()
        full = torch.cat([ys, auxs], dim=-1).numpy()
        expected = ((c * y_true).sum(-1).numpy() + y_true.numpy() @ k[:n]
                    - ((c * ys).sum(-1).numpy() + full @ k))
        assert value.detach().numpy() == pytest.approx(expected, abs=1e-6)
        value.sum().backward()
        assert c_pred.grad.numpy() == pytest.approx(sign * (y_true - ys).numpy())


def test_from_file_with_named_outputs_keeps_the_rest_of_the_objective_as_known_cost(tmp_path):
    """A facility file: the user predicts the assignment columns (named, in their own
    order); the opening columns keep the file's costs as known cost."""
    path = tmp_path / "facility.lp"
    path.write_text("\n".join([
        "Minimize", " cost: 4 a_0 + 1 a_1 + 3 b_0 + 2 b_1 + 5 open_0 + 1 open_1",
        "Subject To", " c_a: a_0 + a_1 = 1", " c_b: b_0 + b_1 = 1",
        " u_0: a_0 + b_0 - 2 open_0 <= 0", " u_1: a_1 + b_1 - 2 open_1 <= 0",
        "Binaries", " a_0 a_1 b_0 b_1 open_0 open_1", "End", ""]))
    spec = cl.ILP.from_file(path, outputs=["b_1", "b_0", "a_1", "a_0"])
    assert spec.shape == [4] and spec.num_aux == 2
    assert spec.known_cost == [0, 0, 0, 0, 5.0, 1.0]
    assert spec.default_cost == (2.0, 3.0, 1.0, 4.0)
    whole = cl.ILP.from_file(path)
    solver = cl.make_solver(spec, "highs")
    rng = np.random.default_rng(4)
    for cost in rng.normal(size=(20, 4)) * 3:
        y, aux = solver.solve(cost, return_aux=True)
        # the same problem with every column an output and the file's order
        full_cost = np.array([cost[3], cost[2], cost[1], cost[0], 5.0, 1.0])
        best = cl.make_solver(whole, "highs").solve(full_cost)
        x = np.concatenate([y, aux])
        named = spec.split(x)
        assert [named[name] for name in ["a_0", "a_1", "b_0", "b_1", "open_0", "open_1"]] \
            == best.tolist()
    with pytest.raises(cl.SpecError, match="outputs names column 'c_0'"):
        cl.ILP.from_file(path, outputs=["c_0"])
    with pytest.raises(cl.SpecError, match="each once"):
        cl.ILP.from_file(path, outputs=["a_0", 0])


def test_losses_and_estimators_that_do_not_count_a_known_cost_refuse_it():
    """Every registered loss either counts the known cost (SPO+, Fenchel-Young, PG, RFY,
    the pool losses) or refuses a spec with one (CaVE)."""
    spec = cl.ILP(shape=[3], num_aux=1, known_cost=[0, 0, 0, 1.0],
                  constraints=[cl.Constraint(coefs=[1, 1, 1, 1], sense="<=", rhs=2)])
    plain = cl.ILP(shape=[3], constraints=[cl.Constraint(coefs=[1, 1, 1], sense="<=", rhs=2)])
    losses = cl.losses.base.LOSSES
    counting = {name for name, cls in losses.items() if cls.counts_known_cost}
    # tests/test_known_cost_losses.py checks the others against their definitions
    assert counting == {"SPOPlusLoss", "FenchelYoungLoss", "PGLoss", "NCELoss", "CMAPLoss",
                        "PointwiseLTRLoss", "PairwiseLTRLoss", "ListwiseLTRLoss",
                        "PairwiseDifferenceLTRLoss", "RegularizedFenchelYoungLoss"}
    for name, cls in losses.items():
        if name in counting:
            cls(spec, backend="highs")
            continue
        with pytest.raises(ValueError, match=f"{name} does not support a known cost") as error:
            cls(spec, backend="highs")
        # the message names every registered method and loss that counts it
        named = re.search(r"use a method \((.*)\) or a loss \((.*)\), or fold",
                          str(error.value))
        assert set(named[2].split(", ")) == counting
        assert set(named[1].split(", ")) == {
            method for method, cls in cl.estimators.METHODS.items() if cls.counts_known_cost}
        cls(plain, backend="highs")  # without a known cost nothing changes
    methods = cl.estimators.METHODS
    for name in ("identity", "blackbox", "perturbed", "imle", "rfwo"):
        assert methods[name].counts_known_cost
        cl.ComboLayer(spec, method=name)



def test_the_known_cost_refusal_reads_the_registries(monkeypatch):
    """The list of what counts a known cost comes from METHODS and LOSSES, not a copy:
    a method registered with counts_known_cost is named, one without is not."""
    from combolayer.estimators.base import known_cost_counters

    methods = cl.estimators.METHODS
    monkeypatch.setitem(methods, "zz_counts", type("Counts", (), {"counts_known_cost": True}))
    monkeypatch.setitem(methods, "zz_blind", type("Blind", (), {"counts_known_cost": False}))
    spec = cl.ILP(shape=[3], num_aux=1, known_cost=[0, 0, 0, 1.0],
                  constraints=[cl.Constraint(coefs=[1, 1, 1, 1], sense="<=", rhs=2)])
    with pytest.raises(ValueError, match=r"use a method \(.*zz_counts\) or a loss \(") as error:
        cl.losses.CaVELoss(spec, backend="highs")
    assert "zz_blind" not in str(error.value) and "CaVELoss (" not in str(error.value)
    assert known_cost_counters()[0].startswith("a method (aimle, blackbox,")

def test_blackbox_gradient_with_a_known_cost_is_its_formula_by_brute_force():
    """dL/du = (y(u') - y(u)) / lam with u' = u + lam dL/dy (min), both argmins taken
    over the whole objective <., y> + <k, x>."""
    rng = np.random.default_rng(41)
    checked = 0
    for spec, costs in _cases(4100, 15, 3):
        layer = cl.ComboLayer(spec, method=cl.Blackbox(lam=2.0, reduction="sum"),
                              projection="none",
                              backend="highs")
        w = torch.tensor(costs + rng.normal(scale=0.1, size=costs.shape), requires_grad=True)
        g = torch.tensor(rng.normal(size=costs.shape))
        (layer(w) * g).sum().backward()
        sign = 1.0 if spec.sense == "min" else -1.0
        for i in range(len(costs)):
            u = w[i].detach().numpy()
            shifted = u + sign * 2.0 * g[i].numpy()  # min form: c' = c + lam g
            y0 = optimum_full(spec, u)[1][0][: spec.num_outputs]
            y1 = optimum_full(spec, shifted)[1][0][: spec.num_outputs]
            assert w.grad[i].numpy() == pytest.approx((y1 - y0) / 2.0 * sign)
            checked += 1
    assert checked == 45


def test_spo_plus_with_a_known_cost_and_the_solution_cache():
    """solve_ratio < 1: y* (exact, whole) joins the pool, y~ may come from it; the loss
    stays >= 0 (the pool answer is feasible, so the SPO+ bound still holds) and the pool
    keeps whole solutions."""
    rng = np.random.default_rng(51)
    spec = random_known_ilp(rng)
    loss = cl.losses.SPOPlusLoss(spec, reduction="none", backend="highs", solve_ratio=0.5,
                                 generator=torch.Generator().manual_seed(0))
    for _ in range(5):
        c_hat = torch.tensor(rng.normal(size=(6, spec.num_outputs)), requires_grad=True)
        c = torch.tensor(rng.normal(size=(6, spec.num_outputs)))
        value = loss(c_hat, c, y_true=torch.tensor(cl.make_solver(spec).solve(c.numpy())))
        value.sum().backward()
        assert (value.detach() >= -1e-9).all()
    assert len(loss.pool) > 0 and loss.pool.solutions.shape[1] == spec.num_vars
