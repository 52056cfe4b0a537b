"""The affine hull of a spec with a known cost is that of its feasible solutions: the
known cost (an objective term) plays no part in `cl.analyze`, in either mode, nor in
the layer's ``"auto-exact"`` projection built on it. Checked against brute force."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch
from bruteforce import feasible_outputs, objective_values, optimum_full, random_known_ilp

import combolayer as cl
from combolayer.cli.main import main as cli_main

PICK_ONE = [cl.Constraint(coefs=[1, 1, 1], sense="==", rhs=1)]


def _span(rows: np.ndarray, n: int) -> np.ndarray:
    """The orthogonal projector onto the span of ``rows`` (``(n, n)``)."""
    rows = np.asarray(rows, dtype=float).reshape(-1, n)
    if not len(rows):
        return np.zeros((n, n))
    basis = scipy.linalg.orth(rows.T)
    return basis @ basis.T


def _brute_force_normals(spec: cl.ILP) -> np.ndarray:
    """Rows spanning the directions orthogonal to the affine hull of the feasible outputs."""
    points = feasible_outputs(spec)
    if len(points) == 1:
        return np.eye(points.shape[1])
    return scipy.linalg.null_space(points[1:] - points[0]).T


@pytest.mark.parametrize("sense", ["min", "max"])
def test_pick_one_of_three_with_a_known_cost_has_no_fixed_output(sense):
    """A known cost of 10 on y0 made every exact probe avoid (min) or take (max) y0,
    which then looked fixed."""
    spec = cl.ILP(shape=[3], known_cost=[10, 0, 0], constraints=PICK_ONE, sense=sense)
    hull = cl.analyze(spec, exact=True)
    assert hull.fixed.tolist() == [] and hull.dim == 2
    np.testing.assert_allclose(hull.projector(), np.full((3, 3), 1 / 3), atol=1e-12)


#: The layer may announce its projection's rule for a known cost (a UserWarning at
#: construction, combolayer.layer.projection); these tests check its answers.
quiet = pytest.mark.filterwarnings("ignore::UserWarning")


@quiet
def test_pick_one_of_three_layer_answers_the_optimum_under_auto_exact():
    spec = cl.ILP(shape=[3], known_cost=[10, 0, 0], constraints=PICK_ONE)
    layer = cl.ComboLayer(spec, projection="auto-exact")
    # w0 = -100 outweighs the known 10: y0 is the optimum
    assert layer(torch.tensor([-100.0, 0.0, 0.0])).tolist() == [1.0, 0.0, 0.0]
    assert layer(torch.tensor([-5.0, 0.0, 1.0])).tolist() == [0.0, 1.0, 0.0]


def test_cli_analyze_exact_prints_the_feasible_sets_hull(tmp_path, capsys):
    path = tmp_path / "pick_one.json"
    path.write_text(cl.ILP(shape=[3], known_cost=[10, 0, 0], constraints=PICK_ONE)
                    .model_dump_json())
    assert cli_main(["analyze", str(path), "--exact"]) == 0
    out = capsys.readouterr().out
    assert "affine hull of dimension 2 [integer solutions (exact, MIP)]" in out
    assert "fixed outputs: none" in out


def test_random_hulls_with_known_costs_equal_brute_force_and_ignore_the_known_cost():
    """40 random ILPs (min and max, known costs on outputs and auxiliaries): the exact
    hull spans the brute-force normals, and both modes equal the hull of the same spec
    without its known cost."""
    rng = np.random.default_rng(7)
    senses = set()
    for _ in range(40):
        spec = random_known_ilp(rng)
        plain = cl.ILP(**{**spec.model_dump(), "known_cost": None})
        n = spec.num_outputs
        exact = cl.analyze(spec, exact=True)
        np.testing.assert_allclose(_span(exact.normals, n),
                                   _span(_brute_force_normals(spec), n), atol=1e-8)
        for mode in (False, True):
            hull, ref = cl.analyze(spec, exact=mode), cl.analyze(plain, exact=mode)
            np.testing.assert_allclose(hull.projector(), ref.projector(), atol=1e-12)
            assert hull.fixed.tolist() == ref.fixed.tolist()
        senses.add(spec.sense)
    assert senses == {"min", "max"}


@quiet
def test_layer_auto_exact_with_known_costs_equals_brute_force():
    """60 random ILPs x 6 integer costs (ties included), min and max, known costs on the
    outputs and the auxiliaries: every answer of projection "auto-exact" is an optimal
    full point under <w, y> + <known_cost, x>; 0 of 360 wrong."""
    rng = np.random.default_rng(2)
    wrong = total = 0
    senses = set()
    for _ in range(60):
        spec = random_known_ilp(rng)
        costs = rng.integers(-3, 4, (6, spec.num_outputs)).astype(float)
        layer = cl.ComboLayer(spec, projection="auto-exact")
        y, aux = layer(torch.from_numpy(costs), return_aux=True)
        for i in range(len(costs)):
            best, points = optimum_full(spec, costs[i])
            x = np.concatenate([y[i].numpy(), aux[i].numpy()])
            value = objective_values(spec, costs[i], x[None])[0]
            wrong += not (np.isclose(value, best) and np.isclose(points, x).all(axis=1).any())
            total += 1
        senses.add(spec.sense)
    assert senses == {"min", "max"}
    assert (wrong, total) == (0, 360)

