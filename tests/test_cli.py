import contextlib
import io
import json
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import yaml

from combolayer.cli import main


def run(*args, check=True):
    """``combolayer ARGS`` in this process: its exit code, standard output and error.
    The process boundary (``python -m combolayer``, an exit code from the interpreter) is
    test_analyze_into_a_closed_pipe_stops_quietly's; starting an interpreter per command
    cost several seconds each. An exception ``main`` lets through fails the test."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse's --help and usage errors
            code = exit_.code
    result = SimpleNamespace(returncode=code or 0, stdout=out.getvalue(), stderr=err.getvalue())
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_solve_reads_npy_json_and_text(tmp_path):
    spec = tmp_path / "topk.yaml"
    spec.write_text("kind: topk\nn: 4\nk: 1\n")
    costs = np.array([[0.0, 3.0, 1.0, 2.0], [5.0, 0.0, 0.0, 0.0]])
    np.save(tmp_path / "c.npy", costs)
    (tmp_path / "c.json").write_text(json.dumps(costs.tolist()))
    (tmp_path / "c.csv").write_text("0,3,1,2\n5,0,0,0\n")
    for name in ("c.npy", "c.json", "c.csv"):
        out = run("solve", str(spec), "--costs", str(tmp_path / name)).stdout
        answer = json.loads(out.splitlines()[-1])
        assert answer == {"solution": [[0, 1, 0, 0], [1, 0, 0, 0]], "objective": [3.0, 5.0]}


def test_solve_reports_bad_costs_without_a_traceback(tmp_path):
    (tmp_path / "c.json").write_text("[1, 2]")
    result = run("solve", "{kind: tsp, num_nodes: 3}", "--costs", str(tmp_path / "c.json"),
                 check=False)
    assert result.returncode == 2
    assert ("--costs has shape (2,), but TSP(num_nodes=3) takes costs of shape (3, 3) per "
            "instance (or one flat row of 9 per instance)") in result.stderr
    assert "Traceback" not in result.stderr


def test_solve_never_recuts_costs_of_another_width_into_instances(tmp_path):
    """Rows of 8 for a problem of 4 outputs were read as twice as many instances."""
    (tmp_path / "c.txt").write_text("1 2 3 4 5 6 7 8\n9 10 11 12 13 14 15 16\n")
    result = run("solve", "{kind: topk, n: 4, k: 2}", "--costs", str(tmp_path / "c.txt"),
                 check=False)
    assert result.returncode == 2 and "--costs has shape (2, 8)" in result.stderr
    (tmp_path / "flat.json").write_text("[[1, 2, 3, 4], [4, 3, 2, 1]]")  # flat rows: taken
    out = json.loads(run("solve", "{kind: matching, rows: 2, cols: 2}", "--costs",
                         str(tmp_path / "flat.json")).stdout)
    assert out["objective"] == [5.0, 5.0]


def test_reproduce_refuses_options_a_library_benchmark_does_not_take():
    result = run("reproduce", "enumeration", "--quick", "--out", "elsewhere", check=False)
    assert result.returncode == 2
    assert ("enumeration is a library benchmark, run as it is (full length, writing its "
            "block into its docs page), without --quick, --out") in result.stderr


def test_train_from_config(tmp_path):
    config = {
        "data": {"name": "shortest_path", "num_features": 5, "grid": [3, 3], "deg": 2},
        "layer": {"method": "identity", "projection": "std"},
        "epochs": 2, "num_train": 64, "num_test": 64,
    }
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    assert "normalized test regret" in run("train", str(path)).stdout


def test_reproduce_unknown_experiment_lists_the_known_ones():
    result = run("reproduce", "nonsense", check=False)
    assert result.returncode == 2
    assert ("combolayer reproduce: InputError: unknown experiment 'nonsense': expected one "
            "of [") in result.stderr


def test_every_refusal_of_reproduce_and_bench_names_its_error_type():
    """index.md's one line, `combolayer COMMAND: ErrorType: message`, exit 2."""
    rows = "--rows counts the instances --race races on; it needs --race SPEC"
    for argv, message in ((("reproduce",), "name an experiment, or use --list / --report"),
                          (("bench", "--rows", "5"), rows),
                          (("bench", "--check", "--rows", "5"), rows)):
        result = run(*argv, check=False)
        assert result.returncode == 2
        assert result.stderr.strip() == f"combolayer {argv[0]}: InputError: {message}"


def test_analyze_names_the_users_own_constraints_and_full_lists_everything(tmp_path):
    spec = tmp_path / "jobs.yaml"
    spec.write_text(
        "kind: ilp\nshape: [2, 3]\nconstraints:\n"
        '  - {coefs: [1, 1, 1, 0, 0, 0], sense: "==", rhs: 1, name: "worker[0]"}\n'
        '  - {coefs: [0, 0, 0, 1, 1, 1], sense: "<=", rhs: 1, name: "worker[1]"}\n'
        '  - {coefs: [0, 0, 0, 1, 1, 1], sense: ">=", rhs: 1}\n'
        '  - {coefs: [1, 0, 0, 1, 0, 0], sense: "<=", rhs: 1, name: "jobs[0]"}\n')
    out = run("analyze", str(spec), "--full").stdout
    assert 'row "worker[0]" (== 1) is an equation' in out
    assert 'row "worker[1]" (<= 1) holds with equality' in out
    assert "constraints[2] (>= 1) holds with equality" in out
    assert "jobs[0]" not in out  # slack in some solution
    tour = '{"kind": "tsp", "num_nodes": 8}'  # 44 equations, more than the 20 shown
    assert "more (--full shows all)" in run("analyze", tour).stdout
    assert "more (--full shows all)" not in run("analyze", tour, "--full").stdout


def test_reproduce_help_names_the_experiments_and_set_passes_options(tmp_path):
    from combolayer.experiments import experiments

    text = run("reproduce", "--help").stdout
    assert all(name in text for name in experiments())
    out = tmp_path / "retrieval"
    run("reproduce", "retrieval", "--quick", "--set", "epochs=2", "--out", str(out))
    details = json.loads((out / "details.json").read_text())
    assert details["config"]["epochs"] == 2
    bad = run("reproduce", "retrieval", "--quick", "--set", "epochz=2", check=False)
    assert bad.returncode == 2 and "epochz" in bad.stderr


def test_reproduce_list_names_the_library_benchmarks_from_a_checkout():
    # The tests run from a source checkout, where benchmarks/ sits next to the package.
    text = run("reproduce", "--list").stdout
    assert "warcraft" in text and "library benchmark" in text and "training_overhead" in text


def test_bench_check_reads_the_committed_baseline():
    from combolayer.cli import perf

    assert perf.BASELINE.is_file(), perf.BASELINE


def test_perf_ratios_report_the_median_round_and_its_quartiles():
    import time

    from combolayer.cli import perf

    # sleeps of tens of milliseconds: a loaded machine's wake-up latency (a millisecond
    # or two) must not decide the ratio
    ratio = perf.Ratio.interleaved("sleep 40 ms / sleep 20 ms", "(test)",
                                   lambda: time.sleep(0.04), lambda: time.sleep(0.02), 7)
    low, high = ratio.quartiles
    assert low <= ratio.ratio <= high and 1.2 < ratio.ratio < 3.0
    assert f"{ratio.ratio:.2f} ({low:.2f}-{high:.2f})" in ratio.row()
    rows = perf.selection_ratios(batch=8, n=12, k=3, rounds=3)
    assert len(rows) == 4 and all(r.ratio > 0 and r.quartiles is not None for r in rows)


def test_solve_prints_a_model_files_objective_with_its_constant_term(tmp_path, capsys):
    (tmp_path / "k.lp").write_text("Maximize\n obj: 5 a + 4 b + 3 c + 2 d + 7\nSubject To\n"
                                   " c1: a + b + c + d <= 2\nBinary\n a b c d\nEnd\n")
    assert main(["solve", str(tmp_path / "k.lp")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"solution": [1.0, 1.0, 0.0, 0.0], "objective": 16.0}  # 5 + 4 + 7


def test_solve_prints_the_models_objective_with_its_known_cost(tmp_path, capsys):
    (tmp_path / "c.json").write_text("[[1, 2], [3, 0.5]]")
    # the auxiliary z <= y0 + y1 earns -5; a known 0.25 on output 0 too
    spec = ("{kind: ilp, shape: [2], num_aux: 1, known_cost: {0: 0.25, 2: -5}, "
            "constraints: [{coefs: [1, 1, -1], sense: '>=', rhs: 0}]}")
    assert main(["solve", spec, "--costs", str(tmp_path / "c.json")]) == 0
    answer = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert answer == {"solution": [[1, 0], [0, 1]], "objective": [1.25 - 5, 0.5 - 5]}


def test_reproduce_on_cuda_without_a_device_is_one_line(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code = main(["reproduce", "retrieval", "--quick", "--device", "cuda"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--device cuda: torch sees no CUDA device here" in err
    assert "expected --device cpu" in err


# -- analyze into a closed pipe ------------------------------------------------------------


def test_analyze_into_a_closed_pipe_stops_quietly():
    process = subprocess.Popen(
        [sys.executable, "-m", "combolayer", "analyze", "{kind: matching, rows: 60, cols: 60}",
         "--full"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader leaves before a line is written, as `| head` does
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141
    assert "BrokenPipe" not in stderr and "Traceback" not in stderr, stderr


def test_a_set_value_that_is_no_yaml_is_named():
    result = run("reproduce", "dvae", "--quick", "--set", "x={a: 1, a: 2}", check=False)
    assert result.returncode == 2
    assert result.stderr.startswith("combolayer reproduce: SpecError: could not parse --set's "
                                    "value from 'x={a: 1, a: 2}': the key 'a' appears twice")
