"""Path 1: declare your own ILP (YAML, matrices or cvxpy) and train through it.

A selection problem: pick exactly 3 of 8 items, at most 2 from the first four.
"""

import numpy as np
import torch

import combolayer as cl

SPEC_YAML = """
kind: ilp
shape: [8]
sense: max
integrality: binary
constraints:
  - {coefs: [1, 1, 1, 1, 1, 1, 1, 1], sense: "==", rhs: 3, name: pick three}
  - {coefs: {0: 1, 1: 1, 2: 1, 3: 1}, sense: "<=", rhs: 2, name: at most two of the first four}
"""


def main(steps: int = 40) -> float:
    spec = cl.load_spec(SPEC_YAML)
    # The same problem from matrices:
    same = cl.ILP.from_matrices(
        shape=8, sense="max",
        A_eq=np.ones((1, 8)), b_eq=[3],
        A_ub=np.r_[np.ones(4), np.zeros(4)][None], b_ub=[2],
    )
    assert same.to_matrices()[0].toarray().tolist() == spec.to_matrices()[0].toarray().tolist()

    torch.manual_seed(0)
    features = torch.randn(128, 4)
    true_scores = features @ torch.randn(4, 8)
    targets = cl.make_solver(spec).solve(true_scores)
    model = torch.nn.Linear(4, 8)
    # No noise: under the Hamming loss (linear in y) Identity's gradient does not
    # depend on y, so noise could not act (docs/training.md, "Which loss").
    layer = cl.ComboLayer(spec, method="identity", projection="auto")
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(steps):
        loss = cl.losses.hamming(layer(model(features)), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    layer.eval()
    with torch.no_grad():
        accuracy = (layer(model(features)) == targets).all(dim=1).float().mean().item()
    print(f"exact-match accuracy after {steps} steps: {accuracy:.2f}")
    return accuracy


if __name__ == "__main__":
    main()
