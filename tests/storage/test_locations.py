"""One parser of locations: every caller that must tell kinds apart agrees, by one table."""

from __future__ import annotations

from pathlib import Path

import pytest

from tarkit.errors import OutputError
from tarkit.format.manifest import Manifest, ShardInfo
from tarkit.storage import (
    FILE,
    FSSPEC,
    HTTP,
    PIPE,
    STDIO,
    StagedFile,
    location,
    manifest_urls,
    relative_url,
    resolve_url,
)
from tarkit.writing.index import index_shard

# spec, kind, path, remote (fetched over a network: cached by the loader, retried by map)
TABLE = [
    ("-", STDIO, "-", False),
    ("data/x.tar", FILE, "data/x.tar", False),
    ("/abs/x.tar", FILE, "/abs/x.tar", False),
    ("file:data/x.tar", FILE, "data/x.tar", False),
    ("file:///abs/x.tar", FILE, "/abs/x.tar", False),
    ("weird:name.tar", FILE, "weird:name.tar", False),
    ("pipe:curl -s http://h/x.tar", PIPE, "curl -s http://h/x.tar", False),
    ("pipe:cat a.tar", PIPE, "cat a.tar", False),
    ("http://h/x.tar", HTTP, "http://h/x.tar", True),
    ("https://h/d/x.tar", HTTP, "https://h/d/x.tar", True),
    ("s3://bucket/x.tar", FSSPEC, "s3://bucket/x.tar", True),
    ("gs://bucket/d/x.tar", FSSPEC, "gs://bucket/d/x.tar", True),
    ("memory://x.tar", FSSPEC, "memory://x.tar", True),
]


@pytest.mark.parametrize("spec, kind, path, remote", TABLE)
def test_every_location_kind_is_told_apart_by_the_one_parser(
    spec: str, kind: str, path: str, remote: bool
) -> None:
    where = location(spec)
    assert (where.kind, where.path, where.remote, where.is_file) == (
        kind,
        path,
        remote,
        kind == FILE,
    )


@pytest.mark.parametrize("spec, kind, path, remote", TABLE)
def test_writers_accept_exactly_the_kinds_that_hold_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str, kind: str, path: str, remote: bool
) -> None:
    # A file path or an fsspec URL can be published; stdin, pipe: and http: cannot.
    monkeypatch.chdir(tmp_path)
    if kind in (STDIO, PIPE, HTTP):
        with pytest.raises(OutputError, match="cannot write here"):
            StagedFile(spec)
    elif kind == FILE and not path.startswith("/"):
        staged = StagedFile(spec)
        staged.write(b"x")
        staged.commit()
        assert (tmp_path / path).read_bytes() == b"x"
        assert sorted(p.name for p in (tmp_path / path).parent.iterdir()) == [Path(path).name]


@pytest.mark.parametrize(
    "manifest, shard, named",
    [
        ("out/manifest.json", "out/s-0.tar", "s-0.tar"),
        ("out/manifest.json", "file:out/sub/s-0.tar", "sub/s-0.tar"),
        ("out/manifest.json", "pipe:cat out/s-0.tar", "pipe:cat out/s-0.tar"),
        ("out/manifest.json", "http://h/s-0.tar", "http://h/s-0.tar"),
        ("s3://b/d/manifest.json", "s3://b/d/s-0.tar", "s-0.tar"),
        ("s3://b/d/manifest.json", "s3://b/other/s-0.tar", "s3://b/other/s-0.tar"),
        ("s3://b/d/manifest.json", "out/s-0.tar", None),  # absolute local path
        (None, "out/s-0.tar", "out/s-0.tar"),
    ],
)
def test_a_manifest_names_a_shard_so_that_resolving_the_name_finds_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, manifest: str | None, shard: str, named
) -> None:
    monkeypatch.chdir(tmp_path)
    name = relative_url(manifest, shard)
    assert name == (named if named is not None else str(tmp_path / "out" / "s-0.tar"))
    # Matched with the shards a caller names (opened=False): the trust rule, which
    # refuses a pipe: entry or a local path in a remote manifest, is for opening.
    back = resolve_url(manifest, name, opened=False)
    assert location(back).identity() == location(shard).identity()
    found = manifest_urls(Manifest([ShardInfo(name, 1, 1)], manifest), opened=False)
    assert found == [back]


def test_tarindex_and_the_shard_writers_name_shards_in_a_manifest_alike(tmp_path: Path) -> None:
    # index_shard (tarindex, resume) and ShardWriter.manifest_of both go through
    # relative_url: the same shard gets the same name.
    from tarkit.writing.shard_writer import ShardWriter

    with ShardWriter(
        f"file:{tmp_path}/sub/s-%d.tar", maxcount=1, manifest=str(tmp_path / "m.json")
    ) as writer:
        writer.write({"__key__": "a", "txt": "x"})
    entry = index_shard(f"{tmp_path}/sub/s-0.tar", manifest_path=str(tmp_path / "m.json"))
    assert writer.manifest_of().shards[0].url == entry.url == "sub/s-0.tar"
