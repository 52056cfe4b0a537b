"""Bring your own model: an MPS or LP file becomes a differentiable layer in two lines.

Any file HiGHS reads works (``h.writeModel("model.mps")`` from your own HiGHS
model, or an export from another modelling tool). The file's objective is the
default cost; the layer takes costs of shape ``(*batch, num_vars)``.
"""

from pathlib import Path

import torch

import combolayer as cl

MODEL = Path(__file__).with_name("assignment.lp")


def main() -> float:
    spec = cl.ILP.from_file(MODEL)                       # 1: the file as a spec
    layer = cl.ComboLayer(spec, projection="auto")       # 2: the spec as a layer

    file_cost = torch.tensor(spec.default_cost)
    print(f"{MODEL.name}: {spec.num_vars} variables, {len(spec.constraints)} constraints "
          f"({', '.join(c.name for c in spec.constraints[:3])}, ...)")
    print("optimal assignment for the file's costs:\n", layer(file_cost).reshape(3, 3))
    print(cl.analyze(spec).dim, "= dimension of the affine hull of the assignments "
          "(9 variables, 5 independent row/column sums)")

    # Learn costs that make a target assignment optimal, through the layer.
    target = torch.eye(3).flatten()
    w = file_cost.clone().requires_grad_(True)
    optimizer = torch.optim.SGD([w], lr=0.5)
    for _ in range(20):
        loss = cl.losses.hamming(layer(w), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    y = layer(w)
    print("after 20 steps towards the identity assignment:\n", y.reshape(3, 3))
    return float((y == target).float().mean())


if __name__ == "__main__":
    main()
