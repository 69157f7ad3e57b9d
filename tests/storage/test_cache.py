"""The shard cache: one download per machine, a hard LRU size bound over its own files only,
reading while downloading, and a download kept only when it is whole."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_tar
from shard_server import ShardServer, drop

from tarkit.errors import InputError, OutputError, SourceError, TruncatedError
from tarkit.storage.cache import ShardCache, cache_name


@pytest.fixture
def server() -> Iterator[ShardServer]:
    s = ShardServer()
    yield s
    s.stop()


def read_all(cache: ShardCache, url: str) -> bytes:
    with cache.open(url) as source:
        return source.stream.read()


def payload(i: int, size: int = 100_000) -> bytes:
    return bytes([i % 251]) * size


def files_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if not p.name.endswith(".lock"))


def test_names_come_from_the_full_url_so_equal_base_names_do_not_collide(tmp_path, server):
    server.files["/a/shard-0.tar"] = payload(1)
    server.files["/b/shard-0.tar"] = payload(2)
    cache = ShardCache(str(tmp_path))
    assert read_all(cache, f"{server.url}/a/shard-0.tar") == payload(1)
    assert read_all(cache, f"{server.url}/b/shard-0.tar") == payload(2)
    assert cache_name(f"{server.url}/a/shard-0.tar").endswith("-shard-0.tar")
    assert len(files_in(tmp_path)) == 2


def test_second_open_reads_the_cached_file_without_a_request(tmp_path, server):
    server.files["/s.tar"] = payload(3)
    cache = ShardCache(str(tmp_path))
    url = f"{server.url}/s.tar"
    assert read_all(cache, url) == payload(3)
    assert read_all(cache, url) == payload(3)
    assert server.hits["/s.tar"] == 1
    assert Path(cache.path_for(url)).read_bytes() == payload(3)


def test_reading_starts_before_the_download_ends(tmp_path, server):
    server.files["/slow.tar"] = payload(4, 300_000)
    released = threading.Event()
    server.gates["/slow.tar"] = (50_000, released)
    cache = ShardCache(str(tmp_path))
    source = cache.open(f"{server.url}/slow.tar")
    first = source.stream.read1(10_000)
    assert first and not released.is_set()  # the server is still holding back the rest
    assert not os.path.exists(cache.path_for(f"{server.url}/slow.tar"))
    released.set()
    rest = b"".join(iter(lambda: source.stream.read1(1 << 16), b""))
    source.close()
    assert first + rest == payload(4, 300_000)
    assert Path(cache.path_for(f"{server.url}/slow.tar")).read_bytes() == payload(4, 300_000)


def test_closing_early_finishes_and_publishes_the_download(tmp_path, server):
    server.files["/s.tar"] = payload(5)
    cache = ShardCache(str(tmp_path))
    with cache.open(f"{server.url}/s.tar") as source:
        source.stream.read1(1000)
        source.close(early=True)
    source.thread.join(10)  # the download goes on in the background
    assert Path(cache.path_for(f"{server.url}/s.tar")).read_bytes() == payload(5)


def test_a_reader_that_stops_consuming_does_not_hold_up_others(tmp_path, server):
    # Two DDP ranks on one machine reading pieces of one shard: rank 0 pauses (waiting in
    # an all-reduce for rank 1), rank 1 waits for the shard. The download must finish.
    server.files["/s.tar"] = payload(11, 3_000_000)
    url = f"{server.url}/s.tar"
    cache = ShardCache(str(tmp_path))
    paused = cache.open(url)
    first = paused.stream.read1(1000)
    other: list[bytes] = []
    waiter = threading.Thread(target=lambda: other.append(read_all(cache, url)), daemon=True)
    waiter.start()
    waiter.join(20)
    assert other == [payload(11, 3_000_000)]
    rest = paused.stream.read()
    paused.close()
    assert first + rest == payload(11, 3_000_000)
    assert server.hits["/s.tar"] == 1


def test_an_exception_abandons_the_download_and_leaves_no_file(tmp_path, server):
    # The gate holds the body halfway, so the download is in flight when the consumer
    # fails; the timer lets the server go on while the abandon waits for the thread.
    gate = threading.Event()
    server.files["/s.tar"] = payload(6)
    server.gates["/s.tar"] = (50_000, gate)
    cache = ShardCache(str(tmp_path))
    release = threading.Timer(0.3, gate.set)
    with pytest.raises(KeyError), cache.open(f"{server.url}/s.tar") as source:
        source.stream.read1(1000)
        release.start()
        raise KeyError("consumer failed")
    release.join()
    assert files_in(tmp_path) == []
    assert read_all(cache, f"{server.url}/s.tar") == payload(6)  # the lock was released


def test_a_download_finished_before_an_exception_stays_cached_whole(tmp_path, server):
    server.files["/s.tar"] = payload(8)
    url = f"{server.url}/s.tar"
    cache = ShardCache(str(tmp_path))
    with pytest.raises(KeyError), cache.open(url) as source:
        source.stream.read1(1000)
        source.thread.join(10)  # the whole body is in and published
        raise KeyError("consumer failed")
    assert Path(cache.path_for(url)).read_bytes() == payload(8)
    assert read_all(cache, url) == payload(8)
    assert server.hits["/s.tar"] == 1


def test_a_cut_download_is_a_source_error_and_is_not_cached(tmp_path, server, monkeypatch):
    server.files["/cut.tar"] = payload(7)
    server.cut["/cut.tar"] = 40_000
    monkeypatch.setenv("TARKIT_RETRIES", "0")
    cache = ShardCache(str(tmp_path))
    with pytest.raises(SourceError, match="connection closed after 40000 of 100000 bytes"):
        read_all(cache, f"{server.url}/cut.tar")
    assert files_in(tmp_path) == []


def test_size_bound_is_never_exceeded_and_least_recently_used_shards_go(tmp_path, server):
    for i in range(6):
        server.files[f"/s{i}.tar"] = payload(i)
    cache = ShardCache(str(tmp_path), max_bytes=350_000)
    urls = [f"{server.url}/s{i}.tar" for i in range(6)]
    for i in (0, 1, 2):
        read_all(cache, urls[i])
    read_all(cache, urls[0])  # 0 is now more recent than 1 and 2
    with cache.open(urls[3]) as source:  # in the middle of a download, too
        source.stream.read1(60_000)
        assert cache.usage() <= 350_000
        source.stream.read()
    assert cache.usage() <= 350_000
    cached = {url for url in urls if os.path.exists(cache.path_for(url))}
    assert cached == {urls[0], urls[2], urls[3]}
    for url in urls[4:]:
        assert read_all(cache, url) == payload(urls.index(url))
        assert cache.usage() <= 350_000


def test_a_shard_larger_than_the_cache_is_read_but_not_cached(tmp_path, server):
    server.files["/big.tar"] = payload(8, 500_000)
    cache = ShardCache(str(tmp_path), max_bytes="200K")
    assert read_all(cache, f"{server.url}/big.tar") == payload(8, 500_000)
    assert files_in(tmp_path) == [] and cache.usage() == 0


def test_a_part_file_left_by_a_dead_process_is_removed_when_room_is_needed(tmp_path, server):
    server.files["/s.tar"] = payload(9)
    stale = tmp_path / (cache_name("http://gone/x.tar") + ".part-999999")
    stale.write_bytes(b"x" * 90_000)
    cache = ShardCache(str(tmp_path), max_bytes=150_000)
    assert read_all(cache, f"{server.url}/s.tar") == payload(9)
    assert not stale.exists()
    assert cache.usage() == 100_000


def _read_in_child(directory: str, url: str, queue: multiprocessing.Queue) -> None:
    queue.put(read_all(ShardCache(directory), url))


def test_many_processes_download_a_shard_once(tmp_path, server):
    server.files["/shared.tar"] = payload(10, 400_000)
    released = threading.Event()
    server.gates["/shared.tar"] = (10_000, released)
    url = f"{server.url}/shared.tar"
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    children = [
        context.Process(target=_read_in_child, args=(str(tmp_path), url, queue)) for _ in range(4)
    ]
    for child in children:
        child.start()
    threading.Timer(1.0, released.set).start()  # all four are waiting by then
    results = [queue.get(timeout=30) for _ in children]
    for child in children:
        child.join(30)
    assert results == [payload(10, 400_000)] * 4
    assert server.hits["/shared.tar"] == 1


SHARD = make_tar((f"s{i:03d}.bin", bytes([i]) * 5000) for i in range(20))


def test_a_download_cut_where_the_server_gave_no_length_is_an_error_and_is_not_kept(
    tmp_path, server
):
    # Without Content-Length a closed connection looks like the end of the body: only the
    # archive's own end tells the download is whole.
    server.lengths = False
    server.files["/s.tar"] = SHARD
    server.fail("/s.tar", drop(len(SHARD) * 6 // 10))
    cache = ShardCache(str(tmp_path))
    url = f"{server.url}/s.tar"
    with pytest.raises(TruncatedError, match=r"/s\.tar: input ends "):
        read_all(cache, url)
    assert files_in(tmp_path) == []
    assert read_all(cache, url) == SHARD  # the next epoch: whole, and now cached
    assert Path(cache.path_for(url)).read_bytes() == SHARD


@pytest.mark.parametrize(
    ("size", "sha256", "message"),
    [
        (len(SHARD), "0" * 64, "the downloaded shard's sha256 is "),
        (len(SHARD) + 512, None, f"the shard is {len(SHARD)} bytes, the manifest says "),
    ],
    ids=["sha256", "bytes"],
)
def test_a_download_unlike_the_manifest_is_refused_and_not_kept(
    tmp_path, server, size, sha256, message
):
    server.files["/s.tar"] = SHARD
    cache = ShardCache(str(tmp_path))
    url = f"{server.url}/s.tar"
    with (
        pytest.raises(InputError, match=message) as info,
        cache.open(url, size=size, sha256=sha256) as source,
    ):
        source.stream.read()
    assert info.value.reason == InputError.MISMATCH and info.value.source == url
    assert files_in(tmp_path) == []
    right = hashlib.sha256(SHARD).hexdigest()
    with cache.open(url, size=len(SHARD), sha256=right) as source:
        assert source.stream.read() == SHARD
    assert Path(cache.path_for(url, right)).read_bytes() == SHARD


def test_a_cached_shard_whose_manifest_gives_another_sha256_is_downloaded_again(tmp_path, server):
    url = f"{server.url}/s.tar"
    cache = ShardCache(str(tmp_path))
    again = make_tar((f"s{i:03d}.bin", bytes([i + 1]) * 5000) for i in range(20))
    for version in (SHARD, again):  # the shard written again, of the same size
        server.files["/s.tar"] = version
        digest = hashlib.sha256(version).hexdigest()
        with cache.open(url, size=len(SHARD), sha256=digest) as source:
            assert source.stream.read() == version
    assert server.hits["/s.tar"] == 2


def test_a_cut_download_is_refused_by_the_manifest_length_too(tmp_path, server):
    server.lengths = False
    server.files["/s.tar"] = SHARD
    server.fail("/s.tar", drop(len(SHARD) - 1024))
    cache = ShardCache(str(tmp_path))
    url = f"{server.url}/s.tar"
    with pytest.raises(InputError, match=f"ended after {len(SHARD) - 1024} bytes, the manifest"):
        with cache.open(url, size=len(SHARD)) as source:
            source.stream.read()
    assert files_in(tmp_path) == []


def test_a_cached_shard_of_another_size_than_the_manifest_is_downloaded_again(tmp_path, server):
    server.files["/s.tar"] = SHARD
    cache = ShardCache(str(tmp_path))
    url = f"{server.url}/s.tar"
    Path(cache.path_for(url)).write_bytes(SHARD[: len(SHARD) // 2])  # an old cut download
    with cache.open(url, size=len(SHARD)) as source:
        assert source.stream.read() == SHARD
    assert Path(cache.path_for(url)).read_bytes() == SHARD and server.hits["/s.tar"] == 1


def test_eviction_leaves_files_and_directories_it_did_not_make(tmp_path, server):
    notes = tmp_path / "my-notes.txt"
    notes.write_bytes(b"n" * 100_000)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "kept.txt").write_bytes(b"k" * 100_000)
    (tmp_path / ("0" * 32 + "-dir")).mkdir()  # a directory with a name like the cache's
    cache = ShardCache(str(tmp_path), max_bytes="200K")
    for i in range(4):
        server.files[f"/s{i}.tar"] = payload(i)
        assert read_all(cache, f"{server.url}/s{i}.tar") == payload(i)
        assert cache.usage() <= 200_000
    assert notes.read_bytes() == b"n" * 100_000
    assert (tmp_path / "sub" / "kept.txt").read_bytes() == b"k" * 100_000
    assert (tmp_path / ("0" * 32 + "-dir")).is_dir()
    assert os.path.exists(cache.path_for(f"{server.url}/s3.tar"))  # the cache still caches


@pytest.mark.parametrize("where", ["", ".lock"], ids=["shard", "lock"])
def test_a_directory_where_a_cache_file_would_go_is_read_past_not_an_error(tmp_path, server, where):
    server.files["/s.tar"] = payload(12)
    cache = ShardCache(str(tmp_path), max_bytes="1M")
    url = f"{server.url}/s.tar"
    os.mkdir(cache.path_for(url) + where)
    assert read_all(cache, url) == payload(12)
    assert read_all(cache, url) == payload(12)
    assert os.path.isdir(cache.path_for(url) + where)


def test_a_full_cache_disk_is_an_output_error_naming_its_file_system(small_disk, server):
    server.files["/big.tar"] = payload(5, 600_000)
    url = f"{server.url}/big.tar"
    with pytest.raises(OutputError) as info:
        read_all(ShardCache(str(small_disk)), url)
    assert re.fullmatch(
        rf"{url}: cannot cache: no space left on the file system of "
        rf"{re.escape(str(small_disk))} \([\d.]+ \w+ free\)", str(info.value)
    ), info.value  # fmt: skip
    assert files_in(small_disk) == []
