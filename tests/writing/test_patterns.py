"""Shard patterns and modes: what matches, and create / overwrite / resume over an earlier run."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import samples_of

from tarkit.errors import InputError, OutputError, UsageError
from tarkit.writing.patterns import ShardPattern, existing_shards, pattern_glob
from tarkit.writing.shard_writer import ShardWriter


def write_set(pattern: str, count: int, per_shard: int, text: str = "x", **options) -> ShardWriter:
    with ShardWriter(pattern, maxcount=per_shard, **options) as writer:
        for i in range(count):
            writer.write({"__key__": f"k{i:03d}", "txt": f"{text}{i}"})
    return writer


def listing(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.mark.parametrize(
    "pattern,name,number",
    [
        ("s-%03d.tar", "s-007.tar", 7),
        ("s-%03d.tar", "s-1234.tar", 1234),
        ("s-{shard:04d}.tar.gz", "s-0012.tar.gz", 12),
        ("s-%x.tar", "s-ff.tar", 255),
        ("100%%-%d.tar", "100%-3.tar", 3),
        ("a[1]-%d.tar", "a[1]-3.tar", 3),
    ],
)
def test_a_file_matches_its_pattern_with_any_number_of_digits(
    tmp_path: Path, pattern: str, name: str, number: int
) -> None:
    for other in (name, "s-x.tar", "notes.txt", "s-007.tar.gz.tmp"):
        (tmp_path / other).write_bytes(b"")
    found = existing_shards(str(tmp_path / pattern))
    assert [(s.number, s.url) for s in found] == [(number, str(tmp_path / name))]


def test_only_numbers_from_start_on_count(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"s-{i}.tar").write_bytes(b"")
    assert [s.number for s in existing_shards(str(tmp_path / "s-%d.tar"), start=3)] == [3, 4]


def test_pattern_glob_escapes_the_literal_parts() -> None:
    glob, regex = pattern_glob("d[x]/s-{shard:02d}.tar")
    assert glob == "d[[]x]/s-*.tar"
    assert regex.fullmatch("d[x]/s-07.tar") and not regex.fullmatch("dx/s-07.tar")


def test_create_refuses_to_start_naming_how_many_files_match_and_the_first(
    tmp_path: Path,
) -> None:
    pattern = str(tmp_path / "s-%03d.tar")
    write_set(pattern, 10, 1)
    before = listing(tmp_path)
    with pytest.raises(OutputError) as caught:
        ShardWriter(pattern, maxcount=5)
    assert f"10 files already match the output pattern, first {tmp_path}/s-000.tar" in str(
        caught.value
    )
    assert "--overwrite" in str(caught.value) and "--resume" in str(caught.value)
    assert listing(tmp_path) == before


def test_start_appends_a_new_set_after_the_old_one(tmp_path: Path) -> None:
    pattern = str(tmp_path / "s-%03d.tar")
    write_set(pattern, 4, 2)
    write_set(pattern, 4, 2, start=2)
    assert sorted(listing(tmp_path)) == ["s-000.tar", "s-001.tar", "s-002.tar", "s-003.tar"]


def test_overwrite_leaves_exactly_the_new_set_and_a_manifest_of_it(tmp_path: Path) -> None:
    pattern = str(tmp_path / "s-%03d.tar")
    write_set(pattern, 10, 1, text="old")
    manifest = tmp_path / "m.json"
    writer = write_set(pattern, 10, 5, text="new", mode="overwrite", manifest=str(manifest))
    names = sorted(p.name for p in tmp_path.glob("s-*.tar"))
    assert names == ["s-000.tar", "s-001.tar"]
    assert [s.url for s in writer.manifest_of().shards] == ["s-000.tar", "s-001.tar"]
    assert b"new0" in (tmp_path / "s-000.tar").read_bytes()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize(
    "ending,magic",
    [(".tar.gz", b"\x1f\x8b"), (".tar.zst", b"\x28\xb5\x2f\xfd"), (".tar.xz", b"\xfd7zXZ\x00")],
)
def test_overwrite_compresses_as_the_shard_names_say_not_as_the_pending_names_do(
    tmp_path: Path, ending: str, magic: bytes
) -> None:
    from tarkit.format.compression import open_decompressed

    pattern = str(tmp_path / f"s-%03d{ending}")
    write_set(pattern, 4, 2, text="old")
    write_set(pattern, 4, 2, text="new", mode="overwrite")
    shards = sorted(tmp_path.glob(f"s-*{ending}"))
    assert len(shards) == 2
    for path in shards:
        assert path.read_bytes().startswith(magic)
        with open(path, "rb") as stream:
            samples = samples_of(open_decompressed(stream, str(path)).read())
        assert [data["txt"][:3] for _, data in samples] == [b"new", b"new"]


def test_a_failed_overwrite_leaves_the_old_set_as_it_was(tmp_path: Path) -> None:
    pattern = str(tmp_path / "s-%03d.tar")
    write_set(pattern, 6, 2, text="old")
    before = listing(tmp_path)
    with pytest.raises(InputError):
        with ShardWriter(pattern, maxcount=1, mode="overwrite") as writer:
            for i in range(8):
                if i == 5:
                    raise InputError("the input broke", source="test")
                writer.write({"__key__": f"k{i:03d}", "txt": f"new{i}"})
    assert listing(tmp_path) == before
    assert writer.discarded is None


def test_the_pending_shards_of_a_killed_overwrite_are_removed_by_the_next_run(
    tmp_path: Path,
) -> None:
    pattern = str(tmp_path / "s-%03d.tar")
    (tmp_path / ".s-004.tar.pending").write_bytes(b"left by a killed run")
    write_set(pattern, 2, 1)
    assert sorted(listing(tmp_path)) == ["s-000.tar", "s-001.tar"]


def test_resume_refuses_files_that_are_not_shards_of_the_run_it_continues(
    tmp_path: Path,
) -> None:
    pattern = str(tmp_path / "s-%03d.tar")
    write_set(pattern, 4, 2)
    (tmp_path / "s-007.tar").write_bytes((tmp_path / "s-000.tar").read_bytes())
    with pytest.raises(OutputError, match="1 file matches the output pattern but is not"):
        ShardWriter(pattern, maxcount=2, mode="resume")
    (tmp_path / "s-007.tar").unlink()
    resumed = ShardWriter(pattern, maxcount=2, mode="resume")
    assert resumed.samples_done == 4


def test_an_unknown_mode_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="mode must be one of create, overwrite, resume"):
        ShardWriter(str(tmp_path / "s-%d.tar"), mode="append")


def test_on_s3_create_refuses_and_overwrite_replaces_the_whole_set(
    s3_server: str, s3_env: dict[str, str]
) -> None:
    import s3fs

    options = {"endpoint_url": s3_server}
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir("modes")
    pattern = "s3://modes/d/s-%02d.tar"
    write_set(pattern, 6, 1, text="old", storage_options=options)
    with pytest.raises(OutputError, match="6 files already match .* first s3://modes/d/s-00.tar"):
        ShardWriter(pattern, storage_options=options)
    write_set(pattern, 6, 3, text="new", storage_options=options, mode="overwrite")
    fs.invalidate_cache()
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls("modes/d")) == ["s-00.tar", "s-01.tar"]
    assert [key for key, _ in samples_of(fs.cat("modes/d/s-01.tar"))] == ["k003", "k004", "k005"]


def test_a_shard_pattern_is_parsed_once_with_the_names_beside_its_shards() -> None:
    pattern = ShardPattern.parse("out/{shard:03d}/s.tar")
    assert pattern.name(7) == "out/007/s.tar" and pattern.number("out/1200/s.tar") == 1200
    assert pattern.number("out/007/t.tar") is None
    assert pattern.journal == "out/.{shard:03d}_s.tar.commit.json"
    assert pattern.records.name(2) == "out/002/.s.tar.shard.json"
    assert pattern.indexes.pending.name(2) == "out/002/.s.tar.idx.pending"
    assert pattern.target.name(2) == str(Path.cwd() / "out/002/s.tar")
    assert ShardPattern.parse(pattern) is pattern  # (a parsed pattern passes as it is)
    assert ShardPattern.parse("s-%d.tar.gz").compression == "gzip"


def test_a_writer_takes_a_parsed_pattern_as_it_is(tmp_path: Path) -> None:
    pattern = ShardPattern.parse(str(tmp_path / "s-%d.tar"))
    writer = write_set(pattern, 3, 2)
    assert writer.pattern is pattern and str(writer.pattern) == pattern.text
    assert [s.url for s in writer.shards] == [pattern.name(0), pattern.name(1)]
