"""Training with a known cost: the default layer ("auto") and ``combolayer train``'s
defaults learn on a dispatch model (drivers x requests, each used at most once, at
most K assignments, pick-up costs predicted per pair, each request's fare a known
negative cost)."""

from __future__ import annotations

import runpy
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import combolayer as cl
from combolayer.data import Data
from combolayer.training.loop import fit, load_config, run

DRIVERS, REQUESTS, MAX_ASSIGNED, FEATURES = 4, 5, 3, 3
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "dispatch.py"


def dispatch_ilp(known_cost=None) -> cl.ILP:
    """x[d, r] = 1 when driver d takes request r; each at most once, at most K in all."""
    index = np.arange(DRIVERS * REQUESTS).reshape(DRIVERS, REQUESTS)
    rows = [*index, *index.T]
    constraints = [cl.Constraint(coefs={int(j): 1.0 for j in row}, sense="<=", rhs=1)
                   for row in rows]
    constraints.append(cl.Constraint(coefs=[1.0] * index.size, sense="<=", rhs=MAX_ASSIGNED))
    return cl.ILP(shape=[DRIVERS, REQUESTS], constraints=constraints, known_cost=known_cost)


def dispatch_data(num: int, seed: int = 0):
    """Per-pair features (num, D, R, p), true pick-up costs (num, D, R) and fares (R,)."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(num, DRIVERS, REQUESTS, FEATURES))
    weights = rng.normal(size=FEATURES)
    pickup = 1.0 + ((features @ weights) / np.sqrt(FEATURES) + 3.0) ** 2 / 3.5
    fares = rng.uniform(2.0, 6.0, size=REQUESTS)
    return (torch.tensor(features, dtype=torch.float32), torch.tensor(pickup), fares)


def pair_model() -> torch.nn.Module:
    """One MLP shared by every driver-request pair: (..., p) -> (...)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 1), torch.nn.Flatten(-2))


def test_auto_with_a_known_cost_on_the_outputs_normalises_the_total_and_warns():
    fares = np.linspace(1.0, 3.0, REQUESTS)
    known = -np.tile(fares, (DRIVERS, 1))
    spec = dispatch_ilp(known.ravel().tolist())
    with pytest.warns(UserWarning, match="normalises the total cost w \\+ known_cost"):
        layer = cl.ComboLayer(spec, backend="highs")
    w = torch.rand(6, DRIVERS, REQUESTS, dtype=torch.float64, generator=torch.Generator()
                   .manual_seed(1)) * 4
    projected = layer.projection(w)
    total = projected + torch.tensor(known)
    # the solver sees a unit-norm total cost whatever w's scale ...
    assert torch.allclose(torch.linalg.vector_norm(total.flatten(1), dim=1),
                          torch.ones(6, dtype=torch.float64))
    assert torch.allclose(layer.projection(10.0 * w + 9.0 * torch.tensor(known)), projected)
    # ... and the solution is the one of w itself
    exact = cl.make_solver(spec, backend="highs").solve(w)
    assert torch.equal(layer(w), exact)


def _normalized_regret(solver, model, features, costs) -> float:
    with torch.no_grad():
        y = solver.solve(model(features).double())
    return float(cl.metrics.normalized_regret(solver, costs, y))


def test_the_default_layer_learns_the_dispatch_model_with_a_known_fare():
    features, pickup, fares = dispatch_data(160)
    known = -np.tile(fares, (DRIVERS, 1))
    spec = dispatch_ilp(known.ravel().tolist())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        layer = cl.ComboLayer(spec)  # the defaults: identity, "auto"
    model = pair_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-2)
    total = pickup + torch.tensor(known)  # the decision's true cost per pair
    test = slice(120, None)
    before = _normalized_regret(layer.solver, model, features[test], pickup[test])
    # the hull projection alone (the rule before) gets back to about `before` here: the
    # prediction grows along the true cost and the fare stops counting
    for _ in range(5):
        for start in range(0, 120, 20):
            batch = slice(start, start + 20)
            y = layer(model(features[batch]).double())
            loss = (total[batch] * y).sum(dim=(1, 2)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    after = _normalized_regret(layer.solver, model, features[test], pickup[test])
    assert after < 0.5 * before, (before, after)


def test_the_known_cost_warning_names_what_learns_the_decisions():
    spec = dispatch_ilp((-np.ones(DRIVERS * REQUESTS)).tolist())
    with pytest.warns(UserWarning, match="takes larger learning rates than SPO\\+ .*; to "
                      "learn the decisions directly, train on the optimal ones \\(a "
                      "Hamming loss\\) or with cl.losses.SPOPlusLoss"):
        cl.ComboLayer(spec, backend="highs")


def test_the_dispatch_example_trains_its_default_layer_on_per_call_fares():
    main = runpy.run_path(str(EXAMPLE))["main"]
    result = main(epochs=2, num_train=60, num_test=40)
    assert result["identity"] < 0.75 * result["before"], result
    assert result["spo+"] < 0.75 * result["before"], result
    # "auto" on w + known_cost is the layer given the sum by hand: the same training
    assert result["by hand"] == pytest.approx(result["identity"], abs=2e-3), result


def test_identity_under_a_linear_loss_turns_the_total_cost_towards_the_true_one():
    """What the warning says Identity learns through "auto" with a known cost on the
    outputs: the gradient of -<c, (w + k) / ||w + k||>, whatever the solution."""
    known = torch.tensor(-np.tile(np.linspace(1.0, 3.0, REQUESTS), (DRIVERS, 1)))
    spec = dispatch_ilp(known.flatten().tolist())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        layer = cl.ComboLayer(spec, backend="highs")
    generator = torch.Generator().manual_seed(2)
    w = torch.rand(5, DRIVERS, REQUESTS, dtype=torch.float64, generator=generator) * 4
    true = torch.rand(5, DRIVERS, REQUESTS, dtype=torch.float64, generator=generator) * 4
    w.requires_grad_(True)
    (true * layer(w)).sum().backward()
    direct = w.detach().clone().requires_grad_(True)
    total = (direct + known).flatten(1)
    (-(true.flatten(1) * total / total.norm(dim=1, keepdim=True)).sum()).backward()
    assert torch.allclose(w.grad, direct.grad)


# -- solve_ratio < 1: the pool keeps whole solutions, and training seeds it with them ----

#: Two outputs and two auxiliaries that the known cost weighs: z0 >= y0 + y1 - 1 costs
#: 0.7, z1 <= y0 earns 0.9, so the pool keeps whole solutions concat(y, aux).
AUX_KNOWN = {"kind": "ilp", "shape": [2], "num_aux": 2, "known_cost": [0, 0, 0.7, -0.9],
             "constraints": [{"coefs": [1, 1, -1, 0], "sense": "<=", "rhs": 1},
                             {"coefs": [-1, 0, 0, 1], "sense": "<=", "rhs": 0}]}


def _whole_optima(spec, costs, known=None) -> set[tuple[float, ...]]:
    y, aux = cl.make_solver(spec).solve(costs, return_aux=True, known_cost=known)
    return {tuple(row) for row in torch.cat([y, aux], dim=1).double().tolist()}


@pytest.mark.parametrize("loss", ["spo+", "regret"])
def test_fit_with_solve_ratio_below_one_seeds_the_pool_with_whole_optima(loss):
    spec = cl.load_spec(AUX_KNOWN)
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(16, 3, generator=generator)
    costs = features @ torch.randn(3, 2, generator=generator)
    data = Data(features, costs, cl.make_solver(spec).solve(costs), spec)
    layer = cl.ComboLayer(spec, solve_ratio=0.5, generator=torch.Generator().manual_seed(0))
    history = fit(layer, data, data, loss=loss, epochs=2)
    assert len(history.regret) == 2 and all(np.isfinite(history.regret))
    assert layer.pool.solutions.shape[1] == spec.num_vars
    pooled = {tuple(row) for row in layer.pool.solutions.tolist()}
    assert _whole_optima(spec, costs) <= pooled


@pytest.mark.parametrize("loss, method", [("spo+", "identity"), ("regret", "blackbox")])
def test_train_with_solve_ratio_below_one_reads_npz_data_with_a_known_cost(tmp_path, loss,
                                                                          method):
    spec = cl.load_spec(AUX_KNOWN)
    rng = np.random.default_rng(0)
    features = rng.normal(size=(30, 3))
    costs = features @ rng.normal(size=(3, 2))
    known = np.zeros((30, spec.num_vars))
    known[:, 3] = -rng.uniform(0.0, 2.0, size=30)  # each instance's own reward on z1
    np.savez(tmp_path / "data.npz", features=features, costs=costs, known_cost=known)
    config = load_config({"problem": AUX_KNOWN, "data": {"npz": str(tmp_path / "data.npz")},
                          "layer": {"solve_ratio": 0.5, "method": method}, "loss": loss,
                          "epochs": 2, "num_train": 20, "num_test": 10,
                          "out": str(tmp_path / "run")})
    history, _ = run(config)
    assert len(history.regret) == 2 and all(np.isfinite(history.regret))


def test_train_with_the_default_spo_plus_says_nothing_of_identity(tmp_path):
    """A known cost on the auxiliaries and no loss named: `combolayer train` trains with
    SPO+, yet the layer it builds warned that the regret does not train Identity."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(20, 3))
    np.savez(tmp_path / "data.npz", features=features,
             costs=features @ rng.normal(size=(3, 2)))
    config = load_config({"problem": AUX_KNOWN, "data": {"npz": str(tmp_path / "data.npz")},
                          "epochs": 1, "out": str(tmp_path / "run")})
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        run(config)
