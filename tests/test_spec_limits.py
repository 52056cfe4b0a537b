"""What a spec declares is checked where it is read: its model's size against one limit
(`combolayer.specs.base.MAX_VARIABLES`, `MAX_ENTRIES`) before anything is allocated, and
its data against what solvers accept; unknown keys name the closest field; the sparse
``{index: value}`` form of ``known_cost``."""

from __future__ import annotations

import inspect
import json
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import yaml

import combolayer as cl
from combolayer.specs.base import MAX_ENTRIES, MAX_VARIABLES, SPEC_KINDS

# One small instance of every spec kind; a kind registered without one fails
# test_every_kind_has_an_example, so a new kind is held to the bound too.
EXAMPLES = {
    "ilp": dict(kind="ilp", shape=[2, 2], num_aux=1,
                constraints=[{"coefs": [1, 1, 1, 1, -1], "sense": "<=", "rhs": 1},
                             {"coefs": {0: 1, 4: 1}, "sense": ">=", "rhs": 1}]),
    "knapsack": dict(kind="knapsack", weights=[[1, 2, 3], [2, 2, 1]], capacities=[3, 4]),
    "matching": dict(kind="matching", rows=3, cols=4),
    "topk": dict(kind="topk", n=6, k=2),
    "ranking": dict(kind="ranking", n=5),
    "shortest_path": dict(kind="shortest_path", num_nodes=6,
                          edges=[[0, 1], [1, 2], [0, 2], [2, 3], [3, 4]], source=0, target=4),
    "grid_shortest_path": dict(kind="grid_shortest_path", rows=3, cols=4),
    "tsp": dict(kind="tsp", num_nodes=5),
    "tsp_edges": dict(kind="tsp_edges", num_nodes=5),
}
UNDIRECTED = {**EXAMPLES["shortest_path"], "directed": False}


def test_every_kind_has_an_example():
    """Every kind combolayer's own files define (tests and the docs' extension examples
    register kinds of their own in the same session)."""
    package = Path(cl.__file__).parent
    own = [kind for kind, cls in SPEC_KINDS.items()
           if Path(inspect.getfile(cls)).resolve().is_relative_to(package.resolve())]
    assert sorted(own) == sorted(EXAMPLES)


@pytest.mark.parametrize("data", [*EXAMPLES.values(), UNDIRECTED],
                         ids=[*EXAMPLES, "shortest_path undirected"])
def test_model_size_bounds_the_model_the_spec_compiles_to(data):
    spec = cl.load_spec(data)
    variables, entries = spec.model_size()
    for form in (spec.to_canonical(lazy=False), spec.to_ilp().to_canonical()):
        rows = form.A_ub.shape[0] + form.A_eq.shape[0]
        assert len(form.lower) <= variables
        assert form.A_ub.nnz + form.A_eq.nnz + rows <= entries


# Each declares far more than the limit in a few bytes of text.
OVERSIZED = {
    "shortest path, 1e9 nodes": ({"kind": "shortest_path", "num_nodes": 10**9,
                                  "edges": [[0, 1]], "source": 0, "target": 1},
                                 "1,000,000,002 matrix entries"),
    "shortest path, 1e8 nodes, undirected": ({"kind": "shortest_path", "num_nodes": 10**8,
                                              "edges": [[0, 1]], "source": 0, "target": 1,
                                              "directed": False}, "100,000,008 matrix entries"),
    "ranking 20000": ({"kind": "ranking", "n": 20000}, "400,020,000 variables"),
    "ilp 1e9": ({"kind": "ilp", "shape": [10**9]}, "1,000,000,000 variables"),
    "ilp 1e9 written as text": ({"kind": "ilp", "shape": ["1000000000"]},
                                "1,000,000,000 variables"),
    "ilp aux 1e9": ({"kind": "ilp", "shape": [2], "num_aux": 10**9, "lower": 0.0},
                    "1,000,000,002 variables"),
    "grid 3000": ({"kind": "grid_shortest_path", "rows": 3000, "cols": 3000}, "variables"),
    "topk 9e6": ({"kind": "topk", "n": 9 * 10**6, "k": 3}, "9,000,000 variables"),
    "tsp 2000": ({"kind": "tsp", "num_nodes": 2000}, "variables"),
}


@pytest.mark.parametrize("form", ["dict", "yaml", "json"])
@pytest.mark.parametrize("data, expected", OVERSIZED.values(), ids=list(OVERSIZED))
def test_a_spec_that_is_read_is_refused_past_the_limit_before_it_allocates(data, expected,
                                                                          form):
    source = {"dict": data, "yaml": yaml.safe_dump(data), "json": json.dumps(data)}[form]
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(cl.SpecError, match=expected) as caught:
            cl.load_spec(source)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - start < 5
    assert peak < 20 * 2**20  # nothing per declared variable or node
    message = str(caught.value)
    assert f"expected at most {MAX_VARIABLES:,} variables and {MAX_ENTRIES:,}" in message
    assert "max_variables=None" in message


@pytest.mark.parametrize("form", ["yaml aliases", "dict sharing one row"])
def test_rows_repeated_by_reference_are_counted_before_any_is_built(form):
    # 6,000 references to one row of 1,000 coefficients: 6,000,000 entries in ~40 KB.
    row = {"coefs": [0] * 1000, "sense": "<=", "rhs": 1}
    if form == "dict sharing one row":
        source = {"kind": "ilp", "shape": [1000], "constraints": [row] * 6000}
    else:
        source = ("kind: ilp\nshape: [1000]\nconstraints:\n- &r " + json.dumps(row) + "\n"
                  + "- *r\n" * 5999)
        assert len(source) < 50_000
    tracemalloc.start()
    try:
        with pytest.raises(cl.SpecError, match=r"ILP\(shape=\[1000\]\) compiles to a model of "
                                               r"about 1,000 variables and 5,00\d,\d{3} matrix "
                                               r"entries; expected at most"):
            cl.load_spec(source)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # built, the rows would be 6,000,000 floats (over 140 MB): none was
    assert peak < 20 * 2**20


@pytest.mark.parametrize("kind", ["knapsack weights", "ilp variables"])
def test_other_fields_repeated_by_reference_are_counted_before_any_is_built(kind):
    # 6,000 references to one list of 1,000 numbers: 6,000,000 entries in ~30 KB.
    numbers = json.dumps([1] * 1000)
    if kind == "knapsack weights":
        source = ("kind: knapsack\ncapacities: [1]\nweights:\n- &r " + numbers + "\n"
                  + "- *r\n" * 5999)
        expected = r"Knapsack\(\) compiles to a model of about 1,000 variables"
    else:
        source = ("kind: ilp\nshape: [1]\nvariables:\n  a: &v {shape: [1000], index: "
                  + numbers + "}\n" + "".join(f"  b{i}: *v\n" for i in range(5999)))
        expected = r"ILP\(shape=\[1\]\) compiles to a model of about 1 variables"
    assert len(source) < 100_000
    tracemalloc.start()
    try:
        with pytest.raises(cl.SpecError, match=expected + r" and 5,00\d,\d{3} matrix entries"):
            cl.load_spec(source)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20  # built, the lists would be 6,000,000 floats: none was


def test_the_limit_is_lifted_for_trusted_input_and_python_specs_are_trusted():
    data = {"kind": "ranking", "n": 1001}  # 1,003,002 variables
    with pytest.raises(cl.SpecError, match="1,003,002 variables"):
        cl.load_spec(data)
    assert cl.load_spec(data, max_variables=None).n == 1001
    assert cl.load_spec(cl.problems.Ranking(1001)).n == 1001
    assert cl.problems.Ranking(n=1001).model_size()[0] == 1_003_002


def test_a_layer_from_a_dict_is_held_to_the_limit():
    with pytest.raises(cl.SpecError, match="400,020,000 variables"):
        cl.ComboLayer({"kind": "ranking", "n": 20000})


# -- data solvers cannot take ------------------------------------------------------------


def test_knapsack_data_of_1e308_is_refused_naming_the_entry():
    with pytest.raises(cl.SpecError, match=r"weights\[0\]\[0\] must be >= 0 and below 1e\+15, "
                                           r"got 1e\+308"):
        cl.problems.Knapsack(weights=[[1e308, 1.0]], capacities=[1.0])
    with pytest.raises(cl.SpecError, match=r"capacities\[0\] must be >= 0 and below 1e\+15"):
        cl.load_spec("{kind: knapsack, weights: [[1, 1]], capacities: [1e308]}")
    spec = cl.problems.Knapsack(weights=[[1e14, 1.0]], capacities=[1.0])
    assert cl.make_solver(spec, "highs").solve(np.array([5.0, 1.0])).tolist() == [0.0, 1.0]


def test_a_constraint_coefficient_of_1e308_is_refused():
    with pytest.raises(cl.SpecError, match=r"coefs\[0\] must be finite and below 1e\+15"):
        cl.ILP(shape=[2], constraints=[cl.Constraint(coefs=[1e308, 1], sense="<=", rhs=1)])


@pytest.mark.parametrize("fields, expected", [
    (dict(constraints=[{"coefs": [1, 1], "sense": ">=", "rhs": 1e30}]),
     r"rhs must be finite and below 1e\+15 in magnitude, got 1e\+30"),
    (dict(constraints=[{"coefs": [1, 1], "sense": "<=", "rhs": -1e15}]),
     r"rhs must be finite and below 1e\+15 in magnitude, got -1000000000000000.0"),
    (dict(integrality="integer", lower=1e25, upper=None),
     r"lower\[0\] must be infinite or below 1e\+15 in magnitude, got 1e\+25"),
    (dict(integrality="continuous", lower=[0, -1e16]),
     r"lower\[1\] must be infinite or below 1e\+15 in magnitude, got -1e\+16"),
    (dict(integrality="integer", lower=0, upper=[1e20, 3]),
     r"upper\[0\] must be infinite or below 1e\+15 in magnitude, got 1e\+20"),
    (dict(known_cost=[0, 1e300]),
     r"known_cost\[1\] must be finite and below 1e\+15 in magnitude, got 1e\+300"),
])
def test_right_hand_sides_bounds_and_known_costs_are_held_to_the_coefficient_limit(
        fields, expected):
    with pytest.raises(cl.SpecError, match=expected):
        cl.ILP(shape=[2], **fields)
    with pytest.raises(cl.SpecError, match=expected):
        cl.load_spec(json.dumps({"kind": "ilp", "shape": [2], **fields}))


def test_infinite_bounds_and_data_below_the_limit_are_taken():
    spec = cl.ILP(shape=[2], integrality="integer", lower=[0, -np.inf], upper=None,
                  constraints=[{"coefs": [1, 1], "sense": ">=", "rhs": 1e14},
                               {"coefs": [0, 1], "sense": ">=", "rhs": -5}])
    assert cl.make_solver(spec, "highs").solve(np.array([1.0, 1.0])).sum() == 1e14


@pytest.mark.parametrize("shape", [[-1, -1], [0], [2, 0]])
def test_a_variable_shape_must_list_positive_sizes(shape):
    with pytest.raises(cl.SpecError, match="shape must list sizes >= 1"):
        cl.ILP(shape=[2], variables={"x": {"shape": shape, "index": [0]}})
    assert cl.ILP(shape=[2], variables={"x": {"shape": [], "index": [1]}}).variables["x"]


def test_from_file_refuses_booleans_as_outputs(tmp_path):
    path = tmp_path / "m.lp"
    path.write_text("Minimize\n obj: a + 2 b\nSubject To\n c: a + b >= 1\nBinaries\n a b\nEnd\n")
    with pytest.raises(cl.SpecError, match=r"outputs lists column names or indices, got True"):
        cl.ILP.from_file(path, outputs=[True, False])
    assert cl.ILP.from_file(path, outputs=[1]).shape == [1]


# -- unknown keys ----------------------------------------------------------------------


@pytest.mark.parametrize("source, expected", [
    ("{kind: topk, n: 4, kk: 2}", "kk: unknown key (did you mean 'k'?)"),
    ("{kind: shortest_path, num_node: 3, edges: [[0, 1]], source: 0, target: 1}",
     "num_node: unknown key (did you mean 'num_nodes'?)"),
    ("{kind: ilp, shape: [2], constraints: [{coefs: [1, 1], sens: '<=', rhs: 1}]}",
     "sens: unknown key (did you mean 'sense'?)"),
    ("{kind: ilp, shape: [2], known_cots: [1, 2]}",
     "known_cots: unknown key (did you mean 'known_cost'?)"),
])
def test_an_unknown_spec_key_names_the_closest_field(source, expected):
    with pytest.raises(cl.SpecError, match=expected.replace("(", r"\(").replace(")", r"\)")
                       .replace("?", r"\?")):
        cl.load_spec(source)


def test_an_unknown_key_in_python_names_the_closest_field_too():
    with pytest.raises(cl.SpecError, match=r"sens: unknown key \(did you mean 'sense'\?\)"):
        cl.problems.TopK(n=4, k=2, sens="min")


def test_the_train_config_and_specs_share_one_suggestion_helper():
    from combolayer.specs.base import did_you_mean
    from combolayer.training.loop import ConfigError, load_config

    assert did_you_mean("epoch", ["epochs", "lr"]) == " (did you mean 'epochs'?)"
    assert did_you_mean("zzz", ["epochs", "lr"]) == ""
    with pytest.raises(ConfigError, match=r"unknown key 'epoch' \(did you mean 'epochs'\?\)"):
        load_config({"data": {"name": "shortest_path"}, "epoch": 3})


# -- known_cost as {index: value} -------------------------------------------------------

DEPOT = dict(shape=[3], num_aux=1,
             constraints=[{"coefs": {0: 1, 1: 1, 2: 1}, "sense": "==", "rhs": 2},
                          {"coefs": {0: 1, 3: -1}, "sense": "<=", "rhs": 0}])


@pytest.mark.parametrize("form", ["python", "yaml", "json"])
def test_known_cost_takes_the_sparse_form_of_a_constraint(form):
    dense = cl.ILP(**DEPOT, known_cost=[0, 0, 0, 1.5])
    if form == "python":
        sparse = cl.ILP(**DEPOT, known_cost={3: 1.5})
    else:
        data = {"kind": "ilp", **DEPOT, "known_cost": {3: 1.5}}
        text = yaml.safe_dump(data) if form == "yaml" else json.dumps(data)
        sparse = cl.load_spec(text)
    assert sparse.known_cost == [0.0, 0.0, 0.0, 1.5]
    assert sparse == dense
    assert cl.load_spec(sparse.model_dump_json()) == dense
    y, aux = cl.make_solver(sparse).solve(np.array([-2.0, 0.0, 0.5]), return_aux=True)
    assert y.tolist() == [1.0, 1.0, 0.0] and aux.tolist() == [1.0]


@pytest.mark.parametrize("known, expected", [
    ({4: 1.0}, r"known_cost index 4 is out of range: expected 0 <= index < 4"),
    ({-1: 1.0}, r"known_cost index -1 is out of range"),
    ({0: float("nan")}, r"known_cost\[0\] must be finite"),
])
def test_a_sparse_known_cost_is_checked_like_a_dense_one(known, expected):
    with pytest.raises(cl.SpecError, match=expected):
        cl.ILP(**DEPOT, known_cost=known)


def test_an_ilp_too_large_to_allocate_says_so():
    # a MemoryError with no message came out of broadcasting a bound to 1e12 variables
    with pytest.raises(cl.SpecError, match="1,000,000,000,000 variables .* too many to "
                                           "allocate"):
        cl.ILP(shape=[10**6, 10**6])


def test_a_source_that_is_no_spec_names_what_was_read(tmp_path):
    with pytest.raises(cl.SpecError, match="backend config: expected a path, a YAML/JSON "
                                           "string or a dict, got int"):
        cl.make_solver(cl.problems.TopK(n=3, k=1), backend=3)
    # a directory was read as a YAML string: "spec from a string must be a mapping"
    with pytest.raises(cl.SpecError, match="is a directory; expected a YAML/JSON file"):
        cl.load_spec(str(tmp_path))
