"""Pipeline faults: closed and full outputs, failing sources, dropped connections, kills.

- ``| head`` at every tool that writes to stdout (tarcreate included): a quiet exit 141,
  nothing on stderr.
- A full disk (``/dev/full``): exit 2 with one line.
- A ``pipe:`` source whose command fails or is killed midway, for every tool that reads
  tar: exit 2 naming the command, and only whole samples downstream.
- An HTTP server on 127.0.0.1 that drops the connection halfway (with and without a
  Content-Length, at a sample boundary, with a reset): exit 2, never a short shard
  accepted as whole, in the commands and in the loader.
- A slow consumer: tarcat's memory stays bounded while the reader of its output lags.
"""

from __future__ import annotations

import http.server
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import tool
from corpus import BASE, SAMPLE, samples
from outputs import archive_samples, check_stderr, shell

from tarkit.errors import InputError, SourceError
from tarkit.format.tar_writer import TarWriter

KEY = "k" * 80  # long keys make every output line long, so outputs outgrow any pipe


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``many.tar``: 16000 small samples; ``big.tar``: a 4 MB member, then 20 of 100 KB."""
    directory = tmp_path_factory.mktemp("faults")
    with open(directory / "many.tar", "wb") as f, TarWriter(f) as writer:
        for i in range(16000):
            writer.add(f"{KEY}{i:06d}.txt", b"text " * 40)
    with open(directory / "big.tar", "wb") as f, TarWriter(f) as writer:
        writer.add("big.bin", bytes(range(256)) * (4 << 12))
        for i in range(20):
            writer.add(f"s{i:02d}.bin", bytes([i]) * 100_000)
    (directory / "base.tar").write_bytes(BASE)
    # A tarcreate plan whose shard outgrows a pipe: three samples holding big.tar each.
    (directory / "plan.tsv").write_text(
        "__key__\t@bin\n" + "".join(f"p{i}\tbig.tar\n" for i in range(3))
    )
    return directory


# --- closed and full outputs -------------------------------------------------------------

# Every tool that writes to stdout, with an input whose output outgrows a 1 MiB pipe.
STDOUT_RUNS = {
    "tarcat": "tarcat many.tar",
    "tarkit cat": "tarkit cat many.tar",
    "tar2tsv": "tar2tsv many.tar",
    "tarshow": "tarshow many.tar",
    "tarsort": "tarsort many.tar",
    "tarindex": "tarindex --offsets many.tar",
    "tarfirst": "tarfirst big.tar",
    "tarproc": "tarproc -c true big.tar",
    "tarcreate": "tarcreate plan.tsv",
}


@pytest.mark.parametrize("name", sorted(STDOUT_RUNS))
def test_closed_output_pipe_is_a_quiet_141(data_dir: Path, name: str) -> None:
    statuses = shell(data_dir, f"{STDOUT_RUNS[name]} 2>err-{name.replace(' ', '-')} | "
                               "head -c 100 >/dev/null")  # fmt: skip
    assert statuses == [141, 0]
    assert (data_dir / f"err-{name.replace(' ', '-')}").read_text() == ""


def test_closed_pipe_at_the_end_of_a_chain_stops_every_tool_quietly(data_dir: Path) -> None:
    statuses = shell(data_dir, "tarcat many.tar 2>err1 | tarcat 2>err2 | tar2tsv 2>err3 | "
                               "head -c 100 >/dev/null")  # fmt: skip
    assert statuses == [141, 141, 141, 0]
    assert [(data_dir / f"err{i}").read_text() for i in (1, 2, 3)] == ["", "", ""]


# Outputs to a full disk. Never `-o /dev/full` for tarindex or tarsplit: they write a
# temporary file beside the output and rename it, which would replace the device.
FULL_RUNS = {
    "tarcat -o": "tarcat many.tar -o /dev/full",
    "tarcat stdout": "tarcat many.tar >/dev/full",
    "tar2tsv": "tar2tsv many.tar >/dev/full",
    "tarshow": "tarshow many.tar >/dev/full",
    "tarsort -o": "tarsort many.tar -o /dev/full",
    "tarproc -o": "tarproc -c true big.tar -o /dev/full",
    "tarindex stdout": "tarindex --offsets many.tar >/dev/full",
    "tarfirst": "tarfirst big.tar >/dev/full",
    "tarcreate -o": "tarcreate plan.tsv -o /dev/full",
    "tarcreate stdout": "tarcreate plan.tsv >/dev/full",
}


@pytest.mark.parametrize("name", sorted(FULL_RUNS))
def test_full_disk_is_exit_2_with_one_line(data_dir: Path, name: str) -> None:
    err = f"err-full-{name.replace(' ', '-')}"
    statuses = shell(data_dir, f"{FULL_RUNS[name]} 2>{err}")
    assert statuses == [2]
    command = name.split()[0]
    check_stderr((data_dir / err).read_text(), command, None, 2, r".*No space left on device")


def test_manifest_written_to_a_fifo_goes_into_it_in_place(tmp_path: Path) -> None:
    """A named pipe (or a device) as output is written in place, never replaced."""
    (tmp_path / "base.tar").write_bytes(BASE)
    fifo = tmp_path / "manifest.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        result = subprocess.run([tool("tarindex"), "base.tar", "-o", str(fifo)], cwd=tmp_path,
                                capture_output=True, timeout=30)  # fmt: skip
        received = os.read(reader, 1 << 20)
    finally:
        os.close(reader)
    assert result.returncode == 0, result.stderr
    assert fifo.is_fifo()
    assert b'"tarkit-manifest"' in received


# --- failing pipe: sources ---------------------------------------------------------------

# Every tool that reads tar, reading a pipe: source; what comes out of it, read back.
PIPE_TOOLS = {
    "tarcat": ("tarcat {src} 2>err >out", "out"),
    "tarsplit": ("tarsplit -c 1 -o 'shards/s-%06d.tar' {src} 2>err", "shards"),
    "tar2tsv": ("tar2tsv --no-header {src} 2>err >out", "lines"),
    "tarshow": ("tarshow {src} 2>err >out", "show"),
    "tarsort": ("tarsort {src} 2>err >out", "out"),
    "tarproc": ("tarproc -c true {src} 2>err >out", "out"),
    "tarindex": ("tarindex {src} -o m.json 2>err", "manifest"),
}


def written_keys(directory: Path, kind: str, status: int) -> list[str]:
    """The keys of the samples a tool wrote, checking they are whole."""
    if kind == "out":
        data = (directory / "out").read_bytes()
        return [key for key, _ in archive_samples(data, complete=status == 0)]
    if kind == "shards":
        shards = sorted((directory / "shards").glob("*")) if (directory / "shards").exists() else []
        assert all(not p.name.startswith(".") for p in shards), shards  # no temporary file
        return [key for p in shards for key, _ in archive_samples(p.read_bytes(), True)]
    if kind == "lines":
        return [line.split("\t")[0] for line in (directory / "out").read_text().splitlines()]
    if kind == "show":
        return [line for line in (directory / "out").read_text().splitlines()
                if not line.startswith(" ")]  # fmt: skip
    assert not (directory / "m.json").exists()  # no manifest for a failed input
    return []


def expected_keys(name: str, streamed: list[str]) -> list[str]:
    """What ``name`` leaves when a streaming reader gets ``streamed`` before the error.

    tarsort and tarindex write only after reading everything, so nothing. tarsplit -c 1
    finishes a shard when the next sample arrives: the shard of the last sample is still
    open at the error, and an open shard is removed.
    """
    if name in ("tarsort", "tarindex"):
        return []
    if name == "tarsplit":
        return streamed[:-1]
    return streamed


@pytest.mark.parametrize("ending, what", [
    ("exit 3", "command exited with status 3"),
    ("kill -9 $$", "command was killed by signal 9 \\(SIGKILL\\)"),
])  # fmt: skip
@pytest.mark.parametrize("name", sorted(PIPE_TOOLS))
def test_pipe_source_failing_midway_is_exit_2_with_whole_samples(
    tmp_path: Path, name: str, ending: str, what: str
) -> None:
    (tmp_path / "base.tar").write_bytes(BASE)
    script, kind = PIPE_TOOLS[name]
    source = f"pipe:head -c 7000 base.tar; {ending}"
    statuses = shell(tmp_path, script.format(src=f"'{source}'"))
    assert statuses == [2]
    check_stderr((tmp_path / "err").read_text(), name, source, 2, what)
    # The source stops inside the data of 0002.bin: 0001 is known complete (a member
    # of another key began), 0002 is not.
    assert written_keys(tmp_path, kind, 2) == expected_keys(name, ["0000", "0001"])


def test_tarfirst_reads_no_further_than_it_needs_from_a_failing_source(tmp_path: Path) -> None:
    (tmp_path / "base.tar").write_bytes(BASE)
    result = subprocess.run([tool("tarfirst"), "pipe:head -c 7000 base.tar; exit 3"],
                            cwd=tmp_path, capture_output=True, timeout=30)  # fmt: skip
    assert (result.returncode, result.stderr) == (0, b"")
    assert result.stdout == samples(0)[0][1][0][1]


# --- connections dropped halfway -----------------------------------------------------------


class DroppingServer:
    """Serves BASE on 127.0.0.1, whole or dropped in the ways a network drops it.

    ``/whole.tar``; ``/length.tar``: announces the full Content-Length, sends half, closes;
    ``/close.tar``: no Content-Length (HTTP/1.0, the end is the close), sends half;
    ``/boundary.tar``: no Content-Length, stops exactly after two whole samples;
    ``/reset.tar``: full Content-Length, half the body, then a TCP reset.
    """

    def __init__(self) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                half = len(BASE) // 2
                mode = self.path.strip("/").removesuffix(".tar")
                body = {"whole": BASE, "length": BASE[:half], "close": BASE[:half],
                        "boundary": BASE[: 2 * SAMPLE], "reset": BASE[:half]}.get(mode)  # fmt: skip
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                if mode in ("whole", "length", "reset"):
                    self.send_header("Content-Length", str(len(BASE)))
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
                if mode == "reset":
                    linger = struct.pack("ii", 1, 0)  # close with RST, not FIN
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def dropping() -> Iterator[DroppingServer]:
    """The server, with every read in this module allowed one reconnection."""
    patch = pytest.MonkeyPatch()
    patch.setenv("TARKIT_RETRIES", "1")
    server = DroppingServer()
    yield server
    server.stop()
    patch.undo()


# A server that drops every connection at the same byte is reconnected to once (the tests
# set TARKIT_RETRIES=1), then given up on.
GAVE_UP = r" \(gave up after 1 reconnection\)"
DROPS = {
    "length": r"connection closed after 6656 of 13312 bytes" + GAVE_UP,
    "close": r"input ends inside member data .*",
    "boundary": r"input ends without the end-of-archive marker .*",
    "reset": r"(connection failed: .*|connection closed after \d+ of 13312 bytes)" + GAVE_UP,
}
# What a streaming reader gives before each drop. "close" is cut inside the data of
# 0002.bin, whose header proves 0001 complete. "length" and "reset" end at the same
# point, but a failed connection names no member, so 0001 is held back too. "boundary"
# ends after 0001 without the end-of-archive marker: 0001 might have had more members.
DROPPED_STREAMS = {
    "length": ["0000"],
    "close": ["0000", "0001"],
    "boundary": ["0000"],
    "reset": ["0000"],
}


@pytest.mark.parametrize("mode", sorted(DROPS))
@pytest.mark.parametrize("name", ["tarcat", "tarsplit", "tarindex"])
def test_dropped_connection_is_exit_2_and_no_short_shard_is_accepted(
    tmp_path: Path, dropping: DroppingServer, name: str, mode: str
) -> None:
    script, kind = PIPE_TOOLS[name]
    url = f"{dropping.url}/{mode}.tar"
    assert shell(tmp_path, script.format(src=url)) == [2]
    reconnections = 1 if mode in ("length", "reset") else 0  # one "reconnecting" warning
    check_stderr((tmp_path / "err").read_text(), name, url, 2, DROPS[mode], reconnections)
    assert written_keys(tmp_path, kind, 2) == expected_keys(name, DROPPED_STREAMS[mode])


@pytest.mark.parametrize("name", ["tar2tsv", "tarshow", "tarsort", "tarproc"])
def test_dropped_connection_stops_every_other_tool_too(
    tmp_path: Path, dropping: DroppingServer, name: str
) -> None:
    script, kind = PIPE_TOOLS[name]
    url = f"{dropping.url}/boundary.tar"
    assert shell(tmp_path, script.format(src=url)) == [2]
    check_stderr((tmp_path / "err").read_text(), name, url, 2, DROPS["boundary"])
    assert written_keys(tmp_path, kind, 2) == expected_keys(name, DROPPED_STREAMS["boundary"])


def test_whole_http_shard_reads_cleanly(tmp_path: Path, dropping: DroppingServer) -> None:
    result = subprocess.run([tool("tarcat"), f"{dropping.url}/whole.tar"], capture_output=True,
                            timeout=30)  # fmt: skip
    assert (result.returncode, result.stdout, result.stderr) == (0, BASE, b"")


@pytest.mark.parametrize("mode", sorted(DROPS))
def test_loader_raises_or_skips_a_dropped_shard(dropping: DroppingServer, mode: str) -> None:
    from tarkit.loading import ShardDataset

    url = f"{dropping.url}/{mode}.tar"
    got: list[dict[str, object]] = []
    with pytest.raises((InputError, SourceError)):
        got.extend(ShardDataset(url, handler="raise"))
    assert [item["__key__"] for item in got] == DROPPED_STREAMS[mode]
    dataset = ShardDataset([f"{dropping.url}/whole.tar", url], handler="skip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        keys = [item["__key__"] for item in dataset]
    assert keys == ["0000", "0001", "0002", "0003", *DROPPED_STREAMS[mode]]
    assert dataset.skipped.total_shards == 1


# --- a slow consumer -------------------------------------------------------------------------

PRODUCER = """
import sys
from tarkit.format.tar_writer import encode_member
out = sys.stdout.buffer
for i in range({count}):
    out.write(encode_member(f"{{i:06d}}.bin", bytes([i % 251]) * {size}))
    out.write(encode_member(f"{{i:06d}}.cls", b"1"))
out.write(bytes(1024))
"""


def peak_rss(pid: int) -> int:
    """The peak resident memory (VmHWM) of a running process, in bytes (0 once gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def test_slow_consumer_keeps_tarcat_memory_bounded() -> None:
    """160 MB through tarcat while the reader takes 256 KiB every 2 ms: RSS stays small."""
    count, size = 160, 1 << 20
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER.format(count=count, size=size)],
                                stdout=subprocess.PIPE)  # fmt: skip
    tarcat = subprocess.Popen([tool("tarcat")], stdin=producer.stdout, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)  # fmt: skip
    assert producer.stdout is not None and tarcat.stdout is not None
    producer.stdout.close()
    received, peak = 0, 0
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            chunk = tarcat.stdout.read(256 << 10)
            if not chunk:
                break
            received += len(chunk)
            peak = max(peak, peak_rss(tarcat.pid))
            time.sleep(0.002)
    finally:
        tarcat.kill() if tarcat.poll() is None else None
        producer.kill() if producer.poll() is None else None
        tarcat.wait(30)
        producer.wait(30)
    assert tarcat.returncode == 0, tarcat.stderr.read() if tarcat.stderr else ""
    assert received == count * (512 + size + 1024) + 1024
    # One member is held whole (1 MiB), plus a few MiB of buffers: far below the input.
    assert 0 < peak < 100 << 20, peak
