"""Adding a problem, an estimator or a backend is one definition in one file: each is
written here, in the test file, and used through the public API by name."""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
import pytest
import torch
import yaml
from pydantic import Field, model_validator

import combolayer as cl
from combolayer.backends import Backend, Capability, FunctionKernel, Tier, registry
from combolayer.estimators import Estimator
from combolayer.specs.base import ILP, Sense, Spec, register_spec

# -- a problem ---------------------------------------------------------------------------


@register_spec
class PickOne(Spec):
    """A one-hot vector ``(n,)``: the single cheapest item (test-only problem)."""

    kind: Literal["test_pick_one"] = "test_pick_one"
    n: int
    sense: Sense = "min"

    _label_fields: ClassVar[tuple[str, ...]] = ("n",)

    @model_validator(mode="after")
    def _check(self) -> PickOne:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        return self

    @property
    def cost_shape(self) -> tuple[int, ...]:
        return (self.n,)

    def to_ilp(self) -> ILP:
        return ILP.from_matrices(shape=[self.n], A_eq=np.ones((1, self.n)), b_eq=[1.0],
                                 sense=self.sense)


def test_a_problem_defined_here_loads_from_yaml_and_solves():
    spec = PickOne(n=4)
    text = yaml.safe_dump(spec.model_dump())
    loaded = cl.load_spec(text)
    assert loaded == spec and isinstance(loaded, PickOne)
    assert cl.load_spec(spec.model_dump_json()) == spec
    costs = np.array([[3.0, 1.0, 2.0, 5.0], [0.5, 1.0, 2.0, -1.0]])
    y = cl.make_solver(text).solve(costs)
    np.testing.assert_array_equal(y, [[0, 1, 0, 0], [0, 0, 0, 1]])
    layer = cl.ComboLayer({"kind": "test_pick_one", "n": 4, "sense": "max"}, projection="none")
    assert layer(torch.tensor([3.0, 1.0, 2.0, 5.0])).tolist() == [0, 0, 0, 1]
    with pytest.raises(cl.SpecError, match="n must be >= 1"):
        cl.load_spec({"kind": "test_pick_one", "n": 0})


# -- an estimator ------------------------------------------------------------------------


class ScaledIdentity(Estimator):
    """Identity scaled by ``scale``: ``dL/dc = -scale * dL/dy`` (test-only estimator)."""

    name: ClassVar[str] = "test_scaled_identity"
    differentiable_backward: ClassVar[bool] = True

    scale: float = Field(default=1.0, gt=0)

    def forward(self, solver, costs, *, target, training):
        return solver.solve_min(costs), ()

    def backward(self, solver, grad, costs):
        return -self.scale * grad


@pytest.mark.parametrize("method", ["test_scaled_identity",
                                    {"name": "test_scaled_identity", "scale": 3.0},
                                    ScaledIdentity(scale=3.0), ScaledIdentity(3.0)])
def test_an_estimator_defined_here_is_found_by_name(method):
    spec = cl.problems.TopK(n=4, k=2, sense="min")
    layer = cl.ComboLayer(spec, method=method, projection="none")
    w = torch.tensor([3.0, 1.0, 2.0, 5.0], requires_grad=True)
    y = layer(w)
    assert y.tolist() == [0.0, 1.0, 1.0, 0.0]
    grad = torch.tensor([1.0, -2.0, 0.5, 4.0])
    y.backward(grad)
    scale = 1.0 if method == "test_scaled_identity" else 3.0
    torch.testing.assert_close(w.grad, -scale * grad)
    assert layer.method == ScaledIdentity(scale=scale)


def test_an_estimator_validates_its_parameters():
    with pytest.raises(ValueError, match="invalid ScaledIdentity parameters: scale"):
        cl.ComboLayer(cl.problems.TopK(n=4, k=2), method={"name": "test_scaled_identity",
                                                          "scale": -1})
    with pytest.raises(ValueError, match="invalid ScaledIdentity parameters: lam"):
        ScaledIdentity(lam=2.0)


# -- a backend ---------------------------------------------------------------------------


class ArgminBackend(Backend):
    """PickOne by ``argmin``, batched in numpy (test-only backend)."""

    name: ClassVar[str] = "test_argmin"
    requires: ClassVar[tuple[str, ...]] = ("numpy",)
    capabilities: ClassVar[Capability] = Capability.BATCHED
    kinds: ClassVar[frozenset[str]] = frozenset({"test_pick_one"})
    native_tier: ClassVar[int] = Tier.SPECIALISED

    def compile(self, spec, config):
        def solve(costs: np.ndarray) -> np.ndarray:
            return np.eye(spec.n)[np.argmin(costs, axis=1)]

        return FunctionKernel(solve)


@pytest.fixture
def argmin_backend(monkeypatch):
    registry.backends()
    monkeypatch.setitem(registry._REGISTRY, ArgminBackend.name, ArgminBackend)


def test_a_backend_defined_here_declares_what_it_solves(argmin_backend):
    spec = PickOne(n=3)
    assert registry.capable_backends(spec)[0] == "test_argmin"
    solver = cl.make_solver(spec)
    assert solver.backend == "test_argmin"
    np.testing.assert_array_equal(solver.solve(np.array([2.0, -1.0, 0.0])), [0, 1, 0])
    np.testing.assert_array_equal(cl.make_solver(PickOne(n=3, sense="max"), "test_argmin")
                                  .solve(np.array([2.0, -1.0, 0.0])), [1, 0, 0])
    refusal = r"'test_argmin' cannot solve TopK.*it solves only \['test_pick_one'\]"
    with pytest.raises(cl.BackendUnavailable, match=refusal):
        cl.make_solver(cl.problems.TopK(n=3, k=1), "test_argmin")


class WordsBackend:
    """A class that is not a `Backend` (as plugins of an early draft were written)."""

    name: ClassVar[str] = "test_words"
    capabilities: ClassVar[frozenset[str]] = frozenset({"linear", "test_pick_one"})


def test_a_backend_that_is_not_a_backend_subclass_is_refused_by_name():
    with pytest.raises(TypeError, match="subclass of combolayer.backends.Backend.*WordsBackend"):
        registry.register_backend(WordsBackend)
    assert "test_words" not in registry.backends()
