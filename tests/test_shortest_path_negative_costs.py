"""Negative costs on shortest paths: one rule on every backend.

On a graph with cycles a path's minimisation-form costs below 0 raise (the default)
or, under ``negative_costs="clip"``, are set to 0 before any backend sees them, so
every capable backend agrees with brute force over the simple paths and none returns
a path with a cycle beside it. A directed acyclic graph takes any costs.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from test_problems import dag_grid_edges, enumerate_solutions, random_cyclic_graph

import combolayer as cl
from combolayer.backends import capable_backends
from combolayer.problems import GridShortestPath, ShortestPath

SPECS = {
    "grid8": ShortestPath.grid(3, 3),
    "grid4": ShortestPath.grid(3, 3, neighborhood=4),
    "directed": random_cyclic_graph(np.random.default_rng(0), n=5, m=9),
    "undirected": ShortestPath(num_nodes=4, edges=[(0, 1), (1, 2), (0, 2), (2, 3), (1, 3)],
                               source=0, target=3, directed=False),
    "undirected5": random_cyclic_graph(np.random.default_rng(1), n=5, m=8, directed=False),
    "dag": ShortestPath(num_nodes=9, edges=dag_grid_edges(3, 3), source=0, target=8),
}
#: Every backend that solves one of the specs, and "auto".
BACKENDS = sorted({name for spec in SPECS.values() for name in capable_backends(spec)})
INSTANCES = 10


def with_fields(spec, **fields):
    """``spec`` built again (validated) with ``fields`` changed."""
    return type(spec).model_validate({**spec.model_dump(), **fields})


def paths(spec) -> np.ndarray:
    """Every simple source-target path of ``spec``, ``(K, N)``."""
    return enumerate_solutions(spec).reshape(-1, spec.num_outputs)


def signed_costs(rng, spec) -> np.ndarray:
    """``(INSTANCES, N)`` costs of both signs: small integers (ties, zeros) and normals."""
    costs = rng.integers(-3, 5, (INSTANCES, spec.num_outputs)).astype(float)
    costs[1::2] = rng.normal(size=(INSTANCES // 2, spec.num_outputs))
    return costs


def assert_best_paths(spec, y, costs, where) -> None:
    """Each row of ``y`` is a simple path whose objective under ``costs`` is the best."""
    points = paths(spec)
    y = np.asarray(y, dtype=float).reshape(len(costs), -1)
    for i, (row, cost) in enumerate(zip(y, costs, strict=True)):
        assert (np.abs(points - row).max(axis=1) < 1e-9).any(), (where, i, row.tolist())
        values = points @ cost
        best = values.min() if spec.sense == "min" else values.max()
        assert row @ cost == pytest.approx(best, abs=1e-7), (where, i, cost.tolist())


def specs_for(backend):
    return [(name, spec) for name, spec in SPECS.items()
            if backend == "auto" or backend in capable_backends(spec)]


@pytest.mark.parametrize("backend", [*BACKENDS, "auto"])
def test_every_backend_clips_negative_costs_and_returns_the_best_simple_path(backend):
    rng = np.random.default_rng(BACKENDS.index(backend) if backend in BACKENDS else 99)
    for name, spec in specs_for(backend):
        clipped = with_fields(spec, negative_costs="clip")
        costs = signed_costs(rng, spec)
        checked = spec.nonnegative_costs()
        floored = costs if checked is None else np.where(checked & (costs < 0), 0.0, costs)
        solver = cl.make_solver(clipped, backend)
        shaped = costs.reshape(INSTANCES, *spec.cost_shape)
        assert_best_paths(spec, solver.solve(shaped), floored, (name, "numpy"))
        y = solver.solve(torch.from_numpy(shaped))
        assert_best_paths(spec, y.numpy(), floored, (name, "torch"))
        y = solver.solve_batch(torch.from_numpy(costs))  # the layer's hot path
        assert_best_paths(spec, y.numpy(), floored, (name, "solve_batch"))


@pytest.mark.parametrize("backend", [*BACKENDS, "auto"])
@pytest.mark.parametrize("sense", ["min", "max"])
def test_every_backend_refuses_costs_that_make_a_cycle_pay(backend, sense):
    rng = np.random.default_rng(7)
    sign = 1.0 if sense == "min" else -1.0
    for name, spec in specs_for(backend):
        spec = with_fields(spec, sense=sense)
        costs = signed_costs(rng, spec)
        costs[: INSTANCES // 2] = np.abs(costs[: INSTANCES // 2])  # half of them pay nothing
        costs *= sign
        checked = spec.nonnegative_costs()
        solver = cl.make_solver(spec, backend)
        paying = (np.zeros(INSTANCES, dtype=bool) if checked is None
                  else (sign * costs[:, checked] < 0).any(axis=1))
        if checked is not None:
            assert paying.any() and not paying.all(), name
        fine = costs[~paying]
        assert_best_paths(spec, solver.solve(fine.reshape(-1, *spec.cost_shape)), fine, name)
        word = "negative" if sense == "min" else "positive"
        for cost in costs[paying][:3]:
            for given in (cost, torch.from_numpy(cost)):
                with pytest.raises(ValueError, match=f"got {word} costs"):
                    solver.solve(given.reshape(spec.cost_shape))


def test_review_instances_raise_on_every_backend_instead_of_a_path_with_a_cycle():
    grid = ShortestPath.grid(3, 3, neighborhood=4)
    w = np.array([[1.0, 4.0, -3.0], [-1.0, 4.0, -1.0], [2.0, -1.0, 3.0]])
    graph = SPECS["undirected"]
    c = np.array([3.0, -1.0, 3.0, -1.0, 3.0])
    for spec, cost in [(grid, w), (graph, c)]:
        for backend in [*capable_backends(spec), "auto"]:
            with pytest.raises(ValueError, match=r"negative costs \(instance 0, value -"):
                cl.make_solver(spec, backend).solve(cost)


def test_the_error_speaks_in_the_users_sense():
    spec = GridShortestPath(rows=3, cols=3, sense="max")
    with pytest.raises(ValueError, match=r"positive costs \(instance 0, value 1\).*"
                                         r"sense='max'.*non-positive"):
        cl.make_solver(spec, "highs").solve(np.ones((3, 3)))
    y = cl.make_solver(spec).solve(-np.ones((3, 3)))  # costs <= 0: the fewest vertices
    assert y.sum() == 3
    loss = cl.losses.SPOPlusLoss(spec)  # a loss's own check names the value as given
    with pytest.raises(ValueError, match=r"positive costs \(cost_pred, instance 0, value 2\)"):
        loss(torch.full((1, 3, 3), 2.0), -torch.ones(1, 3, 3))
    layer = cl.ComboLayer(spec, projection="none")  # so does the layer's
    with pytest.raises(ValueError, match=r"positive costs \(w after projection, instance 0, "
                                         r"value 2\)"):
        layer(torch.full((3, 3), 2.0))


def test_max_with_clip_is_refused_on_a_graph_with_cycles_only():
    with pytest.raises(cl.SpecError, match="sense='max' with negative_costs='clip' on a graph "
                                           "with cycles.*meaningless"):
        GridShortestPath(rows=3, cols=3, sense="max", negative_costs="clip")
    with pytest.raises(ValueError, match="sense='max' with negative_costs='clip'"):
        with_fields(SPECS["undirected"], sense="max", negative_costs="clip")
    copied = SPECS["grid8"].model_copy(update={"sense": "max", "negative_costs": "clip"})
    with pytest.raises(ValueError, match="sense='max' with negative_costs='clip'"):
        cl.make_solver(copied, "highs")  # a copy that skipped the validators
    dag = with_fields(SPECS["dag"], sense="max", negative_costs="clip")  # nothing to clip
    costs = np.random.default_rng(3).normal(size=(4, dag.num_outputs))
    assert_best_paths(dag, cl.make_solver(dag).solve(costs), costs, "dag")


def test_rows_and_known_costs_meet_the_same_rule():
    spec = ShortestPath.grid(3, 3)
    solver = cl.make_solver(spec, "highs")
    costs = np.ones((3, 3))
    A = np.zeros((1, 9))
    A[0, 4] = -1.0  # force the centre
    with pytest.raises(ValueError, match="negative costs"):
        solver.solve(costs - 2 * np.eye(3)[::-1], A=A, b=np.array([-1.0]))
    known = np.zeros(9)
    known[1] = -5.0  # the cost the solver minimises is costs + known_cost
    with pytest.raises(ValueError, match="negative costs"):
        cl.make_solver(spec, "scipy").solve(costs, known_cost=known)
    clipped = cl.make_solver(with_fields(spec, negative_costs="clip"), "scip")
    y = clipped.solve(costs, A=A, b=np.array([-1.0]), known_cost=known)
    assert y[1, 1] == 1.0 and y[0, 1] == 1.0  # the centre forced; (0, 1) free once clipped


@pytest.mark.parametrize("name", ["grid8", "grid4", "undirected", "directed"])
def test_the_exact_hull_probes_simple_paths_with_costs_of_both_signs(name):
    """``analyze(exact=True)`` optimises signed directions: on a graph with cycles it
    gets the simple paths' affine hull (brute force), not a refusal of the signs."""
    spec = SPECS[name]
    points = paths(spec)
    hull = cl.analyze(spec, exact=True)
    assert hull.dim == np.linalg.matrix_rank(points[1:] - points[0])
    assert np.abs(points @ hull.normals.T - hull.normals @ points[0]).max() < 1e-9


#: A square whose two paths have two edges each: sum(y) is fixed, so "mean" and "std" keep
#: the solution too.
SQUARE = ShortestPath(num_nodes=4, edges=[(0, 1), (1, 3), (0, 2), (2, 3)], source=0, target=3,
                      directed=False)


@pytest.mark.parametrize("projection", ["auto", "auto-exact", "plane", "norm", "none",
                                        "mean", "std"])
@pytest.mark.parametrize("name", ["grid4", "undirected", "square"])
def test_the_layer_clips_the_users_cost_before_its_projection(name, projection):
    """Under negative_costs="clip" the layer's answer is brute force's on the clipped
    costs, whatever the projection: a projection's own negative entries are not what the
    solver clips (they gave a path costing 5.5 where the best costs 5.2), and the
    gradient reaches every entry, as when the solver clips."""
    spec = with_fields(SQUARE if name == "square" else SPECS[name], negative_costs="clip")
    if projection in ("mean", "std") and name != "square":
        return  # refused where sum(y) varies (test_projections)
    layer = cl.ComboLayer(spec, projection=projection)
    rng = np.random.default_rng(7)
    every = paths(spec)
    for _ in range(INSTANCES):
        w = torch.tensor(rng.uniform(-0.5, 2.0, spec.cost_shape), requires_grad=True)
        y = layer(w)
        clipped = np.maximum(w.detach().numpy().reshape(-1), 0.0)
        assert clipped @ y.detach().numpy().reshape(-1) == pytest.approx((every @ clipped).min())
        y.sum().backward()
        assert w.grad.shape == w.shape


@pytest.mark.parametrize("projection", ["mean", "std"])
def test_shifting_projections_take_positive_costs_where_sum_y_is_fixed(projection):
    """With negative_costs="error", "mean" and "std" shift positive costs below 0: the
    solver sees the user's cost (rescaled) instead, and nothing is refused."""
    layer = cl.ComboLayer(SQUARE, projection=projection)
    w = torch.tensor([1.0, 3.0, 2.1, 2.1], dtype=torch.float64)
    assert layer(w).tolist() == [1.0, 1.0, 0.0, 0.0]


@pytest.mark.parametrize("projection", ["none", "plane", "auto"])
def test_the_layer_clips_the_total_with_a_per_call_known_cost_as_the_solver_does(projection):
    """Under "clip" with a per-call known cost the solver clips the total w + k: the layer
    clipped w alone (a path costing 4.8 where the best costs 4.5, or "negative costs"
    raised on a clip spec), and must answer as the solver does, without a warning."""
    spec = with_fields(SPECS["grid4"], negative_costs="clip")
    rng = np.random.default_rng(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for _ in range(30):
            w = torch.tensor(rng.uniform(-1.0, 2.0, (3, 3)))
            known = torch.tensor(rng.uniform(-1.0, 1.5, 9))
            total = (w.reshape(-1) + known).clamp(min=0)
            y = cl.ComboLayer(spec, projection=projection).eval()(w, known_cost=known)
            best = cl.make_solver(spec).solve(w, known_cost=known)
            assert float(total @ y.reshape(-1)) == pytest.approx(
                float(total @ best.reshape(-1)), abs=1e-12)
