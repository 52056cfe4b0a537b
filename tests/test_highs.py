import numpy as np
import pytest
import torch
from bruteforce import optimum, random_ilp

import combolayer as cl


@pytest.mark.parametrize("seed", range(60))
def test_highs_matches_brute_force_on_random_ilps(seed):
    rng = np.random.default_rng(seed)
    spec = random_ilp(rng)
    solver = cl.make_solver(spec, "highs")
    costs = rng.normal(size=(4, *spec.cost_shape))
    y = solver.solve(costs)
    assert y.shape == costs.shape
    for c, y_one in zip(costs, y):
        best, optimal_outputs = optimum(spec, c)
        assert y_one @ c == pytest.approx(best, abs=1e-7)
        assert any(np.array_equal(y_one, o) for o in optimal_outputs)


def test_batches_of_any_leading_shape_and_array_kind():
    spec = cl.ILP(shape=[2, 3], constraints=[cl.Constraint(coefs=[1] * 6, sense="==", rhs=1)])
    solver = cl.make_solver(spec, "highs")
    costs = np.random.default_rng(1).normal(size=(2, 3, 2, 3))
    y = solver.solve(costs)
    assert isinstance(y, np.ndarray) and y.shape == (2, 3, 2, 3)
    flat = costs.reshape(6, 6)
    np.testing.assert_array_equal(y.reshape(6, 6).argmax(1), flat.argmin(1))
    t = torch.tensor(costs, dtype=torch.float32)
    y_t = solver.solve(t)
    assert isinstance(y_t, torch.Tensor) and y_t.dtype == torch.float32 and y_t.shape == t.shape
    np.testing.assert_array_equal(y_t.numpy(), y)
    assert solver.solve(costs[0, 0]).shape == (2, 3)


def test_max_sense_is_argmax():
    spec = cl.ILP(
        shape=[4], sense="max", constraints=[cl.Constraint(coefs=[1] * 4, sense="==", rhs=1)]
    )
    y = cl.make_solver(spec, "highs").solve(np.array([0.1, 3.0, -1.0, 2.0]))
    np.testing.assert_array_equal(y, [0, 1, 0, 0])


def test_auxiliary_variables_are_not_returned():
    # y0 + y1 == 2 * z with z an integer auxiliary: y is all zeros or all ones.
    spec = cl.ILP(
        shape=[2],
        num_aux=1,
        integrality="integer",
        upper=[1, 1, 1],
        constraints=[cl.Constraint(coefs=[1, 1, -2], sense="==", rhs=0)],
    )
    solver = cl.make_solver(spec, "highs")
    np.testing.assert_array_equal(
        solver.solve(np.array([[-1.0, 0.5], [1.0, -0.5]])), [[1, 1], [0, 0]]
    )


@pytest.mark.filterwarnings("ignore::combolayer.NoIntegerWarning")  # an LP on purpose
def test_continuous_lp():
    spec = cl.ILP(
        shape=[2],
        integrality="continuous",
        upper=[2, 2],
        constraints=[cl.Constraint(coefs=[1, 1], sense="<=", rhs=3)],
    )
    y = cl.make_solver(spec, "highs").solve(np.array([-1.0, -2.0]))
    np.testing.assert_allclose(y, [1, 2])


def test_infeasible_raises():
    spec = cl.ILP(shape=[2], constraints=[cl.Constraint(coefs=[1, 1], sense=">=", rhs=3)])
    with pytest.raises(cl.InfeasibleError, match="no feasible solution"):
        cl.make_solver(spec, "highs").solve(np.zeros(2))


@pytest.mark.parametrize("integrality", ["integer", "continuous"])
@pytest.mark.filterwarnings("ignore::combolayer.NoIntegerWarning")  # an LP on purpose
def test_unbounded_raises(integrality):
    spec = cl.ILP(
        shape=[2],
        integrality=integrality,
        upper=None,
        constraints=[cl.Constraint(coefs=[1, -1], sense="<=", rhs=1)],
    )
    with pytest.raises(cl.SolverError, match="unbounded") as info:
        cl.make_solver(spec, "highs").solve(np.array([-1.0, -1.0]))
    assert not isinstance(info.value, cl.InfeasibleError)


def test_integer_infeasible_but_lp_feasible_raises():
    spec = cl.ILP(
        shape=[2],
        integrality="integer",
        upper=None,
        constraints=[cl.Constraint(coefs=[2, 2], sense="==", rhs=1)],
    )
    with pytest.raises(cl.InfeasibleError):
        cl.make_solver(spec, "highs").solve(np.array([1.0, 1.0]))


@pytest.mark.parametrize(
    "costs, match",
    [
        (np.zeros(5), r"trailing shape \(5,\) but ILP\(shape=\[4\]\) expects \(4,\)"),
        (np.zeros((3, 2, 2)), r"trailing shape \(2,\) but ILP\(shape=\[4\]\) expects \(4,\)"),
        (np.array([0.0, np.nan, 0, 0]), "must be finite, got NaN or inf"),
        (torch.tensor([0.0, float("inf"), 0, 0]), "must be finite, got NaN or inf"),
    ],
)
def test_bad_costs_raise_value_error(costs, match):
    spec = cl.ILP(shape=[4], constraints=[cl.Constraint(coefs=[1] * 4, sense="==", rhs=2)])
    with pytest.raises(ValueError, match=match):
        cl.make_solver(spec, "highs").solve(costs)


def test_time_limit_without_solution_raises():
    # A hard equality knapsack (no solution exists); the limit stops it first.
    rng = np.random.default_rng(0)
    n = 60
    weights = rng.integers(10_000, 20_000, n) * 2
    spec = cl.ILP(
        shape=[n],
        constraints=[
            cl.Constraint(coefs=weights.tolist(), sense="==", rhs=float(weights.sum() // 2 + 1))
        ],
    )
    solver = cl.make_solver(spec, cl.BackendConfig(name="highs", time_limit=0.05))
    with pytest.raises(cl.SolverError, match="time limit|no feasible solution"):
        solver.solve(rng.normal(size=n))


def test_backend_config_from_dict_and_unknown_backend():
    spec = cl.ILP(shape=[2], constraints=[cl.Constraint(coefs=[1, 1], sense="==", rhs=1)])
    solver = cl.make_solver(spec, {"name": "highs", "mip_gap": 0.0, "options": {"random_seed": 3}})
    assert solver.backend == "highs"
    with pytest.raises(cl.BackendUnavailable, match="unknown backend 'cplex'"):
        cl.make_solver(spec, "cplex")
    with pytest.raises(cl.SpecError, match="invalid backend config: executor"):
        cl.make_solver(spec, {"name": "highs", "executor": "gpu"})


def test_model_is_built_once_and_reused():
    spec = cl.ILP(shape=[3], constraints=[cl.Constraint(coefs=[1, 1, 1], sense="==", rhs=1)])
    solver = cl.make_solver(spec, "highs")
    model = solver.kernel.model
    solver.solve(np.eye(3))
    assert solver.kernel.model is model and model.getNumRow() == 1


def test_a_kept_model_answers_what_a_fresh_one_does():
    """HiGHS's simplex stopped at 'Unknown' on a ranking LP after a few other solves on
    the kept model, where a fresh model solved the same costs."""
    def costs(big, tiny):
        return np.array([-big, -tiny, big, -tiny / 7, tiny, -big / 2])

    spec = cl.problems.Ranking(n=6)
    kept = cl.make_solver(spec, backend="highs")
    for big, tiny in [(1e12, 1), (1e12, 1e-2), (1e12, 1e-4), (1e12, 1e-6), (1e12, 1e-8),
                      (1e13, 1), (1e13, 1e-2)]:
        kept.solve(costs(big, tiny))
    fresh = cl.make_solver(spec, backend="highs").solve(costs(1e13, 1e-4))
    np.testing.assert_array_equal(kept.solve(costs(1e13, 1e-4)), fresh)
