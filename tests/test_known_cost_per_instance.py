"""Known costs per instance: ``solver.solve(costs, known_cost=k)`` and
``layer(w, known_cost=k)``, ``k`` of shape ``(*batch, num_vars)`` or ``(num_vars,)``,
added to the spec's own.

Every check is against brute-force enumeration (tests/bruteforce.py): instance ``i``
must be optimal for the spec whose known cost is the spec's plus ``k[i]``.
"""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest
import torch
from bruteforce import feasible_points, objective_values, optimum_full, random_known_ilp
from testkit import KNOWN_COST_BACKENDS, installed_params

import combolayer as cl


def _with_known(spec: cl.ILP, known: np.ndarray) -> cl.ILP:
    """``spec`` with ``known`` added to its own known cost: instance ``i``'s problem."""
    own = np.zeros(spec.num_vars) if spec.known_cost is None else np.asarray(spec.known_cost)
    return cl.ILP(**{**spec.model_dump(), "known_cost": (own + known).tolist()})


def _count_wrong(spec: cl.ILP, costs: np.ndarray, known: np.ndarray, y: np.ndarray,
                 aux: np.ndarray) -> int:
    """Instances whose ``concat(y, aux)`` is not optimal for their own known cost."""
    known = np.broadcast_to(known, (len(costs), spec.num_vars))
    wrong = 0
    for i in range(len(costs)):
        own = _with_known(spec, known[i])
        best, _ = optimum_full(own, costs[i])
        x = np.concatenate([np.ravel(y[i]), np.ravel(aux[i])])
        wrong += not np.isclose(objective_values(own, costs[i], x[None])[0], best)
    return wrong


def _cases(seed: int, specs: int, rows: int):
    """Random ILPs (min and max; half with a known cost of their own, half without)
    with integer costs and per-instance known costs on outputs and auxiliaries."""
    rng = np.random.default_rng(seed)
    for j in range(specs):
        spec = random_known_ilp(rng)
        if j % 2:
            spec = cl.ILP(**{**spec.model_dump(), "known_cost": None})
        costs = rng.integers(-3, 4, (rows, spec.num_outputs)).astype(float)
        known = rng.integers(-3, 4, (rows, spec.num_vars)).astype(float)
        yield spec, costs, known


@pytest.mark.parametrize("backend", installed_params(KNOWN_COST_BACKENDS))
def test_random_ilps_with_per_instance_known_costs_equal_brute_force(backend):
    """1040 checks per backend: 40 random ILPs x 13 instances, each solved from numpy
    and from torch, min and max, per-instance known costs on every variable."""
    wrong = total = 0
    senses = set()
    for spec, costs, known in _cases(7, 40, 13):
        solver = cl.make_solver(spec, backend)
        for kind in (np.asarray, torch.tensor):
            y, aux = solver.solve(kind(costs), return_aux=True, known_cost=kind(known))
            wrong += _count_wrong(spec, costs, known, np.asarray(y), np.asarray(aux))
            total += len(costs)
        senses.add(spec.sense)
    assert senses == {"min", "max"}
    assert (wrong, total) == (0, 1040)


def test_one_known_cost_for_the_whole_batch_and_a_leading_batch():
    """``(num_vars,)`` is the same known cost for every instance; ``(*batch, num_vars)``
    follows a batch of any number of axes."""
    for spec, costs, known in _cases(11, 10, 6):
        solver = cl.make_solver(spec, "highs")
        y, aux = solver.solve(costs, return_aux=True, known_cost=known[0])
        assert _count_wrong(spec, costs, known[:1], y, aux) == 0
        y2, aux2 = solver.solve(costs.reshape(2, 3, -1), return_aux=True,
                                known_cost=known.reshape(2, 3, -1))
        assert y2.shape == (2, 3, spec.num_outputs) and aux2.shape == (2, 3, spec.num_aux)
        assert _count_wrong(spec, costs, known, y2.reshape(6, -1), aux2.reshape(6, -1)) == 0


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_executors_take_per_instance_known_costs(executor, always_parallel):
    """1000 instances per executor (4 random ILPs x 250 instances, 2 workers)."""
    config = cl.BackendConfig(name="highs", executor=executor, workers=2)
    wrong = total = 0
    for spec, costs, known in _cases(360, 4, 250):
        y, aux = cl.make_solver(spec, config).solve(costs, return_aux=True, known_cost=known)
        wrong += _count_wrong(spec, costs, known, y, aux)
        total += len(costs)
    assert (wrong, total) == (0, 1000)


@pytest.mark.parametrize("method", ["identity", "blackbox", "perturbed"])
def test_layer_with_per_instance_known_costs_equals_brute_force(method):
    """The layer (projection "plane": a per-instance known cost on the auxiliaries makes
    the scale of w matter) in training and eval mode, and its gradient reaches w."""
    wrong = total = 0
    for spec, costs, known in _cases(5, 25, 4):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            layer = cl.ComboLayer(spec, method=method, projection="plane", backend="highs")
        for training in (True, False):
            layer.train(training)
            w = torch.tensor(costs, requires_grad=True)
            y, aux = layer(w, return_aux=True, known_cost=torch.tensor(known))
            if method != "perturbed" or not training:  # perturbed averages samples
                wrong += _count_wrong(spec, costs, known, y.detach().numpy(), aux.numpy())
                total += len(costs)
            if training:
                (y * torch.randn_like(y)).sum().backward()
                assert w.grad is not None and torch.isfinite(w.grad).all()
    assert wrong == 0 and total >= 100


@pytest.mark.parametrize("method", ["identity", cl.Blackbox(lam=5.0, reduction="sum"),
                                    "comboptnet"], ids=["identity", "blackbox", "comboptnet"])
def test_gradients_with_a_per_instance_known_cost_are_those_of_its_own_spec(method):
    """Instance by instance, the layer with ``known_cost=k`` gives the outputs and the
    gradient of a layer on the spec whose known cost is the spec's plus ``k[i]`` (for
    Blackbox both of its solves count the instance's known cost; its step is per
    instance with reduction="sum"; CombOptNet's cost mismatch is on the whole cost)."""
    for spec, costs, known in _cases(21, 6, 4):
        layer = cl.ComboLayer(spec, method=method, projection="plane", backend="highs")
        g = torch.tensor(np.random.default_rng(0).normal(size=costs.shape))
        w = torch.tensor(costs, requires_grad=True)
        y = layer(w, known_cost=torch.tensor(known))
        y.backward(g)
        for i in range(len(costs)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                own = cl.ComboLayer(_with_known(spec, known[i]), method=method,
                                    projection="plane", backend="highs")
            w_i = torch.tensor(costs[i], requires_grad=True)
            y_i = own(w_i)
            y_i.backward(g[i])
            assert torch.equal(y[i].detach(), y_i.detach())
            assert torch.allclose(w.grad[i], w_i.grad)


def test_auto_normalises_the_total_cost_with_a_per_instance_known_cost_on_the_outputs():
    """A per-instance known cost on the outputs only: "auto" keeps the solution of w plus
    it, whatever the scale of w; on the auxiliaries "auto" would rescale w, and says so."""
    rng = np.random.default_rng(3)
    for spec, costs, known in _cases(13, 10, 5):
        spec = cl.ILP(**{**spec.model_dump(), "known_cost": None})
        known[:, spec.num_outputs:] = 0.0
        layer = cl.ComboLayer(spec, backend="highs")
        scale = float(rng.uniform(0.1, 10.0))
        y = layer(torch.tensor(costs) * scale, known_cost=torch.tensor(known) * scale)
        aux = np.zeros((len(costs), spec.num_aux))
        # the auxiliaries weigh nothing here: zeros stand in for them
        exact = cl.make_solver(spec, "highs").solve(costs, known_cost=known)
        assert _count_wrong(spec, costs, known, y.numpy(), aux) == 0
        assert _count_wrong(spec, costs, known, exact, aux) == 0
    # a call's known cost on the auxiliaries: "auto" is the hull projection alone (as for
    # a spec with one there; it raised), and a projection that rescales w refuses it
    spec, costs, known = next(_cases(14, 1, 3))
    spec = cl.ILP(**{**spec.model_dump(), "known_cost": None})
    known[:, -1] = 1.0
    for scale in (0.01, 100.0):
        y = cl.ComboLayer(spec, backend="highs")(torch.tensor(costs) * scale,
                                                 known_cost=torch.tensor(known))
        exact = cl.make_solver(spec, "highs").solve(costs * scale, known_cost=known)
        np.testing.assert_allclose((costs * y.numpy()).sum(1), (costs * exact).sum(1))
    with pytest.raises(ValueError, match="weighs its auxiliaries.*projection='plane'"):
        cl.ComboLayer(spec, backend="highs", projection="norm")(torch.tensor(costs),
                                                                known_cost=known)


@pytest.mark.parametrize("own_known", [True, False])
def test_the_pool_answers_under_the_instance_own_objective(own_known):
    """With every feasible solution in the pool, a pooled answer is optimal for the
    instance's own known cost (solve_ratio=0: every instance from the pool, or solved
    exactly where the pool cannot rank it)."""
    wrong = total = 0
    for spec, costs, known in _cases(17, 20, 6):
        if not own_known:
            spec = cl.ILP(**{**spec.model_dump(), "known_cost": None})
        points = torch.tensor(feasible_points(spec))
        layer = cl.ComboLayer(spec, projection="plane", backend="highs", solve_ratio=0.0)
        layer.pool.seed(points[:, : layer.solver.pool_width])
        layer.train()
        y, aux = layer(torch.tensor(costs), return_aux=True, known_cost=torch.tensor(known))
        wrong += _count_wrong(spec, costs, known, y.numpy(), aux.numpy())
        total += len(costs)
    assert (wrong, total) == (0, 120)


def test_spo_plus_counts_the_instance_known_cost():
    """SPO+ with a per-instance known cost k is SPO+ on the spec whose known cost is the
    spec's plus k, instance by instance: the same values and gradients."""
    for spec, costs, known in _cases(23, 8, 4):
        c_hat = torch.tensor(costs + np.random.default_rng(1).normal(size=costs.shape),
                             requires_grad=True)
        loss = cl.losses.SPOPlusLoss(spec, backend="highs", reduction="none")
        value = loss(c_hat, torch.tensor(costs), known_cost=torch.tensor(known))
        value.sum().backward()
        for i in range(len(costs)):
            own = cl.losses.SPOPlusLoss(_with_known(spec, known[i]), backend="highs")
            c_i = c_hat[i].detach().clone().requires_grad_()
            expected = own(c_i, torch.tensor(costs[i]))
            expected.backward()
            assert torch.allclose(value[i], expected)
            assert torch.allclose(c_hat.grad[i], c_i.grad)


def test_regret_counts_the_instance_known_cost():
    for spec, costs, known in _cases(29, 10, 5):
        solver = cl.make_solver(spec, "highs")
        y, aux = solver.solve(np.zeros_like(costs), return_aux=True)  # some decisions
        regret = cl.metrics.regret(solver, costs, y, aux_pred=aux, known_cost=known)
        for i in range(len(costs)):
            own = _with_known(spec, known[i])
            best, _ = optimum_full(own, costs[i])
            x = np.concatenate([y[i], aux[i]])
            value = objective_values(own, costs[i], x[None])[0]
            assert np.isclose(float(regret[i]), solver.sign * (value - best))
        assert float(regret.min()) >= -1e-9


def test_a_known_cost_of_the_wrong_shape_names_expected_and_got():
    spec, costs, known = next(_cases(31, 1, 3))
    solver = cl.make_solver(spec, "highs")
    with pytest.raises(ValueError, match=rf"known_cost has shape \(3, {spec.num_vars + 1}\)"
                                         rf".*expected \(3, {spec.num_vars}\)"):
        solver.solve(costs, known_cost=np.zeros((3, spec.num_vars + 1)))
    # one value per variable: (1,) and (3, 1) broadcast to every variable, and were taken
    for shape in [(1,), (3, 1)]:
        with pytest.raises(ValueError, match=rf"known_cost has shape \({shape[0]},"):
            solver.solve(costs, known_cost=np.ones(shape))
    bad = known.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="known_cost must be finite"):
        cl.ComboLayer(spec, projection="plane", backend="highs")(torch.tensor(costs),
                                                                 known_cost=bad)


def test_a_complex_or_differentiated_known_cost_is_a_value_error():
    spec, costs, known = next(_cases(31, 1, 3))
    with pytest.raises(ValueError, match="known_cost must be real"):  # imaginary part dropped
        cl.make_solver(spec, "highs").solve(costs, known_cost=known + 1j)
    # no method differentiates a known cost: its gradient was silently None
    layer = cl.ComboLayer(spec, projection="plane", backend="highs")
    w, k = torch.tensor(costs, requires_grad=True), torch.tensor(known, requires_grad=True)
    with pytest.raises(ValueError, match=r"known_cost requires a gradient.*known_cost.detach"):
        layer(w, known_cost=k)
    with pytest.raises(ValueError, match=r"known_cost requires a gradient"):
        cl.losses.SPOPlusLoss(spec)(w, w.detach(), known_cost=k)
    with torch.no_grad():
        layer(w, known_cost=k)
    layer(w, known_cost=k.detach()).sum().backward()


@pytest.mark.parametrize("backend", installed_params(KNOWN_COST_BACKENDS))
def test_per_call_data_beyond_the_spec_range_is_a_value_error(backend):
    """A per-call known cost or rows of magnitude 1e15 or more are refused as the spec's
    own data are: SCIP raised a bare Exception, cvxpy and HiGHS their own errors, and
    the enumeration cast a float64 known cost of 1e39 to float32 inf and answered zeros."""
    spec = cl.ILP(shape=[4], integrality="binary",
                  constraints=[cl.Constraint(coefs=[1] * 4, sense="<=", rhs=2)])
    solver = cl.make_solver(spec, backend)
    layer = cl.ComboLayer(spec, backend=backend)
    w = np.array([-1.0, -2, -3, 1])
    for known in ([0, 0, 1e20, 0], [0, 0, 1e39, 0]):
        with pytest.raises(ValueError, match="known_cost must be below 1e\\+15"):
            solver.solve(torch.tensor(w, dtype=torch.float32),
                         known_cost=torch.tensor(known, dtype=torch.float64))
        with pytest.raises(ValueError, match="known_cost must be below 1e\\+15"):
            layer(torch.tensor(w), known_cost=torch.tensor(known, dtype=torch.float64))
    for name, A, b in (("A", [[1e20, 1, 1, 1]], [1.0]), ("b", [[1.0, 1, 1, 1]], [1e16])):
        with pytest.raises(ValueError, match=f"{name} must be below 1e\\+15"):
            solver.solve(w, A=np.array(A), b=np.array(b))
        with pytest.raises(ValueError, match=f"{name} must be below 1e\\+15"):
            layer(torch.tensor(w), A=torch.tensor(A), b=torch.tensor(b))


def test_bool_and_integer_per_call_data_are_numbers():
    """A bool or integer torch A, b or known cost is read as numbers (the range check
    raised a bare torch error on bool)."""
    spec = cl.ILP(shape=[3], constraints=[cl.Constraint(coefs=[1, 1, 1], sense="<=", rhs=2)])
    solver = cl.make_solver(spec, "highs")
    w = torch.tensor([-1.0, -2, -3])
    for A in (torch.tensor([[True, True, True]]), torch.tensor([[1, 1, 1]])):
        assert solver.solve(w, A=A, b=torch.tensor([1.0])).tolist() == [0, 0, 1]
    known = torch.tensor([False, False, True])
    assert solver.solve(w, known_cost=known).tolist() == [0, 1, 1]
    layer = cl.ComboLayer(spec, backend="highs", projection="plane")
    assert layer(w, known_cost=known).tolist() == [0, 1, 1]


@pytest.mark.parametrize("backend", ["enumerate", "highs"])
@pytest.mark.parametrize("own", [False, True], ids=["per-call known", "spec known"])
def test_float32_costs_meet_a_float64_known_cost_in_float64(backend, own):
    """The solver adds a known cost to float32 costs in float64 (as the layer does): cast
    to float32, 1e8 + 1 and 1e8 tied and the first came back (a per-call known cost on
    every backend, the spec's own on the torch kernels)."""
    row = [cl.Constraint(coefs=[1, 1], sense="==", rhs=1)]
    for known, best in (([1e8 + 1, 1e8], [0.0, 1.0]), ([1e8, 1e8 + 1], [1.0, 0.0])):
        if own:
            spec = cl.ILP(shape=[2], integrality="binary", constraints=row, known_cost=known)
            y = cl.make_solver(spec, backend).solve(torch.zeros(2))
        else:
            spec = cl.ILP(shape=[2], integrality="binary", constraints=row)
            y = cl.make_solver(spec, backend).solve(
                torch.zeros(2), known_cost=torch.tensor(known, dtype=torch.float64))
        assert y.dtype == torch.float32 and y.tolist() == best


@pytest.mark.parametrize("own_known", [True, False], ids=["spec known", "no spec known"])
def test_rfwo_counts_the_instance_known_cost(own_known):
    """Regularised Frank-Wolfe with ``known_cost=k`` is the method on the spec whose
    known cost is the spec's plus ``k`` (its oracle counts ``<k, x>`` on whole
    solutions): the same regularised solution and gradient, per instance."""
    rng = np.random.default_rng(61)
    spec = _pick_two([0.5, -0.5, 0.0, 1.0, -2.0] if own_known else None)
    costs = rng.normal(size=(3, 4))
    known = 3 * rng.normal(size=(3, 5))
    known[:, -1] = rng.choice([-3.0, 3.0], size=3)
    g = torch.tensor(rng.normal(size=costs.shape))
    moved = _each_instance_as_its_own_spec({"name": "rfwo", "lam": 0.5}, spec, costs, known, g,
                                           atol=1e-5, grad_tol=1e-5)
    assert moved >= 2  # the known cost moved the regularised solutions


def _each_instance_as_its_own_spec(method, spec, costs, known, g, atol, grad_tol,
                                   exact=False):
    """Asserts that ``method``'s layer with ``known_cost=known`` gives each instance the
    solution and gradient (of ``<g, y>``) of the layer on the spec whose known cost is the
    spec's plus that instance's, and with ``exact``, its solution in eval mode too.
    Returns how many instances the known cost moved (against the layer without it)."""
    layer = cl.ComboLayer(spec, method=method, projection="none", backend="highs")
    w = torch.tensor(costs, requires_grad=True)
    y = layer(w, known_cost=torch.tensor(known))
    y.backward(g)
    if exact:
        exact_y = layer.eval()(torch.tensor(costs), known_cost=torch.tensor(known))
    plain = cl.ComboLayer(spec, method=method, projection="none", backend="highs")
    moved = 0
    for i in range(len(costs)):
        own = cl.ComboLayer(_with_known(spec, known[i]), method=method, projection="none",
                            backend="highs")
        w_i = torch.tensor(costs[i : i + 1], requires_grad=True)
        y_i = own(w_i)
        y_i.backward(g[i : i + 1])
        torch.testing.assert_close(y[i : i + 1].detach(), y_i.detach(), atol=atol, rtol=0)
        torch.testing.assert_close(w.grad[i : i + 1], w_i.grad, atol=grad_tol, rtol=grad_tol)
        if exact:
            assert torch.equal(exact_y[i : i + 1], own.eval()(w_i.detach()))
        moved += not torch.allclose(plain(w_i.detach()), y_i.detach(), atol=1e-2)
    return moved


def _pick_two(known_cost):
    """Pick two of four outputs (y0 + y1 <= 1; an auxiliary x4 with y3 + x4 <= 1): the
    relaxation has an interior, as the log barrier needs."""
    return cl.ILP(shape=[4], num_aux=1, known_cost=known_cost,
                  constraints=[cl.Constraint(coefs={0: 1, 1: 1}, sense="<=", rhs=1),
                               cl.Constraint(coefs={3: 1, 4: 1}, sense="<=", rhs=1),
                               cl.Constraint(coefs=[1, 1, 1, 1, 0], sense="==", rhs=2)])


@pytest.mark.parametrize("method", [{"name": "qptl", "gamma": 2.0}, {"name": "intopt", "mu": 0.5}],
                         ids=["qptl", "intopt"])
@pytest.mark.parametrize("own_known", [True, False], ids=["spec known", "no spec known"])
def test_relaxation_methods_count_the_instance_known_cost(method, own_known):
    """QPTL and IntOpt with ``known_cost=k`` are the methods on the spec whose known cost
    is the spec's plus ``k``: the relaxed solution and its gradient in training (``k`` a
    linear term of the relaxed objective, on the auxiliaries too), the exact ILP's
    solution in eval mode."""
    rng = np.random.default_rng(59)
    spec = _pick_two([0.5, -0.5, 0.0, 1.0, -2.0] if own_known else None)
    costs = rng.normal(size=(3, 4))
    known = rng.normal(size=(3, 5))
    known[:, -1] = rng.choice([-3.0, 3.0], size=3)  # the auxiliary's cost decides x4
    g = torch.tensor(rng.normal(size=costs.shape))
    moved = _each_instance_as_its_own_spec(method, spec, costs, known, g, atol=1e-4,
                                           grad_tol=1e-3, exact=True)
    assert moved == len(costs)  # the known cost moved every relaxed solution


def test_fenchel_young_counts_the_instance_known_cost():
    """Fenchel-Young with a per-instance known cost k is Fenchel-Young on the spec whose
    known cost is the spec's plus k (the same noise draws: the same values and gradient)."""
    for spec, costs, known in _cases(37, 6, 3):
        y_true = cl.make_solver(spec, "highs").solve(costs, known_cost=known)
        for i in range(len(costs)):
            values, grads = [], []
            for own, extra in ((spec, {"known_cost": torch.tensor(known[i : i + 1])}),
                               (_with_known(spec, known[i]), {})):
                loss = cl.losses.FenchelYoungLoss(own, backend="highs", num_samples=3,
                                                  generator=torch.Generator().manual_seed(i))
                c = torch.tensor(costs[i : i + 1], requires_grad=True)
                value = loss(c, torch.tensor(y_true[i : i + 1]), **extra)
                value.backward()
                values.append(value.detach())
                grads.append(c.grad)
            assert torch.allclose(values[0], values[1])
            assert torch.allclose(grads[0], grads[1])


@pytest.mark.parametrize("two_sides", [False, True], ids=["one side", "two sides"])
def test_aimle_steps_by_the_whole_cost_with_the_instance_known_cost(two_sides):
    """AI-MLE's step ``lam = alpha ||c|| / ||dL/dy||`` reads the whole cost the solver
    minimises: with ``known_cost=k`` the forward, the gradient and the adapted alpha are
    those of AI-MLE on the spec whose known cost is the spec's plus ``k`` (same row, same
    noise draws)."""
    differs = 0
    for spec, costs, known in _cases(41, 8, 3):
        for i in range(len(costs)):
            grads, outputs, alphas = [], [], []
            g = torch.tensor(np.random.default_rng(i).normal(size=(1, spec.num_outputs)))
            for own, extra in ((spec, {"known_cost": torch.tensor(known[i : i + 1])}),
                               (_with_known(spec, known[i]), {})):
                method = cl.AIMLE(num_samples=2, two_sides=two_sides,
                                  generator=torch.Generator().manual_seed(i))
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    # "none": the costs reach the estimator as given on both sides (the
                    # hull projection sees w + k with k per call, w alone with k in the spec)
                    layer = cl.ComboLayer(own, method=method, projection="none",
                                          backend="highs")
                w = torch.tensor(costs[i : i + 1], requires_grad=True)
                y = layer(w, **extra)
                (y * g).sum().backward()
                outputs.append(y.detach())
                grads.append(w.grad)
                alphas.append(method.alpha)
            assert torch.equal(outputs[0], outputs[1])
            torch.testing.assert_close(grads[0], grads[1])
            assert alphas[0] == alphas[1]
            differs += not torch.allclose(grads[0], grads[1] * 0)
    assert differs >= 10  # the gradients compared are not all zero


def test_aimle_norm_counts_the_bound_instance_known_cost():
    """`whole_cost_norm` of a solver with a per-call known cost bound is the norm of the
    full-width costs the solver sees, instance by instance."""
    from combolayer.estimators.aimle import whole_cost_norm

    for spec, costs, known in _cases(43, 6, 4):
        solver = cl.make_solver(spec, "highs")
        c, k = torch.tensor(costs), solver.sign * torch.tensor(known)
        expected = float((solver.widen(c) + k).norm())  # widen: c, zero auxiliaries, spec's k
        bound = solver.bind_known(k)
        assert whole_cost_norm(bound, c) == pytest.approx(expected, rel=1e-12)
        # rows bound around it: the known cost is still read
        rows = bound.bind_rows(torch.zeros(1, spec.num_vars), torch.ones(1))
        assert whole_cost_norm(rows, c) == pytest.approx(expected, rel=1e-12)


def _loss_per_instance_equals_own_spec(make, spec, costs, known, target):
    """``make(spec)``'s loss with ``known_cost=k`` (reduction "none") against the loss on
    the spec whose known cost is the spec's plus ``k[i]``, instance by instance: the same
    values and gradients. Returns how many instances had a non-zero known part."""
    c_hat = torch.tensor(costs + np.random.default_rng(1).normal(size=costs.shape),
                         requires_grad=True)
    value = make(spec)(c_hat, torch.tensor(target), known_cost=torch.tensor(known))
    value.sum().backward()
    plain = make(spec)(c_hat.detach(), torch.tensor(target))
    moved = 0
    for i in range(len(costs)):
        c_i = c_hat[i].detach().clone().requires_grad_()
        expected = make(_with_known(spec, known[i]))(c_i, torch.tensor(target[i]))
        expected.backward()
        torch.testing.assert_close(value[i], expected)
        torch.testing.assert_close(c_hat.grad[i], c_i.grad)
        moved += not torch.isclose(value[i], plain[i])
    return moved


@pytest.mark.parametrize("two_sides", [False, True], ids=["one side", "two sides"])
def test_pg_counts_the_instance_known_cost(two_sides):
    """PG with a per-instance known cost k is PG on the spec whose known cost is the
    spec's plus k: the same values and gradients (its V counts the whole objective)."""
    moved = 0
    for spec, costs, known in _cases(47, 8, 4):
        moved += _loss_per_instance_equals_own_spec(
            lambda own: cl.losses.PGLoss(own, sigma=0.5, two_sides=two_sides,
                                         backend="highs", reduction="none"),
            spec, costs, known, costs)
    assert moved >= 8  # the known cost changed the value of these


def test_regularized_fenchel_young_counts_the_instance_known_cost():
    """RFY with a per-instance known cost k is RFY on the spec whose known cost is the
    spec's plus k (Frank-Wolfe's oracle solves with it and counts <k, mu>)."""
    moved = 0
    for spec, costs, known in _cases(53, 8, 3):
        y_true = cl.make_solver(spec, "highs").solve(costs, known_cost=known)
        moved += _loss_per_instance_equals_own_spec(
            lambda own: cl.losses.RegularizedFenchelYoungLoss(own, lam=0.5, backend="highs",
                                                              reduction="none"),
            spec, costs, known, y_true)
    assert moved >= 8


def test_losses_that_take_no_per_call_known_cost_refuse_one_with_a_value_error():
    """Every registered loss either takes ``known_cost=`` or refuses it with a ValueError
    that says why and names the losses that take one (never a TypeError)."""
    from combolayer.losses.base import LOSSES

    spec = cl.ILP(shape=[3], constraints=[cl.Constraint(coefs=[1, 1, 1], sense="<=", rhs=2)])
    costs = torch.tensor([[1.0, -2.0, 0.5]])
    y = cl.make_solver(spec, "highs").solve(costs)
    takers = {name for name, cls in LOSSES.items() if cls.takes_instance_known_cost}
    assert {"SPOPlusLoss", "FenchelYoungLoss", "PGLoss", "RegularizedFenchelYoungLoss",
            *_pooled_losses()} <= takers
    refused = 0
    for name, cls in sorted(LOSSES.items()):
        if name in takers:
            continue
        loss = cls(spec, backend="highs")
        target = costs if "cost_true" in inspect.signature(cls.__call__).parameters else y
        why = "its derivation assumes" if not cls.counts_known_cost else "spec's own known"
        with pytest.raises(ValueError, match=rf"{name} does not take a per-call known cost "
                                             rf"\(known_cost=\): .*{why}.*SPOPlusLoss"):
            loss(costs, target, known_cost=torch.zeros(3))
        refused += 1
    assert refused == len(LOSSES) - len(takers) >= 1


def _pooled_losses():
    from combolayer.losses.base import LOSSES
    from combolayer.losses.pooled import PooledLoss

    return sorted(name for name, cls in LOSSES.items() if issubclass(cls, PooledLoss))


@pytest.mark.parametrize("name", _pooled_losses())
def test_pool_losses_count_the_instance_known_cost(name):
    """A pool loss (NCE, CMAP, the LTR family) with ``known_cost=k`` is the loss on the
    spec whose known cost is the spec's plus ``k``, over the same pool (every feasible
    solution): the same values and gradients. Where the spec has no known cost of its own
    the pool keeps outputs only, and ``k`` is zero on the auxiliaries."""
    cls = getattr(cl.losses, name)
    moved = 0
    for spec, costs, known in _cases(61, 8, 3):
        points = feasible_points(spec)
        if spec.known_cost is None:
            known[:, spec.num_outputs:] = 0.0
            # one whole solution per distinct output: the same pool as the outputs' one
            points = points[np.unique(points[:, : spec.num_outputs], axis=0,
                                      return_index=True)[1]]
        y_true = cl.make_solver(spec, "highs").solve(costs, known_cost=known)
        target = costs if "cost_true" in inspect.signature(cls.__call__).parameters else y_true

        def make(own, points=points):
            loss = cls(own, solve_ratio=0.0, reduction="none", backend="highs")
            loss.pool.seed(torch.tensor(points[:, : loss.solver.pool_width]))
            return loss

        moved += _loss_per_instance_equals_own_spec(make, spec, costs, known, target)
    if name != "PointwiseLTRLoss":  # there the known part cancels by definition
        assert moved >= 4


@pytest.mark.parametrize("own_known", [True, False], ids=["spec known", "no spec known"])
def test_pool_refresh_solves_under_the_instance_known_cost(own_known):
    """With ``solve_ratio=1`` the pool gains each prediction's optimum under its own
    whole objective (brute force), auxiliaries kept where the pool keeps whole solutions."""
    wrong = 0
    for spec, costs, known in _cases(67, 10, 3):
        if not own_known:
            spec = cl.ILP(**{**spec.model_dump(), "known_cost": None})
        if spec.known_cost is None:  # a pool of outputs: the call's must spare the auxiliaries
            known[:, spec.num_outputs:] = 0.0
        loss = cl.losses.NCELoss(spec, backend="highs")
        loss(torch.tensor(costs), torch.zeros(costs.shape), known_cost=torch.tensor(known))
        pooled = list(_whole(spec, loss.pool.solutions.numpy(), loss.solver.pool_width))
        for i in range(len(costs)):
            own = _with_known(spec, known[i])
            best, _ = optimum_full(own, costs[i])
            values = objective_values(own, costs[i], np.array(pooled))
            wrong += not np.isclose(values, best).any()
    assert wrong == 0


def _whole(spec: cl.ILP, pool: np.ndarray, width: int):
    """The feasible whole solutions that each pooled row (outputs only where ``width`` is
    N) stands for."""
    points = feasible_points(spec)
    for row in pool:
        yield from points[(points[:, :width] == row).all(1)]


def test_a_pool_of_outputs_refuses_an_instance_known_cost_on_the_auxiliaries():
    spec, costs, known = next(_cases(71, 1, 2))
    spec = cl.ILP(**{**spec.model_dump(), "known_cost": None})
    known[:, -1] = 2.0
    loss = cl.losses.CMAPLoss(spec, backend="highs")
    with pytest.raises(ValueError, match=r"CMAPLoss's pool keeps the outputs only.*"
                                         r"known_cost\[\.\.\., \d+:\] must be zero"):
        loss(torch.tensor(costs), torch.zeros(costs.shape), known_cost=torch.tensor(known))


#: aux0 >= y0 + y1 - 1 (cost 0.7) and aux1 <= y0 (cost -0.9): the auxiliaries follow y.
_PAIRED = [cl.Constraint(coefs=[1, 1, -1, 0], sense="<=", rhs=1),
           cl.Constraint(coefs=[0, 0, 0, 1], sense="<=", rhs=1),
           cl.Constraint(coefs=[-1, 0, 0, 1], sense="<=", rhs=0)]
_PAIRED_KNOWN = [0.0, 0.0, 0.7, -0.9]


@pytest.mark.parametrize("given", ["batch", "shared"])
def test_sampled_losses_and_layers_pair_each_samples_auxiliaries_with_its_instance(given):
    """With several samples per instance, a per-call known cost gives the values and
    auxiliaries of the same known cost in the spec (the samples were solved sample-first
    under a per-call one, and read instance-first)."""
    own = cl.ILP(shape=[2], num_aux=2, constraints=_PAIRED, known_cost=_PAIRED_KNOWN)
    plain = cl.ILP(shape=[2], num_aux=2, constraints=_PAIRED)
    known = torch.tensor(_PAIRED_KNOWN)
    known = known.expand(4, 4) if given == "batch" else known
    w = torch.randn(4, 2, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([[1.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]])

    def fenchel_young(spec):
        return cl.losses.FenchelYoungLoss(spec, num_samples=4, reduction="none",
                                          generator=torch.Generator().manual_seed(1))

    torch.testing.assert_close(fenchel_young(plain)(w, y, known_cost=known),
                               fenchel_young(own)(w, y))

    def layer(spec):
        method = cl.Perturbed(num_samples=3, generator=torch.Generator().manual_seed(1))
        return cl.ComboLayer(spec, method=method, projection="none").train()

    y_own, aux_own = layer(own)(w, return_aux=True)
    y_plain, aux_plain = layer(plain)(w, return_aux=True, known_cost=known)
    torch.testing.assert_close(y_plain, y_own)
    torch.testing.assert_close(aux_plain, aux_own)
    assert torch.equal(aux_own[:, 1], y_own[:, 0])  # aux1 = y0 wherever y0 is (cost -0.9)


@pytest.mark.parametrize("projection", ["auto", "auto-exact", "plane", "none"])
def test_a_path_layer_takes_a_per_call_known_cost_its_solver_takes(projection):
    """The hull offset of a path problem counts the per-call known cost the projection
    acts around: the layer solves what the solver solves (it raised "negative costs"
    on a total cost that is positive)."""
    spec = cl.problems.ShortestPath.grid(3, 3)
    rng = np.random.default_rng(4)
    for _ in range(5):
        w = torch.tensor(rng.uniform(0.1, 2.0, (3, 3)))
        known = torch.tensor(rng.uniform(0.0, 3.0, 9))
        y = cl.ComboLayer(spec, projection=projection)(w, known_cost=known)
        expected = cl.make_solver(spec).solve(w, known_cost=known)
        total = w.reshape(-1) + known
        assert float(total @ y.reshape(-1)) == pytest.approx(float(total @ expected.reshape(-1)))


@pytest.mark.parametrize("per_call", [False, True], ids=["spec known", "per-call known"])
def test_float32_costs_next_to_a_large_known_cost_keep_the_solution(per_call):
    """P(w + k) - k in float32 lost w next to a known cost of 1e6 (suboptimal answers on
    most seeds): the layer works in float64 where there is a known cost, and answers in
    w's dtype."""
    rng = np.random.default_rng(1)
    n = 50
    k = 1e6 + rng.uniform(0, 1e3, n)
    row = [cl.Constraint(coefs=[1.0] * n, sense="==", rhs=10)]
    spec = cl.ILP(shape=[n], constraints=row, known_cost=None if per_call else k.tolist())
    layer = cl.ComboLayer(spec)
    for _ in range(5):
        w = torch.tensor(rng.normal(0, 100, n), dtype=torch.float32)
        extra = {"known_cost": torch.tensor(k)} if per_call else {}
        y = layer(w, **extra)
        assert y.dtype == torch.float32
        total = w.double().numpy() + k
        best = np.sort(total)[:10].sum()
        assert total @ y.double().numpy() == pytest.approx(best, rel=1e-12)


@pytest.mark.parametrize("backend", installed_params(KNOWN_COST_BACKENDS))
def test_a_known_cost_on_the_auxiliaries_does_not_stay_for_later_calls(backend):
    """HiGHS and Gurobi keep one model: a call with a known cost on an auxiliary set its
    cost there, and later calls, which set the outputs' costs alone, kept solving with
    it (the answer after it was the known cost's, not the plain optimum)."""
    spec = cl.ILP(shape=[2], num_aux=1,
                  constraints=[cl.Constraint(coefs=[1, 1, 1], sense="==", rhs=1)])
    c, k = np.array([-0.1, 0.2]), np.array([0.0, 0.0, -0.5])
    solver = cl.make_solver(spec, backend)
    plain = solver.solve(c)
    np.testing.assert_array_equal(plain, [1.0, 0.0])
    np.testing.assert_array_equal(solver.solve(c, known_cost=k), [0.0, 0.0])
    np.testing.assert_array_equal(solver.solve(c), plain)
    np.testing.assert_array_equal(solver.solve(np.stack([c, c])), [plain, plain])


def test_auto_with_a_known_cost_on_the_auxiliaries_decides_per_instance():
    """An instance whose known cost weighs no auxiliary is normalised as it is alone,
    whatever its batch-mates' known costs (the whole batch took the hull projection alone
    when one instance's weighed an auxiliary)."""
    spec = cl.ILP(shape=[4], num_aux=1, integrality="binary",
                  constraints=[cl.Constraint(coefs=[1] * 5, sense="==", rhs=2)])
    layer = cl.ComboLayer(spec, backend="highs")
    known = torch.zeros(2, 5, dtype=torch.float64)
    known[0, 4] = 0.3
    weights = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)

    def gradient(w, k):
        w = w.clone().requires_grad_()
        (layer(w, known_cost=k) * weights).sum().backward()
        return w.grad

    w = torch.tensor([[0.1, 0.5, -0.2, 0.3], [0.4, -0.1, 0.2, 0.6]], dtype=torch.float64)
    together = gradient(w, known)
    torch.testing.assert_close(together[1], gradient(w[1:], known[1:])[0])
    torch.testing.assert_close(together[0], gradient(w[:1], known[:1])[0])
