"""The 'combolayer' logger (silent by default) and what a layer's repr shows."""

import logging
import subprocess
import sys

import torch

import combolayer as cl


def test_logger_has_a_null_handler_by_default():
    handlers = logging.getLogger("combolayer").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)


def test_backend_and_solver_time_at_debug(caplog):
    spec = cl.problems.TopK(n=5, k=2)
    with caplog.at_level(logging.DEBUG, logger="combolayer"):
        layer = cl.ComboLayer(spec, backend="highs")
        layer(torch.randn(3, 5))
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("combolayer")]
    assert "ComboLayer(TopK(n=5, k=2)): backend 'highs' chosen" in messages
    assert any(m.startswith("TopK(n=5, k=2): batch of 3 solved on 'highs' in ") for m in messages)


def test_repr_shows_projection_noise_time_limit_and_workers():
    layer = cl.ComboLayer(cl.problems.TopK(n=5, k=2), projection="std", noise=0.5,
                          backend={"name": "highs", "time_limit": 2.0, "workers": 2,
                                   "executor": "thread"})
    text = repr(layer)
    for part in ("TopK(n=5, k=2)", "method=Identity()", "projection='std'", "noise=0.5",
                 "backend='highs'", "time_limit=2.0", "workers=2"):
        assert part in text, (part, text)


def test_cli_verbose_logs_to_stderr(tmp_path):
    (tmp_path / "c.json").write_text("[1, 3, 2]")
    result = subprocess.run([sys.executable, "-m", "combolayer", "-v", "solve",
                             "{kind: topk, n: 3, k: 1}", "--costs", str(tmp_path / "c.json")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == '{"solution": [0.0, 1.0, 0.0], "objective": 3.0}'
    assert "on backend" in result.stderr
    assert "combolayer.cli.commands: TopK(n=3, k=1): 1 instances solved on" in result.stderr
