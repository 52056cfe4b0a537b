"""``Matching`` and its variants (rows, columns or both matched in full, or each at most
once with a bounded number of pairs): the named solvers against an enumeration of
every matching and against HiGHS, the ILP against the same enumeration, the hull,
the errors and the round trips."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from bruteforce import feasible_points

import combolayer as cl
from combolayer.backends import capable_backends
from combolayer.problems import Matching

#: The named solvers of a matching, and the generic backends that solve its ILP.
NAMED = ("scipy", "networkx")
GENERIC = ("highs", "scip", "gurobi", "cvxpy", "enumerate")


def matchings(spec: Matching) -> np.ndarray:
    """Every feasible ``(rows, cols)`` solution, from the definition: each row takes
    one column or none, no column twice, then the cover and the pair bounds."""
    found = []
    for choice in itertools.product([None, *range(spec.cols)], repeat=spec.rows):
        taken = [j for j in choice if j is not None]
        if len(set(taken)) < len(taken):
            continue
        rows_full = None not in choice
        cols_full = len(taken) == spec.cols
        if spec.cover in ("rows", "both") and not rows_full:
            continue
        if spec.cover in ("cols", "both") and not cols_full:
            continue
        if len(taken) < spec.min_pairs or (spec.max_pairs is not None
                                           and len(taken) > spec.max_pairs):
            continue
        y = np.zeros(spec.cost_shape)
        for i, j in enumerate(choice):
            if j is not None:
                y[i, j] = 1.0
        found.append(y)
    return np.array(found)


def best(spec: Matching, costs: np.ndarray) -> np.ndarray:
    """The optimal value of each instance of a ``(B, rows, cols)`` batch, by enumeration."""
    values = np.einsum("kij,bij->bk", matchings(spec), costs)
    return values.min(1) if spec.sense == "min" else values.max(1)


def _variants():
    """(id, spec): every cover, and k = 0..min(rows, cols) pairs at most and exactly."""
    for rows, cols in ((3, 4), (4, 3), (3, 3)):
        for k in range(min(rows, cols) + 1):
            yield f"{rows}x{cols}-at_most_{k}", Matching(rows, cols, cover="none", max_pairs=k)
        yield f"{rows}x{cols}-exactly_2", Matching(rows, cols, cover="none", min_pairs=2,
                                                   max_pairs=2)
        yield f"{rows}x{cols}-at_least_2", Matching(rows, cols, cover="none", min_pairs=2)
        yield f"{rows}x{cols}-any", Matching(rows, cols, cover="none")
    yield "rows", Matching(3, 4)
    yield "rows-square", Matching(3, 3)
    yield "cols", Matching(4, 3, cover="cols")
    yield "both", Matching(3, 3, cover="both")
    yield "rows-bound-implied", Matching(2, 4, max_pairs=2)


VARIANTS = dict(_variants())


def _costs(spec: Matching, seed: int, batch: int = 6) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(batch, *spec.cost_shape))  # signed


@pytest.mark.parametrize("sense", ["min", "max"])
@pytest.mark.parametrize("case", list(VARIANTS))
def test_named_solvers_equal_enumeration_and_highs(case, sense):
    spec = VARIANTS[case].model_copy(update={"sense": sense})
    costs = _costs(spec, seed=list(VARIANTS).index(case))
    solutions = matchings(spec).reshape(-1, spec.num_outputs)
    expected = best(spec, costs)
    highs = cl.make_solver(spec, "highs").solve(costs)
    np.testing.assert_allclose((costs * highs).sum((1, 2)), expected, atol=1e-9)
    for backend in NAMED:
        y = cl.make_solver(spec, backend).solve(costs)
        assert y.shape == costs.shape
        np.testing.assert_allclose((costs * y).sum((1, 2)), expected, atol=1e-9)
        for instance in y.reshape(len(y), -1):  # a matching of the variant, not only its value
            assert (solutions == instance).all(1).any(), (backend, instance)


def test_auto_solves_every_variant_with_the_assignment_kernel():
    for spec in VARIANTS.values():
        assert cl.make_solver(spec).backend == "scipy", spec.label


@pytest.mark.parametrize("case", ["3x4-at_most_2", "4x3-exactly_2", "3x3-at_least_2", "cols",
                                  "rows-square"])
def test_the_ilp_is_the_problem_and_the_generic_backends_solve_it(case):
    spec = VARIANTS[case]
    ilp = spec.to_ilp()
    points = np.unique(feasible_points(ilp)[:, : spec.num_outputs], axis=0)
    truth = np.unique(matchings(spec).reshape(-1, spec.num_outputs), axis=0)
    np.testing.assert_array_equal(points, truth)
    costs = _costs(spec, seed=7)
    expected = best(spec, costs)
    generic = [name for name in GENERIC if name in capable_backends(spec)]
    assert "highs" in generic and "enumerate" in generic  # core dependencies
    for backend in generic:
        for solved in (spec, ilp):
            y = cl.make_solver(solved, backend).solve(costs)
            np.testing.assert_allclose((costs * y).sum((1, 2)), expected, atol=1e-6,
                                       err_msg=f"{backend} on {type(solved).__name__}")


def test_default_matching_keeps_its_meaning_and_its_ilp():
    assert Matching(3, 3) == Matching(rows=3, cols=3, sense="min", cover="rows", min_pairs=0,
                                      max_pairs=None)
    assert Matching(3, 3, "max").sense == "max"
    A_ub, _, A_eq, b_eq = Matching(3, 3).to_ilp().to_matrices()
    assert A_ub.shape[0] == 0 and A_eq.shape[0] == 6 and b_eq.tolist() == [1.0] * 6
    A_ub, b_ub, A_eq, _ = Matching(2, 3).to_ilp().to_matrices()
    assert (A_ub.shape[0], A_eq.shape[0], b_ub.tolist()) == (3, 2, [1.0] * 3)
    assert Matching(2, 3).label == "Matching(rows=2, cols=3)"
    assert Matching(2, 3, cover="none", max_pairs=1).label == (
        "Matching(rows=2, cols=3, cover='none', max_pairs=1)")


@pytest.mark.parametrize("case", list(VARIANTS))
def test_json_and_yaml_round_trip(case):
    spec = VARIANTS[case]
    assert cl.load_spec(spec.model_dump_json()) == spec
    assert cl.load_spec(yaml.safe_dump(spec.model_dump(mode="json"))) == spec
    assert cl.load_spec(json.loads(spec.model_dump_json())) == spec


def test_analyze_finds_the_hull_of_each_variant():
    capped = cl.analyze(Matching(3, 4, cover="none", max_pairs=2))
    assert capped.dim == 12  # 0 and every single pair are feasible: the whole space
    exactly = cl.analyze(Matching(3, 4, cover="none", min_pairs=2, max_pairs=2))
    assert exactly.dim == 11
    normal = exactly.normals[0] / exactly.normals[0][0]
    np.testing.assert_allclose(normal, np.ones(12), atol=1e-9)  # sum y = 2
    np.testing.assert_allclose(exactly.offsets[0] / exactly.normals[0][0], 2.0, atol=1e-9)
    assert cl.analyze(Matching(3, 4, cover="none", max_pairs=0)).dim == 0
    assert cl.analyze(Matching(3, 3)).dim == 4  # (n - 1)^2: the Birkhoff polytope
    # one equation per matched row (or column): 12 - 3
    assert cl.analyze(Matching(4, 3, cover="cols")).dim == cl.analyze(Matching(3, 4)).dim == 9


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"rows": 4, "cols": 3}, "cols=3 < rows=4: every row needs its own column"),
        ({"rows": 3, "cols": 4, "cover": "cols"}, "rows=3 < cols=4: every column needs"),
        ({"rows": 3, "cols": 4, "cover": "both"}, "cover='both' .* needs rows == cols"),
        ({"rows": 3, "cols": 4, "cover": "none", "max_pairs": 4},
         r"max_pairs=4 is outside min_pairs..min\(rows, cols\) = 0..3"),
        ({"rows": 3, "cols": 4, "cover": "none", "min_pairs": 2, "max_pairs": 1},
         "max_pairs=1 is outside min_pairs"),
        ({"rows": 3, "cols": 4, "cover": "none", "min_pairs": -1}, "min_pairs=-1 is outside"),
        ({"rows": 3, "cols": 4, "max_pairs": 2},
         "cover='rows' matches 3 pairs, but max_pairs=2 allows at most 2; use cover='none'"),
        ({"rows": 0, "cols": 4}, "rows and cols must be >= 1"),
        ({"rows": 3, "cols": 4, "cover": "some"}, "cover"),
    ],
)
def test_invalid_variants_raise_spec_error(fields, match):
    with pytest.raises(cl.SpecError, match=match):
        Matching(**fields)


def test_a_capped_matching_trains_in_a_layer():
    spec = Matching(3, 4, cover="none", max_pairs=2, sense="max")
    target = torch.zeros(3, 4)
    target[0, 1] = target[2, 3] = 1.0
    theta = torch.zeros(3, 4, requires_grad=True)
    layer = cl.ComboLayer(spec, method="blackbox")
    optimizer = torch.optim.SGD([theta], lr=0.5)
    for _ in range(20):
        loss = ((layer(theta) - target) ** 2).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert torch.equal(layer(theta.detach()), target)


def test_the_example_in_docs_problems_runs():
    page = (Path(__file__).resolve().parents[1] / "docs" / "problems.md").read_text()
    section = page.split("### Matching variants", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert "max_pairs=2" in block
    exec(compile(block, "docs/problems.md", "exec"), {})
