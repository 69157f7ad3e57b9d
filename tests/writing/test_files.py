"""Directory trees as samples: the one walker under tarcreate --dir, FileTree, ImageFolder and
the layout detection."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from conftest import samples_of

from tarkit.errors import InputError, SourceError
from tarkit.format.encoding import ImageTransform
from tarkit.format.samples import SkipLog
from tarkit.storage import Sink
from tarkit.stream.stages import write_members
from tarkit.writing.files import (
    METADATA_FILE,
    NO_FIELD_FILE,
    NOT_AN_IMAGE,
    FileTree,
    ImageFolder,
    detect_layout,
    list_tree,
    tree_members,
)


def make(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


@pytest.fixture
def awkward(tmp_path: Path) -> Path:
    """A tree of class directories holding everything the walker must leave out."""
    root = make(tmp_path / "root", {"cat/1.jpg": b"c1", "cat/1.json": b"{}", "dog/2.png": b"d2",
                                    "__meta__/info.txt": b"meta", ".hidden.jpg": b"h",
                                    ".git/x.jpg": b"h"})  # fmt: skip
    (tmp_path / "outside.jpg").write_bytes(b"not in the tree")
    (root / "cat" / "3.jpg").symlink_to("../../outside.jpg")
    (root / "dog" / "4.png").symlink_to("2.png")
    (root / "linked").symlink_to("cat")
    os.mkfifo(root / "dog" / "5.png")
    return root


WALKER_SKIPS = {METADATA_FILE: 1, "symlink": 3, "fifo": 1}


def test_the_walker_skips_alike_under_list_tree_file_tree_and_image_folder(awkward: Path) -> None:
    root = str(awkward)
    walker_notes = [
        ("symlink", root, "linked"),
        (METADATA_FILE, root, "__meta__/info.txt"),
        ("fifo", root, "dog/5.png"),
    ]
    for build in (list_tree, FileTree, ImageFolder):
        notes: list[tuple[str, str, str]] = []
        skips = SkipLog(lambda *note: notes.append(note))  # noqa: B023 (used at once)
        build(root, skips=skips)
        assert notes[:3] == walker_notes, build
        assert {reason: skips.counts[reason] for reason in WALKER_SKIPS} == WALKER_SKIPS


def test_the_walker_keeps_only_regular_files_inside_the_tree(awkward: Path) -> None:
    assert [(s.key, [f for f, _ in s.files]) for s in list_tree(str(awkward))] == [
        ("cat/1", ["jpg", "json"]),
        ("dog/2", ["png"]),
    ]
    tree = FileTree(str(awkward))
    assert [tree[i]["__key__"] for i in range(len(tree))] == ["cat/1", "dog/2"]
    folder = ImageFolder(str(awkward), skips=(skips := SkipLog()))
    assert folder.classes == ["cat", "dog"]  # not __meta__, not the symlink to a directory
    assert [key for key, _, _ in folder.items] == ["cat/1", "dog/2"]
    assert skips.counts == {**WALKER_SKIPS, NOT_AN_IMAGE: 1}  # cat/1.json
    # The files the walker leaves out are no stray files for the layout detection.
    assert detect_layout(str(awkward)) == "tree"
    (awkward / "cat" / "1.json").unlink()
    assert detect_layout(str(awkward)) == "imagefolder"


@pytest.mark.parametrize("build", [list_tree, FileTree, ImageFolder])
def test_strict_refuses_the_first_file_the_walker_skips(awkward: Path, build: type) -> None:
    with pytest.raises(InputError) as raised:
        build(str(awkward), strict=True)
    assert str(raised.value) == f"{awkward}/linked: symlink is not allowed with --strict"


def test_dereference_reads_a_symlink_to_a_file_and_never_a_directory(awkward: Path) -> None:
    skips = SkipLog()
    samples = list_tree(str(awkward), skips=skips, dereference=True)
    assert [s.key for s in samples] == ["cat/1", "cat/3", "dog/2", "dog/4"]
    assert skips.counts == {METADATA_FILE: 1, "symlink": 1, "fifo": 1}  # linked -> cat/


def test_tree_samples_are_grouped_by_key_in_utf8_byte_order(tmp_path: Path) -> None:
    for name in ("b.txt", "a/x.jpg", "a/x.cls", "a.d/y.txt", "é.txt", "Z.txt", ".hidden.txt",
                 "README"):  # fmt: skip
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(name.encode())
    skips = SkipLog()
    samples = list_tree(str(tmp_path), skips=skips)
    assert [(s.key, [f for f, _ in s.files]) for s in samples] == [
        ("Z", ["txt"]),
        ("a.d/y", ["txt"]),
        ("a/x", ["cls", "jpg"]),
        ("b", ["txt"]),
        ("é", ["txt"]),
    ]
    assert skips.counts == {NO_FIELD_FILE: 1}
    assert skips.first[NO_FIELD_FILE] == (str(tmp_path), "README")


def test_two_files_of_one_field_are_an_error_naming_both(tmp_path: Path) -> None:
    root = make(tmp_path, {"x.jpg": b"1", "x.JPG": b"2"})
    for build in (list_tree, FileTree):
        with pytest.raises(InputError, match="x.JPG and x.jpg would both be field 'jpg'"):
            build(str(root))


def test_written_tree_reads_back_and_an_error_leaves_no_output(tmp_path: Path) -> None:
    root = make(tmp_path / "tree", {"k.txt": b"text", "k.cls": b"3"})
    out = tmp_path / "out.tar"
    assert write_members(tree_members(str(root), list_tree(str(root))), Sink(str(out))) == 2
    assert samples_of(out.read_bytes()) == [("k", {"cls": b"3", "txt": b"text"})]
    samples = list_tree(str(root))
    os.unlink(root / "k.txt")
    with pytest.raises(SourceError, match="k.txt: cannot read"):
        write_members(tree_members(str(root), samples), Sink(str(tmp_path / "bad.tar")))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.tar", "tree"]


def test_image_folder_lists_classes_sorted_and_skips_what_it_cannot_use(tmp_path: Path) -> None:
    root = make(tmp_path, {"b/1.JPEG": b"b1", "a/x/2.png": b"a2", "a/notes.txt": b"n",
                           "a/.hidden.jpg": b"h"})  # fmt: skip
    skips = SkipLog()
    folder = ImageFolder(str(root), skips=skips)
    assert folder.classes == ["a", "b"]
    assert [folder[i]["__key__"] for i in range(len(folder))] == ["a/x/2", "b/1"]
    assert folder[1] == {"__key__": "b/1", "jpg": b"b1", "cls": 1, "class.txt": "b"}
    assert skips.counts == {NOT_AN_IMAGE: 1}
    assert skips.first[NOT_AN_IMAGE] == (str(root), "a/notes.txt")
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
    skips = SkipLog()
    tree = FileTree(str(root), skips=skips)
    assert [tree[i] for i in range(len(tree))] == [
        {"__key__": "d/k", "jpg": b"j", "seg.png": b"s"},
        {"__key__": "z", "txt": b"z"},
    ]
    assert skips.first[NO_FIELD_FILE] == (str(root), "NOFIELD")
    assert pickle.loads(pickle.dumps(tree)).samples == tree.samples
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
