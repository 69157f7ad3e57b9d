"""Reading from moto's S3 server on 127.0.0.1 through a fault-injecting proxy: drops, resets
and stalls are ridden through at the byte reached; an object that changes is caught."""

from __future__ import annotations

import os
import time

import pytest
from conftest import run
from fault_proxy import FaultProxy

from tarkit.errors import SourceError
from tarkit.storage import Reconnection, RetryPolicy, open_source, open_source_at

DATA = os.urandom(3_000_000)
BLOCK = 1 << 18  # s3fs reads in blocks: small ones put the faults mid-object


@pytest.fixture
def bucket(s3_env: dict[str, str], s3_server: str) -> str:
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=s3_server, skip_instance_cache=True)
    name = f"b{time.monotonic_ns()}"
    fs.mkdir(name)
    fs.pipe(f"{name}/x.tar", DATA)
    return name


def read(url: str, endpoint: str, events: list[Reconnection], start: int = 0, **kw) -> bytes:
    options = {"endpoint_url": endpoint, "default_block_size": BLOCK}
    policy = RetryPolicy(**{"timeout": 1.0, "backoff": 0.01, "on_reconnect": events.append, **kw})
    with open_source_at(url, start, options, policy) as source:
        return source.stream.read()


def test_drops_and_resets_are_resumed_at_the_byte_reached(
    bucket: str, s3_proxy: FaultProxy
) -> None:
    s3_proxy.drop_after(1_600_000)  # in the second ranged read of s3fs
    s3_proxy.reset_after(3_500_000)
    events: list[Reconnection] = []
    assert read(f"s3://{bucket}/x.tar", s3_proxy.url, events) == DATA
    assert s3_proxy.struck == ["drop", "reset"]
    assert len(events) == 2 and 0 < events[0].offset <= events[1].offset < len(DATA)
    assert all(e.cause.startswith(("read failed: ", "cannot open: ")) for e in events)


def test_reading_from_an_offset_resumes_from_there(bucket: str, s3_proxy: FaultProxy) -> None:
    s3_proxy.drop_after(500_000)
    events: list[Reconnection] = []
    assert read(f"s3://{bucket}/x.tar", s3_proxy.url, events, start=1_234_567) == DATA[1_234_567:]
    assert len(events) == 1


def test_a_seek_moves_the_read_and_its_resumption(bucket: str, s3_proxy: FaultProxy) -> None:
    events: list[Reconnection] = []
    options = {"endpoint_url": s3_proxy.url, "default_block_size": BLOCK}
    policy = RetryPolicy(timeout=1.0, backoff=0.01, on_reconnect=events.append)
    with open_source(f"s3://{bucket}/x.tar", options, policy) as source:
        assert source.stream.read(6) == DATA[:6]
        assert source.stream.seek(2_000_000) == 2_000_000
        s3_proxy.drop_after(100_000)
        assert source.stream.read() == DATA[2_000_000:]
    assert [e.offset for e in events] == [2_000_000]


def test_a_stall_is_cut_by_the_timeout(bucket: str, s3_proxy: FaultProxy) -> None:
    s3_proxy.stall_after(1_500_000, seconds=30)
    events: list[Reconnection] = []
    started = time.monotonic()
    assert read(f"s3://{bucket}/x.tar", s3_proxy.url, events) == DATA
    assert time.monotonic() - started < 10
    assert len(events) == 1


def test_when_reconnections_run_out_it_is_a_source_error(bucket: str, s3_proxy: FaultProxy) -> None:
    s3_proxy.refuse_answers = True
    events: list[Reconnection] = []
    with pytest.raises(SourceError, match=r"\(gave up after 2 reconnections\)$"):
        read(f"s3://{bucket}/x.tar", s3_proxy.url, events, retries=2)
    assert [e.attempt for e in events] == [1, 2]


def test_an_object_overwritten_mid_read_is_a_changed_error(bucket: str, s3_server: str) -> None:
    import s3fs

    options = {"endpoint_url": s3_server, "default_block_size": BLOCK}
    with open_source(f"s3://{bucket}/x.tar", options, RetryPolicy(backoff=0.01)) as source:
        assert source.stream.read(BLOCK) == DATA[:BLOCK]
        fs = s3fs.S3FileSystem(endpoint_url=s3_server, skip_instance_cache=True)
        fs.pipe(f"{bucket}/x.tar", DATA[::-1])
        with pytest.raises(SourceError) as info:
            source.stream.read()
    assert info.value.reason == SourceError.CHANGED
    assert str(info.value).startswith(f"s3://{bucket}/x.tar: changed while being read (its ETag")


def test_a_missing_object_is_not_retried(bucket: str, s3_server: str) -> None:
    events: list[Reconnection] = []
    with pytest.raises(SourceError) as info:
        read(f"s3://{bucket}/none.tar", s3_server, events)
    assert (info.value.reason, str(info.value), events) == (
        SourceError.MISSING,
        f"s3://{bucket}/none.tar: no such object",
        [],
    )


def test_tarcat_from_s3_through_drops_is_byte_identical(
    bucket: str, s3_proxy: FaultProxy, s3_env: dict[str, str], s3_server: str
) -> None:
    import s3fs
    from conftest import make_tar

    archive = make_tar((f"{i:04d}.bin", bytes([i % 251]) * 50_000) for i in range(100))
    fs = s3fs.S3FileSystem(endpoint_url=s3_server, skip_instance_cache=True)
    fs.pipe(f"{bucket}/a.tar", archive)
    s3_proxy.drop_after(1_000_000)
    s3_proxy.stall_after(3_000_000)
    env = {**os.environ, **s3_env, "FSSPEC_S3_ENDPOINT_URL": s3_proxy.url, "TARKIT_TIMEOUT": "1",
           "FSSPEC_S3": '{"default_block_size": 262144}'}  # fmt: skip
    result = run(["tarcat", f"s3://{bucket}/a.tar"], env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == run(["tarcat", "-"], input=archive).stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and all(
        line.startswith(f"tarcat: warning: s3://{bucket}/a.tar: reconnecting at byte ")
        for line in lines
    ), result.stderr
