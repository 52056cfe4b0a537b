"""Known cost overhead: a layer epoch with a known cost against the same epoch without.

The facility-location model of examples/facility_location.py (18 predicted assignment
costs, 3 opening decisions with known costs, capacities, at most 2 open), batch 32,
Identity, one backend for both (``--backend``, SCIP by default).

"with": the spec from cvxpy, 18 outputs and 3 auxiliaries with their known cost,
projection "auto" (the hull projection alone, as with any known cost).
"without": the workaround the feature replaces, the same MIP with all 21 variables as
outputs and no known cost, the opening costs appended to every predicted batch by
hand, projection "plane" (the same hull projection).

"per call": the spec without its known cost, the same known cost given per instance
(``layer(w, known_cost=k)``, a ``(32, 21)`` batch each call), projection "plane"
(what "auto" is with the spec's known cost on the auxiliaries).

All three solve the same objective, so the differences are the known-cost machinery
(full-width costs, the auxiliaries sliced off) and its per-call form. Rounds alternate
the layers; each ratio is the median of the per-round ratios (goal <= 1.05 for both
"with" / "without" and "per call" / "with").
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
from _doc_blocks import generated_by, page_parser, row, table, write_block

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from facility_location import data, model_spec  # noqa: E402

import combolayer as cl  # noqa: E402

PAGE = Path(__file__).resolve().parents[1] / "docs" / "measurements" / "training.md"
BATCH = 32


def epoch_seconds(solve, model: torch.nn.Module, features: torch.Tensor,
                  costs: torch.Tensor) -> float:
    """One epoch; ``solve(predicted)`` gives the outputs of a ``(B, 18)`` prediction."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    start = time.perf_counter()
    for i in range(0, len(features), BATCH):
        y = solve(model(features[i : i + BATCH])).reshape(-1, *costs.shape[1:])
        loss = (costs[i : i + BATCH] * y).sum(dim=(1, 2)).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return time.perf_counter() - start


def solvers(spec: cl.ILP, backend: str, shape: tuple[int, ...]) -> dict:
    """The three ways to solve the same objective, each ``predicted -> outputs``."""
    n = spec.num_outputs
    # the workaround: every variable an output, no known cost
    plain = cl.ILP(**{**spec.model_dump(), "shape": [spec.num_vars], "num_aux": 0,
                      "known_cost": None, "variables": None})
    bare = cl.ILP(**{**spec.model_dump(), "known_cost": None})
    known = torch.tensor(spec.known_cost, dtype=torch.float64)
    with_known = cl.ComboLayer(spec, projection="auto", backend=backend)
    without = cl.ComboLayer(plain, projection="plane", backend=backend)
    per_call = cl.ComboLayer(bare, projection="plane", backend=backend)
    return {
        "with": lambda w: with_known(w.reshape(-1, *shape)),
        "without": lambda w: without(torch.cat([w, known[n:].expand(len(w), -1)], 1))[:, :n],
        "per call": lambda w: per_call(w.reshape(-1, *shape),
                                       known_cost=known.expand(len(w), -1).clone()),
        "backend": with_known.solver.backend,
    }


def main(argv: list[str] | None = None) -> None:
    parser = page_parser(__doc__, PAGE)
    parser.add_argument("--backend", default="scip",
                        help="the backend both layers use (default: scip, the MIP default)")
    args = parser.parse_args(argv)
    instances, rounds = (64, 3) if args.quick else (256, 15)
    started = time.perf_counter()
    spec = model_spec()
    features, costs = data(instances, torch.Generator().manual_seed(0))
    features = features.double()
    layers = solvers(spec, args.backend, tuple(costs.shape[1:]))
    backend = layers.pop("backend")
    first = {name: solve(costs[:BATCH].reshape(BATCH, -1).double())
             for name, solve in layers.items()}
    for name, y in first.items():  # the same objective: the same solutions
        assert torch.equal(y.reshape(BATCH, -1), first["with"].reshape(BATCH, -1)), name
    models = {}
    for name, solve in layers.items():
        torch.manual_seed(0)
        models[name] = torch.nn.Linear(4, costs[0].numel()).double()
        epoch_seconds(solve, models[name], features, costs)  # warm-up
    times: dict[str, list[float]] = {name: [] for name in layers}
    for _ in range(rounds):
        for name, solve in layers.items():
            times[name].append(epoch_seconds(solve, models[name], features, costs))

    def ratio(a: str, b: str) -> str:
        return f"{statistics.median(x / y for x, y in zip(times[a], times[b])):.3f}"

    def ms(name: str) -> str:
        return f"{statistics.median(times[name]) * 1e3:.1f} ms"

    body = [generated_by("benchmarks/known_cost.py", time.perf_counter() - started), "",
            *table(["epoch (facility location, batch 32, Identity)", "backend", "with known cost",
                    "without (costs appended by hand)", "per call (known_cost=)",
                    "with / without (median of rounds)", "per call / with (median of rounds)"],
                   [row([f"{instances} instances, {rounds} rounds", backend, ms("with"),
                         ms("without"), ms("per call"), ratio("with", "without"),
                         ratio("per call", "with")])])]
    print("\n".join(body))
    write_block(Path(args.out), "known-cost", "benchmarks/known_cost.py", body,
                "## Known cost overhead")


if __name__ == "__main__":
    main()
