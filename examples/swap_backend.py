"""Path 2: the same layer on every backend, chosen by one config field."""

import torch
import yaml

import combolayer as cl

CONFIG = """
problem: {kind: matching, rows: 6, cols: 6}
method: identity
projection: auto
backend: {name: highs}
"""


def main() -> dict[str, float]:
    config = yaml.safe_load(CONFIG)
    w = torch.randn(16, 6, 6)
    results = {}
    for name in cl.backends.capable_backends(cl.load_spec(config["problem"])):
        layer = cl.ComboLayer.from_config({**config, "backend": {"name": name}})
        y = layer(w)
        results[name] = float((w * y).sum())
        print(f"{name:>10}: total assignment cost {results[name]:.4f}")
    assert max(results.values()) - min(results.values()) < 1e-4, "backends disagree"
    return results


if __name__ == "__main__":
    main()
