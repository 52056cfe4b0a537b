"""``ILP.from_cvxpy``: the ILP solves to what cvxpy itself finds, for every problem shape."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import combolayer as cl

cp = pytest.importorskip("cvxpy", reason="ILP.from_cvxpy needs the optional cvxpy package")


def check_against_cvxpy(problem, cost, variable, seeds=range(4)):
    """Solve with cvxpy directly and through the converted ILP (HiGHS): same optimum."""
    spec = cl.ILP.from_cvxpy(problem, cost=cost)
    assert spec.cost_shape == cost.shape
    solver = cl.make_solver(spec, "highs")
    for seed in seeds:
        w = np.random.default_rng(seed).normal(size=cost.shape)
        cost.value = w
        problem.solve(solver="HIGHS")
        y = solver.solve(w)
        assert y.shape == cost.shape
        np.testing.assert_allclose((w * y).sum(), problem.value, atol=1e-6)
        # Continuous random costs: the optimal solution is unique.
        np.testing.assert_allclose(y, variable.value, atol=1e-6)
    return spec


def test_boolean_vector_with_equality():
    x = cp.Variable(5, boolean=True)
    w = cp.Parameter(5)
    spec = check_against_cvxpy(cp.Problem(cp.Minimize(w @ x), [cp.sum(x) == 2]), w, x)
    assert spec.num_aux == 0 and spec.sense == "min"


def test_inequalities_and_integer_bounds_maximize():
    x = cp.Variable(4, integer=True)
    w = cp.Parameter(4)
    problem = cp.Problem(cp.Maximize(w @ x),
                         [x >= -2, x <= 3, cp.sum(x) <= 4, x[0] - x[1] >= -1])
    spec = check_against_cvxpy(problem, w, x)
    assert spec.sense == "max" and spec.integrality == ["integer"] * 4


def test_matrix_variable_keeps_row_major_layout():
    """cvxpy flattens column-major; the ILP's outputs follow numpy's row-major order."""
    X = cp.Variable((3, 4), boolean=True)
    W = cp.Parameter((3, 4))
    problem = cp.Problem(cp.Minimize(cp.sum(cp.multiply(W, X))),
                         [cp.sum(X, axis=1) == 1, cp.sum(X, axis=0) <= 1])
    check_against_cvxpy(problem, W, X)


def test_only_some_variables_carry_the_cost():
    x = cp.Variable(3, boolean=True)
    z = cp.Variable(2, integer=True)
    t = cp.Variable()
    w = cp.Parameter(3)
    problem = cp.Problem(cp.Minimize(w @ x), [
        z >= 0, z <= 2, cp.sum(x) == z[0] + z[1] - 1, t >= 0.5 * z[0], t <= 1.5, z[1] <= 1,
    ])
    spec = check_against_cvxpy(problem, w, x)
    assert spec.num_aux == 3
    assert spec.integrality == ["binary"] * 3 + ["integer", "integer", "continuous"]


def test_cost_on_an_expression_adds_outputs_equal_to_it():
    """w @ (2 * x[:, 1]) is not a plain variable: y is the expression the cost multiplies."""
    X = cp.Variable((3, 2), boolean=True)
    w = cp.Parameter(3)
    problem = cp.Problem(cp.Minimize(w @ (2 * X[:, 1])), [cp.sum(X) == 3, cp.sum(X[:, 1]) <= 2])
    spec = cl.ILP.from_cvxpy(problem, cost=w)
    y = cl.make_solver(spec, "highs").solve(np.array([-1.0, 0.5, -2.0]))
    np.testing.assert_allclose(y, [2.0, 0.0, 2.0])
    check_against_cvxpy(problem, w, 2 * X[:, 1])


@pytest.mark.parametrize("sense", [cp.Minimize, cp.Maximize])
def test_an_expression_with_a_constant_is_the_output_constant_included(sense):
    """w @ (u + 1): the outputs are u + 1, not u; its constant is not dropped with the
    objective's own constants."""
    u = cp.Variable(3, boolean=True)
    w = cp.Parameter(3)
    problem = cp.Problem(sense(w @ (u + 1)), [cp.sum(u) == 1])
    spec = check_against_cvxpy(problem, w, u + 1)
    assert cl.ILP.from_cvxpy(cp.Problem(sense(w @ (u + 1) - 4), [cp.sum(u) == 1]),
                             cost=w) == spec
    assert cl.make_solver(spec).solve(np.array([3.0, -1.0, 2.0])).tolist() == (
        [1.0, 2.0, 1.0] if sense is cp.Minimize else [2.0, 1.0, 1.0])
    # an integer in [1, 2], and u itself still an auxiliary that split reads back
    assert spec.integrality[:3] == ["integer"] * 3
    assert spec.lower[:3] == [1.0] * 3 and spec.upper[:3] == [2.0] * 3
    # bounded integers all through: a brute-force backend takes it
    assert cl.make_solver(spec, "bruteforce").solve(np.array([3.0, -1.0, 2.0])).tolist() == (
        [1.0, 2.0, 1.0] if sense is cp.Minimize else [2.0, 1.0, 1.0])
    y, aux = cl.make_solver(spec).solve(np.array([3.0, -1.0, 2.0]), return_aux=True)
    np.testing.assert_array_equal(spec.split(np.concatenate([y, aux]))[u.name()], y - 1)


def test_a_scaled_expression_with_a_constant_keeps_both():
    v = cp.Variable(3, integer=True)
    X = cp.Variable((2, 2), boolean=True)
    w = cp.Parameter(3)
    W = cp.Parameter((2, 2))
    problem = cp.Problem(cp.Minimize(w @ (2 * v + 1)), [cp.sum(v) == 2, v >= 0, v <= 2])
    spec = check_against_cvxpy(problem, w, 2 * v + 1)
    assert cl.make_solver(spec).solve(np.array([3.0, -1.0, 2.0])).tolist() == [1.0, 5.0, 1.0]
    assert spec.integrality[:3] == ["integer"] * 3  # v has no bounds of its own: unbounded
    # a matrix with a constant and a fractional coefficient: continuous, equal to it
    problem = cp.Problem(cp.Maximize(cp.sum(cp.multiply(W, 0.5 * X - 3))),
                         [cp.sum(X, axis=1) == 1])
    spec = check_against_cvxpy(problem, W, 0.5 * X - 3)
    assert spec.integrality[:4] == ["continuous"] * 4
    # a binary variable bounded into [0, 1] stays binary
    b = cp.Variable(3, boolean=True)
    problem = cp.Problem(cp.Minimize(w @ (1 - b)), [cp.sum(b) == 2])
    spec = check_against_cvxpy(problem, w, 1 - b)
    assert spec.integrality[:3] == ["binary"] * 3


def test_output_bounds_a_spec_cannot_take_are_left_infinite():
    v = cp.Variable(2, integer=True, bounds=[-4e14, 9e14])
    w = cp.Parameter(2)
    spec = cl.ILP.from_cvxpy(cp.Problem(cp.Minimize(w @ (2 * v + 1)), [cp.sum(v) <= 3]), cost=w)
    assert spec.integrality[:2] == ["integer"] * 2
    assert spec.lower[:2] == [-8e14 + 1] * 2 and spec.upper[:2] == [np.inf] * 2
    assert cl.make_solver(spec).solve(np.array([1.0, -1.0])).tolist() == [-8e14 + 1, 8e14 + 7]


def test_spec_round_trips_and_trains_in_a_layer():
    x = cp.Variable(4, integer=True)  # unbounded below in cvxpy: -inf lower bounds
    w = cp.Parameter(4)
    problem = cp.Problem(cp.Minimize(w @ x), [x >= -1, x <= 1, cp.sum(x) == 0])
    spec = cl.ILP.from_cvxpy(problem, cost=w)
    assert cl.load_spec(spec.model_dump_json()) == spec
    layer = cl.ComboLayer(spec)
    theta = torch.randn(2, 4, requires_grad=True)
    y = layer(theta)
    assert y.shape == (2, 4)
    (y * torch.arange(4.0)).sum().backward()
    assert theta.grad is not None and theta.grad.abs().sum() > 0


def test_cost_must_be_a_parameter():
    x = cp.Variable(3, boolean=True)
    problem = cp.Problem(cp.Minimize(np.ones(3) @ x), [cp.sum(x) == 1])
    with pytest.raises(cl.SpecError, match="cost must be a cvxpy Parameter.*got ndarray"):
        cl.ILP.from_cvxpy(problem, cost=np.ones(3))
    with pytest.raises(cl.SpecError, match="does not appear in the objective"):
        cl.ILP.from_cvxpy(problem, cost=cp.Parameter(3))


def test_non_linear_objectives_are_rejected():
    x = cp.Variable(3, integer=True)
    w = cp.Parameter(3)
    bounds = [x >= 0, x <= 2]
    with pytest.raises(cl.SpecError, match=r"term quad_over_lin\(.*not linear in the variables"):
        cl.ILP.from_cvxpy(cp.Problem(cp.Minimize(w @ x + cp.sum_squares(x)), bounds), cost=w)
    # A 1-norm is LP-representable, but it is not a linear term of the objective.
    with pytest.raises(cl.SpecError, match=r"term norm1\(.*not linear in the variables"):
        cl.ILP.from_cvxpy(cp.Problem(cp.Minimize(w @ x + cp.norm(x, 1)), bounds), cost=w)
    v = cp.Parameter(3, nonneg=True, name="v")
    v.value = np.ones(3)
    with pytest.raises(cl.SpecError, match=r"multiplies parameters \[.*'v'\] together"):
        cl.ILP.from_cvxpy(cp.Problem(cp.Minimize(cp.multiply(w, v) @ x), bounds), cost=w)


def test_objective_terms_without_the_cost_become_its_known_cost():
    x = cp.Variable(3, integer=True)
    w = cp.Parameter(3)
    problem = cp.Problem(cp.Minimize(w @ x + 2 * cp.sum(x) - 7), [x >= 0, x <= 2])
    spec = cl.ILP.from_cvxpy(problem, cost=w)
    assert spec.known_cost == [2.0, 2.0, 2.0]
    # argmin (w + 2) . x: the known cost moves the threshold from 0 to -2
    assert cl.make_solver(spec).solve(np.array([-1.0, -3.0, 0.5])).tolist() == [0.0, 2.0, 0.0]


def test_cost_in_a_constraint_is_rejected():
    x = cp.Variable(3, boolean=True)
    w = cp.Parameter(3)
    problem = cp.Problem(cp.Minimize(w @ x), [w @ x >= -1])
    with pytest.raises(cl.SpecError, match="appears in a constraint"):
        cl.ILP.from_cvxpy(problem, cost=w)


def test_cvxpylayers_spelling_parameters_and_variables():
    cp = pytest.importorskip("cvxpy")
    x = cp.Variable(4, boolean=True)
    w = cp.Parameter(4)
    problem = cp.Problem(cp.Minimize(w @ x), [cp.sum(x) == 2])
    spec = cl.ILP.from_cvxpy(problem, parameters=[w], variables=[x])
    assert spec == cl.ILP.from_cvxpy(problem, cost=w)
    other = cp.Variable(2)
    with pytest.raises(cl.SpecError, match="variables must be the ones the objective"):
        cl.ILP.from_cvxpy(problem, parameters=[w], variables=[other])
    with pytest.raises(cl.SpecError, match="expects exactly one parameter"):
        cl.ILP.from_cvxpy(problem, parameters=[w, cp.Parameter(2)])
    with pytest.raises(cl.SpecError, match="not both"):
        cl.ILP.from_cvxpy(problem, w, parameters=[w])


def test_variables_that_share_a_name_are_refused_naming_it():
    # spec.variables is keyed by name: the two would collapse and split would lose one
    x = cp.Variable(3, boolean=True, name="x")
    z = cp.Variable(2, integer=True, name="x")
    w = cp.Parameter(3)
    problem = cp.Problem(cp.Minimize(w @ x), [z >= 0, z <= 1, cp.sum(x) == z[0] + z[1]])
    with pytest.raises(cl.SpecError, match=r"two cvxpy variables are both named 'x'.*distinct"):
        cl.ILP.from_cvxpy(problem, cost=w)
    renamed = cp.Variable(2, integer=True, name="z")
    problem = cp.Problem(cp.Minimize(w @ x), [renamed >= 0, renamed <= 1,
                                              cp.sum(x) == renamed[0] + renamed[1]])
    spec = cl.ILP.from_cvxpy(problem, cost=w)
    parts = spec.split(np.arange(spec.num_vars, dtype=float))
    assert parts["x"].tolist() == [0.0, 1.0, 2.0] and parts["z"].tolist() == [3.0, 4.0]



def test_variables_lists_the_problem_s_own_variables_only():
    """cvxpy's reformulations add variables (``cp.abs`` in a constraint) and store a
    symmetric or diagonal variable as another: spec.variables lists neither."""
    x, c = cp.Variable(2, integer=True, name="x"), cp.Parameter(2)
    spec = cl.ILP.from_cvxpy(cp.Problem(cp.Minimize(c @ x), [cp.abs(x) <= 1]), cost=c)
    assert list(spec.variables) == ["x"]
    C = cp.Parameter((2, 2))
    for attribute in ("symmetric", "diag"):
        S = cp.Variable((2, 2), name="S", **{attribute: True})
        spec = cl.ILP.from_cvxpy(cp.Problem(cp.Minimize(cp.sum(cp.multiply(C, S))),
                                            [S >= -1, S <= 1]), cost=C)
        assert "S" not in (spec.variables or {})
        y = cl.make_solver(spec).solve(np.array([[-1.0, 0.5], [0.5, 1.0]]))
        assert y[0, 0] == 1.0 and y[1, 1] == -1.0  # the outputs stay right


def test_a_problem_without_variables_is_a_spec_error():
    c = cp.Parameter(3)
    with pytest.raises(cl.SpecError, match="no variables"):
        cl.ILP.from_cvxpy(cp.Problem(cp.Minimize(cp.sum(c))), cost=c)


# -- a cvxpy problem without boolean variables ---------------------------------------------


def test_cvxpy_without_boolean_warns():
    cp = pytest.importorskip("cvxpy")
    x, w = cp.Variable(9), cp.Parameter(9)  # boolean=True forgotten
    problem = cp.Problem(cp.Minimize(w @ x), [cp.sum(x) == 2, x >= 0, x <= 1])
    spec = cl.ILP.from_cvxpy(problem, cost=w)
    with pytest.warns(cl.NoIntegerWarning, match="boolean=True"):
        cl.make_solver(spec)
