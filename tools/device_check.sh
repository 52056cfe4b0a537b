#!/usr/bin/env bash
# The device checks in one call, on a lent CUDA machine (docs/measurements/gpu.md).
#
# That machine has torch (CUDA), numpy, scipy, networkx, PyYAML, tqdm and pytest but not
# highspy, pydantic or pyscipopt: `make device-wheels` downloads those here into
# .device/wheels (git-ignored), which travels with the checkout (carry: [".device"]).
# This script installs them into .device/site, then runs the CUDA tests,
# benchmarks/gpu.py, whose tables land in docs/measurements/gpu.md, and the Warcraft
# step's profile (tools/profile_step.py); with OUT set (the device tool's folder that
# comes back) it copies that page, both logs and the profile there, also when a step
# failed or ran out of its time (TEST_SECONDS, BENCH_SECONDS, PROFILE_SECONDS: each
# step's limit, inside the device call's own; the benchmark writes its page table by
# table).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q --no-deps --target .device/site .device/wheels/*.whl
export PYTHONPATH="$PWD/.device/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
status=0
export PYTHONUNBUFFERED=1
timeout -k 15 "${TEST_SECONDS:-240}" python -m pytest -q -p no:cacheprovider --durations=8 \
    tests/test_cuda.py 2>&1 | tee .device/cuda_tests.log || status=$?
timeout -k 15 "${BENCH_SECONDS:-420}" python benchmarks/gpu.py "$@" 2>&1 | tee .device/gpu.log \
    || status=$?
timeout -k 15 "${PROFILE_SECONDS:-90}" python tools/profile_step.py > .device/profile.txt 2>&1 \
    || status=$?
if [ -n "${OUT:-}" ]; then
    cp docs/measurements/gpu.md .device/cuda_tests.log .device/gpu.log .device/profile.txt "$OUT"/
fi
exit $status
