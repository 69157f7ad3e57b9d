"""The loader over a faulty HTTP server on 127.0.0.1: every sample once, reconnections counted."""

from __future__ import annotations

import time
import warnings
from collections import Counter
from pathlib import Path

import pytest
from conftest import make_tar
from shard_server import ShardServer, drop, replace, reset, slow_headers, stall, status, trickle
from torch.utils.data import DataLoader

from tarkit.errors import SourceError
from tarkit.format.manifest import Manifest
from tarkit.loading import ShardDataset
from tarkit.writing.index import index_shard

SHARDS = 4
PER_SHARD = 60


def shard(n: int) -> bytes:
    return make_tar(
        (f"s{n}-{i:03d}.{field}", bytes([n, i % 251]) * 4000)
        for i in range(PER_SHARD)
        for field in ("bin", "cls")
    )


@pytest.fixture
def urls(http_server: ShardServer) -> list[str]:
    for n in range(SHARDS):
        http_server.files[f"/d/s-{n}.tar"] = shard(n)
    return [f"{http_server.url}/d/s-{n}.tar" for n in range(SHARDS)]


EVERY_KEY = Counter(f"s{n}-{i:03d}" for n in range(SHARDS) for i in range(PER_SHARD))
FAULTS = {
    0: [drop(100_000), reset(300_000)],
    1: [stall(200_000, seconds=20)],
    2: [status(503), drop(50_000), status(500)],
}


def inject(server: ShardServer) -> int:
    for n, faults in FAULTS.items():
        server.fail(f"/d/s-{n}.tar", *faults)
    return sum(len(faults) for faults in FAULTS.values())


def keys(dataset: ShardDataset, workers: int = 2) -> Counter[str]:
    loader = DataLoader(dataset, batch_size=None, num_workers=workers)
    return Counter(sample["__key__"] for sample in loader)


def test_two_workers_deliver_every_sample_once_through_drops_stalls_and_5xx(
    http_server: ShardServer, urls: list[str]
) -> None:
    expected = inject(http_server)
    dataset = ShardDataset(urls, timeout=1)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert keys(dataset) == EVERY_KEY
    assert dataset.skipped.reconnections == expected
    assert not dataset.skipped  # nothing was skipped: the reads went on


def test_pieces_read_from_manifest_offsets_resume_too(
    http_server: ShardServer, urls: list[str], tmp_path
) -> None:
    manifest = str(tmp_path / "manifest.json")
    entries = []
    for n in range(3):
        (tmp_path / f"s-{n}.tar").write_bytes(shard(n))
        entries.append(
            index_shard(str(tmp_path / f"s-{n}.tar"), offsets=True, manifest_path=manifest)
        )
    Path(manifest).write_bytes(Manifest(entries, manifest).to_bytes())  # version 1: offsets
    http_server.files["/d/manifest.json"] = (tmp_path / "manifest.json").read_bytes()
    inject(http_server)
    dataset = ShardDataset(f"{http_server.url}/d/manifest.json", timeout=1)
    # 3 shards for 2 workers: the second worker starts mid-shard, from a byte offset.
    assert keys(dataset) == Counter(k for k in EVERY_KEY if not k.startswith("s3-"))
    assert any(path == "/d/s-1.tar" for path, _ in http_server.ranges)
    assert dataset.skipped.reconnections >= 3


def test_the_cache_rides_through_the_same_faults(
    http_server: ShardServer, urls: list[str], tmp_path
) -> None:
    expected = inject(http_server)
    dataset = ShardDataset(urls, timeout=1, cache_dir=str(tmp_path / "cache"))
    assert keys(dataset) == EVERY_KEY
    assert dataset.skipped.reconnections == expected
    cached = sorted(p.read_bytes() for p in (tmp_path / "cache").glob("*.tar"))
    assert cached == sorted(shard(n) for n in range(SHARDS))


def test_a_shard_replaced_mid_epoch_is_a_changed_error_or_a_skip(
    http_server: ShardServer, urls: list[str]
) -> None:
    http_server.fail("/d/s-3.tar", replace(200_000, shard(2)))
    with pytest.raises(SourceError, match="s-3.tar: changed while being read"):
        keys(ShardDataset(urls[3:], timeout=1), workers=0)
    http_server.put("/d/s-3.tar", shard(3))
    http_server.fail("/d/s-3.tar", replace(200_000, shard(2)))
    dataset = ShardDataset(urls[3:], timeout=1, handler="skip")
    with pytest.warns(UserWarning, match="changed while being read"):
        got = keys(dataset, workers=0)
    assert 0 < sum(got.values()) < PER_SHARD and dataset.skipped.total_shards == 1


def test_one_warning_names_the_first_reconnection(
    http_server: ShardServer, urls: list[str]
) -> None:
    http_server.fail("/d/s-0.tar", drop(1000), drop(2000))
    dataset = ShardDataset(urls[:1], timeout=1)
    with pytest.warns(UserWarning) as caught:
        keys(dataset, workers=0)
    messages = [str(w.message) for w in caught if "reconnect" in str(w.message)]
    assert messages == [
        f"tarkit: {urls[0]}: reconnecting at byte 1000 after connection closed after 1000 of "
        f"{len(shard(0))} bytes (attempt 1 of 5); reconnections are counted in "
        "ShardDataset.skipped.reconnections"
    ]
    assert dataset.skipped.reconnections == 2


def test_tarkit_loader_takes_its_settings_from_the_environment(
    http_server: ShardServer, urls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tarkit

    monkeypatch.setenv("TARKIT_TIMEOUT", "1")  # the workers read it when they open a shard
    expected = inject(http_server)
    loader = tarkit.loader(urls, batch_size=10, num_workers=2)
    got = Counter(key for batch in loader for key in batch["__key__"])
    assert got == EVERY_KEY
    assert loader.skipped.reconnections == expected


def test_a_download_cut_without_a_length_is_not_cached_and_the_next_epoch_reads_whole(
    http_server: ShardServer, urls: list[str], tmp_path
) -> None:
    http_server.lengths = False  # a cut body then looks whole to HTTP
    http_server.fail("/d/s-0.tar", drop(len(shard(0)) * 6 // 10))
    dataset = ShardDataset(urls[:1], cache_dir=str(tmp_path / "cache"), handler="skip")
    with pytest.warns(UserWarning, match="input ends"):
        first = keys(dataset, workers=0)
    assert sum(first.values()) < PER_SHARD and dataset.skipped.total_shards == 1
    assert keys(dataset, workers=0) == Counter(k for k in EVERY_KEY if k.startswith("s0-"))
    assert not dataset.skipped
    cached = [p.read_bytes() for p in (tmp_path / "cache").glob("*.tar")]
    assert cached == [shard(0)]


# Each trickle would end in about 3 s without the budget, so the test fails, not hangs.
@pytest.mark.parametrize(
    ("fault", "cause"),
    [
        (slow_headers(0.02), "headers too slow: the answer was not complete within 0.5 s"),
        (trickle(len(shard(0)) - 300, 0.02), "body too slow: under 64 KiB per 0.5 s"),
    ],
    ids=["headers", "body"],
)
def test_a_trickling_server_is_a_clear_error_after_the_timeout(
    http_server: ShardServer, urls: list[str], fault, cause
) -> None:
    http_server.fail("/d/s-0.tar", fault)
    dataset = ShardDataset(urls[:1], timeout=0.5, retries=0)
    started = time.monotonic()
    with pytest.raises(SourceError) as info:
        keys(dataset, workers=0)
    assert time.monotonic() - started < 2.5
    assert str(info.value) == f"{urls[0]}: {cause}"
