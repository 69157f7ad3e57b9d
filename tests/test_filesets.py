"""Datasets over files: ImageFolder layout, plain trees, plans."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from tarkit.encoding import ImageTransform
from tarkit.errors import InputError, SourceError
from tarkit.filesets import FileTree, ImageFolder, PlanDataset, is_image_folder


def make(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def test_image_folder_lists_classes_sorted_and_skips_what_it_cannot_use(tmp_path: Path) -> None:
    root = make(tmp_path, {"b/1.JPEG": b"b1", "a/x/2.png": b"a2", "a/notes.txt": b"n",
                           "a/.hidden.jpg": b"h"})  # fmt: skip
    folder = ImageFolder(str(root))
    assert folder.classes == ["a", "b"]
    assert [folder[i]["__key__"] for i in range(len(folder))] == ["a/x/2", "b/1"]
    assert folder[1] == {"__key__": "b/1", "jpg": b"b1", "cls": 1, "class.txt": "b"}
    assert folder.skipped == ["a/notes.txt"]
    assert pickle.loads(pickle.dumps(folder)).items == folder.items


def test_image_folder_refuses_two_files_that_make_one_key(tmp_path: Path) -> None:
    root = make(tmp_path, {"a/x.jpg": b"1", "a/x.png": b"2"})
    with pytest.raises(InputError, match="would both be sample 'a/x'"):
        ImageFolder(str(root))


def test_layout_detection(tmp_path: Path) -> None:
    assert is_image_folder(str(make(tmp_path / "f", {"c/1.jpg": b"", "d/2.png": b""})))
    assert not is_image_folder(str(make(tmp_path / "t", {"c/1.jpg": b"", "c/1.cls": b""})))
    assert not is_image_folder(str(make(tmp_path / "u", {"c/1.jpg": b"", "top.jpg": b""})))


def test_file_tree_groups_fields_by_key(tmp_path: Path) -> None:
    root = make(tmp_path, {"z.txt": b"z", "d/k.seg.png": b"s", "d/k.jpg": b"j", "NOFIELD": b""})
    tree = FileTree(str(root))
    assert [tree[i] for i in range(len(tree))] == [
        {"__key__": "d/k", "jpg": b"j", "seg.png": b"s"},
        {"__key__": "z", "txt": b"z"},
    ]
    assert tree.skipped == ["NOFIELD"]
    with pytest.raises(SourceError, match="no such directory"):
        FileTree(str(tmp_path / "missing"))


def test_transform_renaming_two_fields_to_one_is_an_error(tmp_path: Path) -> None:
    import io

    from PIL import Image

    png, jpg = io.BytesIO(), io.BytesIO()
    Image.new("RGB", (2, 2)).save(png, format="PNG")
    Image.new("RGB", (2, 2)).save(jpg, format="JPEG")
    root = make(tmp_path, {"k.png": png.getvalue(), "k.jpg": jpg.getvalue()})
    tree = FileTree(str(root), ImageTransform(image_format="webp"))
    with pytest.raises(Exception, match="two fields become 'webp'"):
        tree[0]


def test_plan_dataset_loads_rows(tmp_path: Path) -> None:
    make(tmp_path, {"f.bin": b"F"})
    (tmp_path / "p.csv").write_text("@bin,txt\nf.bin,hi\n")
    plan = PlanDataset(str(tmp_path / "p.csv"))
    assert len(plan) == 1 and plan[0] == {"__key__": "000000000", "txt": "hi", "bin": b"F"}
