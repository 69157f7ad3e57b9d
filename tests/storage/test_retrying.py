"""Remote reads that survive the network, against the test server's faults on 127.0.0.1:
reconnect at the byte reached, never hang, never mix versions."""

from __future__ import annotations

import os
import socket
import time

import pytest
from shard_server import ShardServer, drop, replace, reset, slow_headers, stall, status, trickle

from tarkit.errors import SourceError, UsageError
from tarkit.storage import (
    Reconnection,
    RetryPolicy,
    open_source,
    open_source_at,
    report_reconnections,
    retry_policy,
)
from tarkit.storage.http import retry_after

DATA = os.urandom(3_000_000)


def policy(events: list[Reconnection], **kw) -> RetryPolicy:
    settings = {"retries": 5, "timeout": 1.0, "backoff": 0.01, "on_reconnect": events.append}
    return RetryPolicy(**{**settings, **kw})  # type: ignore[arg-type]


def read(url: str, events: list[Reconnection], start: int = 0, **kw) -> bytes:
    opened = open_source_at(url, start, policy=policy(events, **kw))
    with opened as source:
        return source.stream.read()


@pytest.fixture
def served(http_server: ShardServer) -> tuple[ShardServer, str]:
    http_server.files["/x.tar"] = DATA
    return http_server, f"{http_server.url}/x.tar"


def test_a_dropped_connection_resumes_at_the_byte_reached_with_if_range(served) -> None:
    server, url = served
    server.fail("/x.tar", drop(1_000_000), drop(500_000))
    events: list[Reconnection] = []
    assert read(url, events) == DATA
    assert [(e.offset, e.cause, e.attempt, e.delay) for e in events] == [
        (1_000_000, "connection closed after 1000000 of 3000000 bytes", 1, 0.0),
        (1_500_000, "connection closed after 1500000 of 3000000 bytes", 1, 0.0),
    ]
    assert server.ranges == [("/x.tar", 1_000_000), ("/x.tar", 1_500_000)]
    assert all(headers["If-Range"] == server.etag("/x.tar") for _, headers in server.requests[1:])


def test_a_reset_connection_resumes(served) -> None:
    server, url = served
    server.fail("/x.tar", reset(700_000))
    events: list[Reconnection] = []
    assert read(url, events) == DATA
    assert [e.offset for e in events] and events[0].offset <= 700_000
    assert server.hits["/x.tar"] == 2


def test_a_stall_is_cut_by_the_timeout_and_resumed(served) -> None:
    server, url = served
    server.fail("/x.tar", stall(1_200_000, seconds=30))
    events: list[Reconnection] = []
    started = time.monotonic()
    assert read(url, events, timeout=0.5) == DATA
    assert time.monotonic() - started < 5
    assert [(e.offset, e.cause) for e in events] == [(1_200_000, "no data for 0.5 s")]


# Trickles that a reader without a budget would finish in about 3 s: 150 header bytes at
# one per 20 ms, or the last 300 bytes of the body at two per 20 ms (then the rest of it,
# after a reconnection).
@pytest.mark.parametrize(
    ("faults", "cause"),
    [
        (
            [slow_headers(0.02), slow_headers(0.02)],
            "headers too slow: the answer was not complete within 0.5 s",
        ),
        (
            [trickle(len(DATA) - 300, 0.02), trickle(0, 0.02)],
            "body too slow: under 64 KiB per 0.5 s",
        ),
    ],
    ids=["headers", "body"],
)
def test_a_server_that_trickles_its_answer_is_cut_after_the_timeout(served, faults, cause) -> None:
    server, url = served
    server.fail("/x.tar", *faults)
    events: list[Reconnection] = []
    started = time.monotonic()
    with pytest.raises(SourceError) as info:
        read(url, events, timeout=0.5, retries=1)
    assert time.monotonic() - started < 2.5
    assert str(info.value) == f"{url}: {cause} (gave up after 1 reconnection)"
    assert [e.cause for e in events] == [cause]


def test_a_trickled_body_resumes_at_the_byte_reached_and_a_trickle_is_no_progress(
    served,
) -> None:
    server, _ = served
    server.files["/small.tar"] = DATA[:100_300]  # the trickle would end in 3 s unbudgeted
    server.fail("/small.tar", trickle(100_000, 0.02), trickle(0, 0.02))
    events: list[Reconnection] = []
    assert read(f"{server.url}/small.tar", events, timeout=0.3) == DATA[:100_300]
    # The first trickle came after 100 kB (progress: reconnect at once); the second
    # brought a few bytes only, so its reconnection counts as the second in a row.
    assert [(e.attempt, e.delay == 0) for e in events] == [(1, True), (2, False)]
    assert events[0].offset >= 100_000 and events[1].offset > events[0].offset
    assert server.ranges[0] == ("/small.tar", events[0].offset)


def test_pauses_of_the_reader_between_reads_do_not_count_against_the_timeout(served) -> None:
    server, url = served
    events: list[Reconnection] = []
    with open_source(url, policy=policy(events, timeout=0.2)) as source:
        first = source.stream.read(1000)
        time.sleep(0.4)  # a training step, say: the server is not slow
        rest = source.stream.read()
    assert first + rest == DATA and events == []


@pytest.mark.parametrize("code", [500, 503, 429])
def test_error_statuses_are_retried_at_the_start_and_mid_read(served, code: int) -> None:
    server, url = served
    server.fail("/x.tar", status(code), drop(100_000), status(code), status(code))
    events: list[Reconnection] = []
    assert read(url, events) == DATA
    assert [(e.offset, e.attempt) for e in events] == [
        (0, 1),
        (100_000, 1),
        (100_000, 2),
        (100_000, 3),
    ]
    assert events[0].cause.startswith(f"HTTP {code} ")


def test_retry_after_is_honoured(served) -> None:
    server, url = served
    server.fail("/x.tar", drop(10), status(503, retry_after=1))
    events: list[Reconnection] = []
    started = time.monotonic()
    assert read(url, events) == DATA
    assert time.monotonic() - started >= 1
    assert [e.delay for e in events] == [0.0, 1.0]


def test_retry_after_is_capped_and_an_http_date_understood() -> None:
    assert RetryPolicy().delay(1, 3600.0, jitter=1.0) == 60.0
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= retry_after(date) <= 30  # type: ignore[operator]


def test_backoff_doubles_with_jitter_up_to_its_cap() -> None:
    waits = [RetryPolicy().delay(n, None) for n in range(1, 10)]
    assert 0.25 <= waits[0] <= 0.5 and 0.5 <= waits[1] <= 1.0 and 15 <= waits[-1] <= 30


def test_a_server_that_ignores_ranges_is_read_past_the_bytes_delivered(served) -> None:
    server, url = served
    server.honour_ranges = False
    server.fail("/x.tar", drop(2_000_000))
    events: list[Reconnection] = []
    assert read(url, events) == DATA
    assert read(url, events, start=123_456) == DATA[123_456:]
    assert server.ranges == [] and len(events) == 1


def test_reading_from_an_offset_resumes_from_there(served) -> None:
    server, url = served
    server.fail("/x.tar", drop(300_000))
    events: list[Reconnection] = []
    assert read(url, events, start=1_000_000) == DATA[1_000_000:]
    assert server.ranges == [("/x.tar", 1_000_000), ("/x.tar", 1_300_000)]


def test_reading_from_the_end_gives_nothing_and_from_beyond_it_an_error(served) -> None:
    server, url = served
    assert read(url, [], start=len(DATA)) == b""
    with pytest.raises(SourceError) as info:
        read(url, [], start=len(DATA) + 1)
    assert str(info.value) == f"{url}: input ends before byte {len(DATA) + 1}"


@pytest.mark.parametrize("if_range", [True, False])
def test_an_object_replaced_mid_read_is_a_changed_error(served, if_range: bool) -> None:
    server, url = served
    server.honour_if_range = if_range
    server.fail("/x.tar", replace(1_000_000, DATA[::-1]))
    with pytest.raises(SourceError, match="changed while being read") as info:
        read(url, [])
    assert info.value.reason == SourceError.CHANGED
    assert str(info.value).startswith(f"{url}: changed while being read (its ETag was ")


def test_without_validators_a_new_length_is_a_changed_error(served) -> None:
    server, url = served
    server.validators = False
    server.fail("/x.tar", replace(1_000_000, DATA + b"more"))
    with pytest.raises(SourceError) as info:
        read(url, [])
    assert str(info.value) == (
        f"{url}: changed while being read (it was 3000000 bytes long, now 3000004)"
    )


def test_an_object_deleted_mid_read_is_a_changed_error(served) -> None:
    server, url = served
    server.fail("/x.tar", drop(10))
    source = open_source(url, policy=policy([]))
    del server.files["/x.tar"]
    with pytest.raises(SourceError, match=r"changed while being read \(HTTP 404 Not Found\)$"):
        source.stream.read()


def test_when_reconnections_run_out_the_error_says_where_and_why(served) -> None:
    server, url = served
    server.cut["/x.tar"] = 2_000_000
    events: list[Reconnection] = []
    with pytest.raises(SourceError) as info:
        read(url, events, retries=2)
    assert str(info.value) == (
        f"{url}: connection closed after 2000000 of 3000000 bytes (gave up after 2 reconnections)"
    )
    assert [(e.offset, e.attempt, e.retries) for e in events] == [
        (2_000_000, 1, 2),
        (2_000_000, 2, 2),
    ]


def test_with_no_retries_the_first_failure_is_the_error(served) -> None:
    server, url = served
    server.cut["/x.tar"] = 50_000
    with pytest.raises(SourceError) as info:
        read(url, [], retries=0)
    assert str(info.value) == f"{url}: connection closed after 50000 of 3000000 bytes"


def test_a_refused_connection_is_retried_then_an_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    events: list[Reconnection] = []
    with pytest.raises(SourceError, match=r"cannot connect: .*\(gave up after 1 reconnection\)$"):
        read(f"http://127.0.0.1:{port}/x.tar", events, retries=1)
    assert len(events) == 1 and events[0].offset == 0


def test_a_missing_object_is_not_retried(served) -> None:
    server, url = served
    events: list[Reconnection] = []
    with pytest.raises(SourceError) as info:
        read(f"{server.url}/missing.tar", events)
    assert info.value.reason == SourceError.MISSING and events == []


def test_the_process_reporter_hears_reads_without_their_own(served) -> None:
    server, url = served
    server.fail("/x.tar", drop(5))
    heard: list[Reconnection] = []
    previous = report_reconnections(heard.append)
    try:
        with open_source(url, policy=RetryPolicy(backoff=0.01)) as source:
            assert source.stream.read() == DATA
    finally:
        report_reconnections(previous)
    assert [str(e) for e in heard] == [
        f"{url}: reconnecting at byte 5 after connection closed after 5 of 3000000 bytes "
        "(attempt 1 of 5)"
    ]


def test_settings_come_from_arguments_then_the_environment_then_defaults(monkeypatch) -> None:
    monkeypatch.delenv("TARKIT_RETRIES", raising=False)
    monkeypatch.delenv("TARKIT_TIMEOUT", raising=False)
    assert (retry_policy().retries, retry_policy().timeout) == (5, 30.0)
    monkeypatch.setenv("TARKIT_RETRIES", "2")
    monkeypatch.setenv("TARKIT_TIMEOUT", "1.5")
    assert (retry_policy().retries, retry_policy().timeout) == (2, 1.5)
    assert (retry_policy(7, 3).retries, retry_policy(7, 3).timeout) == (7, 3)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("TARKIT_RETRIES", "many", "TARKIT_RETRIES must be a whole number, not 'many'"),
        ("TARKIT_RETRIES", "-1", "TARKIT_RETRIES must be 0 or more, not '-1'"),
        ("TARKIT_TIMEOUT", "0", "TARKIT_TIMEOUT must be above 0, not '0'"),
    ],
)
def test_malformed_settings_are_usage_errors(monkeypatch, name, value, message) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(UsageError) as info:
        retry_policy()
    assert str(info.value) == message


# --- HTTPS: the handshake and a proxy's answer count against the same budget -------------


@pytest.fixture
def tls_trust(tmp_path, monkeypatch) -> tuple[object, object]:
    """A certificate for 127.0.0.1 that this process trusts (``SSL_CERT_FILE``)."""
    from tls_server import certificate

    cert, key = certificate(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    return cert, key


@pytest.mark.parametrize(("spread", "fails"), [(0.01, False), (0.65, True)], ids=["fast", "slow"])
def test_a_tls_handshake_and_the_headers_after_it_share_one_timeout(tls_trust, spread, fails):
    from tls_server import SlowTlsServer

    # Each of the two takes `spread` seconds: less than the timeout alone, more together.
    server = SlowTlsServer(*tls_trust, DATA[:5000], handshake=spread, headers=spread)  # type: ignore[arg-type]
    url = f"{server.url}/x.tar"
    started = time.monotonic()
    try:
        if not fails:
            assert read(url, [], timeout=1.0, retries=0) == DATA[:5000]
            return
        with pytest.raises(SourceError) as info:
            read(url, [], timeout=1.0, retries=0)
        assert str(info.value).startswith(f"{url}: headers too slow: the answer was not complete "
                                          "within 1 s") or "no answer within 1 s" in str(info.value)  # fmt: skip
        assert time.monotonic() - started < 1.0 + spread  # (not both spreads)
    finally:
        server.stop()


def test_a_proxy_that_trickles_its_answer_to_connect_is_cut_at_the_timeout(tls_trust, monkeypatch):
    import threading

    from tls_server import TrickleProxy

    proxy = TrickleProxy()
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("https_proxy", proxy.url)
    failed: list[BaseException] = []

    def fetch() -> None:
        try:
            read("https://127.0.0.1:9/x.tar", [], timeout=0.5, retries=0)
        except BaseException as exc:  # noqa: BLE001 (what ended it, for the test to see)
            failed.append(exc)

    reader = threading.Thread(target=fetch, daemon=True)
    started = time.monotonic()
    reader.start()
    reader.join(timeout=10)
    proxy.stop()  # (an unbounded wait ends here)
    assert time.monotonic() - started < 3 and failed, "the proxy kept the reader waiting"
    assert isinstance(failed[0], SourceError), failed
    assert "within 0.5 s" in str(failed[0])
