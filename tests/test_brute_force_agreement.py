"""Every backend against brute-force enumeration, at scale: random small ILPs (binary,
integer or mixed; often infeasible) per backend that solves MIPs, and 6124 named-problem
instances over every (problem, backend) pair.

CI runs the counts stated in each test; set ``COMBOLAYER_FULL_COUNTS=1`` to run 2400
random ILPs per backend (a few minutes).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from bruteforce import feasible_points
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_problems import CASES, _costs, best_value, enumerate_solutions

import combolayer as cl
from combolayer.backends import capable_backends
from combolayer.backends.base import Capability
from combolayer.backends.registry import backends, missing_packages

FULL = os.environ.get("COMBOLAYER_FULL_COUNTS") == "1"

#: Every registered backend that solves mixed-integer programs.
MIP_BACKENDS = sorted(name for name, cls in backends().items()
                      if Capability.MIP in cls.capabilities)
#: Random ILPs per backend: 2400 each in full, or this many in CI (cvxpy, a modelling
#: layer over the same solvers, 100).
RANDOM_ILPS = {name: 2400 if FULL else 100 if name == "cvxpy" else 400 for name in MIP_BACKENDS}
#: Named-problem instances in all, over every (problem, backend) pair.
NAMED_INSTANCES = 6124


@st.composite
def small_ilps(draw):
    """Binary, integer or mixed; ==, <= and >= rows; min or max; often infeasible."""
    n_out = draw(st.integers(1, 4))
    n_aux = draw(st.integers(0, 2))
    n = n_out + n_aux
    kinds = draw(st.sampled_from(["binary", "integer", "mixed"]))
    integrality = [kinds if kinds != "mixed" else draw(st.sampled_from(["binary", "integer"]))
                   for _ in range(n)]
    lower = [0.0 if k == "binary" else float(draw(st.integers(-2, 1))) for k in integrality]
    upper = [1.0 if k == "binary" else lo + draw(st.integers(0, 3))
             for k, lo in zip(integrality, lower)]
    rows = []
    for _ in range(draw(st.integers(0, 3))):
        coefs = draw(st.lists(st.integers(-3, 3), min_size=n, max_size=n))
        rows.append(cl.Constraint(coefs=[float(c) for c in coefs],
                                  sense=draw(st.sampled_from(["<=", "==", ">="])),
                                  rhs=float(draw(st.integers(-4, 4)))))
    spec = cl.ILP(shape=[n_out], num_aux=n_aux, sense=draw(st.sampled_from(["min", "max"])),
                  integrality=integrality, lower=lower, upper=upper, constraints=rows)
    costs = np.array(draw(st.lists(st.integers(-5, 5), min_size=n_out, max_size=n_out)), float)
    return spec, costs


def installed(name: str) -> bool:
    cls = backends().get(name)
    return cls is not None and not missing_packages(cls)


@pytest.mark.parametrize("name", sorted(RANDOM_ILPS))
def test_random_ilps_match_brute_force(name):
    """CI: 400 random ILPs per backend, 100 for cvxpy (in full: 2400 each)."""
    if not installed(name):
        pytest.skip(f"backend {name!r} is not installed")
    counted = []

    @settings(max_examples=RANDOM_ILPS[name], deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(small_ilps())
    def check(case):
        spec, costs = case
        points = feasible_points(spec)
        solver = cl.make_solver(spec, name)
        counted.append(1)
        if len(points) == 0:
            with pytest.raises(cl.InfeasibleError):
                solver.solve(costs)
            return
        values = points[:, : spec.num_outputs] @ costs
        best = values.min() if spec.sense == "min" else values.max()
        y = solver.solve(costs)
        assert y @ costs == pytest.approx(best, abs=1e-7)
        assert (np.abs(points[:, : spec.num_outputs] - y).max(axis=1) < 1e-9).any()

    check()
    assert len(counted) >= RANDOM_ILPS[name] * 0.9  # hypothesis ran (about) the stated count


def named_pairs():
    for case, (make, _) in CASES.items():
        spec = make(np.random.default_rng(0))
        for name in capable_backends(spec):
            # cvxpy is covered above; the bruteforce plugin is itself an enumeration.
            if name not in ("cvxpy", "bruteforce"):
                yield case, name


PAIRS = list(named_pairs())


@pytest.mark.parametrize(("case", "name"), PAIRS, ids=[f"{c}-{n}" for c, n in PAIRS])
def test_named_problem_instances_match_brute_force(case, name):
    """6124 instances in all: each (problem, backend) pair solves its share, in batches,
    on a freshly drawn spec per batch of 16 (random graphs and knapsacks vary)."""
    share = NAMED_INSTANCES // len(PAIRS) + (PAIRS.index((case, name))
                                            < NAMED_INSTANCES % len(PAIRS))
    make, sign_kind = CASES[case]
    rng = np.random.default_rng(1000 + PAIRS.index((case, name)))
    done = 0
    while done < share:
        spec = make(rng)
        solutions = enumerate_solutions(spec)
        costs = _costs(rng, spec, sign_kind, batch=min(16, share - done))
        y = cl.make_solver(spec, name).solve(costs)
        flat = solutions.reshape(len(solutions), -1)
        for b in range(len(costs)):
            assert (np.abs(flat - y[b].ravel()).max(axis=1) < 1e-9).any(), (case, name, y[b])
            assert np.sum(costs[b] * y[b]) == pytest.approx(
                best_value(spec, solutions, costs[b]), abs=1e-9)
        done += len(costs)
    assert done == share


def test_the_named_instances_add_up_to_the_stated_count():
    shares = [NAMED_INSTANCES // len(PAIRS) + (i < NAMED_INSTANCES % len(PAIRS))
              for i in range(len(PAIRS))]
    assert sum(shares) == NAMED_INSTANCES
