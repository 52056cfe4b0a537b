"""The contract's value checks on costs (NaN, inf, magnitude MAX_COST or more): on the
CPU read at the edge, as before; off the CPU never read back on their own, but checked
by `check_values` where the values are read anyway (the host copy a solve makes) or
queued on the device. A tensor on the "meta" device stands in for one off the CPU:
reading its values back is impossible, so any host read there is counted or fails."""

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import combolayer as cl
from combolayer.backends.solver import MAX_COST, check_costs, check_values
from combolayer.losses.base import check_finite_target

SPEC = cl.problems.TopK(n=4, k=2)


class HostReads(TorchDispatchMode):
    """Counts the reads of one value back to the host (``float()``, ``bool()``, ``.item()``
    of a tensor: ``aten._local_scalar_dense``), the reads that synchronise a device."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.count += 1
        return func(*args, **(kwargs or {}))


BAD = [float("nan"), float("inf"), 2 * MAX_COST]


@pytest.mark.parametrize("value", BAD, ids=["nan", "inf", "huge"])
def test_cpu_costs_are_checked_at_the_edge(value):
    w = torch.zeros(2, 4)
    w[1, 2] = value
    with HostReads() as reads, pytest.raises(ValueError, match="w must be"):
        check_costs(SPEC, w, "w")
    assert reads.count >= 1


@pytest.mark.parametrize("value", BAD, ids=["nan", "inf", "huge"])
def test_off_cpu_costs_are_not_read_back_by_the_check(value):
    w = torch.full((2, 4), value, device="meta")
    with HostReads() as reads:
        check_costs(SPEC, w, "w")
        check_values(SPEC, w, "w")
        check_finite_target(w, "y_true", "SPOPlusLoss")
    assert reads.count == 0
    with pytest.raises(ValueError, match=r"trailing shape \(5,\) but TopK"):
        check_costs(SPEC, torch.zeros(2, 5, device="meta"), "w")  # shapes still at the edge


@pytest.mark.parametrize("value", BAD, ids=["nan", "inf", "huge"])
def test_the_host_copy_check_says_what_the_edge_check_says(value):
    w = torch.zeros(2, 4, dtype=torch.float64)
    w[0, 1] = value
    with pytest.raises(ValueError) as at_edge:
        check_costs(SPEC, w)
    with pytest.raises(ValueError) as on_copy:
        check_values(SPEC, w.numpy())
    assert str(on_copy.value) == str(at_edge.value)
    check_values(SPEC, np.zeros((2, 4)))  # finite costs pass


@pytest.mark.parametrize("backend", ["auto", "highs"])
def test_integer_and_bool_torch_costs_are_solved_as_float64(backend):
    solver = cl.make_solver(cl.problems.TopK(n=4, k=2), backend)
    y = solver.solve(torch.tensor([1, 5, 3, 2]))
    assert y.dtype == torch.float64 and y.tolist() == [0.0, 1.0, 1.0, 0.0]
    assert solver.solve(torch.tensor([True, False, True, False])).tolist() == [1, 0, 1, 0]
    assert solver.solve(np.array([1, 5, 3, 2])).dtype == np.float64


@pytest.mark.parametrize("backend", ["auto", "highs"])
def test_float32_numpy_costs_get_float32_solutions_and_auxiliaries(backend):
    spec = cl.ILP(shape=[3], num_aux=1,
                  constraints=[cl.Constraint(coefs=[1, 1, 1, 1], sense="==", rhs=2)])
    solver = cl.make_solver(spec, backend)
    costs = np.array([[1.0, -2.0, 3.0]], dtype=np.float32)
    y, aux, status = solver.solve(costs, return_aux=True, return_status=True)
    assert (y.dtype, aux.dtype) == (np.float32, np.float32)
    assert y.tolist() == [[0.0, 1.0, 0.0]] and aux.tolist() == [[1.0]] and status == ("optimal",)
    assert solver.solve(costs[0]).dtype == np.float32


@pytest.mark.parametrize("dtype, n", [(torch.bfloat16, 300), (torch.float16, 3000),
                                      (np.float16, 3000)])
def test_a_half_precision_that_cannot_hold_the_ranks_is_refused(dtype, n):
    """Solutions come back in the costs' dtype: a Ranking(300)'s ranks in bfloat16 (exact
    integers up to 256) were 278 distinct values, not a permutation, with no error."""
    spec = cl.problems.Ranking(n=n)
    costs = torch.randn(2, n) if isinstance(dtype, torch.dtype) else np.random.randn(2, n)
    costs = costs.to(dtype) if isinstance(costs, torch.Tensor) else costs.astype(dtype)
    with pytest.raises(ValueError, match=r"cannot hold\s+exactly .*pass float32 costs"):
        cl.make_solver(spec).solve(costs)
    if isinstance(costs, torch.Tensor):
        with pytest.raises(ValueError, match="solutions of Ranking"):
            cl.ComboLayer(spec)(costs)
    fits = cl.problems.Ranking(n=256)  # the largest bfloat16 holds exactly
    y = cl.make_solver(fits).solve(torch.randn(2, 256).to(torch.bfloat16))
    assert sorted(y[0].tolist()) == list(range(1, 257))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_costs_are_projected_without_tying_them(dtype):
    """Projected in their own dtype, costs 1 apart near 1500 rounded to one value and the
    solver broke the tie the wrong way; a knapsack's answers were worse than optimal on
    14 of 2000 bfloat16 instances. The answer keeps the costs' dtype."""
    spec = cl.ILP(shape=[2], sense="max",
                  constraints=[cl.Constraint(coefs=[1, 1], sense="<=", rhs=1)])
    top = 1498.0 if dtype == torch.float16 else 254.0  # each dtype holds top - 1 exactly
    w = torch.tensor([top, top - 1], dtype=dtype)
    y = cl.ComboLayer(spec).eval()(w)
    assert y.tolist() == [1.0, 0.0] and y.dtype == dtype
    knapsack = cl.problems.Knapsack(weights=[[1, 2, 3, 1, 2, 3, 1, 2]], capacities=[6])
    w = (50 + 5 * torch.randn(2000, 8, generator=torch.Generator().manual_seed(0))).to(dtype)
    y = cl.ComboLayer(knapsack).eval()(w).double()
    best = cl.make_solver(knapsack).solve(w.double())
    torch.testing.assert_close((w.double() * y).sum(-1), (w.double() * best).sum(-1))


def test_half_precision_costs_of_outputs_bounded_by_rows_alone_are_solved():
    """An integer output without an upper bound of its own (rows bound it) counted as
    unbounded, and half-precision costs were refused; its answers fit."""
    spec = cl.ILP.from_matrices(shape=3, A_ub=np.ones((1, 3)), b_ub=[4], integrality="integer",
                                upper=[2, 2, np.inf], sense="max")
    for dtype in (torch.float16, torch.bfloat16):
        y = cl.ComboLayer(spec, projection="none")(torch.tensor([1.0, 2.0, 0.5], dtype=dtype))
        assert y.tolist() == [2.0, 2.0, 0.0] and y.dtype == dtype


def test_under_autocast_the_layer_works_in_the_costs_own_dtype():
    """autocast ran the projection's matmul in bfloat16: float32 costs of a matching got
    answers worse than optimal (62 of 2000) and came back in bfloat16."""
    spec = cl.problems.Matching(3, 3)
    w = 60 + 10 * torch.rand(2000, 3, 3, generator=torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = cl.ComboLayer(spec).eval()(w)
    assert y.dtype == torch.float32
    best = cl.make_solver(spec).solve(w.double())
    torch.testing.assert_close((w.double() * y).sum((1, 2)), (w.double() * best).sum((1, 2)))


def test_half_precision_solutions_that_the_dtype_cannot_hold_are_refused_after_the_solve():
    """An integer output (or auxiliary) that only rows bound reached 301, which bfloat16
    rounds to 300: the answer broke its row sum(y) >= 301, with no error."""
    rows = cl.ILP.from_matrices(shape=3, A_ub=-np.ones((1, 3)), b_ub=[-301],
                                integrality="integer", upper=np.inf)
    w = torch.tensor([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="cannot hold\\s+exactly"):
        cl.ComboLayer(rows, projection="none")(w.to(torch.bfloat16))
    with pytest.raises(ValueError, match="cannot hold\\s+exactly"):
        cl.make_solver(rows).solve(w.to(torch.bfloat16))
    assert cl.make_solver(rows).solve(w.to(torch.float16)).tolist() == [301, 0, 0]
    beyond_float16 = cl.ILP.from_matrices(shape=1, A_ub=[[-1.0]], b_ub=[-3001],
                                          integrality="integer", upper=np.inf)
    with pytest.raises(ValueError, match="cannot hold\\s+exactly"):
        cl.make_solver(beyond_float16).solve(np.ones(1, dtype=np.float16))
    aux = cl.ILP(shape=[2], num_aux=1, integrality=["binary", "binary", "integer"],
                 upper=[1, 1, 1000], known_cost=[0, 0, 1.0],
                 constraints=[cl.Constraint(coefs=[0, 0, 1], sense=">=", rhs=301)])
    with pytest.raises(ValueError, match="cannot hold\\s+exactly"):
        cl.ComboLayer(aux)(torch.tensor([[1.0, -1.0]], dtype=torch.bfloat16), return_aux=True)


def test_losses_take_half_precision_inputs_in_float32():
    """2 c_hat - c overflowed float16 (SPO+ was NaN), bfloat16 tied 2047 and 2048 (a zero
    gradient), and Fenchel-Young's noise was quantised (-0.85 for -0.76)."""
    spo = cl.losses.SPOPlusLoss(cl.problems.TopK(3, 1, sense="min"))
    c_hat = torch.tensor([[40000.0, 35000, 36000]], dtype=torch.float16, requires_grad=True)
    value = spo(c_hat, torch.tensor([[3.0, 1, 2]], dtype=torch.float16))
    value.backward()
    assert float(value) == 0.0 and value.dtype == torch.float32
    assert c_hat.grad.dtype == torch.float16 and not c_hat.grad.any()
    spo = cl.losses.SPOPlusLoss(cl.problems.TopK(2, 1, sense="min"))
    c_hat = torch.tensor([[1024.0, 1024]], dtype=torch.bfloat16, requires_grad=True)
    spo(c_hat, torch.tensor([[0.0, 1]], dtype=torch.bfloat16)).backward()
    assert c_hat.grad.tolist() == [[2.0, -2.0]]
    fy = cl.losses.FenchelYoungLoss(cl.problems.TopK(2, 1, sense="min"), num_samples=20000,
                                    generator=torch.Generator().manual_seed(0))
    c = torch.tensor([[150.0, 151]], dtype=torch.bfloat16, requires_grad=True)
    fy(c, torch.tensor([[0.0, 1]], dtype=torch.bfloat16)).backward()
    assert abs(float(c.grad[0, 0]) + 0.760) < 0.02  # -Phi(1 / sqrt(2))


def test_half_precision_refuses_only_integers_it_cannot_hold():
    """The check refused an estimator's average (1/3 of three perturbed solutions) and
    continuous values, which round in any dtype, and a bound of 5000 on a solution of 1."""
    simplex = cl.ILP(shape=[3], integrality="integer", upper=None,
                     constraints=[cl.Constraint(coefs=[1, 1, 1], sense="==", rhs=1)])
    layer = cl.ComboLayer(simplex, method=cl.Perturbed(sigma=1.0, num_samples=3))
    torch.manual_seed(0)
    y = layer(torch.tensor([[0.1, 0.0, 0.05]], dtype=torch.float16))
    assert y.dtype == torch.float16 and float(y.sum()) == pytest.approx(1.0, abs=1e-3)
    continuous = cl.ILP(shape=[2], integrality="continuous", upper=None,
                        constraints=[cl.Constraint(coefs=[3, 3], sense=">=", rhs=1)])
    with pytest.warns(cl.NoIntegerWarning):
        y = cl.make_solver(continuous).solve(torch.tensor([1.0, 2.0], dtype=torch.float16))
    assert y.tolist() == pytest.approx([1 / 3, 0.0], abs=1e-3)
    loose = simplex.model_copy(update={"upper": 5000.0})
    y = cl.ComboLayer(loose)(torch.tensor([[0.3, 0.1, 0.2]], dtype=torch.float16))
    assert y.tolist() == [[0.0, 1.0, 0.0]]


def test_every_input_error_is_a_combolayer_error_and_the_builtin_error():
    # API.md: every error subclasses cl.ComboLayerError; these were plain ValueError and
    # TypeError, which `except cl.ComboLayerError` missed
    spec = cl.problems.TopK(n=4, k=2)
    solver = cl.make_solver(spec)
    cases = [(lambda: solver.solve(np.array([1.0, np.nan, 3.0, 2.0])), ValueError),
             (lambda: solver.solve(np.ones(3)), ValueError),
             (lambda: solver.solve(np.ones(4), known_cost=np.ones(3)), ValueError),
             (lambda: cl.ComboLayer(spec, method="nope"), ValueError),
             (lambda: cl.ComboLayer(spec)(torch.ones(4, dtype=torch.long)), TypeError)]
    for call, builtin in cases:
        with pytest.raises(cl.ComboLayerError) as info:
            call()
        assert isinstance(info.value, builtin), info.value


def test_combolayer_takes_its_arguments_in_the_contracts_order():
    # API.md: ComboLayer(spec, method, projection, noise, backend, solve_ratio); a sixth
    # positional argument went to generator, and solve_ratio stayed 1.0
    layer = cl.ComboLayer(cl.problems.TopK(n=4, k=2), "identity", "auto", 0.0, "auto", 0.5)
    assert layer.solve_ratio == 0.5 and layer.generator is None
    with pytest.raises(TypeError):
        cl.ComboLayer(cl.problems.TopK(n=4, k=2), "identity", "auto", 0.0, "auto", 0.5, None)


def test_an_expanded_tensor_s_values_are_checked_on_its_stored_entries(monkeypatch):
    """A stride-0 batch of 10^12 rows holds 10 numbers: the check reduces those (it ran
    for hours over the 10^13 entries it stands for)."""
    norm = torch.linalg.vector_norm

    def stored_only(x, *args, **kwargs):
        assert x.numel() == 10, f"a reduction over {x.numel()} entries"
        return norm(x, *args, **kwargs)

    monkeypatch.setattr(torch.linalg, "vector_norm", stored_only)
    spec = cl.problems.TopK(n=10, k=2)
    check_values(spec, torch.zeros(1, 10).expand(10**12, 10))
    with pytest.raises(ValueError, match="finite"):
        check_values(spec, torch.tensor([[1.0] * 9 + [float("nan")]]).expand(10**12, 10))


def test_numpy_costs_that_are_not_numbers_are_refused_by_dtype():
    solver = cl.make_solver(cl.problems.TopK(n=4, k=2))
    with pytest.raises(ValueError, match=r"must be real numbers, got dtype <U1"):
        solver.solve(np.array(["1", "5", "3", "2"]))
    with pytest.raises(ValueError, match=r"must be real numbers, got dtype object"):
        solver.solve(np.array([1, "5", None, 2], dtype=object))
    assert solver.solve(np.array([1, 5, 3, 2], dtype=object)).tolist() == [0, 1, 1, 0]
    for bad in (np.nan, np.inf):  # Python's max skipped the NaN: it was solved
        with pytest.raises(ValueError, match="must be finite"):
            solver.solve(np.array([bad, 5, 3, 2], dtype=object))
