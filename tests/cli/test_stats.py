"""tarkit stats through the real command: the summary of shards `tarkit shard` made from an
ImageFolder (classes.json, real JPEG and PNG images), duplicate keys, a manifest alone with
no shard read (shards absent, a server that counts requests), remote shards, stdin, -p,
and a bad shard's one-line error."""

from __future__ import annotations

import gzip
import io
import json
import shutil
from pathlib import Path

import pytest
from conftest import make_tar, run, run_shell
from PIL import Image
from shard_server import ShardServer
from test_tar2tsv import imported_modules

# ImageFolder: cat has 3 JPEGs 30 pixels high, dog 2 PNGs 11 pixels wide.
JPEG_SIZES = [(20, 30), (24, 30), (28, 30)]
PNG_SIZES = [(11, 5), (11, 9)]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shards of 2 samples, their manifest and classes.json, as tarkit shard writes them."""
    root = tmp_path_factory.mktemp("stats")
    for name, sizes, kind in (("cat", JPEG_SIZES, "JPEG"), ("dog", PNG_SIZES, "PNG")):
        (root / "photos" / name).mkdir(parents=True)
        for i, size in enumerate(sizes):
            Image.new("RGB", size, (i * 40, 90, 30)).save(
                root / "photos" / name / f"{i}.{kind.lower().replace('jpeg', 'jpg')}", kind
            )
    result = run(["tarkit", "shard", str(root / "photos"), "-o", str(root / "out/s-%06d.tar"),
                  "-c", "2", "--manifest", str(root / "out/manifest.json")])  # fmt: skip
    assert result.returncode == 0, result.stderr
    return root / "out"


@pytest.fixture
def out(made: Path, tmp_path: Path) -> Path:
    """A copy of the shards, the manifest and classes.json, for a test to change."""
    return Path(shutil.copytree(made, tmp_path / "out"))


def stats(*args: str, **kw: object) -> dict:
    result = run(["tarkit", "stats", "--json", *args], **kw)  # type: ignore[arg-type]
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def lines(result) -> list[str]:  # type: ignore[no-untyped-def]
    return [line.rstrip() for line in result.stdout.decode().splitlines()]


def test_text_summary_of_an_image_folders_shards(made: Path) -> None:
    result = run(["tarkit", "stats", str(made)])
    assert result.returncode == 0 and result.stderr == ""
    text = lines(result)
    assert text[:4] == [
        "shards          3 (1 to 2 samples a shard, median 2)",
        "samples         5",
        f"bytes           {sum(p.stat().st_size for p in made.glob('*.tar')):,}"
        f" ({sum(p.stat().st_size for p in made.glob('*.tar')) / 1024:.1f} KiB)",
        "duplicate keys  none among 5 keys",
    ]
    fields = {line.split()[0]: line.split()[1:3] for line in text[text.index("") + 2 :
                                                                    text.index("", 6)]}  # fmt: skip
    assert fields == {"class.txt": ["5", "100.0%"], "cls": ["5", "100.0%"],
                      "jpg": ["3", "60.0%"], "png": ["2", "40.0%"]}  # fmt: skip
    assert "jpg         3         20      24   28          30      30   30        0" in text
    assert "png         2         11      11   11           5       5    9        0" in text
    assert text[-4:] == [
        "cls: 2 values",
        "value  name  samples  share",
        "0      cat         3  60.0%",
        "1      dog         2  40.0%",
    ]
    assert lines(run(["tarkit", "stats", "--top", "1", str(made)]))[-4:] == [
        "cls: 2 values, the 1 most common",
        "value  name  samples  share",
        "0      cat         3  60.0%",
        "… 1 more values, 2 samples (--top 0 shows them all)",
    ]
    refused = run(["tarkit", "stats", "--top", "-1", str(made)])
    assert (refused.returncode, refused.stderr) == (
        2, "tarkit stats: error: --top must not be negative (got -1)\n")  # fmt: skip


def test_json_has_every_figure(made: Path) -> None:
    summary = stats(str(made))
    assert (summary["shards"], summary["samples"], summary["read"]) == (3, 5, True)
    assert summary["samples_per_shard"] == {"count": 3, "total": 5, "min": 1, "median": 2,
                                            "max": 2, "exact": True}  # fmt: skip
    assert list(summary["fields"]) == ["class.txt", "cls", "jpg", "png"]
    jpg = summary["fields"]["jpg"]
    sizes = sorted(len(m.read()) for m in _members(made, ".jpg"))
    assert jpg["size"] == {"count": 3, "total": sum(sizes), "min": sizes[0], "median": sizes[1],
                           "max": sizes[2], "exact": True}  # fmt: skip
    assert jpg["images"] == {
        "images": 3, "unread": 0,
        "width": {"count": 3, "total": 72, "min": 20, "median": 24, "max": 28, "exact": True},
        "height": {"count": 3, "total": 90, "min": 30, "median": 30, "max": 30, "exact": True},
    }  # fmt: skip
    assert summary["classes"] == {"cls": {"distinct": 2, "labels": [
        {"label": "0", "name": "cat", "samples": 3}, {"label": "1", "name": "dog", "samples": 2}]}}  # fmt: skip
    assert summary["keys"] == {"checked": 5, "duplicates": 0, "examples": []}


def _members(folder: Path, suffix: str) -> list[io.BytesIO]:
    import tarfile

    found = []
    for shard in sorted(folder.glob("*.tar")):
        with tarfile.open(shard) as archive:
            for member in archive.getmembers():
                if member.name.endswith(suffix):
                    found.append(io.BytesIO(archive.extractfile(member).read()))  # type: ignore[union-attr]
    return found


def test_class_values_without_classes_json_have_no_names_and_classes_names_them(
    out: Path,
) -> None:
    (out / "classes.json").rename(out.parent / "names.json")
    result = run(["tarkit", "stats", str(out)])
    assert lines(result)[-3:] == ["value  samples  share", "0            3  60.0%",
                                  "1            2  40.0%"]  # fmt: skip
    named = stats(str(out), "--classes", str(out.parent / "names.json"))
    assert [c["name"] for c in named["classes"]["cls"]["labels"]] == ["cat", "dog"]
    result = run(["tarkit", "stats", str(out), "--classes", str(out / "absent.json")])
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr == f"tarkit stats: error: {out / 'absent.json'}: no such file\n"


def test_keys_in_more_than_one_shard_are_counted(tmp_path: Path) -> None:
    for name, keys in (("a", "xyz"), ("b", "wy"), ("c", "zv")):
        (tmp_path / f"{name}.tar").write_bytes(make_tar((f"{k}.txt", b"t") for k in keys))
    result = run(["tarkit", "stats", str(tmp_path / "a.tar"), str(tmp_path / "b.tar"),
                  str(tmp_path / "c.tar")])  # fmt: skip
    assert "duplicate keys  2 in more than one shard, among 7 keys: y, z" in lines(result)
    assert stats(str(tmp_path))["keys"] == {"checked": 7, "duplicates": 2, "examples": ["y", "z"]}


def test_the_manifest_alone_reads_no_shard(out: Path) -> None:
    for shard in out.glob("*.tar"):
        shard.unlink()  # a shard read would fail
    summary = stats(str(out / "manifest.json"), "--no-read")
    assert (summary["shards"], summary["samples"], summary["read"]) == (3, 5, False)
    assert summary["bytes"] == json.loads((out / "manifest.json").read_text())["bytes"]
    assert (summary["fields"], summary["classes"], summary["keys"]["duplicates"]) == ({}, {}, None)
    text = lines(run(["tarkit", "stats", str(out), "--no-read"]))
    assert text[1:4] == ["samples         5", text[2],
                         "duplicate keys  not known (the manifest lists none: leave out --no-read)"]  # fmt: skip
    assert text[-1].startswith("From the manifest alone: fields, classes and image sizes need")


def test_without_a_manifest_no_read_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.tar").write_bytes(make_tar([("x.txt", b"t")]))
    result = run(["tarkit", "stats", "--no-read", str(tmp_path / "a.tar")])
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr == (f"tarkit stats: error: {tmp_path / 'a.tar'}: no manifest lists these "
                             "shards, so their samples are known only by reading them (leave out "
                             "--no-read, or name their manifest)\n")  # fmt: skip


def test_remote_shards_over_http_and_a_remote_manifest_alone(
    made: Path, http_server: ShardServer
) -> None:
    for path in made.iterdir():
        http_server.files[f"/d/{path.name}"] = path.read_bytes()
    manifest = f"{http_server.url}/d/manifest.json"
    assert stats(manifest) == stats(str(made))
    assert sum(n for p, n in http_server.hits.items() if p.endswith(".tar")) == 3
    http_server.hits.clear()
    alone = stats(manifest, "--no-read")
    assert (alone["samples"], alone["shards"]) == (5, 3)
    assert set(http_server.hits) == {"/d/manifest.json", "/d/manifest.columns"}  # no shard


def test_a_bad_shard_is_one_line_naming_it_exit_2_and_no_summary(out: Path) -> None:
    second = sorted(out.glob("*.tar"))[1]
    second.write_bytes(second.read_bytes()[:1536])
    for parallel in ("1", "2"):
        result = run(["tarkit", "stats", "-p", parallel, str(out)])
        assert (result.returncode, result.stdout) == (2, b"")
        assert result.stderr.startswith(f"tarkit stats: error: {second}: input ends inside ")
        assert result.stderr.count("\n") == 1


def test_parallel_reads_give_the_same_summary(made: Path) -> None:
    assert stats("-p", "2", str(made)) == stats("-p", "1", str(made))


def test_the_stream_on_stdin_and_a_compressed_shard(made: Path, tmp_path: Path) -> None:
    first = sorted(made.glob("*.tar"))[0]
    packed = gzip.compress(first.read_bytes())
    (tmp_path / "a.tar.gz").write_bytes(packed)
    summary = stats(str(tmp_path / "a.tar.gz"))
    assert (summary["samples"], summary["bytes"]) == (2, len(packed))
    second = sorted(made.glob("*.tar"))[1]
    piped = run_shell(f"tarcat {first} {second} | tarkit stats --json")
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["samples"] == 4
    assert stats("-", input=first.read_bytes())["bytes"] == first.stat().st_size


def test_never_imports_torch_numpy_or_pillow(made: Path) -> None:
    modules = imported_modules("tarkit.cli.stats", [str(made)], made)
    assert "tarkit" in modules and not modules & {"torch", "numpy", "PIL", "typer"}
