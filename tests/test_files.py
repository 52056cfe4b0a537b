"""MPS and LP files as specs: cl.ILP.from_file against HiGHS's own solve of the file."""

import contextlib
import io
import json
import textwrap
from types import SimpleNamespace

import highspy
import numpy as np
import pytest

import combolayer as cl
from combolayer.backends.highs import new_highs, run_highs
from combolayer.cli import main
from combolayer.specs.files import read_model

INF = highspy.kHighsInf
INTEGER = highspy.HighsVarType.kInteger


def write_model(path, cost, lower, upper, rows, integer=(), sense="min", names=True):
    """Build a model in HiGHS and let HiGHS write it: rows are (lower, upper, {j: a})."""
    h = new_highs()
    n = len(cost)
    h.addVars(n, np.asarray(lower, dtype=float), np.asarray(upper, dtype=float))
    h.changeColsCost(n, np.arange(n), np.asarray(cost, dtype=float))
    if integer:
        kinds = np.array([INTEGER] * len(integer))
        h.changeColsIntegrality(len(integer), np.asarray(integer), kinds)
    for i, (lo, up, coefs) in enumerate(rows):
        h.addRow(lo, up, len(coefs), np.array(list(coefs)), np.array(list(coefs.values()), float))
        if names:
            h.passRowName(i, f"row{i}")
    if sense == "max":
        h.changeObjectiveSense(highspy.ObjSense.kMaximize)
    h.writeModel(str(path))
    return path


def highs_solve(path, cost=None):
    """HiGHS's own optimum of the file (optionally with another cost vector)."""
    h = new_highs()
    h.readModel(str(path))
    if cost is not None:
        h.changeColsCost(len(cost), np.arange(len(cost)), np.asarray(cost, dtype=float))
    run_highs(h)
    return np.array(h.getSolution().col_value), h.getInfo().objective_function_value


MODELS = {
    # max, binary and general integer columns, a ranged row and a one-sided row
    "ranged_max.mps": dict(cost=[3, -2, 1, -1, 2], lower=[0] * 5, upper=[1, 1, 1, 5, 3],
                           rows=[(1, 3, {0: 1, 1: 1, 2: 1}), (-INF, 4, {1: 1, 3: 1, 4: 1}),
                                 (-1, 2, {0: 1, 3: -1})],
                           integer=(0, 1, 2, 3), sense="max"),
    # min, mixed integer/continuous, an equality and a >= row, a free-above column
    "mixed_min.mps": dict(cost=[1.5, 2, -1, 0.5], lower=[0, 0, 0, -2], upper=[1, 1, 4, INF],
                          rows=[(2, 2, {0: 1, 1: 1, 3: 1}), (1, INF, {1: 2, 2: -1, 3: 1}),
                                (-INF, 3, {2: 1, 3: 1})],
                          integer=(0, 1)),
    # an LP: every column continuous
    "lp.mps": dict(cost=[-1, -2, 0.5], lower=[0, 0, 0], upper=[2, 2, 2],
                   rows=[(-INF, 3, {0: 1, 1: 1}), (-INF, 2, {1: 1, 2: -1})]),
}


@pytest.fixture(params=sorted(MODELS))
def model_file(request, tmp_path):
    return write_model(tmp_path / request.param, **MODELS[request.param])


@pytest.mark.parametrize("backend", ["auto", "highs"])
@pytest.mark.filterwarnings("ignore::combolayer.NoIntegerWarning")  # an LP on purpose
def test_file_solutions_match_highs_on_the_file(model_file, backend, rng):
    spec = cl.ILP.from_file(model_file)
    solver = cl.make_solver(spec, backend=backend)
    costs = [np.array(spec.default_cost), *rng.normal(size=(3, spec.num_outputs))]
    for cost in costs:
        x_highs, obj_highs = highs_solve(model_file, cost)
        y = solver.solve(cost)
        assert float(cost @ y) == pytest.approx(obj_highs, abs=1e-6)
        assert spec.sense == "min" or float(cost @ y) == pytest.approx(float(cost @ x_highs))
        # random costs make the optimum unique
        if cost is not costs[0]:
            np.testing.assert_allclose(y, x_highs, atol=1e-6)


def test_file_keeps_shape_sense_bounds_integrality_and_row_names(tmp_path):
    path = write_model(tmp_path / "m.mps", **MODELS["ranged_max.mps"])
    spec = cl.ILP.from_file(path)
    assert spec.shape == [5] and spec.sense == "max" and spec.default_cost == (3, -2, 1, -1, 2)
    assert spec.integrality == ["binary", "binary", "binary", "integer", "continuous"]
    assert spec.upper == [1, 1, 1, 5, 3]
    rows = {(c.name, c.sense, c.rhs) for c in spec.constraints}
    assert rows == {("row0:upper", "<=", 3), ("row0:lower", ">=", 1), ("row1", "<=", 4),
                    ("row2:upper", "<=", 2), ("row2:lower", ">=", -1)}
    # the file's objective round-trips through JSON with the rest of the spec (it was
    # lost, yet the two specs compared equal)
    again = cl.load_spec(spec.model_dump_json())
    assert again == spec and again.default_cost == spec.default_cost
    assert again != cl.ILP(**{**spec.model_dump(), "default_cost": None})


def test_equality_rows_and_infinite_bounds(tmp_path):
    path = write_model(tmp_path / "m.mps", **MODELS["mixed_min.mps"])
    spec = cl.ILP.from_file(path)
    assert [c.sense for c in spec.constraints] == ["==", ">=", "<="]
    assert spec.lower == [0, 0, 0, -2] and spec.upper == [1, 1, 4, np.inf]
    assert cl.load_spec(spec.model_dump_json()) == spec


LP_FILE = """\\ choose two of four items, the cheapest pair that respects a conflict
Minimize
 obj: 4 a + 3 b + 5 c + 1 d
Subject To
 pick: a + b + c + d = 2
 conflict: b + d <= 1
 budget: 2 a + b + 3 c + d >= 2
Bounds
 0 <= a <= 1
 0 <= b <= 1
 0 <= c <= 1
 0 <= d <= 1
Binaries
 a b c d
End
"""


def test_hand_written_lp_file(tmp_path):
    path = tmp_path / "pair.lp"
    path.write_text(LP_FILE)
    model = read_model(path)
    spec = cl.ILP(**model.arguments)
    assert model.names == ["a", "b", "c", "d"]
    assert [c.name for c in spec.constraints] == ["pick", "conflict", "budget"]
    assert spec.integrality == ["binary"] * 4
    y = cl.make_solver(spec).solve(model.cost)
    x_highs, obj = highs_solve(path)
    np.testing.assert_allclose(y, x_highs)
    assert y.tolist() == [1.0, 0.0, 0.0, 1.0] and model.cost @ y == obj == 5.0
    # the layer on a file, in two lines
    import torch

    layer = cl.ComboLayer(cl.ILP.from_file(path))
    assert layer(torch.tensor(model.cost)).tolist() == y.tolist()


UNBOUNDED_LP_FILE = """\\ the LP format's default bounds: no upper bound, a free column
Minimize
 obj: x + y + z + w
Subject To
 c1: x + y + z >= 2
 c2: w - y >= -4
Bounds
 x <= 3
 z >= -1
 w free
General
 x y
End
"""


@pytest.mark.parametrize("outputs", [["x", "y"], ["w", "z"], [2, 0, 3]])
def test_outputs_keep_infinite_bounds_and_the_optimum(tmp_path, outputs):
    path = tmp_path / "unbounded.lp"
    path.write_text(UNBOUNDED_LP_FILE)
    whole = cl.ILP.from_file(path)
    spec = cl.ILP.from_file(path, outputs=outputs)
    names = ["x", "y", "z", "w"]
    order = [names.index(o) if isinstance(o, str) else o for o in outputs]
    order += [j for j in range(4) if j not in order]
    assert spec.upper == [whole.upper[j] for j in order]
    assert spec.lower == [whole.lower[j] for j in order]
    assert np.inf in spec.upper and -np.inf in spec.lower
    y, aux = cl.make_solver(spec).solve(list(spec.default_cost), return_aux=True)
    x = np.concatenate([y, aux])
    objective = np.dot(spec.default_cost, y) + np.dot(spec.known_cost, x)
    assert objective == pytest.approx(whole.default_cost @ cl.make_solver(whole).solve(
        list(whole.default_cost))) == pytest.approx(highs_solve(path)[1]) == -2.0
    assert cl.load_spec(spec.model_dump_json()) == spec


def test_every_spec_reader_takes_a_model_file_path(tmp_path, monkeypatch):
    (tmp_path / "pair.lp").write_text(LP_FILE)
    (tmp_path / "layer.yaml").write_text("problem: pair.lp\nmethod: blackbox\n")
    monkeypatch.chdir(tmp_path)
    expected = cl.ILP.from_file(tmp_path / "pair.lp")
    readers = {
        "load_spec": lambda: cl.load_spec("pair.lp"),
        "load_spec path": lambda: cl.load_spec(tmp_path / "pair.lp"),
        "from_config dict": lambda: cl.ComboLayer.from_config({"problem": "pair.lp"}).spec,
        "from_config file": lambda: cl.ComboLayer.from_config(str(tmp_path / "layer.yaml")).spec,
        "ComboLayer": lambda: cl.ComboLayer("pair.lp").spec,
        "make_solver": lambda: cl.make_solver("pair.lp").spec,
    }
    for name, read in readers.items():
        spec = read()
        assert spec == expected and spec.default_cost == expected.default_cost, name
    assert cl.make_solver("pair.lp").solve(expected.default_cost).tolist() == [1, 0, 0, 1]
    assert cl.analyze("pair.lp").dim == cl.analyze(expected).dim
    with pytest.raises(cl.SpecError, match="no model file named 'other.mps'"):
        cl.load_spec("other.mps")


def test_unreadable_and_missing_files_raise_spec_errors(tmp_path):
    with pytest.raises(cl.SpecError, match="no model file named"):
        cl.ILP.from_file(tmp_path / "missing.mps")
    bad = tmp_path / "bad.lp"
    bad.write_text("this is not an LP file\n")
    with pytest.raises(cl.SpecError, match="could not read"):
        cl.ILP.from_file(bad)


def cli(*args):
    """``combolayer ARGS`` in this process (`combolayer.cli.main`, no interpreter to
    start): its exit code, standard output and standard error."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def test_cli_solves_and_analyzes_model_files(tmp_path):
    path = tmp_path / "pair.lp"
    path.write_text(LP_FILE)
    result = cli("solve", str(path))
    assert result.returncode == 0, result.stderr
    # stdout is the JSON alone (pipes into jq); the talk is on stderr
    assert json.loads(result.stdout) == {"solution": [1.0, 0.0, 0.0, 1.0], "objective": 5.0}
    assert "ILP(shape=[4])" in result.stderr
    np.save(tmp_path / "c.npy", np.array([[1.0, 1, 0, 0], [0, 0, 1, 1]]))
    result = cli("solve", str(path), "--costs", str(tmp_path / "c.npy"))
    assert json.loads(result.stdout) == {"solution": [[0, 0, 1, 1], [1, 1, 0, 0]],
                                         "objective": [0.0, 0.0]}
    result = cli("analyze", str(write_model(tmp_path / "m.mps", **MODELS["mixed_min.mps"])))
    assert result.returncode == 0, result.stderr
    assert "ILP(shape=[4])" in result.stdout


# -- nothing an ILP cannot represent is dropped --------------------------------------------


QUADRATIC_LP = """\
    Minimize
     obj: - x - 2 y + [ x^2 + y^2 ] / 2
    Subject To
     c1: x + y <= 3
    Bounds
     0 <= x <= 4
     0 <= y <= 4
    General
     x y
    End
    """


MPS_HEAD = textwrap.dedent("""\
    NAME          TEST
    ROWS
     N  obj
     L  c1
    COLUMNS
        x         obj       -1             c1        1
        y         obj       -2             c1        1
    RHS
        rhs       c1        3
    BOUNDS
     UP BND       x         4
     UP BND       y         4
    """)


def _mps(section):
    return MPS_HEAD + section + "ENDATA\n"


LP_BODY = """\
    Minimize
     obj: x + y
    Subject To
     c1: x + y >= 1
    {constraints}Bounds
     0 <= x <= 1
     0 <= y <= 1
    {tail}End
    """


UNREPRESENTABLE = {
    "quadratic.lp": (QUADRATIC_LP, r"quadratic objective"),
    "quadobj.mps": (_mps("QUADOBJ\n    x         x         1\n    y         y         1\n"),
                    r"quadratic objective"),
    "qmatrix.mps": (_mps("QMATRIX\n    x         x         1\n    y         y         1\n"),
                    r"quadratic objective"),
    "qsection.mps": (_mps("QSECTION      obj\n    x         x         1\n"),
                     r"quadratic objective"),
    "qcmatrix.mps": (_mps("QCMATRIX   c1\n    x         x         1\n"),
                     r"quadratic constraints \(QCMATRIX"),
    "sos.mps": (_mps("SOS\n S1 SOS       s1        1\n    x         1\n    y         2\n"),
                r"SOS constraints \(SOS section\)"),
    "indicators.mps": (_mps("INDICATORS\n IF c1        x         1\n"),
                       r"indicator constraints"),
    "cone.mps": (_mps("CSECTION      k1        0.0            QUAD\n    x\n    y\n"),
                 r"cone constraints"),
    "sc.mps": (MPS_HEAD.replace(" UP BND       y         4", " SC BND       y         4")
               + "ENDATA\n", r"semi-continuous variables \(column 1\)"),
    "sos.lp": (LP_BODY.format(constraints="", tail="SOS\n     s1: S1:: x:1 y:2\n    "),
               r"SOS constraints \(SOS section\)"),
    "quadratic_constraint.lp": (LP_BODY.format(
        constraints=" c2: x + [ x^2 ] >= 0\n    ", tail=""), r"quadratic constraints"),
    "indicator.lp": (LP_BODY.format(constraints=" c2: x = 1 -> y >= 1\n    ", tail=""),
                     r"indicator constraints"),
    "semi.lp": (LP_BODY.format(constraints="", tail="Semi-continuous\n     y\n    "),
                r"semi-continuous variables"),
    "semi_integer.lp": (LP_BODY.format(constraints="", tail="Semi-integer\n     y\n    "),
                        r"semi-integer variables"),
    "lazy.lp": (LP_BODY.format(constraints="Lazy Constraints\n     l1: x >= 0.5\n    ",
                               tail=""), r"lazy constraints"),
    "gencons.lp": (LP_BODY.format(
        constraints="", tail="General Constraints\n     g1: y = MAX ( x , 0.5 )\n    "),
        r"general constraints"),
}


@pytest.mark.parametrize("name", sorted(UNREPRESENTABLE))
def test_a_model_file_an_ilp_cannot_represent_is_refused_with_what_it_holds(tmp_path, name):
    # Before: a quadratic objective was dropped (solving gave -7 where the model's optimum
    # is -4.625), and an LP file with an SOS section said "expected an MPS or LP file".
    text, message = UNREPRESENTABLE[name]
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    with pytest.raises(cl.SpecError, match=message + r".*cannot represent"):
        cl.ILP.from_file(path)


def test_the_linear_part_of_those_files_still_reads(tmp_path):
    # The refusals above come from the quadratic / special parts, not the rest.
    path = tmp_path / "linear.mps"
    path.write_text(textwrap.dedent(_mps("")))
    spec = cl.ILP.from_file(path)
    assert spec.shape == [2]
    np.testing.assert_array_equal(spec.default_cost, [-1, -2])


# -- an MPS file that HiGHS reads as another model ------------------------------------------

#: Edits of MPS_HEAD that HiGHS's reader takes (kOk or kWarning, its words in the log
#: only, and output is off) as another model, and what the refusal says.
ALTERED = {
    "undeclared row in COLUMNS (entry dropped)": (
        ("    x         obj       -1             c1        1\n",
         "    x         obj       -1             c1        1\n    x         c2        1\n"),
        r'Row name "c2" in COLUMNS section is not defined'),
    "duplicate entry (first kept)": (
        ("    y         obj", "    x         c1        2\n    y         obj"),
        r'Column "x" has duplicate nonzero'),
    "undeclared row in RHS (ignored)": (
        ("    rhs       c1        3\n", "    rhs       c1        3\n    rhs       c9        5\n"),
        r'Row name "c9" in RHS section is not defined'),
    "unknown column in BOUNDS (a variable added)": (
        (" UP BND       y         4\n",
         " UP BND       y         4\n UP BND       zz        4\n"),
        r"names the column 'zz' outside its COLUMNS section"),
    "value with trailing characters (read as its digits)": (
        ("c1        1\n    y", "c1        1.0x\n    y"),
        r"line 6: '1.0x' in the COLUMNS section is not a number"),
    "a word as a value (read as 0)": (
        ("c1        1\n    y", "c1        one\n    y"),
        r"line 6: 'one' in the COLUMNS section is not a number \(HiGHS would read it as 0"),
    "a number with an underscore (read as its leading digits)": (
        ("c1        1\n    y", "c1        1_000\n    y"),
        r"line 6: '1_000' in the COLUMNS section is not a number"),
    "a word as an objective coefficient (read as 0)": (
        ("obj       -2", "obj       minus"),
        r"line 7: 'minus' in the COLUMNS section is not a number"),
    "fractional bound of an integer column (HiGHS: kWarning)": (
        (" UP BND       x         4\n",
         " LI BND       x         -1.5\n UP BND       x         4\n"),
        r'Bound for LI/UI/SI column "x" is -1.5: not integer'),
}


@pytest.mark.parametrize("case", sorted(ALTERED))
def test_an_mps_file_highs_reads_as_another_model_is_refused(tmp_path, case):
    (old, new), message = ALTERED[case]
    assert MPS_HEAD.count(old) == 1
    path = tmp_path / "altered.mps"
    path.write_text(_mps("").replace(old, new))
    h = new_highs()
    assert h.readModel(str(path)) in (highspy.HighsStatus.kOk, highspy.HighsStatus.kWarning)
    with pytest.raises(cl.SpecError, match=r"altered\.mps.*" + message):
        cl.ILP.from_file(path)
    path.write_text(_mps(""))
    assert cl.ILP.from_file(path).shape == [2]  # the file as it was reads


# -- a model file's objective beyond the solvers' infinity ---------------------------------


@pytest.mark.parametrize("coefficient", ["1e300", "1e16", "-1e300"])
def test_a_model_file_objective_beyond_infinity_names_its_column(tmp_path, coefficient):
    path = tmp_path / "big.lp"
    path.write_text(f"Minimize\n obj: x + {coefficient} y\nSubject To\n c1: x + y >= 1\n"
                    "Bounds\n 0 <= x <= 1\n 0 <= y <= 1\nEnd\n")
    with pytest.raises(cl.SpecError, match=r"objective coefficient of column 1 \(y\)"):
        cl.ILP.from_file(path)
    path.write_text(path.read_text().replace(coefficient, "1e14"))
    assert cl.ILP.from_file(path).default_cost == (1.0, 1e14)


def test_the_file_readers_cost_bound_is_the_layers():
    from combolayer.backends.solver import MAX_COST
    from combolayer.specs import files

    assert files.MAX_COST == MAX_COST


FREE_FORMAT_FROM_COLUMN_1 = """NAME TEST
ROWS
N obj
L c1
COLUMNS
x1 obj -1.0 c1 1.0
x2 obj -2.0 c1 1.0
RHS
RHS c1 1.0
BOUNDS
UP BND x1 1.0
UP BND x2 1.0
ENDATA
"""


def test_a_free_format_mps_file_with_data_lines_from_column_1_reads(tmp_path):
    """Free MPS may start data lines in column 1 (and an RHS vector may be named RHS):
    they are no section headers, so the columns are declared (such a file was refused for
    naming 'x1' outside COLUMNS)."""
    path = tmp_path / "free.mps"
    path.write_text(FREE_FORMAT_FROM_COLUMN_1)
    spec = cl.ILP.from_file(path)
    assert spec.shape == [2]
    np.testing.assert_array_equal(cl.make_solver(spec).solve(np.array([-1.0, -2.0])), [0, 1])


# -- what other readers read, and HiGHS reads otherwise or with a word ---------------------


BINARY_WITH_BOUNDS = ("Minimize\n obj: x + y\nSubject To\n c1: x + y >= -10\nBounds\n{}\n"
                      "Binary\n x y\nEnd\n")


@pytest.mark.parametrize("bound", [" x free", " x <= 5", " -2 <= x <= 1"])
def test_a_binary_lp_column_bounded_beyond_0_1_is_refused(tmp_path, bound):
    """HiGHS reads ``Binary x`` with ``x free`` as a general integer below 1 (its
    optimum here: x = -11), where Gurobi and SCIP read a 0/1 variable."""
    path = tmp_path / "binary.lp"
    path.write_text(BINARY_WITH_BOUNDS.format(bound))
    with pytest.raises(cl.SpecError, match=r"declares 'x' binary but bounds it by \[-?\w+, \w+\]"):
        cl.ILP.from_file(path)
    path.write_text(BINARY_WITH_BOUNDS.format(" 0 <= x <= 1"))
    assert cl.ILP.from_file(path).integrality == ["binary", "binary"]
    path.write_text(BINARY_WITH_BOUNDS.format(" x = 1").replace("Binary\n x y", "Binaries x y"))
    spec = cl.ILP.from_file(path)
    assert (spec.lower, spec.upper) == ([1.0, 0.0], [1.0, 1.0])
    # a name that starts like a keyword (st.a) does not end the section
    path.write_text(BINARY_WITH_BOUNDS.format(bound).replace(" x y\n", " st.a\n x y\n"))
    with pytest.raises(cl.SpecError, match=r"declares 'x' binary"):
        cl.ILP.from_file(path)


def test_a_general_column_after_the_binary_section_is_no_binary(tmp_path):
    path = tmp_path / "general.lp"
    path.write_text("Maximize\n obj: x + z\nSubject To\n c1: x + z <= 10\nBounds\n"
                    " 0 <= z <= 5\nBinary\n x\nGeneral z\nEnd\n")
    assert cl.ILP.from_file(path).integrality == ["binary", "integer"]


def test_a_plain_text_model_named_gz_is_checked_as_text(tmp_path):
    """HiGHS reads a file named ``.mps.gz`` that is not gzipped as plain text: so do the
    text checks (the value ``1O`` was read as 1 unchecked)."""
    typo = _mps("").replace("c1        1\n    y", "c1        1O\n    y")
    for name in ("typo.mps", "typo.mps.gz"):
        (tmp_path / name).write_text(typo)
        with pytest.raises(cl.SpecError, match=r"'1O' in the COLUMNS section is not a number"):
            cl.ILP.from_file(tmp_path / name)


def test_a_model_file_that_is_not_utf8_is_a_spec_error(tmp_path):
    path = tmp_path / "latin1.lp"
    path.write_bytes(b"Minimize\n obj: x + caf\xe9\nSubject To\n c1: x + caf\xe9 >= 1\n"
                     b"Binary\n x caf\xe9\nEnd\n")
    with pytest.raises(cl.SpecError, match=r"'.*latin1\.lp' is not UTF-8 text"):
        cl.ILP.from_file(path)
    path.write_bytes(b"\xff\xfe\xfd")
    with pytest.raises(cl.SpecError):
        cl.ILP.from_file(path)


def test_a_parse_error_says_where_highs_stopped_not_a_quadratic_objective(tmp_path):
    """Gurobi's default names (``x[0]``) are no quadratic term: the refusal quotes
    HiGHS's parser; ``[ x^2 ]`` is named a quadratic objective."""
    path = tmp_path / "named.lp"
    path.write_text("Minimize\n  - x[0] - 2 x[1]\nSubject To\n cap: x[0] + x[1] <= 1\n"
                    "Binaries\n x[0] x[1]\nEnd\n")
    with pytest.raises(cl.SpecError, match=r"could not read .*\(kError: .*\[") as refused:
        cl.ILP.from_file(path)
    assert "quadratic" not in str(refused.value)
    path.write_text("Minimize\n obj: x + [ x^2 ] / 2\nSubject To\n c: x <= 1\nEnd\n")
    with pytest.raises(cl.SpecError, match="quadratic objective"):
        cl.ILP.from_file(path)


FIXED_FORMAT_WITH_SPACES = """NAME          FIXED
ROWS
 N  COST
 L  LIM 1
COLUMNS
    X ONE     COST              -1.0   LIM 1              1.0
    Y TWO     COST              -2.0   LIM 1              1.0
RHS
    RHS       LIM 1              1.0
ENDATA
"""


def test_a_fixed_format_mps_file_is_refused_saying_why(tmp_path):
    """HiGHS reads names with spaces with its fixed-format reader, which takes BV as a
    continuous column and UI as a free one without a word."""
    path = tmp_path / "fixed.mps"
    path.write_text(FIXED_FORMAT_WITH_SPACES.replace(
        "ENDATA", "BOUNDS\n BV BND       X ONE\nENDATA"))
    with pytest.raises(cl.SpecError, match=r"names with spaces.*fixed-format.*BV"):
        cl.ILP.from_file(path)


def test_an_rhs_of_a_free_row_other_than_the_objective_is_refused(tmp_path):
    """HiGHS adds it to the objective's constant (Gurobi ignores it, with a warning):
    ``combolayer solve`` printed -8 where the objective is -5."""
    path = tmp_path / "two_free.mps"
    text = ("NAME TWON\nROWS\n N cost\n N other\n L c1\nCOLUMNS\n    x cost -5 other 1\n"
            "    x c1 1\n    y cost -1 other 2\n    y c1 1\nRHS\n    RHS c1 1 {}\n"
            "BOUNDS\n BV BND x\n BV BND y\nENDATA\n")
    path.write_text(text.format("other 3"))
    with pytest.raises(cl.SpecError, match=r"line 12: an RHS for the free row 'other'"):
        cl.ILP.from_file(path)
    path.write_text(text.format("cost 3"))  # the objective's own: its constant, -(-3)
    assert cl.ILP.from_file(path).default_offset == -3.0
    path.write_text(text.replace("    RHS c1 1 {}\n", "    c1 1\n    other 3\n"))
    with pytest.raises(cl.SpecError, match=r"line 13: an RHS for the free row 'other'"):
        cl.ILP.from_file(path)  # an RHS line without the set's name
    path.write_text(text.replace("    RHS c1 1 {}\n", "    c1 1O\n"))
    with pytest.raises(cl.SpecError, match=r"line 12: '1O' in the RHS section"):
        cl.ILP.from_file(path)
    # HiGHS takes the first free row as the objective, whatever OBJNAME says
    path.write_text(text.format("cost 3").replace("ROWS", "OBJNAME other\nROWS"))
    with pytest.raises(cl.SpecError, match=r"OBJNAME names 'other'.*first free row \('cost'\)"):
        cl.ILP.from_file(path)
    path.write_text(text.format("cost 3").replace("ROWS", "OBJNAME cost\nROWS"))
    assert cl.ILP.from_file(path).default_cost == (-5.0, -1.0)


def test_a_damaged_gzip_model_file_is_a_spec_error(tmp_path):
    import gzip

    path = tmp_path / "cut.mps.gz"
    path.write_bytes(gzip.compress(_mps("").encode())[:60])
    with pytest.raises(cl.SpecError):
        cl.ILP.from_file(path)


def test_a_variable_twice_in_one_lp_row_is_summed(tmp_path):
    path = tmp_path / "twice.lp"
    path.write_text("Minimize\n obj: x + y\nSubject To\n c1: x + y + x >= 1\nBinary\n x y\nEnd\n")
    assert cl.ILP.from_file(path).constraints[0].coefs == {0: 2.0, 1: 1.0}


def test_an_lp_row_named_like_a_section_and_an_integers_section_read_as_highs_reads_them(
        tmp_path):
    """``bin:`` names a row, not the Binary section (valid files were refused); an
    Integers section after Binary holds general integers."""
    path = tmp_path / "named.lp"
    path.write_text("Maximize\n obj: x + y\nSubject To\n bin: x + y <= 10\nBounds\n x <= 5\nEnd\n")
    assert cl.ILP.from_file(path).integrality == ["continuous", "continuous"]
    path.write_text("Maximize\n obj: x + z\nSubject To\n c1: x + z <= 10\nBounds\n"
                    " 0 <= z <= 5\nBinary\n x\nIntegers\n z\nEnd\n")
    assert cl.ILP.from_file(path).integrality == ["binary", "integer"]


@pytest.mark.parametrize("head, refused", [
    ("OBJSENSE\n    MAX\n", None),                       # HiGHS: max, as written
    ("OBJSENSE\n    MAXIMUM\n", None),
    ("OBJSENSE MAXIMIZE\n", r"line 2: OBJSENSE 'MAXIMIZE', but HiGHS reads .* minimising"),
    ("OBJSENS\n    MAX\n", r"line 3: OBJSENSE 'MAX', but HiGHS reads .* minimising"),
])
def test_an_mps_objective_sense_highs_reads_otherwise_is_refused(tmp_path, head, refused):
    path = tmp_path / "sense.mps"
    path.write_text(_mps("").replace("NAME          TEST\n", "NAME          TEST\n" + head))
    if refused is None:
        assert cl.ILP.from_file(path).sense == "max"
        return
    with pytest.raises(cl.SpecError, match=refused):
        cl.ILP.from_file(path)


@pytest.mark.parametrize("old, new, read", [
    ("c1        1\n    y", "c1        1.5x      c2\n    y", None),   # a dangling row
    (" UP BND       x         4\n", " UP BND       x         4    junk\n", None),
    ("    rhs       c1        3\n", "    rhs       c1        3  obj\n", None),
    ("    rhs       c1        3\n", "    rhs       c1        0.3D+01\n", 3.0),  # Fortran
    (" UP BND       x         4\n", " UP x four\n", "value"),  # no set name: read as 0
])
def test_mps_fields_beyond_an_entry_are_refused_and_fortran_exponents_read(tmp_path, old, new,
                                                                          read):
    path = tmp_path / "fields.mps"
    path.write_text(_mps("").replace(old, new))
    if read == "value":
        with pytest.raises(cl.SpecError, match=r"'four' in the BOUNDS section is not a number"):
            cl.ILP.from_file(path)
        return
    if read is not None:
        assert cl.ILP.from_file(path).constraints[0].rhs == read
        return
    with pytest.raises(cl.SpecError, match=r"fields are no \w+ entry"):
        cl.ILP.from_file(path)


def test_a_gzip_file_highs_reads_but_python_cannot_is_refused(tmp_path):
    """Without its 8-byte trailer HiGHS reads it, and the text checks were skipped
    (a value 1.5x was read as 1.5)."""
    import gzip

    path = tmp_path / "trailer.mps.gz"
    path.write_bytes(gzip.compress(_mps("").encode())[:-8])
    with pytest.raises(cl.SpecError, match="cannot be read as text here"):
        cl.ILP.from_file(path)
    # bytes after the gzip stream, and two members: HiGHS reads both, and so do the checks
    text = _mps("").encode()
    path.write_bytes(gzip.compress(text) + b"JUNKJUNK")
    assert cl.ILP.from_file(path).shape == [2]
    path.write_bytes(gzip.compress(text[:100]) + gzip.compress(text[100:]))
    assert cl.ILP.from_file(path).shape == [2]
