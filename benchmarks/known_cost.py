"""Known cost overhead: a layer epoch with a known cost against the same epoch without.

The facility-location model of examples/facility_location.py (18 predicted assignment
costs, 3 opening decisions with known costs, capacities, at most 2 open), batch 32,
Identity, one backend for both (``--backend``, SCIP by default).

"with": the spec from cvxpy, 18 outputs and 3 auxiliaries with their known cost,
projection "auto" (the hull projection alone, as with any known cost).
"without": the workaround the feature replaces, the same MIP with all 21 variables as
outputs and no known cost, the opening costs appended to every predicted batch by
hand, projection "plane" (the same hull projection).

Both solve the same objective, so the difference is the known-cost machinery
(full-width costs, the auxiliaries sliced off). Rounds alternate the two layers; the
ratio is the median of the per-round ratios (goal <= 1.05).
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


def epoch_seconds(layer: cl.ComboLayer, model: torch.nn.Module, features: torch.Tensor,
                  costs: torch.Tensor, appended: torch.Tensor | None = None) -> float:
    """One epoch; ``appended`` (the workaround) is concatenated to every prediction."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    n = costs[0].numel()
    start = time.perf_counter()
    for i in range(0, len(features), BATCH):
        predicted = model(features[i : i + BATCH])
        if appended is None:
            y = layer(predicted.reshape(-1, *costs.shape[1:]))
        else:
            full = torch.cat([predicted, appended.expand(len(predicted), -1)], dim=1)
            y = layer(full)[:, :n].reshape(-1, *costs.shape[1:])
        loss = (costs[i : i + BATCH] * y).sum(dim=(1, 2)).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = page_parser(__doc__, PAGE)
    parser.add_argument("--backend", default="scip",
                        help="the backend both layers use (default: scip, the MIP default)")
    args = parser.parse_args(argv)
    instances, rounds = (64, 3) if args.quick else (256, 15)
    started = time.perf_counter()
    spec = model_spec()
    # the workaround: every variable an output, no known cost
    plain = cl.ILP(**{**spec.model_dump(), "shape": [spec.num_vars], "num_aux": 0,
                      "known_cost": None, "variables": None})
    known = torch.tensor(spec.known_cost[spec.num_outputs :], dtype=torch.float64)[None]
    features, costs = data(instances, torch.Generator().manual_seed(0))
    features = features.double()
    layers = {"with": cl.ComboLayer(spec, projection="auto", backend=args.backend),
              "without": cl.ComboLayer(plain, projection="plane", backend=args.backend)}
    appended = {"with": None, "without": known}
    models = {}
    for name in layers:
        torch.manual_seed(0)
        models[name] = torch.nn.Linear(4, costs[0].numel()).double()
        epoch_seconds(layers[name], models[name], features, costs, appended[name])  # warm-up
    times: dict[str, list[float]] = {name: [] for name in layers}
    for _ in range(rounds):
        for name in layers:
            times[name].append(epoch_seconds(layers[name], models[name], features, costs,
                                             appended[name]))
    ratios = [a / b for a, b in zip(times["with"], times["without"])]
    ratio = statistics.median(ratios)
    backend = layers["with"].solver.backend
    body = [generated_by("benchmarks/known_cost.py", time.perf_counter() - started), "",
            *table(["epoch (facility location, batch 32, Identity)", "backend", "with known cost",
                    "without (costs appended by hand)", "ratio (median of rounds)"],
                   [row([f"{instances} instances, {rounds} rounds", backend,
                         f"{statistics.median(times['with']) * 1e3:.1f} ms",
                         f"{statistics.median(times['without']) * 1e3:.1f} ms",
                         f"{ratio:.3f}"])])]
    print("\n".join(body))
    write_block(Path(args.out), "known-cost", "benchmarks/known_cost.py", body,
                "## Known cost overhead")


if __name__ == "__main__":
    main()
