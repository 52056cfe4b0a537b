"""docs/from_pyepo.md's "same algorithm" rows, each on identical inputs against PyEPO.

Every row of the page's table that says "same algorithm" has a test that runs PyEPO
(`CHECKED_BY`); `test_every_same_algorithm_row_is_checked_against_pyepo` holds the page
to that, and the tests below check the rows that no other test file already checks. Random draws
are made identical by handing combolayer PyEPO's own draws (`FixedNoise`), since the
two libraries' generators differ.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from pyepo_kit import pyepo_knapsack, pyepo_shortest_path
from testkit import FixedNoise

import combolayer as cl

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "from_pyepo.md"


def _pyepo_draws(batch: int, samples: int, dim: int) -> torch.Tensor:
    """PyEPO's Gaussian draws: its torch generator seeded with its default seed 135."""
    return torch.randn((batch, samples, dim), generator=torch.Generator().manual_seed(135),
                       dtype=torch.float64)


def _inputs(dim: int, batch: int = 3, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    cost = torch.rand(batch, dim, generator=gen, dtype=torch.float64)
    upstream = torch.randn(batch, dim, generator=gen, dtype=torch.float64)
    true_cost = torch.rand(batch, dim, generator=gen, dtype=torch.float64)
    return cost, upstream, true_cost


def _both(theirs, ours, cost, upstream=None):
    """Outputs and gradients of both on the same costs (``upstream``: dL/dy for a layer)."""
    a, b = cost.clone().requires_grad_(), cost.clone().requires_grad_()
    their_out, our_out = theirs(a), ours(b)
    if upstream is None:
        their_out.backward()
        our_out.backward()
    else:
        (their_out * upstream).sum().backward()
        (our_out * upstream).sum().backward()
    torch.testing.assert_close(our_out, their_out.detach())
    torch.testing.assert_close(b.grad, a.grad)


@pytest.fixture(params=["shortest_path", "knapsack"])
def problem(request):
    return pyepo_shortest_path() if request.param == "shortest_path" else pyepo_knapsack()


def test_spoplus_is_spoplusloss(problem):
    model, spec = problem
    from pyepo.func import SPOPlus

    cost, _, true_cost = _inputs(spec.cost_shape[0])
    y_true = cl.make_solver(spec).solve(true_cost)
    z_true = (true_cost * y_true).sum(-1, keepdim=True)
    theirs, ours = SPOPlus(model), cl.losses.SPOPlusLoss(spec)
    _both(lambda c: theirs(c, true_cost, y_true, z_true), lambda c: ours(c, true_cost, y_true),
          cost)


@pytest.mark.parametrize("lam", [10.0, 20.0])
def test_dbb_is_blackbox_with_reduction_sum_and_no_projection(problem, lam):
    model, spec = problem
    from pyepo.func import DBB

    cost, upstream, _ = _inputs(spec.cost_shape[0])
    theirs = DBB(model, lambd=lam)
    ours = cl.ComboLayer(spec, method=cl.Blackbox(lam=lam, reduction="sum"), projection="none")
    _both(theirs, ours, cost, upstream)


def test_dbb_with_combolayers_defaults_is_another_algorithm():
    # The naive port: lam 20 with the layer's default projection "auto".
    model, spec = pyepo_shortest_path()
    from pyepo.func import DBB

    cost, upstream, _ = _inputs(40, batch=8)
    a, b = cost.clone().requires_grad_(), cost.clone().requires_grad_()
    (DBB(model, lambd=20)(a) * upstream / 8).sum().backward()
    (cl.ComboLayer(spec, method=cl.Blackbox(lam=20.0))(b) * upstream / 8).sum().backward()
    assert not torch.allclose(a.grad, b.grad)


def test_nid_is_identity_without_projection(problem):
    model, spec = problem
    from pyepo.func import NID

    cost, upstream, _ = _inputs(spec.cost_shape[0])
    _both(NID(model), cl.ComboLayer(spec, method="identity", projection="none"), cost, upstream)


@pytest.mark.parametrize("variance_reduction", [True, False])
def test_dpo_is_perturbed_without_projection(variance_reduction):
    model, spec = pyepo_shortest_path()
    from pyepo.func import DPO

    batch, samples, sigma = 3, 4, 0.7
    cost, upstream, _ = _inputs(40, batch)
    draws = _pyepo_draws(batch, samples, 40)
    theirs = DPO(model, n_samples=samples, sigma=sigma, variance_reduction=variance_reduction)
    # PyEPO perturbs c + sigma xi, combolayer c - sigma Z: the same draws are Z = -xi
    ours = cl.ComboLayer(spec, projection="none", method=cl.Perturbed(
        sigma=sigma, num_samples=samples, variance_reduction=variance_reduction,
        noise=FixedNoise(-draws.transpose(0, 1).contiguous())))
    _both(theirs, ours, cost, upstream)


def test_pfy_is_fenchel_young_loss():
    model, spec = pyepo_shortest_path()
    from pyepo.func import PFY

    batch, samples, sigma = 3, 4, 0.5
    cost, _, true_cost = _inputs(40, batch)
    y_true = cl.make_solver(spec).solve(true_cost)
    draws = _pyepo_draws(batch, samples, 40)
    theirs = PFY(model, n_samples=samples, sigma=sigma)
    ours = cl.losses.FenchelYoungLoss(spec, sigma=sigma, num_samples=samples,
                                      noise=FixedNoise(-draws.transpose(0, 1).contiguous()))
    _both(lambda c: theirs(c, y_true), lambda c: ours(c, y_true), cost)


class _PyepoFixed:
    """A PyEPO ``distribution`` that returns the given draws."""

    def __init__(self, draws: torch.Tensor) -> None:
        self.draws = draws

    def sample(self, size, **kwargs):
        assert tuple(size) == tuple(self.draws.shape)
        return self.draws.clone()


def test_imle_is_imle_without_projection():
    model, spec = pyepo_shortest_path()
    from pyepo.func import IMLE

    batch, samples, lam = 3, 2, 10.0
    cost, upstream, _ = _inputs(40, batch)
    draws = torch.randn(batch, samples, 40, generator=torch.Generator().manual_seed(2),
                        dtype=torch.float64)
    theirs = IMLE(model, n_samples=samples, sigma=1.0, lambd=lam,
                  distribution=_PyepoFixed(draws))
    # PyEPO perturbs c + sigma noise, combolayer c - tau Z (tau 1): Z = -noise
    ours = cl.ComboLayer(spec, projection="none", method=cl.IMLE(
        lam=lam, num_samples=samples, noise=FixedNoise(-draws.transpose(0, 1).contiguous())))
    _both(theirs, ours, cost, upstream)


def test_optdataset_solutions_are_combolayers_and_seed_its_pools():
    model, spec = pyepo_shortest_path()
    from pyepo.data.dataset import optDataset

    gen = torch.Generator().manual_seed(4)
    costs = torch.rand(6, 40, generator=gen, dtype=torch.float64).numpy()
    dataset = optDataset(model, np.zeros((6, 2)), costs)
    ours = cl.make_solver(spec).solve(costs)
    np.testing.assert_allclose((costs * ours).sum(-1), np.asarray(dataset.objs).ravel(),
                               atol=1e-9)
    loss = cl.losses.NCELoss(spec, pool=dataset)
    assert len(loss.pool) == len({tuple(row) for row in np.asarray(dataset.sols)})


def test_pyepo_regret_is_normalized_regret():
    model, spec = pyepo_shortest_path()
    from pyepo.data.dataset import optDataset
    from pyepo.metric import regret

    gen = torch.Generator().manual_seed(6)
    features = torch.rand(20, 3, generator=gen).numpy()
    costs = torch.rand(20, 40, generator=gen).numpy()
    dataset = optDataset(model, features, costs)
    predictor = torch.nn.Linear(3, 40)
    loader = torch.utils.data.DataLoader(dataset, batch_size=7)
    theirs = regret(predictor, model, loader)
    with torch.no_grad():
        decisions = cl.make_solver(spec).solve(predictor(torch.from_numpy(features)))
    ours = cl.metrics.normalized_regret(spec, costs, decisions.numpy())
    assert float(ours) == pytest.approx(theirs, rel=1e-6)


# -- the page names a test for every "same algorithm" row ---------------------------------


#: The tests that run PyEPO against combolayer on identical inputs, for each "same
#: algorithm" row of the page, by the PyEPO name that opens the row.
CHECKED_BY = {
    "SPOPlus": [
        ("tests/test_from_pyepo_map.py",
         "test_spoplus_is_spoplusloss"),
    ],
    "blackboxOpt": [
        ("tests/test_from_pyepo_map.py",
         "test_dbb_is_blackbox_with_reduction_sum_and_no_projection"),
        ("tests/test_from_pyepo_map.py",
         "test_dbb_with_combolayers_defaults_is_another_algorithm"),
    ],
    "negativeIdentity": [
        ("tests/test_from_pyepo_map.py",
         "test_nid_is_identity_without_projection"),
    ],
    "perturbedOpt": [
        ("tests/test_from_pyepo_map.py",
         "test_dpo_is_perturbed_without_projection"),
    ],
    "perturbedOptMul": [
        ("tests/test_multiplicative.py",
         "test_dpomul_and_pfymul_agree_with_pyepo"),
    ],
    "perturbedFenchelYoung": [
        ("tests/test_from_pyepo_map.py",
         "test_pfy_is_fenchel_young_loss"),
    ],
    "perturbedFenchelYoungMul": [
        ("tests/test_multiplicative.py",
         "test_dpomul_and_pfymul_agree_with_pyepo"),
    ],
    "implicitMLE": [
        ("tests/test_from_pyepo_map.py",
         "test_imle_is_imle_without_projection"),
    ],
    "adaptiveImplicitMLE": [
        ("tests/test_aimle.py",
         "test_aimle_agrees_with_pyepo"),
    ],
    "perturbationGradient": [
        ("tests/test_pg.py",
         "test_pg_agrees_with_pyepo"),
    ],
    "noiseContrastiveEstimation": [
        ("tests/test_pool_losses.py",
         "test_pool_losses_agree_with_pyepo"),
    ],
    "contrastiveMAP": [
        ("tests/test_pool_losses.py",
         "test_pool_losses_agree_with_pyepo"),
    ],
    "pointwiseLTR": [
        ("tests/test_pool_losses.py",
         "test_pool_losses_agree_with_pyepo"),
    ],
    "pairwiseLTR": [
        ("tests/test_ltr_options.py",
         "test_defaults_are_pyepos_losses_on_identical_inputs"),
    ],
    "listwiseLTR": [
        ("tests/test_ltr_options.py",
         "test_defaults_are_pyepos_losses_on_identical_inputs"),
    ],
    "regularizedFrankWolfeOpt": [
        ("tests/test_frank_wolfe.py",
         "test_rfwo_and_rfy_agree_with_pyepo"),
    ],
    "regularizedFrankWolfeFenchelYoung": [
        ("tests/test_frank_wolfe.py",
         "test_rfwo_and_rfy_agree_with_pyepo"),
    ],
    "coneAlignedCosine": [
        ("tests/test_cave.py",
         "test_cave_agrees_with_pyepo"),
        ("tests/test_tsp_edges.py",
         "test_cave_on_the_edge_form_is_pyepos_and_the_matrix_form_needs_a_scale"),
    ],
    "optDataset": [
        ("tests/test_from_pyepo_map.py",
         "test_optdataset_solutions_are_combolayers_and_seed_its_pools"),
    ],
    "pyepo.metric.regret": [
        ("tests/test_from_pyepo_map.py",
         "test_pyepo_regret_is_normalized_regret"),
    ],
}


def _same_algorithm_names():
    return [re.match(r"\|\s*`([^`(]+)", line).group(1)
            for line in PAGE.read_text().splitlines()
            if line.startswith("|") and "same algorithm" in line]


def test_every_same_algorithm_row_is_checked_against_pyepo():
    names = _same_algorithm_names()
    assert len(names) >= 15, f"expected a row per PyEPO method, found {len(names)}"
    assert sorted(names) == sorted(CHECKED_BY), (
        f"the page's 'same algorithm' rows are {sorted(names)}, expected the rows a test "
        f"checks: {sorted(CHECKED_BY)}")
    for name, nodes in CHECKED_BY.items():
        for path, test in nodes:
            node = f"{path}::{test}"
            tree = ast.parse((ROOT / path).read_text())
            functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
            assert test in functions, f"{node} does not exist (the row for {name})"
            source = ast.get_source_segment((ROOT / path).read_text(), functions[test])
            assert "pyepo" in source.lower(), f"{node} does not run PyEPO (the row for {name})"


def test_the_page_is_in_the_nav():
    assert "from_pyepo.md" in (ROOT / "mkdocs.yml").read_text()
