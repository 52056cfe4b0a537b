"""Your whole model: a facility-location ILP with known opening costs, predicted
assignment costs, and the open facilities read back.

6 customers, 3 facilities with capacities and fixed (known) opening costs, at most 2
open. A linear model predicts the assignment costs from features; the fixed costs are
part of the model, not of the prediction. Trained with Identity and with SPO+, checked
against brute-force enumeration.
"""

import itertools

import cvxpy as cp
import numpy as np
import torch

import combolayer as cl

CUSTOMERS, FACILITIES = 6, 3
CAPACITY = np.array([3.0, 3.0, 4.0])
OPENING = np.array([4.0, 3.0, 5.0])  # known: the layer never predicts these


def model_spec() -> cl.ILP:
    """The cvxpy model as a user writes it; the objective's f @ z is a known cost."""
    c = cp.Parameter((CUSTOMERS, FACILITIES), name="c")
    x = cp.Variable((CUSTOMERS, FACILITIES), boolean=True, name="x")  # assignments
    z = cp.Variable(FACILITIES, boolean=True, name="z")  # open facilities
    problem = cp.Problem(cp.Minimize(cp.sum(cp.multiply(c, x)) + OPENING @ z),
                         [cp.sum(x, axis=1) == 1,
                          cp.sum(x, axis=0) <= cp.multiply(CAPACITY, z),
                          cp.sum(z) <= 2])
    return cl.ILP.from_cvxpy(problem, cost=c)


def brute_force(cost: np.ndarray) -> float:
    """The optimal objective by enumerating every opening and assignment."""
    best = np.inf
    for z in itertools.product([0, 1], repeat=FACILITIES):
        if sum(z) > 2:
            continue
        for assign in itertools.product(np.flatnonzero(z), repeat=CUSTOMERS):
            load = np.bincount(assign, minlength=FACILITIES)
            if (load <= CAPACITY * np.array(z)).all():
                best = min(best, cost[np.arange(CUSTOMERS), assign].sum() + OPENING @ z)
    return best


def data(num: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    features = torch.randn(num, 4, generator=generator)
    weights = torch.randn(4, CUSTOMERS * FACILITIES, generator=generator)
    costs = (features @ weights).reshape(num, CUSTOMERS, FACILITIES).exp() + 1.0
    return features, costs.double()


def main(epochs: int = 15) -> dict[str, float]:
    spec = model_spec()
    print(f"{spec.label}: {spec.num_outputs} predicted assignment costs, {spec.num_aux} "
          f"auxiliaries with known cost {spec.known_cost[spec.num_outputs:]}")
    generator = torch.Generator().manual_seed(0)
    features, costs = data(48, generator)
    solver = cl.make_solver(spec)

    # The optimum checked against brute force, the open facilities read back by name.
    y, aux = solver.solve(costs[:3], return_aux=True)
    for i in range(3):
        full = torch.cat([y[i].flatten(), aux[i]])
        value = float((costs[i] * y[i]).sum() + torch.tensor(OPENING) @ aux[i])
        assert abs(value - brute_force(costs[i].numpy())) < 1e-6
        print(f"instance {i}: open {spec.split(full)['z'].tolist()}, cost {value:.3f} "
              "(= brute force)")

    results = {}
    for name in ["identity", "spo+"]:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, CUSTOMERS * FACILITIES).double()
        layer = cl.ComboLayer(spec, method="identity", projection="auto")
        spo = cl.losses.SPOPlusLoss(layer)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.05)

        def regret(model=model, layer=layer) -> float:
            layer.eval()
            with torch.no_grad():
                y, aux = layer(model(features.double()).reshape(costs.shape), return_aux=True)
            layer.train()
            return float(cl.metrics.normalized_regret(layer, costs, y, aux_pred=aux))

        before = regret()
        for _ in range(epochs):
            predicted = model(features.double()).reshape(costs.shape)
            if name == "identity":
                # the decision's true cost; Identity's gradient reaches the prediction
                loss = (costs * layer(predicted)).sum(dim=(1, 2)).mean()
            else:
                loss = spo(predicted, costs)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        results["before"], results[name] = before, regret()
        print(f"{name}: normalized regret {before:.3f} -> {results[name]:.3f} "
              f"after {epochs} epochs")
    return results


if __name__ == "__main__":
    main()
