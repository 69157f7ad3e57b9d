"""TSV cells and lines: escaping, binary values, missing fields, alternatives, columns."""

from __future__ import annotations

import io
import re
import subprocess
from pathlib import Path

import pytest
from conftest import make_tar
from hypothesis import given
from hypothesis import strategies as st
from tarfiles import CountedName, counted_sample

from tarkit.errors import TruncatedError
from tarkit.format.field_spec import parse_field_spec
from tarkit.format.samples import group_samples
from tarkit.format.tar import read_members
from tarkit.stream.stages import read_samples
from tarkit.stream.tsv import as_text, cell, escape, tsv_lines, write_lines


def unescape(text: str) -> str:
    """The inverse of tarkit's escaping, written independently for the tests."""
    table = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}
    return re.sub(r"\\(x[0-9a-f]{2}|.)", lambda m: table.get(m.group(1)) or
                  bytes([int(m.group(1)[1:], 16)]).decode("utf-8", "surrogateescape"),
                  text)  # fmt: skip


def samples(members: list[tuple[str, bytes]]) -> list:
    return list(group_samples(read_members(io.BytesIO(make_tar(members)))))


def table(lines: list[str]) -> list[list[str]]:
    assert all(line.endswith("\n") for line in lines)
    return [line[:-1].split("\t") for line in lines]


# --- cells ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, escaped",
    [
        ("plain", "plain"),
        ("a\tb", "a\\tb"),
        ("two\nlines", "two\\nlines"),
        ("crlf\r\n", "crlf\\r\\n"),
        ("back\\slash", "back\\\\slash"),
        ("literal \\t is not a tab", "literal \\\\t is not a tab"),
        ("\\\t\\n", "\\\\\\t\\\\n"),
        ("héllo 日本 🙂", "héllo 日本 🙂"),
    ],
)
def test_cell_escapes_tab_newline_return_and_backslash(text: str, escaped: str) -> None:
    assert cell(text.encode()) == escaped
    assert unescape(escaped) == text


@given(st.text())
def test_escaped_text_has_no_separator_and_unescapes_to_the_original(text: str) -> None:
    escaped = escape(text)
    assert not {"\t", "\n", "\r"} & set(escaped)
    assert unescape(escaped) == text


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xd8\xff\xe0",
        b"caf\xe9",
        b"\x00",
        b"text with a NUL\x00",
        b"\x1b[31m",
        "é".encode()[:1],
    ],
)
def test_value_that_is_not_utf8_text_is_its_size_in_bytes(data: bytes) -> None:
    assert cell(data) == f"<{len(data)} bytes>"
    assert as_text(data) is None


def test_missing_field_is_an_empty_cell_and_empty_text_too() -> None:
    assert cell(None) == ""
    assert cell(b"") == ""


def test_undecodable_bytes_in_a_name_come_out_as_hex_escapes() -> None:
    name = b"caf\xe9\\x".decode("utf-8", "surrogateescape")
    assert escape(name) == "caf\\xe9\\\\x"
    assert unescape(escape(name)) == name


# --- lines ----------------------------------------------------------------------------


def test_default_columns_are_the_fields_of_the_first_sample_in_archive_order() -> None:
    rows = table(list(tsv_lines(samples([
        ("a.txt", b"one"), ("a.cls", b"1"),
        ("b.cls", b"2"), ("b.jpg", b"\xff\xd8"), ("b.txt", b"two"),
    ]))))  # fmt: skip
    assert rows == [["__key__", "txt", "cls"], ["a", "one", "1"], ["b", "two", "2"]]


def test_missing_field_leaves_an_empty_cell_in_its_column() -> None:
    rows = table(list(tsv_lines(samples([("a.txt", b"x"), ("b.cls", b"2")]),
                                parse_field_spec("txt cls"))))  # fmt: skip
    assert rows == [["__key__", "txt", "cls"], ["a", "x", ""], ["b", "", "2"]]


def test_alternatives_take_the_first_present_in_spec_order_not_archive_order() -> None:
    found = samples([
        ("a.caption", b"cap-a"), ("a.txt", b"txt-a"),
        ("b.caption", b"cap-b"),
        ("c.jpg", b"\xff"),
    ])  # fmt: skip
    rows = table(list(tsv_lines(found, parse_field_spec("txt;caption"))))
    assert rows == [["__key__", "txt;caption"], ["a", "txt-a"], ["b", "cap-b"], ["c", ""]]


def test_fields_match_case_insensitively_and_multi_dot_fields_work() -> None:
    found = samples([("a.seg.png", b"\x89PNG"), ("a.txt", b"t"), ("b.TXT", b"T"), ("c.png", b"")])
    rows = table(list(tsv_lines(found, parse_field_spec("seg.png txt"))))
    assert rows == [
        ["__key__", "seg.png", "txt"],
        ["a", "<4 bytes>", "t"],
        ["b", "", "T"],
        ["c", "", ""],
    ]


def test_no_header_and_no_key_leave_them_out() -> None:
    found = samples([("a.txt", b"x"), ("b.txt", b"y")])
    assert list(tsv_lines(found, header=False)) == ["a\tx\n", "b\ty\n"]
    assert list(tsv_lines(found, key=False)) == ["txt\n", "x\n", "y\n"]


def test_keys_and_header_names_are_escaped() -> None:
    found = samples([("tab\there.te\\xt", b"v")])
    assert list(tsv_lines(found)) == ["__key__\tte\\\\xt\n", "tab\\there\tv\n"]


def test_no_samples_gives_the_header_alone() -> None:
    assert list(tsv_lines([])) == ["__key__\n"]
    assert list(tsv_lines([], parse_field_spec("jpg cls"))) == ["__key__\tjpg\tcls\n"]
    assert list(tsv_lines([], key=False)) == []


def test_gnu_tar_archive_reads_into_tsv(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "0001.txt").write_bytes(b"a\tcat\non a mat\\")
    (tree / "0001.cls").write_bytes(b"3")
    (tree / "0002.txt").write_bytes(b"\xff\xfe latin-1 \xe9")
    (tree / "0002.cls").write_bytes(b"7\n")
    archive = tmp_path / "a.tar"
    subprocess.run(["tar", "--format=gnu", "--sort=name", "-cf", str(archive), "-C",
                    str(tree), "."], check=True)  # fmt: skip
    lines = list(tsv_lines(read_samples([str(archive)])))
    assert lines == [
        "__key__\tcls\ttxt\n",
        "./0001\t3\ta\\tcat\\non a mat\\\\\n",
        "./0002\t7\\n\t<12 bytes>\n",
    ]


# --- writing --------------------------------------------------------------------------


def test_write_lines_writes_every_whole_line_before_an_error_and_none_in_part() -> None:
    def lines():
        yield "first\n"
        yield "日本\n"
        raise TruncatedError("cut", source="x")

    out = io.BytesIO()
    with pytest.raises(TruncatedError):
        write_lines(lines(), out)
    assert out.getvalue() == "first\n日本\n".encode()


def test_write_lines_batches_many_lines_without_losing_any() -> None:
    out = io.BytesIO()
    write_lines((f"{i}\n" for i in range(50_000)), out)
    assert out.getvalue().split(b"\n")[:-1] == [str(i).encode() for i in range(50_000)]


def test_a_line_of_thousands_of_columns_folds_each_field_name_once() -> None:
    # Each column used to fold every field name of the sample: quadratic in the fields.
    sample = counted_sample(2000)
    CountedName.folds = 0
    rows = table(list(tsv_lines([sample, sample])))
    assert rows[0][:3] == ["__key__", "F00000", "F00001"]
    assert rows[1][:3] == rows[2][:3] == ["k", "0", "1"]
    assert len(rows[1]) == 2001
    assert CountedName.folds <= 3 * 2000  # the columns once, then each line's fields once


def test_columns_pick_by_name_from_one_pass_over_the_sample() -> None:
    (sample,) = samples([("k.a", b"1"), ("k.B", b"2"), ("k.c", b"3")])
    lines = tsv_lines([sample], [["c"], ["x", "b"], ["x"], ["A"]])
    assert table(list(lines)) == [["__key__", "c", "x;b", "x", "A"], ["k", "3", "2", "", "1"]]
