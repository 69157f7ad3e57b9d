"""The shard index: made in one pass or sample by sample, read back strictly; a sample read
by it is the sample the sequential reader gives, and a shard changed after it was indexed
is caught from the bytes read, never read as another sample."""

from __future__ import annotations

import io
import pickle
import struct
import subprocess
from pathlib import Path

import pytest
from conftest import make_tar
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tarkit.errors import InputError, TruncatedError, UsageError
from tarkit.format.index import (
    HEADER_SIZE,
    ROW_SIZE,
    IndexBuilder,
    IndexEntry,
    ShardIndex,
    index_stream,
    sample_from_span,
    span_crc,
)
from tarkit.format.samples import SkipLog, group_samples
from tarkit.format.tar import read_members

# Every test here runs with the compiled scanner and with the pure-Python reader.
pytestmark = pytest.mark.usefixtures("reader")

key = st.text(alphabet="ab/_-é日0", min_size=1, max_size=8).filter(
    lambda k: not k.startswith("__") and "." not in k.rsplit("/", 1)[-1] and not k.endswith("/")
    and k.rsplit("/", 1)[-1] != ""
)  # fmt: skip
fields = st.lists(
    st.tuples(st.sampled_from(["jpg", "cls", "json", "seg.png"]), st.binary(max_size=1100)),
    min_size=1,
    max_size=3,
    unique_by=lambda f: f[0],
)
samples = st.lists(st.tuples(key, fields), max_size=8, unique_by=lambda s: s[0])


def archive_of(generated: list[tuple[str, list[tuple[str, bytes]]]]) -> bytes:
    return make_tar((f"{k}.{f}", d) for k, members in generated for f, d in members)


def sequential(shard: bytes) -> list[tuple[str, dict[str, bytes], int]]:
    """(key, fields, offset) of every sample, as the sequential reader gives them."""
    read = group_samples(read_members(io.BytesIO(shard), "s.tar"), "s.tar")
    return [(s.key, s.data(), s.members[0].offset) for s in read]


def read_by_index(shard: bytes, index: ShardIndex) -> list[tuple[str, dict[str, bytes], int]]:
    found = []
    for position in range(len(index)):
        entry = index.entry(position)
        sample = sample_from_span(entry, shard[entry.offset : entry.stop], "s.tar")
        found.append((sample.key, sample.data(), sample.members[0].offset))
    return found


def stale(shard: bytes, index: ShardIndex, position: int) -> InputError:
    entry = index.entry(position)
    with pytest.raises(InputError) as info:
        sample_from_span(entry, shard[entry.offset : entry.stop], "s.tar")
    assert info.value.reason == InputError.STALE
    return info.value


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(samples)
def test_every_sample_read_by_the_index_is_the_one_the_sequential_reader_gives(generated) -> None:  # type: ignore[no-untyped-def]
    shard = archive_of(generated)
    data = index_stream(io.BytesIO(shard), "s.tar")
    index = ShardIndex(data, "s.tar.idx")
    want = sequential(shard)
    assert len(index) == len(want)
    assert (index.shard_size, index.end) == (len(shard), len(shard) - 1024)
    assert index.keys() == [k for k, _, _ in want]
    assert index.offsets() == [offset for _, _, offset in want]
    assert read_by_index(shard, index) == want
    assert [index.position(k) for k, _, _ in want] == list(range(len(want)))
    assert len(data) == HEADER_SIZE + ROW_SIZE * len(want) + sum(len(k.encode()) for k, *_ in want)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 50), key, st.integers(0, 2**32 - 1)), max_size=20,
                unique_by=lambda row: row[1]))  # fmt: skip
def test_the_builder_gives_the_same_bytes_for_the_same_samples_and_they_read_back(rows) -> None:  # type: ignore[no-untyped-def]
    def build() -> bytes:
        builder = IndexBuilder()
        offset = 0
        for blocks, k, crc in rows:
            builder.add(offset, k, crc)
            offset += 512 * blocks
        return builder.finish(offset + 4096, offset)

    data = build()
    assert build() == data
    index = ShardIndex(data, "x.idx")
    offsets = [512 * sum(blocks for blocks, _, _ in rows[:i]) for i in range(len(rows) + 1)]
    assert [index.entry(i) for i in range(len(rows))] == [
        IndexEntry(i, k, offsets[i], offsets[i + 1], crc) for i, (_, k, crc) in enumerate(rows)
    ]
    assert index.shard_size == offsets[-1] + 4096


def test_indexing_a_shard_twice_gives_the_same_bytes(small_archive: bytes) -> None:
    first = index_stream(io.BytesIO(small_archive), "s.tar")
    assert index_stream(io.BytesIO(small_archive), "other name") == first
    stream = io.BytesIO(small_archive)
    stream.read1 = None  # type: ignore[method-assign]  # a stream with read only
    assert index_stream(stream, "s.tar") == first


@pytest.fixture(scope="module")
def gnu_shard(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A shard made by GNU tar (pax, sorted): a directory first, a README between two
    samples, a long name, a non-ASCII key, and a README after the last sample."""
    tree = tmp_path_factory.mktemp("gnu") / "tree"
    (tree / "d").mkdir(parents=True)
    files = {
        "a.cls": b"1", "a.jpg": b"A" * 700, "b.jpg": b"B" * 513, "c.txt": b"",
        "b0README": b"skipped", "d/" + "e" * 120 + ".bin": bytes(range(256)) * 3,
        "cé日.json": b"{}", "zz-README": b"trailing",
    }  # fmt: skip
    for name, data in files.items():
        (tree / name).write_bytes(data)
    shard = tree.parent / "gnu.tar"
    subprocess.run(
        ["tar", "--sort=name", "--format=pax", "-cf", str(shard), "-C", str(tree), "."],
        check=True,
    )
    return shard.read_bytes()


def test_spans_hold_the_members_the_reader_skips_after_a_sample(gnu_shard: bytes) -> None:
    index = ShardIndex(index_stream(io.BytesIO(gnu_shard), "gnu.tar"), "gnu.tar.idx")
    want = sequential(gnu_shard)
    assert index.keys() == ["./a", "./b", "./c", "./cé日", "./d/" + "e" * 120]
    assert read_by_index(gnu_shard, index) == want
    assert index.offsets()[0] > 0  # the directory "./" before the first sample is in no span
    b = index.entry(1)
    assert gnu_shard.find(b"skipped", b.offset, b.stop) > 0  # b0README, after sample b
    last = index.entry(len(index) - 1)
    assert gnu_shard.find(b"trailing", last.offset, last.stop) > 0
    assert last.stop == index.end and gnu_shard[index.end :].count(0) == len(gnu_shard) - index.end
    skips = SkipLog()
    sample_from_span(b, gnu_shard[b.offset : b.stop], "gnu.tar", skips=skips)
    assert skips.total == 1


def test_a_sample_longer_than_a_joined_span_is_read_without_a_copy_of_its_own() -> None:
    shard = make_tar([("a.bin", b"x" * 100), ("b.bin", bytes(range(256)) * 6000), ("c.bin", b"c")])
    index = ShardIndex(index_stream(io.BytesIO(shard), "s.tar"), "s.tar.idx")
    assert index.entry(1).stop - index.entry(1).offset > 1 << 20
    assert read_by_index(shard, index) == sequential(shard)


def test_a_shard_without_samples_has_an_empty_index() -> None:
    for shard in (make_tar([("README", b"no field")]), bytes(1024)):
        index = ShardIndex(index_stream(io.BytesIO(shard), "s.tar"), "s.tar.idx")
        assert (len(index), index.keys(), index.end) == (0, [], len(shard) - 1024)


def test_keys_that_are_not_utf8_are_kept_byte_for_byte() -> None:
    name = b"caf\xe9.jpg".decode("utf-8", "surrogateescape")
    shard = make_tar([(name, b"x"), ("b.jpg", b"y")])
    index = ShardIndex(index_stream(io.BytesIO(shard), "s.tar"), "s.tar.idx")
    assert index.key(0) == "caf\udce9" and index.position("caf\udce9") == 0
    assert read_by_index(shard, index) == sequential(shard)


def test_indexing_a_truncated_shard_raises_what_the_reader_raises(small_archive: bytes) -> None:
    with pytest.raises(TruncatedError):
        index_stream(io.BytesIO(small_archive[:3000]), "s.tar")


def test_out_of_range_positions_and_absent_keys_are_refused(small_archive: bytes) -> None:
    index = ShardIndex(index_stream(io.BytesIO(small_archive), "s.tar"), "s.tar.idx")
    for position in (-1, len(index)):
        with pytest.raises(IndexError):
            index.entry(position)
    with pytest.raises(KeyError):
        index.position("s999")


# --- a shard changed after it was indexed ----------------------------------------------


def shard_and_index(sizes: list[int]) -> tuple[bytes, ShardIndex]:
    shard = make_tar((f"s{i}.{f}", bytes([65 + i]) * n) for i, n in enumerate(sizes) for f in ("cls", "jpg"))  # fmt: skip
    return shard, ShardIndex(index_stream(io.BytesIO(shard), "s.tar"), "s.tar.idx")


def test_a_member_replaced_by_another_of_the_same_size_is_caught() -> None:
    shard, index = shard_and_index([10, 700, 30])
    entry = index.entry(1)
    at = shard.index(b"B" * 700)
    changed = shard[:at] + b"b" * 700 + shard[at + 700 :]
    assert len(changed) == len(shard)
    error = stale(changed, index, 1)
    assert str(error).startswith("s.tar: sample 1 (key 's1') is not as indexed (its bytes differ")
    assert "index it again with tarindex" in str(error) and error.offset == entry.offset
    want = sequential(shard)
    for position in (0, 2):  # the others read on
        entry = index.entry(position)
        sample = sample_from_span(entry, changed[entry.offset : entry.stop], "s.tar")
        assert (sample.key, sample.data()) == want[position][:2]


def test_bytes_appended_to_or_cut_from_the_shard_are_caught() -> None:
    shard, index = shard_and_index([10, 700, 30])
    index.check_size(len(shard), "s.tar")
    for size in (len(shard) + 512, len(shard) - 512):
        with pytest.raises(InputError) as info:
            index.check_size(size, "s.tar")
        assert info.value.reason == InputError.STALE
        assert f"it has {size} bytes, its index says {len(shard)}" in str(info.value)
    cut = shard[: index.entry(2).offset + 600]  # the last sample's span comes back short
    assert "bytes where its index says" in str(stale(cut, index, 2))


def test_a_shard_rewritten_with_the_same_keys_is_caught() -> None:
    shard, index = shard_and_index([10, 700, 30])
    same_sizes, _ = shard_and_index([10, 700, 30])
    rewritten = same_sizes.replace(b"A" * 10, b"Z" * 10)
    assert len(rewritten) == len(shard)
    stale(rewritten, index, 0)
    moved, _ = shard_and_index([600, 700, 30])  # same keys, the samples after it moved
    for position in range(3):
        stale(moved, index, position)


def test_samples_swapped_in_place_are_not_read_as_each_other() -> None:
    shard, index = shard_and_index([10, 10, 10])
    spans = [shard[e.offset : e.stop] for e in map(index.entry, range(3))]
    swapped = shard[: index.entry(0).offset] + spans[1] + spans[0] + shard[index.entry(2).offset :]
    for position in (0, 1):
        stale(swapped, index, position)


def test_an_index_whose_checksum_fits_but_whose_span_holds_two_samples_is_refused() -> None:
    shard, good = shard_and_index([10, 10])
    builder = IndexBuilder()
    builder.add(0, "s0", span_crc(shard[: good.end]))
    index = ShardIndex(builder.finish(len(shard), good.end), "bad.idx")
    assert "hold the samples 's0', 's1'" in str(stale(shard, index, 0))
    builder = IndexBuilder()
    builder.add(0, "s9", span_crc(shard[: good.entry(1).offset]))
    builder.add(good.entry(1).offset, "s1", good.entry(1).crc)
    index = ShardIndex(builder.finish(len(shard), good.end), "bad.idx")
    assert "hold the samples 's0'" in str(stale(shard, index, 0))  # another key
    builder = IndexBuilder()
    builder.add(512, "s0", span_crc(shard[512 : good.end]))
    index = ShardIndex(builder.finish(len(shard), good.end), "bad.idx")
    assert "it does not read" in str(stale(shard, index, 0))  # not at a header


# --- malformed and hostile index files -------------------------------------------------


def valid_index() -> bytes:
    builder = IndexBuilder()
    for i, k in enumerate(["a", "bb", "c"]):
        builder.add(1024 * i, k, i)
    return builder.finish(8192, 3072)


def patched(offset: int, fmt: str, *values: int) -> bytes:
    data = bytearray(valid_index())
    struct.pack_into(fmt, data, offset, *values)
    return bytes(data)


ROW = HEADER_SIZE  # first row
MALFORMED = {
    "40 bytes, less than its 64-byte header": valid_index()[:40],
    "no TKSIDX magic": b"PK\x03\x04" + valid_index()[4:],
    "116 bytes where its header (288230376151711744 samples": patched(8, "<Q", 2**58),
    "where its header": valid_index() + b"x",
    "offsets that do not increase": patched(ROW + 16, "<Q", 0),
    "not a block before its end": patched(ROW + 32, "<Q", 2100),  # inside a block
    "not a block before its end (3072)": patched(ROW + 32, "<Q", 3072),  # at the end
    "end (3072) is not a block within the shard's 2048": patched(16, "<Q", 2048),
    "key starts out of order": patched(ROW + 16 + 12, "<I", 9),  # past the keys
    "key starts out of order or out": patched(ROW + 32 + 12, "<I", 1),  # back into a key
    "reserved header bytes": patched(40, "<Q", 1),
}


@pytest.mark.parametrize("what", MALFORMED)
def test_a_malformed_index_is_refused_naming_the_file(what: str) -> None:
    with pytest.raises(InputError) as info:
        ShardIndex(MALFORMED[what], "shard.tar.idx")
    assert str(info.value).startswith("shard.tar.idx: ")
    assert what in str(info.value)


def test_keys_but_no_samples_and_a_key_twice_are_refused() -> None:
    empty = IndexBuilder().finish(1024, 0)
    with pytest.raises(InputError, match="keys but no samples"):
        ShardIndex(empty[:32] + struct.pack("<Q", 1) + empty[40:] + b"k", "x.idx")
    builder = IndexBuilder()
    builder.add(0, "a", 0)
    builder.add(512, "a", 0)
    with pytest.raises(InputError, match="key 'a' twice"):
        ShardIndex(builder.finish(2048, 1024), "x.idx").position("a")


def test_an_index_of_another_version_is_a_usage_error_naming_it() -> None:
    with pytest.raises(UsageError) as info:
        ShardIndex(patched(7, "<B", 2), "shard.tar.idx")
    assert str(info.value).startswith("shard.tar.idx: an index of another format version (2;")
    assert "index it again with tarindex" in str(info.value)


def test_an_index_read_from_a_memory_map_reads_alike_and_pickles(tmp_path: Path) -> None:
    import mmap

    path = tmp_path / "x.idx"
    path.write_bytes(valid_index())
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        index = ShardIndex(mapped, str(path))
        assert [index.key(i) for i in range(3)] == ["a", "bb", "c"]
        assert index.entry(1) == IndexEntry(1, "bb", 1024, 2048, 1)
        copy = pickle.loads(pickle.dumps(index))  # into a DataLoader worker
        index.close()
    assert copy.entry(2) == IndexEntry(2, "c", 2048, 3072, 2) and copy.source == str(path)
