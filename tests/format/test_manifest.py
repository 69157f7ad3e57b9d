"""Manifests: version 2 (names pattern, columns) written and read back, version 1 read in
slices into the same table, the two equal; malformed manifests refused; the synthetic
billion-sample dataset opened within its memory bound in either version."""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from synthetic_dataset import PATTERN, SAMPLES, SHARDS, measure_open, write_v1, write_v2

from tarkit.errors import InputError
from tarkit.format.columns import columns_bytes
from tarkit.format.manifest import Manifest, ShardInfo, columns_name, dumps_v2, parse
from tarkit.format.manifest_reader import read_table
from tarkit.format.shard_names import NamesBuilder, ShardNames
from tarkit.format.shard_table import ShardTable

# --- names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "names, pattern, first",
    [
        ([f"train-{i:06d}.tar" for i in range(10)], "train-%06d.tar", 0),
        ([f"x-{i:02d}.tar" for i in range(105)], "x-%02d.tar", 0),  # past the width
        ([f"x-{i}.tar" for i in range(8, 12)], "x-%d.tar", 8),
        ([f"s3://b/2024/v2-{i:03d}.tar" for i in range(3)], "s3://b/2024/v2-%03d.tar", 0),
        ([f"100%-{i:03d}.tar" for i in range(3)], "100%%-%03d.tar", 0),
        ([f"{i:05d}-of-00100.tar" for i in range(4, 7)], "%05d-of-00100.tar", 4),
        (["only-000007.tar"], "only-%06d.tar", 7),
        (["a-0.tar", "a-2.tar"], None, 0),
        (["a.tar", "b.tar"], None, 0),
        (["caf\udce9-0.tar", "caf\udce9-1.tar"], "caf\udce9-%d.tar", 0),
        ([], None, 0),
    ],
)
def test_names_numbered_consecutively_are_one_pattern(
    names: list[str], pattern: str | None, first: int
) -> None:
    found = ShardNames.of(names)
    assert (found.pattern, found.first) == (pattern, first)
    assert list(found) == names and [found[i] for i in range(len(names))] == names


name_parts = st.text(alphabet="ab%-_/é0123456789\udce9", max_size=6)


@settings(max_examples=80, deadline=None)
@given(
    st.one_of(
        st.lists(name_parts, max_size=6),
        st.builds(
            lambda before, width, first, count, after: [
                f"{before}{n:0{width}d}{after}" for n in range(first, first + count)
            ],
            name_parts, st.integers(1, 4), st.integers(0, 120), st.integers(1, 30), name_parts,
        ),
    ),
    st.lists(st.integers(0, 7), max_size=4),
)  # fmt: skip
def test_names_given_in_runs_read_back_as_given(names: list[str], cuts: list[int]) -> None:
    builder = NamesBuilder()
    rest = names
    for cut in cuts:
        builder.extend(rest[:cut])
        rest = rest[cut:]
    builder.extend(rest)
    built = builder.finish()
    assert list(built) == names and built == ShardNames.of(names)
    if names and len(names) == len(set(names)) and ShardNames.of(names).pattern is not None:
        assert built.pattern is not None


def test_names_from_a_manifest_are_checked() -> None:
    good = ShardNames.from_json({"pattern": "s-%06d.tar", "first": 3}, 2, "m.json")
    assert list(good) == ["s-000003.tar", "s-000004.tar"]
    for value in (
        {"pattern": "s-%s.tar", "first": 0},
        {"pattern": "s-%d-%d.tar", "first": 0},
        {"pattern": "s-%099999999d.tar", "first": 0},  # a width no name needs
        {"pattern": "s-%d.tar", "first": -1},
        {"pattern": "s-%d.tar"},
        ["a.tar", 5],
        "a.tar",
    ):
        with pytest.raises(InputError, match="^m.json: malformed"):
            ShardNames.from_json(value, 2, "m.json")
    with pytest.raises(InputError, match="^m.json: 1 names for 2 shards"):
        ShardNames.from_json(["a.tar"], 2, "m.json")


# --- the table -----------------------------------------------------------------------------


def infos(count: int = 4) -> list[ShardInfo]:
    return [
        ShardInfo(f"s-{i:06d}.tar", [3, 0, 5, 1][i % 4], 1024 * (i + 1), f"{i + 1:064x}")
        for i in range(count)
    ]


def test_the_table_finds_the_shard_of_every_sample_past_empty_shards() -> None:
    table = ShardTable.from_infos(infos(), index="s-%06d.tar.idx")
    located = [table.locate(p) for p in range(table.samples)]
    assert located == [(0, 0), (0, 1), (0, 2), (2, 0), (2, 1), (2, 2), (2, 3), (2, 4), (3, 0)]
    assert [table.start(i) for i in range(4)] == [0, 3, 3, 8]
    for position in (-1, 9):
        with pytest.raises(IndexError):
            table.locate(position)
    assert table.index_name(2) == "s-000002.tar.idx"
    assert list(table) == infos() and table.to_manifest().shards == infos()


def test_a_table_pickles_whole_even_over_a_memory_map(tmp_path: Path) -> None:
    table = ShardTable.from_infos(infos(), index="i-%d.idx", location="m.json")
    json_text, columns = dumps_v2(table, "m.columns")
    (tmp_path / "m.columns").write_bytes(columns)
    import mmap

    with open(tmp_path / "m.columns", "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    read = read_table(io.BytesIO(json_text), "m.json", lambda name: mapped)
    copy = pickle.loads(pickle.dumps(read))
    assert list(copy) == infos() and (copy.index, copy.location) == ("i-%d.idx", "m.json")


# --- version 2 ---------------------------------------------------------------------------


entries = st.lists(
    st.builds(
        ShardInfo,
        st.text(alphabet="ab/é\udce9-0", min_size=1, max_size=8),
        st.integers(0, 2**40),
        st.integers(0, 2**50),
        st.one_of(st.none(), st.binary(min_size=32, max_size=32).map(bytes.hex)),
    ),
    max_size=6,
).filter(lambda shards: all(s.sha256 != "0" * 64 for s in shards))
numbered = st.integers(0, 12).map(infos)


def v2(table: ShardTable) -> ShardTable:
    json_text, columns = dumps_v2(table, "m.columns")
    return read_table(io.BytesIO(json_text), "m.json", {"m.columns": columns}.__getitem__)


def v1(manifest: Manifest, slice_size: int = 1 << 20) -> ShardTable:
    return read_table(io.BytesIO(manifest.to_bytes()), "m.json", slice_size=slice_size)


@settings(max_examples=60, deadline=None)
@given(st.one_of(entries, numbered), st.sampled_from([16, 100, 1 << 20]))
def test_versions_1_and_2_give_the_same_table_as_the_entries(shards, slice_size) -> None:  # type: ignore[no-untyped-def]
    made = ShardTable.from_infos(shards)
    from_v1 = v1(Manifest(shards), slice_size)
    from_v2 = v2(made)
    assert list(from_v1) == list(from_v2) == shards == parse(Manifest(shards).dumps()).shards
    assert from_v1.names == from_v2.names == made.names
    assert from_v1.samples == from_v2.samples == sum(s.samples for s in shards)
    assert dumps_v2(from_v1, "m.columns") == dumps_v2(from_v2, "m.columns")


def test_version_2_is_written_deterministically_as_documented() -> None:
    table = ShardTable.from_infos(infos(), index="s-%06d.tar.idx")
    json_text, columns = dumps_v2(table, "manifest.columns")
    assert dumps_v2(ShardTable.from_infos(infos(), index="s-%06d.tar.idx"), "manifest.columns") == (
        json_text,
        columns,
    )
    assert json.loads(json_text) == {
        "format": "tarkit-manifest", "version": 2, "samples": 9, "bytes": 10240, "shards": 4,
        "names": {"pattern": "s-%06d.tar", "first": 0}, "columns": "manifest.columns",
        "index": "s-%06d.tar.idx",
    }  # fmt: skip
    digests = [bytes.fromhex(s.sha256) for s in infos()]  # type: ignore[arg-type]
    assert columns == columns_bytes([3, 0, 5, 1], [1024, 2048, 3072, 4096], digests)
    assert columns[:8] == (3).to_bytes(8, "little") and len(columns) == 48 * 4
    assert columns_name("data/train.json") == "train.columns"


def test_a_version_1_digest_that_is_null_or_absent_is_not_known() -> None:
    text = manifest_text(
        shards=[
            {"url": "a.tar", "samples": 1, "bytes": 512, "sha256": None},
            {"url": "b.tar", "samples": 1, "bytes": 512},
            {"url": "c.tar", "samples": 1, "bytes": 512, "sha256": "ab" * 32},
        ]
    )
    table = read_table(io.BytesIO(text), "m.json")
    assert [table.shard_sha256(i) for i in range(3)] == [None, None, "ab" * 32]


def test_keys_and_offsets_of_version_1_entries_are_kept_per_shard() -> None:
    shards = infos(3)
    shards[1].keys, shards[1].offsets = ["a", "b"], [0, 1024]
    table = v1(Manifest(shards), slice_size=64)
    assert table.info(1).keys == ["a", "b"] and table.info(1).offsets == [0, 1024]
    assert table.info(0).keys is None and list(table.extras) == [1]


@pytest.mark.parametrize("slice_size", [1, 40, 1 << 20])
def test_a_version_1_manifest_from_another_writer_reads_alike(slice_size: int) -> None:
    urls = ['a}, {"b.tar', "c},\n{.tar", 'q"uote\\.tar', "日本.tar", "x]}.tar"]
    shards = [ShardInfo(u, i, 10 * i, None) for i, u in enumerate(urls)]
    document = {
        "shards": [{"bytes": s.bytes, "extra": {"n": [1, {"}": "],"}]}, "samples": s.samples,
                    "url": s.url} for s in shards],
        "version": 1, "note": "a}, {", "format": "tarkit-manifest",
    }  # fmt: skip
    for text in (json.dumps(document), json.dumps(document, indent=4, ensure_ascii=False)):
        table = read_table(io.BytesIO(text.encode()), "m.json", slice_size=slice_size)
        assert list(table) == shards


def test_a_million_numbered_names_in_version_1_become_a_pattern(tmp_path: Path) -> None:
    shards = [ShardInfo(f"t-{i:03d}.tar", 1, 512) for i in range(2500)]
    table = v1(Manifest(shards), slice_size=4096)
    assert table.names.pattern == "t-%03d.tar" and table.name(2499) == "t-2499.tar"
    shards[1700] = ShardInfo("other.tar", 1, 512)  # the names leave the pattern midway
    table = v1(Manifest(shards), slice_size=4096)
    assert table.names.pattern is None and list(table) == shards


# --- malformed manifests -----------------------------------------------------------------


def manifest_text(**changes: object) -> bytes:
    document = json.loads(Manifest(infos(3)).dumps())
    document.update(changes)
    return json.dumps(document, indent=1).encode()


def entry(**changes: object) -> bytes:
    shards = [s.to_json() for s in infos(3)]
    shards[2].update(changes)
    return manifest_text(shards=[{k: v for k, v in s.items() if v is not None} for s in shards])


@pytest.mark.parametrize(
    "text, message",
    [
        (b'{"format": "tarkit-manifest",\n "version": 1,,}', "not a JSON manifest: .* at line 2"),
        (b"[1, 2]", "not a JSON manifest: expected '{' at line 1"),
        (b'{"a": 1} x', "not a JSON manifest: data after the manifest at line 1"),
        (b'{"a": 1, "a": 2}', "not a JSON manifest: a key 'a' that is not a new string"),
        (manifest_text()[:-10], "not a JSON manifest"),
        (b'{"format": "caf\xe9"}', "manifest is not UTF-8 text"),
        (
            manifest_text(format="other"),
            'not a tarkit manifest \\(no "format": "tarkit-manifest"\\)',
        ),
        (manifest_text(version=3), "unsupported manifest version 3"),
        (manifest_text(shards={"a": 1}), 'malformed "shards"'),
        (entry(samples=None), "malformed shard entry 2"),
        (entry(samples=-1), "malformed shard entry 2"),
        (entry(samples=2**64), "malformed shard entry 2"),
        (entry(bytes="12"), "malformed shard entry 2"),
        (entry(sha256="ab" * 31), "malformed shard entry 2"),
        (entry(sha256="zz" * 32), "malformed shard entry 2"),
        (entry(url=7), "malformed shard entry 2"),
        (manifest_text().replace(b"}\n ]", b"},\n ]"), "not a JSON manifest"),
    ],
)
def test_a_malformed_version_1_manifest_is_refused_naming_it(text: bytes, message: str) -> None:
    for slice_size in (64, 1 << 20):
        with pytest.raises(InputError, match=f"^m.json: {message}"):
            read_table(io.BytesIO(text), "m.json", slice_size=slice_size)


def v2_files(**changes: object) -> tuple[bytes, bytes]:
    json_text, columns = dumps_v2(ShardTable.from_infos(infos(3)), "m.columns")
    document = json.loads(json_text)
    document.update(changes)
    return json.dumps(document).encode(), columns


@pytest.mark.parametrize(
    "changes, columns, message",
    [
        ({"shards": 10**15}, None, "its columns file m.columns has 144 bytes, not 48 for each"),
        ({}, b"\0" * 144, "its columns file m.columns counts 0 samples, the manifest 8"),
        ({"shards": "3"}, None, 'malformed "shards": not a count'),
        ({"columns": None}, None, 'malformed "columns"'),
        ({"index": "%s.idx"}, None, 'malformed "index"'),
        ({"names": ["a.tar"]}, None, "1 names for 3 shards"),
    ],
)
def test_a_malformed_version_2_manifest_is_refused_naming_it(
    changes: dict[str, object], columns: bytes | None, message: str
) -> None:
    json_text, good = v2_files(**changes)
    with pytest.raises(InputError, match=f"^m.json: {message}"):
        read_table(
            io.BytesIO(json_text), "m.json", lambda name: good if columns is None else columns
        )


@pytest.mark.parametrize("counts", [[2**62 + 1], [2**62, 2**62], [2**63 - 1, 1]])
def test_counts_past_2_62_are_an_input_error_in_both_readers_never_an_overflow(
    counts: list[int],
) -> None:
    shards = [{"url": f"s-{i}.tar", "samples": n, "bytes": 1024} for i, n in enumerate(counts)]
    text = v1_text(*shards)
    with pytest.raises(InputError, match=r"^m\.json: .*2\*\*62"):
        parse(text, "m.json")
    with pytest.raises(InputError, match=r"^m\.json: (malformed shard entry 0$|.*2\*\*62)"):
        read_table(io.BytesIO(text.encode()), "m.json")


def test_a_negative_count_in_the_columns_is_refused() -> None:
    json_text, columns = v2_files(samples=0)
    negative = (-5).to_bytes(8, "little", signed=True) + (5).to_bytes(8, "little") + columns[16:]
    with pytest.raises(InputError, match="a negative sample count"):
        read_table(io.BytesIO(json_text), "m.json", lambda name: negative)


# --- the billion-sample dataset ----------------------------------------------------------


@pytest.mark.parametrize("version, bound", [(1, 150 << 20), (2, 40 << 20)])
def test_a_billion_sample_manifest_opens_within_its_memory_bound(
    tmp_path: Path, version: int, bound: int
) -> None:
    path = (write_v1 if version == 1 else write_v2)(tmp_path / "manifest.json")
    figures = measure_open(path)
    assert (figures["shards"], figures["samples"]) == (SHARDS, SHARDS * SAMPLES)
    assert figures["pattern"] == PATTERN and figures["last"] == PATTERN % (SHARDS - 1)
    assert figures["locate"] == [SHARDS - 1, SAMPLES - 1]
    assert figures["peak"] < bound, figures  # type: ignore[operator]


# --- version 1 entries, checked before the loader plans from them ---------------------

GOOD = {"url": "s-0.tar", "samples": 2, "bytes": 2048, "sha256": "ab", "keys": ["a", "b"],
        "offsets": [0, 1024]}  # fmt: skip


def v1_text(*shards: object) -> str:
    return json.dumps({"format": "tarkit-manifest", "version": 1, "shards": list(shards)})


def test_a_manifest_reads_back_what_was_written() -> None:
    manifest = Manifest([ShardInfo(**GOOD)])  # type: ignore[arg-type]
    assert parse(manifest.dumps()).shards == manifest.shards


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"samples": -5}, "a negative count"),
        ({"bytes": -1}, "a negative count"),
        ({"samples": 2**62 + 1, "keys": None, "offsets": None}, "a count past 2**62"),
        ({"bytes": 2**63}, "a count past 2**62"),
        ({"samples": 2.5}, '"samples" is 2.5'),
        ({"samples": True}, '"samples" is True'),
        ({"samples": "2"}, "\"samples\" is '2'"),
        ({"url": 7}, '"url" is 7'),
        ({"url": None}, '"url" is None'),
        ({"sha256": 12}, '"sha256" is not text'),
        ({"keys": "ab"}, '"keys" is not a list of text'),
        ({"offsets": [0, -1024]}, '"offsets" is not a list of byte offsets'),
        ({"offsets": {"0": 0}}, '"offsets" is not a list of byte offsets'),
    ],
)
def test_a_malformed_entry_is_an_input_error_naming_it(change: dict, problem: str) -> None:
    with pytest.raises(InputError) as caught:
        parse(v1_text(GOOD, dict(GOOD, **change)), "m.json")
    assert str(caught.value) == f"m.json: malformed shard entry 1 ({problem})"


@pytest.mark.parametrize(
    "shards, message",
    [
        ('"shards": {"url": "s-0.tar"}', 'm.json: "shards" is not a list'),
        ('"shards": [["s-0.tar", 1, 512]]', "m.json: malformed shard entry 0 (not an object)"),
        ('"shards": [{"url": "s-0.tar", "bytes": 512}]',
         'm.json: malformed shard entry 0 (no "samples")'),
    ],
)  # fmt: skip
def test_shards_that_are_not_a_list_of_entries_are_an_input_error(
    shards: str, message: str
) -> None:
    with pytest.raises(InputError) as caught:
        parse('{"format": "tarkit-manifest", "version": 1, ' + shards + "}", "m.json")
    assert str(caught.value) == message
