"""The command line under hostile input: every command
below ends with exit code 2 and one line on stderr, never a traceback, and the ones
that would build a huge model are refused before anything is allocated."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from combolayer.cli import main

SMALL_TRAIN = {"data": {"name": "shortest_path", "num_features": 5}, "num_train": 20,
               "num_test": 10, "epochs": 1}


def files(tmp_path):
    """The hostile inputs the commands below read, written to ``tmp_path``."""
    (tmp_path / "deep.yaml").write_text("a: " + "[" * 50_000 + "]" * 50_000 + "\n")
    (tmp_path / "deep.json").write_text("{\"a\": " + "[" * 50_000 + "]" * 50_000 + "}")
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00\x81" * 64)
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00\x81" * 64)
    np.savez(tmp_path / "two.npz", a=np.ones(4), b=np.ones(4))
    np.save(tmp_path / "wrong.npy", np.ones(7))
    (tmp_path / "nan.txt").write_text("1 nan 2 3\n")
    (tmp_path / "empty.json").write_text("[]")
    (tmp_path / "booleans.json").write_text("[true, false, true, false]")
    (tmp_path / "mixed.json").write_text("[1, true, 0, 2]")
    np.save(tmp_path / "booleans.npy", np.array([True, False, True, False]))
    (tmp_path / "two.json").write_text("[1, 2]")
    (tmp_path / "a_file").write_text("not a folder\n")
    for name, update in {
        "hidden_negative": {"model": {"hidden": [-1]}},
        "hidden_huge": {"model": {"hidden": [10**9]}},
        "hidden_bool": {"model": {"hidden": [True]}},
        "solve_ratio_nan": {"layer": {"solve_ratio": float("nan")}},
        "threads_huge": {"layer": {"backend": {"name": "highs", "threads": 10**6}}},
        "ranking_huge": {"problem": {"kind": "ranking", "n": 200_000},
                         "data": {"npz": "two.npz"}},
    }.items():
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({**SMALL_TRAIN, **update}))
    (tmp_path / "duplicate.yaml").write_text("data: {name: shortest_path, num_features: 5}\n"
                                             "epochs: 1\nepochs: 3\n")
    return tmp_path


TOPK = "{kind: topk, n: 4, k: 2}"

# (id, argv); "{tmp}" is the folder of `files`
HOSTILE = [
    # models far beyond memory, refused by their estimated size
    ("ranking 200000", ["analyze", "{kind: ranking, n: 200000}"], "40,000,200,000 variables"),
    ("tsp 3000", ["analyze", "{kind: tsp, num_nodes: 3000}"], "variables"),
    ("tsp 3000 solve", ["solve", "{kind: tsp, num_nodes: 3000}", "--costs", "{tmp}/nan.txt"],
     "variables"),
    ("matching 3000", ["analyze", "{kind: matching, rows: 3000, cols: 3000}"], "variables"),
    ("grid 3000", ["analyze", "{kind: grid_shortest_path, rows: 3000, cols: 3000}"],
     "variables"),
    ("topk 9e6", ["analyze", "{kind: topk, n: 9000000, k: 3}"], "variables"),
    ("ilp 1e9", ["analyze", "{kind: ilp, shape: [1000000000]}"], "variables"),
    ("deep yaml", ["analyze", "{tmp}/deep.yaml"], "nested"),
    ("deep json", ["analyze", "{tmp}/deep.json"], "nested"),
    ("deep yaml train", ["train", "{tmp}/deep.yaml"], "nested"),
    ("costs /dev/zero", ["solve", TOPK, "--costs", "/dev/zero"], "not a regular file"),
    ("costs missing", ["solve", TOPK, "--costs", "{tmp}/nothing.npy"], "no file"),
    ("demo epochs 0", ["demo", "--epochs", "0"], ">= 1, got 0"),
    ("demo epochs -1", ["demo", "--epochs", "-1"], ">= 1, got -1"),
    ("demo epochs x", ["demo", "--epochs", "x"], "got 'x'"),
    ("train hidden -1", ["train", "{tmp}/hidden_negative.yaml"], "model.hidden"),
    ("train hidden huge", ["train", "{tmp}/hidden_huge.yaml", "--out", "{tmp}/run"],
     "parameters, above the limit"),
    ("train ranking huge", ["train", "{tmp}/ranking_huge.yaml"], "variables"),
    ("train threads huge", ["train", "{tmp}/threads_huge.yaml"], "usable"),
    # cost files that are not one numeric array of the problem's shape, and bad options
    ("costs npz two arrays", ["solve", TOPK, "--costs", "{tmp}/two.npz"], "one named 'costs'"),
    ("costs binary csv", ["solve", TOPK, "--costs", "{tmp}/binary.csv"], "neither text"),
    ("costs wrong shape", ["solve", TOPK, "--costs", "{tmp}/wrong.npy"], "(4,)"),
    ("costs nan", ["solve", TOPK, "--costs", "{tmp}/nan.txt"], "NaN"),
    ("bench batch 0", ["bench", "--batch", "0"], ">= 1, got 0"),
    ("bench batch -5", ["bench", "--batch", "-5"], ">= 1, got -5"),
    ("train solve_ratio nan", ["train", "{tmp}/solve_ratio_nan.yaml"], "finite"),
    ("shape [true]", ["analyze", "{kind: ilp, shape: [true]}"], "boolean"),
    ("num_aux true", ["analyze", "{kind: ilp, shape: [2], num_aux: true}"], "boolean"),
    ("duplicate key", ["analyze", "{kind: topk, n: 4, k: 2, k: 3}"], "'k' appears twice"),
    ("duplicate key train", ["train", "{tmp}/duplicate.yaml"], "'epochs' appears twice"),
    ("hidden bool", ["train", "{tmp}/hidden_bool.yaml"], "model.hidden"),
    # and more of the same kind
    ("binary spec file", ["analyze", "{tmp}/binary.yaml"], "not a text file"),
    ("unknown kind", ["analyze", "{kind: pentagon}"], "pentagon"),
    ("spec not a mapping", ["analyze", "[1, 2]"], "mapping"),
    ("missing train config", ["train", "{tmp}/nothing.yaml"], "nothing.yaml"),
    ("threads huge", ["solve", TOPK, "--costs", "{tmp}/nan.txt", "--backend",
                      "{name: highs, threads: 1000000}"], "usable"),
    ("threads option huge", ["solve", TOPK, "--costs", "{tmp}/nan.txt", "--backend",
                             "{name: highs, options: {threads: 1000000}}"], "usable"),
    ("workers huge", ["solve", TOPK, "--costs", "{tmp}/nan.txt", "--backend",
                      "{name: highs, executor: process, workers: 1000000}"], "usable"),
    ("unknown backend", ["solve", TOPK, "--costs", "{tmp}/nan.txt", "--backend", "nosuch"],
     "nosuch"),
    ("unknown experiment", ["reproduce", "nosuch"], "nosuch"),
    ("unknown command", ["frobnicate"], "invalid choice"),
    # sizes a spec declares, bounded before anything is allocated
    ("shortest path 1e8 nodes", ["solve", "{kind: shortest_path, num_nodes: 100000000, "
                                 "edges: [[0, 1]], source: 0, target: 1}",
                                 "--costs", "{tmp}/two.json"], "100,000,002 matrix entries"),
    ("bench race ranking 20000", ["bench", "--race", "{kind: ranking, n: 20000}"],
     "400,020,000 variables"),
    # data a solver cannot take
    ("knapsack 1e308", ["solve", "{kind: knapsack, weights: [[1e308, 1]], capacities: [1]}",
                        "--costs", "{tmp}/two.json"], "below 1e+15, got 1e+308"),
    ("knapsack 1e308 analyze", ["analyze", "{kind: knapsack, weights: [[1e308, 1]], "
                                           "capacities: [1]}"], "below 1e+15, got 1e+308"),
    # refused where they were accepted
    ("costs []", ["solve", TOPK, "--costs", "{tmp}/empty.json"],
     "no numbers (shape (0,)): expected one or more instances' costs of shape (4,)"),
    ("costs booleans json", ["solve", TOPK, "--costs", "{tmp}/booleans.json"],
     "holds true: expected numbers only"),
    ("costs one boolean", ["solve", TOPK, "--costs", "{tmp}/mixed.json"], "holds true"),
    ("costs booleans npy", ["solve", TOPK, "--costs", "{tmp}/booleans.npy"],
     "dtype bool: expected real numbers"),
    ("bench rows 0", ["bench", "--race", TOPK, "--rows", "0"], ">= 1, got 0"),
    ("bench rows -3", ["bench", "--race", TOPK, "--rows", "-3"], ">= 1, got -3"),
    ("reproduce seeds 0", ["reproduce", "retrieval", "--quick", "--seeds", "0"], ">= 1, got 0"),
    ("reproduce out a file", ["reproduce", "retrieval", "--quick", "--out", "{tmp}/a_file"],
     "a_file' is a file: expected a folder"),
    ("reproduce epochs -1", ["reproduce", "retrieval", "--quick", "--set", "epochs=-1",
                             "--out", "{tmp}/r"], "epochs: Input should be greater than or equal "
                                                  "to 1, got -1"),
    ("reproduce seeds []", ["reproduce", "retrieval", "--quick", "--set", "seeds=[]",
                            "--out", "{tmp}/r"], "seeds: List should have at least 1 item"),
    ("reproduce unknown key", ["reproduce", "retrieval", "--quick", "--set", "epoch=3",
                               "--out", "{tmp}/r"], "unknown key 'epoch' (did you mean 'epochs'?)"),
    ("unknown spec key", ["analyze", "{kind: topk, n: 4, kk: 2}"], "(did you mean 'k'?)"),
]


def run_main(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's usage errors
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.err


def check_one_line(code, err, expected):
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("combolayer"), err
    if expected is not None:
        assert expected in lines[0], lines[0]


@pytest.mark.parametrize("name, argv, expected", HOSTILE, ids=[case[0] for case in HOSTILE])
def test_a_hostile_command_is_one_line_and_exit_code_2(name, argv, expected, tmp_path, capsys):
    folder = files(tmp_path)
    argv = [part.replace("{tmp}", str(folder)) for part in argv]
    start = time.perf_counter()
    code, err = run_main(argv, capsys)
    check_one_line(code, err, expected)
    # refused before anything is built: the size check needs no model (a bound on hangs
    # and huge allocations, with room for a loaded machine under coverage's tracing)
    assert time.perf_counter() - start < 90, name


def test_a_model_within_the_limit_still_runs(capsys):
    code, err = run_main(["analyze", "{kind: knapsack, weights: [[1, 2]], capacities: [2]}"],
                         capsys)
    assert code == 0, err


@pytest.mark.parametrize("error", [MemoryError(), RecursionError("maximum recursion depth"),
                                   RuntimeError("[enforce fail at alloc_cpu.cpp:117]\n data"),
                                   IndexError("list index out of range"), KeyError("x")])
def test_whatever_escapes_a_command_is_one_line_at_the_edge(error, monkeypatch, capsys):
    import combolayer.cli.commands as commands

    def fail(args):
        raise error

    monkeypatch.setattr(commands, "analyze", fail)
    code, err = run_main(["analyze", TOPK], capsys)
    check_one_line(code, err, type(error).__name__)
    if isinstance(error, MemoryError):
        assert "ran out of memory" in err


def test_a_refused_command_in_a_real_process_prints_no_traceback():
    result = subprocess.run(
        [sys.executable, "-m", "combolayer", "analyze", "{kind: ranking, n: 200000}"],
        capture_output=True, text=True, timeout=120)
    check_one_line(result.returncode, result.stderr, "variables")


def test_a_layer_config_file_is_held_to_the_text_size_limits(tmp_path):
    import combolayer as cl

    path = tmp_path / "layer.yaml"
    path.write_text("problem: {kind: ranking, n: 200000}\nmethod: identity\n")
    start = time.perf_counter()
    with pytest.raises(cl.SpecError, match="40,000,200,000 variables"):
        cl.ComboLayer.from_config(path)
    assert time.perf_counter() - start < 5
    path.write_text("problem: {kind: topk, n: 5, k: 2}\nmethod: identity\n")
    assert cl.ComboLayer.from_config(path).spec.num_outputs == 5


@pytest.mark.parametrize("text", ["a,b,c\n1,2,3\n", "1 2 3\n4 5\n", '{"costs": [1, 2, 3]}\n'])
def test_costs_a_reader_cannot_parse_name_the_flag_and_the_file(text, tmp_path, capsys):
    """numpy's and json's own words (a column 'a', "use `usecols`") named neither --costs
    nor the file, and gave advice the command line cannot follow."""
    spec = tmp_path / "topk.yaml"
    spec.write_text("kind: topk\nn: 3\nk: 1\n")
    costs = tmp_path / "costs.txt"
    costs.write_text(text)
    code, err = run_main(["solve", str(spec), "--costs", str(costs)], capsys)
    check_one_line(code, err, "--costs")
    assert "costs.txt" in err and "usecols" not in err


def test_a_warning_is_one_line_naming_the_command(monkeypatch, capsys):
    """A library warning printed as Python's file, line and source line, inside the
    progress bar; the command line gives it as one line, as it gives errors."""
    import importlib
    import warnings

    cli = importlib.import_module("combolayer.cli.main")

    def command(args):
        warnings.warn("noise=0.5 cannot act under this loss", UserWarning, stacklevel=1)
        return 0

    monkeypatch.setattr(cli.importlib, "import_module",
                        lambda name: type("M", (), {"solve": staticmethod(command)}))
    spec_free = ["solve", "x.yaml"]
    monkeypatch.setattr(cli, "_read_model_files", lambda args: None)
    code = main(spec_free)
    err = capsys.readouterr().err
    assert code == 0
    assert err.strip() == "combolayer solve: UserWarning: noise=0.5 cannot act under this loss"
