"""The field spec of -f: parsed, and applied to a sample (tarkit/format/field_spec.py)."""

from __future__ import annotations

import io

import pytest
from conftest import make_tar

from tarkit.format.field_spec import parse_field_spec, select_fields
from tarkit.format.samples import group_samples
from tarkit.format.tar import read_members

# Every test here runs with the compiled scanner and with the pure-Python reader.
pytestmark = pytest.mark.usefixtures("reader")


def test_field_spec_parses_columns_and_alternatives() -> None:
    assert parse_field_spec("jpg;png cls") == [["jpg", "png"], ["cls"]]
    assert parse_field_spec(" jpg,cls ;json ") == [["jpg"], ["cls"], ["json"]]
    assert parse_field_spec("a;;b") == [["a", "b"]]
    assert parse_field_spec("") == []


def test_select_fields_keeps_first_alternative_present_in_archive_order() -> None:
    archive = make_tar([("a.cls", b"c"), ("a.png", b"p"), ("a.jpg", b"j"), ("a.json", b"{}")])
    [sample] = group_samples(read_members(io.BytesIO(archive)))
    chosen = select_fields(sample, parse_field_spec("jpg;png cls"))
    assert chosen.fields == ["cls", "jpg"]
    assert [m.data for m in chosen.members] == [b"c", b"j"]
    assert select_fields(sample, parse_field_spec("webp;png")).fields == ["png"]
    assert select_fields(sample, parse_field_spec("txt")).fields == []


def test_select_fields_matches_names_ignoring_case_and_keeps_them_as_written() -> None:
    archive = make_tar([("a.JPG", b"j"), ("a.Cls", b"c"), ("a.txt", b"t")])
    [sample] = group_samples(read_members(io.BytesIO(archive)))
    chosen = select_fields(sample, parse_field_spec("jpg CLS;txt"))
    assert chosen.fields == ["JPG", "Cls"]
    assert [m.data for m in chosen.members] == [b"j", b"c"]
