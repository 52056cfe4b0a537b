"""Copies of everything a model holds: layers, losses, estimators and pools survive
``copy.deepcopy``, ``pickle`` and ``torch.save``/``torch.load`` (and so DataLoader
workers), with every registered backend, and a copy answers as the original does."""

import copy
import io
import pickle

import numpy as np
import pytest
import torch
from testkit import BACKEND_SPECS, SMALL_SPECS, backend_cases, backend_params, knapsack_ilp
from testkit import loss_inputs as _inputs
from testkit import loss_target_name as _target_name
from testkit import skip_unless_installed as _available
from testkit import skip_unless_installed as available

import combolayer as cl
from combolayer.backends.registry import backends, missing_packages
from combolayer.estimators.base import METHODS
from combolayer.losses.base import LOSSES
from combolayer.pool import SolutionPool

# -- solution pools ------------------------------------------------------------------------


def test_a_pool_pickles_and_deep_copies_without_its_lock():
    import copy
    import pickle

    pool = SolutionPool(cl.problems.TopK(4, 2), max_size=3)
    pool.seed(torch.tensor([1.0, 1, 0, 0]))
    pool.add(torch.tensor([[0.0, 1, 1, 0], [0.0, 0, 1, 1]]))
    for twin in (copy.deepcopy(pool), pickle.loads(pickle.dumps(pool))):
        assert torch.equal(twin.solutions, pool.solutions) and twin.spec_label == pool.spec_label
        twin.add(torch.tensor([1.0, 0, 0, 1]))  # evicts the oldest unseeded row, as pool would
        assert {tuple(r) for r in twin.solutions.tolist()} == {
            (1, 1, 0, 0), (0, 0, 1, 1), (1, 0, 0, 1)}
        with pytest.raises(ValueError, match="not of TopK"):
            twin.bind(cl.problems.TopK(4, 3))


# -- losses and estimators -----------------------------------------------------------------


@pytest.mark.parametrize(("backend", "executor"),
                         [(name, "serial") for name in sorted(BACKEND_SPECS)]
                         + [("highs", "thread")])
@pytest.mark.parametrize("loss_name", sorted(LOSSES))
def test_every_loss_deepcopies_pickles_and_saves(loss_name, backend, executor):
    # Before: NCE, CMAP, the LTR losses, PG, RFY and CaVE raised
    # TypeError: cannot pickle '_thread._local' (they held the compiled solver).
    _available(backend)
    spec = BACKEND_SPECS[backend]()
    config = {"name": backend, "executor": executor,
              "workers": 2 if executor == "thread" else 1}
    loss = LOSSES[loss_name](spec, backend=config)
    cost_pred, cost_true, y_true = _inputs(spec, backend)
    target = y_true if _target_name(LOSSES[loss_name]) == "y_true" else cost_true

    def value(fn):
        torch.manual_seed(0)  # for the losses that sample
        return fn(cost_pred, target)

    expected = value(loss)
    buffer = io.BytesIO()
    torch.save({"loss": loss}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)["loss"]
    for twin in (copy.deepcopy(loss), pickle.loads(pickle.dumps(loss)), loaded):
        assert twin.solver is not loss.solver and twin.solver.backend == loss.solver.backend
        torch.testing.assert_close(value(twin), expected)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_estimator_in_a_layer_deepcopies_pickles_and_saves(method):
    spec = cl.problems.TopK(6, 2)
    layer = cl.ComboLayer(spec, method=method, projection="none")
    w = torch.randn(4, 6, dtype=torch.float64)
    y_true = cl.make_solver(spec).solve(torch.randn(4, 6, dtype=torch.float64))
    layer.train()(w, target=y_true)
    expected = layer.eval()(w, target=y_true)
    buffer = io.BytesIO()
    torch.save(layer, buffer)
    buffer.seek(0)
    for twin in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer)),
                 torch.load(buffer, weights_only=False)):
        assert twin.method == layer.method
        torch.testing.assert_close(twin.eval()(w, target=y_true), expected)
        grad_w = w.clone().requires_grad_()
        (twin.train()(grad_w, target=y_true) * torch.randn(4, 6, dtype=torch.float64)
         ).sum().backward()
        assert grad_w.grad is not None and torch.isfinite(grad_w.grad).all()


# -- layers, with every backend and executor, and in DataLoader workers --------------------


# Every registered backend, each on the first of these problems it accepts.
BACKEND_CASES = backend_cases(knapsack_ilp, *SMALL_SPECS)


@pytest.mark.parametrize("name", sorted(BACKEND_CASES))
@pytest.mark.parametrize("executor", ["serial", "thread", "process"])
def test_a_layer_deepcopies_pickles_and_saves_with_every_backend(name, executor):
    available(name)
    make_spec = BACKEND_CASES[name]
    spec = make_spec()
    backend = {"name": name, "executor": executor, "workers": 2 if executor != "serial" else 1}
    model = torch.nn.Sequential(torch.nn.Linear(3, int(np.prod(spec.cost_shape))),
                                torch.nn.Unflatten(-1, spec.cost_shape),
                                cl.ComboLayer(spec, backend=backend, projection="auto"))
    x = torch.randn(4, 3)
    y = model(x)
    twin = copy.deepcopy(model)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    restored = pickle.loads(pickle.dumps(model))
    for other in (twin, loaded, restored):
        torch.testing.assert_close(other(x), y)
    # state_dict holds parameters only, never solver state.
    assert set(model.state_dict()) == {"0.weight", "0.bias"}


@pytest.mark.parametrize("name", sorted(BACKEND_CASES))
def test_a_solver_deepcopies_and_pickles_as_its_recipe_with_every_backend(name):
    """A solver copies as its spec and backend config and is made again: the copy has
    its own kernel (nothing native shared), the same backend, the same answers."""
    available(name)
    spec = BACKEND_CASES[name]()
    solver = cl.make_solver(spec, {"name": name, "executor": "thread", "workers": 2})
    costs = np.random.default_rng(0).normal(size=(4, *spec.cost_shape))
    y = solver.solve(costs)
    for other in (copy.deepcopy(solver), pickle.loads(pickle.dumps(solver))):
        assert type(other) is cl.backends.Solver and other.kernel is not solver.kernel
        assert other.backend == solver.backend and other.config == solver.config
        np.testing.assert_array_equal(other.solve(costs), y)


def test_a_solver_built_by_hand_says_why_it_cannot_be_copied():
    spec = knapsack_ilp()
    solver = cl.backends.Solver(spec, cl.make_solver(spec, "highs").kernel, "highs",
                                cl.BackendConfig())
    with pytest.raises(TypeError, match="built by hand, not by make_solver"):
        copy.deepcopy(solver)


def test_a_loss_pickled_with_the_recipe_it_kept_before_still_loads():
    """Losses used to pickle a recipe (spec, config) and a race outcome of their own
    instead of their solver; such a pickle loads, with its solver made again."""
    spec = knapsack_ilp()
    loss = cl.losses.SPOPlusLoss(spec, backend="highs")
    state = loss.__getstate__()
    solver = state.pop("_solver")
    state["_solver_recipe"], state["_race"] = (spec, solver.config), None
    old = cl.losses.SPOPlusLoss.__new__(cl.losses.SPOPlusLoss)
    old.__setstate__(state)
    assert old.solver is not solver and old.solver.backend == "highs"
    costs = torch.rand(3, *spec.cost_shape)
    torch.testing.assert_close(old.solver.solve(costs), solver.solve(costs))


def test_closing_a_solution_cache_closes_its_exact_solver(monkeypatch):
    exact = cl.make_solver(knapsack_ilp(), "highs")
    closed = []
    monkeypatch.setattr(exact, "close", lambda: closed.append(True))
    cl.pool.CachedSolver(exact, 0.5, SolutionPool(exact.spec)).close()
    assert closed == [True]


def test_a_solution_cache_copies_with_its_pool_and_generator():
    spec = knapsack_ilp()
    pool = SolutionPool(spec)
    cached = cl.pool.CachedSolver(cl.make_solver(spec, "highs"), 0.5, pool,
                                           torch.Generator().manual_seed(0))
    cached.solve(torch.rand(6, *spec.cost_shape))
    twin = copy.deepcopy(cached)
    assert type(twin) is type(cached) and twin.solve_ratio == 0.5
    assert len(twin.pool) == len(pool) > 0 and twin.pool is not pool
    costs = torch.rand(6, *spec.cost_shape)
    torch.testing.assert_close(twin.solve(costs), cached.solve(costs))  # same draws


class SolvingDataset(torch.utils.data.Dataset):
    """A dataset whose items are solved by a layer, as in a data pipeline that labels."""

    def __init__(self, layer, costs):
        self.layer, self.costs = layer, costs

    def __len__(self):
        return len(self.costs)

    def __getitem__(self, i):
        with torch.no_grad():
            return self.layer(self.costs[i])


class EveryBackendDataset(torch.utils.data.Dataset):
    """Items ``(name, solution)``: item ``i`` solves ``batches[i]`` with ``layers[name]``,
    so one DataLoader runs the layer of every backend in its workers."""

    def __init__(self, layers, batches):
        self.layers, self.batches = layers, batches

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, i):
        name, costs = self.batches[i]
        with torch.no_grad():
            return name, self.layers[name](costs)


def _layer_and_costs(name):
    spec = BACKEND_CASES[name]()
    layer = cl.ComboLayer(spec, backend=name)
    costs = torch.randn(6, *spec.cost_shape, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(0))
    return layer, costs


@pytest.mark.parametrize("name", sorted(BACKEND_CASES))
def test_a_layer_works_inside_forked_dataloader_workers(name):
    # Before: fork hung with cvxpy.
    available(name)
    layer, costs = _layer_and_costs(name)
    expected = layer(costs)  # the parent has used its solver before the workers start
    loader = torch.utils.data.DataLoader(SolvingDataset(layer, costs), batch_size=3,
                                         num_workers=2, multiprocessing_context="fork",
                                         timeout=120)
    torch.testing.assert_close(torch.cat(list(loader)), expected)


def test_every_backends_layer_works_inside_spawned_dataloader_workers():
    # Before: spawn failed for every backend (pickling). One loader for all backends:
    # two spawned workers unpickle every layer (starting workers per backend cost
    # 13-56 s each). A backend not installed here is a skip of its forked case above.
    installed = [name for name in sorted(BACKEND_CASES)
                 if not missing_packages(backends()[name])]
    assert installed, "no backend of BACKEND_CASES is installed"
    layers, costs, expected, batches = {}, {}, {}, []
    for name in installed:
        layers[name], costs[name] = _layer_and_costs(name)
        expected[name] = layers[name](costs[name])  # used in the parent before the workers
        # item 2k goes to worker 0, item 2k + 1 to worker 1: each backend solves in both
        batches += [(name, costs[name][:3]), (name, costs[name][3:])]
    loader = torch.utils.data.DataLoader(EveryBackendDataset(layers, batches),
                                         batch_size=None, num_workers=2,
                                         multiprocessing_context="spawn", timeout=300)
    solved = {}
    for name, solution in loader:
        solved.setdefault(name, []).append(solution)
    assert sorted(solved) == installed, f"expected answers of {installed}, got {sorted(solved)}"
    for name in installed:
        torch.testing.assert_close(torch.cat(solved[name]), expected[name],
                                   msg=lambda text, name=name: f"backend {name!r}: {text}")


# -- SPO+ and Fenchel-Young on every backend and executor ----------------------------------


@pytest.mark.parametrize("executor", ["serial", "thread"])
@pytest.mark.parametrize("backend", backend_params(BACKEND_SPECS))
@pytest.mark.parametrize("loss_name", ["SPOPlusLoss", "FenchelYoungLoss"])
def test_losses_deepcopy_and_pickle_with_every_backend(loss_name, backend, executor):
    # Before: TypeError: cannot pickle '_thread.lock' (the compiled solver's lock).
    if backend == "cvxpy":
        pytest.importorskip("cvxpy")
    spec = BACKEND_SPECS[backend]()
    config = {"name": backend, "executor": executor,
              "workers": 1 if executor == "serial" else 2}
    loss = getattr(cl.losses, loss_name)(spec, backend=config)
    rng = np.random.default_rng(0)
    cost_pred = torch.tensor(rng.normal(size=(4, *spec.cost_shape)))
    cost_true = torch.tensor(rng.normal(size=(4, *spec.cost_shape)))
    y_true = cl.make_solver(spec, backend).solve(cost_true)

    def value(fn):
        torch.manual_seed(0)  # the Fenchel-Young loss samples its perturbations
        if loss_name == "SPOPlusLoss":
            return fn(cost_pred, cost_true)
        return fn(cost_pred, y_true)

    expected = value(loss)
    for twin in (copy.deepcopy(loss), pickle.loads(pickle.dumps(loss))):
        assert twin.solver is not loss.solver and twin.solver.backend == loss.solver.backend
        torch.testing.assert_close(value(twin), expected)
    state = {"loss": loss}  # a training state that holds the loss checkpoints
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    torch.testing.assert_close(value(torch.load(buffer, weights_only=False)["loss"]), expected)


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_cached_layers_copy_answers_rows_on_auxiliaries_as_the_original(how):
    """With solve_ratio < 1 and per-call rows that weigh an auxiliary, the pool answers an
    instance only with the auxiliaries an exact solve returned: those are kept with the
    pool, so a copy answers as the original (it solved 7 of 16 exactly instead)."""
    ilp = cl.ILP(shape=[6], num_aux=1, integrality=["binary"] * 6 + ["continuous"],
                 constraints=[cl.Constraint(coefs={0: 1, 1: 1, 6: -1}, sense="<=", rhs=1)])
    layer = cl.ComboLayer(ilp, solve_ratio=0.5, projection="none",
                          generator=torch.Generator().manual_seed(0))
    A = torch.zeros(1, 7)
    A[0, 2] = A[0, 6] = 1
    b = torch.tensor([1.5])
    g = torch.Generator().manual_seed(1)
    layer(torch.randn(8, 6, generator=g, dtype=torch.float64), A=A, b=b)
    twin = copy.deepcopy(layer) if how == "deepcopy" else pickle.loads(pickle.dumps(layer))
    w = torch.randn(16, 6, generator=g, dtype=torch.float64)
    assert torch.equal(layer(w, A=A, b=b), twin(w, A=A, b=b))
    assert len(layer.pool) == len(twin.pool)


def test_a_generator_set_after_the_first_call_drives_the_cache_too():
    """layer.generator = g reached the noise but not the solution cache's draws, so the
    layer and a copy of it (built with g) answered differently."""
    spec = cl.problems.TopK(20, 5)  # more solutions than the pool holds: pooled != exact
    layer = cl.ComboLayer(spec, solve_ratio=0.5, noise=0.3)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 20, generator=g)
    layer(w)
    layer.generator = torch.Generator().manual_seed(5)
    twin = copy.deepcopy(layer)
    assert torch.equal(layer(w), twin(w))


def _caching_losses(spec):
    return [cl.losses.SPOPlusLoss(spec, solve_ratio=0.5, reduction="none"),
            cl.losses.FenchelYoungLoss(spec, solve_ratio=0.5, reduction="none")]


@pytest.mark.parametrize("which", [0, 1], ids=["spo_plus", "fenchel_young"])
def test_a_losses_generator_set_after_the_first_call_drives_its_draws(which):
    """SPO+ and Fenchel-Young kept the cache (and Fenchel-Young the noise) they built
    with the generator of their first call: the loss and its copy answered differently,
    and a Fenchel-Young loss given a generator later drew from the global RNG."""
    spec = cl.problems.TopK(20, 5)
    g = torch.Generator().manual_seed(0)
    pred, true = torch.randn(64, 20, generator=g), torch.randn(64, 20, generator=g)
    y_true = cl.make_solver(spec).solve(true)
    loss = _caching_losses(spec)[which]
    loss(pred, y_true if which else true)
    loss.generator = torch.Generator().manual_seed(5)
    twin = copy.deepcopy(loss)
    target = y_true if which else true
    assert torch.equal(loss(pred, target), twin(pred, target))
    late = _caching_losses(spec)[which]
    late.generator = torch.Generator().manual_seed(1)
    early = type(late)(spec, solve_ratio=0.5, reduction="none",
                       generator=torch.Generator().manual_seed(1))
    assert torch.equal(late(pred, target), early(pred, target))


@pytest.mark.parametrize("which", [0, 1, 2], ids=["layer", "spo_plus", "fenchel_young"])
def test_a_solve_ratio_or_pool_set_after_the_first_call_takes_effect(which):
    """A solve_ratio of 0 set later still solved about half the instances exactly (the
    pool grew by them), and a pool set later was written but not read: set later, both
    answer as when given to the constructor."""
    spec = cl.problems.TopK(20, 5)
    g = torch.Generator().manual_seed(0)
    pred, true = torch.randn(64, 20, generator=g), torch.randn(64, 20, generator=g)
    y_true = cl.make_solver(spec).solve(true)

    def made(**options):
        if which == 0:
            return cl.ComboLayer(spec, **options)
        return (cl.losses.SPOPlusLoss, cl.losses.FenchelYoungLoss)[which - 1](
            spec, reduction="none", **options)

    def call(user):
        return user(pred) if which == 0 else user(pred, y_true if which == 2 else true)

    user = made(solve_ratio=0.5)
    call(user)
    seeded = SolutionPool(spec)
    seeded.seed(y_true[:3])
    user.generator = torch.Generator().manual_seed(3)
    user.solve_ratio, user.pool = 0.0, copy.deepcopy(seeded)
    expected = call(made(solve_ratio=0.0, pool=copy.deepcopy(seeded),
                         generator=torch.Generator().manual_seed(3)))
    assert torch.equal(call(user), expected)


@pytest.mark.parametrize("which", [0, 1], ids=["layer", "spo_plus"])
def test_a_pool_or_solve_ratio_set_later_is_checked_as_the_constructor_checks_it(which):
    """layer.pool = solutions (or None) seeds a new pool, as the constructor does, and a
    solve_ratio outside [0, 1] is refused before it is stored (both raised a bare
    AttributeError after the attribute was stored, leaving the layer half set)."""
    spec = cl.problems.TopK(5, 2)
    user = (cl.ComboLayer(spec, solve_ratio=0.5),
            cl.losses.SPOPlusLoss(spec, solve_ratio=0.5))[which]
    y = cl.make_solver(spec).solve(torch.randn(4, 5, generator=torch.Generator().manual_seed(0)))
    user.pool = y
    assert isinstance(user.pool, SolutionPool) and len(user.pool) == len(torch.unique(y, dim=0))
    user.pool = None
    assert isinstance(user.pool, SolutionPool) and len(user.pool) == 0
    with pytest.raises(ValueError, match="solve_ratio must be in"):
        user.solve_ratio = 1.5
    assert user.solve_ratio == 0.5
    copy.deepcopy(user)
