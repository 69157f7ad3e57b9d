"""A real Ray cluster on this machine for the tests: a head node, and worker nodes on demand.

Each node is started with ``ray start`` in a session of its own and stopped by process id
(every process of those sessions and their children), never by name: other Ray processes
on the machine are left alone. Every node has one CPU. Workers see the tests directory on
PYTHONPATH (for the functions and datasets the tests send them) and ``env``.

The cluster, and the test that drives it, live in a network namespace of their own that
holds only loopback (:func:`loopback_only`): Ray otherwise finds "its" address by probing
public ones, registers under the machine's interface address and listens on every
interface. They are hermetic against the user's Ray too: no ``RAY_ADDRESS``, token
authentication off, and the nodes' ``HOME`` (``~/.ray``) a temporary directory.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
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


_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


@contextlib.contextmanager
def loopback_only() -> Iterator[None]:
    """Run the calling thread — and every process and thread it starts meanwhile — in a
    new network namespace whose only interface is loopback, up; then put the thread
    back in the namespace it was in. Needs CAP_SYS_ADMIN (root, as CI runs): else the
    test is skipped, saying why. Only this thread moves: other threads of the test
    process (servers of other tests, fsspec's I/O thread) stay where they were, so the
    cluster's tests start what they reach from this thread."""
    libc = ctypes.CDLL(None, use_errno=True)
    original = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    if libc.unshare(_CLONE_NEWNET) != 0:
        os.close(original)
        reason = os.strerror(ctypes.get_errno())
        pytest.skip(f"Ray runs only in a network namespace of loopback alone, which needs "
                    f"root (CAP_SYS_ADMIN) to make: {reason}")  # fmt: skip
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # ip link set lo up
            request = struct.pack("16sH14x", b"lo", 0)
            flags = struct.unpack("16sH14x", fcntl.ioctl(probe, _SIOCGIFFLAGS, request))[1]
            fcntl.ioctl(probe, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))
        yield
    finally:
        back = libc.setns(original, _CLONE_NEWNET)
        os.close(original)
        if back != 0:
            raise OSError(ctypes.get_errno(), "cannot return to the original network namespace")
        stop_forkserver_elsewhere()


def stop_forkserver_elsewhere() -> None:
    """Stop this process's forkserver if it runs in another network namespace than the
    calling thread: started while the thread was in a cluster's (a local map there), it
    would start every later worker of the process there, out of reach of the servers of
    the tests that follow ("Connection refused"). The next one that is needed starts
    where the thread is."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if pid is None:
        return
    try:
        elsewhere = namespace_of(pid) != namespace_of("thread-self")
    except OSError:  # gone
        elsewhere = True
    if elsewhere:
        forkserver._forkserver._stop()


def namespace_of(pid: int | str) -> str:
    """The network namespace of a process (``self``, ``thread-self``), as ``net:[inode]``."""
    return os.readlink(f"/proc/{pid}/ns/net")


_DRIVER_ENV = ("RAY_AUTH_MODE", "RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")


class RayCluster:
    """A head node at :attr:`address` (started when made); :meth:`add_node` adds a
    worker node; :meth:`stop` kills every process of the cluster. From its start to
    :meth:`stop`, the calling thread is in the cluster's loopback-only network namespace
    (:func:`loopback_only`)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.outside = namespace_of("thread-self")
        self.namespace = loopback_only()
        self.namespace.__enter__()
        self.temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths are long
        self.sessions: list[int] = []
        self.nodes = 0
        self.saved = {name: os.environ.get(name) for name in _DRIVER_ENV}
        try:
            # Token authentication off, explicitly: with RAY_AUTH_MODE unset, a head node
            # turns it on when ~/.ray/auth_token exists (any local ray.init() writes one)
            # and a worker node then cannot join. The driver finds no RAY_ADDRESS of the
            # user's either.
            os.environ["RAY_AUTH_MODE"] = "disabled"
            os.environ.pop("RAY_ADDRESS", None)
            home = Path(self.temp) / "home"
            home.mkdir()
            self.env = dict(
                os.environ, RAY_USAGE_STATS_ENABLED="0", HOME=str(home),
                PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT)]), **env,
            )  # fmt: skip
            # A driver started from here (tarkit map --engine ray) takes 127.0.0.1 as its
            # address instead of probing 8.8.8.8 for one, which in the namespace fails
            # with a warning on its stderr. (On Linux that is all this switch does outside
            # `ray start`, which refuses worker nodes with it: the nodes do not get it.)
            os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
            self.address = f"127.0.0.1:{free_port()}"
            port = self.address.rsplit(":", 1)[1]
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

    def processes(self) -> set[int]:
        """Every process of the cluster's nodes."""
        return session_members(self.sessions)

    def stop(self) -> None:
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        sweep_ledgers()  # of the workers just killed that ran commands
        shutil.rmtree(self.temp, ignore_errors=True)
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self.namespace.__exit__(None, None, None)
