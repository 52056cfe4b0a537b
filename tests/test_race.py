"""``backend="race"`` (opt-in): the capable exact backends are timed on the run's first
instances, the same for all, and the fastest (least total time) solves the rest.

Racing solvers may return different optima of a cost with ties, so these tests check
optimality (against brute-force enumeration), never equality of solutions; and that
the default ``"auto"`` never races and repeats a run bit for bit.
"""

from __future__ import annotations

import copy
import itertools
import logging
import pickle
import threading
import time

import numpy as np
import pytest
import torch
from bruteforce import optimum, random_ilp

import combolayer as cl
from combolayer.backends import race, registry
from combolayer.backends.race import RacingKernel
from combolayer.backends.solver import KernelDefaults, Solver

GENERIC = [name for name in ("gurobi", "scip", "highs")
           if name in registry.capable_backends(cl.problems.Knapsack([[1, 2]], [2]).to_ilp())]


@pytest.fixture
def eager(monkeypatch):
    """Decide after a few timed solves, so that tests on real solvers finish soon."""
    monkeypatch.setattr(race, "TIMED", 3)


def knapsack(n: int = 24, seed: int = 0) -> cl.problems.Knapsack:
    """A knapsack the DP refuses (real weights) and too large to enumerate, so only
    generic MIP solvers can."""
    rng = np.random.default_rng(seed)
    weights = rng.uniform(1, 5, (2, n)).round(3) + np.pi * 1e-4
    return cl.problems.Knapsack(weights=weights.tolist(), capacities=(weights.sum(1) / 3).tolist())


def raced(spec, names: tuple[str, ...], config=None) -> Solver:
    """A solver whose kernel races exactly ``names`` (in that order)."""
    config = config or cl.BackendConfig()
    first, *rest = names
    kernel = RacingKernel(
        (first, cl.make_solver(spec, first).kernel),
        [(name, lambda name=name: cl.make_solver(spec, name).kernel) for name in rest],
        spec.label)
    return Solver(spec, kernel, first, config)


# -- answers stay optimal; every instance is solved once --------------------------------


@pytest.mark.parametrize("pair", list(itertools.combinations(GENERIC, 2)),
                         ids=lambda pair: "-".join(pair))
def test_racing_keeps_every_answer_optimal_on_random_ilps(eager, pair):
    if len(GENERIC) < 2:
        pytest.skip("fewer than two generic MIP backends installed")
    rng = np.random.default_rng(7)
    trial = race.WARM_UP + race.TIMED
    for _ in range(6):
        spec = random_ilp(rng)
        solver = raced(spec, pair)
        costs = rng.integers(-3, 4, (12, spec.num_outputs)).astype(float)  # ties included
        y = np.empty_like(costs)
        for first, second in ((0, 3), (3, 12)):  # the trial across two calls, the winner
            y[first:second], status = solver.solve(costs[first:second], return_status=True)
            assert status == ("optimal",) * (second - first)
            for b in range(first, second):
                best, optimal = optimum(spec, costs[b])
                assert float(costs[b] @ y[b]) == pytest.approx(best), (spec, pair, b)
                assert any(np.allclose(y[b], point) for point in optimal)
        assert solver.kernel.winner in pair
        # the first-ranked answered the trial's instances, the rival solved them too
        # (until it was dropped), the winner the rest
        solved = solver.kernel.solved
        assert solved[pair[0]] >= trial and 1 <= solved[pair[1]] <= trial
        assert sum(solved.values()) - 12 == min(solved.values())


class Counting(KernelDefaults):
    """A numpy kernel that counts the instances it is given and takes a (fake) time per
    instance: ``times`` in turn, then the last one over and over. Its answer is ``mark``
    where a cost is negative (a test tells the candidates' answers apart by it)."""

    array_api = "numpy"

    def __init__(self, times: list[float], clock: list[float], mark: float = 1.0) -> None:
        self.times, self.clock, self.mark = list(times), clock, mark
        self.rows, self.calls, self.closed = 0, 0, 0

    def __call__(self, costs: np.ndarray) -> np.ndarray:
        self.rows += len(costs)
        self.calls += 1
        for _ in range(len(costs)):
            self.clock[0] += self.times.pop(0) if len(self.times) > 1 else self.times[0]
        return (costs < 0) * self.mark

    def close(self) -> None:
        self.closed += 1


def fake_race(times: dict[str, list[float]]) -> tuple[RacingKernel, dict[str, Counting]]:
    """A race of fake kernels on a fake clock, in the order of ``times``; each answers
    with its own mark (1, 2, ...)."""
    clock = [0.0]
    kernels = {name: Counting(seconds, clock, mark)
               for mark, (name, seconds) in enumerate(times.items(), start=1)}
    first, *rest = kernels
    kernel = RacingKernel((first, kernels[first]),
                          [(name, lambda name=name: kernels[name]) for name in rest],
                          "Fake()", clock=lambda: clock[0])
    return kernel, kernels


def test_every_candidate_solves_the_trial_then_the_fastest_solves_the_rest(caplog):
    kernel, kernels = fake_race({"slow": [3e-3], "fast": [1e-3], "slowest": [9e-3]})
    trial = race.WARM_UP + race.TIMED
    rows = 0
    with caplog.at_level(logging.INFO, logger="combolayer"):
        while kernel.winner is None:
            costs = -np.ones((7, 4))
            # the first-ranked backend's answers while the race runs
            expected = np.where(np.arange(rows, rows + 7)[:, None] < trial, 1.0, 2.0)
            np.testing.assert_array_equal(kernel(costs), np.broadcast_to(expected, (7, 4)))
            rows += 7
            assert kernel.instances_in == rows
    # the same trial instances on every candidate, then the winner takes the rest; the
    # slowest, 3x the first-ranked's time, is dropped after its first call
    assert kernels["slow"].rows == trial and kernels["slowest"].rows == 7
    assert kernels["fast"].rows == rows
    assert kernel.solved == {name: k.rows for name, k in kernels.items()}
    assert kernel.winner == "fast" and kernel.current_backend == "fast"
    lines = [r.getMessage() for r in caplog.records if "won" in r.getMessage()]
    assert len(lines) == 1 and "fast 1 ms, slow 3 ms mean" in lines[0], lines
    assert kernels["slow"].closed == kernels["slowest"].closed == 1  # the losers are closed
    assert kernels["fast"].closed == 0
    table = {name: (n, verdict) for name, n, _, verdict in kernel.table()}
    assert table == {"slow": (race.TIMED, "lost"), "fast": (race.TIMED, "winner"),
                     "slowest": (0, "dropped: 3x slow's time on the same 7 instances")}
    calls = kernels["fast"].calls
    assert (kernel(-np.ones((16, 4))) == 2).all()
    assert kernels["fast"].calls == calls + 1  # the winner takes whole batches
    assert "fast won the race on this run's first instances" in kernel.backend_reason


def test_the_race_is_won_on_total_time_not_on_a_median_or_a_slow_start():
    """Solve times are heavy-tailed: a candidate whose median solve is the faster but
    whose every fifth solve is 20x loses (Gurobi on Identity's knapsack); a slow first
    solve (a model's build) does not count."""
    tail = [50e-3] + [1e-3, 1e-3, 1e-3, 1e-3, 20e-3] * 10
    kernel, _ = fake_race({"leader": tail, "rival": [2e-3]})
    kernel(np.ones((race.WARM_UP + race.TIMED, 4)))
    assert kernel.winner == "rival", kernel.table()
    assert kernel.per_solve == {"leader": pytest.approx(4.8e-3), "rival": pytest.approx(2e-3)}
    start = [50e-3, 1e-3]
    kernel, _ = fake_race({"leader": start, "rival": [1.5e-3]})
    kernel(np.ones((race.WARM_UP + race.TIMED, 4)))
    assert kernel.winner == "leader", kernel.table()


def test_a_rival_twice_as_slow_is_dropped_after_the_call_that_shows_it():
    """On a few expensive instances (TSP 100: SCIP 4x HiGHS) a rival that cannot win
    stops costing the run as soon as its trial time passes DROP_RATIO times the
    first-ranked backend's; one 1.5x slower runs the whole trial."""
    kernel, kernels = fake_race({"leader": [1.0], "rival": [3.0]})
    for _ in range(4):
        kernel(np.ones((1, 4)))
    assert kernels["rival"].rows == 1 and kernels["leader"].rows == 4
    assert kernel.winner == "leader" and kernel.dropped["rival"].startswith("dropped: 3x")
    kernel, kernels = fake_race({"leader": [1.0], "rival": [1.5]})
    for _ in range(race.WARM_UP + race.TIMED):
        kernel(np.ones((1, 4)))
    assert kernels["rival"].rows == race.WARM_UP + race.TIMED and not kernel.dropped


def test_a_rivals_model_build_does_not_count_against_it():
    """The first-ranked backend's build happens before the race; a rival's, in its first
    call. Counted, a rival faster per solve (SCIP's 2 x 50 knapsack, 1.01 ms against
    Gurobi's 1.22) was dropped after its first calls when they were small, and the
    winner depended on the batch size."""
    clock = [0.0]
    leader, rival = Counting([1.2e-3], clock), Counting([1e-3], clock)

    def slow_build():
        clock[0] += 0.5  # half a second of building, as a model's first setup can take
        return rival

    kernel = RacingKernel(("leader", leader), [("rival", slow_build)], "Fake()",
                          clock=lambda: clock[0])
    for _ in range(race.WARM_UP + race.TIMED):
        kernel(np.ones((1, 4)))
    assert kernel.winner == "rival" and not kernel.dropped, kernel.table()


def test_a_race_whose_rivals_all_left_before_a_timed_solve_says_so():
    kernel, _ = fake_race({"leader": [1.0], "rival": [5.0]})
    kernel(np.ones((1, 4)))  # the warm-up: the rival 5x the leader's time
    assert kernel.winner == "leader"
    assert kernel.backend_reason.startswith("leader won the race, alone at its end; "
                                            "rival dropped: 5x"), kernel.backend_reason
    assert "copied" not in kernel.backend_reason


def test_a_rival_that_cannot_build_or_fails_an_instance_sits_out():
    clock = [0.0]

    def unlicensed():
        raise RuntimeError("no licence")

    class Failing(Counting):
        def __call__(self, costs):
            if self.rows >= 2:
                raise ValueError("limit")
            return super().__call__(costs)

    for rival, why in ((unlicensed, "sat out: RuntimeError"),
                       (lambda: Failing([1e-3], clock, 2.0), "sat out: ValueError")):
        leader = Counting([2e-3], clock)
        kernel = RacingKernel(("leader", leader), [("gone", rival)], "Fake()",
                              clock=lambda: clock[0])
        y = np.concatenate([kernel(-np.ones((1, 4))) for _ in range(20)])
        assert (y == 1).all() and leader.rows == len(y)
        assert kernel.winner == "leader" and kernel.dropped == {"gone": why}
        assert f"gone {why}" in kernel.backend_reason


def test_the_first_ranked_backends_own_error_is_the_calls():
    clock = [0.0]

    class Broken(Counting):
        def __call__(self, costs):
            raise ValueError("the first-ranked backend's own error")

    kernel = RacingKernel(("leader", Broken([1e-3], clock)),
                          [("rival", lambda: Counting([1e-3], clock))], "Fake()",
                          clock=lambda: clock[0])
    with pytest.raises(ValueError, match="own error"):
        kernel(np.ones((1, 4)))


def test_a_copy_keeps_the_winner_and_its_times():
    kernel, _ = fake_race({"slow": [3e-3], "fast": [1e-3]})
    kernel(np.ones((race.WARM_UP + race.TIMED, 4)))
    twin, kernels = fake_race({"slow": [3e-3], "fast": [1e-3]})
    twin.adopt(pickle.loads(pickle.dumps(kernel.outcome())))
    assert twin.winner == "fast" and twin.table()[1][2] == pytest.approx(1e-3)
    twin(np.ones((5, 4)))
    assert kernels["fast"].rows == 5 and kernels["slow"].rows == 0
    assert "copied from" in twin.backend_reason


def test_reading_the_backend_from_another_thread_never_knocks_a_rival_out():
    """A progress bar reading ``solver.backend`` while the race runs: reads build no model
    and take the race's lock, so the rival still has its turn (an unlocked read once
    built it twice, and the second build's KeyError dropped the rival as unbuildable)."""
    clock = [0.0]
    leader, rival = Counting([2e-3], clock), Counting([1e-3], clock)
    builds = []

    def build():  # slow, as a real model's build: a second caller arrives meanwhile
        builds.append(1)
        time.sleep(0.05)
        return rival

    kernel = RacingKernel(("leader", leader), [("rival", build)], "Fake()",
                          clock=lambda: clock[0])
    done, seen = threading.Event(), []

    def reader():
        while not done.is_set():
            seen.append((kernel.current_backend, kernel.backend_reason, kernel.takes_rows))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(2 * (race.WARM_UP + race.TIMED)):
            kernel(np.ones((1, 4)))
    finally:
        done.set()
        thread.join()
    assert kernel.dropped == {} and builds == [1]
    assert kernel.winner == "rival", kernel.table()


def test_a_call_with_per_call_rows_in_the_race_goes_to_the_first_ranked_in_the_caller():
    """Calls with rows during the race go whole, untimed, to the first-ranked backend's
    model in the caller (never an executor's workers, never a rival not yet built)."""
    clock = [0.0]

    class WithRows(Counting):
        takes_rows = True

        def __call__(self, costs, rows=None):
            return super().__call__(costs)

    class Workers(WithRows):
        """An executor's kernel: its own calls are the workers', ``serial()`` the caller's."""

        def __init__(self, *args):
            super().__init__(*args)
            self.local = WithRows(*args)

        def serial(self):
            return self.local

    leader, rival = Workers([2e-3], clock), Workers([1e-3], clock)
    kernel = RacingKernel(("leader", leader), [("rival", lambda: rival)], "Fake()",
                          clock=lambda: clock[0])
    kernel(np.ones((3, 4)))  # the trial has begun
    kernel.with_statuses(np.ones((5, 4)), rows=object())
    assert leader.local.rows == 3 + 5 and rival.local.rows == 3  # in the caller, whole
    assert leader.rows == 0 and rival.rows == 0  # no executor's workers
    assert kernel.tried == 3 and kernel.winner is None  # untimed



# -- which problems race ---------------------------------------------------------------


def test_named_kernels_stay_first_without_a_race():
    for spec in (cl.problems.TopK(6, 2), cl.problems.ShortestPath.grid(3, 3),
                 cl.problems.Matching(3, 3), cl.problems.Knapsack([[3, 4, 5]], [8]),
                 cl.problems.TSP(5)):
        solver = cl.make_solver(spec, "race")
        assert not isinstance(solver.kernel, RacingKernel), spec.label
        assert "without a race" in solver.backend_reason, solver.backend_reason


def test_race_is_opt_in_and_auto_is_the_fixed_ranking():
    if len(GENERIC) < 2:
        pytest.skip("fewer than two generic MIP backends installed")
    spec = knapsack()
    solver = cl.make_solver(spec, "race")
    assert isinstance(solver.kernel, RacingKernel)
    assert solver.kernel.names == GENERIC[: race.MAX_CANDIDATES]
    assert solver.backend == GENERIC[0]
    assert len(solver.kernel.kernels) == 1  # the rivals' models are built when it races
    for fixed in (cl.make_solver(spec), cl.make_solver(spec, {"name": "auto"})):
        assert not isinstance(fixed.kernel, RacingKernel) and fixed.backend == GENERIC[0]
        assert "backend='race' would time" in fixed.backend_reason
    with pytest.warns(DeprecationWarning, match='backend="race"'):
        legacy = cl.make_solver(spec, cl.BackendConfig(deterministic=False))
    assert isinstance(legacy.kernel, RacingKernel)
    named = cl.make_solver(spec, "scip")
    assert named.backend_reason == "scip: named by the caller (backend='scip')"


def test_default_auto_reproduces_a_training_run_bit_for_bit():
    spec = knapsack()

    def run() -> torch.Tensor:
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 24)
        layer = cl.ComboLayer(spec, solve_ratio=0.5, generator=torch.Generator().manual_seed(1))
        assert not isinstance(layer.solver.kernel, RacingKernel)  # the fixed ranking
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(24, 3, generator=torch.Generator().manual_seed(2))
        c = torch.randn(24, 24, generator=torch.Generator().manual_seed(3))
        for _ in range(4):
            loss = (layer(model(x)) * c).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    first, second = run(), run()
    assert torch.equal(first, second)


# -- the layer, copies, losses, executors, the cache ------------------------------------


def finished_layer(**kwargs) -> cl.ComboLayer:
    layer = cl.ComboLayer(knapsack(), backend="race", **kwargs)
    w = torch.randn(8, 24, generator=torch.Generator().manual_seed(0))
    for _ in range(20):
        layer(w)
        if layer.solver.kernel.winner is not None:
            break
    assert layer.solver.kernel.winner is not None
    return layer


def test_layer_shows_why_and_copies_keep_the_winner(eager, caplog):
    if len(GENERIC) < 2:
        pytest.skip("fewer than two generic MIP backends installed")
    with caplog.at_level(logging.INFO, logger="combolayer"):
        layer = finished_layer()
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ComboLayer(")]
    assert len(said) == 1 and "'race' times" in said[0], said  # once per layer, at INFO
    winner = layer.solver.backend
    assert "won the race" in layer.backend_reason and winner in layer.backend_reason
    assert "backend_reason=" in repr(layer) and f"backend={winner!r}" in repr(layer)
    for twin in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        assert twin.solver is not layer.solver
        assert twin.solver.backend == winner
        assert "copied from" in twin.backend_reason


def test_a_copied_loss_keeps_the_winner(eager):
    if len(GENERIC) < 2:
        pytest.skip("fewer than two generic MIP backends installed")
    spec = knapsack()
    loss = cl.losses.SPOPlusLoss(spec, backend="race")
    c = torch.randn(8, 24, generator=torch.Generator().manual_seed(0))
    for _ in range(20):
        loss(c + 0.1, c).backward() if c.requires_grad else loss(c + 0.1, c)
        if loss.solver.kernel.winner is not None:
            break
    winner = loss.solver.backend
    twin = copy.deepcopy(loss)
    assert twin.solver.backend == winner and isinstance(twin.solver.kernel, RacingKernel)


@pytest.fixture(params=["thread", "process", "ray"])
def executor(request):
    """An executor's name; for Ray, on the session's cluster."""
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
    return request.param


def test_executor_workers_take_the_winner(eager, always_parallel, executor):
    if len(GENERIC) < 2:
        pytest.skip("fewer than two generic MIP backends installed")
    spec = knapsack()
    solver = cl.make_solver(spec, cl.BackendConfig(name="race", executor=executor,
                                                   workers=2))
    rng = np.random.default_rng(0)
    reference = cl.make_solver(spec, "highs")
    while solver.kernel.winner is None:
        costs = rng.normal(size=(6, 24))
        y = solver.solve(costs)
        np.testing.assert_allclose((y * costs).sum(1), (reference.solve(costs) * costs).sum(1),
                                   atol=1e-6)
    winner = solver.kernel.kernel(solver.kernel.winner)
    assert winner.executor == executor
    costs = rng.normal(size=(32, 24))
    y = solver.solve(costs)
    if executor != "thread":  # the workers start in the background; then take the rows
        assert winner._ready.wait(60)
        y = solver.solve(costs)
    np.testing.assert_allclose((y * costs).sum(1), (reference.solve(costs) * costs).sum(1),
                               atol=1e-6)
    assert winner._ready.is_set()  # the winner's workers solved the batch
    if executor == "ray":
        assert len(winner._actors) == 2
    for kernel in solver.kernel.kernels.values():
        assert getattr(kernel, "_ready", None) is None or kernel is winner \
            or not kernel._ready.is_set()  # the losers never started workers
        kernel.close()


def test_the_solution_cache_races_its_exact_solves(eager):
    if len(GENERIC) < 2:
        pytest.skip("fewer than two generic MIP backends installed")
    layer = cl.ComboLayer(knapsack(), backend="race", solve_ratio=0.5,
                          generator=torch.Generator().manual_seed(0))
    w = torch.randn(16, 24, generator=torch.Generator().manual_seed(1))
    for _ in range(10):
        layer(w)
    table = layer.solver.kernel.table()
    assert sum(n for _, n, _, _ in table) > 0, table  # the cached solver's solves raced
    assert len(layer.pool) > 0
    layer.eval()
    y = layer(w)
    reference = cl.make_solver(layer.spec, "highs").solve(w)
    torch.testing.assert_close((y * w).sum(1), (reference * w).sum(1))


def test_bench_race_shows_the_race_for_a_spec(eager, capsys):
    if len(GENERIC) < 2:
        pytest.skip("fewer than two generic MIP backends installed")
    from combolayer.cli.main import main

    assert main(["bench", "--race", knapsack().model_dump_json(), "--rows", "24"]) == 0
    out = capsys.readouterr().out
    trial = race.WARM_UP + race.TIMED
    assert f"instances asked 24, solved {24 + trial} (the first {trial} by every" in out
    for name in GENERIC[: race.MAX_CANDIDATES]:
        assert f"\n{name} " in out
    assert "won the race" in out
    assert main(["bench", "--race", "{kind: topk, n: 5, k: 2}"]) == 0
    assert "no race: torch" in capsys.readouterr().out


def test_calls_with_per_call_rows_are_answered_whole_and_optimally_in_the_race(eager):
    if len(GENERIC) < 2:
        pytest.skip("fewer than two generic MIP backends installed")
    spec = knapsack()
    solver = cl.make_solver(spec, "race")
    reference = cl.make_solver(spec, "highs")
    A = np.zeros((1, spec.num_outputs))
    A[0, :5] = 1.0  # at most one of the first five items
    b = np.array([1.0])
    rng = np.random.default_rng(0)
    for _ in range(6):  # calls without rows race; calls with rows are answered whole
        costs = rng.uniform(size=(6, spec.num_outputs))
        asked = solver.kernel.instances_in
        y = solver.solve(costs, A=A, b=b)
        assert solver.kernel.instances_in == asked + 6
        assert (y[:, :5].sum(1) <= 1 + 1e-9).all()
        np.testing.assert_allclose((y * costs).sum(1),
                                   (reference.solve(costs, A=A, b=b) * costs).sum(1), atol=1e-6)
        solver.solve(costs)
    assert solver.kernel.winner is not None
    # the trial's instances by every candidate; the calls with rows by one
    trial = race.WARM_UP + race.TIMED
    assert sum(solver.kernel.solved.values()) == solver.kernel.instances_in + trial


def test_at_the_trials_end_the_timed_totals_decide_not_the_drop_rule():
    """A trial run in one call (a training batch of 32): a rival faster on the timed
    instances but with a slow warm-up wins; the drop rule, which counts the warm-up,
    only stops a rival before the trial's end (it dropped this one)."""
    first = [1e-3]
    rival = [25e-3, 0.5e-3]  # a slow first solve, then twice as fast
    kernel, _ = fake_race({"leader": first, "rival": rival})
    kernel(np.ones((32, 4)))
    assert kernel.winner == "rival" and not kernel.dropped, kernel.table()
