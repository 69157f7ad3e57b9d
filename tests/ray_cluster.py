"""A real Ray cluster on this machine for the tests: a head node, and worker nodes on demand.

Each node is started with ``ray start`` in a session of its own and stopped by process id
(every process of those sessions and their children), never by name: other Ray processes
on the machine are left alone. Every node has one CPU. Workers see the tests directory on
PYTHONPATH (for the functions and datasets the tests send them) and ``env``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

from conftest import BIN, ROOT

from tarkit.engines.ledger import sweep_ledgers

HERE = Path(__file__).resolve().parent  # tests/
START_TIMEOUT = 90


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def session_members(sessions: list[int]) -> set[int]:
    """Processes in the given sessions (by session id), with all their descendants."""
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) in sessions:
            found.add(int(entry))
    children = _children()
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


class RayCluster:
    """A head node at :attr:`address` (started when made); :meth:`add_node` adds a
    worker node; :meth:`stop` kills every process of the cluster."""

    def __init__(self, env: dict[str, str]) -> None:
        self.temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths are long
        self.address = f"127.0.0.1:{free_port()}"
        self.sessions: list[int] = []
        self.nodes = 0
        # Token authentication off, explicitly: with RAY_AUTH_MODE unset, a head node
        # turns it on when ~/.ray/auth_token exists (any local ray.init() writes one)
        # and a worker node then cannot join.
        self.saved_mode = os.environ.get("RAY_AUTH_MODE")
        os.environ["RAY_AUTH_MODE"] = "disabled"
        self.env = dict(
            os.environ, RAY_USAGE_STATS_ENABLED="0",
            PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT)]), **env,
        )  # fmt: skip
        self.env.pop("RAY_ADDRESS", None)
        port = self.address.rsplit(":", 1)[1]
        try:
            self._start(
                ["--head", f"--port={port}", "--node-ip-address=127.0.0.1",
                 "--include-dashboard=false", f"--temp-dir={self.temp}",
                 f"--ray-client-server-port={free_port()}"]
            )  # fmt: skip
        except BaseException:
            self.stop()
            raise

    def _start(self, args: list[str]) -> None:
        common = ["--num-cpus=1", "--object-store-memory=100000000", "--disable-usage-stats"]
        process = subprocess.Popen(
            [str(BIN / "ray"), "start", *args, *common], env=self.env,
            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.sessions.append(process.pid)
        try:
            output, _ = process.communicate(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        assert process.returncode == 0, output.decode("utf-8", "replace")[-2000:]
        self.nodes += 1

    def add_node(self) -> None:
        """Start one more node (one CPU) and wait until it has joined."""
        self._start([f"--address={self.address}"])

    def stop(self) -> None:
        for pid in session_members(self.sessions):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        sweep_ledgers()  # of the workers just killed that ran commands
        shutil.rmtree(self.temp, ignore_errors=True)
        if self.saved_mode is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = self.saved_mode
