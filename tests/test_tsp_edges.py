"""The edge-form TSP: PyEPO's edge order, brute force, the matrix form, its ILPs, hull and data."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import yaml

import combolayer as cl
from combolayer.problems.tsp_edges import edge_pairs, edges_to_matrix, matrix_to_edges


def all_tours(n: int) -> np.ndarray:
    """The 0/1 edge vector of every tour of ``n`` nodes, ``((n - 1)! / 2, E)``."""
    index = {pair: e for e, pair in enumerate(itertools.combinations(range(n), 2))}
    tours = set()
    for rest in itertools.permutations(range(1, n)):
        order = (0, *rest)
        tours.add(tuple(sorted(index[tuple(sorted((order[k], order[(k + 1) % n])))]
                               for k in range(n))))
    vectors = np.zeros((len(tours), len(index)))
    for row, edges in enumerate(sorted(tours)):
        vectors[row, list(edges)] = 1.0
    return vectors


def test_edge_order_is_pyepos():
    i, j = edge_pairs(6)
    assert list(zip(i.tolist(), j.tolist(), strict=True)) == list(
        itertools.combinations(range(6), 2))
    pytest.importorskip("pyepo")
    pytest.importorskip("gurobipy")
    from pyepo.model.grb import tspDFJModel

    assert [tuple(e) for e in tspDFJModel(6).edges] == list(itertools.combinations(range(6), 2))


@pytest.mark.parametrize("n", [4, 5, 6])
def test_every_capable_backend_agrees_with_brute_force(n):
    spec = cl.problems.TSPEdges(n)
    tours = all_tours(n)
    assert len(tours) == np.prod(range(1, n)) // 2
    costs = np.random.default_rng(n).random((6, spec.num_edges))
    best = (costs @ tours.T).min(axis=1)
    backends = cl.backends.capable_backends(spec)
    assert "tsp_matrix" in backends and cl.make_solver(spec).backend == "tsp_matrix"
    for backend in backends:
        y = cl.make_solver(spec, backend).solve(costs)
        assert y.shape == costs.shape and ((y == 0) | (y == 1)).all()
        assert {tuple(r) for r in y} <= {tuple(t) for t in tours}, backend
        np.testing.assert_allclose((costs * y).sum(1), best, atol=1e-9, err_msg=backend)
    maximised = cl.make_solver(spec.model_copy(update={"sense": "max"})).solve(costs)
    np.testing.assert_allclose((costs * maximised).sum(1), (costs @ tours.T).max(axis=1))


def test_the_matrix_form_gives_the_same_tours():
    n = 9
    spec = cl.problems.TSPEdges(n)
    costs = np.random.default_rng(0).random((5, spec.num_edges))
    matrix = edges_to_matrix(costs, n)
    assert np.array_equal(matrix, matrix.transpose(0, 2, 1))
    assert np.array_equal(matrix_to_edges(matrix, n), costs)
    by_matrix = cl.make_solver(cl.problems.TSP(n)).solve(matrix)
    np.testing.assert_array_equal(cl.make_solver(spec).solve(costs),
                                  matrix_to_edges(by_matrix, n))
    # the matrix objective is twice the tour's length
    np.testing.assert_allclose((matrix * by_matrix).sum((1, 2)),
                               2 * (costs * matrix_to_edges(by_matrix, n)).sum(1))


def test_compact_ilp_and_lazy_form_have_the_tours_as_solutions():
    n = 6
    spec = cl.problems.TSPEdges(n)
    tours = all_tours(n)
    separator = spec.to_canonical().separator
    assert all(separator(t) == [] for t in tours)
    index = {pair: e for e, pair in enumerate(itertools.combinations(range(n), 2))}
    two_triangles = np.zeros(spec.num_edges)
    for pair in [(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (3, 5)]:
        two_triangles[index[pair]] = 1.0
    cuts = separator(two_triangles)
    assert [(c.upper, sorted(c.index)) for c in cuts] == [
        (2.0, [index[p] for p in [(0, 1), (0, 2), (1, 2)]]),
        (2.0, [index[p] for p in [(3, 4), (3, 5), (4, 5)]])]
    assert all((two_triangles[c.index] @ c.value) > c.upper for c in cuts)
    costs = np.random.default_rng(1).random((4, spec.num_edges))
    for backend in ("highs", "scip"):
        if backend not in cl.backends.capable_backends(spec):
            continue
        compact = cl.make_solver(cl.ILP.from_matrices(
            shape=[spec.num_edges], **_matrices(spec.to_ilp())), backend).solve(costs)
        np.testing.assert_allclose((costs * compact).sum(1), (costs @ tours.T).min(axis=1))


def _matrices(ilp: cl.ILP) -> dict:
    A_ub, b_ub, A_eq, b_eq = ilp.to_matrices()
    form = ilp.to_canonical()
    return dict(A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, lower=form.lower, upper=form.upper,
                integrality=["binary" if i else "continuous" for i in form.integer],
                num_aux=ilp.num_aux)


def test_hull_is_the_degree_rows():
    n = 6
    hull = cl.analyze(cl.problems.TSPEdges(n))
    assert hull.dim == n * (n - 1) // 2 - n
    tours = all_tours(n)
    np.testing.assert_allclose(tours @ hull.normals.T, np.tile(hull.offsets, (len(tours), 1)),
                               atol=1e-9)


def test_round_trips_and_errors():
    spec = cl.problems.TSPEdges(7)
    assert cl.load_spec(spec.model_dump_json()) == spec
    assert cl.load_spec(yaml.safe_dump(spec.model_dump())) == spec
    assert spec.cost_shape == (21,) and spec.label == "TSPEdges(num_nodes=7)"
    with pytest.raises(cl.SpecError, match="num_nodes must be >= 3 for a tour, got 2"):
        cl.problems.TSPEdges(2)
    with pytest.raises(ValueError, match=r"\(4, 4\)"):
        cl.make_solver(spec).solve(np.zeros((4, 4)))


def test_data_in_edge_form_is_the_matrix_forms_upper_triangle():
    matrix = cl.data.tsp(6, num_features=5, num_nodes=8, deg=2, noise_width=0.5)
    edges = cl.data.tsp(6, num_features=5, num_nodes=8, deg=2, noise_width=0.5, edges=True)
    assert edges.spec == cl.problems.TSPEdges(8) and tuple(edges.costs.shape) == (6, 28)
    torch.testing.assert_close(edges.features, matrix.features)
    torch.testing.assert_close(edges.costs, torch.as_tensor(matrix_to_edges(matrix.costs.numpy(),
                                                                            8)))
    torch.testing.assert_close(edges.solutions,
                               torch.as_tensor(matrix_to_edges(matrix.solutions.numpy(), 8)))


def test_cave_trains_on_the_edge_form():
    data = cl.data.tsp(16, num_features=5, num_nodes=10, deg=2, noise_width=0.5, edges=True)
    cones = cl.losses.binding_cones(data.spec, data.solutions)
    model = torch.nn.Linear(5, data.spec.num_edges)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    loss_fn = cl.losses.CaVELoss(data.spec)
    losses = []
    for _ in range(15):
        loss = loss_fn(model(data.features), data.solutions, binding=cones)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert np.isfinite(losses).all() and losses[-1] < 0.7 * losses[0]


def test_cave_on_the_edge_form_is_pyepos_and_the_matrix_form_needs_a_scale():
    """CaVE+ on PyEPO's DFJ TSP cones: the edge form with PyEPO's cones is PyEPO's loss.
    The matrix form holds each edge twice, so its vectors are sqrt(2) longer; a projection
    stopped after 3 iterations is not scale-invariant, so the matrix form gives PyEPO's
    loss only with costs and cones divided by sqrt(2) (an isometry onto symmetric matrices)."""
    pytest.importorskip("pyepo")
    pytest.importorskip("gurobipy")
    pytest.importorskip("clarabel")
    from pyepo.data.dataset import collate_tight_constraints, optDatasetConstrs
    from pyepo.func import CaVE
    from pyepo.model.grb import tspDFJModel

    n = 7
    spec = cl.problems.TSPEdges(n)
    gen = torch.Generator().manual_seed(0)
    costs = torch.rand(4, spec.num_edges, generator=gen, dtype=torch.float64)
    dataset = optDatasetConstrs(tspDFJModel(n), np.zeros((4, 1)), costs.numpy())
    _, _, sols, _, tight = collate_tight_constraints([dataset[i] for i in range(4)])
    np.testing.assert_array_equal(sols.numpy(), cl.make_solver(spec).solve(costs.numpy()))
    pred = torch.rand(4, spec.num_edges, generator=gen, dtype=torch.float64)
    theirs = CaVE(tspDFJModel(n))(pred, tight.double())
    ours = cl.losses.CaVELoss(spec)(pred, sols, binding=tight)
    torch.testing.assert_close(ours, theirs, atol=1e-9, rtol=1e-9)
    own_cones = cl.losses.CaVELoss(spec)(pred, sols)
    assert 0.0 < float(own_cones) < 1.0

    matrix = cl.losses.CaVELoss(cl.problems.TSP(n))
    as_matrix = lambda a: torch.as_tensor(edges_to_matrix(a.numpy(), n))  # noqa: E731
    root2 = np.sqrt(2.0)
    scaled = matrix(as_matrix(pred) / root2, as_matrix(sols),
                    binding=as_matrix(tight.double()).reshape(4, -1, n * n) / root2)
    torch.testing.assert_close(scaled, theirs, atol=1e-9, rtol=1e-9)
    naive = matrix(as_matrix(pred), as_matrix(sols),
                   binding=as_matrix(tight.double()).reshape(4, -1, n * n))
    assert abs(float(naive) - float(theirs)) > 1e-4
