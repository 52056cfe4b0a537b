"""HiGHS keeps process-global state (its thread scheduler and its banner), so
these checks run in a fresh interpreter each: the first solver use is the
code under test, as it is for a user's script."""

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("highspy")


def run_fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)


def test_first_solver_use_is_a_layer_and_mips_stay_exact():
    # projection="auto" runs cl.analyze (HiGHS) before the layer's own MIP model:
    # with highspy 1.16 every later solve returned 'Not Set'.
    result = run_fresh("""
        import itertools
        import numpy as np, torch, combolayer as cl
        spec = cl.ILP(shape=[6], constraints=[
            cl.Constraint(coefs=[3, 1, 4, 1, 5, 2], sense="<=", rhs=7),
            cl.Constraint(coefs=[1, 1, 1, 1, 1, 1], sense=">=", rhs=2)])
        layer = cl.ComboLayer(spec, backend="highs")
        w = torch.randn(16, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        y = layer(w).numpy()
        points = [p for p in itertools.product([0, 1], repeat=6)
                  if np.dot([3, 1, 4, 1, 5, 2], p) <= 7 and sum(p) >= 2]
        best = np.array([min(np.dot(c, p) for p in points) for c in w.numpy()])
        assert np.allclose((y * w.numpy()).sum(1), best), (y, best)
        print("ok")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"  # and no banner or solver log on stdout
    assert "HiGHS" not in result.stderr


def test_mixed_thread_counts_and_a_cvxpy_solve_first_all_solve_exactly():
    pytest.importorskip("cvxpy")
    result = run_fresh("""
        import numpy as np, combolayer as cl
        spec = cl.ILP(shape=[6], integrality="integer", upper=3, constraints=[
            cl.Constraint(coefs=[1, 2, 3, 1, 1, 2], sense="<=", rhs=7)])
        costs = np.random.default_rng(0).normal(size=(4, 6))
        first = cl.make_solver(spec, "cvxpy").solve(costs)  # HiGHS via cvxpy, default threads
        outs = [cl.make_solver(spec, {"name": "highs", "threads": t}).solve(costs)
                for t in (1, 2, 1, 0, 2)]
        assert all(np.array_equal(o, first) for o in outs)
        print("ok")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


def test_verbose_shows_the_solver_log():
    result = run_fresh("""
        import numpy as np, combolayer as cl
        spec = cl.ILP(shape=[3], constraints=[cl.Constraint(coefs=[1, 1, 1], sense="==", rhs=1)])
        cl.make_solver(spec, {"name": "highs", "verbose": True}).solve(np.array([1.0, 0, 2]))
    """)
    assert result.returncode == 0, result.stderr
    assert "HiGHS" in result.stdout


def test_a_failed_solver_call_names_the_call_and_the_status():
    import highspy

    from combolayer.backends.highs import check_status
    from combolayer.errors import SolverError

    with pytest.raises(SolverError, match=r"passModel returned kError, expected kOk"):
        check_status(highspy.HighsStatus.kError, "passModel")
    check_status(highspy.HighsStatus.kWarning, "passModel")  # a warning is not an error


def test_every_solver_is_silent_by_default():
    pytest.importorskip("pyscipopt")
    pytest.importorskip("cvxpy")
    result = run_fresh("""
        import numpy as np, combolayer as cl
        spec = cl.ILP(shape=[6], constraints=[
            cl.Constraint(coefs=[3, 1, 4, 1, 5, 2], sense="<=", rhs=7)])
        costs = np.random.default_rng(0).normal(size=(3, 6))
        for backend in ["scip", "cvxpy", "highs", {"name": "cvxpy", "options": {"solver": "SCIP"}}]:
            cl.make_solver(spec, backend).solve(costs)
        cl.analyze(spec, exact=True)
    """)
    assert result.returncode == 0, result.stderr
    assert (result.stdout, result.stderr) == ("", "")


# -- forked workers after a multi-threaded HiGHS solve -------------------------------------


FORK_SCRIPT = """
import multiprocessing, sys
import numpy as np, torch, combolayer as cl

backend = {backend!r}
spec = cl.ILP(shape=[6], sense="max", constraints=[
    cl.Constraint(coefs=[3, 1, 4, 1, 5, 2], sense="<=", rhs=7)])
layer = cl.ComboLayer(spec, backend=backend, projection="none")
costs = torch.randn(6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
expected = layer(costs)  # the parent solves first: HiGHS's scheduler now has threads


def child(queue):
    queue.put(layer(costs).tolist())


context = multiprocessing.get_context("fork")
queue = context.Queue()
process = context.Process(target=child, args=(queue,))
process.start()
assert queue.get(timeout=60) == expected.tolist()
process.join(60)
assert process.exitcode == 0, process.exitcode


class Solving(torch.utils.data.Dataset):
    def __len__(self):
        return len(costs)

    def __getitem__(self, i):
        with torch.no_grad():
            return layer(costs[i])


loader = torch.utils.data.DataLoader(Solving(), batch_size=3, num_workers=2,
                                     multiprocessing_context="fork", timeout=60)
torch.testing.assert_close(torch.cat(list(loader)), expected)
print("ok")
"""


FORK_BACKENDS = {
    "highs-threads-2": {"name": "highs", "threads": 2},
    "highs-threads-0": {"name": "highs", "threads": 0},
    "cvxpy-HIGHS": {"name": "cvxpy", "options": {"solver": "HIGHS"}},
    "scip": {"name": "scip"},
}


@pytest.mark.parametrize("backend", sorted(FORK_BACKENDS))
def test_fork_workers_solve_after_the_parent_solved_with_a_threaded_highs(backend):
    # Before: the forked child (a Process or a DataLoader worker) hung in its first
    # HiGHS solve, waiting on the parent's scheduler threads, which a fork does not copy.
    if backend.startswith("cvxpy"):
        pytest.importorskip("cvxpy")
    script = FORK_SCRIPT.format(backend=FORK_BACKENDS[backend])
    try:
        result = subprocess.run([sys.executable, "-c", script], capture_output=True,
                                text=True, timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail(f"forked workers hung with backend {backend}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.endswith("ok\n")
