"""Solver wrappers (combolayer/backends/wrapper.py): binding rows or a known cost to a
wrapper keeps what the wrapper changes in force; binding again replaces the binding."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import combolayer as cl
from combolayer.backends.clip import ClipNegatives, clip_negatives
from combolayer.backends.solver import KnownBound, Recorder
from combolayer.backends.wrapper import RowBound

# Two paths from 0 to 2: the edge (0, 2) alone, or (0, 1) then (1, 2).
SPEC = cl.problems.ShortestPath(num_nodes=3, edges=[(0, 1), (1, 0), (1, 2), (0, 2), (2, 1)],
                                source=0, target=2)
DIRECT = [0.0, 0.0, 0.0, 1.0, 0.0]
AROUND = [1.0, 0.0, 1.0, 0.0, 0.0]
BAR_DIRECT = torch.tensor([[0.0, 0.0, 0.0, 1.0, 0.0]]), torch.tensor([0.0])  # x_(0,2) <= 0
AROUND_DEAR = torch.tensor([10.0, 0.0, 0.0, 0.0, 0.0])  # a known cost on the edge (0, 1)


def _wrappers(solver):
    A, b = BAR_DIRECT
    return {"clip": clip_negatives(solver, "a test", "call"), "recorder": Recorder(solver),
            "known": KnownBound(solver, torch.zeros(5)), "rows": RowBound(solver, 0 * A, b)}


def test_binding_to_a_wrapper_wraps_it_and_binding_again_replaces():
    """Rows or a known cost bound to a wrapper wrap that wrapper; rows bound to rows, or a
    known cost to a known cost, replace them; a known cost bound to rows goes under them."""
    solver = cl.make_solver(SPEC)
    A, b = BAR_DIRECT
    wrappers = _wrappers(solver)
    for name, wrapper in wrappers.items():
        rows = wrapper.bind_rows(A, b)
        assert isinstance(rows, RowBound), name
        assert rows._solver is (solver if name == "rows" else wrapper), name
        known = wrapper.bind_known(AROUND_DEAR)
        if name == "rows":
            assert isinstance(known, RowBound) and torch.equal(known.A, wrapper.A)
            known = known._solver
        assert isinstance(known, KnownBound), name
        assert known._solver is (solver if name in ("known", "rows") else wrapper), name
    assert repr(wrappers["clip"]) == f"ClipNegatives({solver!r})"


def test_a_clipping_wrapper_still_clips_under_bound_rows_and_known_costs():
    """Negative costs the library made are clipped before a solver bound to rows or to a
    known cost, as before a bare one (unclipped, Dijkstra on this graph with cycles
    refuses them)."""
    solver = cl.make_solver(SPEC)
    clip = clip_negatives(solver, "a test", "call")
    assert isinstance(clip, ClipNegatives)
    made = torch.tensor([[-4.0, 5.0, -4.0, 3.0, 1.0]])  # clipped: the way around is free
    A, b = BAR_DIRECT
    with pytest.warns(RuntimeWarning, match="a test made some costs negative"):
        assert clip.bind_rows(A, b).solve_min(made).tolist() == [AROUND]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert clip.bind_known(AROUND_DEAR).solve_min(made).tolist() == [DIRECT]
    with pytest.raises(ValueError, match="negative costs"):
        solver.bind_known(AROUND_DEAR).solve_min(made)


def test_rows_and_a_known_cost_bound_in_either_order_both_count():
    solver = cl.make_solver(SPEC)
    costs = torch.tensor([[1.0, 5.0, 1.0, 3.0, 1.0]])
    A, b = BAR_DIRECT
    assert solver.bind_known(AROUND_DEAR).solve_min(costs).tolist() == [DIRECT]
    rows_first = solver.bind_rows(A, b).bind_known(AROUND_DEAR)
    known_first = solver.bind_known(AROUND_DEAR).bind_rows(A, b)
    assert rows_first.solve_min(costs).tolist() == known_first.solve_min(costs).tolist() == [
        AROUND]
    # the batch entry point the estimators' shells use counts both too, in either order
    generator = torch.Generator().manual_seed(0)
    many = torch.rand(64, 5, generator=generator, dtype=torch.float64)
    known = 2 * torch.rand(64, 5, generator=generator, dtype=torch.float64)
    bar = torch.eye(5, dtype=torch.float64)[torch.randint(0, 5, (64,), generator=generator)]
    expected = solver.bind_rows(bar[:, None], torch.zeros(64, 1)).bind_known(known).solve_min(
        many)
    for bound in (solver.bind_rows(bar[:, None], torch.zeros(64, 1)).bind_known(known),
                  solver.bind_known(known).bind_rows(bar[:, None], torch.zeros(64, 1))):
        assert torch.equal(bound.solve_batch(many), expected)
    assert not torch.equal(solver.bind_known(known).solve_batch(many), expected)
    assert not torch.equal(solver.bind_rows(bar[:, None], torch.zeros(64, 1)).solve_batch(many),
                           expected)
    # a known cost bound again replaces the first: zero leaves the plain optimum
    again = solver.bind_known(AROUND_DEAR).bind_known(torch.zeros(5))
    assert again.solve_min(costs).tolist() == solver.solve_min(costs).tolist() == [AROUND]
    # under rows too (rows that bar nothing here)
    again = solver.bind_rows(0 * A, b).bind_known(AROUND_DEAR).bind_known(torch.zeros(5))
    assert isinstance(again, RowBound) and isinstance(again._solver, KnownBound)
    assert again.solve_min(costs).tolist() == [AROUND]


def test_a_wrappers_public_solve_solves_with_what_it_binds():
    """solve() on a wrapper runs Solver.solve's checks and sense through the wrapper's
    solve_min: bound rows and a bound known cost hold (they were ignored before)."""
    spec = cl.problems.TopK(n=3, k=1)  # a max problem: the sense is folded in
    solver = cl.make_solver(spec, "highs")
    w = torch.tensor([[3.0, 2.0, 1.0]])
    assert solver.solve(w).tolist() == [[1, 0, 0]]
    rows = solver.bind_rows(torch.tensor([[1.0, 0.0, 0.0]]), torch.tensor([0.0]))
    assert rows.solve(w).tolist() == [[0, 1, 0]]
    known = solver.bind_known(torch.tensor([0.0, 0.0, -5.0]))  # minimisation form: +5
    assert known.solve(w).tolist() == [[0, 0, 1]]
    y, status = rows.solve(w.numpy(), return_status=True)
    assert y.tolist() == [[0, 1, 0]] and status == ("optimal",)
    with pytest.raises(ValueError, match="finite"):
        rows.solve(torch.tensor([[float("nan"), 0.0, 0.0]]))


def test_a_bound_wrapper_given_the_same_argument_again_adds_or_refuses():
    spec = cl.problems.TopK(n=3, k=1)
    solver = cl.make_solver(spec, "highs")
    w = torch.tensor([[3.0, 2.0, 1.0]])
    known = solver.bind_known(torch.tensor([0.0, -0.5, 0.0]))  # minimisation form: +0.5
    assert known.solve(w).tolist() == [[1, 0, 0]]  # 3 | 2.5 | 1
    # the call's known cost adds to the bound one: 3 | 2 + 0.5 + 0.75 | 1
    assert known.solve(w, known_cost=torch.tensor([0.0, 0.75, 0.0])).tolist() == [[0, 1, 0]]
    rows = solver.bind_rows(torch.tensor([[1.0, 0.0, 0.0]]), torch.tensor([0.0]))
    with pytest.raises(ValueError, match="bind_rows"):
        rows.solve(w, A=torch.tensor([[0.0, 1.0, 0.0]]), b=torch.tensor([0.0]))


def test_a_recorders_solve_returns_numpy_auxiliaries_for_numpy_costs():
    spec = cl.ILP(shape=[2], num_aux=1, constraints=[
        cl.Constraint(coefs=[1, 1, 0], sense="==", rhs=1),
        cl.Constraint(coefs=[1, 0, -1], sense="==", rhs=0)])
    recorder = Recorder(cl.make_solver(spec, "highs"))
    y, aux = recorder.solve(np.array([[0.0, 1.0]]), return_aux=True)
    assert isinstance(y, np.ndarray) and isinstance(aux, np.ndarray)
    assert aux.tolist() == [[1.0]] and recorder.aux[0].tolist() == [[1.0]]


def test_rows_bound_as_numpy_arrays_solve_as_tensors_do():
    spec = cl.ILP(shape=[3], num_aux=1,
                  constraints=[cl.Constraint(coefs=[1, 1, 1, 1], sense="==", rhs=2)])
    solver = cl.make_solver(spec, "highs")
    A, b = np.array([[1.0, 1.0, 0.0, 0.0]]), np.array([0.0])
    costs = np.array([-1.0, -2.0, 3.0])
    y = solver.bind_rows(A, b).solve(costs)
    assert y.tolist() == solver.bind_rows(torch.tensor(A), torch.tensor(b)).solve(costs).tolist()
    assert y.tolist() == [0.0, 0.0, 1.0]  # without the row: [1, 1, 0]
    assert solver.solve(costs).tolist() == [1.0, 1.0, 0.0]
