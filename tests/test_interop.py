"""combolayer.interop: another library's model is a registered backend reached through a
BackendConfig, and make_solver, the layer and the losses hold no case of their own for it."""

import ast
import copy
import inspect
from pathlib import Path

import numpy as np
import pytest
import torch
from testkit import PickMin

import combolayer as cl
from combolayer.backends import registry
from combolayer.backends.registry import in_place_of_spec

pytest.importorskip("pyepo", reason="pyepo is not installed (optional extra [pyepo])")

PACKAGE = Path(cl.__file__).resolve().parent


SPEC = cl.ILP.from_matrices(shape=[3], A_eq=np.ones((1, 3)), b_eq=[1.0], integrality="binary")


def test_the_registry_lists_pyepo_and_a_wrapped_model_loads_as_its_config():
    assert registry.backends()["pyepo"].name == "pyepo"
    wrapper = cl.backends.from_pyepo(PickMin())
    config = cl.BackendConfig.load(wrapper)
    assert config.name == "pyepo" and config.options["model"] is wrapper
    solver = cl.make_solver(SPEC, backend=config)
    assert solver.backend == "pyepo:PickMin"
    assert solver.solve(np.array([[3.0, 1.0, 2.0]])).tolist() == [[0.0, 1.0, 0.0]]


def test_auto_never_picks_pyepo_and_naming_it_without_a_model_says_what_it_needs():
    assert "pyepo" not in registry.capable_backends(SPEC)
    assert cl.make_solver(SPEC).backend != "pyepo"
    with pytest.raises(cl.BackendUnavailable, match=r"'pyepo' cannot solve .*options \['model'\]"):
        cl.make_solver(SPEC, backend="pyepo")


def test_a_solver_and_a_wrapped_model_stand_in_place_of_the_spec_by_one_rule():
    solver = cl.make_solver(SPEC, backend="highs")
    assert in_place_of_spec(solver, "auto") == (SPEC, solver)
    assert in_place_of_spec(SPEC, "highs") == (SPEC, "highs")
    assert in_place_of_spec(solver, "scip") == (solver, "scip")  # a backend given: as is

    class Carrier:  # neither a Solver nor a PyEPO wrapper: the same rule applies
        spec = SPEC

    carrier = Carrier()
    assert in_place_of_spec(carrier, "auto") == (SPEC, carrier)


def test_a_pyepo_solver_with_per_call_rows_falls_back_without_the_model_option():
    solver = cl.make_solver(SPEC, backend=cl.backends.from_pyepo(PickMin()))
    costs = np.array([[3.0, 1.0, 2.0]])
    A, b = np.array([[0.0, 1.0, 0.0]]), np.array([0.0])  # forbid the cheapest
    assert solver.solve(costs, A=A, b=b).tolist() == [[0.0, 0.0, 1.0]]
    assert "model" not in solver.row_solver().config.options


def test_layer_and_losses_take_a_pyepo_model_as_any_backend():
    wrapper = cl.backends.from_pyepo(PickMin())
    layer = cl.ComboLayer(SPEC, backend=wrapper, projection="none")
    assert layer.backend_config == cl.BackendConfig.load(wrapper)
    w = torch.tensor([[3.0, 1.0, 2.0]])
    assert layer(w).tolist() == [[0.0, 1.0, 0.0]]
    loss = cl.losses.SPOPlusLoss(SPEC, backend=wrapper)
    assert loss.solver.backend == "pyepo:PickMin"
    assert loss.solver.config.name == "pyepo"  # the config, not the label
    twin = copy.deepcopy(loss)  # made again from the solver's recipe: the same model
    assert twin.solver is not loss.solver and twin.solver.backend == "pyepo:PickMin"


def _source_of(path: Path, function: str | None = None) -> str:
    text = path.read_text()
    if function is None:
        return text
    tree = ast.parse(text)
    node = next(n for n in ast.walk(tree)
                if isinstance(n, ast.FunctionDef) and n.name == function)
    return ast.get_source_segment(text, node)


@pytest.mark.parametrize("where", [
    ("backends/registry.py", "make_solver"), ("backends/registry.py", "as_solver"),
    ("layer/combo_layer.py", None), *[(f"losses/{p.name}", None)
                                      for p in sorted((PACKAGE / "losses").glob("*.py"))]])
def test_make_solver_the_layer_and_the_losses_hold_no_pyepo_case(where):
    path, function = where
    source = _source_of(PACKAGE / path, function).lower()
    for word in ("solver_for", "backend_source", "optmodel", "pyepobackend"):
        assert word not in source, f"{path} {function or ''}: {word}"


def test_the_pyepo_backend_lives_in_interop():
    module = inspect.getmodule(registry.backends()["pyepo"])
    assert module.__name__ == "combolayer.interop.pyepo"
    assert not (PACKAGE / "backends" / "pyepo.py").exists()
