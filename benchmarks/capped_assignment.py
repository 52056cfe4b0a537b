"""A capped assignment (each row and column at most once, at most k pairs): the named
solver against HiGHS's MIP on the same ILP.

    python benchmarks/capped_assignment.py [--quick] [--out docs/measurements/solvers.md]

``Matching(20, 20, cover="none", max_pairs=k)`` for a few k, a batch of 256 standard
normal costs (about half negative, so that the cap binds). The named solver
(``backend="auto"``: scipy's ``linear_sum_assignment`` on the 40 x 40 padded square)
solves the batch three times after a warm-up call and the best is kept; HiGHS solves
``spec.to_ilp()`` (a plain ILP, so a MIP, not the LP that the named spec's
``lp_is_integral`` allows) once after a warm-up, and the LP the named spec compiles to
for comparison. The objectives are checked equal. The block goes between the
``capped-assignment`` markers in docs/measurements/solvers.md.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from _doc_blocks import generated_by, page_parser, table, write_block

import combolayer as cl
from combolayer.problems import Matching

PAGE = Path(__file__).resolve().parents[1] / "docs" / "measurements" / "solvers.md"


def per_instance(solver, costs: np.ndarray, repeats: int) -> tuple[float, np.ndarray]:
    """Best-of-``repeats`` seconds per instance for one batched ``solve``, and its solutions."""
    solver.solve(costs[:1])  # the warm-up: imports and first-call set-up are not counted
    best, y = float("inf"), None
    for _ in range(repeats):
        began = time.perf_counter()
        y = solver.solve(costs)
        best = min(best, time.perf_counter() - began)
    return best / len(costs), y


def main() -> None:
    parser = page_parser(__doc__, PAGE)
    args = parser.parse_args()
    started = time.perf_counter()
    size, batch, caps = (6, 8, (2,)) if args.quick else (20, 256, (5, 10, 15))
    rng = np.random.default_rng(0)
    lines = []
    for k in caps:
        spec = Matching(size, size, cover="none", max_pairs=k)
        costs = rng.normal(size=(batch, size, size))
        named = cl.make_solver(spec)
        named_s, y = per_instance(named, costs, repeats=3)
        mip_s, y_mip = per_instance(cl.make_solver(spec.to_ilp(), "highs"), costs, repeats=1)
        lp_s, y_lp = per_instance(cl.make_solver(spec, "highs"), costs, repeats=1)
        value = (costs * y).sum((1, 2))
        for name, other in (("HiGHS MIP", y_mip), ("HiGHS LP", y_lp)):
            if not np.allclose((costs * other).sum((1, 2)), value, atol=1e-6):
                raise SystemExit(f"{name} disagrees with {named.backend} at k={k}")
        lines.append(f"| {size} x {size}, k = {k} | {batch} | {named.backend} | "
                     f"{named_s * 1e3:.3g} | {mip_s * 1e3:.3g} | {named_s / mip_s:.3g} | "
                     f"{lp_s * 1e3:.3g} |")
        print(lines[-1], flush=True)
    body = [generated_by("benchmarks/capped_assignment.py", time.perf_counter() - started)
            + "; ms per instance; ratio = named / HiGHS MIP (the goal: 0.1 or less).", "",
            *table(["problem", "batch", "named solver", "named ms", "HiGHS MIP ms", "ratio",
                    "HiGHS LP ms"], lines)]
    write_block(Path(args.out), "capped-assignment", "benchmarks/capped_assignment.py", body,
                "## Capped assignment: the named solver against the MIP")


if __name__ == "__main__":
    main()
