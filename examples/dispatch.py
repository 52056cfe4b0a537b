"""Ride-hailing dispatch: predicted pick-up costs, each ride's fare a known cost.

8 drivers and 10 requests; each driver takes at most one request, each request goes
to at most one driver, and at most 6 rides are dispatched. A pair's pick-up cost is
predicted from the pair's features by one small MLP shared by every pair; the fare
of each request is known (it changes with every ride, so it is given per instance as
``known_cost``, a negative cost: serving a request earns it). The layer is built
with its defaults (Identity, projection "auto", which normalises the total cost
``w + known_cost``) and trained on the decisions' true cost (``--loss cost``) or on the
optimal decisions (``--loss decisions``, a Hamming loss); for comparison the same
model is trained through a layer given ``w + known_cost`` by hand, and with SPO+.

    python examples/dispatch.py --epochs 10 --seeds 0 1 2 --loss cost

Adam's step is ``--lr`` (0.05 by default, where SPO+ does best on this data);
``benchmarks/dispatch_lr.py`` measures each method's regret across steps
(docs/measurements/training.md): Identity needs larger steps than SPO+ to converge.
"""

import argparse

import numpy as np
import torch

import combolayer as cl

DRIVERS, REQUESTS, MAX_RIDES, FEATURES = 8, 10, 6, 5


def dispatch_spec() -> cl.problems.Matching:
    """y[d, r] = 1 when driver d picks up request r: a matching that covers neither
    side (each driver and each request at most once) with at most MAX_RIDES pairs."""
    return cl.problems.Matching(DRIVERS, REQUESTS, cover="none", max_pairs=MAX_RIDES)


def rides(num: int, rng: np.random.Generator) -> tuple[torch.Tensor, ...]:
    """Per-pair features ``(num, D, R, p)``, true pick-up costs ``(num, D, R)`` and each
    ride's known cost ``(num, D * R)``: minus its request's fare, on every driver's pair."""
    features = rng.normal(size=(num, DRIVERS, REQUESTS, FEATURES))
    weights = rng.normal(size=FEATURES)
    pickup = 1.0 + ((features @ weights) / np.sqrt(FEATURES) + 3.0) ** 2 / 3.5
    pickup *= rng.uniform(0.8, 1.2, size=pickup.shape)  # what the features do not tell
    fares = rng.uniform(2.0, 6.0, size=(num, 1, REQUESTS))
    known = -np.broadcast_to(fares, pickup.shape).reshape(num, -1)
    return (torch.tensor(features, dtype=torch.float32), torch.tensor(pickup),
            torch.tensor(known))


def pair_model() -> torch.nn.Module:
    """One MLP for every driver-request pair: (..., p) features to (...) costs."""
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 1), torch.nn.Flatten(-2))


def main(epochs: int = 5, seed: int = 0, loss: str = "cost", num_train: int = 200,
         num_test: int = 100, lr: float = 0.05) -> dict[str, float]:
    """Normalized test regrets: untrained ("before"), the default layer ("identity"), the
    default layer on ``w + known_cost`` added by hand ("by hand") and SPO+ ("spo+"),
    each after ``epochs`` epochs of Adam at step ``lr`` from the same initial model;
    every draw from ``seed``."""
    if loss not in ("cost", "decisions"):
        raise ValueError(f"loss must be 'cost' or 'decisions', got {loss!r}")
    rng = np.random.default_rng(seed)
    features, pickup, known = rides(num_train + num_test, rng)
    spec = dispatch_spec()
    layer = cl.ComboLayer(spec)  # the defaults: method "identity", projection "auto"
    test = slice(num_train, None)
    total = pickup + known.reshape(pickup.shape)  # a ride's true cost: pick-up minus fare
    best = layer.solver.solve(pickup, known_cost=known)  # the optimal decisions

    def layer_loss(y: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        if loss == "decisions":
            return ((y - best[batch]) ** 2).sum(dim=(1, 2)).mean()
        return (total[batch] * y).sum(dim=(1, 2)).mean()  # the decisions' true cost

    spo_plus = cl.losses.SPOPlusLoss(spec)
    steps = {
        "identity": lambda w, batch: layer_loss(layer(w, known_cost=known[batch]), batch),
        "by hand": lambda w, batch: layer_loss(layer(w + known[batch].reshape(w.shape)),
                                               batch),
        "spo+": lambda w, batch: spo_plus(w, pickup[batch], known_cost=known[batch]),
    }

    def regret(model: torch.nn.Module) -> float:
        with torch.no_grad():
            decisions = layer.solver.solve(model(features[test]).double(),
                                           known_cost=known[test])
        return float(cl.metrics.normalized_regret(layer.solver, pickup[test], decisions,
                                                  known_cost=known[test]))

    torch.manual_seed(seed)
    results = {"before": regret(pair_model())}
    for name, step in steps.items():
        torch.manual_seed(seed)
        model = pair_model()
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        order = torch.Generator().manual_seed(seed)
        for _ in range(epochs):
            for batch in torch.randperm(num_train, generator=order).split(20):
                value = step(model(features[batch]).double(), batch)
                optimizer.zero_grad()
                value.backward()
                optimizer.step()
        results[name] = regret(model)
    print(f"{spec.label}, seed {seed}, loss {loss!r}, {epochs} epochs, lr {lr}: normalized test "
          "regret " + ", ".join(f"{name} {value:.4f}" for name, value in results.items()))
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--loss", choices=["cost", "decisions"], default="cost")
    parser.add_argument("--lr", type=float, default=0.05, help="Adam's learning rate")
    args = parser.parse_args()
    runs = [main(args.epochs, seed, args.loss, lr=args.lr) for seed in args.seeds]
    print("mean over seeds: " + ", ".join(
        f"{name} {np.mean([run[name] for run in runs]):.4f}" for name in runs[0]))
