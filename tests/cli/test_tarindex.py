"""tarindex through real pipes: counts checked against GNU tar, the manifest read back by
tarkit.format.manifest.load and used to read samples at their offsets."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import make_tar, run, run_shell
from random_access import check_random_access

from tarkit import read_samples
from tarkit.format.index import ShardIndex, sample_from_span
from tarkit.format.samples import group_samples
from tarkit.format.tar import read_members
from tarkit.storage import load_manifest as load
from tarkit.storage import manifest_urls

PEERS = Path(__file__).resolve().parent.parent / "data" / "peer-shards"


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three shards made by GNU tar (sorted, pax), with 3, 5 and 1 samples of 1-3 fields."""
    base = tmp_path_factory.mktemp("index")
    (base / "out").mkdir()
    paths = []
    for number, count in enumerate((3, 5, 1)):
        tree = base / f"tree{number}"
        tree.mkdir()
        for i in range(count):
            for field in ("jpg", "cls", "json")[: 1 + i % 3]:
                (tree / f"s{number}-{i}.{field}").write_bytes(b"%d" % i * (100 * i + 1))
        (tree / "README").write_text("skipped")
        path = base / "out" / f"shard-{number:06d}.tar"
        subprocess.run(
            ["tar", "--sort=name", "--format=pax", "-cf", str(path), "-C", str(tree), "."],
            check=True,
        )
        paths.append(path)
    return paths


def gnu_tar_sample_count(path: Path) -> int:
    names = subprocess.run(["tar", "-tf", str(path)], capture_output=True, text=True, check=True)
    keys = {
        name.rsplit("/", 1)[-1].split(".", 1)[0]
        for name in names.stdout.split()
        if "." in name.rsplit("/", 1)[-1]
    }
    return len(keys)


def test_manifest_counts_match_gnu_tar_and_load_back(shards: list[Path]) -> None:
    out = shards[0].parent / "manifest.json"
    pattern = str(shards[0].parent / "shard-{000000..000002}.tar")
    result = run(["tarindex", pattern, "-o", str(out)])
    assert result.returncode == 0
    assert "skipping member without a field" in result.stderr
    manifest = load(str(out))
    assert [s.url for s in manifest.shards] == [p.name for p in shards]
    assert manifest_urls(manifest) == [str(p) for p in shards]
    assert [s.samples for s in manifest.shards] == [gnu_tar_sample_count(p) for p in shards]
    assert [s.samples for s in manifest.shards] == [3, 5, 1]
    assert manifest.samples == 9
    for info, path in zip(manifest.shards, shards, strict=True):
        assert info.bytes == path.stat().st_size
        assert info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        assert info.keys is None and info.offsets is None
    # Random-access ready: each shard's index beside it, spans over the skipped members.
    assert check_random_access(out).samples == 9
    # Deterministic: the same shards give the same manifest bytes.
    again = run(["tarindex", *map(str, shards), "-o", str(out.parent / "again.json")])
    assert again.returncode == 0
    text = (out.parent / "again.json").read_text().replace("again.columns", "manifest.columns")
    assert text == out.read_text()
    assert (out.parent / "again.columns").read_bytes() == (
        out.parent / "manifest.columns"
    ).read_bytes()


def test_shards_of_webdataset_gnu_tar_and_bsdtar_are_made_random_access_ready(
    tmp_path: Path,
) -> None:
    # Shards webdataset's own writers made (a directory member in one), numbered here.
    (tmp_path / "wds").mkdir()
    for number, name in enumerate(("compressed.tar", "testgz.tar", "mpdata.tar", "tendata.tar")):
        shutil.copy(PEERS / name, tmp_path / "wds" / f"wds-{number:06d}.tar")
    assert run(["tarindex", str(tmp_path / "wds" / "wds-{000000..000003}.tar"), "-o",
                str(tmp_path / "wds" / "manifest.json")]).returncode == 0  # fmt: skip
    ready = check_random_access(tmp_path / "wds" / "manifest.json")  # beside the shards
    assert sorted(ready.indexes) == [f"wds-{number:06d}.tar" for number in range(4)]
    tree = tmp_path / "tree"
    tree.mkdir()
    for i in range(4):
        (tree / f"t{i}.txt").write_bytes(b"t" * (300 * i))
        (tree / f"t{i}.json").write_text("{}")
    made = tmp_path / "made"
    made.mkdir()
    for name, command in (("gnu.tar", ["tar", "--format=gnu", "--sort=name"]),
                          ("bsd.tar", ["bsdtar", "--format=ustar", "-n"])):  # fmt: skip
        names = ["."] if name == "gnu.tar" else sorted(p.name for p in tree.iterdir())
        subprocess.run([*command, "-cf", str(made / name), "-C", str(tree), *names], check=True)
    (made / "gz.tar.gz").write_bytes(gzip.compress((made / "bsd.tar").read_bytes(), mtime=0))
    shards = [str(made / name) for name in ("gnu.tar", "bsd.tar", "gz.tar.gz")]
    result = run(["tarindex", *shards, "-o", str(tmp_path / "manifest.json")])
    assert (result.returncode, result.stderr) == (0, "")
    # Names that are no pattern: the indexes beside the manifest, by position; none for
    # the compressed shard.
    assert sorted(p.name for p in (tmp_path / "index").iterdir()) == ["000000.idx", "000001.idx"]
    assert not list(made.glob("*.idx"))
    table = load(str(tmp_path / "manifest.json"))
    assert [s.samples for s in table.shards] == [4, 4, 4]
    data = (made / "bsd.tar").read_bytes()
    index = ShardIndex((tmp_path / "index" / "000001.idx").read_bytes(), "000001.idx")
    read = [sample_from_span(e, data[e.offset : e.stop], "bsd.tar").data()
            for e in map(index.entry, range(4))]  # fmt: skip
    assert read == [s.data() for s in read_samples([str(made / "bsd.tar")])]


def test_offsets_point_at_each_samples_first_header(shards: list[Path]) -> None:
    result = run(["tarindex", "--offsets", str(shards[1])], cwd=shards[1].parent)
    assert result.returncode == 0
    data = json.loads(result.stdout)
    assert data["format"] == "tarkit-manifest" and data["version"] == 1
    (entry,) = data["shards"]
    assert entry["keys"] == [f"./s1-{i}" for i in range(5)]
    archive = shards[1].read_bytes()
    for key, offset in zip(entry["keys"], entry["offsets"], strict=True):
        # Reading from the offset on gives that sample first.
        first = next(group_samples(read_members(io.BytesIO(archive[offset:]))))
        assert first.key == key


def test_compressed_and_piped_shards_count_uncompressed_samples_and_hash_stored_bytes(
    shards: list[Path], tmp_path: Path
) -> None:
    gz = tmp_path / "shard.tar.gz"
    gz.write_bytes(gzip.compress(shards[1].read_bytes(), mtime=0))
    result = run(["tarindex", "--offsets", str(gz), f"pipe:cat {shards[1]}"])
    assert result.returncode == 0
    compressed, piped = json.loads(result.stdout)["shards"]
    assert compressed["samples"] == piped["samples"] == 5
    assert compressed["offsets"] == piped["offsets"]
    assert compressed["sha256"] == hashlib.sha256(gz.read_bytes()).hexdigest()
    assert compressed["bytes"] == gz.stat().st_size
    assert piped["url"] == f"pipe:cat {shards[1]}"


def test_a_bad_shard_is_an_error_and_no_manifest_is_written(
    shards: list[Path], tmp_path: Path
) -> None:
    cut = tmp_path / "cut.tar"
    cut.write_bytes(make_tar([("a.txt", b"x" * 3000), ("b.txt", b"y")])[:2000])
    out = tmp_path / "manifest.json"
    result = run(["tarindex", str(shards[0]), str(cut), "-o", str(out)])
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith(
        f"tarindex: error: {cut}: input ends inside member data"
    )
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["cut.tar"]
    missing = run(["tarindex", str(tmp_path / "none.tar")])
    assert missing.stderr == f"tarindex: error: {tmp_path}/none.tar: no such file\n"
    assert "manifest cannot name stdin" in run(["tarindex", "-"], input=b"").stderr


def test_shards_outside_the_manifests_directory_keep_their_path(
    shards: list[Path], tmp_path: Path
) -> None:
    result = run_shell(f"cd {tmp_path} && tarindex {shards[2]} -o m.json && cat m.json")
    assert result.returncode == 0
    manifest = json.loads(result.stdout)
    assert load(str(tmp_path / "m.json")).shards[0].url == str(shards[2])
    # Their indexes go beside the manifest, not among shards tarindex did not write.
    assert manifest["index"] == "index/%06d.idx"
    # numbered as the names are (shard-000002.tar: a pattern from 2)
    assert [p.name for p in (tmp_path / "index").iterdir()] == ["000002.idx"]
    assert check_random_access(tmp_path / "m.json").indexes.keys() == {str(shards[2])}


def test_keys_that_are_not_utf8_are_kept_as_json_escapes(tmp_path: Path) -> None:
    shard = tmp_path / "s.tar"
    shard.write_bytes(make_tar([("caf\udce9.txt", b"x"), ("tea.txt", b"y")]))
    result = run(["tarindex", "--offsets", str(shard), "-o", str(tmp_path / "m.json")])
    assert (result.returncode, result.stderr) == (0, "")
    assert b'"caf\\udce9"' in (tmp_path / "m.json").read_bytes()
    assert load(str(tmp_path / "m.json")).shards[0].keys == ["caf\udce9", "tea"]
    assert json.loads(run(["tarindex", "--offsets", str(shard)]).stdout)["shards"][0]["keys"][
        0
    ] == ("caf\udce9")


def test_a_manifest_cut_off_by_a_closed_pipe_is_a_quiet_141(tmp_path: Path) -> None:
    shard = tmp_path / "s.tar"
    # A manifest of ~3 MB: more than the 1 MiB pipe buffer.
    shard.write_bytes(make_tar((f"{'k' * 80}{i:07d}.txt", b"") for i in range(30000)))
    result = run_shell(
        f"tarindex --offsets {shard} | head -c 100 >/dev/null; echo ${{PIPESTATUS[0]}}"
    )
    assert (result.stdout, result.stderr) == (b"141\n", "")
