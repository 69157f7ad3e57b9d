"""The commands over a faulty HTTP server on 127.0.0.1: output byte-identical to the local
file's, one warning line per reconnection, or the exact error."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from conftest import make_tar, run
from shard_server import ShardServer, drop, replace, reset, slow_headers, stall, status, trickle

from tarkit.format.samples import group_samples
from tarkit.format.tar import read_members

ARCHIVE = make_tar((f"{i:04d}.bin", bytes([i % 251]) * 30_000) for i in range(200))
SIZE = len(ARCHIVE)
FAST = {"TARKIT_TIMEOUT": "1"}


@pytest.fixture
def url(http_server: ShardServer, tmp_path: Path) -> str:
    http_server.files["/a.tar"] = ARCHIVE
    (tmp_path / "a.tar").write_bytes(ARCHIVE)
    return f"{http_server.url}/a.tar"


def tarcat(url: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    import os

    return run(["tarcat", url], env={**os.environ, **FAST, **(env or {})}, timeout=60)


def warnings_of(stderr: str) -> list[str]:
    return [line.removeprefix("tarcat: warning: ") for line in stderr.splitlines()]


@pytest.mark.parametrize(
    ("faults", "causes"),
    [
        (
            [drop(1_000_000), drop(2_500_000)],
            [
                f"connection closed after 1000000 of {SIZE} bytes",
                f"connection closed after 3500000 of {SIZE} bytes",
            ],
        ),
        ([stall(2_000_000, seconds=20)], ["no data for 1 s"]),
        (
            [status(503), drop(4_000_000), status(429, retry_after=1)],
            [
                "HTTP 503 Service Unavailable",
                f"connection closed after 4000000 of {SIZE} bytes",
                "HTTP 429 Too Many Requests",
            ],
        ),
    ],
    ids=["drops", "stall", "statuses"],
)
def test_tarcat_over_faults_is_byte_identical_with_one_warning_per_reconnection(
    http_server: ShardServer, url: str, faults, causes
) -> None:
    http_server.fail("/a.tar", *faults)
    result = tarcat(url)
    assert result.returncode == 0, result.stderr
    assert result.stdout == run(["tarcat", "-"], input=ARCHIVE).stdout
    lines = warnings_of(result.stderr)
    assert len(lines) == len(causes), result.stderr
    for line, cause in zip(lines, causes, strict=True):
        assert (
            line.startswith(f"{url}: reconnecting at byte ") and f" after {cause} (attempt" in line
        )


def test_tarcat_survives_a_reset_and_a_server_that_ignores_ranges(
    http_server: ShardServer, url: str
) -> None:
    http_server.honour_ranges = False
    http_server.fail("/a.tar", reset(1_500_000), drop(3_000_000))
    result = tarcat(url)
    assert (result.returncode, len(warnings_of(result.stderr))) == (0, 2), result.stderr
    assert result.stdout == run(["tarcat", "-"], input=ARCHIVE).stdout


def whole_samples(part: bytes) -> bool:
    """``part`` is ARCHIVE cut at a sample boundary, without an end marker."""
    offsets = [s.members[0].offset for s in group_samples(read_members(io.BytesIO(ARCHIVE)))]
    return ARCHIVE.startswith(part) and len(part) in offsets


def test_a_file_replaced_mid_read_fails_with_whole_samples_only(
    http_server: ShardServer, url: str
) -> None:
    http_server.fail("/a.tar", replace(2_000_000, ARCHIVE[:-1024] + bytes(2048)))
    result = tarcat(url)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith(
        f"tarcat: error: {url}: changed while being read (its ETag was "
    )
    assert whole_samples(result.stdout)


def test_when_reconnections_run_out_tarcat_exits_2_after_its_warnings(
    http_server: ShardServer, url: str
) -> None:
    http_server.cut["/a.tar"] = 3_000_000
    result = tarcat(url, {"TARKIT_RETRIES": "2"})
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 3 and all(" reconnecting at byte 3000000 " in line for line in lines[:2])
    assert lines[2] == (
        f"tarcat: error: {url}: connection closed after 3000000 of {SIZE} bytes "
        "(gave up after 2 reconnections)"
    )
    assert whole_samples(result.stdout)


def test_a_server_that_stops_sending_is_an_error_within_the_timeout(
    http_server: ShardServer, url: str
) -> None:
    http_server.fail("/a.tar", stall(1_000_000), stall(0))
    started = time.monotonic()
    result = tarcat(url, {"TARKIT_RETRIES": "1"})
    assert time.monotonic() - started < 10
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        f"tarcat: error: {url}: no data for 1 s (gave up after 1 reconnection)"
    )


# Each trickle would end in about 3 s without the budget (150 header bytes, one per 20 ms;
# the last 300 bytes of the body, two per 20 ms), so the test fails rather than hangs.
@pytest.mark.parametrize(
    ("fault", "cause"),
    [
        (slow_headers(0.02), "headers too slow: the answer was not complete within 0.5 s"),
        (trickle(SIZE - 300, 0.02), "body too slow: under 64 KiB per 0.5 s"),
    ],
    ids=["headers", "body"],
)
def test_a_server_that_trickles_is_an_error_naming_what_was_too_slow(
    http_server: ShardServer, url: str, fault, cause
) -> None:
    http_server.fail("/a.tar", fault)
    started = time.monotonic()
    result = tarcat(url, {"TARKIT_TIMEOUT": "0.5", "TARKIT_RETRIES": "0"})
    assert time.monotonic() - started < 2.5
    assert (result.returncode, result.stderr) == (2, f"tarcat: error: {url}: {cause}\n")
    assert result.stdout == b"" if fault.kind == "slow_headers" else whole_samples(result.stdout)


def test_a_malformed_setting_is_a_usage_error(url: str) -> None:
    result = tarcat(url, {"TARKIT_RETRIES": "lots"})
    assert (result.returncode, result.stderr) == (
        2,
        "tarcat: error: TARKIT_RETRIES must be a whole number, not 'lots'\n",
    )
