"""Can combolayer's MIP backends solve PyEPO's capacitated VRP exactly? (docs/problems.md)

Writes PyEPO's compact formulation (``pyepo.model.grb.vrp.vrpMTZModel``: directed arcs,
one in and one out per customer, at most ``K`` vehicles, no single-customer round trip,
MTZ load propagation) as a ``cl.ILP`` whose outputs are the undirected edges
(``y_ij = x_ij + x_ji``), times SCIP and HiGHS on random Euclidean instances with a
time limit, and PyEPO's Gurobi branch-and-cut model (``vrpRCIModel``, lazy rounded
capacity cuts) on the same instance when pyepo and gurobipy are installed.

    python benchmarks/vrp_mtz.py 8 12 16 [--time-limit 120]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp

import combolayer as cl


def mtz_ilp(n: int, demands: np.ndarray, capacity: float, vehicles: int):
    """The MTZ CVRP as a cl.ILP: outputs are the edges ``(i, j), i < j``, in PyEPO's order."""
    edges = [(i, j) for i in range(n) for j in range(i + 1, n)]
    arcs = [(i, j) for i in range(n) for j in range(n) if i != j]
    num_edges, num_arcs = len(edges), len(arcs)
    arc = {a: num_edges + k for k, a in enumerate(arcs)}
    num_vars = num_edges + num_arcs + n

    def load(i):
        return num_edges + num_arcs + i

    def row(entries):
        r = np.zeros(num_vars)
        for k, v in entries.items():
            r[k] = v
        return r

    eq, b_eq, ub, b_ub = [], [], [], []
    for e, (i, j) in enumerate(edges):
        eq.append(row({e: 1, arc[(i, j)]: -1, arc[(j, i)]: -1}))
        b_eq.append(0)
    for i in range(1, n):
        eq.append(row({arc[(i, j)]: 1 for j in range(n) if j != i}))
        eq.append(row({arc[(j, i)]: 1 for j in range(n) if j != i}))
        b_eq += [1, 1]
    ub.append(row({arc[(0, j)]: 1 for j in range(1, n)}))
    ub.append(row({arc[(j, 0)]: 1 for j in range(1, n)}))
    b_ub += [vehicles, vehicles]
    for j in range(1, n):
        ub.append(row({arc[(0, j)]: 1, arc[(j, 0)]: 1}))
        b_ub.append(1)
    for i, j in arcs:
        if i and j:
            ub.append(row({load(i): 1, load(j): -1, arc[(i, j)]: capacity}))
            b_ub.append(capacity - demands[j - 1])
    spec = cl.ILP.from_matrices(
        shape=[num_edges], A_ub=sp.csr_matrix(np.array(ub)), b_ub=b_ub,
        A_eq=sp.csr_matrix(np.array(eq)), b_eq=b_eq,
        integrality=["binary"] * (num_edges + num_arcs) + ["continuous"] * n,
        lower=[0.0] * (num_edges + num_arcs) + [0.0] + [float(q) for q in demands],
        upper=[1.0] * (num_edges + num_arcs) + [float(capacity)] * n, num_aux=num_arcs + n)
    return spec, edges


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", type=int, nargs="*", default=[8, 12])
    parser.add_argument("--time-limit", type=float, default=120.0)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    for n in args.sizes:
        demands = rng.integers(1, 10, n - 1)
        capacity = 30
        vehicles = int(np.ceil(demands.sum() / capacity)) + 1
        spec, edges = mtz_ilp(n, demands, capacity, vehicles)
        points = rng.random((n, 2))
        costs = np.array([np.linalg.norm(points[i] - points[j]) for i, j in edges])
        for backend in ["scip", "highs"]:
            solver = cl.make_solver(spec, {"name": backend, "time_limit": args.time_limit})
            start = time.perf_counter()
            try:
                message = f"objective {costs @ solver.solve(costs):.4f}"
            except Exception as error:
                message = f"{type(error).__name__}: {str(error)[:80]}"
            print(f"n={n} {backend}: {time.perf_counter() - start:.2f} s, {message}", flush=True)
        try:
            from pyepo.model.grb.vrp import vrpRCIModel

            model = vrpRCIModel(n, demands.tolist(), capacity, vehicles)
            model.setObj(costs)
            start = time.perf_counter()
            _, objective = model.solve()
            print(f"n={n} PyEPO vrpRCIModel (Gurobi): {time.perf_counter() - start:.2f} s, "
                  f"objective {objective:.4f}", flush=True)
        except Exception as error:  # optional peer
            print(f"PyEPO skipped: {type(error).__name__}: {error}")


if __name__ == "__main__":
    main()
