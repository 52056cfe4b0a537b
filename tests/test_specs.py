import json
import time
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import combolayer as cl


def choose(n=5, k=2, **kw):
    return cl.ILP(shape=[n], constraints=[cl.Constraint(coefs=[1] * n, sense="==", rhs=k)], **kw)


def test_to_matrices_negates_ge_rows():
    spec = cl.ILP(
        shape=[3],
        constraints=[
            cl.Constraint(coefs={0: 1, 2: 2}, sense=">=", rhs=1),
            cl.Constraint(coefs=[1, 1, 1], sense="<=", rhs=2),
            cl.Constraint(coefs={1: 1}, sense="==", rhs=1),
        ],
    )
    A_ub, b_ub, A_eq, b_eq = spec.to_matrices()
    assert sp.issparse(A_ub) and A_ub.format == "csr"
    np.testing.assert_array_equal(A_ub.toarray(), [[-1, 0, -2], [1, 1, 1]])
    np.testing.assert_array_equal(b_ub, [-1, 2])
    np.testing.assert_array_equal(A_eq.toarray(), [[0, 1, 0]])
    np.testing.assert_array_equal(b_eq, [1])


def test_from_matrices_round_trips_through_to_matrices(rng):
    A_ub = rng.integers(-2, 3, (3, 6)).astype(float)
    A_eq = sp.csr_matrix(rng.integers(-2, 3, (2, 6)).astype(float))
    spec = cl.ILP.from_matrices(
        shape=(2, 2),
        A_ub=A_ub,
        b_ub=[1, 2, 3],
        A_eq=A_eq,
        b_eq=[0, 1],
        num_aux=2,
        integrality="integer",
        upper=[3] * 6,
        sense="max",
    )
    got = spec.to_matrices()
    np.testing.assert_array_equal(got[0].toarray(), A_ub)
    np.testing.assert_array_equal(got[1], [1, 2, 3])
    np.testing.assert_array_equal(got[2].toarray(), A_eq.toarray())
    assert spec.cost_shape == (2, 2) and spec.num_vars == 6 and spec.sense == "max"


def test_from_matrices_adds_a_csr_matrixs_duplicate_entries_as_scipy_does():
    """scipy reads duplicate entries of a row as their sum; the spec kept the last one,
    so the row [[2, 1]] became [[1, 1]] and the answer broke the real row."""
    A = sp.csr_matrix((np.ones(3), np.array([0, 0, 1]), np.array([0, 3])), shape=(1, 2))
    spec = cl.ILP.from_matrices(shape=2, A_ub=A, b_ub=[2], sense="max")
    assert spec.constraints[0].coefs == {0: 2.0, 1: 1.0}
    assert A.nnz == 3  # the caller's matrix is left as it was
    y = cl.make_solver(spec, "highs").solve(np.ones(2))
    assert y @ A.toarray()[0] <= 2 and y.sum() == 1


def test_from_matrices_checks_columns():
    with pytest.raises(cl.SpecError, match="A_ub has 3 columns, expected 4"):
        cl.ILP.from_matrices(shape=4, A_ub=np.ones((1, 3)), b_ub=[1])


@pytest.mark.parametrize("kwargs, match", [
    # was "b for A_ub has shape (1,), expected (2,)" for a b_ub never passed
    (dict(A_ub=np.ones((2, 3))), "A_ub was given without b_ub"),
    (dict(b_ub=np.ones(2)), "b_ub was given without A_ub"),  # was dropped silently
    (dict(A_eq=np.ones((2, 3)), b_eq=[1]), r"b_eq has shape \(1,\), expected \(2,\)"),
    (dict(A_ub=np.ones((1, 1, 3)), b_ub=[1]), r"A_ub must be 2-D .* got shape \(1, 1, 3\)"),
    # the imaginary parts were dropped with numpy's ComplexWarning only
    (dict(A_ub=[[1, 1j, 1]], b_ub=[1]), "A_ub and b_ub must be real"),
    (dict(known_cost=[0, 1j, 0]), "known_cost must be real"),
])
def test_from_matrices_names_a_malformed_argument(kwargs, match):
    with pytest.raises(cl.SpecError, match=match):
        cl.ILP.from_matrices(shape=3, **kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            dict(constraints=[cl.Constraint(coefs={7: 1.0}, sense="<=", rhs=1)]),
            r"constraints\[0\]\.coefs index 7 is out of range: expected 0 <= index < 3",
        ),
        (
            dict(constraints=[cl.Constraint(coefs=[1, 1], sense="<=", rhs=1)]),
            r"constraints\[0\]\.coefs has 2 entries but the ILP has 3 variables",
        ),
        (dict(lower=[0, 0]), "lower has 2 entries but the ILP has 3 variables"),
        (dict(integrality=["binary"] * 4), "integrality has 4 entries but the ILP has 3"),
        (dict(lower=[0, 2, 0], upper=[1, 1, 1]), r"lower\[1\] = 2.0 exceeds upper\[1\] = 1.0"),
        (dict(lower=float("nan")), r"lower\[0\] must be a number"),
        (dict(shape=[0]), "shape must be a non-empty list of positive sizes"),
        (dict(num_aux=-1), "num_aux must be >= 0"),
        (dict(sense="maximize"), "sense"),
        (dict(color="red"), "color: unknown key"),
    ],
)
def test_invalid_ilp_raises_spec_error(kwargs, match):
    base = dict(shape=[3])
    with pytest.raises(cl.SpecError, match=match):
        cl.ILP(**{**base, **kwargs})


def test_nan_in_constraint_data_is_a_spec_error():
    with pytest.raises(cl.SpecError, match=r"coefs\[1\] must be finite"):
        cl.ILP(shape=[2], constraints=[{"coefs": [1.0, float("nan")], "sense": "<=", "rhs": 1}])
    with pytest.raises(cl.SpecError, match="rhs must be finite"):
        cl.ILP(shape=[2], constraints=[{"coefs": [1.0, 1.0], "sense": "<=", "rhs": float("inf")}])


def test_spec_error_is_a_value_error():
    assert issubclass(cl.SpecError, ValueError) and issubclass(cl.SpecError, cl.ComboLayerError)


def test_json_and_yaml_round_trip(tmp_path):
    spec = choose(
        n=4, k=2, sense="max", integrality=["binary"] * 3 + ["integer"], upper=[1, 1, 1, 3]
    )
    assert cl.load_spec(spec.model_dump_json()) == spec
    assert cl.load_spec(yaml.safe_dump(spec.model_dump())) == spec
    assert cl.load_spec(json.loads(spec.model_dump_json())) == spec
    for suffix, text in (
        (".json", spec.model_dump_json()),
        (".yaml", yaml.safe_dump(spec.model_dump())),
    ):
        path = tmp_path / f"spec{suffix}"
        path.write_text(text)
        assert cl.load_spec(path) == spec
        assert cl.load_spec(str(path)) == spec


def test_upper_none_means_unbounded_and_round_trips():
    spec = cl.ILP(
        shape=[2],
        integrality="integer",
        upper=None,
        constraints=[cl.Constraint(coefs=[1, 1], sense="<=", rhs=3)],
    )
    assert np.isinf(spec.to_canonical().upper).all()
    assert cl.load_spec(spec.model_dump_json()) == spec
    # per variable too (a list holding None was refused, though the bounds read it)
    mixed = cl.ILP(shape=[2], integrality="integer", upper=[None, 5],
                   constraints=[cl.Constraint(coefs=[1, 1], sense="<=", rhs=7)])
    np.testing.assert_array_equal(mixed.to_canonical().upper, [np.inf, 5])
    assert cl.load_spec(mixed.model_dump_json()) == mixed


@pytest.mark.parametrize(
    "source, match",
    [
        ("kind: ilp\nshape: [3\n", "could not parse spec"),
        ("{not json", "could not parse spec"),
        ("- 1\n- 2\n", "must be a mapping, got list"),
        ("missing_file.yaml", "no file named 'missing_file.yaml'"),
        ({"kind": "hexagon"}, "does not match any of the expected tags"),
        ({"shape": [3]}, "kind"),
        (
            "kind: ilp\nshape: [3]\nconstraints: !!python/object/apply:os.system ['true']\n",
            "could not parse spec",
        ),
    ],
)
def test_malformed_input_raises_spec_error(source, match):
    with pytest.raises(cl.SpecError, match=match):
        cl.load_spec(source)


row = st.fixed_dictionaries(
    {
        "coefs": st.lists(st.integers(-3, 3), min_size=4, max_size=4),
        "sense": st.sampled_from(["<=", "==", ">="]),
        "rhs": st.integers(-4, 4),
    }
)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(row, max_size=4),
    sense=st.sampled_from(["min", "max"]),
    integrality=st.sampled_from(["binary", "integer", "continuous"]),
    num_aux=st.integers(0, 2),
)
def test_any_valid_spec_round_trips(rows, sense, integrality, num_aux):
    rows = [{**r, "coefs": r["coefs"] + [1] * num_aux} for r in rows]
    spec = cl.ILP(
        shape=[2, 2],
        num_aux=num_aux,
        sense=sense,
        integrality=integrality,
        upper=3,
        constraints=rows,
    )
    assert cl.load_spec(spec.model_dump_json()) == spec
    assert cl.load_spec(yaml.safe_dump(spec.model_dump())) == spec
    A_ub, b_ub, A_eq, b_eq = spec.to_matrices()
    assert A_ub.shape == (len(b_ub), 4 + num_aux) and A_eq.shape == (len(b_eq), 4 + num_aux)


# -- a spec without an integer variable warns once -----------------------------------------


def _lp(n):
    # a shape no other test uses: the warning is once per spec, per process
    return cl.ILP(shape=[n], integrality="continuous", upper=1.0,
                  constraints=[cl.Constraint(coefs=[1.0] * n, sense="==", rhs=1.0)])


def test_a_spec_without_integer_variables_warns_once_and_says_how_to_mark_them():
    spec = _lp(7)
    with pytest.warns(cl.NoIntegerWarning, match=r"ILP\(shape=\[7\]\) has no integer "
                                                 r"variable.*integrality='binary'.*boolean=True"):
        cl.make_solver(spec).solve(np.arange(7.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", cl.NoIntegerWarning)
        cl.make_solver(spec).solve(np.arange(7.0))  # once: the second solver is silent
        cl.ComboLayer(spec)(torch.randn(7))


def test_a_spec_with_an_integer_variable_does_not_warn():
    mixed = _lp(8).model_copy(update={"integrality": ["binary"] + ["continuous"] * 7})
    with warnings.catch_warnings():
        warnings.simplefilter("error", cl.NoIntegerWarning)
        cl.make_solver(mixed).solve(np.arange(8.0))
        cl.make_solver(cl.problems.TopK(5, 2)).solve(np.arange(5.0))


# -- one message for one mistake, short reprs ----------------------------------------------


def test_a_wrong_sense_in_every_constraint_is_reported_once():
    rows = [{"coefs": [1, 1, 1], "sense": "=", "rhs": 1}] * 8
    with pytest.raises(cl.SpecError) as error:
        cl.load_spec({"kind": "ilp", "shape": [3], "constraints": rows})
    message = str(error.value)
    assert message.count("Input should be '<=', '==' or '>='") == 1
    assert "constraints.0, constraints.1" in message and "and 3 more" in message


def test_different_mistakes_are_each_reported():
    rows = [{"coefs": [1, 1, 1], "sense": "=", "rhs": 1},
            {"coefs": [1, 1, 1], "sense": "<=", "rhs": "x"}]
    with pytest.raises(cl.SpecError) as error:
        cl.load_spec({"kind": "ilp", "shape": [3], "constraints": rows})
    assert "constraints.0: invalid Constraint: sense" in str(error.value)
    assert "constraints.1: invalid Constraint: rhs" in str(error.value)


def test_spec_and_hull_reprs_are_short():
    spec = cl.problems.Matching(30, 30).to_ilp()
    text = repr(spec)
    assert len(text) < 700, text
    assert text.startswith("ILP(kind='ilp', shape=[30, 30]") and "... 60 in all" in text
    knapsack = cl.problems.Knapsack(weights=np.ones((2, 50)).tolist(), capacities=[5.0, 5.0])
    assert "... 50 in all" in repr(knapsack) and len(repr(knapsack)) < 200
    hull = cl.analyze(cl.problems.Matching(30, 30))
    text = repr(hull)
    assert len(text) < 600, text
    assert "cost_shape=(30, 30), dim=841 in R^900, 59 equations" in text
    assert "... 56 more" in text
    small = repr(cl.problems.TopK(4, 2))
    assert small == "TopK(kind='topk', n=4, k=2, sense='max')"


# -- bad fields get a SpecError ------------------------------------------------------------


def test_a_constraint_with_a_bad_field_raises_spec_error_with_pydantic_location():
    with pytest.raises(cl.SpecError, match=r"invalid Constraint: sense: Input should be '<='"):
        cl.Constraint(coefs=[1], sense="=", rhs=1)


def test_binary_bounds_that_exclude_zero_and_one_are_rejected():
    with pytest.raises(cl.SpecError, match=r"variable 0 is binary but its bounds \[2, 3\]"):
        cl.ILP(shape=[2], lower=[2, 0], upper=[3, 1])


@pytest.mark.parametrize("source, keys", [
    ("{kind: ilp, shape: [2], constraints: [{coefs: {0: 1, '0': 5, 1: 1}, sense: '<=', "
     "rhs: 1}]}", "0 and '0'"),
    ('{"kind": "ilp", "shape": [2], "constraints": [{"coefs": {"0": 1, "00": 5, "1": 1}, '
     '"sense": "<=", "rhs": 1}]}', "'0' and '00'"),
    ("{kind: ilp, shape: [2], known_cost: {0: 1, '0': -5}}", "0 and '0'"),
    ({"kind": "ilp", "shape": [2], "known_cost": {1: 1.0, "1": 2.0}}, "1 and '1'"),
])
def test_two_keys_naming_one_index_are_refused(source, keys):
    with pytest.raises(cl.SpecError, match=f"the keys {keys} both name index"):
        cl.load_spec(source)


def test_sparse_keys_written_as_text_still_read_as_indices():
    spec = cl.load_spec('{"kind": "ilp", "shape": [2], "known_cost": {"1": 2}, "constraints": '
                        '[{"coefs": {"0": 1, "1": 1}, "sense": "<=", "rhs": 1}]}')
    assert spec.constraints[0].coefs == {0: 1.0, 1: 1.0} and spec.known_cost == [0.0, 2.0]


@pytest.mark.parametrize("source, field", [
    ("{kind: ilp, shape: [2], constraints: [{coefs: [1, 1], sense: '<=', rhs: true}]}", "rhs"),
    ("{kind: ilp, shape: [2], constraints: [{coefs: [true, true], sense: '<=', rhs: 1}]}",
     "coefs"),
    ("{kind: ilp, shape: [2], constraints: [{coefs: {0: false}, sense: '<=', rhs: 1}]}",
     "coefs"),
    ("{kind: ilp, shape: [2], upper: [1, true]}", "upper"),
    ("{kind: ilp, shape: [2], lower: false}", "lower"),
    ("{kind: ilp, shape: [2], known_cost: [true, 0]}", "known_cost"),
    ("{kind: ilp, shape: [true]}", "shape"),
    ("{kind: ilp, shape: [2], num_aux: true}", "num_aux"),
    ("{kind: topk, n: true, k: true}", "n"),
    ("{kind: topk, n: 4, k: true}", "k"),
    ("{kind: shortest_path, num_nodes: 3, edges: [[true, false], [1, 2]], source: 0, "
     "target: 2}", "edges"),
    ("{kind: knapsack, weights: [[1, true]], capacities: [1]}", "weights"),
])
def test_a_boolean_is_refused_in_every_numeric_field(source, field):
    with pytest.raises(cl.SpecError, match=f"{field} must hold numbers, got the boolean"):
        cl.load_spec(source)


def test_a_boolean_is_refused_in_python_too():
    from combolayer.problems import TopK

    with pytest.raises(cl.SpecError, match="n must hold numbers"):
        TopK(True, 1)
    with pytest.raises(cl.SpecError, match="rhs must hold numbers"):
        cl.Constraint(coefs=[1, 1], sense="<=", rhs=np.bool_(True))


def test_specs_compare_by_their_fields_after_to_matrices():
    # to_matrices caches scipy matrices on the spec, and pydantic's == compared them: it
    # raised "the truth value of an array ... is ambiguous", so a layer given a solver
    # built for an equal spec could not be made
    a = cl.ILP(shape=[3], constraints=[cl.Constraint(coefs=[1, 1, 1], sense="<=", rhs=2)])
    b = cl.load_spec(a.model_dump_json())
    a.to_matrices(), b.to_matrices()
    assert a == b and not a != b and a != cl.problems.TopK(n=3, k=1)
    layer = cl.ComboLayer(b, backend=cl.make_solver(a, backend="highs"))
    assert layer(torch.tensor([-1.0, -2.0, 3.0])).tolist() == [1.0, 1.0, 0.0]


def test_yaml_aliases_are_read_once_by_the_boolean_check():
    """424 bytes of nested aliases stand for 10^8 numbers: refused at once (48 s before)."""
    rows = ["v0: &v0 [1,1,1,1,1,1,1,1,1,1]"]
    rows += [f"v{i}: &v{i} [" + ",".join([f"*v{i - 1}"] * 10) + "]" for i in range(1, 8)]
    text = "\n".join(rows) + "\nkind: knapsack\nweights: *v7\ncapacities: [1]\n"
    start = time.process_time()
    with pytest.raises(cl.SpecError, match="unknown key"):
        cl.load_spec(text)
    assert time.process_time() - start < 5.0
    with pytest.raises(cl.SpecError, match="boolean"):  # a boolean behind an alias is found
        cl.load_spec("kind: knapsack\nweights: &w [[1, true]]\ncapacities: [1]\n")


@pytest.mark.parametrize("kind", ["dok_matrix", "dok_array", "lil_matrix", "coo_array"])
def test_from_matrices_takes_every_scipy_sparse_format(kind):
    A = getattr(sp, kind)(np.array([[1.0, 0.0, 2.0]]))
    spec = cl.ILP.from_matrices(shape=3, A_ub=A, b_ub=[2.0])
    assert spec.constraints[0].coefs == {0: 1.0, 2: 2.0}


def test_from_matrices_reads_none_bounds_as_unbounded_as_ilp_does():
    spec = cl.ILP.from_matrices(shape=2, A_ub=np.ones((1, 2)), b_ub=[3.0],
                                integrality="integer", upper=[None, 2.0], sense="max")
    assert spec.upper == [None, 2.0]
    assert cl.make_solver(spec).solve(np.array([1.0, 2.0])).tolist() == [1.0, 2.0]
    with pytest.raises(cl.SpecError, match="must be real"):
        cl.ILP.from_matrices(shape=2, A_ub=np.ones((1, 2)), b_ub=[3.0], upper=[None, 2 + 1j])


def test_yaml_numbers_are_read_as_yaml_1_2_writes_them():
    """YAML 1.1 (yaml.safe_load) read 010 as octal 8, 1:30 as 90 and 1e5 as a string."""
    text = ("kind: ilp\nshape: [12]\nsense: max\n"
            "constraints: [{coefs: {010: 1, 0: 1e5}, sense: '<=', rhs: 2.5e5}]\n")
    spec = cl.load_spec(text)
    assert spec.constraints[0].coefs == {10: 1.0, 0: 1e5}
    with pytest.raises(cl.SpecError, match="rhs: Input should be a valid number"):
        cl.load_spec("kind: ilp\nshape: [2]\nconstraints: "
                     "[{coefs: {0: 1}, sense: '<=', rhs: 1:30}]\n")


def test_every_spec_hashes_as_equal_specs_do():
    """Frozen pydantic models hash their fields, and an ILP's or a knapsack's lists
    could not be hashed."""
    specs = [cl.problems.TopK(5, 2), cl.problems.Knapsack(weights=[[1, 2]], capacities=[2]),
             cl.ILP(shape=[2]), cl.problems.ShortestPath.grid(3, 3)]
    for spec in specs:
        twin = cl.load_spec(spec.model_dump_json())
        assert twin == spec and hash(twin) == hash(spec)
    assert len({*specs, *specs}) == len(specs)


def test_an_empty_string_is_no_spec():
    with pytest.raises(cl.SpecError, match="empty string"):
        cl.load_spec("")
