"""The benchmarks with a --quick mode run end to end on a toy size: mip_training,
warm_start, identity_floor and gpu (rows whose package, backend or device is missing
are skipped with a message, never a crash)."""

import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def test_mip_training_quick_runs_end_to_end():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mip_training.py"),
                             "--quick", "--no-doc"], capture_output=True, text=True, env=env,
                            timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "| ours SPO+, open-source default, solve_ratio 0.1 |" in out
    assert "| ours Identity auto, regret loss, open-source default, solve_ratio 0.1 |" in out
    assert "knapsack, 2 dims, 20 items" in out
    # the gurobi rows either ran or said why they did not
    assert "ours SPO+, gurobi, solve_ratio 1 |" in out or "skipping ours with backend" in out


def test_gpu_benchmark_measures_on_a_device_or_says_there_is_none():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--quick",
                             "--no-doc"], capture_output=True, text=True, env=env, timeout=600,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    if torch.cuda.is_available():
        assert "| PyEPO grid 5 x 5, enumerated paths | 32 |" in result.stdout
        assert "The solution cache's lookup:" in result.stdout
    else:
        assert "no CUDA device on this machine: nothing to measure" in result.stdout


def test_warm_start_quick_writes_both_tables(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    page = tmp_path / "performance.md"
    page.write_text("# Performance\n")
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "warm_start.py"),
                             "--quick", "--out", str(page)], capture_output=True, text=True,
                            env=env, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    block = page.read_text()
    assert "<!-- warm-start:start" in block and "<!-- warm-start:end -->" in block
    for row in ("| 50 x 2 | scip |", "| 200 x 2 | highs |", "| SPO+ | scip |",
                "| Identity | scip |"):
        assert row in block


def test_identity_floor_quick_writes_its_table(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    page = tmp_path / "performance.md"
    page.write_text("# Performance\n")
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "identity_floor.py"),
                             "--quick", "--out", str(page)], capture_output=True, text=True,
                            env=env, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    block = page.read_text()
    assert "<!-- identity-floor:start" in block
    for loop in ("Identity at solve_ratio 0.1", "SPO+ at solve_ratio 1 (64 solves an epoch)"):
        assert f"| {loop}" in block
        assert "| scip, the default backend (fast mode) |" in block
    # gurobi either measured or named as skipped
    assert "| gurobi (one thread) |" in block or "gurobi (one thread): not measured" in (
        result.stdout)
