"""The third adversarial review's findings (issue 24), each pinned by a test that
failed before its fix, in the style of tests/test_guarantees.py."""

import textwrap

import numpy as np
import pytest

import combolayer as cl

# -- 1 and 6. model files: nothing an ILP cannot represent is dropped ----------------

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
