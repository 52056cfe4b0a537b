"""The losses that compare objectives count the known cost.

Each loss is checked against its definition written out here, over brute-force
enumeration (tests/bruteforce.py) of small random ILPs with a known cost on outputs
and auxiliaries, min and max. In min form (``s = +1`` for min, ``-1`` for max) a whole
solution ``x = concat(y, aux)`` has the objective ``F(u, x) = <s u, y> + <s k, x>``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from bruteforce import feasible_points, optimum_full, random_known_ilp

import combolayer as cl

BATCH = 3


def _sign(spec: cl.ILP) -> float:
    return 1.0 if spec.sense == "min" else -1.0


def _values(spec: cl.ILP, u: torch.Tensor, points: torch.Tensor):
    """``F(u, x)`` for ``(B, N)`` costs ``u`` (the spec's sense) and ``(P, num_vars)``
    whole points: ``(B, P)``, min form (without the known part when the spec has none)."""
    s, n = _sign(spec), spec.num_outputs
    values = (s * u) @ points[:, :n].T
    if spec.known_cost is not None:
        values = values + points @ (s * torch.tensor(spec.known_cost, dtype=points.dtype))
    return values


def _specs(seed: int, count: int):
    rng = np.random.default_rng(seed)
    senses = set()
    for _ in range(count):
        spec = random_known_ilp(rng)
        senses.add(spec.sense)
        yield rng, spec
    assert senses == {"min", "max"}


# --- the pool losses: their definitions over the pool of whole solutions ----------------

def _nce(spec, c_hat, target, pool, aux_star):
    # 1/|S| sum_x F(c_hat, x*) - F(c_hat, x), less the constant <s k[N:], aux*>
    x_star = torch.cat([target, aux_star], dim=1)
    whole = torch.diagonal(_values(spec, c_hat, x_star))
    return whole - _values(spec, c_hat, pool).mean(1) - _aux_known(spec, aux_star)


def _cmap(spec, c_hat, target, pool, aux_star):
    x_star = torch.cat([target, aux_star], dim=1)
    whole = torch.diagonal(_values(spec, c_hat, x_star))
    return whole - _values(spec, c_hat, pool).min(1).values - _aux_known(spec, aux_star)


def _aux_known(spec, aux_star):
    s, n = _sign(spec), spec.num_outputs
    if spec.known_cost is None:
        return aux_star.new_zeros(len(aux_star))
    return aux_star @ (s * torch.tensor(spec.known_cost[n:], dtype=aux_star.dtype))


def _pointwise(spec, c_hat, c, pool):
    return (_values(spec, c, pool) - _values(spec, c_hat, pool)).square().mean(1)


def _pairwise(spec, c_hat, c, pool, margin=0.5):
    best = _values(spec, c, pool).argmin(1)
    predicted = _values(spec, c_hat, pool)
    out = []
    for i in range(len(c_hat)):
        others = [j for j in range(len(pool)) if j != int(best[i])]
        hinges = [torch.relu(margin + predicted[i, best[i]] - predicted[i, j]) for j in others]
        out.append(sum(hinges, predicted.new_zeros(())) / max(len(pool) - 1, 1))
    return torch.stack(out)


def _listwise(spec, c_hat, c, pool, tau=0.7):
    p = torch.softmax(-_values(spec, c, pool) / tau, 1).clamp(min=1e-8)
    return -(torch.log_softmax(-_values(spec, c_hat, pool) / tau, 1) * p).sum(1)


def _pairwise_difference(spec, c_hat, c, pool):
    true, predicted = _values(spec, c, pool), _values(spec, c_hat, pool)
    out = []
    for i in range(len(c_hat)):
        b = int(true[i].argmin())
        errors = [((predicted[i, b] - predicted[i, j]) - (true[i, b] - true[i, j])) ** 2
                  for j in range(len(pool)) if j != b]
        out.append(sum(errors, true.new_zeros(())) / max(len(pool) - 1, 1))
    return torch.stack(out)


POOL_LOSSES = [
    ("NCELoss", {}, _nce, True),
    ("CMAPLoss", {}, _cmap, True),
    ("PointwiseLTRLoss", {}, _pointwise, False),
    ("PairwiseLTRLoss", {"margin": 0.5}, _pairwise, False),
    ("ListwiseLTRLoss", {"temperature": 0.7}, _listwise, False),
    ("PairwiseDifferenceLTRLoss", {}, _pairwise_difference, False),
]


@pytest.mark.parametrize(("name", "options", "definition", "against_solutions"), POOL_LOSSES,
                         ids=[case[0] for case in POOL_LOSSES])
def test_pool_losses_count_the_known_cost_by_brute_force(name, options, definition,
                                                         against_solutions):
    """The pool keeps whole solutions: the seeds and, refreshed, each prediction's
    whole optimum (brute force, known cost counted); the loss and its gradient are the
    definition over that pool, with every objective the whole one."""
    cls = getattr(cl.losses, name)
    checked = differs = 0
    for rng, spec in _specs(3604, 12):
        points = feasible_points(spec)
        n = spec.num_outputs
        x_true = points[rng.integers(len(points), size=BATCH)]
        seeds = np.unique(np.vstack([x_true, points[rng.integers(len(points), size=3)]]), axis=0)
        loss = cls(spec, pool=seeds, reduction="none", backend="highs", **options)
        c_hat = torch.tensor(rng.normal(size=(BATCH, n)), requires_grad=True)
        c = torch.tensor(rng.normal(size=(BATCH, n)))
        y_true = torch.tensor(x_true[:, :n])
        target = y_true if against_solutions else c
        value = loss(c_hat, target)
        value.sum().backward()

        # the pool: the seeds and one whole optimum under each prediction, nothing else
        pool = loss.pool.solutions.numpy()
        assert pool.shape[1] == spec.num_vars
        optima = [optimum_full(spec, row)[1] for row in c_hat.detach().numpy()]
        for row in pool:
            assert ((seeds == row).all(1).any()
                    or any((best == row).all(1).any() for best in optima))
        for best in optima:
            assert any((best == row).all(1).any() for row in pool)

        pool_t = torch.tensor(pool)
        chat_ref = c_hat.detach().clone().requires_grad_(True)
        args = ((torch.tensor(x_true[:, n:]),) if against_solutions else ())
        expected = definition(spec, chat_ref, target, pool_t, *args)
        if expected.requires_grad:  # (a one-row pool leaves the pairwise sums empty)
            expected.sum().backward()
        assert value.detach().numpy() == pytest.approx(expected.detach().numpy(), abs=1e-9)
        assert _grad(c_hat) == pytest.approx(_grad(chat_ref), abs=1e-9)
        if name == "CMAPLoss":  # x* is in the pool: the whole-objective gap is >= 0
            assert (value.detach() + _aux_known(spec, args[0]) >= -1e-9).all()
        checked += BATCH
        differs += _differs_without_known(spec, definition, c_hat.detach(), target, pool_t,
                                          args, value.detach())
    assert checked == 12 * BATCH
    if name != "PointwiseLTRLoss":  # there the known part cancels by definition
        assert differs > 0


def _grad(tensor: torch.Tensor) -> np.ndarray:
    return np.zeros(tuple(tensor.shape)) if tensor.grad is None else tensor.grad.numpy()


def _differs_without_known(spec, definition, c_hat, target, pool, args, value) -> int:
    """How many instances' values the definition without the known cost gets wrong (a
    loss that ignored the known cost would match it)."""
    plain = cl.ILP(**{**spec.model_dump(), "known_cost": None})
    without = definition(plain, c_hat, target, pool, *args)
    return int((~torch.isclose(without, value, atol=1e-7)).sum())


def test_pool_losses_refresh_with_solve_ratio_below_one_keep_whole_solutions():
    """solve_ratio < 1 with a known cost: a call that does not solve reads the seeded
    pool of whole solutions; N-wide seeds are refused by name."""
    rng = np.random.default_rng(7)
    spec, points = None, np.zeros((0, 0))
    while len(points) < 4:
        spec = random_known_ilp(rng)
        points = feasible_points(spec)
    loss = cl.losses.CMAPLoss(spec, solve_ratio=0.0, pool=points[:4], reduction="none",
                              backend="highs")
    c_hat = torch.tensor(rng.normal(size=(2, spec.num_outputs)))
    y_true = torch.tensor(points[:2, : spec.num_outputs])
    value = loss(c_hat, y_true)
    expected = _cmap(spec, c_hat, y_true, torch.tensor(points[:4]),
                     torch.tensor(points[:2, spec.num_outputs :]))
    assert value.numpy() == pytest.approx(expected.numpy(), abs=1e-9)
    assert len(loss.pool) == len(np.unique(points[:4], axis=0))
    with pytest.raises(ValueError, match="concat"):
        cl.losses.NCELoss(spec, pool=points[:4, : spec.num_outputs], backend="highs")



def _two_dimensional_case(case: str):
    """A spec whose costs are 2-D, float64 predictions and targets for it, and the known
    cost of the call (None where the spec has its own)."""
    g = torch.Generator().manual_seed(29)
    if case == "ilp":
        spec = cl.ILP(shape=[2, 2], num_aux=1, known_cost=[0, 0, 0, 0, 0.5],
                      constraints=[cl.Constraint(coefs=[1, 1, 1, 1, 0], sense="<=", rhs=2),
                                   cl.Constraint(coefs={0: 1, 4: -1}, sense="<=", rhs=0)])
        known = None
    else:
        spec = (cl.problems.Matching(3, 3) if case == "matching"
                else cl.problems.ShortestPath.grid(3, 3))
        known = torch.rand(BATCH, 9, generator=g, dtype=torch.float64)
    shape = (BATCH, *spec.cost_shape)
    sign = -1.0 if case == "ilp" else 1.0  # the ILP's best answers take negative costs
    c_hat = sign * torch.rand(shape, generator=g, dtype=torch.float64) + 0.1
    c = sign * torch.rand(shape, generator=g, dtype=torch.float64) + 0.1
    return spec, known, c_hat, c


@pytest.mark.parametrize("case", ["matching", "grid", "ilp"])
@pytest.mark.parametrize(("name", "options", "definition", "against_solutions"), POOL_LOSSES,
                         ids=[case[0] for case in POOL_LOSSES])
def test_pool_losses_refresh_on_a_two_dimensional_cost_shape_with_a_known_cost(
        name, options, definition, against_solutions, case):
    """Costs (B, rows, cols) with a known cost (the call's, or the ILP's own): the
    refreshed pool holds each instance's optimum (float64 solves one at a time) and
    nothing else, and the loss is the one over that pool (the ILP: the same call on
    its 1-D twin, shape=[4])."""
    cls = getattr(cl.losses, name)
    spec, known, c_hat, c = _two_dimensional_case(case)
    solver = cl.make_solver(spec)
    target = solver.solve(c) if against_solutions else c
    loss = cls(spec, reduction="none", **options)
    value = loss(c_hat, target, known_cost=known)

    optima = []
    for i in range(BATCH):
        if known is None:
            y, aux = solver.solve(c_hat[i], return_aux=True)
            optima.append(torch.cat([y.reshape(-1), aux.to(y)]))
        else:
            optima.append(solver.solve(c_hat[i], known_cost=known[i]).reshape(-1))
    optima = torch.unique(torch.stack(optima), dim=0)
    pool = loss.pool.solutions.to(optima)
    assert torch.equal(torch.unique(pool, dim=0), optima)

    if known is None:
        flat_spec = cl.ILP(**{**spec.model_dump(), "shape": [4]})
        flat_target = target.reshape(BATCH, 4)
        expected = cls(flat_spec, reduction="none", **options)(c_hat.reshape(BATCH, 4),
                                                               flat_target)
    else:
        seeded = cls(spec, solve_ratio=0.0, pool=optima.reshape(-1, *spec.cost_shape),
                     reduction="none", **options)
        expected = seeded(c_hat, target, known_cost=known)
    assert value.shape == (BATCH,)
    assert value.numpy() == pytest.approx(expected.numpy(), abs=1e-12)



# --- SPO+ with its solution cache: the affine formula over per-instance solves ---------

def _spo_plus_formula(spec, c_hat, c, known):
    """``<2 c_hat - c, y* - y~> + <k, y* - y~>`` (min form) from float64 solves of each
    instance on its own, with its known cost: the problems here have no auxiliaries."""
    solver = cl.make_solver(spec)
    s = float(solver.sign)
    out = []
    for i in range(len(c_hat)):
        shifted = 2 * c_hat[i] - c[i]
        y_star = solver.solve(c[i], known_cost=known[i]).reshape(-1)
        y_tilde = solver.solve(shifted, known_cost=known[i]).reshape(-1)
        out.append(s * (shifted.reshape(-1) + known[i]) @ (y_star - y_tilde))
    return torch.stack(out)


@pytest.mark.parametrize("case", ["topk_cache", "grid"])
def test_spo_plus_with_a_cached_solver_counts_the_call_known_cost(case):
    """A cached solver (solve_ratio < 1 with every solution seeded; the grid, whose
    shifted step clips negatives) on a problem without auxiliaries: SPO+ with a per-call
    known cost is the affine formula, as with solve_ratio=1."""
    g = torch.Generator().manual_seed(41)
    if case == "grid":
        spec = cl.problems.ShortestPath.grid(3, 4, neighborhood=4)
        loss = cl.losses.SPOPlusLoss(spec, reduction="none")
    else:
        spec = cl.problems.TopK(5, 2)
        every = torch.zeros(10, 5, dtype=torch.float64)
        for row, pair in enumerate(itertools.combinations(range(5), 2)):
            every[row, list(pair)] = 1.0
        loss = cl.losses.SPOPlusLoss(spec, solve_ratio=0.5, pool=every, reduction="none",
                                     generator=torch.Generator().manual_seed(0))
    assert loss.shifted_solver is not loss.solver  # the cached branch
    shape = (BATCH, *spec.cost_shape)
    c_hat = torch.rand(shape, generator=g, dtype=torch.float64) + 1.0
    c = 1.9 * torch.rand(shape, generator=g, dtype=torch.float64) + 0.05  # 2 c_hat - c > 0
    known = torch.rand(BATCH, spec.num_vars, generator=g, dtype=torch.float64)
    value = loss(c_hat, c, known_cost=known)
    expected = _spo_plus_formula(spec, c_hat, c, known)
    assert value.numpy() == pytest.approx(expected.numpy(), abs=1e-12)
    exact = cl.losses.SPOPlusLoss(spec, reduction="none")(c_hat, c, known_cost=known)
    assert value.numpy() == pytest.approx(exact.numpy(), abs=1e-12)
    assert (expected != 0).any()


# --- PG: the finite difference of the whole optimal value ---------------------------------

@pytest.mark.parametrize("two_sides", [False, True])
def test_pg_counts_the_known_cost_by_brute_force(two_sides):
    """loss = (V(upper) - V(lower)) / width with V(u) = min_x F(u, x) (brute force), and
    d loss / d c_hat = s (y(upper) - y(lower)) / width."""
    sigma = 0.3
    checked = differs = 0
    for rng, spec in _specs(3605, 15):
        s, n = _sign(spec), spec.num_outputs
        points = feasible_points(spec)
        loss = cl.losses.PGLoss(spec, sigma=sigma, two_sides=two_sides, reduction="none",
                                backend="highs")
        c_hat = torch.tensor(rng.normal(size=(BATCH, n)), requires_grad=True)
        c = torch.tensor(rng.normal(size=(BATCH, n)))
        value = loss(c_hat, c)
        value.sum().backward()
        value = value.detach()
        width = 2 * sigma if two_sides else sigma
        for i in range(BATCH):
            ch, ct = c_hat[i].detach().numpy(), c[i].numpy()
            upper = ch + sigma * ct if two_sides else ch
            lower = ch - sigma * ct
            best_u, x_u = optimum_full(spec, upper)
            best_l, x_l = optimum_full(spec, lower)
            # optimum_full's values are in the spec's sense: s * value is the min form
            assert float(value[i]) == pytest.approx(s * (best_u - best_l) / width, abs=1e-9)
            grad = s * (x_u[0, :n] - x_l[0, :n]) / width
            assert c_hat.grad[i].numpy() == pytest.approx(grad, abs=1e-9)
            # without the known cost the value would be another one
            plain_u = s * (points[:, :n] @ upper)
            plain_l = s * (points[:, :n] @ lower)
            plain = (plain_u.min() - plain_l.min()) / width
            differs += not np.isclose(plain, float(value[i]))
            checked += 1
    assert checked == 15 * BATCH and differs > 0


# --- what still refuses --------------------------------------------------------------------

def test_cave_still_refuses_a_known_cost():
    spec = cl.ILP(shape=[3], num_aux=1, known_cost=[1.0, 0, 0, 2.0],
                  constraints=[cl.Constraint(coefs=[1, 1, 1, 1], sense="<=", rhs=2)])
    with pytest.raises(ValueError, match="CaVELoss does not support a known cost"):
        cl.losses.CaVELoss(spec, backend="highs")


# --- RFY and RFWO: the regularised problem over whole solutions ----------------------------

def _regularised(spec, cost, lam):
    """Brute force: ``mu = argmin_{mu in conv(X)} <s cost, mu_y> + <s k, mu> + lam/2 ||mu_y||^2``
    over the enumerated whole points, as a QP in the convex weights (Clarabel, tight
    tolerances). Returns ``(mu_y, <s k, mu>)``."""
    import clarabel
    import scipy.sparse as sp

    s, n = _sign(spec), spec.num_outputs
    points = feasible_points(spec)
    outputs, count = points[:, :n], len(points)
    known = np.zeros(spec.num_vars) if spec.known_cost is None else np.asarray(spec.known_cost,
                                                                               dtype=float)
    linear = s * (outputs @ cost + points @ known)
    P = sp.csc_matrix(np.triu(lam * outputs @ outputs.T + 1e-12 * np.eye(count)))
    A = sp.csc_matrix(np.vstack([np.ones((1, count)), -np.eye(count)]))
    b = np.r_[1.0, np.zeros(count)]
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.tol_gap_abs = settings.tol_gap_rel = settings.tol_feas = 1e-11
    weights = np.asarray(clarabel.DefaultSolver(
        P, linear, A, b, [clarabel.ZeroConeT(1), clarabel.NonnegativeConeT(count)],
        settings).solve().x)
    return weights @ outputs, s * weights @ (points @ known)


def test_regularized_fenchel_young_counts_the_known_cost_by_brute_force():
    """RFY's y_lam is the regularised optimum over whole solutions (the QP over the
    enumerated points), its value Omega(y_true) - Omega(y_lam) + <c, y_true - y_lam>
    + <k[:N], y_true> - <k, mu> (min form) and its gradient s (y_true - y_lam)."""
    lam = 0.7
    checked = differs = 0
    for rng, spec in _specs(3606, 10):
        s, n = _sign(spec), spec.num_outputs
        points = feasible_points(spec)
        loss = cl.losses.RegularizedFenchelYoungLoss(spec, lam=lam, tol=1e-12, reduction="none",
                                                     backend="highs")
        c_pred = torch.tensor(rng.normal(size=(2, n)), requires_grad=True)
        y_true = torch.tensor(points[rng.integers(len(points), size=2), :n])
        value = loss(c_pred, y_true)
        value.sum().backward()
        value = value.detach()
        known = s * np.asarray(spec.known_cost, dtype=float)
        for i in range(2):
            c, yt = s * c_pred[i].detach().numpy(), y_true[i].numpy()
            mu_y, mu_known = _regularised(spec, c_pred[i].detach().numpy(), lam)
            expected = (0.5 * lam * (yt @ yt - mu_y @ mu_y) + c @ (yt - mu_y)
                        + known[:n] @ yt - mu_known)
            assert float(value[i]) == pytest.approx(expected, abs=1e-5)
            assert c_pred.grad[i].numpy() == pytest.approx(s * (yt - mu_y), abs=1e-4)
            plain_mu = _regularised(cl.ILP(**{**spec.model_dump(), "known_cost": None}),
                                    c_pred[i].detach().numpy(), lam)[0]
            differs += not np.allclose(plain_mu, mu_y, atol=1e-4)
            checked += 1
    assert checked == 20 and differs > 0


def test_rfwo_layer_counts_the_known_cost_by_brute_force():
    """RFWO in a layer (training): the output is the regularised optimum over whole
    solutions; its backward matches the finite difference of that optimum (brute force)
    along random directions."""
    lam, eps = 0.7, 1e-4
    checked = 0
    for rng, spec in _specs(3607, 8):
        n = spec.num_outputs
        layer = cl.ComboLayer(spec, method=cl.RegularizedFrankWolfe(lam=lam, tol=1e-12),
                              projection="none", backend="highs")
        w = torch.tensor(rng.normal(size=(2, n)), requires_grad=True)
        g = torch.tensor(rng.normal(size=(2, n)))
        y = layer(w)
        (y * g).sum().backward()
        for i in range(2):
            wi = w[i].detach().numpy()
            assert y[i].detach().numpy() == pytest.approx(_regularised(spec, wi, lam)[0],
                                                          abs=1e-5)
            direction = rng.normal(size=n)
            ahead = _regularised(spec, wi + eps * direction, lam)[0]
            behind = _regularised(spec, wi - eps * direction, lam)[0]
            numeric = g[i].numpy() @ (ahead - behind) / (2 * eps)
            assert float(w.grad[i].numpy() @ direction) == pytest.approx(numeric, abs=1e-3)
            checked += 1
    assert checked == 16
