"""Scratch space: a private file created once, a tree removed whatever was done inside."""

from __future__ import annotations

import os
import stat

import pytest

from tarkit.storage.scratch import create_private_file, remove_tree


def test_a_private_file_is_created_once_mode_0600_and_never_through_a_link(tmp_path) -> None:
    path = tmp_path / "sample.jpg"
    create_private_file(str(path), memoryview(b"x" * 70_000))
    assert path.read_bytes() == b"x" * 70_000
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(FileExistsError):
        create_private_file(str(path), b"again")
    target = tmp_path / "elsewhere"
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(FileExistsError):
        create_private_file(str(tmp_path / "link"), b"through")
    assert not target.exists()


def test_a_tree_made_unwritable_inside_is_removed_without_following_links(tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_bytes(b"kept")
    tree = tmp_path / "workspace"
    (tree / "locked" / "deeper").mkdir(parents=True)
    (tree / "locked" / "deeper" / "sample.txt").write_bytes(b"x")
    (tree / "to-outside").symlink_to(outside)
    os.chmod(tree / "locked" / "deeper", 0o500)
    os.chmod(tree / "locked", 0o000)
    remove_tree(str(tree))
    assert not tree.exists()
    assert (outside / "kept").read_bytes() == b"kept"
    remove_tree(str(tree))  # already gone: nothing raised
