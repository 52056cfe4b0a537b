"""``backend="race"`` (opt-in) races the capable exact backends on the run's own rows.

Racing solvers may return different optima of a cost with ties, so these tests check
optimality (against brute-force enumeration), never equality of solutions; and that
the default ``"auto"`` never races and repeats a run bit for bit.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import logging
import math
import pickle

import numpy as np
import pytest
import torch
from bruteforce import optimum, random_ilp

import combolayer as cl
from combolayer.backends import race, registry
from combolayer.backends.outcome import Solved
from combolayer.backends.race import RacingKernel
from combolayer.backends.solver import KernelDefaults, Solver

GENERIC = [name for name in ("gurobi", "scip", "highs")
           if name in registry.capable_backends(cl.problems.Knapsack([[1, 2]], [2]).to_ilp())]


@pytest.fixture
def eager(monkeypatch):
    """Race without the budget (every candidate in turn), and decide after a few solves."""
    monkeypatch.setattr(race, "EPSILON", math.inf)
    monkeypatch.setattr(race, "MIN_SOLVES", 2)
    monkeypatch.setattr(race, "MAX_SOLVES", 3)


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


# -- answers stay optimal; every row is solved once ------------------------------------


@pytest.mark.parametrize("pair", list(itertools.combinations(GENERIC, 2)),
                         ids=lambda pair: "-".join(pair))
def test_racing_keeps_every_answer_optimal_on_random_ilps(eager, pair):
    if len(GENERIC) < 2:
        pytest.skip("fewer than two generic MIP backends installed")
    rng = np.random.default_rng(7)
    for _ in range(6):
        spec = random_ilp(rng)
        solver = raced(spec, pair)
        costs = rng.integers(-3, 4, (12, spec.num_outputs)).astype(float)  # ties included
        y = solver.solve(costs)
        for first, second in ((0, 6), (6, 12)):  # two calls: race, then the winner
            y[first:second], status = solver.solve(costs[first:second], return_status=True)
            assert status == ("optimal",) * 6
            for b in range(first, second):
                best, optimal = optimum(spec, costs[b])
                assert float(costs[b] @ y[b]) == pytest.approx(best), (spec, pair, b)
                assert any(np.allclose(y[b], point) for point in optimal)
        solved = {name: n for name, n, _, _ in solver.kernel.table()}
        assert all(solved[name] >= 1 for name in pair), solver.kernel.table()


class Counting(KernelDefaults):
    """A numpy kernel that counts the rows it is given and takes a fixed (fake) time."""

    array_api = "numpy"

    def __init__(self, seconds: float, clock: list[float]) -> None:
        self.seconds, self.clock, self.rows, self.calls = seconds, clock, 0, 0

    def __call__(self, costs: np.ndarray) -> np.ndarray:
        self.rows += len(costs)
        self.calls += 1
        self.clock[0] += self.seconds * len(costs)
        return (costs < 0).astype(float)


def fake_race(times: dict[str, float]) -> tuple[RacingKernel, dict[str, Counting]]:
    clock = [0.0]
    kernels = {name: Counting(seconds, clock) for name, seconds in times.items()}
    first, *rest = kernels
    kernel = RacingKernel((first, kernels[first]),
                          [(name, lambda name=name: kernels[name]) for name in rest],
                          "Fake()", clock=lambda: clock[0])
    return kernel, kernels


def duel(leader, rival, clock: list[float], **options) -> RacingKernel:
    """A race of two fake kernels on the fake ``clock``: ``leader`` first-ranked, ``rival``
    built when first given a row."""
    return RacingKernel(("leader", leader), [("rival", lambda: rival)], "Fake()",
                        clock=lambda: clock[0], **options)


def test_the_race_solves_every_instance_once_and_keeps_the_fastest(caplog):
    kernel, kernels = fake_race({"slow": 3e-3, "fast": 1e-3, "slowest": 9e-3})
    rows = 0
    with caplog.at_level(logging.INFO, logger="combolayer"):
        while kernel.winner is None:
            costs = np.random.default_rng(rows).normal(size=(8, 4))
            np.testing.assert_array_equal(kernel(costs), costs < 0)
            rows += 8
            assert sum(k.rows for k in kernels.values()) == rows  # no extra solve
            assert kernel.solved == {name: k.rows for name, k in kernels.items()}
            assert kernel.instances_in == rows
        assert rows < 2000
    assert kernel.winner == "fast" and kernel.current_backend == "fast"
    lines = [r.getMessage() for r in caplog.records if "the race" in r.getMessage()]
    assert len(lines) == 1 and "fast 1 ms, slow 3 ms, slowest 9 ms" in lines[0], lines
    # the budget: a faster candidate takes over at once, so the slow leader and the
    # slowest solved few rows; the slowest at most its first row and the few timed
    # solves (its bursts) that dropped it
    assert kernels["fast"].rows > 0.8 * rows
    table = {name: (n, verdict) for name, n, _, verdict in kernel.table()}
    assert table["fast"][1] == "winner"
    assert table["slowest"][0] <= race.MIN_SOLVES + race.BURST - 1  # its last burst
    before = {name: k.rows for name, k in kernels.items()}
    kernel(np.ones((16, 4)))
    assert kernels["fast"].rows == before["fast"] + 16  # the winner takes whole batches
    assert "fast won the race on this run's own costs" in kernel.backend_reason


def test_untried_candidates_wait_until_the_run_can_afford_an_instance():
    kernel, kernels = fake_race({"slow": 3e-3, "fast": 1e-3, "slowest": 9e-3})
    leader_rows = 0
    while kernels["fast"].rows == 0:
        kernel(np.ones((1, 4)))
        leader_rows += 1
        assert leader_rows < 100
    # priced at UNTRIED_RATIO times the best's mean, the first rival row waits until the
    # run has solved for (UNTRIED_RATIO - 1) / EPSILON of the leader's solves
    assert leader_rows == pytest.approx((race.UNTRIED_RATIO - 1) / race.EPSILON + 1, abs=1)
    assert kernels["slowest"].rows == 0
    for _ in range(30):  # "fast" now has the lowest time: the rows are its own
        kernel(np.ones((1, 4)))
    assert kernels["fast"].rows >= 25, kernel.table()


def test_a_run_too_short_to_pay_for_a_second_model_never_builds_one():
    """An unbuilt rival is priced at least at the first-ranked backend's build time, so
    it is built only once the run has solved for ``first_setup / EPSILON``."""
    clock, built = [0.0], []
    first, rival = Counting(1e-4, clock), Counting(1e-5, clock)
    kernel = RacingKernel(("first", first), [("rival", lambda: built.append(1) or rival)],
                          "Fake()", clock=lambda: clock[0], first_setup=0.01)
    for _ in range(100):  # 10 ms of solving: 5% of it is far less than a 10 ms set-up
        kernel(np.ones((1, 4)))
    assert built == [] and rival.rows == 0 and first.rows == 100
    while rival.rows == 0:
        kernel(np.ones((50, 4)))
        assert first.rows < 5000
    assert built == [1]
    assert first.rows * 1e-4 >= 0.01 / race.EPSILON - 50 * 1e-4


class Sequence(Counting):
    """A `Counting` kernel whose rows take the given (fake) times in turn, then the last."""

    def __init__(self, times: list[float], clock: list[float]) -> None:
        super().__init__(times[-1], clock)
        self.times = list(times)

    def __call__(self, costs: np.ndarray) -> np.ndarray:
        for _ in range(len(costs)):
            self.seconds = self.times.pop(0) if len(self.times) > 1 else self.times[0]
            super().__call__(costs[:1])
        return (costs < 0).astype(float)


def test_one_cheap_instance_does_not_make_a_rival_the_best():
    """A candidate is the best (its rows charged nothing) only with MIN_SOLVES timed
    solves: a rival 5x slower whose first timed row happened to be cheap (a heavy-tailed
    problem) has each of its rows charged against the leader's mean, so its slow rows
    stay within the budget instead of going free."""
    clock = [0.0]
    leader = Counting(1e-3, clock)
    rival = Sequence([1e-3, 0.5e-3, 5e-3], clock)  # set-up row, a cheap row, then slow
    kernel = duel(leader, rival, clock)
    rival_time = 0.0
    for _ in range(400):
        before = clock[0]
        asked = rival.rows
        kernel(np.ones((1, 4)))
        if rival.rows > asked:
            rival_time += clock[0] - before
        assert kernel._best() == "leader" or len(kernel.samples["rival"]) >= race.MIN_SOLVES
    excess = rival_time - rival.rows * 1e-3
    # the set-up row charged at most the untried price: its overshoot is the bound's
    assert excess <= race.EPSILON * clock[0] + 1e-3, (rival.rows, kernel.table())
    assert kernel.excess == pytest.approx(excess, abs=1e-9)  # every row charged


def test_a_slow_set_up_instance_is_charged_in_full():
    """A rival's first row, 20x the leader's (SCIP's first TSP-100 row against HiGHS's),
    is charged in full: a short run gives it no second row (charged at most the untried
    price, it let a second 10x row follow at once)."""
    clock = [0.0]
    leader = Counting(1e-3, clock)
    rival = Sequence([20e-3, 10e-3], clock)
    kernel = duel(leader, rival, clock)
    for _ in range(200):
        kernel(np.ones((1, 4)))
    assert rival.rows == 1, kernel.table()
    assert kernel.excess == pytest.approx(20e-3 - 1e-3)


def test_a_slow_first_instance_of_the_leader_does_not_hold_a_faster_rival_off():
    """The untried price is not the leader's whole first row (build and first solve):
    Gurobi's first 2 x 100 knapsack row (58 ms, its mean 35 ms) priced so, SCIP (12 ms)
    would wait for 1.2 s of solving (about 35 leader rows); priced at a quarter of the
    leader's mean, it is tried within ten rows."""
    clock = [0.0]
    leader = Sequence([60e-3, 35e-3], clock)
    rival = Counting(12e-3, clock)
    kernel = duel(leader, rival, clock, first_setup=2e-3)
    while rival.rows == 0:
        kernel(np.ones((1, 4)))
        assert leader.rows <= 10, kernel.table()
    for _ in range(20):  # the faster rival then takes the rows
        kernel(np.ones((1, 4)))
    assert rival.rows >= 15, kernel.table()


class Cold(Counting):
    """A `Counting` kernel whose first row of a call takes ``cold`` seconds when another
    kernel ran last (its caches went to the other), its other rows ``seconds``."""

    def __init__(self, seconds: float, cold: float, clock: list[float], last: list) -> None:
        super().__init__(seconds, clock)
        self.cold, self.last = cold, last

    def __call__(self, costs: np.ndarray) -> np.ndarray:
        if self.last[0] is not self and len(costs):
            self.clock[0] += self.cold - self.seconds
        self.last[0] = self
        return super().__call__(costs)


def test_a_faster_rival_is_timed_on_bursts_not_on_cold_single_instances():
    """SCIP's facility-location rows took 1.4-1.8 ms one at a time between Gurobi's
    calls and 0.7-0.9 ms one after another, so timed on single rows the faster SCIP
    looked the slower and dropped out; a rival takes up to BURST rows in one call (each
    within the budget) once its set-up row has run, and a call's rows are timed at the
    call's mean, so a warm rival wins (on single rows: 1.6 ms against 1.1: it loses)."""
    clock, last = [0.0], [None]
    leader = Cold(1.1e-3, 1.1e-3, clock, last)
    rival = Cold(0.8e-3, 1.6e-3, clock, last)
    kernel = duel(leader, rival, clock)
    while kernel.winner is None:
        kernel(np.ones((20, 4)))
        assert kernel.instances_in < 20000, kernel.table()
    assert kernel.winner == "rival", kernel.table()
    assert rival.rows > rival.calls  # some calls held more than one row
    assert kernel.excess <= race.EPSILON * kernel.spent + race.BURST * 1.6e-3


@pytest.mark.parametrize("times", [{"fast": 1e-3, "slow": 3e-3, "slowest": 9e-3},
                                   {"slowest": 9e-3, "slow": 3e-3, "fast": 1e-3}],
                         ids=["fast-leads", "slowest-leads"])
def test_slower_candidates_cost_at_most_epsilon_of_the_run(times):
    """The bound of the module docstring: with steady times, the rows given to slower
    candidates cost beyond the fastest's time at most EPSILON of the run's solve time
    (RECHECK_BUDGET more once re-checks run), plus BURST rows each (its set-up row,
    charged in full, and the overshoot of its first rows, priced as untried, or one
    burst of a candidate faster than the leader before the fastest is tried); when the
    first-ranked backend is not the fastest, plus its rows before a rival is tried."""
    kernel, kernels = fake_race(times)
    fastest = min(times.values())
    first_rows = race.BURST * sum(t - fastest for t in times.values())
    before_rival = (race.UNTRIED_RATIO - 1) / race.EPSILON + 2
    lead = before_rival * (next(iter(times.values())) - fastest)
    for step in range(800):
        kernel(np.random.default_rng(step).normal(size=(8, 4)))
        total = sum(k.rows * times[name] for name, k in kernels.items())
        excess = sum(k.rows * (times[name] - fastest) for name, k in kernels.items())
        budget = race.EPSILON + (race.RECHECK_BUDGET if kernel.checks else 0.0)
        assert excess <= budget * total + first_rows + lead + 1e-12, (step, kernel.table())
        assert sum(kernel.solved.values()) == kernel.instances_in == 8 * (step + 1)
    assert kernel.winner == "fast" and kernel.checks >= 1
    assert kernel.excess <= race.EPSILON * kernel.spent + first_rows


def test_the_best_takes_its_instances_between_the_others_in_one_call():
    kernel, kernels = fake_race({"fast": 1e-3, "slow": 1.5e-3})
    while kernel.winner is None:  # the race, 8 rows a call
        kernel(np.ones((8, 4)))
        assert kernel.instances_in < 1000
    assert kernels["fast"].rows > 20 and kernels["slow"].rows >= race.MIN_SOLVES
    # one call per row would be as many calls as rows
    assert kernels["fast"].calls < kernels["fast"].rows / 3, kernel.table()
    # the other: its set-up row alone, then at most BURST rows a call
    assert kernels["slow"].rows <= race.BURST * (kernels["slow"].calls - 1) + 1


def test_re_checks_are_bounded_and_follow_drift():
    kernel, kernels = fake_race({"a": 1e-3, "b": 2e-3})
    while kernel.winner is None:
        kernel(np.ones((4, 3)))
    assert kernel.winner == "a"
    for _ in range(40):  # enough winner time for a check, which keeps "a"
        kernel(np.ones((100, 3)))
    assert kernel.checks >= 1 and kernel.winner == "a"
    # what the others solved since the race stays within the budget
    raced_b = kernels["b"].rows
    for _ in range(200):
        kernel(np.ones((100, 3)))
    extra = (kernels["b"].rows - raced_b) * 2e-3
    assert extra <= race.RECHECK_BUDGET * 200 * 100 * 1e-3 * 1.5
    kernels["a"].seconds = 5e-3  # the costs drift: "a" is now the slower
    for _ in range(200):
        kernel(np.ones((100, 3)))
        if kernel.winner == "b":
            break
    assert kernel.winner == "b", kernel.table()


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


def test_default_auto_reproduces_a_training_run_bit_for_bit(eager):
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
    assert len(said) == 1 and "'race' races" in said[0], said  # once per layer, at INFO
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
    assert "instances asked 24, solved 24" in out
    for name in GENERIC[: race.MAX_CANDIDATES]:
        assert f"\n{name} " in out
    assert "won the race" in out
    assert main(["bench", "--race", "{kind: topk, n: 5, k: 2}"]) == 0
    assert "no race: torch" in capsys.readouterr().out


def test_calls_with_per_call_rows_go_whole_to_the_current_backend(eager):
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
    assert sum(solver.kernel.solved.values()) == solver.kernel.instances_in


# -- a rival's row never runs past the race's room --------------------------------------


class Stopping(Sequence):
    """A `Sequence` kernel whose solves stop at a caller's time limit
    (`RowKernel.time_limit`): a row longer than the limit takes the limit and returns
    the status "time limit" with a wrong answer (``stopped="solution"``), or raises
    `SolverError` as a solver without a feasible solution does (``stopped="none"``)."""

    stops_in_time = True

    def __init__(self, times: list[float], clock: list[float], stopped: str = "solution",
                 configured: float = math.inf) -> None:
        super().__init__(times, clock)
        self.stopped, self.limit, self.limits = stopped, configured, []

    @contextlib.contextmanager
    def time_limit(self, seconds: float):
        before, self.limit = self.limit, min(seconds, self.limit)
        try:
            yield
        finally:
            self.limit = before

    def _seconds(self, row: np.ndarray) -> float:
        """How long ``row`` takes: the next of the given times, then the last."""
        return self.times.pop(0) if len(self.times) > 1 else self.times[0]

    def __call__(self, costs: np.ndarray) -> Solved:
        self.limits.append(self.limit)
        out = np.empty_like(costs)
        statuses = []
        for b in range(len(costs)):
            seconds = self._seconds(costs[b])
            self.rows += 1
            self.calls += b == 0
            if seconds > self.limit:
                self.clock[0] += self.limit
                if self.stopped == "none":
                    error = cl.SolverError("Fake hit the time limit without a feasible solution")
                    error.status = "time limit"  # as `settle` raises it
                    raise error
                statuses.append("time limit")
                out[b] = costs[b] >= 0  # a feasible answer, not the optimal one
                continue
            self.clock[0] += seconds
            statuses.append("optimal")
            out[b] = costs[b] < 0
        return Solved(out, tuple(statuses))


@pytest.mark.parametrize("stopped", ["solution", "none"])
def test_a_rival_instance_past_the_room_is_stopped_and_solved_by_the_best(stopped, caplog):
    """SCIP's first TSP-100 row took 1.15 s and, in another run, 5.5 s beyond HiGHS's
    (0.5 s a row) and was paid in full: a rival's row now runs under a time limit of the
    best's mean plus the budget's room. Stopped there, the row is the best's (optimal,
    solved once to completion), its time is charged in full, the reason is shown, and
    the charged excess stays within EPSILON of the solve time plus one best mean."""
    clock = [0.0]
    leader = Stopping([0.5], clock)
    rival = Stopping([5.5, 1.5], clock, stopped)
    kernel = duel(leader, rival, clock)
    rng = np.random.default_rng(0)
    with caplog.at_level(logging.INFO, logger="combolayer"):
        while kernel.winner is None:
            costs = rng.normal(size=(1, 4))
            np.testing.assert_array_equal(kernel(costs), costs < 0)  # every answer optimal
            assert kernel.excess <= race.EPSILON * kernel.spent + 0.5 + 1e-12, kernel.table()
            if kernel.instances_in == 16:  # the TSP-100 loop's length: one row stopped
                assert rival.rows == 1 and kernel.stopped == {"leader": 0, "rival": 1}
                assert 0.5 < rival.limits[0] <= 0.5 + race.EPSILON * 0.5 * 6
                assert kernel.excess == pytest.approx(rival.limits[0])  # in full
                assert "rival: 1 instance ran past the race's room" in kernel.backend_reason
            assert kernel.instances_in < 2000
    assert sum(kernel.solved.values()) == kernel.instances_in
    assert kernel.solved["rival"] == rival.rows - kernel.stopped["rival"]
    assert kernel.winner == "leader" and "rival" in kernel.dropped
    verdicts = {name: verdict for name, _, _, verdict in kernel.table()}
    assert "stopped at the race's limit" in verdicts["rival"], verdicts
    lines = [r.getMessage() for r in caplog.records if "the race" in r.getMessage()]
    assert len(lines) == 1 and "instances ran past the race's room" in lines[0], lines
    assert leader.limits == [math.inf] * len(leader.limits)  # the best runs unlimited
    assert rival.limit == math.inf  # the configured limit holds again


def test_a_rival_runs_under_the_room_and_wins_then_runs_under_the_users_limit():
    """A rival estimated faster than the best runs its bursts on credit, each row under
    at least DROP_RATIO times the best's mean: a row of its tail past the best's mean
    (SCIP's Identity rows, 2 ms against Gurobi's 5, stopped at Gurobi's mean lost the
    race) runs to the end; it wins, and as the winner runs with the configured limit."""
    clock = [0.0]
    leader = Stopping([3e-3], clock, configured=10.0)
    rival = Stopping([2e-3, 5.5e-3, 1e-3], clock, configured=10.0)

    def build() -> Stopping:  # a slow build (not limited) leaves the room negative
        clock[0] += 20e-3
        return rival

    kernel = RacingKernel(("leader", leader), [("rival", build)], "Fake()",
                          clock=lambda: clock[0])
    while kernel.winner is None:
        costs = np.ones((4, 3))
        np.testing.assert_array_equal(kernel(costs), costs < 0)
        assert kernel.instances_in < 2000
    assert kernel.winner == "rival" and kernel.stopped["rival"] == 0, kernel.table()
    assert rival.limits[1] == pytest.approx(race.DROP_RATIO * 3e-3)  # room < 0: the floor
    raced = len(rival.limits)
    for _ in range(5):
        kernel(np.ones((8, 3)))
    assert rival.limits[raced:] == [10.0] * 5 and rival.limit == 10.0
    assert leader.limit == 10.0  # limited while the rival was the best, then restored


def test_a_heavy_burst_instance_is_stopped_within_the_bound():
    """A slower rival timed on bursts draws a row 100x its others (the heavy tail of a
    TSP): under the old rule the row ran to the end (its whole excess charged past the
    budget); now it stops at its limit, and the charged excess stays within EPSILON of
    the solve time plus one best mean."""
    clock = [0.0]
    leader = Stopping([1e-3], clock)
    rival = Stopping([1.2e-3] * 3 + [150e-3, 1.2e-3], clock)
    kernel = duel(leader, rival, clock)
    for _ in range(400):
        costs = np.random.default_rng(kernel.instances_in).normal(size=(4, 3))
        np.testing.assert_array_equal(kernel(costs), costs < 0)
        assert kernel.excess <= race.EPSILON * kernel.spent + 1e-3 + 1e-12, kernel.table()
        if "rival" not in kernel.alive:
            break
    assert kernel.stopped["rival"] == 1 and rival.rows >= 4, kernel.table()
    assert sum(kernel.solved.values()) == kernel.instances_in


class ColdStopping(Stopping):
    """A `Stopping` kernel whose first row of a call takes ``cold`` seconds more when
    another kernel ran last (its caches went to the other)."""

    def __init__(self, times: list[float], clock: list[float], last: list,
                 cold: float) -> None:
        super().__init__(times, clock)
        self.last, self.cold = last, cold

    def __call__(self, costs: np.ndarray) -> np.ndarray:
        if self.last[0] is not self and len(costs):
            self.clock[0] += self.cold
        self.last[0] = self
        return super().__call__(costs)


def test_a_rivals_burst_is_timed_on_its_instances_after_the_cold_first_one():
    """A rival's burst, row by row under its limits, starts cold after the best's call
    (SCIP's facility-location bursts: the first row slow, the next ones faster than
    Gurobi's), so its rows count at the mean of those after the first: the rival's mean
    is its warm time (timed on every row, its first burst reads 1.2 ms against the
    leader's 1.1 and its mean stays above 0.9), it wins, and every row is charged."""
    clock, last = [0.0], [None]
    leader = ColdStopping([1.1e-3], clock, last, cold=0.0)
    rival = ColdStopping([0.9e-3], clock, last, cold=1.2e-3)
    kernel = duel(leader, rival, clock)
    rng = np.random.default_rng(0)
    while kernel.winner is None:
        costs = rng.normal(size=(16, 3))
        np.testing.assert_array_equal(kernel(costs), costs < 0)
        assert kernel.excess <= race.EPSILON * kernel.spent + race.BURST * 2.1e-3
        assert kernel.instances_in < 20000, kernel.table()
    assert kernel.winner == "rival", kernel.table()
    assert kernel.samples["rival"].mean == pytest.approx(0.9e-3)  # its warm rows
    # every row it raced (under a limit) after its set-up row is a timed solve: the
    # first rows' samples left out delayed a faster SCIP's fifth past a stopped row on
    # the 2 x 100 knapsack (Gurobi took 13-16 rows, not 6)
    raced = sum(limit < math.inf for limit in rival.limits)
    assert len(kernel.samples["rival"]) == raced - 1 >= race.MIN_SOLVES, kernel.table()
    assert sum(kernel.solved.values()) == kernel.instances_in


def stopped_at_once(kernel):
    """A real backend's ``kernel`` whose every caller's time limit is cut to nothing, so
    each of its limited solves stops at once (with or without a solution)."""
    limit = kernel.time_limit
    kernel.time_limit = lambda seconds: limit(0.0)
    return kernel


@pytest.mark.parametrize("pair", list(itertools.combinations(GENERIC, 2)),
                         ids=lambda pair: "-".join(pair))
def test_real_rivals_stopped_at_their_limit_leave_every_answer_optimal(pair, monkeypatch):
    """Real backends: the rival's limit is cut to nothing (its solves stop at once, with
    or without a solution), so its trial rows are stopped; each stopped row is solved by
    the best, and every answer equals brute force."""
    if len(GENERIC) < 2:
        pytest.skip("fewer than two generic MIP backends installed")
    monkeypatch.setattr(race, "MIN_SOLVES", 2)
    first, second = pair
    rng = np.random.default_rng(3)
    stopped = 0
    for _ in range(4):
        spec = random_ilp(rng)
        rival = stopped_at_once(cl.make_solver(spec, second).kernel)
        kernel = RacingKernel((first, cl.make_solver(spec, first).kernel),
                              [(second, lambda rival=rival: rival)], spec.label)
        solver = Solver(spec, kernel, first, cl.BackendConfig())
        costs = rng.integers(-3, 4, (24, spec.num_outputs)).astype(float)
        answers = [solver.solve(costs[b:b + 1], return_status=True) for b in range(len(costs))]
        assert all(status == ("optimal",) for _, status in answers)
        y = np.concatenate([answer for answer, _ in answers])
        for b in range(len(costs)):
            best, optimal = optimum(spec, costs[b])
            assert float(costs[b] @ y[b]) == pytest.approx(best), (spec, pair, b)
            assert any(np.allclose(y[b], point) for point in optimal)
        assert sum(kernel.solved.values()) == kernel.instances_in == len(costs)
        stopped += kernel.stopped[second]
        assert rival._get_time_limit() >= 1e20 or math.isinf(rival._get_time_limit())
    assert stopped >= 1  # a rival that answers at a zero limit stops no row: not tested


def won_race(leader: Stopping, rival: Stopping, clock: list[float]) -> RacingKernel:
    """A race of two fake stopping kernels, run until the leader wins."""
    kernel = duel(leader, rival, clock)
    while kernel.winner is None:
        kernel(np.ones((4, 3)))
        assert kernel.instances_in < 2000, kernel.table()
    assert kernel.winner == "leader", kernel.table()
    return kernel


def test_a_check_instance_stops_once_the_rival_cannot_come_in_under_the_margin(caplog):
    """Unlimited, Gurobi's cold check rows on Identity's knapsack averaged 62 ms against
    SCIP's 1.5 ms pace: a check cost 18x its budget. A rival's check row now stops once
    its check time passes RECHECK_SOLVES x SWITCH_MARGIN x the winner's pace, past which
    no row can make it a challenger: the winner solves the row, the rival's check ends,
    and the check costs at most that."""
    clock = [0.0]
    leader, rival = Stopping([1e-3], clock), Stopping([2e-3], clock)
    kernel = won_race(leader, rival, clock)
    rival.times = [60e-3]  # the costs drift: the rival's rows get heavy
    rng = np.random.default_rng(0)
    while kernel.checks < 2:
        costs = rng.normal(size=(100, 3))
        np.testing.assert_array_equal(kernel(costs), costs < 0)  # every answer optimal
        assert kernel.instances_in < 10**6, kernel.table()
    allowed = race.RECHECK_SOLVES * race.SWITCH_MARGIN * 1e-3
    assert kernel.check_stopped == {"rival"} and kernel.winner == "leader"
    assert kernel._last_check_wall == pytest.approx(allowed)  # not 4 x 60 ms
    assert rival.limits[-1] == pytest.approx(allowed)
    assert kernel.check_means["rival"] == pytest.approx(allowed / race.RECHECK_SOLVES)
    assert "rival at least: stopped once it could no longer come in" in kernel.backend_reason
    assert sum(kernel.solved.values()) == kernel.instances_in
    assert leader.limits == [math.inf] * len(leader.limits)


def test_a_check_instance_within_reach_runs_and_the_rival_takes_over():
    """The limit never stops a rival that could still win the check: one that drifted
    to half the winner's time solves its check rows, races again and takes over."""
    clock = [0.0]
    leader, rival = Stopping([1e-3], clock), Stopping([2e-3], clock)
    kernel = won_race(leader, rival, clock)
    rival.times, checked = [0.5e-3], len(rival.limits)
    while kernel.winner == "leader":
        kernel(np.ones((100, 3)))
        assert kernel.instances_in < 10**6, kernel.table()
    assert kernel.winner == "rival" and kernel.checks == 1 and not kernel.check_stopped
    assert len(kernel._check_samples["rival"]) == race.RECHECK_SOLVES
    assert all(limit >= 0.5e-3 for limit in rival.limits[checked:])


class Loaded(Stopping):
    """A `Stopping` kernel on a loaded machine: wall time runs ``load`` times its CPU
    time, so a limit (wall time, as the solvers' are) allows ``1 / load`` of it in CPU."""

    def __init__(self, times: list[float], clock: list[float], load: float) -> None:
        super().__init__(times, clock)
        self.load = load

    @contextlib.contextmanager
    def time_limit(self, seconds: float):
        with super().time_limit(seconds / self.load):
            yield


def test_limits_are_set_in_wall_time_at_the_runs_load():
    """The race times CPU seconds, the solvers' limits are wall time: with other
    processes sharing the core (wall 3x CPU), a limit set as the CPU allowance would
    stop a rival row only 10% slower than the best; it is scaled by the run's wall to
    CPU ratio, so no row within the allowance is stopped."""
    cpu, load = [0.0], 3.0
    leader = Loaded([1e-3], cpu, load)
    rival = Loaded([1.1e-3], cpu, load)
    kernel = RacingKernel(("leader", leader), [("rival", lambda: rival)], "Fake()",
                          clock=lambda: load * cpu[0], sample_clock=lambda: cpu[0])
    while kernel.winner is None:
        kernel(np.ones((4, 3)))
        assert kernel.instances_in < 5000, kernel.table()
    assert kernel.stopped["rival"] == 0, kernel.table()
    assert kernel._wall(1.0) == pytest.approx(load)
    assert min(limit for limit in rival.limits if limit < math.inf) >= 1e-3


@pytest.mark.parametrize("pair", list(itertools.combinations(GENERIC, 2)),
                         ids=lambda pair: "-".join(pair))
def test_real_rivals_stopped_in_a_check_leave_every_answer_optimal(pair, monkeypatch):
    """Real backends in re-checks, one after every call: the rival's limit is cut to
    nothing, so its check rows stop; the winner solves each, and every answer equals
    brute force."""
    if len(GENERIC) < 2:
        pytest.skip("fewer than two generic MIP backends installed")
    monkeypatch.setattr(race, "RECHECK_BUDGET", 1e9)
    first, second = pair
    rng = np.random.default_rng(5)
    spec = random_ilp(rng)
    rival = stopped_at_once(cl.make_solver(spec, second).kernel)
    kernel = RacingKernel((first, cl.make_solver(spec, first).kernel),
                          [(second, lambda: rival)], spec.label)
    kernel.adopt({"winner": first, "means": {first: 1e-3, second: 1e-3}})
    solver = Solver(spec, kernel, first, cl.BackendConfig())
    costs = rng.integers(-3, 4, (24, spec.num_outputs)).astype(float)
    y = np.concatenate([solver.solve(costs[b:b + 2]) for b in range(0, len(costs), 2)])
    for b in range(len(costs)):
        assert float(costs[b] @ y[b]) == pytest.approx(optimum(spec, costs[b])[0]), (pair, b)
    assert kernel.checks >= 2 and kernel.check_stopped == {second}, kernel.table()
    assert kernel.winner == first and kernel.solved[second] == 0
    assert sum(kernel.solved.values()) == kernel.instances_in == len(costs)


class Heavy(Stopping):
    """A `Stopping` kernel whose rows take ``seconds``, or ``heavy`` for a row marked
    heavy (its first cost above 50): the same row is heavy for every kernel."""

    def __init__(self, seconds: float, heavy: float, clock: list[float]) -> None:
        super().__init__([seconds], clock)
        self.heavy = heavy

    def _seconds(self, row: np.ndarray) -> float:
        return self.heavy if row[0] > 50 else self.times[0]


def test_an_instance_heavy_for_both_stopped_in_a_rivals_burst_counts_once():
    """Identity's knapsack has a row 10-50x the mean for both solvers (Gurobi 10-49 ms
    against its 3 ms). Stopped in SCIP's first burst, it counted at Gurobi's time for
    every row of the burst and among Gurobi's solves: SCIP, twice as fast, was dropped
    (here: the leader won, the rival out at +306%), or its bursts were priced at 10x
    their cost while Gurobi solved 200-550 rows. It now counts once, for the rival
    only; the ratio rule drops on the mean without the slowest solve; and a rival is
    priced one standard error below its mean: the faster rival wins within a few
    dozen of the leader's rows."""
    clock = [0.0]
    leader = Heavy(3e-3, 40e-3, clock)
    rival = Heavy(1.5e-3, 40e-3, clock)
    kernel = duel(leader, rival, clock)
    rng = np.random.default_rng(0)
    heavy_rows = 0
    while kernel.winner is None:
        costs = rng.normal(size=(4, 3))
        if rival.rows >= 2 and not heavy_rows:  # the rival's next burst meets it
            costs[:, 0] = [0.0, 99.0, 0.0, 0.0]
            heavy_rows = 1
        np.testing.assert_array_equal(kernel(costs), costs < 0)
        assert kernel.instances_in < 4000, kernel.table()
    assert kernel.stopped["rival"] == 1, kernel.table()
    assert kernel.winner == "rival" and kernel.solved["leader"] < 50, kernel.table()
    assert kernel.samples["rival"].largest == pytest.approx(40e-3)  # the row, once
    assert kernel.samples["leader"].largest == pytest.approx(3e-3)  # not the leader's


def test_the_trimmed_mean_leaves_out_the_slowest_solve():
    times = race.Timings()
    times.add(40e-3)
    assert times.trimmed == pytest.approx(40e-3)  # one solve: its mean
    times.add(1e-3, 3)
    assert times.mean == pytest.approx(43e-3 / 4)
    assert times.trimmed == pytest.approx(1e-3)
