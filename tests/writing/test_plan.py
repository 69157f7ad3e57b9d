"""Plans: CSV/TSV rows checked whole before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tarkit.errors import InputError, SourceError, UsageError
from tarkit.writing.plan import PlanDataset, plan_delimiter, plan_members, read_plan


def test_rows_give_keys_text_and_file_fields_relative_to_the_plan(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.jpg").write_bytes(b"A")
    plan = tmp_path / "plan.csv"
    plan.write_text('@jpg,txt\ndata/a.jpg,"one, quoted"\n\n,only text\n', encoding="utf-8")
    rows = read_plan(str(plan))
    assert [(r.line, r.key, r.fields) for r in rows] == [
        (2, "000000000", ["jpg", "txt"]),
        (4, "000000001", ["txt"]),
    ]
    assert rows[0].load() == {"__key__": "000000000", "txt": "one, quoted", "jpg": b"A"}


def test_key_column_sets_keys_and_tsv_is_read_from_the_ending(tmp_path: Path) -> None:
    plan = tmp_path / "plan.tsv"
    plan.write_text("__key__\tcls\nx/1\t3\nx/2\t4\n")
    assert [(r.key, r.load()["cls"]) for r in read_plan(str(plan))] == [("x/1", "3"), ("x/2", "4")]


@pytest.mark.parametrize(
    "text,message",
    [
        ("@jpg,txt\nmissing.jpg,x\n", "line 2: field 'jpg': missing.jpg: no such file"),
        ("@jpg,txt\n.,x\n", "line 2: field 'jpg': .: is not a regular file"),
        ("txt,cls\na,1\nb\n", "line 3: 1 cells, but the header has 2 columns"),
        ("__key__,txt\nk,a\nk,b\n", "line 3: key 'k' is already used on line 2"),
        ("__key__,txt\nk.x,a\n", "line 2: sample 'k.x': a key must not have a dot"),
        ("txt,TXT\na,b\n", "line 1: column 'TXT' appears twice"),
        ("__key__\nk\n", "the header names no field"),
        ("__key__,txt\nk,\n", "line 2: the row has no fields"),
        ("\n\n", "the plan is empty"),
    ],
)
def test_bad_plans_fail_naming_the_line(tmp_path: Path, text: str, message: str) -> None:
    plan = tmp_path / "plan.csv"
    plan.write_text(text)
    with pytest.raises(InputError) as caught:
        read_plan(str(plan))
    assert str(caught.value).startswith(f"{plan}: ")
    assert message in str(caught.value)


def test_a_missing_plan_and_an_unknown_ending(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file"):
        read_plan(str(tmp_path / "none.csv"))
    with pytest.raises(UsageError, match="pass -d"):
        plan_delimiter("plan.dat")
    assert plan_delimiter("plan.dat", "tab") == "\t"


def test_key_format_makes_keys_from_the_row_and_text_columns(tmp_path: Path) -> None:
    plan = tmp_path / "plan.csv"
    plan.write_text("cls,txt\n3,a\n4,b\n")
    rows = read_plan(str(plan), key_format="c{cls}/{row:03d}")
    assert [r.key for r in rows] == ["c3/000", "c4/001"]
    with pytest.raises(UsageError, match="no text column 'jpg' \\(it can use: row, cls, txt\\)"):
        read_plan(str(plan), key_format="{jpg}")
    with pytest.raises(UsageError, match="--key '{txt:03d}': Unknown format code"):
        read_plan(str(plan), key_format="{txt:03d}")
    with pytest.raises(InputError, match="line 2: sample 'x.a'"):
        read_plan(str(plan), key_format="x.{txt}")
    keyed = tmp_path / "keyed.csv"
    keyed.write_text("__key__,txt\nk,a\n")
    with pytest.raises(UsageError, match="leave out --key"):
        read_plan(str(keyed), key_format="{row}")


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


def test_plan_dataset_loads_rows(tmp_path: Path) -> None:
    (tmp_path / "f.bin").write_bytes(b"F")
    (tmp_path / "p.csv").write_text("@bin,txt\nf.bin,hi\n")
    plan = PlanDataset(str(tmp_path / "p.csv"))
    assert len(plan) == 1 and plan[0] == {"__key__": "000000000", "txt": "hi", "bin": b"F"}


@pytest.mark.parametrize(
    "head,message",
    [
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", "a JPEG image, not a CSV/TSV plan"),
        (b"PK\x03\x04\x14\x00", "a zip archive, not a CSV/TSV plan: unpack it and give"),
        (b"Rar!\x1a\x07\x00", "a RAR archive, not a CSV/TSV plan: unpack it and give"),
        (b"PAR1\x15\x04\x15\x00", "a Parquet file, not a CSV/TSV plan"),
        (b"\xfd7zXZ\x00\x00", "an xz file, not a CSV/TSV plan"),
        (b"\xff\xfep\x00a\x00", "UTF-16 text, not a CSV/TSV plan: save the plan as UTF-8"),
    ],
)
def test_a_binary_file_given_as_a_plan_is_named_by_the_one_signature_table(
    tmp_path: Path, head: bytes, message: str
) -> None:
    plan = tmp_path / "plan.csv"
    plan.write_bytes(head + bytes(64))
    with pytest.raises(InputError) as caught:
        read_plan(str(plan))
    assert str(caught.value).startswith(f"{plan}: {message}")


def test_a_text_plan_whose_first_column_spells_a_signature_is_read_as_a_plan(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.txt").write_text("x")
    plan = tmp_path / "plan.csv"
    plan.write_text("ID3,@txt\nk1,a.txt\n")  # ID3 also begins an MP3 file
    (row,) = read_plan(str(plan))
    assert row.texts == (("ID3", "k1"),) and row.files == (("txt", str(tmp_path / "a.txt")),)
