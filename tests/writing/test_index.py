"""index_shard: counts, stored bytes, sha256, keys and offsets of one shard."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from conftest import make_tar

from tarkit.errors import SampleError, UsageError
from tarkit.writing.index import index_shard, index_shards


def test_entry_of_a_shard_with_offsets(tmp_path: Path) -> None:
    data = make_tar([("a.txt", b"x"), ("a.cls", b"1"), ("b.txt", b"y" * 600), ("README", b"")])
    path = tmp_path / "s.tar"
    path.write_bytes(data)
    info = index_shard(str(path), offsets=True, manifest_path=str(tmp_path / "m.json"))
    assert (info.url, info.samples, info.bytes) == ("s.tar", 2, len(data))
    assert info.sha256 == hashlib.sha256(data).hexdigest()
    assert (info.keys, info.offsets) == (["a", "b"], [0, 2048])
    with pytest.raises(SampleError, match="not allowed with --strict"):
        index_shard(str(path), strict=True)


def test_the_hash_covers_bytes_after_the_end_marker(tmp_path: Path) -> None:
    data = make_tar([("a.txt", b"x")]) + bytes(10240)
    path = tmp_path / "s.tar"
    path.write_bytes(data)
    info = index_shard(str(path))
    assert info.bytes == len(data)
    assert info.sha256 == hashlib.sha256(data).hexdigest()


def test_many_shards_in_the_given_order(tmp_path: Path) -> None:
    for n in range(3):
        (tmp_path / f"s{n}.tar").write_bytes(make_tar((f"k{i}.txt", b"") for i in range(n + 1)))
    manifest = index_shards([str(tmp_path / "s{2,0,1}.tar")])
    assert [(s.url, s.samples) for s in manifest.shards] == [
        (str(tmp_path / "s2.tar"), 3),
        (str(tmp_path / "s0.tar"), 1),
        (str(tmp_path / "s1.tar"), 2),
    ]
    with pytest.raises(UsageError):
        index_shards([])
