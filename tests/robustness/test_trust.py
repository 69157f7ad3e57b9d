"""Data from elsewhere is not the user's word: the trust rule of locations, by one table.

A location the user typed (an argument, a Python string) is trusted, ``pipe:`` included. A
location read out of a document — a manifest's shard, a plan's file cell — never runs a
command nor reads stdin, and one read from a remote document (here: served by the test
HTTP server on 127.0.0.1) names only remote locations; a local document may name local
paths. The table drives the real readers: ``ShardDataset`` for manifests, ``read_plan``
(``tarkit shard``, ``tarcreate``) for plans. tarkit reads no other list of locations: a
loader state names no shard (its fingerprint holds base names), and the records beside
the outputs of ``tarkit map`` and of a cluster's ``shard_dataset`` are compared with the
locations of the run, never opened.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from conftest import make_tar, run, samples_of
from shard_server import ShardServer

import tarkit
from tarkit.errors import InputError
from tarkit.loading import ShardDataset
from tarkit.writing.plan import read_plan

SHARD = make_tar([("a.txt", b"one sample")])
REMOTE_ONLY = (
    "a remote document names only remote locations (relative to it, or http(s)://, s3://…)"
)
COMMAND = (
    "is a command, and a location read from a file never runs one: give pipe: inputs "
    "yourself (an argument, a Python string) if you mean them"
)

# entry kind: (the entry as written, where it resolves to from a local document, from a
# remote one; None: refused, with this reason)
ENTRIES = {
    "relative": ("sub/x.tar", "{local}/sub/x.tar", "{remote}/sub/x.tar"),
    "local absolute": ("{abs}", "{abs}", None),
    "file:": ("file:{abs}", "{abs}", None),
    "pipe:": ("pipe:touch {marker}; cat {abs}", None, None),
    "stdin": ("-", None, None),
    "http(s)": (
        "https://example.invalid/x.tar",
        "https://example.invalid/x.tar",
        "https://example.invalid/x.tar",
    ),  # fmt: skip
    "s3": ("s3://bucket/x.tar", "s3://bucket/x.tar", "s3://bucket/x.tar"),
    "fsspec in memory": ("memory://x.tar", "memory://x.tar", None),
    "fsspec chain": ("simplecache::s3://b/x.tar", "simplecache::s3://b/x.tar", None),
}
REASONS = {
    "local absolute": f"is a local path, and {REMOTE_ONLY}",
    "file:": f"is a local path, and {REMOTE_ONLY}",
    "pipe:": COMMAND,
    "stdin": "is stdin, which a location read from a file never names",
    "fsspec in memory": f"reaches this machine's files or wraps another URL, and {REMOTE_ONLY}",
    "fsspec chain": f"reaches this machine's files or wraps another URL, and {REMOTE_ONLY}",
}


def manifest_json(*urls: str) -> bytes:
    shards = [{"url": url, "samples": 1, "bytes": len(SHARD)} for url in urls]
    return json.dumps({"format": "tarkit-manifest", "version": 1, "shards": shards}).encode()


def place(tmp_path: Path, server: ShardServer, origin: str, name: str, data: bytes) -> str:
    """Put a document at ``tmp_path/d/name`` (local) or ``/d/name`` on the server."""
    if origin == "local":
        (tmp_path / "d" / name).write_bytes(data)
        return str(tmp_path / "d" / name)
    server.files[f"/d/{name}"] = data
    return f"{server.url}/d/{name}"


@pytest.fixture
def scene(tmp_path: Path) -> dict[str, str]:
    """The files the entries name (all exist), and where a command would leave a mark."""
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "sub" / "x.tar").write_bytes(SHARD)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.tar").write_bytes(SHARD)
    return {"local": str(tmp_path / "d"), "abs": str(tmp_path / "elsewhere" / "x.tar"),
            "marker": str(tmp_path / "ran")}  # fmt: skip


@pytest.mark.parametrize("entry_kind", list(ENTRIES))
@pytest.mark.parametrize("origin", ["local", "remote"])
@pytest.mark.parametrize("document", ["manifest", "plan"])
def test_the_trust_rule_by_document_origin_and_entry_kind(
    tmp_path: Path, http_server: ShardServer, scene: dict[str, str], document: str, origin: str,
    entry_kind: str,
) -> None:  # fmt: skip
    written, from_local, from_remote = ENTRIES[entry_kind]
    names = dict(scene, remote=f"{http_server.url}/d")
    entry = written.format(**names)
    expected = from_local if origin == "local" else from_remote
    if document == "manifest":
        where = place(tmp_path, http_server, origin, "manifest.json", manifest_json(entry))
        position = "shard 0"
        resolve = lambda: ShardDataset(where).urls  # noqa: E731
    else:
        where = place(
            tmp_path, http_server, origin, "plan.csv", f"__key__,@txt\nk,{entry}\n".encode()
        )
        position = "line 2: field 'txt'"
        resolve = lambda: [path for _, path in read_plan(where)[0].files]  # noqa: E731
    if expected is not None:
        assert resolve() == [expected.format(**names)]
    else:
        with pytest.raises(InputError) as caught:
            resolve()
        assert caught.value.reason == InputError.UNTRUSTED
        assert str(caught.value) == f"{where}: {position}: {entry!r} {REASONS[entry_kind]}"
    assert not Path(scene["marker"]).exists()


def test_a_manifest_beside_the_shards_that_lists_a_command_runs_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "d"
    directory.mkdir()
    (directory / "s-0.tar").write_bytes(SHARD)
    marker = tmp_path / "ran"
    entry = f"pipe:touch {marker}; cat {directory / 's-0.tar'}"
    (directory / "manifest.json").write_bytes(manifest_json(entry))
    readers = {
        "ShardDataset": lambda: list(ShardDataset(str(directory))),
        "tarkit.loader": lambda: list(tarkit.loader(str(directory), batch_size=1, num_workers=2)),
    }
    for name, read in readers.items():
        with pytest.raises(InputError) as caught:
            read()
        assert str(caught.value) == f"{directory}/manifest.json: shard 0: {entry!r} {COMMAND}", name
    assert not marker.exists()


def test_a_served_manifest_neither_runs_a_command_nor_names_a_local_shard(
    tmp_path: Path, http_server: ShardServer
) -> None:
    secret = tmp_path / "private" / "s-0.tar"
    secret.parent.mkdir()
    secret.write_bytes(SHARD)
    marker = tmp_path / "ran"
    url = f"{http_server.url}/d/manifest.json"
    for entry, reason in ((f"pipe:touch {marker}; cat {secret}", COMMAND),
                          (str(secret), f"is a local path, and {REMOTE_ONLY}"),
                          (f"file://{secret}", f"is a local path, and {REMOTE_ONLY}")):  # fmt: skip
        http_server.put("/d/manifest.json", manifest_json(entry))
        with pytest.raises(InputError) as caught:
            list(ShardDataset(url))
        assert str(caught.value) == f"{url}: shard 0: {entry!r} {reason}"
    assert not marker.exists()
    # Relative to it, its shards are the server's.
    http_server.files["/d/s-0.tar"] = SHARD
    http_server.put("/d/manifest.json", manifest_json("s-0.tar"))
    assert [s["__key__"] for s in ShardDataset(url)] == ["a"]


def test_pipe_shards_the_user_names_are_read_with_a_manifest_for_their_counts(
    tmp_path: Path,
) -> None:
    # The way to a manifest of pipe: shards (tarindex 'pipe:…' -o m.json): name the shards
    # yourself and give the manifest; its entries are matched, never run.
    shard = tmp_path / "s-0.tar"
    shard.write_bytes(SHARD)
    typed = f"pipe:cat {shard}"
    manifest = tmp_path / "m.json"
    manifest.write_bytes(manifest_json(typed))
    dataset = ShardDataset(typed, manifest=str(manifest))
    assert len(dataset) == 1 and [s["__key__"] for s in dataset] == ["a"]
    with pytest.raises(InputError, match="is a command"):
        ShardDataset(str(manifest))


def test_tarkit_shard_of_a_served_plan_never_embeds_a_local_file(
    tmp_path: Path, http_server: ShardServer
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"a local secret")
    url = f"{http_server.url}/d/plan.csv"
    http_server.files["/d/plan.csv"] = f"__key__,@txt\na,{secret}\n".encode()
    out = tmp_path / "out"
    refused = run(["tarkit", "shard", url, "-o", str(out / "s-%d.tar")])
    assert refused.returncode == 2
    assert refused.stderr == (
        f"tarkit shard: error: {url}: line 2: field 'txt': '{secret}' is a local path, and "
        f"{REMOTE_ONLY}\n"
    )
    assert not list(out.glob("*")) if out.exists() else True
    # Its relative paths are the server's files.
    http_server.files["/d/notes/a.txt"] = b"served"
    http_server.put("/d/plan.csv", b"__key__,@txt\na,notes/a.txt\n")
    done = run(["tarkit", "shard", url, "-o", str(out / "s-%d.tar")])
    assert done.returncode == 0, done.stderr
    assert samples_of((out / "s-0.tar").read_bytes()) == [("a", {"txt": b"served"})]


def manifest_v2(names: object, columns: str = "m.columns", index: str | None = None) -> bytes:
    document = {"format": "tarkit-manifest", "version": 2, "samples": 1, "bytes": len(SHARD),
                "shards": 1, "names": names, "columns": columns}  # fmt: skip
    if index is not None:
        document["index"] = index
    return json.dumps(document).encode()


def test_a_served_version_2_manifest_names_no_local_file_by_its_names_index_or_columns(
    tmp_path: Path, http_server: ShardServer
) -> None:
    from tarkit import IndexedDataset
    from tarkit.format.columns import columns_bytes
    from tarkit.format.index import index_stream

    secret = tmp_path / "private" / "s-000.tar"
    secret.parent.mkdir()
    secret.write_bytes(SHARD)
    (tmp_path / "private" / "s-000.tar.idx").write_bytes(index_stream(io.BytesIO(SHARD), "s"))
    marker = tmp_path / "ran"
    http_server.files["/d/m.columns"] = columns_bytes([1], [len(SHARD)], [None])
    url = f"{http_server.url}/d/m.json"
    local = f"is a local path, and {REMOTE_ONLY}"
    cases = [  # (the manifest, the refusal)
        (manifest_v2([str(secret)]), f"shard 0: {str(secret)!r} {local}"),
        (manifest_v2({"pattern": str(secret.parent / "s-%03d.tar"), "first": 0}),
         f"shard 0: {str(secret)!r} {local}"),
        (manifest_v2([f"pipe:touch {marker}; cat {secret}"]),
         f"shard 0: {f'pipe:touch {marker}; cat {secret}'!r} {COMMAND}"),
        (manifest_v2(["s-000.tar"], index=str(secret.parent / "%03d.idx")),
         f"the index of shard 0: {str(secret.parent / '000.idx')!r} {local}"),
        (manifest_v2(["s-000.tar"], columns=str(tmp_path / "private" / "m.columns")),
         f'"columns" names {str(tmp_path / "private" / "m.columns")!r}, not a file beside it'),
    ]  # fmt: skip
    http_server.files["/d/s-000.tar"] = SHARD
    for document, reason in cases:
        http_server.put("/d/m.json", document)
        readers = {"IndexedDataset": lambda: IndexedDataset(url)[0]}
        if "index" not in reason:  # (ShardDataset reads no index)
            readers["ShardDataset"] = lambda: list(ShardDataset(url))
        for name, read in readers.items():
            with pytest.raises(InputError) as caught:
                read()
            assert str(caught.value) == f"{url}: {reason}", name
    assert not marker.exists()
