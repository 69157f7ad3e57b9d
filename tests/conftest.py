"""Shared test helpers: run the real console scripts, build archives."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from fault_proxy import FaultProxy
from shard_server import ShardServer

from tarkit.format.tar_writer import TarWriter

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"

# Every command a test starts runs this checkout's tarkit, whatever the venv installed
# (another worktree's) and whatever directory the test runs it in (a relative entry
# would be read from there); a test that sets PYTHONPATH prepends to this one.
_PATH = [
    str(ROOT),
    *(os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p),
]
os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(_PATH))
# pytest started in the background (``pytest &``) inherits an ignored SIGINT: the tests
# that interrupt code in this process need Python's own handler.
signal.signal(signal.SIGINT, signal.default_int_handler)


def tool(name: str) -> str:
    """Path of an installed console script (tarcat, tarsplit, …)."""
    path = BIN / name
    assert path.exists(), f"{name} is not installed in {BIN}"
    return str(path)


def run(
    args: list[str], input: bytes | None = None, timeout: float = 120, **kw
) -> subprocess.CompletedProcess:
    """Run a command; stdout as bytes, stderr as text."""
    if args and os.path.sep not in args[0] and (BIN / args[0]).exists():
        args = [str(BIN / args[0]), *args[1:]]
    result = subprocess.run(args, input=input, capture_output=True, timeout=timeout, **kw)
    result.stderr = result.stderr.decode("utf-8", "replace")
    return result


def run_shell(script: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """Run a bash pipeline with the venv's scripts first on PATH.

    ``env`` holds variables to set on top of this process's environment; the venv's
    scripts come first on PATH even when ``env`` carries a PATH of its own.
    """
    env = dict(os.environ)
    env.update(kw.pop("env", {}))
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(
        ["bash", "-c", script], capture_output=True, timeout=timeout, env=env, **kw
    )
    result.stderr = result.stderr.decode("utf-8", "replace")
    return result


def paused_commit_env(gate: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) for a command whose commit of an overwrite
    pauses after its first move until ``gate`` exists (``tests/paused_commit``): a
    commit caught midway."""
    env = dict(os.environ if env is None else env)
    here = env.get("PYTHONPATH", "").split(os.pathsep)
    entries = [str(Path(__file__).parent / "paused_commit")]
    entries += [os.path.abspath(entry) for entry in here if entry]
    return dict(env, PYTHONPATH=os.pathsep.join(entries), PAUSED_COMMIT_GATE=str(gate))


def make_tar(members: Iterable[tuple[str, bytes]]) -> bytes:
    """An archive of regular files, with tarkit's deterministic headers."""
    out = io.BytesIO()
    with TarWriter(out) as writer:
        for name, data in members:
            writer.add(name, data)
    return out.getvalue()


LONG_KEY = "k" * 200_000  # a valid key no command's environment can hold (128 KiB at most)
LONG_KEY_PROBLEM = "the key is too long for the command's environment (TARKIT_KEY holds at most"


def write_long_key_archive(path: Path) -> None:
    """Samples ``a``, :data:`LONG_KEY` (its member at byte 1024) and ``c``, a txt each."""
    path.write_bytes(make_tar([("a.txt", b"1"), (f"{LONG_KEY}.txt", b"2"), ("c.txt", b"3")]))


def samples_of(archive: bytes) -> list[tuple[str, dict[str, bytes]]]:
    """(key, {field: data}) for every sample, as tarkit reads it."""
    from tarkit.format.samples import group_samples
    from tarkit.format.tar import read_members

    return [(s.key, s.data()) for s in group_samples(read_members(io.BytesIO(archive)))]


def webdataset_samples(path: str | Path) -> list[tuple[str, dict[str, bytes]]]:
    """(key, {field: data}) for every sample, as webdataset reads the file."""
    import webdataset as wds

    dataset = wds.WebDataset(str(path), shardshuffle=False, empty_check=False)
    result = []
    for sample in dataset:
        fields = {k: v for k, v in sample.items() if not k.startswith("__")}
        result.append((sample["__key__"], fields))
    return result


READERS = ("compiled", "pure")


def reader_env(reader: str) -> dict[str, str]:
    """The environment that makes a command use ``reader``: the compiled scanner or the
    pure-Python reader (``TARKIT_PURE``)."""
    return {"TARKIT_PURE": "1" if reader == "pure" else "0"}


@pytest.fixture(params=READERS)
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test with the compiled scanner, then again with the pure-Python reader,
    in this process and in the commands it starts. A test module takes it with
    ``pytestmark = pytest.mark.usefixtures("reader")``; both must pass everything."""
    from tarkit.format import scanner

    if request.param == "pure":
        monkeypatch.setattr(scanner, "compiled", None)
    elif scanner.compiled is None:
        if os.environ.get("TARKIT_PURE", "") not in ("", "0"):
            pytest.skip("TARKIT_PURE is set: the pure-Python reader only")
        pytest.fail("the compiled scanner is not built: pip install -e . needs a C compiler and "
                    "Python's headers (bin/setup installs them); TARKIT_PURE=1 tests the pure "
                    "reader alone")  # fmt: skip
    for name, value in reader_env(request.param).items():
        monkeypatch.setenv(name, value)
    return str(request.param)


@pytest.fixture
def small_archive() -> bytes:
    """Ten samples of three fields each."""
    return make_tar(
        (f"s{i:03d}.{field}", f"{field}-{i}".encode() * (i + 1))
        for i in range(10)
        for field in ("cls", "jpg", "json")
    )


@pytest.fixture(scope="session")
def archive_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory shared by the session for real archives made by GNU tar and bsdtar."""
    return tmp_path_factory.mktemp("archives")


@pytest.fixture
def http_server() -> Iterable[ShardServer]:
    """The test HTTP server on 127.0.0.1, faults on demand (:class:`shard_server.ShardServer`)."""
    server = ShardServer()
    yield server
    server.stop()


S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "NO_PROXY": "127.0.0.1,localhost",
}


@pytest.fixture(scope="session")
def s3_server() -> Iterable[str]:
    """An S3-compatible server (moto's server mode) on 127.0.0.1; yields its endpoint URL.

    Subprocesses reach it with ``S3_ENV`` plus ``FSSPEC_S3_ENDPOINT_URL=<endpoint>``;
    in-process code with ``storage_options={"endpoint_url": endpoint}`` and ``S3_ENV``
    set (the ``s3_env`` fixture).
    """
    import socket

    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_proxy(s3_server: str) -> Iterable[FaultProxy]:
    """A fault-injecting TCP proxy in front of the test S3 server (:mod:`fault_proxy`):
    ``s3_proxy.url`` is an endpoint URL whose connections break on demand."""
    proxy = FaultProxy(int(s3_server.rsplit(":", 1)[1]))
    yield proxy
    proxy.stop()


@pytest.fixture
def s3_env(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Credentials for the test S3 server in this process; returns the subprocess env."""
    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)
    return dict(S3_ENV, FSSPEC_S3_ENDPOINT_URL=s3_server)


def sigkill_when(process: subprocess.Popen, ready: Callable[[], bool], timeout: float = 60) -> None:
    """SIGKILL ``process`` as soon as ``ready()`` holds (or after ``timeout`` seconds)."""
    import signal
    import time

    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not ready() and process.poll() is None:
            time.sleep(0.05)
        time.sleep(0.2)  # let it get on with the next shard
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)


def assert_all_gone(pids: Iterable[int]) -> None:
    """:func:`assert_gone` for each process; should one still run, those still running are
    killed before the assertion fails, so that a failing test leaves nothing behind."""
    import signal

    pids = list(pids)
    try:
        for pid in pids:
            assert_gone(pid)
    except AssertionError:
        for pid in pids:
            state = Path(f"/proc/{pid}/stat")
            if state.exists() and state.read_text().rsplit(")", 1)[1].split()[0] not in "ZX":
                os.kill(pid, signal.SIGKILL)
        raise


def assert_gone(pid: int) -> None:
    """Wait (at most 10 s) until process ``pid`` has exited; a zombie counts as gone."""
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still runs")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterable[Path]:
    """A file system of 512 KiB (a tmpfs) mounted at ``tmp_path/small``: a disk that a
    test fills in a moment, while the one holding ``tmp_path`` has room. Skipped, with
    the reason, where mounting is refused (not root, or no CAP_SYS_ADMIN)."""
    path = tmp_path / "small"
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k,mode=1777", "tmpfs", str(path)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs: {mounted.stderr.strip() or 'mount failed'}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)
