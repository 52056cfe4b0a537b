"""Ride-hailing dispatch: predicted pick-up costs, each ride's fare a known cost.

8 drivers and 10 requests; each driver takes at most one request, each request goes
to at most one driver, and at most 6 rides are dispatched. A pair's pick-up cost is
predicted from the pair's features by one small MLP shared by every pair; the fare
of each request is known (it changes with every ride, so it is given per instance as
``known_cost``, a negative cost: serving a request earns it). The layer is built
with its defaults (Identity, projection "auto", which normalises the total cost
``w + known_cost``) and trained on the decision's true cost.
"""

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


def main(epochs: int = 5, num_train: int = 200, num_test: int = 100) -> dict[str, float]:
    rng = np.random.default_rng(0)
    features, pickup, known = rides(num_train + num_test, rng)
    spec = dispatch_spec()
    layer = cl.ComboLayer(spec)  # the defaults: method "identity", projection "auto"
    test = slice(num_train, None)
    torch.manual_seed(0)
    model = pair_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def regret() -> float:
        with torch.no_grad():
            decisions = layer.solver.solve(model(features[test]).double(),
                                           known_cost=known[test])
        return float(cl.metrics.normalized_regret(layer.solver, pickup[test], decisions,
                                                  known_cost=known[test]))

    results = {"before": regret()}
    print(f"{spec.label}: {DRIVERS} drivers, {REQUESTS} requests, at most {MAX_RIDES} rides, "
          f"solved by {layer.solver.backend!r}; normalized test regret before training "
          f"{results['before']:.3f}")
    total = pickup + known.reshape(pickup.shape)  # a ride's true cost: pick-up minus fare
    order = torch.Generator().manual_seed(0)
    for epoch in range(1, epochs + 1):
        for batch in torch.randperm(num_train, generator=order).split(20):
            y = layer(model(features[batch]).double(), known_cost=known[batch])
            loss = (total[batch] * y).sum(dim=(1, 2)).mean()  # the decisions' true cost
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        results["identity"] = regret()
        print(f"epoch {epoch}: normalized test regret {results['identity']:.3f}")
    return results


if __name__ == "__main__":
    main()
