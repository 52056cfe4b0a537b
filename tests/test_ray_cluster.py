"""The Ray executor on a two-node cluster: actors spread over both nodes, a node lost
mid-epoch, and nothing lost (the call completes on the remaining node with a warning).

The fixture starts the cluster with ``ray start`` (loopback only, one CPU per node) in
subprocesses that it owns, and tears down only the processes it started, by their ids.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

import combolayer as cl

ROOT = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).with_name("ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (from /proc: no psutil needed)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def name_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Node:
    """One ``ray start --block`` subprocess and the processes it starts."""

    def __init__(self, args: list[str], env: dict) -> None:
        self.process = subprocess.Popen([str(RAY), "start", "--block", "--num-cpus=1",
                                         "--node-ip-address=127.0.0.1", *args],
                                        env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)

    def pids(self) -> list[int]:
        return [self.process.pid, *descendants(self.process.pid)]

    def stop(self) -> None:
        """Kill this node's processes, the raylet first (as a crashed machine would)."""
        pids = self.pids()
        kill([p for p in pids if name_of(p) == "raylet"])
        kill(pids)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def driver_auth_mode() -> str:
    """``"token"`` when this process's Ray client authenticates with a token."""
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled
    except ImportError:  # a Ray from before token auth
        return "disabled"
    return "token" if is_token_auth_enabled() else "disabled"


@pytest.fixture
def two_node_cluster(monkeypatch):
    ray = pytest.importorskip("ray", reason="the ray executor needs the optional ray package")
    if not RAY.exists():
        pytest.skip("the ray command line is not installed beside this Python")
    temp = tempfile.mkdtemp(prefix="rt")  # short: Ray's socket paths have a length limit
    # The nodes must use the token auth this driver uses, or the actors it asks for are
    # never scheduled. A driver reads its mode once; a local ray.init() earlier in the
    # session turns it on (and writes ~/.ray/auth_token, which the nodes then read).
    monkeypatch.setenv("RAY_AUTH_MODE", driver_auth_mode())
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAY_USAGE_STATS_ENABLED="0",
               # notice a lost node within seconds, not Ray's default 30 s, yet not
               # take a raylet that a busy 2-core machine answers late for a lost one
               RAY_health_check_period_ms="1000", RAY_health_check_timeout_ms="2000",
               RAY_health_check_failure_threshold="5", RAY_health_check_initial_delay_ms="0")
    env.pop("RAY_ADDRESS", None)
    port = free_port()
    address = f"127.0.0.1:{port}"
    nodes = [Node(["--head", f"--port={port}", "--include-dashboard=false",
                   f"--temp-dir={temp}"], env)]
    try:
        deadline = time.monotonic() + 60
        while True:  # the head takes a few seconds to open its port
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or nodes[0].process.poll() is not None:
                    pytest.fail("the Ray head did not come up")
                time.sleep(0.5)
        nodes.append(Node([f"--address={address}"], env))
        ray.init(address=address, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
        deadline = time.monotonic() + 60
        while ray.cluster_resources().get("CPU", 0) < 2:
            if time.monotonic() > deadline:
                pytest.fail("the second Ray node did not join")
            time.sleep(0.5)
        yield ray, nodes
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for node in reversed(nodes):
            node.stop()
        shutil.rmtree(temp, ignore_errors=True)


def knapsack(n: int = 30) -> cl.ILP:
    rng = np.random.default_rng(0)
    return cl.ILP.from_matrices(shape=[n], A_ub=rng.integers(1, 10, size=(2, n)),
                                b_ub=[40, 50], sense="max")


@pytest.mark.slow
def test_actors_spread_over_two_nodes_and_a_lost_node_loses_no_row(two_node_cluster,
                                                                    always_parallel):
    ray, nodes = two_node_cluster
    spec = knapsack()
    rng = np.random.default_rng(0)
    epoch = [rng.normal(size=(24, 30)) for _ in range(4)]
    serial = cl.make_solver(spec, "highs")
    solver = cl.make_solver(spec, {"name": "highs", "executor": "ray", "workers": "auto"})
    np.testing.assert_array_equal(solver.solve(epoch[0]), serial.solve(epoch[0]))
    kernel = solver.kernel
    assert kernel.workers == 2  # "auto": the cluster's 2 CPUs, 1 per actor
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(alive) == 2 and set(kernel.nodes) == alive  # one actor on each node
    nodes[1].stop()  # the worker node dies mid-epoch
    for costs in epoch[1:2]:
        with pytest.warns(RuntimeWarning, match="1 of 2 Ray actors died .* solved again on "
                                                "the 1 remaining actors"):
            out = solver.solve(costs)
        np.testing.assert_array_equal(out, serial.solve(costs))
    for costs in epoch[2:]:  # the rest of the epoch runs on the remaining node
        np.testing.assert_array_equal(solver.solve(costs), serial.solve(costs))
    assert len(kernel._actors) == 1
    solver.kernel.close()
