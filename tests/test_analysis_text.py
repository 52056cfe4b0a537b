"""``combolayer analyze``'s text (combolayer.analysis.text): what it says projection
``"auto"`` does is what the layer does. The words are turned back into a transform
here, by their definitions, and compared with the projection a layer actually builds,
for specs with and without a known cost and with and without equations."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch

import combolayer as cl
from combolayer.analysis.text import describe
from combolayer.transforms.projection import normalize, project_mean

P = cl.problems
PICK_ONE = [cl.Constraint(coefs=[1, 1, 1], sense="==", rhs=1)]
AT_MOST_TWO = [cl.Constraint(coefs=[1, 2, 1], sense="<=", rhs=2)]

SPECS = {
    "topk": P.TopK(n=4, k=2),
    "grid path": P.ShortestPath.grid(3, 3),
    "no equation": cl.ILP(shape=[3], constraints=AT_MOST_TWO),
    "equation, known on outputs, min": cl.ILP(shape=[3], known_cost=[10, 0, 0],
                                              constraints=PICK_ONE),
    "equation, known on outputs, max": cl.ILP(shape=[3], known_cost=[10, -2, 0],
                                              constraints=PICK_ONE, sense="max"),
    "no equation, known on outputs, max": cl.ILP(shape=[3], known_cost=[1, 0, 3],
                                                 constraints=AT_MOST_TWO, sense="max"),
    "equation, known on an auxiliary": cl.ILP(
        shape=[3], num_aux=1, known_cost=[0, 0, 0, 1.5],
        constraints=[cl.Constraint(coefs=[1, 1, 0, 0], sense="==", rhs=1),
                     cl.Constraint(coefs=[0, 1, 1, 1], sense="<=", rhs=2)]),
    # a hull of dimension 1 and a small known cost: the text said "subtract the mean,
    # then rescale to norm 0.979", on w
    "one dimension, small known on outputs": cl.ILP(
        shape=[2], known_cost=[0.1, 0],
        constraints=[cl.Constraint(coefs=[1, 1], sense="==", rhs=1)]),
    "no equation, known on an auxiliary": cl.ILP(
        shape=[2], num_aux=1, known_cost=[0, 0, -3.0],
        constraints=[cl.Constraint(coefs=[1, 1, 1], sense="==", rhs=1)]),
}


def _auto_line(spec, exact: bool) -> tuple[str, str]:
    """The projection's name and its description, from ``describe``'s last line."""
    text = describe(spec, cl.analyze(spec, exact=exact))
    match = re.search(r'^projection "([\w-]+)": (.*)$', text, flags=re.MULTILINE)
    assert match, text
    return match.group(1), match.group(2)


def _transform_from_words(words: str, spec, hull) -> Callable:
    """The transform the words describe, built from their definitions."""
    n = hull.num_outputs
    normals = torch.tensor(hull.normals, dtype=torch.float64)
    steps = []
    if "subtract the mean" in words:
        steps.append(project_mean)
    match = re.search(r"remove the (\d+) normal direction", words)
    if match:
        assert int(match.group(1)) == len(hull.normals)
        steps.append(lambda v: v - (v @ normals.T) @ normals)
    if re.search(r"\bnormalise\b", words):
        steps.append(normalize)
    if words.startswith("nothing"):
        assert not steps
    else:
        assert steps, words

    def flat(v):
        for step in steps:
            v = step(v)
        return v

    if words.startswith("on the total cost w + known_cost"):
        # the objective in the spec's sense is <w + k_y, y> + <k_aux, aux>
        known = torch.tensor(spec.known_cost[:n], dtype=torch.float64)
        return lambda w: (flat(w.reshape(-1, n) + known) - known).reshape(w.shape)
    return lambda w: flat(w.reshape(-1, n)).reshape(w.shape)


@pytest.mark.filterwarnings("ignore::UserWarning")  # the layer announces its rule
@pytest.mark.parametrize("exact", [False, True], ids=["lp", "exact"])
@pytest.mark.parametrize("name", list(SPECS))
def test_the_auto_text_is_the_layers_projection(name, exact):
    spec = SPECS[name]
    projection, words = _auto_line(spec, exact)
    assert projection == ("auto-exact" if exact else "auto")
    layer = cl.ComboLayer(spec, projection=projection)
    w = torch.randn(5, *spec.cost_shape, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(3))
    expected = _transform_from_words(words, spec, cl.analyze(spec, exact=exact))
    torch.testing.assert_close(layer.projection(w), expected(w), rtol=1e-9, atol=1e-9)
    alias = re.search(r'\(= "(\w+)"\)', words)
    if alias:  # a plain projection it equals: the layer accepts it, and it gives the same
        other = cl.ComboLayer(spec, projection=alias.group(1))
        torch.testing.assert_close(other.projection(w), layer.projection(w))


def test_the_auto_text_covers_every_case_above():
    """The specs above reach each kind of description (so the comparison is not vacuous)."""
    lines = {name: _auto_line(spec, False)[1] for name, spec in SPECS.items()}
    assert '(= "std")' in lines["topk"]
    assert '(= "norm")' in lines["no equation"]
    assert re.search(r"remove the \d+ normal directions .*, then normalise", lines["grid path"])
    known = [lines[name] for name in SPECS if "known" in name]
    # with a known cost the text never names a projection the layer refuses for it
    assert not any(re.search(r'"(std|norm|mean)"', line) for line in known)
