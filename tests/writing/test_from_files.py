"""shard_files: the dataset for a directory or a plan, sharded, and an ImageFolder's classes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import samples_of

from tarkit.errors import SourceError, UsageError
from tarkit.format.samples import SkipLog
from tarkit.writing.files import NOT_AN_IMAGE, FileTree, ImageFolder, list_tree
from tarkit.writing.from_files import open_files, shard_files
from tarkit.writing.plan import PlanDataset


def make(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def test_a_tree_is_read_by_the_walker_tarcreate_dir_uses(tmp_path: Path) -> None:
    root = make(tmp_path / "t", {"a/x.jpg": b"1", "a/x.txt": b"2", "README": b"", "b.txt": b"3"})
    (root / "l.txt").symlink_to("b.txt")
    via_shard, via_tarcreate = SkipLog(), SkipLog()
    dataset = open_files(str(root), "tree", skips=via_shard)
    assert isinstance(dataset, FileTree)
    assert dataset.samples == list_tree(str(root), skips=via_tarcreate)
    assert via_shard.counts == via_tarcreate.counts and via_shard.first == via_tarcreate.first


def test_open_files_picks_the_dataset_by_source_and_layout(tmp_path: Path) -> None:
    root = make(tmp_path / "photos", {"cat/1.jpg": b"c", "dog/2.png": b"d"})
    assert isinstance(open_files(str(root)), ImageFolder)
    assert isinstance(open_files(str(root), "tree"), FileTree)
    (tmp_path / "plan.csv").write_text("@jpg\nphotos/cat/1.jpg\n")
    assert isinstance(open_files(str(tmp_path / "plan.csv")), PlanDataset)
    with pytest.raises(UsageError, match="--layout 'flat': expected one of auto, imagefolder"):
        open_files(str(root), "flat")
    with pytest.raises(UsageError, match="--key makes the keys of plan rows"):
        open_files(str(root), key_format="{row}")
    with pytest.raises(SourceError, match="nowhere: no such file or directory"):
        open_files(str(tmp_path / "nowhere"))


def test_an_image_folder_publishes_its_classes_beside_the_shards_or_where_told(
    tmp_path: Path,
) -> None:
    root = make(tmp_path / "photos", {"cat/1.jpg": b"c", "dog/2.png": b"d", "dog/x.txt": b""})
    skips = SkipLog()
    manifest = shard_files(str(root), str(tmp_path / "out" / "s-%d.tar"), layout="imagefolder",
                           skips=skips)  # fmt: skip
    assert manifest.samples == 2 and skips.counts == {NOT_AN_IMAGE: 1}
    assert json.loads((tmp_path / "out" / "classes.json").read_text()) == ["cat", "dog"]
    assert [key for key, _ in samples_of((tmp_path / "out" / "s-0.tar").read_bytes())] == [
        "cat/1", "dog/2"
    ]  # fmt: skip
    shard_files(str(root), str(tmp_path / "two" / "s-%d.tar"), layout="imagefolder",
                classes=str(tmp_path / "names.json"))  # fmt: skip
    assert json.loads((tmp_path / "names.json").read_text()) == ["cat", "dog"]
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == ["s-0.tar"]
    shard_files(str(root), str(tmp_path / "tree" / "s-%d.tar"), layout="tree")
    assert sorted(p.name for p in (tmp_path / "tree").iterdir()) == ["s-0.tar"]


def test_a_tree_and_a_plan_in_s3_give_the_shards_of_their_local_copies(
    tmp_path: Path, s3_env: dict[str, str]
) -> None:
    import s3fs

    make(tmp_path / "t", {"b/x.txt": b"1", "b/x.cls": b"2", "a.txt": b"3",
                            "a/c/y.txt": b"4", ".hidden/z.txt": b"5"})  # fmt: skip
    (tmp_path / "plan.csv").write_text("@txt,label\nt/b/x.txt,one\nt/a.txt,two\n")
    options = {"endpoint_url": s3_env["FSSPEC_S3_ENDPOINT_URL"]}
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir("files-in")
    fs.put(str(tmp_path) + "/", "files-in/d/", recursive=True)
    fs.mkdir("files-out")
    for name in ("t", "plan.csv"):
        remote = f"s3://files-in/d/{name}" + "/" * (name == "t")
        shard_files(remote, f"s3://files-out/{name}/s-%d.tar", layout="tree",
                    storage_options=options)  # fmt: skip
        shard_files(str(tmp_path / name), str(tmp_path / "out" / name / "s-%d.tar"),
                    layout="tree")  # fmt: skip
        assert (
            fs.cat(f"files-out/{name}/s-0.tar")
            == (tmp_path / "out" / name / "s-0.tar").read_bytes()
        )
    keys = [key for key, _ in samples_of((tmp_path / "out" / "t" / "s-0.tar").read_bytes())]
    assert sorted(keys) == ["a", "a/c/y", "b/x"]
