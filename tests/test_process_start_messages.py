"""The process executor speaks when things happen: a script without
`if __name__ == "__main__":` is told why its workers died while the caller still
solves, without a traceback per worker, and the workers' start is logged when it begins."""

import logging
import subprocess
import sys

import numpy as np
from testkit import unguarded_process_script

import combolayer as cl

UNGUARDED = unguarded_process_script() + """
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always", RuntimeWarning)
    start = time.monotonic()
    try:
        while not seen and time.monotonic() - start < 120:
            solver.solve(costs)  # the workers start, and die, in the background
    except cl.SolverError as error:
        print("RAISED")
print("WARNED:", seen[0].message if seen else None)
"""


def test_an_unguarded_script_is_told_at_once_and_without_a_traceback_per_worker(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(UNGUARDED)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    warned = [line for line in result.stdout.splitlines() if line.startswith("WARNED:")]
    assert len(warned) == 1, result.stdout  # the parent only: the workers stopped quietly
    assert "died while starting" in warned[0]
    assert 'must do so under `if __name__ == "__main__":`' in warned[0]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "bootstrapping phase" not in result.stderr


def test_the_start_is_logged_when_it_begins_and_again_when_ready(caplog):
    spec = cl.ILP.from_matrices(shape=[10], A_ub=np.ones((1, 10)), b_ub=[3], sense="max")
    solver = cl.make_solver(spec, {"name": "highs", "executor": "thread", "workers": 2})
    costs = np.random.default_rng(1).normal(size=(32, 10))
    kernel = solver.kernel
    with caplog.at_level(logging.INFO, logger="combolayer"):
        solver.solve(costs)  # the first call starts them
        starting = [r.getMessage() for r in caplog.records if "starting 2 thread" in
                    r.getMessage()]
        assert len(starting) == 1 and "in the background" in starting[0]
        assert kernel.ready(wait=60)
    ready = [r.getMessage() for r in caplog.records if "2 thread workers started" in
             r.getMessage()]
    assert len(ready) == 1
    kernel.close()
