"""One Ray cluster for the whole test session, started with ``ray start`` on loopback
in subprocesses that the session owns (a head and a worker node, one CPU each), so the
executor's tests see a real multi-node cluster and a test can add a node and lose it.
Only the processes started here are torn down, by their ids."""

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




class Cluster:
    """A running cluster: its address, the nodes this session started, and a way to
    add one more (which the caller may then stop, as a lost machine)."""

    def __init__(self, env: dict, address: str, temp: str) -> None:
        self.env, self.address, self.temp = env, address, temp
        self.nodes: list[Node] = []

    def add_node(self, ray, timeout: float = 60) -> Node:
        """A new one-CPU worker node, once the cluster counts its CPU."""
        before = ray.cluster_resources().get("CPU", 0)
        node = Node([f"--address={self.address}"], self.env)
        self.nodes.append(node)
        deadline = time.monotonic() + timeout
        while ray.cluster_resources().get("CPU", 0) < before + 1:
            if time.monotonic() > deadline:
                raise RuntimeError("a new Ray node did not join the cluster")
            time.sleep(0.5)
        return node

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()
        shutil.rmtree(self.temp, ignore_errors=True)


def start_cluster(ray) -> Cluster:
    """A head and one worker node, one CPU each, and this process connected to them."""
    temp = tempfile.mkdtemp(prefix="rt")  # short: Ray's socket paths have a length limit
    # The nodes must use the token auth this driver uses, or the actors it asks for are
    # never scheduled.
    os.environ["RAY_AUTH_MODE"] = driver_auth_mode()
    os.environ.pop("RAY_ADDRESS", None)
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAY_USAGE_STATS_ENABLED="0",
               # notice a lost node within seconds, not Ray's default 30 s, yet not
               # take a raylet that a busy 2-core machine answers late for a lost one
               RAY_health_check_period_ms="1000", RAY_health_check_timeout_ms="2000",
               RAY_health_check_failure_threshold="5", RAY_health_check_initial_delay_ms="0")
    port = free_port()
    cluster = Cluster(env, f"127.0.0.1:{port}", temp)
    cluster.nodes.append(Node(["--head", f"--port={port}", "--include-dashboard=false",
                               f"--temp-dir={temp}"], env))
    try:
        deadline = time.monotonic() + 60
        while True:  # the head takes a few seconds to open its port
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or cluster.nodes[0].process.poll() is not None:
                    raise RuntimeError("the Ray head did not come up") from None
                time.sleep(0.5)
        ray.init(address=cluster.address, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
        cluster.add_node(ray)
    except BaseException:
        if ray.is_initialized():
            ray.shutdown()
        cluster.stop()
        raise
    return cluster
