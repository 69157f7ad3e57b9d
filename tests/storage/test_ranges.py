"""Ranged reads (tarkit/storage/ranges.py): the bytes asked for, one read or request each,
the object's size learnt once, a dropped answer resumed at the byte reached, a changed
object refused, and descriptors of a forked child its own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from shard_server import ShardServer, drop, reset, status

from tarkit.errors import SourceError, UsageError
from tarkit.storage import open_ranges, retry_policy

DATA = bytes(range(256)) * 40  # 10,240 bytes


def test_a_local_file_reads_any_range_and_the_end_short(tmp_path: Path) -> None:
    path = tmp_path / "x.tar"
    path.write_bytes(DATA)
    source = open_ranges(str(path))
    assert source.read(1000, 1010) == DATA[1000:1010]
    assert source.read(10_000, 11_000) == DATA[10_000:]  # the object ends first
    assert source.read(20_000, 20_100) == b""
    assert source.size() == len(DATA)
    source.close()


def test_a_missing_file_is_a_missing_source_and_a_stream_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file") as caught:
        open_ranges(str(tmp_path / "none.tar"))
    assert caught.value.reason == SourceError.MISSING
    with pytest.raises(UsageError, match="random access needs a file or a URL"):
        open_ranges("pipe:cat x.tar")


def test_a_forked_child_reads_through_a_descriptor_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "x.tar"
    path.write_bytes(DATA)
    source = open_ranges(str(path))
    inherited = source._fd  # type: ignore[attr-defined]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: reads after reopening, and says which descriptor it used
        try:
            ok = source.read(5, 9) == DATA[5:9] and source._fd != -1  # type: ignore[attr-defined]
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
    os.close(read)
    assert source._fd == inherited  # type: ignore[attr-defined]  # the parent's is untouched
    assert source.read(0, 4) == DATA[:4]


def test_http_reads_one_closed_range_per_read_and_learns_the_size(
    http_server: ShardServer,
) -> None:
    http_server.files["/x.tar"] = DATA
    source = open_ranges(f"{http_server.url}/x.tar")
    assert source.read(512, 1536) == DATA[512:1536]
    assert source.size() == len(DATA)  # from Content-Range: no request of its own
    assert source.read(10_000, 11_000) == DATA[10_000:]
    ranges = [headers["Range"] for _, headers in http_server.requests]
    assert ranges == ["bytes=512-1535", "bytes=10000-10239"]
    assert "If-Range" in http_server.requests[1][1]  # the validator of the first answer


def test_http_reconnects_at_the_byte_reached_within_one_read(http_server: ShardServer) -> None:
    http_server.files["/x.tar"] = DATA
    http_server.fail("/x.tar", drop(300), reset(200), status(503))
    source = open_ranges(f"{http_server.url}/x.tar", policy=retry_policy(5, 2.0, base=None))
    assert source.read(1000, 9000) == DATA[1000:9000]
    assert [start for _, start in http_server.ranges] == [1000, 1300, 1500]
    assert [h["Range"] for _, h in http_server.requests][-1] == "bytes=1500-8999"


def test_http_refuses_an_object_that_changed_between_reads(http_server: ShardServer) -> None:
    http_server.files["/x.tar"] = DATA
    source = open_ranges(f"{http_server.url}/x.tar")
    source.read(0, 100)
    http_server.put("/x.tar", DATA[::-1])
    with pytest.raises(SourceError, match="changed while being read") as caught:
        source.read(0, 100)
    assert caught.value.reason == SourceError.CHANGED


def test_fsspec_reads_ranges_with_cat_file_and_asks_the_size_once() -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/ranges/x.tar", DATA)
    source = open_ranges("memory://ranges/x.tar")
    assert source.read(100, 200) == DATA[100:200]
    assert source.read(10_200, 10_400) == DATA[10_200:]
    assert source.size() == len(DATA)
    with pytest.raises(SourceError, match="no such object"):
        open_ranges("memory://ranges/none.tar").read(0, 1)
