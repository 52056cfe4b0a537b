"""Brute-force enumeration of small integer programs: the ground truth for every backend
and for ``analyze(exact=True)``; the one enumerator of the test suite."""

from __future__ import annotations

import itertools

import numpy as np

import combolayer as cl


def feasible_points(spec: cl.ILP, tol: float = 1e-9) -> np.ndarray:
    """Every integer point of a small, bounded, all-integer ILP, as rows ``(K, num_vars)``."""
    form = spec.to_canonical()
    assert form.integer.all(), "brute force needs integer variables"
    assert np.isfinite(form.upper).all(), "brute force needs finite bounds"
    ranges = [
        range(int(np.ceil(lo)), int(np.floor(hi)) + 1) for lo, hi in zip(form.lower, form.upper)
    ]
    points = np.array(list(itertools.product(*ranges)), dtype=float).reshape(-1, form.num_vars)
    ok = np.ones(len(points), dtype=bool)
    if form.A_ub.shape[0]:
        ok &= ((form.A_ub @ points.T).T <= form.b_ub + tol).all(axis=1)
    if form.A_eq.shape[0]:
        ok &= (np.abs((form.A_eq @ points.T).T - form.b_eq) <= tol).all(axis=1)
    return points[ok]


def feasible_outputs(spec: cl.ILP) -> np.ndarray:
    """The distinct output parts ``(K, N)`` of every feasible point, in lexicographic order."""
    return np.unique(feasible_points(spec)[:, : spec.num_outputs], axis=0)


def optimum(spec: cl.ILP, costs: np.ndarray) -> tuple[float, np.ndarray]:
    """The optimal objective and the set of optimal output vectors ``(K, N)``."""
    outputs = feasible_outputs(spec)
    values = outputs @ np.ravel(costs)
    best = values.min() if spec.sense == "min" else values.max()
    return float(best), outputs[np.isclose(values, best)]


def random_ilp(rng: np.random.Generator, integer: bool | None = None) -> cl.ILP:
    """A small random ILP that is feasible by construction (rows built around a point)."""
    n_out = int(rng.integers(2, 6))
    n_aux = int(rng.integers(0, 3))
    n = n_out + n_aux
    if integer is None:
        integer = bool(rng.integers(0, 2))
    upper = rng.integers(1, 3, n).astype(float) if integer else np.ones(n)
    x0 = np.array([rng.integers(0, int(u) + 1) for u in upper], dtype=float)
    constraints = []
    for _ in range(int(rng.integers(1, 4))):
        a = rng.integers(-2, 3, n).astype(float)
        sense = str(rng.choice(["<=", "==", ">="]))
        slack = float(rng.integers(0, 3))
        rhs = a @ x0 + (slack if sense == "<=" else -slack if sense == ">=" else 0.0)
        constraints.append(cl.Constraint(coefs=a.tolist(), sense=sense, rhs=rhs))
    return cl.ILP(
        shape=[n_out],
        num_aux=n_aux,
        sense=str(rng.choice(["min", "max"])),
        integrality="integer" if integer else "binary",
        lower=0.0,
        upper=upper.tolist(),
        constraints=constraints,
    )


def objective_values(spec: cl.ILP, costs: np.ndarray, points: np.ndarray) -> np.ndarray:
    """``<costs, y> + <known_cost, x>`` of every full point ``x = concat(y, aux)`` (rows)."""
    values = points[:, : spec.num_outputs] @ np.ravel(costs)
    if spec.known_cost is not None:
        values = values + points @ np.asarray(spec.known_cost, dtype=float)
    return values


def optimum_full(spec: cl.ILP, costs: np.ndarray) -> tuple[float, np.ndarray]:
    """The optimal objective counting the known cost, and every optimal full point
    ``(K, num_vars)``."""
    points = feasible_points(spec)
    values = objective_values(spec, costs, points)
    best = values.min() if spec.sense == "min" else values.max()
    return float(best), points[np.isclose(values, best)]


def random_known_ilp(rng: np.random.Generator, integer: bool | None = None) -> cl.ILP:
    """`random_ilp` with a random integer known cost on every variable (outputs and
    auxiliaries), and at least one auxiliary."""
    spec = random_ilp(rng, integer)
    if spec.num_aux == 0:
        spec = spec.model_copy(update={"num_aux": 1})
        upper = spec.upper if isinstance(spec.upper, list) else [spec.upper] * spec.num_outputs
        constraints = [cl.Constraint(coefs=[*row.coefs, 1.0], sense=row.sense, rhs=row.rhs)
                       for row in spec.constraints]
        spec = cl.ILP(**{**spec.model_dump(), "num_aux": 1, "upper": [*upper, 1.0],
                         "constraints": [row.model_dump() for row in constraints]})
    known = rng.integers(-3, 4, spec.num_vars).astype(float).tolist()
    return cl.ILP(**{**spec.model_dump(), "known_cost": known})
