"""Generic backends (HiGHS, SCIP, cvxpy with HIGHS and SCIP, the bruteforce plugin):
agreement on random ILPs, selection by config, and every error path."""

from __future__ import annotations

import importlib.util
import itertools
import re
import subprocess
import sys
import warnings
from importlib.metadata import entry_points

import numpy as np
import pytest
import torch
from bruteforce import optimum
from testkit import knapsack_ilp
from testkit import skip_unless_installed as available

import combolayer as cl
from combolayer.backends import registry
from combolayer.backends.base import Capability
from combolayer.backends.registry import backends, capable_backends
from combolayer.backends.solver import unit_scaled
from combolayer.problems import TSP

HAS_GUROBI = importlib.util.find_spec("gurobipy") is not None
NEEDS_GUROBI = pytest.mark.skipif(not HAS_GUROBI, reason="gurobipy is not installed "
                                  "(pip install combolayer[gurobi])")

BACKENDS = {
    "highs": "highs",
    "scip": "scip",
    "gurobi": "gurobi",
    "cvxpy-HIGHS": {"name": "cvxpy", "options": {"solver": "HIGHS"}},
    "cvxpy-SCIP": {"name": "cvxpy", "options": {"solver": "SCIP"}},
    "bruteforce": "bruteforce",
}
MIP_BACKENDS = {k: v for k, v in BACKENDS.items() if k != "bruteforce"}


def params(names) -> list:
    """Backend names as pytest parameters, Gurobi's skipped when gurobipy is missing."""
    return [pytest.param(name, marks=NEEDS_GUROBI) if name == "gurobi" else name
            for name in names]


def random_ilp(seed: int) -> cl.ILP:
    """A small feasible pure-integer ILP: binary or general integer outputs, auxiliaries,
    <=, >= and == rows, min or max."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 5))
    num_aux = int(rng.integers(0, 3))
    total = n + num_aux
    integer = bool(rng.integers(2))
    lower = rng.integers(-1, 1, size=total).astype(float) if integer else np.zeros(total)
    upper = lower + (rng.integers(1, 3, size=total) if integer else 1)
    x0 = rng.integers(lower, upper + 1)  # a feasible point keeps every instance feasible
    constraints = []
    for _ in range(int(rng.integers(1, 4))):
        coefs = rng.integers(-3, 4, size=total).astype(float)
        sense = ["<=", ">=", "=="][int(rng.integers(3))]
        slack = 0 if sense == "==" else int(rng.integers(0, 3))
        rhs = float(coefs @ x0) + (slack if sense == "<=" else -slack)
        constraints.append(cl.Constraint(coefs=coefs.tolist(), sense=sense, rhs=rhs))
    return cl.ILP(shape=[n], num_aux=num_aux, sense=["min", "max"][int(rng.integers(2))],
                  integrality="integer" if integer else "binary",
                  lower=lower.tolist(), upper=upper.tolist(), constraints=constraints)


def enumerate_optimum(spec: cl.ILP, cost: np.ndarray) -> tuple[float, np.ndarray]:
    """The optimum by enumeration; continuous random costs make it unique (probability one)."""
    best, best_ys = optimum(spec, cost)
    assert len(best_ys) == 1, best_ys
    return best, best_ys[0]


@pytest.mark.parametrize("backend", params(BACKENDS))
@pytest.mark.parametrize("seed", range(10))
def test_backends_agree_with_enumeration(backend, seed):
    spec = random_ilp(seed)
    costs = np.random.default_rng(100 + seed).normal(size=(3, *spec.cost_shape))
    y = cl.make_solver(spec, BACKENDS[backend]).solve(costs)
    for cost, y_b in zip(costs, y, strict=True):
        best, best_y = enumerate_optimum(spec, cost)
        # Continuous random costs: the optimum is unique with probability one.
        np.testing.assert_allclose(cost @ y_b, best, atol=1e-7)
        np.testing.assert_array_equal(y_b, best_y)


@pytest.mark.parametrize("backend", params(["highs", "scip", "gurobi", "cvxpy-HIGHS"]))
def test_tsp_backends_agree_with_enumeration(backend):
    """Lazy subtour cuts (HiGHS re-solves, SCIP's constraint handler) and MTZ (cvxpy)."""
    n = 6
    spec = TSP(num_nodes=n)
    rng = np.random.default_rng(3)
    points = rng.random((2, n, 2))
    costs = np.linalg.norm(points[:, :, None] - points[:, None], axis=-1)
    y = cl.make_solver(spec, BACKENDS[backend]).solve(costs)
    for cost, y_b in zip(costs, y, strict=True):
        best = min(sum(cost[t[i], t[(i + 1) % n]] for i in range(n))
                   for t in ([0, *p] for p in itertools.permutations(range(1, n))))
        np.testing.assert_allclose((cost * y_b).sum(), 2 * best, rtol=1e-9)
        np.testing.assert_array_equal(y_b, y_b.T)
        np.testing.assert_array_equal(y_b.sum(axis=1), np.full(n, 2.0))


# -- selection and configuration -------------------------------------------------------


def test_plugin_is_discovered_through_its_entry_point():
    names = {entry.name for entry in entry_points(group=registry.ENTRY_POINT_GROUP)}
    assert "bruteforce" in names
    assert cl.make_solver(random_ilp(0), "bruteforce").backend == "bruteforce"


def test_backend_selected_by_yaml_string_dict_and_file(tmp_path):
    spec = random_ilp(1)
    yaml_text = "name: scip\ntime_limit: 30\noptions:\n  fast: true\n"
    assert cl.make_solver(spec, yaml_text).backend == "scip"
    assert cl.make_solver(spec, {"name": "cvxpy", "options": {"solver": "SCIP"}}).backend == "cvxpy"
    path = tmp_path / "backend.yaml"
    path.write_text("name: highs\nmip_gap: 0.0\n")
    config = cl.BackendConfig.load(path)
    assert config.name == "highs" and config.executor == "serial"
    assert cl.make_solver(spec, path).backend == "highs"
    # The same layer on another backend by changing one config field.
    costs = np.random.default_rng(0).normal(size=(4, *spec.cost_shape))
    outs = [cl.make_solver(spec, {"name": name}).solve(costs) for name in ("highs", "scip")]
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.filterwarnings("ignore::combolayer.NoIntegerWarning")  # an LP on purpose
def test_auto_picks_highs_for_lps_and_gurobi_then_scip_for_mips(monkeypatch):
    """SCIP's per-solve set-up is far smaller than HiGHS's on small MIPs (see highs.rank);
    Gurobi, when installed and licensed for the model, comes first on MIPs."""
    small = random_ilp(2)
    # 17 variables: beyond enumeration (a small binary one goes to "enumerate" first,
    # see test_rows.py)
    mip = cl.ILP(shape=[17], integrality="binary",
                 constraints=[cl.Constraint(coefs=[1.0] * 17, sense="<=", rhs=5.0)])
    lp = small.model_copy(update={"integrality": "continuous"})
    gurobi = ["gurobi"] if HAS_GUROBI else []
    assert cl.make_solver(lp).backend == "highs"
    assert registry.capable_backends(lp) == ["highs", *gurobi, "scip", "cvxpy"]
    assert cl.make_solver(mip).backend == (gurobi or ["scip"])[0]
    assert registry.capable_backends(mip)[: 3 + len(gurobi)] == [*gurobi, "scip", "highs",
                                                                 "cvxpy"]
    assert registry.capable_backends(small)[0] == "enumerate"
    monkeypatch.setenv("COMBOLAYER_AUTO_GUROBI", "0")  # the opt-out
    assert cl.make_solver(mip).backend == "scip"


# -- Gurobi: licence fallback, limits --------------------------------------------------


def too_large_for_pip_licence() -> cl.ILP:
    """2500 binary variables: above the size-limited licence's 2000."""
    weights = np.random.default_rng(0).integers(1, 10, size=(1, 2500)).astype(float)
    return cl.ILP.from_matrices(shape=[2500], A_ub=weights, b_ub=[100.0])


def size_limited() -> bool:
    from combolayer.backends.gurobi import licence

    return licence().max_vars is not None


@NEEDS_GUROBI
def test_auto_falls_back_from_gurobi_with_one_log_line(caplog, monkeypatch):
    if not size_limited():
        pytest.skip("this Gurobi licence has no size limit")
    import logging

    monkeypatch.setattr(registry, "_announced", set())
    spec = too_large_for_pip_licence()
    with caplog.at_level(logging.INFO, logger="combolayer"):
        solver = cl.make_solver(spec)
        again = cl.make_solver(spec)  # the reason is said once per process
    assert solver.backend == again.backend == "scip"
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("combolayer")
             and "gurobi" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "size-limited to 2000 variables" in lines[0] and "2500 variables" in lines[0]
    assert "using 'scip', not 'gurobi'" in lines[0]
    cost = -np.ones(2500)
    assert solver.solve(cost).sum() == 100  # it trains on: the weights are 1..9, so
    # at least 100 ones fit, and the cheapest have weight 1


@NEEDS_GUROBI
def test_explicit_gurobi_too_large_raises_backend_unavailable_with_gurobis_reason():
    if not size_limited():
        pytest.skip("this Gurobi licence has no size limit")
    with pytest.raises(cl.BackendUnavailable,
                       match=r"'gurobi' cannot solve ILP\(shape=\[2500\]\).*size-limited.*"
                             r"Model too large.*backends that can: scip"):
        cl.make_solver(too_large_for_pip_licence(), "gurobi")


@NEEDS_GUROBI
def test_no_valid_licence_falls_back_under_auto_and_raises_when_named(caplog, monkeypatch):
    """An expired licence (Gurobi error 10009 when the probe starts its environment)."""
    import logging

    from combolayer.backends import gurobi

    reason = "Gurobi error 10009 (no valid licence): License expired 2025-11-01"
    monkeypatch.setattr(gurobi, "licence", lambda: gurobi.Licence(reason=reason))
    monkeypatch.setattr(registry, "_announced", set())
    # 17 binary variables: beyond enumeration, so SCIP is next after Gurobi
    spec = cl.ILP(shape=[17], integrality="binary",
                  constraints=[cl.Constraint(coefs=[1.0] * 17, sense="<=", rhs=5.0)])
    with caplog.at_level(logging.INFO, logger="combolayer"):
        assert cl.make_solver(spec).backend == "scip"
    lines = [r.getMessage() for r in caplog.records if "gurobi" in r.getMessage()]
    assert len(lines) == 1 and reason in lines[0], lines
    with pytest.raises(cl.BackendUnavailable, match="10009.*License expired"):
        cl.make_solver(spec, "gurobi")


@NEEDS_GUROBI
def test_gurobi_licence_error_at_solve_is_backend_unavailable(monkeypatch):
    """Had the size check let a model through, Gurobi's error 10010 at optimize still
    surfaces as BackendUnavailable with its message, not a GurobiError."""
    if not size_limited():
        pytest.skip("this Gurobi licence has no size limit")
    from combolayer.backends import gurobi

    kernel = gurobi.GurobiKernel(too_large_for_pip_licence().to_canonical(),
                                 cl.BackendConfig(name="gurobi"))
    with pytest.raises(cl.BackendUnavailable, match=r"Gurobi error 10010.*too large"):
        kernel(-np.ones((1, 2500)))


@NEEDS_GUROBI
def test_gurobi_time_and_solution_limits():
    spec = hard_subset_sum()
    with pytest.raises(cl.SolverError, match="time limit"):
        cl.make_solver(spec, {"name": "gurobi", "time_limit": 0.05,
                              "options": {"Presolve": 0, "Cuts": 0}}).solve(np.ones(40))
    # A solution limit stops with a feasible solution: returned with a warning. On this
    # 3 x 50 knapsack Gurobi's first solution is worse than the optimum.
    rng = np.random.default_rng(0)
    knapsack = cl.ILP.from_matrices(shape=[50], A_ub=rng.uniform(1, 2, size=(3, 50)),
                                    b_ub=[12.0] * 3)
    costs = -rng.uniform(1, 2, size=50)
    solver = cl.make_solver(knapsack, {"name": "gurobi", "options": {"SolutionLimit": 1}})
    with pytest.warns(RuntimeWarning, match="not solved to optimality"):
        y, status = solver.solve(costs, return_status=True)
    assert status == ("solution limit",)  # named, with the time limit's handling
    exact = cl.make_solver(knapsack, "scip").solve(costs)
    assert (knapsack.to_matrices()[0] @ y <= 12 + 1e-9).all()
    assert costs @ y > costs @ exact + 1e-6


@NEEDS_GUROBI
def test_gurobi_solves_an_integral_lp_as_an_lp_and_a_knapsack_as_a_mip():
    path = cl.data.shortest_path_spec((4, 4))  # flow conservation: totally unimodular
    solver = cl.make_solver(path, "gurobi")
    assert solver.kernel.model.IsMIP == 0
    costs = np.random.default_rng(0).uniform(0, 1, size=(20, *path.cost_shape))
    y = solver.solve(costs)
    assert set(np.unique(y)) <= {0.0, 1.0}
    exact = cl.make_solver(path, "highs").solve(costs)
    np.testing.assert_allclose((costs * y).reshape(20, -1).sum(1),
                               (costs * exact).reshape(20, -1).sum(1))
    knapsack = cl.problems.Knapsack(weights=[[3, 1, 4, 1, 5]], capacities=[7])
    assert cl.make_solver(knapsack, "gurobi").kernel.model.IsMIP == 1


@NEEDS_GUROBI
def test_gurobi_rejects_unknown_option_and_status_map():
    from gurobipy import GRB

    from combolayer.backends.gurobi import gurobi_status
    from combolayer.backends.outcome import Outcome

    with pytest.raises(ValueError, match="Gurobi rejected option NotAParam"):
        cl.make_solver(random_ilp(0), {"name": "gurobi", "options": {"NotAParam": 1}})
    assert gurobi_status(GRB.OPTIMAL)[0] is Outcome.OPTIMAL
    assert gurobi_status(GRB.INF_OR_UNBD)[0] is Outcome.INFEASIBLE_OR_UNBOUNDED
    assert gurobi_status(GRB.SOLUTION_LIMIT)[0] is Outcome.LIMIT  # named, not "time limit"
    assert gurobi_status(GRB.TIME_LIMIT)[0] is Outcome.TIME_LIMIT
    assert gurobi_status(GRB.NUMERIC)[0] is Outcome.STOPPED
    assert gurobi_status(GRB.INTERRUPTED)[0] is Outcome.INTERRUPTED


def test_bad_config_raises_spec_error():
    with pytest.raises(cl.SpecError, match="executor"):
        cl.BackendConfig.load({"name": "highs", "executor": "gpu"})
    # built directly, pydantic's own ValidationError came out, which is no ComboLayerError
    with pytest.raises(cl.SpecError, match="invalid backend config: workers: .* got -1"):
        cl.BackendConfig(workers=-1)
    # from a dict, once: the message was nested in itself ("invalid backend config: Value
    # error, invalid backend config: workers: ...")
    with pytest.raises(cl.SpecError,
                       match="^invalid backend config: workers: expected a positive integer"):
        cl.BackendConfig.load({"name": "highs", "workers": -1})
    with pytest.raises(cl.BackendUnavailable, match="unknown backend 'cplex'"):
        cl.make_solver(random_ilp(0), "cplex")


def test_solver_options_are_checked():
    spec = random_ilp(0)
    with pytest.raises(ValueError, match="SCIP rejected option not/a/param"):
        cl.make_solver(spec, {"name": "scip", "options": {"not/a/param": 1}})
    with pytest.raises(ValueError, match="cvxpy solver 'NOPE' is not installed"):
        cl.make_solver(spec, {"name": "cvxpy", "options": {"solver": "NOPE"}})


def test_scip_fast_settings_are_a_per_kind_default():
    from combolayer.backends.scip import _fast_default

    assert _fast_default("ilp") and _fast_default("knapsack")
    assert not _fast_default("tsp")
    big_lp = cl.ILP(shape=[6000], integrality="continuous").to_canonical()
    small_lp = cl.ILP(shape=[60], integrality="continuous").to_canonical()
    big_mip = cl.ILP(shape=[6000]).to_canonical()
    assert not _fast_default("ilp", big_lp)
    assert _fast_default("ilp", small_lp) and _fast_default("ilp", big_mip)
    spec = random_ilp(4)
    costs = np.random.default_rng(0).normal(size=(3, *spec.cost_shape))
    fast = cl.make_solver(spec, {"name": "scip", "options": {"fast": True}}).solve(costs)
    full = cl.make_solver(spec, {"name": "scip", "options": {"fast": False}}).solve(costs)
    np.testing.assert_array_equal(fast, full)


def test_scip_fast_mode_keeps_the_cheap_heuristics_and_an_option_overrides_them():
    from combolayer.backends.scip import _CHEAP_HEURISTICS

    spec = random_ilp(4)
    fast = cl.make_solver(spec, "scip").kernel.model
    assert fast.getParam("heuristics/rens/freq") == -1  # the fast mode's heuristics are off
    assert all(fast.getParam(key) == value for key, value in _CHEAP_HEURISTICS.items())
    full = cl.make_solver(spec, {"name": "scip", "options": {"fast": False}}).kernel.model
    assert full.getParam("heuristics/twoopt/freq") == -1  # SCIP's own default
    chosen = cl.make_solver(spec, {"name": "scip", "options": {"heuristics/oneopt/freq": 5}})
    assert chosen.kernel.model.getParam("heuristics/oneopt/freq") == 5


def test_cvxpy_keeps_one_problem_and_changes_only_the_parameter():
    spec = random_ilp(5)
    solver = cl.make_solver(spec, "cvxpy")
    problem = solver.kernel.problem
    rng = np.random.default_rng(0)
    for _ in range(3):
        cost = rng.normal(size=spec.cost_shape)
        y = solver.solve(cost)
        # one cost per variable: the outputs' costs, 0 on the auxiliaries (no known cost),
        # small ones brought to a unit size by a power of two (`unit_scaled`)
        full = np.r_[solver.sign * np.ravel(cost), np.zeros(spec.num_aux)]
        np.testing.assert_allclose(solver.kernel.cost.value, unit_scaled(full))
        np.testing.assert_array_equal(y, enumerate_optimum(spec, cost)[1])
    assert solver.kernel.problem is problem


# -- error paths -----------------------------------------------------------------------


INFEASIBLE = {
    "row": cl.ILP(shape=[2], constraints=[cl.Constraint(coefs=[1, 1], sense=">=", rhs=3)]),
    # no integer in [0.3, 0.7]: cvxpy raised its own "invalid bounds" ValueError
    "bounds": cl.ILP(shape=[2], integrality="integer", lower=[0.3, 0.0], upper=[0.7, 1.0]),
}


@pytest.mark.parametrize("case", list(INFEASIBLE))
@pytest.mark.parametrize("backend", params(BACKENDS))
def test_infeasible_raises_infeasible_error(backend, case):
    solver = cl.make_solver(INFEASIBLE[case], BACKENDS[backend])
    with pytest.raises(cl.InfeasibleError, match="no feasible solution"):
        solver.solve(np.ones(2))


@pytest.mark.parametrize("backend", params(MIP_BACKENDS))
@pytest.mark.parametrize("integrality", ["continuous", "integer"])
@pytest.mark.filterwarnings("ignore::combolayer.NoIntegerWarning")  # an LP on purpose
def test_unbounded_raises_solver_error(backend, integrality):
    spec = cl.ILP(shape=[2], integrality=integrality, lower=[float("-inf"), 0.0], upper=None,
                  constraints=[cl.Constraint(coefs=[1, 1], sense="<=", rhs=3)])
    solver = cl.make_solver(spec, MIP_BACKENDS[backend])
    with pytest.raises(cl.SolverError, match="unbounded") as info:
        solver.solve(np.array([1.0, 0.0]))
    assert not isinstance(info.value, cl.InfeasibleError)


def hard_subset_sum() -> cl.ILP:
    """sum a_i x_i == odd b with even a_i: infeasible, but only by exhausting 2^40 nodes
    once presolve (which spots the parity) is off."""
    a = 2 * np.random.default_rng(1).integers(10**5, 10**6, size=40)
    return cl.ILP.from_matrices(shape=[40], A_eq=a[None, :], b_eq=[a.sum() // 2 | 1])


@pytest.mark.parametrize("backend", [
    "highs", "scip",
    # Gurobi's presolve and cuts spot the parity at once
    pytest.param({"name": "gurobi", "options": {"Presolve": 0, "Cuts": 0}},
                 marks=NEEDS_GUROBI),
    {"name": "cvxpy", "options": {"solver": "HIGHS", "presolve": "off"}},
])
def test_time_limit_without_solution_raises_solver_error(backend):
    config = cl.BackendConfig.load(backend).model_copy(update={"time_limit": 0.1})
    solver = cl.make_solver(hard_subset_sum(), config)
    with pytest.raises(cl.SolverError, match="time limit") as info:
        solver.solve(np.ones(40))
    assert not isinstance(info.value, cl.InfeasibleError)


def test_missing_package_names_backends_that_can(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pyscipopt" else real(name, *a))
    with pytest.raises(cl.BackendUnavailable,
                       match=r"pyscipopt is not installed.*backends that can: "
                             + ("gurobi, " if HAS_GUROBI else "") + "highs, cvxpy"):
        cl.make_solver(random_ilp(0), "scip")


@pytest.mark.filterwarnings("ignore::combolayer.NoIntegerWarning")  # an LP on purpose
def test_capability_mismatch_names_backends_that_can():
    spec = cl.ILP(shape=[2], integrality="continuous",
                  constraints=[cl.Constraint(coefs=[1, 1], sense="<=", rhs=1)])
    with pytest.raises(cl.BackendUnavailable,
                       match=r"'bruteforce' cannot solve ILP.*continuous.*backends that can: "
                             r"highs, " + ("gurobi, " if HAS_GUROBI else "") + "scip, cvxpy"):
        cl.make_solver(spec, "bruteforce")
    with pytest.raises(cl.BackendUnavailable, match=r"'torch' cannot solve.*it solves only"):
        cl.make_solver(spec, "torch")


def test_same_layer_on_every_backend_by_changing_one_field():
    import torch

    spec = random_ilp(7)
    w = torch.randn(3, *spec.cost_shape, dtype=torch.float64, requires_grad=True)
    outs = []
    for name, backend in BACKENDS.items():
        if name == "gurobi" and not HAS_GUROBI:
            continue
        config = cl.BackendConfig.load(backend)
        layer = cl.ComboLayer(spec, backend=config)
        y = layer(w)
        y.sum().backward()
        outs.append(y.detach())
    for y in outs[1:]:
        torch.testing.assert_close(y, outs[0])


# -- MIP starts: the kernel's start= hook -----------------------------------------------


@pytest.mark.parametrize("backend", params(["highs", "scip", "gurobi"]))
@pytest.mark.parametrize("seed", range(6))
def test_mip_start_never_changes_the_optimum(backend, seed):
    """A start is a hint: the optimal value, the start being optimal, feasible,
    infeasible or out of bounds (auxiliaries left for the solver to complete)."""
    spec = random_ilp(seed)
    kernel = cl.make_solver(spec, backend).kernel
    kernel.takes_start = True  # the code path, whether or not the backend keeps it on
    rng = np.random.default_rng(seed)
    sign = 1.0 if spec.sense == "min" else -1.0
    costs = sign * rng.normal(size=(3, *spec.cost_shape))
    cold = kernel(costs)
    best = np.array([enumerate_optimum(spec, sign * c)[0] for c in costs])
    lower = np.asarray(spec.to_canonical().lower[: spec.num_outputs])
    for start in (cold, np.roll(cold, 1, axis=0), np.full_like(cold, 7.0),
                  np.broadcast_to(lower, cold.shape)):
        warm = kernel(costs, start=start)
        np.testing.assert_allclose(sign * np.sum(costs * warm, axis=1), best, atol=1e-9)


@NEEDS_GUROBI
def test_gurobi_clears_a_start_when_the_next_call_has_none():
    """Gurobi keeps its previous solve as a warm start (no reset), but never a start
    the caller gave an earlier call."""
    from gurobipy import GRB

    spec = random_ilp(0)
    kernel = cl.make_solver(spec, "gurobi").kernel
    kernel.takes_start = True
    costs = np.random.default_rng(0).normal(size=(2, *spec.cost_shape))
    kernel(costs, start=np.full((2, spec.num_outputs), 1.0))
    assert (np.asarray(kernel._outputs.Start) == 1.0).all()
    kernel(costs)
    assert (np.asarray(kernel._outputs.Start) == GRB.UNDEFINED).all()


@NEEDS_GUROBI
def test_gurobi_tsp_start_from_another_tour():
    n = 9
    rng = np.random.default_rng(0)
    costs = rng.random((2, n * n))
    kernel = cl.make_solver(TSP(num_nodes=n), "gurobi").kernel
    kernel.takes_start = True
    cold = kernel(costs)
    warm = kernel(costs, start=cold[::-1])  # each gets the other's optimal tour
    np.testing.assert_allclose(np.sum(costs * warm, 1), np.sum(costs * cold, 1), atol=1e-9)


def test_kernels_without_starts_ignore_them():
    kernel = cl.make_solver(TSP(num_nodes=13), "highs").kernel  # HiGHS's TSP kernel
    assert not kernel.takes_start
    costs = np.random.default_rng(1).random((1, 169))
    np.testing.assert_array_equal(kernel(costs, start=np.zeros((1, 169))), kernel(costs))


# -- integer bounds, warm starts, empty batches, costs no solver can represent -------------


# Every registered backend that solves mixed-integer programs.
GENERIC = sorted(name for name, cls in backends().items() if Capability.MIP in cls.capabilities)


@pytest.mark.parametrize("name", GENERIC)
def test_fractional_bounds_on_integer_variables_are_rounded_inward(name):
    # highspy 1.15.1 returned -2 here; the optimum is -4.
    available(name)
    spec = cl.load_spec({
        "kind": "ilp", "shape": [8], "integrality": "integer",
        "lower": [-2, -2, 1, 0, -1.5, 0.5, 1, -1], "upper": [-1, -1, 3, 2, -0.5, 2.5, 4, -1],
        "constraints": [{"coefs": [3, 1, -1, -2, 3, 1, -1, -3], "sense": "<=", "rhs": -16},
                        {"coefs": [2, 1, 2, 1, -2, -2, -1, -2], "sense": "==", "rhs": -1}]})
    form = spec.to_canonical()
    np.testing.assert_array_equal(form.lower[4:6], [-1, 1])
    np.testing.assert_array_equal(form.upper[4:6], [-1, 2])
    costs = np.array([1, 1, 0, -2, -2, 0, 1, 1.0])
    assert cl.make_solver(spec, name).solve(costs) @ costs == -4


@pytest.mark.parametrize("name", GENERIC)
def test_a_mip_instance_s_optimum_among_ties_is_the_same_wherever_it_comes(name):
    """A batch and its reverse give each instance the same optimum, so a batch split
    over workers (which depends on timing) answers as serially. Gurobi started each
    solve from the previous incumbent, and tied assignments came back otherwise."""
    available(name)
    spec = cl.problems.Matching(4, 4).to_ilp()
    costs = np.random.default_rng(0).integers(1, 3, (60, 4, 4)).astype(float)
    solver = cl.make_solver(spec, name)
    np.testing.assert_array_equal(solver.solve(costs), solver.solve(costs[::-1])[::-1])

@pytest.mark.parametrize("solver", ["HIGHS", "SCIP"])
def test_cvxpy_resolves_with_new_costs_never_return_the_previous_point(solver):
    # cvxpy's warm start made HiGHS report the first point as optimal again: [-6, 2].
    available("cvxpy")
    spec = cl.ILP(shape=[3], integrality="integer", lower=-2, upper=2, constraints=[
        cl.Constraint(coefs=[1, -2, 1], sense="<=", rhs=0),
        cl.Constraint(coefs=[-2, -1, -1], sense="<=", rhs=2)])
    costs = np.array([[-1, 2, 2], [-1, 2, -2.0]])
    y = cl.make_solver(spec, {"name": "cvxpy", "options": {"solver": solver}}).solve(costs)
    np.testing.assert_array_equal((y * costs).sum(1), [-6, -2])


EMPTY_CASES = [(spec, name) for spec in [
    cl.problems.Knapsack(weights=[[1, 2, 3]], capacities=[3]), cl.problems.TSP(5),
    cl.problems.Matching(3, 3), cl.problems.TopK(4, 2), cl.problems.ShortestPath.grid(3, 3)]
    for name in capable_backends(spec)]


@pytest.mark.parametrize(("spec", "name"), EMPTY_CASES,
                         ids=[f"{s.kind}-{n}" for s, n in EMPTY_CASES])
def test_an_empty_batch_returns_shape_zero_on_every_path(spec, name):
    solver = cl.make_solver(spec, name)
    costs = np.zeros((0, *spec.cost_shape))
    assert solver.solve(costs).shape == costs.shape
    assert solver.solve(torch.tensor(costs)).shape == costs.shape


def test_costs_that_no_solver_can_represent_raise_value_error_before_the_solver():
    spec = knapsack_ilp()
    solver = cl.make_solver(spec, "highs")
    with pytest.raises(ValueError, match=r"costs must be below 1e\+15 in magnitude .* got 1e\+20"):
        solver.solve(np.array([1e20, 0, 0, 0, 0, 0]))
    with pytest.raises(ValueError, match="costs must be finite, got NaN or inf"):
        solver.solve(np.array([np.nan, 0, 0, 0, 0, 0]))
    with pytest.raises(ValueError, match="costs must be real, got complex"):
        solver.solve(np.array([1j, 0, 0, 0, 0, 0]))
    layer = cl.ComboLayer(spec)
    big = torch.full((1, 6), 1e20, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"w must be below 1e\+15"):
        layer(big)


def test_ctrl_c_during_a_scip_solve_surfaces_as_keyboard_interrupt(monkeypatch):
    available("scip")
    solver = cl.make_solver(knapsack_ilp(), "scip")
    # SCIP catches SIGINT itself and stops with status "userinterrupt".
    monkeypatch.setattr(type(solver.kernel), "_run",
                        lambda self, objective, start=None: "userinterrupt")
    with pytest.raises(KeyboardInterrupt):
        solver.solve(np.ones(6))


# -- building and dropping SCIP layers does not grow the process ---------------------------


LEAK_SCRIPT = """
import gc, os
import torch, combolayer as cl

def rss_mb():  # resident set size, from /proc/self/statm (pages)
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

spec = cl.problems.Knapsack(weights=[[3, 1, 4, 1, 5, 2, 6, 2]], capacities=[9])
w = torch.randn(16, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

def build(n):  # the process's size after n more layers: its lowest over the last 20
    sizes = []
    for i in range(n):
        layer = cl.ComboLayer(spec, backend={{"name": "scip", "executor": "thread", "workers": 2}})
        layer(w)
        del layer
        if i >= n - 20:
            gc.collect()
            sizes.append(rss_mb())
    return min(sizes)

start = build(25)  # imports and caches
print(*[build({n}) - start for _ in range(2)])
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_building_and_dropping_scip_layers_with_threads_keeps_memory_bounded():
    # Without the malloc_trim after a dropped model, 100 layers grew the process by 66 MB
    # and 100 more by 91 MB, all of it memory SCIP had freed and glibc's per-thread
    # arenas kept; layers kept alive grew it by 320 MB per 100. The size read after each
    # round is its lowest over the round's last 20 layers: the size read after one layer
    # swung by 30 MB either way under the full suite's load (worker threads' transient
    # memory), and made the test fail on no leak.
    pytest.importorskip("pyscipopt")
    result = subprocess.run([sys.executable, "-c", LEAK_SCRIPT.format(n=100)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = map(float, result.stdout.split()[-2:])
    assert first < 10.0 and second < 10.0, (
        f"100 SCIP layers grew the process by {first:.1f} MB, 200 by {second:.1f} MB")


# -- the bruteforce plugin ranks large models without an overflow --------------------------


def test_the_bruteforce_plugin_refuses_a_large_model_without_overflow():
    bruteforce = pytest.importorskip("combolayer_bruteforce")
    spec = cl.ILP.from_matrices(shape=[1200], A_ub=np.ones((1, 1200)), b_ub=[3.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "overflow encountered in reduce" was a warning
        reason = bruteforce.BruteForceBackend().accepts(spec)
        cl.backends.capable_backends(spec)
    assert reason == "it enumerates at most 65536 points, this problem has about 1e361"
    small = cl.ILP.from_matrices(shape=[4], A_ub=np.ones((1, 4)), b_ub=[3.0])
    assert bruteforce.BruteForceBackend().accepts(small) is None


#: Knapsacks whose large weights put a one-unit breach of the capacity inside a MIP
#: solver's relative feasibility tolerance (1e-6 of the row): SCIP and HiGHS returned it.
LARGE_WEIGHTS = [
    (cl.problems.Knapsack(weights=[[1e9, 1e9, 1]], capacities=[2e9 - 1]), [10.0, 1.0, 1.0]),
    (cl.problems.Knapsack(weights=[[1000003, 2000005, 999999]], capacities=[2000004],
                          sense="min"), [1.13, -0.13, -0.02]),
]


@pytest.mark.parametrize("case", range(len(LARGE_WEIGHTS)))
@pytest.mark.parametrize("backend", ["highs", "scip", "gurobi", "enumerate", "auto"])
def test_an_answer_that_breaks_a_row_within_the_solvers_tolerance_is_never_returned(
        backend, case):
    """Every answer meets the capacity exactly, or the solve raises SolverError naming
    the breach: never an infeasible point."""
    if backend != "auto":
        available(backend)
    spec, costs = LARGE_WEIGHTS[case]
    weights, capacity = np.asarray(spec.weights[0]), spec.capacities[0]
    points = np.array(list(itertools.product([0.0, 1.0], repeat=3)))
    values = points[points @ weights <= capacity] @ np.asarray(costs)
    best = values.min() if spec.sense == "min" else values.max()
    try:
        y = cl.make_solver(spec, backend).solve(np.array(costs))
    except cl.SolverError as error:
        assert "breaks row 0" in str(error) and "tolerance" in str(error)
        option = re.search(r"options=\{'([^']+)': 1e-9\}", str(error))
        if option is None or case == 0:  # 2e9 - 1: a breach of 5e-10 of the row, below
            return  # any tolerance a solver takes
        # the option the error names, set, gives the optimum
        y = cl.make_solver(spec, {"name": backend, "options": {option[1]: 1e-9}}).solve(
            np.array(costs))
    assert weights @ y <= capacity
    assert float(np.asarray(costs) @ y) == pytest.approx(best)


@pytest.mark.parametrize("weights, capacity", [([1e-7, 1e-7, 1.0], 0.0),
                                               ([1.0, 1.0, 1.0], 0.99999999)])
def test_weights_near_integers_keep_the_capacity_on_every_exact_backend(weights, capacity):
    """The knapsack DP read weights within 1e-7 of an integer as that integer (1e-7 as
    0, a capacity of 0.99999999 as 1), and enumeration met rows to 1e-6: both took
    items the capacity has no room for."""
    spec = cl.problems.Knapsack(weights=[weights], capacities=[capacity])
    ours = [name for name in capable_backends(spec)  # not the test plugin's
            if backends()[name].__module__.startswith("combolayer.")]
    for backend in ["auto", *ours]:
        try:
            y = cl.make_solver(spec, backend).solve(np.array([1.0, 1.0, 0.5]))
        except cl.SolverError as error:  # a MIP solver's answer, refused
            assert "breaks row" in str(error), backend
            continue
        assert np.asarray(weights) @ y <= capacity, backend


@pytest.mark.parametrize("backend", ["highs", "scip", "gurobi", "cvxpy", "auto"])
@pytest.mark.parametrize("scale", [1e-6, 1e-7, 1e-9, 1e-12])
def test_a_spec_row_of_small_coefficients_with_a_continuous_variable_holds(backend, scale):
    """``s * (y0 + y1 + z) <= s``: met within an absolute tolerance of 1e-6, Gurobi and
    cvxpy answered [1, 1] (a breach of the row by a whole unit) with no error, as the
    answer check covers rows of integer variables alone; at 1e-9 every backend did. The
    spec's rows reach the solvers brought up to a unit size, as per-call rows do."""
    if backend != "auto":
        available(backend)
    spec = cl.ILP(shape=[2], num_aux=1, sense="max",
                  integrality=["binary", "binary", "continuous"],
                  constraints=[cl.Constraint(coefs=[scale] * 3, sense="<=", rhs=scale)])
    y = cl.make_solver(spec, backend).solve(np.ones(2))
    assert y.sum() == 1
    layer = cl.ComboLayer(spec, backend=backend).eval()
    assert float(layer(torch.ones(1, 2, dtype=torch.float64)).sum()) == 1


@pytest.mark.parametrize("backend", ["highs", "scip", "gurobi", "cvxpy"])
@pytest.mark.parametrize("scale", [1e-8, 1e-6, 1e6])
def test_scaling_the_costs_never_changes_the_optimum(backend, scale):
    """A positive scale leaves the argmin alone, but a MIP solver's tolerances are
    absolute: on costs of 1e-6, HiGHS and Gurobi returned tours 2.7% and 15% longer and
    SCIP a knapsack 24% worse. Each instance's costs are brought to a unit size (by a
    power of two: ties stay ties) before the solver sees them."""
    available(backend)
    rng = np.random.default_rng(0)
    points = rng.uniform(size=(3, 9, 2))
    tours = np.linalg.norm(points[:, :, None] - points[:, None], axis=-1)
    knapsack = cl.problems.Knapsack(weights=rng.uniform(1, 5, (1, 24)).round(2).tolist(),
                                    capacities=[20.0]).to_ilp()
    for spec, costs in ((cl.problems.TSP(9), tours),
                        (knapsack, rng.uniform(size=(3, 24)))):
        if backend not in capable_backends(spec):
            continue
        solver = cl.make_solver(spec, backend)
        value = (costs * solver.solve(costs)).reshape(len(costs), -1).sum(1)
        scaled = (costs * solver.solve(costs * scale)).reshape(len(costs), -1).sum(1)
        np.testing.assert_allclose(scaled, value, rtol=1e-9, err_msg=f"{spec.label} x {scale}")


@pytest.mark.parametrize("backend", ["highs", "scip", "gurobi", "cvxpy"])
def test_costs_near_a_large_offset_keep_their_optimum(backend):
    """Costs of 1e6 plus small integers: brought down to a unit size their differences
    sank below HiGHS's and cvxpy's tolerances (8 and 11 of 120 knapsacks worse than
    optimal); left as they are, every answer is the optimum (the enumeration's)."""
    available(backend)
    rng = np.random.default_rng(1)
    worse = 0
    for _ in range(40):
        spec = cl.problems.Knapsack(weights=[rng.integers(2, 20, 16).tolist()],
                                    capacities=[91.5])
        costs = 1e6 + rng.integers(0, 5, 16).astype(float)
        best = costs @ cl.make_solver(spec, "enumerate").solve(costs)
        worse += costs @ cl.make_solver(spec, backend).solve(costs) < best - 0.5
    assert worse == 0


@pytest.mark.parametrize("backend", ["highs", "scip", "gurobi", "cvxpy"])
def test_a_big_m_cost_keeps_the_optimum_through_the_default_layer(backend):
    """A cost of 1e7 beside costs near 1 (a big-M that forbids an item), or a known cost of
    1e8: the default layer normalises the total to unit norm, which took the small costs
    to about 1e-7, below HiGHS's and cvxpy's absolute tolerances, and the layer answered
    zeros where the solver answered the optimum. Costs reach the solver scaled up to
    about 2^20 (by a power of two)."""
    available(backend)
    spec = cl.ILP(shape=[4], integrality="binary",
                  constraints=[cl.Constraint(coefs=[1] * 4, sense="<=", rhs=2)])
    w = np.random.default_rng(0).integers(-5, 6, (16, 4)).astype(float)
    big_m = w.copy()
    big_m[:, 2] = 1e7
    known = np.array([0.0, 1e8, 0.0, 0.0])
    exact = cl.make_solver(spec, "enumerate")
    layer = cl.ComboLayer(spec, backend=backend).eval()
    for costs, known_cost in ((big_m, None), (w, known)):
        total = costs if known_cost is None else costs + known_cost
        y = layer(torch.tensor(costs), known_cost=None if known_cost is None
                  else torch.tensor(known_cost)).numpy()
        best = (total * exact.solve(total)).sum(1)
        np.testing.assert_allclose((total * y).sum(1), best, err_msg=backend)


@pytest.mark.parametrize("backend, option", [("highs", "objective_bound"),
                                             ("gurobi", "Cutoff"), ("gurobi", "cut_off")])
def test_an_objective_bound_in_the_options_meets_the_costs_as_given(backend, option):
    """A bound in the objective's units is not scaled with the costs: scaled by 2**18, a
    bound of 4 cut off the optimum 3 (InfeasibleError), and a bound of -6 that no
    solution reaches was met. Such a kernel solves the costs as they come."""
    available(backend)
    spec = cl.ILP(shape=[4], integrality="binary",
                  constraints=[cl.Constraint(coefs=[1] * 4, sense=">=", rhs=2)])
    solver = cl.make_solver(spec, cl.BackendConfig(name=backend, options={option: 4.0}))
    assert solver.solve(np.array([1.0, 2, 3, 4])).tolist() == [1, 1, 0, 0]
    unreachable = cl.make_solver(spec, cl.BackendConfig(name=backend, options={option: -6.0}))
    with pytest.raises((cl.InfeasibleError, cl.SolverError)):
        unreachable.solve(np.array([1.0, 2, 3, 4]))


def test_options_in_the_objectives_units_are_found_however_spelled_and_nested():
    """Gurobi ignores case and underscores in parameter names, and cvxpy nests SCIP's."""
    from combolayer.backends.solver import scales_costs

    for options in ({"best_obj_stop": 1.0}, {"MIP_Gap_Abs": 0.1}, {"limits/dual": 1.0},
                    {"solver": "SCIP", "scip_params": {"limits/primal": 1.0}}):
        assert not scales_costs(options), options
    assert scales_costs({"solver": "SCIP", "scip_params": {"limits/time": 5.0}})


@pytest.mark.parametrize("backend", ["highs", "scip"])
def test_an_instances_optimum_under_ties_does_not_depend_on_the_solves_before_it(backend):
    """SCIP kept the solutions of earlier solves as incumbents: on tied matchings 14 of
    64 optima changed with the batch's order and 6 between a batch and one by one."""
    costs = np.random.default_rng(0).integers(0, 3, (64, 5, 5)).astype(float)
    solver = cl.make_solver(cl.problems.Matching(5, 5).to_ilp(), backend)
    batch = solver.solve(costs)
    np.testing.assert_array_equal(solver.solve(costs[::-1])[::-1], batch)
    np.testing.assert_array_equal(np.stack([solver.solve(c) for c in costs]), batch)


def test_scip_takes_a_mip_start_when_asked():
    """SCIP keeps no earlier solve's solution, but a start given to a kernel that takes
    starts is kept for its solve (it was dropped: no room in the solution storage). On
    tied costs the start is the optimum it returns."""
    spec = cl.problems.Knapsack(weights=[[1.5, 2, 3, 4.2]], capacities=[5.5]).to_ilp()
    kernel = cl.make_solver(spec, "scip").kernel
    kernel.takes_start = True
    starts = np.array([[0, 1, 1, 0], [1, 0, 1, 0], [1, 1, 0, 0]], dtype=float)
    y = kernel.with_statuses(-np.ones((3, 4)), start=starts).values  # every pair ties
    np.testing.assert_array_equal(y, starts)


def test_settings_a_backend_does_nothing_with_are_warned_of():
    """Options on a backend with no solver settings (auto picks scipy for a knapsack over
    the MIP solver they were meant for), or an executor for a batched torch kernel, did
    nothing without a word; a MIP solver takes them without a warning."""
    knapsack = cl.problems.Knapsack(weights=[[3.0, 4, 2, 5]], capacities=[7.0])
    with pytest.warns(UserWarning, match=r"backend 'scipy' .* options \['mip_rel_gap'\]"):
        cl.make_solver(knapsack, {"options": {"mip_rel_gap": 0.5}})
    with pytest.warns(UserWarning, match=r"backend 'torch' .* executor='thread', workers=2"):
        cl.make_solver(cl.problems.TopK(n=5, k=2), {"name": "torch", "workers": 2})
    with pytest.warns(UserWarning, match=r"backend 'scipy' .* time_limit=0.5 and "
                                         r"mip_gap=0.1 \(its algorithm runs to the end\)"):
        cl.make_solver(knapsack, {"name": "scipy", "time_limit": 0.5, "mip_gap": 0.1})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cl.make_solver(knapsack, {"name": "highs", "options": {"mip_rel_gap": 0.5}})
        cl.make_solver(knapsack, {"name": "highs", "time_limit": 0.5, "mip_gap": 0.1})


def test_workers_of_a_backend_no_time_limit_stops_get_no_time_budget():
    """The executor gave workers a budget from time_limit, which scipy's TSP loop ignores:
    a healthy 1 s solve was killed as hung, and the thread left behind aborted the
    interpreter at exit. Workers of a solver that stops at the limit keep the budget."""
    tsp = cl.problems.TSP(14)
    config = {"time_limit": 0.01, "executor": "thread", "workers": 2}
    with pytest.warns(UserWarning, match="time_limit"):
        scipy_kernel = cl.make_solver(tsp, {"name": "scipy", **config}).kernel
    highs_kernel = cl.make_solver(tsp, {"name": "highs", **config}).kernel
    chunks = [(np.zeros((3, 196)), None, None)] * 4
    assert scipy_kernel._deadline(chunks) is None
    assert highs_kernel._deadline(chunks) > 0


def test_limits_are_warned_of_where_the_solver_that_runs_ignores_them():
    """cvxpy passes time_limit and mip_gap to HiGHS and SCIP alone (its workers kept a
    budget for other solvers, and a healthy solve was killed as hung); tsp_matrix hands
    them to the matrix form's solver (it was warned of as ignoring them)."""
    knapsack = cl.problems.Knapsack(weights=[[3.0, 4, 2, 5]], capacities=[7.0])
    config = {"name": "cvxpy", "time_limit": 1.0, "executor": "thread", "workers": 2}
    chunks = [(np.zeros((3, 4)), None, None)] * 2
    with pytest.warns(UserWarning, match="cvxpy backend cannot pass them to SCIPY"):
        other = cl.make_solver(knapsack, {**config, "options": {"solver": "SCIPY"}})
    assert other.kernel._deadline(chunks) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cl.make_solver(knapsack, config).kernel._deadline(chunks) > 0
        cl.make_solver(cl.problems.TSPEdges(num_nodes=15), {"time_limit": 5.0})
