"""CaVE: the binding cone from the canonical form, its projection, the loss, and PyEPO."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from pyepo_kit import SPEC_MAX, SPEC_MIN, brute_min, pyepo_knapsack, pyepo_shortest_path, sign_of
from scipy.optimize import nnls

import combolayer as cl
from combolayer.losses.cave import binding_normals, cone_projection

pytest.importorskip("clarabel")


def rows(a: np.ndarray) -> set[tuple[float, ...]]:
    return {tuple(float(v) + 0.0 for v in r) for r in np.asarray(a)}


def test_binding_normals_by_hand():
    (normals,) = binding_normals(SPEC_MIN, torch.tensor([1.0, 0.0, 1.0, 0.0]))
    assert rows(normals) == {(1, 1, 0, 0), (0, 0, -1, -1), (0, -1, 0, 0), (0, 0, 0, -1),
                             (1, 0, 0, 0), (0, 0, 1, 0)}
    (normals,) = binding_normals(SPEC_MIN, torch.tensor([0.0, 0.0, 1.0, 1.0]))
    assert (1, 1, 0, 0) not in rows(normals) and (0, 0, -1, -1) not in rows(normals)


@pytest.mark.parametrize("spec", [SPEC_MIN, SPEC_MAX], ids=["min", "max"])
def test_the_true_cost_lies_in_its_cone(spec):
    """KKT: -c is in the cone at y*(c), so the exact projection gives loss 0."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(6, 4, generator=gen, dtype=torch.float64)
    sign = sign_of(spec)
    y_star = brute_min(sign * w)
    loss = cl.losses.CaVELoss(spec, max_iter=200, reduction="none")(w, y_star)
    torch.testing.assert_close(loss, torch.zeros(6, dtype=torch.float64), atol=1e-6, rtol=0)
    other = cl.losses.CaVELoss(spec, max_iter=200, reduction="none")(-w, y_star)
    assert (other > 1e-3).all()


@pytest.mark.parametrize("spec", [SPEC_MIN, SPEC_MAX], ids=["min", "max"])
def test_cave_projection_and_gradient_match_the_formula(spec):
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    sign = sign_of(spec)
    y_true = brute_min(sign * torch.randn(5, 4, generator=gen, dtype=torch.float64))
    loss = cl.losses.CaVELoss(spec, max_iter=200, reduction="sum")(w, y_true)
    loss.backward()
    s = -sign * w.detach()
    expected_value, expected_grad = 0.0, torch.zeros_like(w)
    for b, normals in enumerate(binding_normals(spec, y_true)):
        lam, _ = nnls(normals.T, s[b].numpy())
        p = torch.as_tensor(normals.T @ lam)
        torch.testing.assert_close(torch.as_tensor(
            cone_projection(s[b].numpy(), normals, 200)), p, atol=1e-6, rtol=1e-6)
        sn, pn = s[b].norm(), p.norm()
        expected_value += 1 - (s[b] @ p) / (sn * pn)
        grad_s = -(p / (sn * pn) - (s[b] @ p) * s[b] / (sn**3 * pn))
        expected_grad[b] = -sign * grad_s
    torch.testing.assert_close(loss.detach(), expected_value, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(w.grad, expected_grad, atol=1e-6, rtol=1e-6)


def test_cave_hybrid_heuristic_branch():
    w = torch.tensor([[0.5, -1.0, 2.0, 0.3]], dtype=torch.float64, requires_grad=True)
    y_true = torch.tensor([[1.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
    loss = cl.losses.CaVELoss(SPEC_MIN, solve_ratio=0.0, inner_ratio=0.25)(w, y_true)
    (normals,) = binding_normals(SPEC_MIN, y_true)
    unit = normals / np.linalg.norm(normals, axis=1, keepdims=True)
    s = -w.detach()[0]
    p = 0.75 * s / s.norm() + 0.25 * torch.as_tensor(unit.mean(0))
    torch.testing.assert_close(loss.detach(), 1 - (s @ p) / (s.norm() * p.norm()))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cave_takes_half_precision_predictions(dtype):
    """bfloat16 predictions raised (numpy has no bfloat16): they are projected in float64,
    and the loss, as every loss on half-precision inputs, is float32."""
    spec = cl.problems.TopK(5, 2)
    g = torch.Generator().manual_seed(0)
    y_true = cl.make_solver(spec).solve(torch.rand(3, 5, generator=g))
    pred = torch.rand(3, 5, generator=g)
    loss = cl.losses.CaVELoss(spec)
    expected = loss(pred.to(dtype).double(), y_true.double())
    got = loss(pred.to(dtype), y_true.to(dtype))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), expected, atol=2e-2, rtol=2e-2)


def test_cave_errors():
    with pytest.raises(ValueError, match=r"binary problems: y_true must be 0/1 for "
                       r"ILP\(shape=\[4\]\), got values such as \[0.5 0.5\]"):
        cl.losses.CaVELoss(SPEC_MIN)(torch.rand(4), torch.tensor([0.5, 0.5, 1.0, 0.0]))
    # integers other than 0/1 are named too (an integer ILP's solution)
    integer = cl.ILP(shape=[3], integrality="integer", upper=3,
                     constraints=[cl.Constraint(coefs=[1, 1, 1], sense="<=", rhs=5)])
    with pytest.raises(ValueError, match=r"y_true must be 0/1 for ILP\(shape=\[3\]\), got "
                       r"values such as \[2. 3.\]"):
        cl.losses.CaVELoss(integer)(torch.rand(3), torch.tensor([2.0, 0.0, 3.0]))
    with pytest.raises(ValueError, match=r"binding has 1 cones of 3 columns but 1 \(the batch\) "
                       r"of 4 were expected"):
        cl.losses.CaVELoss(SPEC_MIN)(torch.rand(1, 4), torch.tensor([[1.0, 0, 1, 0]]),
                                     binding=torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match="max_iter must be an int >= 1, got 0"):
        cl.losses.CaVELoss(SPEC_MIN, max_iter=0)


@pytest.mark.parametrize("problem", ["shortest_path", "knapsack"])
def test_cave_agrees_with_pyepo(problem):
    model, spec = pyepo_shortest_path() if problem == "shortest_path" else pyepo_knapsack()
    from pyepo.data.dataset import collate_tight_constraints, optDatasetConstrs
    from pyepo.func import CaVE

    n = spec.cost_shape[0]
    gen = torch.Generator().manual_seed(2)
    costs = torch.rand(4, n, generator=gen, dtype=torch.float64)
    dataset = optDatasetConstrs(model, np.zeros((4, 1)), costs.numpy())
    _, _, sols, _, tight = collate_tight_constraints([dataset[i] for i in range(4)])
    ours = binding_normals(spec, sols)
    for mine, theirs in zip(ours, tight, strict=True):
        theirs = theirs.numpy()
        assert rows(mine) == rows(theirs[np.abs(theirs).sum(1) > 0])
    cost = torch.rand(4, n, generator=gen, dtype=torch.float64)
    for max_iter in (3, 50):
        a, b, c = (cost.clone().requires_grad_() for _ in range(3))
        their_loss = CaVE(model, max_iter=max_iter)(a, tight.double())
        our_loss = cl.losses.CaVELoss(spec, max_iter=max_iter)(b, sols)
        same_rows = cl.losses.CaVELoss(spec, max_iter=max_iter)(c, sols, binding=tight)
        for loss in (their_loss, our_loss, same_rows):
            loss.backward()
        torch.testing.assert_close(same_rows, their_loss.detach(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(c.grad, a.grad, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(our_loss, their_loss.detach(), atol=1e-4, rtol=1e-4)


def brute_force_tight_rows(spec, y: np.ndarray, subsets: bool = False) -> set:
    """Every constraint of ``spec.to_ilp()`` (outputs only, no auxiliaries) and bound
    that binds at ``y``, one at a time from the constraint objects, ``<=`` oriented;
    with ``subsets`` (the edge-form TSP) its degree rows and every subtour row
    ``x(E(S)) <= |S| - 1``, ``S`` of 3 to ``n - 3`` nodes."""
    found = set()
    n = y.size
    for constraint in (spec.degree_ilp() if subsets else spec.to_ilp()).constraints:
        row = np.zeros(n)
        for j, v in constraint.items():
            row[j] += v
        lhs = row @ y
        if constraint.sense in ("<=", "==") and abs(lhs - constraint.rhs) < 1e-9:
            found.add(tuple(row + 0.0))
        if constraint.sense in (">=", "==") and abs(lhs - constraint.rhs) < 1e-9:
            found.add(tuple(-row + 0.0))
    for k in range(n):
        e = np.zeros(n)
        e[k] = 1.0
        found.add(tuple(e if y[k] == 1 else -e + 0.0))
    if not subsets:
        return found
    by_size: dict[int, set] = {}
    nodes = spec.num_nodes
    i, j = (np.array(p) for p in zip(*itertools.combinations(range(nodes), 2), strict=True))
    for size in range(3, nodes - 2):
        for members in itertools.combinations(range(nodes), size):
            inside = np.isin(np.arange(nodes), members)
            row = (inside[i] & inside[j]).astype(float)
            if row @ y == size - 1:
                by_size.setdefault(size, set()).add(tuple(row))
    return found, by_size


@pytest.mark.parametrize("problem", ["ilp", "knapsack", "path", "tsp_edges"])
def test_cones_match_brute_force_enumeration_of_the_tight_rows(problem):
    gen = torch.Generator().manual_seed(3)
    if problem == "ilp":
        spec = SPEC_MIN
    elif problem == "knapsack":
        spec = cl.problems.Knapsack(weights=[[3, 4, 2, 5, 1]], capacities=[7])
    elif problem == "path":
        spec = cl.problems.ShortestPath(num_nodes=5, edges=[(0, 1), (0, 2), (1, 2), (1, 3), (2, 3),
                                                            (2, 4), (3, 4)], source=0, target=4)
    else:
        spec = cl.problems.TSPEdges(7)
    y = cl.make_solver(spec).solve(torch.rand(4, *spec.cost_shape, generator=gen,
                                              dtype=torch.float64))
    cones = cl.losses.binding_cones(spec, y)
    assert len(cones) == 4 and cones.width == spec.cost_shape[0]
    for b in range(4):
        ours = rows(cones[b])
        enumerated = brute_force_tight_rows(spec, y[b].numpy(), subsets=problem == "tsp_edges")
        if problem != "tsp_edges":
            assert ours == enumerated
            continue
        # the listed rows, the bounds and the subtour rows of three nodes (the tour's
        # three-node segments, 7 of them), each holding at every tour; longer ones left out
        listed, by_size = enumerated
        assert listed | by_size[3] == ours and len(by_size[3]) == 7
        from test_tsp_edges import all_tours

        assert (all_tours(7) @ np.array(sorted(by_size[3])).T <= 2).all()


def test_cones_with_auxiliaries_contain_the_true_cost():
    """A spec with auxiliary variables: the cone lives in all variables, and -(c, 0)
    lies in it at y*(c), so the exact projection gives loss 0, and not for -c."""
    for spec in (cl.problems.ShortestPath.grid(3, 3), cl.problems.TSP(5)):
        gen = torch.Generator().manual_seed(4)
        w = torch.rand(4, *spec.cost_shape, generator=gen, dtype=torch.float64)
        y = cl.make_solver(spec).solve(w)
        cones = cl.losses.binding_cones(spec, y)
        assert cones.width >= int(np.prod(spec.cost_shape))
        loss = cl.losses.CaVELoss(spec, max_iter=200, reduction="none")
        torch.testing.assert_close(loss(w, y, binding=cones), torch.zeros(4, dtype=torch.float64),
                                   atol=1e-6, rtol=0)
        assert (loss(-w, y, binding=cones) > 1e-3).all()
    grid = cl.problems.ShortestPath.grid(3, 3)
    assert cl.losses.binding_cones(grid, y := cl.make_solver(grid).solve(torch.rand(2, 3, 3))
                                   ).width == grid.to_ilp().num_vars
    with pytest.raises(ValueError, match=r"y_true\[0\] is not a feasible solution"):
        cl.losses.binding_cones(grid, torch.zeros(1, 3, 3))


@pytest.mark.parametrize("max_iter", [3, 50])
def test_precomputed_cones_give_the_loss_without_them(max_iter):
    data = cl.data.shortest_path(12, num_features=3, grid=(3, 4), deg=2)
    cones = cl.losses.binding_cones(data.spec, data.solutions)
    loss = cl.losses.CaVELoss(data.spec, max_iter=max_iter, reduction="none")
    gen = torch.Generator().manual_seed(5)
    index = torch.tensor([3, 0, 7, 11, 5])
    for _ in range(2):  # the second call reuses the cones' kept QPs
        w = torch.randn(5, *data.spec.cost_shape, generator=gen, dtype=torch.float64)
        grads = []
        values = []
        for binding in (None, cones[index], cones[index].padded(torch.float64),
                        [cones[int(i)] for i in index]):
            a = w.clone().requires_grad_()
            value = loss(a, data.solutions[index].double(), binding=binding)
            value.sum().backward()
            values.append(value.detach())
            grads.append(a.grad)
        for value, grad in zip(values[1:], grads[1:], strict=True):
            assert torch.equal(value, values[0]) and torch.equal(grad, grads[0])
    assert tuple(cones.padded().shape) == (12, max(len(cones[i]) for i in range(12)), 17)


def test_training_reads_the_cones_once(monkeypatch):
    from combolayer.losses import cave
    from combolayer.training.loop import fit

    calls = []
    original = cave.ConeRows.__call__
    monkeypatch.setattr(cave.ConeRows, "__call__",
                        lambda self, y: calls.append(len(y)) or original(self, y))
    train, test = cl.data.shortest_path(48, num_features=3, grid=(3, 3), deg=2).split(32)
    layer = cl.ComboLayer(train.spec)
    history = fit(layer, train, test, epochs=3, batch_size=8, loss="cave", lr=0.05)
    assert calls == [32]  # the whole training set, once, before the first step
    assert len(history.loss) == 3 and history.loss[-1] < history.loss[0]
