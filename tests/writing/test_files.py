"""Creating shards: plan rows and directory trees as members, written deterministically."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import samples_of

from tarkit.errors import InputError, SourceError
from tarkit.format.samples import SkipLog
from tarkit.storage import Sink
from tarkit.writing.files import list_tree, plan_members, tree_members, write_members
from tarkit.writing.plan import read_plan


def test_plan_members_are_sorted_fields_with_text_as_utf8(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"\x00\x01")
    plan = tmp_path / "plan.csv"
    plan.write_text("txt,@bin,cls\nhé,a.bin,1\n", encoding="utf-8")
    members = list(plan_members(read_plan(str(plan))))
    assert members == [
        ("000000000.bin", b"\x00\x01"),
        ("000000000.cls", b"1"),
        ("000000000.txt", "hé".encode()),
    ]


def test_a_file_removed_after_the_check_is_a_source_error(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"x")
    plan = tmp_path / "plan.csv"
    plan.write_text("@bin\na.bin\n")
    rows = read_plan(str(plan))
    (tmp_path / "a.bin").unlink()
    with pytest.raises(SourceError, match="a.bin: cannot read"):
        list(plan_members(rows))


def test_tree_samples_are_grouped_by_key_in_utf8_byte_order(tmp_path: Path) -> None:
    for name in ("b.txt", "a/x.jpg", "a/x.cls", "a.d/y.txt", "é.txt", "Z.txt", ".hidden.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(name.encode())
    (tmp_path / "__meta__").mkdir()
    (tmp_path / "__meta__" / "m.json").write_bytes(b"{}")
    skips = SkipLog()
    samples = list_tree(str(tmp_path), skips=skips)
    assert [(s.key, [f for f, _ in s.files]) for s in samples] == [
        ("Z", ["txt"]),
        ("a.d/y", ["txt"]),
        ("a/x", ["cls", "jpg"]),
        ("b", ["txt"]),
        ("é", ["txt"]),
    ]
    assert list(skips.counts.values()) == [1]
    assert next(iter(skips.first.values())) == (str(tmp_path), "__meta__/m.json")
    with pytest.raises(InputError, match="not allowed with --strict"):
        list_tree(str(tmp_path), strict=True)


def test_written_tree_reads_back_and_an_error_leaves_no_output(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    (root / "k.txt").write_bytes(b"text")
    (root / "k.cls").write_bytes(b"3")
    out = tmp_path / "out.tar"
    assert write_members(tree_members(str(root), list_tree(str(root))), Sink(str(out))) == 2
    assert samples_of(out.read_bytes()) == [("k", {"cls": b"3", "txt": b"text"})]
    samples = list_tree(str(root))
    os.unlink(root / "k.txt")
    with pytest.raises(SourceError, match="k.txt: cannot read"):
        write_members(tree_members(str(root), samples), Sink(str(tmp_path / "bad.tar")))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.tar", "tree"]
