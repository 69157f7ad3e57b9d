"""IndexedShards, the torch-free core of random access: keys looked up in the indexes
alone, the first position of a key, --strict on a span, and which shards are indexed."""

from __future__ import annotations

import os
from array import array
from pathlib import Path

import pytest
from conftest import make_tar

from tarkit.errors import SampleError, SourceError
from tarkit.format.index import SUFFIX, index_stream
from tarkit.format.samples import SkipLog
from tarkit.storage.catalog import indexed_catalog
from tarkit.storage.indexed_shards import KeyTable, open_indexed, sort_hashes


def indexed(path: Path, members: list[tuple[str, bytes]]) -> str:
    path.write_bytes(make_tar(members))
    with open(path, "rb") as stream:
        Path(str(path) + SUFFIX).write_bytes(index_stream(stream, str(path)))
    return str(path)


@pytest.fixture
def two(tmp_path: Path) -> list[str]:
    """Two shards: keys a0 a1 dup, then b0 dup b1 (a key in both, as a stream may have)."""
    first = indexed(tmp_path / "a.tar", [("a0.txt", b"1"), ("a1.txt", b"2"), ("dup.txt", b"3")])
    second = indexed(tmp_path / "b.tar", [("b0.txt", b"4"), ("dup.txt", b"5"), ("b1.txt", b"6")])
    return [first, second]


def test_positions_of_keys_come_from_the_indexes_alone_in_order(two: list[str]) -> None:
    shards = open_indexed(two)
    for path in two:
        os.unlink(path)  # the shards' bytes are not needed to find keys
    assert list(shards.positions({"b1", "dup", "nope"})) == [2, 4, 5]
    assert list(shards.positions(["a0"])) == [0] and shards.key(-2) == "dup"
    with pytest.raises(SourceError) as caught:
        shards.read(4)
    assert caught.value.reason == SourceError.MISSING


@pytest.mark.parametrize("sort", [sort_hashes, None], ids=["python", "given"])
def test_the_key_table_gives_the_first_position_of_each_key(two: list[str], sort) -> None:  # type: ignore[no-untyped-def]
    shards = open_indexed(two)
    if sort is None:  # a caller's own sort (IndexedDataset gives torch's)

        def sort(hashes: array) -> tuple[list[int], list[int]]:
            order = sorted(range(len(hashes)), key=lambda i: (hashes[i], i))
            return [hashes[i] for i in order], order

    table = KeyTable(shards, sort)
    keys = ["a0", "a1", "dup", "b0", "dup", "b1"]
    assert [table.find(key) for key in keys] == [0, 1, 2, 3, 2, 5]
    assert table.find("nope") is None


def test_strict_refuses_a_member_the_reader_skips_in_a_span(tmp_path: Path) -> None:
    shard = indexed(tmp_path / "s.tar", [("a.txt", b"1"), ("NOTES", b"x"), ("b.txt", b"2")])
    shards = open_indexed([shard])
    skips = SkipLog()
    assert shards.read(0, skips=skips)[0].data() == {"txt": b"1"}
    assert skips.total == 1  # the member after it, in its span
    with pytest.raises(SampleError, match=r"is not allowed with --strict \(member NOTES\)$"):
        shards.read(0, strict=True)
    assert shards.read(1, strict=True)[0].key == "b"


def test_indexed_catalog_only_when_every_shard_has_a_tarkit_index(
    two: list[str], tmp_path: Path
) -> None:
    catalog = indexed_catalog(two)
    assert catalog is not None and catalog.samples == 6
    plain = tmp_path / "c.tar"
    plain.write_bytes(make_tar([("c.txt", b"7")]))
    assert indexed_catalog([*two, str(plain)]) is None  # no index: read whole instead
    Path(str(plain) + SUFFIX).write_text("0 512 c\n")  # DALI's wds2idx text, not ours
    assert indexed_catalog([*two, str(plain)]) is None
    assert indexed_catalog(["-"]) is None and indexed_catalog([two[0] + ".gz"]) is None
