"""Datasets over files: ImageFolder layout, plain trees, plans."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from tarkit.errors import InputError, SourceError
from tarkit.format.encoding import ImageTransform
from tarkit.writing.file_datasets import FileTree, ImageFolder, PlanDataset, detect_layout


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


@pytest.mark.parametrize(
    "files,layout",
    [
        (["c/1.jpg", "d/2.png", "d/x/3.webp"], "imagefolder"),
        (["1.png", "1.seg.png", "1.json"], "tree"),  # no class directory
        (["c/1.json", "c/1.txt"], "tree"),  # no image
        (["c/1.jpg", "c/1.cls", "d/2.png", "d/2.json"], "tree"),  # files of the images' samples
    ],
)
def test_auto_layout_is_imagefolder_or_tree_when_only_one_reading_fits(
    tmp_path: Path, files: list[str], layout: str
) -> None:
    assert detect_layout(str(make(tmp_path, dict.fromkeys(files, b"")))) == layout


@pytest.mark.parametrize(
    "files,stray",
    [
        (["cat/1.jpg", "cat/Thumbs.db", "dog/2.jpg"], "cat/Thumbs.db"),
        (["cat/1.jpg", "dog/2.jpg", "labels.csv"], "labels.csv"),
        (["cat/1.jpg", "cat/1.json", "cat/LICENSE"], "cat/LICENSE"),
        (["top.jpg", "cat/1.jpg"], "top.jpg"),
    ],
)
def test_auto_layout_with_a_stray_file_among_class_directories_is_ambiguous(
    tmp_path: Path, files: list[str], stray: str
) -> None:
    root = make(tmp_path, dict.fromkeys(files, b""))
    with pytest.raises(InputError, match=f"ambiguous layout: .* but {stray} is not an image"):
        detect_layout(str(root))


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
