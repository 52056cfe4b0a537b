"""``combolayer train`` on a researcher's data: features per cost entry with a model
shared by every entry, CSV input, known costs per instance from the data file, and the
loss it picks when a known cost is there."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from test_train_known_cost import DRIVERS, REQUESTS, dispatch_data, dispatch_ilp

import combolayer as cl
from combolayer.training.loop import (
    ConfigError,
    EntryModel,
    load_config,
    load_data,
    load_run,
    run,
)

DOCS = Path(__file__).resolve().parents[1] / "docs" / "training.md"


def _rides(num: int):
    """The dispatch model's data with a fare per ride: features (num, D, R, 3), pick-up
    costs (num, D, R), known costs (num, D * R) (minus each request's fare)."""
    features, pickup, fares = dispatch_data(num)
    rng = np.random.default_rng(1)
    fare = fares * rng.uniform(0.8, 1.2, size=(num, REQUESTS))
    known = -np.repeat(fare[:, None, :], DRIVERS, axis=1).reshape(num, -1)
    return features.numpy(), pickup.numpy(), known


def _write_csv(path: Path, features, costs, known) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["instance", "entry", "cost", "known_cost",
                         *(f"x{j}" for j in range(features.shape[-1]))])
        flat = features.reshape(len(costs), -1, features.shape[-1])
        # rows in reverse order: the file's order does not matter
        for i in reversed(range(len(costs))):
            for entry in reversed(range(flat.shape[1])):
                writer.writerow([i, entry, costs.reshape(len(costs), -1)[i, entry],
                                 known[i, entry], *flat[i, entry]])


def _doc_config(title: str) -> dict:
    """The YAML block under the heading ``title`` in docs/training.md."""
    text = DOCS.read_text()
    section = text[text.index(title):]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    return yaml.safe_load(block)


def test_the_documented_csv_config_runs_on_tiny_data(tmp_path):
    """docs/training.md's per-entry CSV config, as written, on 30 dispatch instances:
    the file's rows become (n, D, R, p) features, the known costs per instance are read,
    the loss defaults to spo+, and the run reloads."""
    config = _doc_config("## Your own data, per cost entry")
    features, costs, known = _rides(30)
    _write_csv(tmp_path / config["data"]["csv"], features, costs, known)
    (tmp_path / config["problem"]).write_text(dispatch_ilp().model_dump_json())
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({**config, "epochs": 2,
                                                          "num_train": 20, "num_test": 10}))
    loaded = load_config(tmp_path / "config.yaml")
    train, test = load_data(loaded)
    assert train.features.shape == (20, DRIVERS, REQUESTS, 3)
    assert torch.allclose(train.costs, torch.tensor(costs[:20], dtype=torch.float32))
    assert torch.equal(train.known_cost, torch.tensor(known[:20]))
    # the solutions were solved with each instance's own known cost
    solver = cl.make_solver(dispatch_ilp(), "highs")
    assert torch.equal(test.solutions.double(),
                       solver.solve(torch.tensor(costs[20:]), known_cost=known[20:]))
    history, folder = run(loaded)
    assert "spo+ loss" in history.name and len(history.regret) == 2
    model, _ = load_run(folder)
    assert isinstance(model, EntryModel)
    assert model(train.features).shape == (20, DRIVERS, REQUESTS)


def test_npz_with_per_entry_features_and_known_costs_trains_the_shared_model(tmp_path):
    features, costs, known = _rides(40)
    np.savez(tmp_path / "rides.npz", features=features, costs=costs, known_cost=known)
    (tmp_path / "dispatch.json").write_text(dispatch_ilp().model_dump_json())
    config = {"problem": str(tmp_path / "dispatch.json"),
              "data": {"npz": str(tmp_path / "rides.npz")},
              "model": {"hidden": [8], "per_entry": True}, "epochs": 4, "lr": 0.05,
              "batch_size": 8, "out": str(tmp_path / "run")}
    history, _ = run(load_config(config))
    untrained_then_trained = history.regret[0], history.regret[-1]
    assert history.name.endswith("spo+ loss")
    # the first epoch's regret is after one epoch; it must keep falling on this data
    assert untrained_then_trained[1] < untrained_then_trained[0]
    # flattened per-entry features without per_entry: one linear map per instance
    history, folder = run(load_config({**config, "model": {}, "epochs": 1}))
    model, _ = load_run(folder)
    assert model(torch.zeros(2, DRIVERS, REQUESTS, 3)).shape == (2, DRIVERS, REQUESTS)


def test_known_costs_per_instance_on_a_named_problem(tmp_path):
    """The dispatch model as the named capped matching, known costs (n, *cost_shape)."""
    features, costs, known = _rides(30)
    spec = cl.problems.Matching(DRIVERS, REQUESTS, cover="none", max_pairs=3)
    np.savez(tmp_path / "rides.npz", features=features, costs=costs,
             known_cost=known.reshape(costs.shape))
    (tmp_path / "dispatch.json").write_text(spec.model_dump_json())
    config = load_config({"problem": str(tmp_path / "dispatch.json"),
                          "data": {"npz": str(tmp_path / "rides.npz")},
                          "model": {"per_entry": True}, "epochs": 1,
                          "out": str(tmp_path / "run")})
    train, test = load_data(config)
    assert torch.equal(train.known_cost, torch.tensor(known[:24]))
    assert torch.equal(test.solutions.double(), dispatch_ilp_solutions(costs[24:], known[24:]))
    assert run(config)[0].name.endswith("spo+ loss")
    fenchel_young = config.model_copy(update={"loss": "fenchel_young"})
    assert run(fenchel_young)[0].name.endswith("fenchel_young loss")
    with pytest.raises(ConfigError, match="'cave' does not take a known cost per instance"):
        run(config.model_copy(update={"loss": "cave"}))


def dispatch_ilp_solutions(costs, known) -> torch.Tensor:
    """The capped matching's optima, from the dispatch ILP (at most 3 rides) by HiGHS."""
    return cl.make_solver(dispatch_ilp(), "highs").solve(torch.tensor(costs), known_cost=known)


def test_the_default_loss_with_a_known_cost_is_spo_plus_and_regret_with_identity_on_an_aux_known_cost_is_refused(tmp_path):  # noqa: E501
    spec = cl.ILP(shape=[3], num_aux=1, known_cost=[0.0, 0.0, 0.0, 2.0], upper=1,
                  constraints=[cl.Constraint(coefs=[1, 1, 1, -1], sense="<=", rhs=1)])
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", features=rng.normal(size=(20, 2)),
             costs=rng.normal(size=(20, 3)))
    base = {"problem": spec.model_dump(), "data": {"npz": str(tmp_path / "d.npz")},
            "epochs": 1, "out": str(tmp_path / "run")}
    history, _ = run(load_config(base))
    assert history.name.endswith("spo+ loss")
    with pytest.raises(ConfigError, match="weighs the auxiliaries.*use loss: spo\\+"):
        run(load_config({**base, "loss": "regret"}))


@pytest.mark.parametrize("content, message", [
    ("instance,entry,x0\n0,0,1\n", "no column 'cost'"),
    ("instance,entry,cost\n0,0,1\n", "no feature column"),
    ("instance,entry,cost,x0\n0,0,1,2\n", "instance 0 has entry 1 0 times"),
    ("instance,entry,cost,x0\n0,0,1,a\n", "not a number"),
])
def test_a_bad_csv_file_names_what_is_wrong(tmp_path, content, message):
    (tmp_path / "d.csv").write_text(content)
    config = {"problem": {"kind": "topk", "n": 2, "k": 1}, "data": {"csv": str(tmp_path / "d.csv")}}
    with pytest.raises(ConfigError, match=message):
        load_data(load_config(config))


def test_per_entry_needs_features_per_entry(tmp_path):
    np.savez(tmp_path / "d.npz", features=np.zeros((10, 2)), costs=np.zeros((10, 2)))
    config = {"problem": {"kind": "topk", "n": 2, "k": 1},
              "data": {"npz": str(tmp_path / "d.npz")}, "model": {"per_entry": True}}
    with pytest.raises(ConfigError, match="per_entry needs features per cost entry"):
        load_data(load_config(config))
