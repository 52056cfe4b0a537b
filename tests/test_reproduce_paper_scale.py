"""Every experiment's paper-scale code path (`--scale paper`: the paper's model
sizes, epochs and data sizes) runs on CPU, as a toy slice of it (`--quick`)."""

import json

import pytest

from combolayer import cli, experiments
from combolayer.experiments import core


@pytest.mark.parametrize("name", sorted(experiments.experiments()))
def test_the_paper_scale_runs_as_a_toy_slice(name, tmp_path):
    module = experiments.get(name)
    assert module.PAPER_SCALE, f"{name} states no paper scale"
    assert cli.main(["reproduce", name, "--scale", "paper", "--quick",
                     "--out", str(tmp_path)]) == 0
    config = json.loads((tmp_path / "details.json").read_text())["config"]
    slice_ = {**module.QUICK, **getattr(module, "PAPER_QUICK", {})}
    for key, value in module.PAPER_SCALE.items():  # the paper's sizes where no slice is taken
        if key not in slice_:
            assert config[key] == value, (key, config[key], value)
    result = core.Result.model_validate_json((tmp_path / "results.json").read_text())
    assert result.quick and result.rows and result.claims
