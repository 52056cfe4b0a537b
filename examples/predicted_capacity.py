"""Predict-then-optimise with predicted constraints: a knapsack's capacities from features.

A two-resource knapsack over 8 items: the item values and the weights are known,
the two capacities are not. They depend on features of the instance, and a
linear model predicts them; the layer takes them as per-call rows ``W y <= b``
(``layer(values, A=W, b=capacity)``), and each of the three methods that give a
gradient to ``b`` trains the model against the true solutions. On held-out
instances, solved exactly with the predicted capacities, we report the
exact-match accuracy and the regret under the true capacities; a decision that
breaks a true capacity has no regret to speak of, so it is counted apart.
"""

import warnings

import torch

import combolayer as cl

ITEMS, RESOURCES, FEATURES = 8, 2, 5


def make_data(num: int, generator: torch.Generator, weights: torch.Tensor,
              theta: torch.Tensor) -> dict[str, torch.Tensor]:
    features = torch.randn(num, FEATURES, generator=generator, dtype=torch.float64)
    values = torch.rand(num, ITEMS, generator=generator, dtype=torch.float64)
    # between 20% and 70% of each resource's total weight, as the features say
    capacity = weights.sum(1) * (0.2 + 0.5 * torch.sigmoid(features @ theta))
    return {"features": features, "values": values, "capacity": capacity}


def evaluate(layer, model, data, weights, solver) -> dict[str, float]:
    """Accuracy, and regret under the true capacities, with the decisions that break a
    true capacity counted apart (their regret is not averaged in)."""
    truth = solver.solve(data["values"], A=weights, b=data["capacity"])
    layer.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # predicted rows may empty nothing here
        decision = layer(data["values"], A=weights, b=capacity_of(model, data, weights))
    layer.train()
    feasible = (decision @ weights.T <= data["capacity"] + 1e-9).all(dim=1)
    regret = ((truth - decision) * data["values"]).sum(1)
    return {"accuracy": (decision == truth).all(dim=1).double().mean().item(),
            "regret": regret[feasible].mean().item() if feasible.any() else float("nan"),
            "infeasible": int((~feasible).sum())}


def capacity_of(model, data, weights):
    return weights.sum(1) * torch.sigmoid(model(data["features"]))


METHODS = {"comboptnet": {"name": "comboptnet"},
           "qptl": {"name": "qptl", "gamma": 0.1},
           "score_function": {"name": "score_function", "sigma": 0.1, "num_samples": 4,
                              "perturb": ["b"]}}


def main(epochs: int = 5, num_train: int = 64, num_test: int = 100) -> dict:
    generator = torch.Generator().manual_seed(0)
    weights = 0.2 + 0.8 * torch.rand(RESOURCES, ITEMS, generator=generator, dtype=torch.float64)
    theta = torch.randn(FEATURES, RESOURCES, generator=generator, dtype=torch.float64)
    train = make_data(num_train, generator, weights, theta)
    test = make_data(num_test, generator, weights, theta)
    spec = cl.ILP.from_matrices(shape=[ITEMS], sense="max")  # binary items; rows per call
    solver = cl.make_solver(spec)
    train["solution"] = solver.solve(train["values"], A=weights, b=train["capacity"])

    results = {}
    for name, method in METHODS.items():
        torch.manual_seed(1)  # every method starts from the same model
        model = torch.nn.Linear(FEATURES, RESOURCES).double()
        if "before" not in results:
            layer = cl.ComboLayer(spec, projection="none")
            results["before"] = evaluate(layer, model, test, weights, solver)
        layer = cl.ComboLayer(spec, method=method, projection="none", on_infeasible="flag",
                              generator=torch.Generator().manual_seed(2))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
        for _ in range(epochs):
            for batch in torch.randperm(num_train, generator=generator).split(16):
                capacity = capacity_of(model, {"features": train["features"][batch]}, weights)
                y = layer(train["values"][batch], A=weights, b=capacity)
                loss = (y - train["solution"][batch]).pow(2).sum(1).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        results[name] = evaluate(layer, model, test, weights, solver)

    print(f"{'':15} accuracy  regret (feasible)  infeasible of {num_test}")
    for name, found in results.items():
        print(f"{name:15} {found['accuracy']:8.2f}  {found['regret']:17.3f}  "
              f"{found['infeasible']:10d}")
    return results


if __name__ == "__main__":
    main()
