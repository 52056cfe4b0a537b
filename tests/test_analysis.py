"""cl.analyze: the affine hull of a problem's solutions, checked against known
structure and against brute-force enumeration."""

import itertools
import json

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp
import torch
from bruteforce import feasible_outputs
from hypothesis import given, settings
from hypothesis import strategies as st

import combolayer as cl
from combolayer.cli.main import main as cli_main
from combolayer.data import grid_edges, shortest_path_spec
from combolayer.specs.canonical import canonical_form

P = cl.problems
analyze = cl.analyze


# -- helpers -------------------------------------------------------------------


def projector(rows) -> np.ndarray:
    """The orthogonal projector onto the span of ``rows``."""
    rows = np.asarray(rows, dtype=float)
    if rows.size == 0:
        return 0.0
    basis = scipy.linalg.orth(rows.T)
    return basis @ basis.T


def assert_same_span(normals, expected_rows):
    n = normals.shape[1]
    got = normals.T @ normals if len(normals) else np.zeros((n, n))
    want = projector(expected_rows) if len(expected_rows) else np.zeros((n, n))
    assert np.allclose(got, want, atol=1e-8), (
        f"normal space differs: got rank {len(normals)}, "
        f"expected rank {np.linalg.matrix_rank(np.asarray(expected_rows).reshape(-1, n))}"
    )


def hull_normals(points: np.ndarray) -> np.ndarray:
    """Rows spanning the directions orthogonal to the affine hull of ``points``."""
    differences = points[1:] - points[0]
    if len(differences) == 0:
        return np.eye(points.shape[1])
    return scipy.linalg.null_space(differences).T


def tours(n: int) -> np.ndarray:
    """Every tour on n nodes as a flat symmetric adjacency matrix."""
    out = set()
    for perm in itertools.permutations(range(1, n)):
        order = (0, *perm)
        y = np.zeros((n, n))
        for a, b in zip(order, order[1:] + (0,), strict=True):
            y[a, b] = y[b, a] = 1
        out.add(tuple(y.ravel()))
    return np.array(sorted(out))


def flow_incidence(num_nodes, edges) -> np.ndarray:
    A = np.zeros((num_nodes, len(edges)))
    for k, (u, v) in enumerate(edges):
        A[u, k], A[v, k] = 1.0, -1.0
    return A


# -- the expected hulls of the named problems ------------------------------------


@pytest.mark.parametrize("spec", [
    P.TopK(n=10, k=3),
    cl.ILP.from_matrices(10, A_eq=np.ones((1, 10)), b_eq=[3]),
    P.Ranking(n=6),
])
def test_topk_and_ranking_normal_is_all_ones(spec):
    hull = analyze(spec)
    assert hull.dim == spec.num_outputs - 1
    assert_same_span(hull.normals, np.ones((1, spec.num_outputs)))
    assert hull.fixed.size == 0


@pytest.mark.parametrize("spec", [
    P.Ranking(1), P.Ranking(2), P.Ranking(3), P.Ranking(6),
    P.TopK(1, 1), P.TopK(5, 1), P.TopK(5, 3), P.TopK(5, 5),
    P.Matching(1, 1), P.Matching(2, 2), P.Matching(3, 3), P.Matching(2, 3), P.Matching(1, 4),
    P.Matching(3, 2, cover="cols"), P.Matching(3, 3, cover="cols"),
    P.Matching(3, 3, cover="both"), P.Matching(2, 3, cover="none", min_pairs=1)],
    ids=lambda spec: spec.label)
@pytest.mark.parametrize("exact", [False, True])
def test_a_closed_form_hull_is_that_of_the_problems_model(spec, exact):
    """Ranking, TopK and Matching state their hulls (`Spec.affine_hull`; a matching with
    a bound on its pairs leaves it to the analysis): the same as the hull computed from
    their models (`to_ilp`: Ranking's n**2 assignment), in both modes, a single point for
    Ranking(1), TopK(n, n) and Matching(1, 1)."""
    stated, computed = analyze(spec, exact=exact), analyze(spec.to_ilp(), exact=exact)
    assert stated.dim == computed.dim
    assert_same_span(stated.normals, computed.normals)
    # the stated point lies on the computed hull (offsets depend on the basis chosen)
    np.testing.assert_allclose(computed.normals @ stated.point, computed.offsets, atol=1e-9)
    assert stated.fixed.tolist() == computed.fixed.tolist()


def test_a_large_ranking_builds_no_assignment_model(monkeypatch):
    """Ranking(n) has n**2 assignment variables: ranking the backends and the layer's
    projection "auto" built that model (minutes and gigabytes from n = 300), where the
    sort and the closed-form hull need none."""
    def refused(self):
        raise AssertionError("the assignment model was built")

    monkeypatch.setattr(P.Ranking, "to_ilp", refused)
    spec = P.Ranking(3000)
    assert cl.make_solver(spec).backend == "torch"
    y = cl.ComboLayer(spec)(torch.randn(2, 3000))
    assert sorted(y[0].tolist()) == list(range(1, 3001))


@pytest.mark.filterwarnings("ignore::combolayer.NoIntegerWarning")
def test_is_mip_and_has_integers_are_the_canonical_forms():
    """`Spec.is_mip` and `Spec.has_integers`, told without building the canonical form,
    agree with it on every named problem and on ILPs of each integrality."""
    specs = [P.TopK(5, 2), P.Ranking(4), P.Matching(3, 4), P.Knapsack([[1, 2, 3]], [3]),
             P.TSP(5), P.ShortestPath.grid(3, 3), shortest_path_spec((3, 3)),
             cl.ILP(shape=[3], integrality="continuous"),
             cl.ILP(shape=[3], integrality=["continuous", "integer", "continuous"]),
             cl.ILP(shape=[3])]
    for spec in specs:
        form = canonical_form(spec)
        assert spec.is_mip == form.is_mip and spec.has_integers == bool(form.integer.any()), \
            spec.label


def test_ranking_built_with_auxiliary_assignment_is_all_ones():
    """Ranks as ``y_i = sum_q q * x_iq`` over an assignment x: the auxiliaries are eliminated."""
    n = 5
    A, b = [], []
    for i in range(n):
        row = np.zeros(n + n * n)
        row[i] = 1
        row[n + i * n: n + (i + 1) * n] = -np.arange(1, n + 1)
        A.append(row)
        b.append(0)
    for i in range(n):
        row = np.zeros(n + n * n)
        row[n + i * n: n + (i + 1) * n] = 1
        col = np.zeros(n + n * n)
        col[n + i: n + n * n: n] = 1
        A += [row, col]
        b += [1, 1]
    spec = cl.ILP.from_matrices(n, A_eq=np.array(A), b_eq=b, num_aux=n * n,
                                integrality=["integer"] * n + ["binary"] * n * n,
                                upper=[n] * n + [1] * n * n)
    hull = analyze(spec)
    assert hull.dim == n - 1
    assert_same_span(hull.normals, np.ones((1, n)))
    assert np.isclose(hull.offsets[0] * np.sqrt(n), n * (n + 1) / 2)


def test_square_matching_has_row_and_column_potentials():
    n = 4
    hull = analyze(P.Matching(rows=n, cols=n))
    rows = [np.kron(np.eye(n)[i], np.ones(n)) for i in range(n)]
    cols = [np.kron(np.ones(n), np.eye(n)[j]) for j in range(n)]
    assert len(hull.normals) == 2 * n - 1
    assert_same_span(hull.normals, rows + cols)


def tsp_expected(n: int) -> list[np.ndarray]:
    rows = []
    for i in range(n):
        rows.append(np.eye(n * n)[i * n + i])  # no self-loops
        degree = np.zeros((n, n))
        degree[i] = 1
        degree[i, i] = 0
        rows.append(degree.ravel())
        for j in range(i + 1, n):
            anti = np.zeros((n, n))
            anti[i, j], anti[j, i] = 1, -1
            rows.append(anti.ravel())
    return rows


@pytest.mark.parametrize("n", [5, 6])
def test_tsp_lp_hull_is_diagonal_antisymmetric_and_degree(n):
    hull = analyze(P.TSP(num_nodes=n))
    assert hull.dim == n * (n - 3) // 2  # dim of the symmetric TSP polytope
    assert_same_span(hull.normals, tsp_expected(n))
    assert sorted(hull.fixed.tolist()) == [i * n + i for i in range(n)]


@pytest.mark.parametrize("n", [5, 6])
def test_tsp_exact_hull_matches_brute_force_tours(n):
    hull = analyze(P.TSP(num_nodes=n), exact=True)
    assert_same_span(hull.normals, hull_normals(tours(n)))
    assert np.allclose(tours(n) @ hull.normals.T, hull.offsets, atol=1e-8)


def test_pyepo_grid_edges_have_node_potentials_including_all_ones():
    spec = shortest_path_spec((5, 5))
    hull = analyze(spec)
    incidence = flow_incidence(25, grid_edges(5, 5))
    assert hull.dim == 40 - 24
    assert_same_span(hull.normals, incidence)
    ones = torch.ones(40, dtype=torch.float64)
    assert torch.linalg.vector_norm(hull.project(ones)) < 1e-10  # every path has 8 edges


def test_pyepo_grid_as_ilp_matches_the_named_spec():
    edges = grid_edges(5, 5)
    A = flow_incidence(25, edges)
    b = np.zeros(25)
    b[0], b[24] = 1, -1
    hull = analyze(cl.ILP.from_matrices(40, A_eq=A, b_eq=b))
    assert np.allclose(hull.projector(), analyze(shortest_path_spec((5, 5))).projector())


def test_grid_vertex_costs_fix_source_and_target():
    hull = analyze(P.ShortestPath.grid(5, 5))
    assert hull.fixed.tolist() == [0, 24]
    assert_same_span(hull.normals, np.eye(25)[[0, 24]])
    assert np.allclose(hull.point[[0, 24]], 1.0)


def test_grid_four_neighbours_finds_the_colouring_equation():
    """On a bipartite 4-grid every path alternates colours: #black - #white = 1."""
    hull = analyze(P.ShortestPath.grid(3, 3, neighborhood=4))
    colour = np.array([(i + j) % 2 == 0 for i in range(3) for j in range(3)], float)
    assert_same_span(hull.normals, [np.eye(9)[0], np.eye(9)[8], 2 * colour - 1])


def test_knapsack_has_no_invariance():
    hull = analyze(P.Knapsack(weights=[[3, 4, 5, 2, 6]], capacities=[10]))
    assert hull.normals.shape == (0, 5)
    assert hull.dim == 5
    w = torch.randn(3, 5)
    assert torch.equal(hull.project(w), w)


def test_equality_hidden_as_two_inequalities_is_found():
    A = np.array([[1, 1, 1, 0], [-1, -1, -1, 0]])
    hull = analyze(cl.ILP.from_matrices(4, A_ub=A, b_ub=[2, -2]))
    assert_same_span(hull.normals, [[1, 1, 1, 0]])
    assert np.isclose(hull.offsets[0] * np.sqrt(3), 2)


def test_integer_only_equality_needs_exact_mode():
    # 0.5 <= y0 + y1 <= 1.5 is y0 + y1 == 1 at integer points only
    spec = cl.ILP.from_matrices(3, A_ub=[[1, 1, 0], [-1, -1, 0]], b_ub=[1.5, -0.5])
    assert analyze(spec).dim == 3
    exact = analyze(spec, exact=True)
    assert exact.dim == 2
    assert_same_span(exact.normals, [[1, 1, 0]])


def test_implicit_bound_makes_a_fixed_output():
    # y0 + y1 >= 2 forces both to 1; y2 is free
    hull = analyze(cl.ILP.from_matrices(3, A_ub=[[-1, -1, 0]], b_ub=[-2]))
    assert hull.fixed.tolist() == [0, 1]
    assert np.allclose(hull.point[:2], 1.0)


def test_badly_scaled_rows_are_handled():
    scale = np.array([[1e-6], [1e6]])
    A = scale * np.array([[1.0, 1, 1, 0], [-1, -1, -1, 0]])
    hull = analyze(cl.ILP.from_matrices(4, A_ub=A, b_ub=scale.ravel() * [2, -2]))
    assert_same_span(hull.normals, [[1, 1, 1, 0]])


def test_rows_of_a_million_build_the_layer():
    """HiGHS stopped at 'Unknown' on the LP that looks for a slack integer point of a
    row of 1e6 (3-9% of such feasible specs): a SolverError, and no layer could be built."""
    spec = cl.ILP(shape=[2], constraints=[
        cl.Constraint(coefs=[1, 1], sense="==", rhs=1),
        cl.Constraint(coefs=[1_000_001, 1_000_000], sense="<=", rhs=1_000_000)])
    hull = analyze(spec)
    assert hull.dim == 0 and np.allclose(hull.point, [0, 1])
    assert cl.ComboLayer(spec).eval()(torch.tensor([[1.0, 0.0]])).tolist() == [[0.0, 1.0]]


def test_offsets_and_fixed_values_are_those_of_the_solutions_beside_a_big_m_row(
        tmp_path, capsys):
    """sum(y) == 2 and 2e6 + 2 <= 1000002 (y0 + y2) + 1000000 y1 <= 2e6 + 3: every
    solution has y1 = 1 and y0 + y2 = 1, but the relaxation lets y0 + y2 reach 1.5 and
    its point read y1 = 0.66; the <= row, met 1 below its bound, was said to hold with
    equality."""
    rows = [[1000002, 1000000, 1000002]] * 2
    spec = cl.ILP(shape=[3], constraints=[
        cl.Constraint(coefs=[1, 1, 1], sense="==", rhs=2),
        cl.Constraint(coefs=rows[0], sense="<=", rhs=2000003),
        cl.Constraint(coefs=rows[1], sense=">=", rhs=2000002)])
    solutions = np.array([[1.0, 1, 0], [0, 1, 1]])
    for exact in (False, True):
        hull = analyze(spec, exact=exact)
        assert hull.dim == 1 and hull.fixed.tolist() == [1]
        np.testing.assert_allclose(solutions @ hull.normals.T, [hull.offsets] * 2, atol=1e-9)
        assert hull.point[1] == pytest.approx(1.0)
    path = tmp_path / "big_m.json"
    path.write_text(spec.model_dump_json())
    assert cli_main(["analyze", str(path)]) == 0
    out = capsys.readouterr().out
    assert "fixed outputs: y[1] = 1\n" in out and "y[0] + y[2] = 1\n" in out
    assert "constraints[2] (>= 2000002) holds with equality" in out
    assert "constraints[1]" not in out


def test_exact_mode_on_an_unbounded_set_says_so():
    # it said "HiGHS: the problem is unbounded for these costs", costs the user never gave
    spec = cl.ILP(shape=[3], integrality="integer", upper=None,
                  constraints=[cl.Constraint(coefs=[1, -1, 0], sense="==", rhs=0)])
    assert analyze(spec).dim == 2
    with pytest.raises(cl.SolverError, match="exact mode probes .* unbounded: give its "
                                             "integer variables finite bounds, or use LP mode"):
        analyze(spec, exact=True)


def test_infeasible_relaxation_raises():
    spec = cl.ILP.from_matrices(2, A_ub=[[1, 1]], b_ub=[-1])
    with pytest.raises(cl.InfeasibleError, match="infeasible"):
        analyze(spec)
    # presolve leaves this one to the interior-point method, which stops at 'Unknown'
    hidden = cl.ILP.from_matrices(2, A_ub=[[-1, 1], [1, -1], [-3, -3]], b_ub=[-1, 1, -5])
    with pytest.raises(cl.InfeasibleError, match="infeasible"):
        analyze(hidden)


# -- the result object ----------------------------------------------------------


def test_results_are_cached_per_spec():
    assert analyze(P.TopK(n=7, k=2)) is analyze(P.TopK(n=7, k=2))
    assert analyze(P.TopK(n=7, k=2)) is not analyze(P.TopK(n=7, k=3))


def test_project_shapes_dtypes_and_gradients():
    hull = analyze(P.Matching(rows=3, cols=3))
    w = torch.randn(4, 3, 3, dtype=torch.float32)
    out = hull.project(w)
    assert out.shape == w.shape and out.dtype == torch.float32
    assert torch.allclose(out.reshape(4, 9), hull.project(w.reshape(4, 9)))
    w64 = torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(hull.project, (w64,))
    with pytest.raises(ValueError, match=r"trailing shape \(3, 3\) or \(9,\)"):
        hull.project(torch.zeros(2, 4))


def test_project_takes_integer_costs_in_floating_point():
    hull = analyze(P.Matching(rows=2, cols=2))
    w = [[1, 2], [3, 5]]
    expected = hull.project(torch.tensor(w, dtype=torch.float64))
    assert torch.allclose(expected, torch.tensor([[0.25, -0.25], [-0.25, 0.25]],
                                                 dtype=torch.float64))
    from_numpy = hull.project(np.array(w))
    assert from_numpy.dtype == torch.float64 and torch.equal(from_numpy, expected)
    from_torch = hull.project(torch.tensor(w))
    assert from_torch.dtype == torch.get_default_dtype()
    assert torch.allclose(from_torch, expected.to(from_torch.dtype))
    with pytest.raises(TypeError, match="expects floating-point costs, got torch.int64"):
        hull.transform()(torch.tensor(w))


def test_layer_auto_projection_removes_invariant_gradient():
    layer = cl.ComboLayer(P.TopK(n=6, k=2))  # projection="auto" is the default
    w = torch.randn(3, 6, requires_grad=True)
    y = layer(w)
    assert torch.equal(y.sum(-1), torch.full((3,), 2.0))
    (y * torch.randn(3, 6)).sum().backward()
    assert torch.allclose(w.grad.sum(-1), torch.zeros(3), atol=1e-6)


def test_layer_default_auto_on_ilp_with_auxiliaries():
    spec = P.TSP(num_nodes=5)
    layer = cl.ComboLayer(spec)  # projection="auto"
    w = torch.randn(2, 5, 5, requires_grad=True)
    y = layer(w)
    assert torch.equal(y, cl.make_solver(spec, "highs").solve(w.detach()))
    (y * torch.randn(2, 5, 5)).sum().backward()
    normals = torch.tensor(analyze(spec).normals, dtype=torch.float32)
    assert torch.allclose(w.grad.reshape(2, 25) @ normals.T, torch.zeros(2, 20), atol=1e-5)


def test_layer_plane_projection_on_ilp():
    spec = cl.ILP.from_matrices(4, A_ub=[[1, 1, 1, 0], [-1, -1, -1, 0]], b_ub=[2, -2])
    layer = cl.ComboLayer(spec, projection="plane")
    w = torch.randn(5, 4)
    assert torch.equal(layer(w), cl.make_solver(spec, "highs").solve(w))


def test_cli_prints_dimension_equations_fixed_and_auto(tmp_path, capsys):
    path = tmp_path / "topk.json"
    path.write_text(P.TopK(n=10, k=3).model_dump_json())
    assert cli_main(["analyze", str(path)]) == 0
    out = capsys.readouterr().out
    assert "affine hull of dimension 9" in out
    assert "y[0] + ... + y[9] = 3" in out
    assert "fixed outputs: none" in out
    assert '"std"' in out


def test_cli_names_multi_index_outputs_and_fixed_values(tmp_path, capsys):
    path = tmp_path / "tsp.json"
    path.write_text(json.dumps(json.loads(P.TSP(num_nodes=5).model_dump_json())))
    assert cli_main(["analyze", str(path), "--exact"]) == 0
    out = capsys.readouterr().out
    assert "affine hull of dimension 5" in out
    assert "y[1,3] = y[3,1]" in out
    assert "y[0,0] = 0" in out


# -- properties on random small ILPs ----------------------------------------------


@st.composite
def small_ilps(draw):
    """A feasible random binary ILP with 3-6 outputs and up to 2 auxiliaries."""
    n = draw(st.integers(3, 6))
    aux = draw(st.integers(0, 2))
    total = n + aux
    point = np.array(draw(st.lists(st.integers(0, 1), min_size=total, max_size=total)), float)
    coefs = st.lists(st.integers(-2, 2), min_size=total, max_size=total)
    A_ub = np.array(draw(st.lists(coefs, min_size=0, max_size=3)), float).reshape(-1, total)
    A_eq = np.array(draw(st.lists(coefs, min_size=0, max_size=2)), float).reshape(-1, total)
    slack = np.array(draw(st.lists(st.integers(0, 1), min_size=len(A_ub), max_size=len(A_ub))))
    return cl.ILP.from_matrices(
        n, A_ub=sp.csr_matrix(A_ub), b_ub=A_ub @ point + slack,
        A_eq=sp.csr_matrix(A_eq), b_eq=A_eq @ point, num_aux=aux,
    )


@settings(max_examples=25, deadline=None)
@given(spec=small_ilps(), seed=st.integers(0, 2**16))
def test_random_ilp_hulls(spec, seed):
    solutions = feasible_outputs(spec)
    lp, exact = analyze(spec), analyze(spec, exact=True)
    # LP mode is sound: every integer solution satisfies every equation
    assert np.allclose(solutions @ lp.normals.T, lp.offsets, atol=1e-7)
    # exact mode is the affine hull of the solution set
    assert_same_span(exact.normals, hull_normals(solutions))
    assert np.allclose(solutions @ exact.normals.T, exact.offsets, atol=1e-7)
    assert set(lp.fixed.tolist()) <= set(exact.fixed.tolist())

    rng = np.random.default_rng(seed)
    solver = cl.make_solver(spec, "highs")
    w = rng.normal(size=(4, spec.num_outputs))
    for hull in (lp, exact):
        shifted = w + rng.normal(scale=5.0, size=(4, len(hull.normals))) @ hull.normals
        y, y_shifted = solver.solve(w), solver.solve(shifted)
        # same optimal value under w, and the same solution (w has no ties a.s.)
        assert np.allclose((y * w).sum(-1), (y_shifted * w).sum(-1))
        assert np.array_equal(y, y_shifted)
        projected = hull.project(torch.from_numpy(w))
        assert torch.allclose(hull.project(projected), projected, atol=1e-12)
        assert np.array_equal(solver.solve(projected.numpy()), y)


@pytest.mark.parametrize("coefs", [[1e7, 1e7, 1.0], [1e9, 1e9, 1.0], [1.0, 1.0, 1e-7]],
                         ids=["big-M 1e7", "big-M 1e9", "tiny 1e-7"])
def test_a_row_whose_slack_is_below_the_lp_s_resolution_is_never_an_equation(coefs):
    """x0 = x1 = 1 is forced and x2 is free, but the row's slack from x2 is below
    SLACK_TOL of its norm: LP mode must not call it tight (x2 would look fixed, and the
    layer's projection would change the solution), exact mode must find x2 free."""
    spec = cl.ILP(shape=[3], constraints=[
        cl.Constraint(coefs=coefs, sense=">=", rhs=coefs[0] + coefs[1])])
    outputs = feasible_outputs(spec)
    assert outputs.tolist() == [[1, 1, 0], [1, 1, 1]]
    lp, exact = cl.analyze(spec), cl.analyze(spec, exact=True)
    assert 2 not in lp.fixed.tolist() and exact.fixed.tolist() == [0, 1] and exact.dim == 1
    for hull in (lp, exact):  # every equation holds for every solution
        np.testing.assert_allclose(outputs @ hull.normals.T, np.tile(hull.offsets, (2, 1)),
                                   atol=1e-9)
    w = torch.tensor([0.0, 0.0, -1.0])
    assert cl.ComboLayer(spec)(w).tolist() == [1.0, 1.0, 1.0]


def assert_hull_of(spec, outputs):
    """LP mode is sound on ``outputs`` (every feasible output), exact mode is their hull,
    and neither projection changes the solver's answer."""
    lp, exact = cl.analyze(spec), cl.analyze(spec, exact=True)
    for hull in (lp, exact):
        np.testing.assert_allclose(outputs @ hull.normals.T,
                                   np.tile(hull.offsets, (len(outputs), 1)), atol=1e-7)
    assert_same_span(exact.normals, hull_normals(outputs))
    assert set(lp.fixed.tolist()) <= set(exact.fixed.tolist())
    rng = np.random.default_rng(0)
    solver = cl.make_solver(spec, "highs")
    w = rng.normal(size=(8, spec.num_outputs))
    y = solver.solve(w)
    np.testing.assert_array_equal(y, outputs[np.argmin(w @ outputs.T, axis=1)])
    for hull in (lp, exact):
        np.testing.assert_array_equal(solver.solve(hull.project(torch.from_numpy(w)).numpy()), y)


@pytest.mark.parametrize("big, close", [(10_000_000, 10_000_001), (0.5, 0.5000001)])
def test_two_close_coefficients_are_not_an_equation(big, close):
    """Pick one of two: y0 + y1 == 1 and ``big y0 + close y1 <= close``, slack by
    ``close - big`` at y = (1, 0): both points are solutions, and the layer's default
    projection must not make y = (0, 1) the answer for costs that prefer (1, 0)."""
    spec = cl.ILP(shape=[2], constraints=[
        cl.Constraint(coefs=[1, 1], sense="==", rhs=1),
        cl.Constraint(coefs=[big, close], sense="<=", rhs=close)])
    outputs = feasible_outputs(spec)
    assert outputs.tolist() == [[0, 1], [1, 0]]
    assert cl.analyze(spec).dim == cl.analyze(spec, exact=True).dim == 1
    assert cl.analyze(spec).fixed.tolist() == []
    assert_hull_of(spec, outputs)
    w = torch.tensor([0.0, 1.0])
    assert cl.ComboLayer(spec)(w).tolist() == cl.make_solver(spec).solve(w).tolist() == [1, 0]


@pytest.mark.parametrize("eps", [1e-7, 3e-8, 1e-8, 1e-9])
@pytest.mark.parametrize("seed", range(4))
def test_random_rows_with_coefficients_c_and_c_times_1_plus_eps(eps, seed):
    """y_i + y_j == 1 and a row ``c y_i + c (1 + eps) y_j`` tight at one of the two and
    slack by ``c eps`` at the other, for c from 1e-2 to 1e8, beside a random knapsack
    row: the analysis agrees with brute force and the projections keep every answer."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 6))
    i, j = rng.choice(n, size=2, replace=False)
    c = 10.0 ** rng.uniform(-2, 8)
    one, pair = np.zeros(n), np.zeros(n)
    one[[i, j]] = 1.0
    pair[i], pair[j] = c, c * (1 + eps)
    tight_at_j = bool(rng.integers(2))
    spec = cl.ILP(shape=[n], constraints=[
        cl.Constraint(coefs=one.tolist(), sense="==", rhs=1),
        cl.Constraint(coefs=pair.tolist(), sense="<=" if tight_at_j else ">=",
                      rhs=pair[j] if tight_at_j else pair[i]),
        cl.Constraint(coefs=rng.integers(0, 4, size=n).tolist(), sense="<=",
                      rhs=int(rng.integers(2, 6)))])
    outputs = feasible_outputs(spec)
    assert {tuple(row[[i, j]]) for row in outputs} == {(0, 1), (1, 0)}
    assert_hull_of(spec, outputs)


def test_a_slack_that_cancels_across_three_terms_is_not_an_equation():
    """No two of ``3 y0 + y1 + 1.9999999 y2 <= 3``'s magnitudes are close, but with
    y1 == y2 == 1 - y0 its slack is 0 at y = (1, 0, 0) and 1e-7 at (0, 1, 1)."""
    spec = cl.ILP(shape=[3], constraints=[
        cl.Constraint(coefs=[1, 1, 0], sense="==", rhs=1),
        cl.Constraint(coefs=[0, 1, -1], sense="==", rhs=0),
        cl.Constraint(coefs=[3, 1, 1.9999999], sense="<=", rhs=3)])
    outputs = feasible_outputs(spec)
    assert outputs.tolist() == [[0, 1, 1], [1, 0, 0]]
    assert cl.analyze(spec).dim == cl.analyze(spec, exact=True).dim == 1
    assert_hull_of(spec, outputs)


def test_exact_mode_checks_the_lp_s_equations():
    """Handed an LP hull with a false equation (y0 == 0 where y0 is free), exact mode
    leaves it out and finds the hull of the solutions."""
    from combolayer.analysis.hull import _exact_hull, _hull

    spec = P.TopK(n=4, k=2)
    false = np.array([[1.0, 0, 0, 0], [0.5, 0.5, 0.5, 0.5]])
    false[1] -= false[1] @ false[0] * false[0]
    false[1] /= np.linalg.norm(false[1])
    relaxed = _hull(false, np.array([0.0, 1, 1, 0]), (4,), exact=False)
    exact = _exact_hull(spec, relaxed)
    assert_same_span(exact.normals, [[1, 1, 1, 1]])
    assert exact.fixed.tolist() == []


def fractional_vertex_cancellation() -> cl.ILP:
    """Two feasible points, (0, 1, 0, 0, 0, 0) and (1, 0, 1, 1, 1, 1); the last row's
    slack is 1e-7 at the second, a cancellation across five terms, and the LP point
    that maximises it is fractional (y3 = 0.5)."""
    C = cl.Constraint
    return cl.ILP(shape=[6], constraints=[
        C(coefs={0: 1, 1: 1}, sense="==", rhs=1), C(coefs={2: 1, 0: -1}, sense="==", rhs=0),
        C(coefs={4: 1, 3: -1}, sense="==", rhs=0), C(coefs={5: 1, 3: -1}, sense="==", rhs=0),
        C(coefs={3: 2, 0: -1}, sense=">=", rhs=0), C(coefs={3: 1, 0: -1}, sense="<=", rhs=0),
        C(coefs={0: 0.5, 1: 0.7, 2: 0.1999998, 3: 0.3000001, 4: -0.15, 5: -0.15},
          sense="<=", rhs=0.7)])


def test_a_slack_from_a_fractional_vertex_s_cancellation_is_not_an_equation():
    """The last row's slack is 1e-7 at (1, 0, 1, 1, 1, 1), a cancellation across five
    terms; the LP point that maximises it is fractional (y3 = 0.5) and rounds to a point
    that breaks ``2 y3 >= y0``: the integer points (the MIP) show the slack."""
    spec = fractional_vertex_cancellation()
    outputs = feasible_outputs(spec)
    assert outputs.tolist() == [[0, 1, 0, 0, 0, 0], [1, 0, 1, 1, 1, 1]]
    assert_hull_of(spec, outputs)
    w = torch.tensor([0.1, 0.0, 0.2, -0.1, -0.2, 0.1])
    assert cl.ComboLayer(spec)(w[None]).tolist() == [cl.make_solver(spec).solve(w).tolist()]


@pytest.mark.parametrize("scale", [1e6, 1e7, 1e13])
def test_exact_mode_tells_integer_points_far_from_the_origin_apart(scale):
    """Solutions 1e6 from the origin that differ by one unit are not an equation (a
    tolerance relative to their distance took the unit for rounding)."""
    C = cl.Constraint
    spec = cl.ILP(shape=[2], integrality="integer", lower=0, upper=scale, constraints=[
        C(coefs=[1, -1], sense="<=", rhs=0), C(coefs=[-1, 1], sense="<=", rhs=1)])
    hull = cl.analyze(spec, exact=True)
    assert hull.dim == 2 and hull.normals.shape == (0, 2)
    w = torch.tensor([1.0, -1.0]) + 1e-3
    layer = cl.ComboLayer(spec, projection="auto-exact")
    assert layer(w[None]).tolist() == [cl.make_solver(spec).solve(w).tolist()]
    # with an auxiliary: y0 = M z, y1 = M z + u, u <= z, z and u binary
    spec = cl.ILP(shape=[2], num_aux=2, integrality=["integer", "integer", "binary", "binary"],
                  lower=0, upper=[scale + 1, scale + 1, 1, 1], constraints=[
                      C(coefs={0: 1, 2: -scale}, sense="==", rhs=0),
                      C(coefs={1: 1, 2: -scale, 3: -1}, sense="==", rhs=0),
                      C(coefs={3: 1, 2: -1}, sense="<=", rhs=0)])
    assert cl.analyze(spec, exact=True).dim == 2


def test_exact_mode_tells_outputs_1e_7_apart_apart():
    """y = 1e-7 z, z binary: no equation holds on y (a tolerance of 1e-6 made y == 0 one,
    and the auto-exact layer answered zeros)."""
    C = cl.Constraint
    spec = cl.ILP(shape=[2], num_aux=2, integrality=["continuous"] * 2 + ["binary"] * 2,
                  lower=[-1, -1, 0, 0], upper=[1, 1, 1, 1],
                  constraints=[C(coefs={0: 1, 2: -1e-7}, sense="==", rhs=0),
                               C(coefs={1: 1, 3: -1e-7}, sense="==", rhs=0)])
    assert cl.analyze(spec, exact=True).dim == 2
    w = torch.tensor([[-1.0, 1.0]])
    layer = cl.ComboLayer(spec, projection="auto-exact")
    assert layer(w).tolist() == [cl.make_solver(spec).solve(w[0].numpy()).tolist()]


def test_the_integer_check_of_tight_rows_stops_at_a_problem_with_no_integer_point(
        monkeypatch):
    """A market-split problem: LP-feasible, no 0/1 point, six rows tight on the
    relaxation. The first MIP that finds no point ends the checks (each row's MIP ran to
    its time limit: 56 s)."""
    from combolayer.analysis import hull as module

    mips = []
    solution = module._solution

    def counted(model, cost):
        mips.append(bool(model.getLp().integrality_))
        return solution(model, cost)

    monkeypatch.setattr(module, "_solution", counted)
    monkeypatch.setattr(module, "SLACK_MIP_SECONDS", 0.5)
    C = cl.Constraint
    A = np.random.default_rng(1).integers(0, 100, (4, 30))
    rows = [C(coefs=dict(enumerate(map(int, a))), sense="==", rhs=int(a.sum() // 2)) for a in A]
    rows += [C(coefs={0: 1, 1: 1}, sense="<=", rhs=1), C(coefs={0: 1, 1: 1}, sense=">=", rhs=1)]
    cl.analyze(cl.ILP(shape=[30], integrality="binary", constraints=rows))
    assert sum(mips) <= 1


def test_an_equation_written_as_two_inequalities_is_one_without_a_mip(monkeypatch):
    """Market-split rows as pairs of inequalities, with a planted 0/1 point: equations at
    every point, whatever a MIP would take (when the MIPs' budget ran out they were left
    out: the hull depended on the machine's speed)."""
    from combolayer.analysis import hull as module

    monkeypatch.setattr(module, "SLACK_MIP_SECONDS", 0.0)
    module._analyze.cache_clear()
    rng = np.random.default_rng(1)
    A = rng.integers(0, 100, (3, 30))
    b = A @ rng.integers(0, 2, 30)
    rows = []
    for a, rhs in zip(A, b):
        coefs = {j: int(v) for j, v in enumerate(a) if v}
        rows += [cl.Constraint(coefs=coefs, sense="<=", rhs=int(rhs)),
                 cl.Constraint(coefs=coefs, sense=">=", rhs=int(rhs))]
    assert cl.analyze(cl.ILP(shape=[30], constraints=rows)).dim == 27
    module._analyze.cache_clear()


def test_a_tight_row_the_integer_check_leaves_unchecked_is_no_equation(monkeypatch):
    """Without time for the MIP (its budget spent), the fractional-vertex row stays out
    of the equations: kept on the LP's word, it changed the layer's solution."""
    from combolayer.analysis import hull as module

    monkeypatch.setattr(module, "SLACK_MIP_SECONDS", 0.0)
    module._analyze.cache_clear()  # the same spec analysed with time for the MIP: cached
    spec = fractional_vertex_cancellation()
    outputs = feasible_outputs(spec)
    hull = cl.analyze(spec)
    np.testing.assert_allclose(outputs @ hull.normals.T,
                               np.tile(hull.offsets, (len(outputs), 1)), atol=1e-7)
    module._analyze.cache_clear()  # not this hull for the tests after


def test_a_hull_s_arrays_are_read_only():
    hull = cl.analyze(P.ShortestPath.grid(3, 3))
    for array in (hull.normals, hull.offsets, hull.fixed):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 4


def test_a_cancellation_among_large_values_is_not_an_equation():
    """The first row is slack by 1e-7 at (0, 1001, 1001), among terms of about 6000: a
    tolerance relative to the terms at the LP's point took it for an equation, and the
    projection zeroed every cost."""
    eps, C = 1e-7, cl.Constraint
    spec = cl.ILP(shape=[3], integrality="integer", lower=[0, 1000, 1000],
                  upper=[1, 1001, 1001], constraints=[
                      C(coefs={0: 3, 1: 1, 2: 2 - eps}, sense="<=", rhs=3003 - 1000 * eps),
                      C(coefs={0: 1, 1: 1}, sense="==", rhs=1001),
                      C(coefs={0: 1, 2: 1}, sense="==", rhs=1001)])
    outputs = feasible_outputs(spec)
    assert outputs.tolist() == [[0, 1001, 1001], [1, 1000, 1000]]
    assert_hull_of(spec, outputs)


def test_a_rounded_lp_point_without_slack_proves_no_equation():
    """The LP's largest slack is at (0.5, ..., 0.5), which rounds to a feasible point
    without slack: that proved nothing, but the row became an equation and the
    projection made every point cost the same. At most one of a, b, c; the last row is
    -1e-7 (a + b + c) <= 0 in disguise, slack at three of the four points."""
    e, C = 1e-7, cl.Constraint
    rows = [C(coefs={k + i: 1, i: -1}, sense="==", rhs=0) for i in range(3) for k in (3, 6)]
    rows += [C(coefs={i: 1, j: 1}, sense="<=", rhs=1) for i, j in ((0, 1), (1, 2), (0, 2))]
    rows += [C(coefs={**{i: 3 for i in range(3)}, **{3 + i: -2 for i in range(3)},
                      **{6 + i: -(1 + e) for i in range(3)}}, sense="<=", rhs=0)]
    spec = cl.ILP(shape=[9], integrality="binary", constraints=rows)
    assert_hull_of(spec, feasible_outputs(spec))


def test_a_mip_stopped_short_proves_no_equation():
    """A market split with a planted point p, active where y0 == 0, where the last row
    is slack by 1e-7: the MIP stops at its node limit with an incumbent without slack,
    which proved nothing, and y0 == 1 was an equation that p breaks."""
    rng = np.random.default_rng(0)
    A, u = rng.integers(0, 100, (4, 30)), rng.integers(0, 2, 30)
    b, e, C = A @ u, 1e-7, cl.Constraint
    rows = [C(coefs={0: 1, 1: 1}, sense="==", rhs=1), C(coefs={0: 1, 2: 1}, sense="==", rhs=1),
            C(coefs={0: 3, 1: 1, 2: 2 - e}, sense="<=", rhs=3)]
    rows += [C(coefs={0: int(bi), **{3 + j: int(aj) for j, aj in enumerate(a)}}, sense="==",
               rhs=int(bi)) for a, bi in zip(A, b)]
    hull = cl.analyze(cl.ILP(shape=[33], integrality="binary", constraints=rows))
    p = np.concatenate([[0, 1, 1], u]).astype(float)
    np.testing.assert_allclose(hull.normals @ p, hull.offsets, atol=1e-7)
