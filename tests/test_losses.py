"""What every loss must do, held by tests parametrised over the registry of losses
(`combolayer.losses.base.LOSSES`), so that a loss added later is tested without a line
of its own: it is registered, takes numpy like torch, names what it expects, refuses a
target that is not finite, and clips the negative costs of its own steps."""

import inspect
import warnings

import numpy as np
import pytest
import torch
from testkit import loss_inputs as _inputs
from testkit import loss_target_name as _target_name

import combolayer as cl
import combolayer.losses as losses
from combolayer.backends.solver import inner
from combolayer.losses.base import LOSSES, LossInputs

# -- the registry --------------------------------------------------------------------------


def test_every_loss_is_in_the_registry():
    exported = {name for name in cl.losses.__all__ if name.endswith("Loss")}
    assert exported and exported <= set(LOSSES), exported - set(LOSSES)


# -- a target that is not finite -----------------------------------------------------------


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("loss_name", sorted(LOSSES))
def test_every_loss_refuses_a_target_that_is_not_finite(loss_name, bad):
    # Before: FY, FY-multiplicative, NCE, CMAP and RFY returned a NaN loss silently.
    spec = cl.problems.TopK(6, 2)
    loss = LOSSES[loss_name](spec)
    cost_pred, cost_true, y_true = _inputs(spec, "highs")
    name = _target_name(LOSSES[loss_name])
    target = (y_true if name == "y_true" else cost_true).clone()
    target[1, 3] = bad
    with pytest.raises(ValueError, match=rf"{loss_name}: {name} must be finite, got "
                                         rf"{bad} at index \(1, 3\)"):
        loss(cost_pred, target)


def test_fenchel_young_multiplicative_refuses_a_nan_target_too():
    spec = cl.problems.TopK(6, 2)
    loss = cl.losses.FenchelYoungLoss(spec, perturbation="multiplicative")
    cost_pred, _, y_true = _inputs(spec, "highs")
    y_true[0, 0] = float("nan")
    with pytest.raises(ValueError, match="y_true must be finite"):
        loss(cost_pred.abs(), y_true)


# -- SPO+, PG and Fenchel-Young on grid shortest paths with positive costs -----------------


GRID = cl.problems.ShortestPath.grid(4, 4)


def _grid_costs(seed=0):
    gen = torch.Generator().manual_seed(seed)
    cost_pred = torch.rand(8, 4, 4, generator=gen, dtype=torch.float64) * 0.1
    cost_true = torch.rand(8, 4, 4, generator=gen, dtype=torch.float64) + 0.5
    return cost_pred, cost_true


@pytest.mark.parametrize("case", ["spo", "pg", "pg_two_sides", "fy"])
def test_losses_clip_their_own_negative_costs_with_one_warning(case):
    # Before: Dijkstra raised "make the costs non-negative" though every cost was positive.
    cost_pred, cost_true = _grid_costs()
    y_true = cl.make_solver(GRID).solve(cost_true)
    loss, target, step = {
        "spo": (cl.losses.SPOPlusLoss(GRID), cost_true, "SPOPlusLoss's own step 2 c_hat - c"),
        "pg": (cl.losses.PGLoss(GRID, sigma=1.0), cost_true, "PGLoss's own step c_hat - sigma c"),
        "pg_two_sides": (cl.losses.PGLoss(GRID, sigma=1.0, two_sides=True), cost_true,
                         "PGLoss's own step c_hat - sigma c"),
        "fy": (cl.losses.FenchelYoungLoss(GRID, sigma=1.0), y_true,
               "FenchelYoungLoss's own step c - sigma Z"),
    }[case]
    with pytest.warns(RuntimeWarning, match=rf"{step} made some costs negative.*set to 0"):
        value = loss(cost_pred, target)
    assert torch.isfinite(value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per loss and step
        loss(cost_pred, target)
    # a negative prediction is the user's: refused as the layer refuses it, naming it
    with pytest.raises(ValueError, match=r"negative costs \(cost_pred, instance 0"):
        loss(-cost_pred - 0.01, target)


def test_spo_plus_solves_its_clipped_step_and_takes_the_loss_on_it():
    """Taken on 2 c_hat - c as it was, the loss went below 0 (-1 on a 3 x 3 grid, where
    the regret is 0): y~ minimises the clipped costs, not those. Its gradient stays
    2 (y* - y~)."""
    cost_pred, cost_true = _grid_costs(1)
    solver = cl.make_solver(GRID)
    cost_pred.requires_grad_()
    with pytest.warns(RuntimeWarning):
        value = cl.losses.SPOPlusLoss(GRID, reduction="none")(cost_pred, cost_true)
    shifted = (2 * cost_pred - cost_true).detach()
    y_star, y_tilde = solver.solve(cost_true), solver.solve(shifted.clamp_min(0))
    torch.testing.assert_close(value, inner(shifted.clamp_min(0), y_star - y_tilde, 2))
    value.sum().backward()
    torch.testing.assert_close(cost_pred.grad, 2 * (y_star - y_tilde))
    grid = cl.problems.ShortestPath.grid(3, 3, neighborhood=4)
    c = torch.tensor([[0.0, 3, 0], [0, 3, 0], [3, 3, 0]], dtype=torch.float64)[None]
    c_hat = torch.tensor([[0.0, 3, 1], [1, 0, 0], [1, 1, 0]], dtype=torch.float64)[None]
    with pytest.warns(RuntimeWarning):
        assert float(cl.losses.SPOPlusLoss(grid)(c_hat, c)) >= 0.0


# -- numpy into every loss -----------------------------------------------------------------


def _loss_classes():
    # the package also exports data classes (BindingCones): the losses are the *Loss names
    found = [getattr(losses, name) for name in losses.__all__ if name.endswith("Loss")]
    return [cls for cls in found if isinstance(cls, type)]


def test_every_loss_class_shares_the_input_conversion():
    assert _loss_classes(), "no loss classes found"
    for cls in _loss_classes():
        assert issubclass(cls, LossInputs), cls.__name__


SPEC = cl.problems.TopK(n=5, k=2)


def _call(cls, cost_pred, cost_true, y_true):
    if cls is losses.CaVELoss:
        pytest.importorskip("gurobipy")
    pool = cl.make_solver(SPEC).solve(np.eye(5))
    loss = cls(SPEC, pool=pool) if "pool" in inspect.signature(cls).parameters else cls(SPEC)
    second = inspect.signature(cls.__call__).parameters
    target = cost_true if "cost_true" in second else y_true
    return loss(cost_pred, target)


@pytest.mark.parametrize("cls", _loss_classes(), ids=lambda cls: cls.__name__)
def test_every_loss_takes_numpy_like_torch(cls):
    rng = np.random.default_rng(0)
    cost_pred, cost_true = rng.normal(size=(4, 5)), rng.normal(size=(4, 5))
    y_true = cl.make_solver(SPEC).solve(cost_true)
    torch.manual_seed(0)
    from_numpy = _call(cls, cost_pred, cost_true, y_true)
    torch.manual_seed(0)
    from_torch = _call(cls, torch.from_numpy(cost_pred), torch.from_numpy(cost_true),
                       torch.from_numpy(y_true))
    assert isinstance(from_numpy, torch.Tensor)
    assert torch.allclose(from_numpy, from_torch)


@pytest.mark.parametrize("cls", _loss_classes(), ids=lambda cls: cls.__name__)
def test_every_loss_takes_integer_tensors_as_numbers(cls):
    # integer and boolean tensors stopped in torch's "linalg.vector_norm: Expected a
    # floating point or complex tensor as input. Got Long" (numpy's were converted)
    rng = np.random.default_rng(0)
    cost_pred, cost_true = rng.integers(-3, 4, size=(4, 5)), rng.integers(-3, 4, size=(4, 5))
    y_true = cl.make_solver(SPEC).solve(cost_true)
    torch.manual_seed(0)
    as_float = _call(cls, torch.from_numpy(cost_pred).double(),
                     torch.from_numpy(cost_true).double(), torch.from_numpy(y_true))
    torch.manual_seed(0)
    as_integer = _call(cls, torch.from_numpy(cost_pred), torch.from_numpy(cost_true),
                       torch.from_numpy(y_true).bool())
    torch.testing.assert_close(as_integer, as_float.to(as_integer.dtype))


def test_a_loss_names_what_it_expects():
    with pytest.raises(TypeError, match="SPOPlusLoss: cost_pred must be a torch.Tensor or a "
                                        "numpy array, got list"):
        losses.SPOPlusLoss(SPEC)([[0.0] * 5], torch.zeros(1, 5))
    with pytest.raises(TypeError, match="NCELoss: y_true must be a torch.Tensor or a numpy "
                                        "array, got str"):
        losses.NCELoss(SPEC)(torch.zeros(1, 5), "y")


def test_a_reduction_set_after_building_is_checked_when_used():
    loss = cl.losses.SPOPlusLoss(cl.problems.TopK(5, 2))
    loss.reduction = "avg"  # returned the losses unreduced, as "none"
    with pytest.raises(cl.ComboLayerError, match="reduction must be one of"):
        loss(torch.randn(3, 5), torch.randn(3, 5))


@pytest.mark.parametrize("make", [
    lambda spec: cl.losses.PGLoss(spec, sigma=float("inf")),
    lambda spec: cl.losses.RegularizedFenchelYoungLoss(spec, lam=float("inf")),
    lambda spec: cl.losses.FenchelYoungLoss(spec, sigma=float("inf")),
], ids=["pg", "rfy", "fy"])
def test_losses_refuse_infinite_hyperparameters(make):
    with pytest.raises(cl.ComboLayerError, match="finite"):  # NaN losses before
        make(cl.problems.TopK(5, 2))


def test_fenchel_young_names_itself_in_its_parameters_errors():
    with pytest.raises(cl.ComboLayerError, match=r"^invalid FenchelYoungLoss parameters: "
                                                 r"sigma: FenchelYoungLoss sigma must be > 0"):
        cl.losses.FenchelYoungLoss(cl.problems.TopK(5, 2), sigma=0)


@pytest.mark.parametrize("make, message", [
    (lambda spec: cl.losses.RegularizedFenchelYoungLoss(spec, tol=float("nan")),
     "RegularizedFenchelYoungLoss tol must be a finite number >= 0, got nan"),
    (lambda spec: cl.losses.PairwiseLTRLoss(spec, margin=-1.0),
     "PairwiseLTRLoss margin must be a finite number >= 0, got -1.0"),
])
def test_losses_name_a_setting_that_is_no_finite_number(make, message):
    """RFY's tol=nan was taken; the settings are checked by one check_number, which
    names the loss."""
    with pytest.raises(cl.ComboLayerError, match=message):
        make(cl.problems.TopK(5, 2))
    # a one-element tensor is a number (the listwise loss refused one)
    spec = cl.problems.TopK(5, 2)
    assert cl.losses.ListwiseLTRLoss(spec, temperature=torch.tensor(0.5)).temperature == 0.5
