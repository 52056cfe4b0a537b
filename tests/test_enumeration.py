"""The ``"enumerate"`` backend (combolayer/backends/enumeration.py) on every kind of
variable it accepts: free 0/1 variables, and variables fixed by ``lower == upper`` at
any value (2, -3, 0.5 beside binaries), with and without rows of the spec's own, with
per-call rows, min and max, with a known cost; its answers and flags equal HiGHS's,
directly and when ``"auto"`` picks it."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import torch

import combolayer as cl
from combolayer.backends.enumeration import feasible_points, variable_values
from combolayer.specs.canonical import canonical_form

PAIR = [cl.Constraint(coefs=[1, 1], sense="<=", rhs=3)]


def test_a_variable_fixed_at_two_beside_a_binary_is_solved_by_auto():
    spec = cl.ILP(shape=[2], integrality="integer", lower=[2, 0], upper=[2, 1],
                  constraints=PAIR)
    solver = cl.make_solver(spec)
    assert solver.backend == "enumerate"
    assert solver.solve(np.array([1.0, -1.0])).tolist() == [2.0, 1.0]
    assert cl.make_solver(spec, "highs").solve(np.array([1.0, -1.0])).tolist() == [2.0, 1.0]


def test_per_call_rows_flag_only_the_instances_they_leave_infeasible():
    """Under on_infeasible="flag" every instance came back as zeros, flagged: the fixed
    variable's value 2 had no 0/1 point to take."""
    spec = cl.ILP(shape=[2], integrality="integer", lower=[2, 0], upper=[2, 1],
                  constraints=PAIR)
    A = np.array([[[0.0, 1.0]], [[1.0, 0.0]], [[1.0, 1.0]]])
    b = np.array([[0.0], [1.0], [2.0]])  # the second: x0 = 2 cannot be <= 1
    costs = -np.ones((3, 2))
    answers = {}
    for backend in ("enumerate", "highs"):
        solver = cl.make_solver(spec, {"name": backend, "on_infeasible": "flag"})
        with pytest.warns(RuntimeWarning, match="1 of 3 instances"):
            answers[backend], status = solver.solve(costs, A=A, b=b, return_status=True)
        assert status == ("optimal", "infeasible", "optimal"), backend
    assert answers["enumerate"].tolist() == answers["highs"].tolist() \
        == [[2.0, 0.0], [0.0, 0.0], [2.0, 0.0]]


def test_variable_values_are_each_variables_values_within_its_bounds():
    spec = cl.ILP(shape=[5], integrality=["integer", "continuous", "binary", "integer",
                                          "integer"],
                  lower=[-3, 0.5, 1, 0, 2.5], upper=[-3, 0.5, 1, 1, 2.5])
    values = variable_values(canonical_form(spec, lazy=False))
    # an integer variable fixed between two integers has no value: the problem is infeasible
    assert [v.tolist() for v in values] == [[-3.0], [0.5], [1.0], [0.0, 1.0], []]
    assert feasible_points(canonical_form(spec, lazy=False)).shape == (0, 5)


def _random_spec(rng: np.random.Generator) -> cl.ILP:
    """A small ILP whose variables are each free 0/1 (the first always) or fixed at 0, 1,
    an integer in [-3, 3] or a fraction, with 0-3 rows built around a point (feasible), min or max,
    sometimes a known cost."""
    n_out, n_aux = int(rng.integers(2, 5)), int(rng.integers(0, 3))
    n = n_out + n_aux
    kinds, lower, upper, point = [], [], [], []
    for j in range(n):
        kind = int(rng.integers(0, 4)) if j else 0  # one free variable: a MIP
        if kind == 0:  # free 0/1, as binary or as integer
            kinds.append(str(rng.choice(["binary", "integer"])))
            lower.append(0.0), upper.append(1.0), point.append(float(rng.integers(0, 2)))
            continue
        value = (float(rng.integers(0, 2)) if kind == 1 else float(rng.integers(-3, 4))
                 if kind == 2 else float(rng.choice([-1.5, 0.5, 2.25])))
        kinds.append("binary" if kind == 1 else "integer" if kind == 2 else "continuous")
        lower.append(value), upper.append(value), point.append(value)
    point = np.array(point)
    constraints = []
    for _ in range(int(rng.integers(0, 4))):
        a = rng.integers(-2, 3, n).astype(float)
        sense = str(rng.choice(["<=", "==", ">="]))
        slack = float(rng.integers(0, 2))
        rhs = a @ point + (slack if sense == "<=" else -slack if sense == ">=" else 0.0)
        constraints.append(cl.Constraint(coefs=a.tolist(), sense=sense, rhs=rhs))
    known = rng.normal(size=n).tolist() if rng.random() < 0.5 else None
    return cl.ILP(shape=[n_out], num_aux=n_aux, integrality=kinds, lower=lower, upper=upper,
                  constraints=constraints, sense=str(rng.choice(["min", "max"])),
                  known_cost=known)


@pytest.mark.parametrize("rows", [False, True], ids=["spec rows", "per-call rows"])
def test_random_specs_with_fixed_variables_equal_highs(rows):
    """150 random specs x 4 costs (continuous: one optimum): enumerate, and "auto" (which
    picks enumerate for all of them), return HiGHS's outputs, and with per-call rows
    flag the same instances infeasible."""
    rng = np.random.default_rng(11 if rows else 12)
    compared = picked = 0
    kinds = set()
    for _ in range(150):
        spec = _random_spec(rng)
        kinds.update(k for k, lo, up in zip(spec.integrality, spec.lower, spec.upper,
                                            strict=True) if lo == up and lo not in (0, 1))
        costs = rng.normal(size=(4, spec.num_outputs))
        call = {}
        if rows:
            call = {"A": rng.integers(-1, 2, (4, 1, spec.num_vars)).astype(float),
                    "b": rng.integers(-1, 3, (4, 1)).astype(float)}
        answers, flags = [], []
        for backend in ("highs", "enumerate", "auto"):
            solver = cl.make_solver(spec, {"name": backend, "on_infeasible": "flag"})
            picked += solver.backend == "enumerate" and backend == "auto"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # the flagged instances
                y, status = solver.solve(costs, **call, return_status=True)
            answers.append(y)
            flags.append([s == "infeasible" for s in status] if rows else None)
        for got, flag in zip(answers[1:], flags[1:], strict=True):
            np.testing.assert_allclose(got, answers[0], atol=1e-9, err_msg=spec.model_dump_json())
            assert flag == flags[0], spec.model_dump_json()
        compared += len(costs)
    assert kinds >= {"integer", "continuous"}
    assert picked == 150 and compared == 600


@pytest.mark.parametrize("costs", ["zeros", "integers"])
def test_ties_under_per_call_rows_go_to_the_first_point_at_every_batch_size(costs):
    """Every path of the kernel breaks ties by point order: the candidates' path (few
    instances per rows entry) took topk's order among equal costs, so one instance's answer
    changed with the batch size."""
    spec = cl.ILP(shape=[6], constraints=[
        cl.Constraint(coefs=[1, 2, 3, 4, 5, 6], sense="<=", rhs=9)])
    solver = cl.make_solver(spec, "enumerate")
    rng = torch.Generator().manual_seed(0)
    w = (torch.zeros(6) if costs == "zeros"
         else torch.randint(-1, 2, (6,), generator=rng).to(torch.float64))
    A, b = torch.tensor([[1.0, 0, 0, 0, 0, 0]]), torch.tensor([0.0])
    answers = {B: solver.solve(w.expand(B, 6), A=A, b=b)[0].tolist() for B in (1, 2, 3, 4, 8)}
    assert len({tuple(y) for y in answers.values()}) == 1, answers
    # the first optimal point in lexicographic order, by brute force
    points = [p for p in itertools.product((0, 1), repeat=6)
              if sum(c * x for c, x in zip([1, 2, 3, 4, 5, 6], p)) <= 9 and p[0] == 0]
    values = [float(torch.tensor(p, dtype=torch.float64) @ w.double()) for p in points]
    assert answers[1] == list(map(float, points[values.index(min(values))]))
