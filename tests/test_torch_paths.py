"""The batched Bellman-Ford kernels (`combolayer.backends.torch_paths`) against the host
solvers, and where ``"auto"`` sends costs by their device (`combolayer.backends.device`).

Every instance's objective equals scipy's Dijkstra (or its DAG kernel), and the
solution is a path from the source to the target; on CPU tensors here, the same
code that runs on CUDA (tests/test_cuda.py checks the device itself)."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch

import combolayer as cl
from combolayer.backends import registry
from combolayer.backends.torch_paths import CHECK_EVERY, GraphPaths, GridPaths
from combolayer.problems import ShortestPath
from combolayer.problems.shortest_path import _MOVES

#: (rows, cols) covering every size 2..30 in a sample, square and not, and one-row grids.
GRID_SHAPES = [(2, 2), (3, 3), (4, 5), (5, 5), (6, 4), (7, 7), (8, 9), (10, 10), (12, 12),
               (13, 11), (15, 15), (18, 18), (20, 17), (24, 24), (27, 26), (30, 30), (1, 6),
               (2, 1)]
GRID_BATCH = 64


def objective(costs, y):
    return (costs * y).reshape(len(costs), -1).sum(1)


def random_cell(rng, rows, cols):
    return int(rng.integers(rows)), int(rng.integers(cols))


def grid_specs(rng, neighborhood):
    """One spec per shape, with a random source and target."""
    specs = []
    for rows, cols in GRID_SHAPES:
        source = random_cell(rng, rows, cols)
        target = source
        while target == source:
            target = random_cell(rng, rows, cols)
        specs.append(ShortestPath.grid(rows, cols, neighborhood=neighborhood, source=source,
                                       target=target))
    return specs


def assert_grid_path(spec, y):
    """Each row of ``y`` holds a chain of moves from the source to the target: the
    target is reached by growing the source's set one move at a time inside ``y``."""
    on = y.reshape(len(y), spec.rows, spec.cols) > 0.5
    assert on[:, spec.source[0], spec.source[1]].all()
    assert on[:, spec.target[0], spec.target[1]].all()
    reach = torch.zeros_like(on)
    reach[:, spec.source[0], spec.source[1]] = True
    for _ in range(spec.rows * spec.cols):
        padded = torch.nn.functional.pad(reach, (1, 1, 1, 1))
        grown = reach.clone()
        for dr, dc in _MOVES[spec.neighborhood]:
            grown |= padded[:, 1 + dr:1 + dr + spec.rows, 1 + dc:1 + dc + spec.cols]
        grown &= on
        if torch.equal(grown, reach):
            break
        reach = grown
    missed = ~reach[:, spec.target[0], spec.target[1]]
    assert not missed.any(), f"instances {missed.nonzero().ravel().tolist()}: no path"


def assert_edge_path(spec, y):
    """Each row's edges form one path from the source to the target (degrees and reach)."""
    tails, heads = spec.arrays
    for b, chosen in enumerate(y.numpy() > 0.5):
        t, h = tails[chosen], heads[chosen]
        degree = np.bincount(t, minlength=spec.num_nodes) + np.bincount(h, minlength=spec.num_nodes)
        ends = [v for v in range(spec.num_nodes) if degree[v] == 1]
        assert sorted(ends) == sorted([spec.source, spec.target]), b
        assert set(degree[degree > 0]) <= {1, 2}, b
        if spec.directed:
            out = np.bincount(t, minlength=spec.num_nodes)
            assert out[spec.source] == 1 and out[spec.target] == 0, b
        near = {}
        for u, v in zip(t.tolist(), h.tolist(), strict=True):
            near.setdefault(u, []).append(v)
            if not spec.directed:
                near.setdefault(v, []).append(u)
        seen, frontier = {spec.source}, [spec.source]
        while frontier:
            for v in near.get(frontier.pop(), []):
                if v not in seen:
                    seen.add(v)
                    frontier.append(v)
        assert spec.target in seen and len(seen) == int((degree > 0).sum()), b


def agrees_with_scipy(spec, costs):
    """The kernel's solutions: objective equal to scipy's on every instance."""
    y = cl.make_solver(spec, "bellman_ford").solve(costs)
    host = cl.make_solver(spec, "scipy").solve(costs)
    assert y.dtype == costs.dtype and y.shape == costs.shape
    assert set(torch.unique(y).tolist()) <= {0.0, 1.0}
    torch.testing.assert_close(objective(costs.double(), y.double()),
                               objective(costs.double(), host.double()), rtol=1e-12, atol=1e-12)
    return y


# -- grids with vertex costs ---------------------------------------------------------


@pytest.mark.parametrize("neighborhood", [4, 8])
def test_grid_kernel_matches_dijkstra_on_every_size(neighborhood):
    rng = np.random.default_rng(neighborhood)
    count = 0
    for spec in grid_specs(rng, neighborhood):
        costs = torch.from_numpy(rng.random((GRID_BATCH, spec.rows, spec.cols)) + 0.01)
        y = agrees_with_scipy(spec, costs)
        assert_grid_path(spec, y)
        count += len(costs)
    assert count >= 1000  # >= 2000 over both neighbourhoods


@pytest.mark.parametrize("neighborhood", [4, 8])
def test_grid_kernel_on_float32_costs_and_ties(neighborhood):
    rng = np.random.default_rng(10 + neighborhood)
    for spec in grid_specs(rng, neighborhood)[::3]:
        # few distinct values (many tied paths), zeros among them, in float32
        costs = torch.from_numpy(rng.integers(0, 3, (32, spec.rows, spec.cols))).float()
        y = agrees_with_scipy(spec, costs)
        assert_grid_path(spec, y)


def test_grid_kernel_takes_the_same_path_as_dijkstra_without_ties():
    spec = ShortestPath.grid(12, 12, neighborhood=8)
    costs = torch.rand(200, 12, 12, dtype=torch.float64)
    torch.testing.assert_close(cl.make_solver(spec, "bellman_ford").solve(costs),
                               cl.make_solver(spec, "scipy").solve(costs), rtol=0, atol=0)


@pytest.mark.parametrize("reads_free", [True, False], ids=["cpu", "as-a-device"])
def test_grid_kernel_converges_on_a_path_longer_than_one_chunk(reads_free, monkeypatch):
    from combolayer.backends import torch_paths

    monkeypatch.setattr(torch_paths, "READS_FREE", frozenset({"cpu"} if reads_free else ()))
    # a serpentine of cheap cells: the only cheap path visits 55 of the 100 cells, more
    # than a device's first step of 40 relaxations (2.5 times the side, and a chunk of 8)
    spec = ShortestPath.grid(10, 10, neighborhood=4)
    costs = torch.full((1, 10, 10), 100.0, dtype=torch.float64)
    costs[0, ::2, :] = 1.0
    costs[0, 1::4, 9] = 1.0
    costs[0, 3::4, 0] = 1.0
    y = agrees_with_scipy(spec, costs)
    assert int(y.sum()) == 55 > 5 * CHECK_EVERY


@pytest.fixture
def chunks(monkeypatch):
    """The CPU acting as a device (`READS_FREE` empty), and a list that gets an entry for
    every chunk a kernel runs: one host read each."""
    from combolayer.backends import torch_paths

    monkeypatch.setattr(torch_paths, "READS_FREE", frozenset())
    counted = []
    chunk = torch_paths._State.chunk
    monkeypatch.setattr(torch_paths._State, "chunk",
                        lambda state: counted.append(1) or chunk(state))
    return counted


@pytest.mark.parametrize("side", [5, 12, 30])
def test_a_grid_call_reads_the_host_once_for_typical_costs(side, chunks):
    # the first step relaxes about 2.5 times the side before its first read: uniform costs
    # and the Warcraft-like spread (a few costly cells) settle within it; the old kernel
    # read once per 8 relaxations (4-9 reads per call on these grids), as the CPU still
    # does, where a read is free and relaxations are not
    spec = ShortestPath.grid(side, side, neighborhood=8)
    kernel = GridPaths(spec)
    generator = torch.Generator().manual_seed(side)
    for costs in (torch.rand(70, side * side, generator=generator) + 0.1,
                  torch.rand(70, side * side, generator=generator).pow(4) * 10 + 0.05):
        chunks.clear()
        y = kernel(costs.double())
        assert len(chunks) == 1  # the start's chunk: one read of the flags
        agrees_with_scipy(spec, costs.double().reshape(70, side, side))
        assert y.shape == costs.shape


# -- graphs with edge costs ----------------------------------------------------------


@pytest.mark.parametrize("side", [5, 12, 16])
def test_a_graph_call_on_a_device_reads_the_host_once(side, chunks):
    # on PyEPO's grids every path has as many arcs, so the distances settle at the
    # source's depth (2 side - 2 arcs), which the first step covers; it read once per 8
    spec = cl.data.shortest_path_spec((side, side))
    kernel = GraphPaths(spec)
    assert kernel.depth == 2 * side - 2
    costs = torch.rand(70, *spec.cost_shape, dtype=torch.float64,
                       generator=torch.Generator().manual_seed(side)) + 0.1
    y = kernel(costs)
    assert len(chunks) == 1
    host = cl.make_solver(spec, "scipy").solve(costs)
    torch.testing.assert_close(objective(costs, y), objective(costs, host), rtol=1e-12,
                               atol=1e-12)


def random_graph(rng, n, m, kind):
    """A random graph on ``n`` nodes with about ``m`` edges and a path 0 -> n-1:
    ``kind`` is "dag" (edges along a random order), "cyclic" or "undirected"."""
    order = rng.permutation(n)
    order = np.concatenate([[0], order[(order != 0) & (order != n - 1)], [n - 1]])
    edges = {(int(order[i]), int(order[i + 1])) for i in range(n - 1)}  # the guaranteed path
    if kind == "cyclic":
        edges.add((n - 1, 0))  # a back edge, so the graph has a cycle
    while len(edges) < m:
        u, v = (int(x) for x in rng.choice(n, 2, replace=False))
        if kind == "dag":
            position = np.argsort(order)
            u, v = sorted((u, v), key=lambda x: position[x])
        key = (u, v) if kind != "undirected" else (min(u, v), max(u, v))
        if key not in edges and (kind != "undirected" or (key[1], key[0]) not in edges):
            edges.add(key)
    edges = sorted(edges)
    spec = ShortestPath(num_nodes=n, edges=edges, source=0, target=n - 1,
                        directed=kind != "undirected")
    assert (spec._checked() is None) == (kind == "dag")
    return spec


@pytest.mark.parametrize("kind", ["dag", "cyclic", "undirected"])
def test_graph_kernel_matches_the_host_solver(kind):
    rng = np.random.default_rng(["dag", "cyclic", "undirected"].index(kind))
    count = 0
    for n in (2, 3, 5, 8, 12, 20, 30, 40):
        for _ in range(3):
            m = int(rng.integers(n - 1, min(n * (n - 1) // 2, 4 * n) + 1))
            spec = random_graph(rng, n, m, kind)
            costs = torch.from_numpy(rng.random((40, len(spec.edges))) + 0.01)
            y = agrees_with_scipy(spec, costs)
            assert_edge_path(spec, y)
            count += len(costs)
    assert count >= 900  # >= 2000 over the three kinds, with PyEPO's grid below


def test_graph_kernel_on_pyepos_grid_with_any_costs():
    spec = cl.data.shortest_path_spec((5, 5))
    costs = torch.rand(600, 40, dtype=torch.float64) + 0.01
    assert_edge_path(spec, agrees_with_scipy(spec, costs))
    # acyclic: negative costs are taken as they are, as by the host's DAG kernel
    agrees_with_scipy(spec, torch.randn(200, 40, dtype=torch.float64))


def test_graph_kernel_without_a_path_raises_infeasible():
    spec = ShortestPath(num_nodes=4, edges=[(0, 1), (1, 0), (2, 3)], source=0, target=3)
    with pytest.raises(cl.InfeasibleError, match="no path from node 0 to node 3"):
        cl.make_solver(spec, "bellman_ford").solve(torch.ones(2, 3))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e16], ids=["nan", "inf", "huge"])
@pytest.mark.parametrize("kernel", [GridPaths(ShortestPath.grid(5, 5)),
                                    GraphPaths(cl.data.shortest_path_spec((3, 3)))],
                         ids=["grid", "graph"])
def test_kernels_raise_the_contracts_error_on_invalid_costs(kernel, bad):
    """The kernels check values themselves, with their convergence check's first host
    read (on an accelerator the Solver queues no check of its own for them)."""
    costs = torch.rand(3, kernel.spec.num_outputs, dtype=torch.float64) + 0.1
    costs[1, 2] = bad
    with pytest.raises(ValueError, match="costs must be finite and below 1e\\+15 in magnitude"):
        kernel(costs)
    costs[1, 2] = 0.5
    assert kernel(costs).shape == costs.shape  # the same kernel solves valid costs after


# -- negative costs, determinism, copies ----------------------------------------------


@pytest.mark.parametrize("spec", [ShortestPath.grid(4, 4), cl.problems.ShortestPath(
    num_nodes=3, edges=[(0, 1), (1, 2), (2, 0), (0, 2)], source=0, target=2)],
    ids=["grid", "cyclic graph"])
def test_negative_costs_raise_or_clip_as_the_host_solvers(spec):
    costs = torch.rand(3, *spec.cost_shape, dtype=torch.float64) + 0.1
    costs.view(3, -1)[1, 1] = -0.5
    with pytest.raises(ValueError, match="negative costs .*instance 1.* negative_costs='clip'"):
        cl.make_solver(spec, "bellman_ford").solve(costs)
    clipped = spec.model_copy(update={"negative_costs": "clip"})
    y = cl.make_solver(clipped, "bellman_ford").solve(costs)
    torch.testing.assert_close(y, cl.make_solver(clipped, "scipy").solve(costs), rtol=0, atol=0)


def test_grid_source_and_target_costs_never_count():
    spec = ShortestPath.grid(4, 4)
    costs = torch.rand(1, 4, 4, dtype=torch.float64)
    costs[0, 0, 0] = costs[0, 3, 3] = -3.0  # allowed under negative_costs="error"
    y = cl.make_solver(spec, "bellman_ford").solve(costs)
    torch.testing.assert_close(y, cl.make_solver(spec, "scipy").solve(costs), rtol=0, atol=0)


@pytest.mark.parametrize("spec", [ShortestPath.grid(9, 7, neighborhood=8),
                                  cl.data.shortest_path_spec((5, 5))], ids=["grid", "graph"])
def test_ties_are_broken_the_same_way_every_run_and_in_any_batch(spec):
    costs = torch.randint(1, 3, (20, *spec.cost_shape)).double()  # many tied paths
    solver = cl.make_solver(spec, "bellman_ford")
    first = solver.solve(costs)
    torch.testing.assert_close(solver.solve(costs), first, rtol=0, atol=0)
    torch.testing.assert_close(cl.make_solver(spec, "bellman_ford").solve(costs[3:4]),
                               first[3:4], rtol=0, atol=0)


@pytest.mark.parametrize("kernel", [GridPaths(ShortestPath.grid(6, 6)),
                                    GraphPaths(cl.data.shortest_path_spec((3, 3)))],
                         ids=["grid", "graph"])
def test_kernels_survive_pickle_and_deepcopy(kernel):
    costs = torch.rand(5, kernel.spec.rows * kernel.spec.cols if isinstance(kernel, GridPaths)
                       else len(kernel.spec.edges), dtype=torch.float64)
    expected = kernel(costs)
    for copied in (pickle.loads(pickle.dumps(kernel)), copy.deepcopy(kernel)):
        torch.testing.assert_close(copied(costs), expected, rtol=0, atol=0)


# -- "auto" by device ----------------------------------------------------------------


def test_auto_keeps_dijkstra_for_cpu_costs_and_routes_accelerator_costs_to_the_kernel(caplog):
    spec = ShortestPath.grid(6, 6, neighborhood=8)
    solver = cl.make_solver(spec)
    assert solver.backend == "scipy"  # faster on CPU tensors (benchmarks/gpu.py)
    assert solver.device_route.backend == "bellman_ford"
    assert "costs on an accelerator: bellman_ford" in solver.backend_reason
    # the ranking sees the device: scipy (numpy kernels) first on the CPU, behind on CUDA
    scipy, bellman_ford = (registry.backends()[name] for name in ("scipy", "bellman_ford"))
    assert registry.preference(scipy, spec) < registry.preference(bellman_ford, spec)
    assert (registry.preference(bellman_ford, spec, "cuda")
            < registry.preference(scipy, spec, "cuda"))
    costs = torch.rand(4, 6, 6)
    solver.solve(costs)
    assert solver.device_route._solver is None  # built on the first accelerator call only
    with caplog.at_level("INFO", logger="combolayer"):
        routed = solver.device_route.solver(solver)
    assert routed.backend == "bellman_ford"
    assert "costs on an accelerator are solved there by 'bellman_ford'" in caplog.text
    torch.testing.assert_close(routed.solve(costs), solver.solve(costs), rtol=0, atol=0)


def test_auto_routes_nothing_where_the_cpu_choice_already_runs_on_the_device():
    # PyEPO's grid: scipy's enumerated-path kernel takes tensors on any device
    assert cl.make_solver(cl.data.shortest_path_spec((5, 5))).device_route is None
    # matching: no kernel on the device
    assert cl.make_solver(cl.problems.Matching(rows=3, cols=3)).device_route is None
    # a backend named by the caller is used as named
    assert cl.make_solver(ShortestPath.grid(4, 4), "scipy").device_route is None


def test_a_large_acyclic_graph_routes_to_the_kernel():
    # too many paths to enumerate: the host's DAG kernel takes numpy arrays
    spec = cl.data.shortest_path_spec((12, 12))
    solver = cl.make_solver(spec)
    assert solver.backend == "scipy" and solver.device_route.backend == "bellman_ford"


# -- the layer -----------------------------------------------------------------------


def test_layer_forward_and_backward_on_the_kernel():
    spec = ShortestPath.grid(12, 12, neighborhood=8)
    layer = cl.ComboLayer(spec, backend="bellman_ford")
    host = cl.ComboLayer(spec, backend="scipy")
    w = (torch.rand(8, 12, 12) + 0.1).requires_grad_()
    y = layer(w)
    torch.testing.assert_close(y, host(w), rtol=0, atol=0)
    grad = torch.randn_like(y)
    y.backward(grad)
    expected = torch.autograd.grad(host(w), w, grad)[0]
    torch.testing.assert_close(w.grad, expected)
    assert w.grad.abs().sum() > 0


@pytest.mark.parametrize("spec", [
    lambda mode: cl.problems.ShortestPath.grid(5, 5, negative_costs=mode),
    lambda mode: cl.problems.ShortestPath(num_nodes=4, edges=[(0, 1), (1, 2), (2, 0), (2, 3)],
                                          source=0, target=3, negative_costs=mode),
], ids=["grid", "graph"])
def test_the_negative_cost_rule_adds_no_host_read_of_its_own(spec):
    """On a graph with cycles the kernel reads whether a cost is negative with its
    convergence check's first read (one synchronisation on a device, not two), and the
    Solver leaves the rule to it: "error" reads as often as "clip", which reads nothing."""
    from test_cost_checks import HostReads

    reads = {}
    for mode in ("error", "clip"):
        solver = cl.make_solver(spec(mode), "bellman_ford")
        costs = torch.rand(3, *solver.cost_shape, generator=torch.Generator().manual_seed(0))
        solver.solve_batch(costs.reshape(3, -1))  # its buffers, built once
        with HostReads() as counted:
            solver.solve_batch(costs.reshape(3, -1))
        reads[mode] = counted.count
    assert reads["error"] == reads["clip"]
    negative = -torch.ones(1, solver.num_outputs)
    with pytest.raises(ValueError, match="negative costs"):
        cl.make_solver(spec("error"), "bellman_ford").solve_batch(negative)


def test_a_kernel_first_called_under_inference_mode_still_trains():
    # its buffers were built as inference tensors, which no later call may update in place
    layer = cl.ComboLayer(ShortestPath.grid(5, 5), backend="bellman_ford")
    w = torch.rand(2, 5, 5, requires_grad=True)
    with torch.inference_mode():
        first = layer(w)
    y = layer(w)
    y.sum().backward()
    assert torch.equal(y.detach(), first) and w.grad is not None
