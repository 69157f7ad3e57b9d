"""Samples: the key/field rule (checked against webdataset's), grouping, skips and checks."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from conftest import make_tar
from hypothesis import given
from hypothesis import strategies as st
from tarfiles import END, header, member
from webdataset.tariterators import base_plus_ext

from tarkit.errors import SampleError, TruncatedError
from tarkit.format.samples import (
    DOT_FIRST,
    NO_FIELD,
    QUIET_SKIPS,
    SkipLog,
    group_samples,
    skip_reason,
    split_name,
)
from tarkit.format.tar import DIRECTORY, FIFO, FILE, SYMLINK, Member, read_members

# Every test here runs with the compiled scanner and with the pure-Python reader.
pytestmark = pytest.mark.usefixtures("reader")


def samples(archive: bytes, **kw) -> list[tuple[str, dict[str, bytes]]]:
    return [(s.key, s.data()) for s in group_samples(read_members(io.BytesIO(archive)), **kw)]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("x.jpg", ("x", "jpg")),
        ("a/b/x.seg.png", ("a/b/x", "seg.png")),
        ("a.d/x.y/z.tar.gz", ("a.d/x.y/z", "tar.gz")),
        ("x.JPG", ("x", "JPG")),
        ("x.", ("x", "")),
        ("日本/ラベル.cls", ("日本/ラベル", "cls")),
        ("README", None),
        ("a.d/README", None),
        (".hidden", None),
        ("dir/.hidden.txt", None),
        ("dir/", None),
    ],
)
def test_split_name_follows_the_key_field_rule(name: str, expected: tuple | None) -> None:
    assert split_name(name) == expected


# Newlines are left out: webdataset's regex treats them specially, tar names never have them.
NAMES = st.text(alphabet=st.sampled_from("ab./_-é日 "), max_size=12)


@given(NAMES)
def test_split_name_agrees_with_webdataset_except_hidden_files(name: str) -> None:
    key, field = base_plus_ext(name)
    if name.rpartition("/")[2].startswith("."):
        # webdataset's regex backtracks and reads d/.x.txt as key "d/", field "x.txt";
        # tarkit skips such a member with a warning instead.
        assert split_name(name) is None
    else:
        assert split_name(name) == (None if key is None else (key, field))


def test_adjacent_members_with_one_key_form_a_sample() -> None:
    archive = make_tar([("a.jpg", b"1"), ("a.cls", b"2"), ("b.jpg", b"3"), ("c/d.x.y", b"4")])
    assert samples(archive) == [
        ("a", {"jpg": b"1", "cls": b"2"}),
        ("b", {"jpg": b"3"}),
        ("c/d", {"x.y": b"4"}),
    ]


def test_sample_gives_fields_bytes_raw_and_size() -> None:
    archive = make_tar([("a.jpg", b"1" * 600), ("a.cls", b"2")])
    [sample] = group_samples(read_members(io.BytesIO(archive)), "in.tar")
    assert sample.fields == ["jpg", "cls"]
    assert sample.get("cls") == b"2"
    assert sample.get("png") is None
    assert sample.raw == archive[: len(archive) - 1024]
    assert sample.size == 512 + 1024 + 512 + 512
    assert sample.source == "in.tar"
    assert repr(sample) == "Sample('a', ['jpg', 'cls'])"


@pytest.mark.parametrize("count", [2, 12])  # a short sample scans, a long one folds once
def test_a_field_is_found_by_name_whatever_its_case_by_get_and_field_index(count: int) -> None:
    # Sample.get matched names exactly while every tool ignored case: one rule now.
    names = ["JPG", "cls", *[f"f{i}.txt" for i in range(count - 2)]]
    archive = make_tar([(f"a.{name}", name.encode()) for name in names])
    [sample] = group_samples(read_members(io.BytesIO(archive)), "in.tar")
    assert sample.get("jpg") == sample.get("JPG") == b"JPG"
    assert sample.get("CLS") == b"cls"
    assert sample.get("png") is None
    assert sample.field_index("png", "Jpg") == 0
    assert sample.field_index("webp", "png") is None
    assert sample.get("png", "cls", "jpg") == b"cls"  # the first of the names it has
    if count > 2:
        assert sample.field_index(f"F{count - 3}.TXT") == count - 1


def test_directories_and_webdataset_meta_members_are_skipped_silently() -> None:
    archive = (
        member("d/", typeflag=b"5")
        + member("__meta__", b"m")
        + member("__index__/x.json", b"i")
        + member("d/a.txt", b"a")
        + END
    )
    skips = SkipLog()
    assert samples(archive, skips=skips) == [("d/a", {"txt": b"a"})]
    assert skips.total == 0


def test_members_without_a_dot_and_links_are_skipped_and_counted() -> None:
    notes: list[tuple[str, str, str]] = []
    skips = SkipLog(lambda *note: notes.append(note))
    archive = (
        member("a.txt", b"a")
        + member("README", b"r")
        + member("LICENSE", b"l")
        + header("l.txt", 0, b"2", linkname=b"a.txt")
        + header("h.txt", 0, b"1", linkname=b"a.txt")
        + header("f.pipe", 0, b"6")
        + member("b.txt", b"b")
        + END
    )
    assert samples(archive, source="in.tar", skips=skips) == [
        ("a", {"txt": b"a"}),
        ("b", {"txt": b"b"}),
    ]
    assert skips.counts == {NO_FIELD: 2, "symlink member": 1, "hard link member": 1,
                            "fifo member": 1}  # fmt: skip
    # One notice per reason, with its first member.
    assert notes == [
        ("member without a field (no dot in the file name)", "in.tar", "README"),
        ("symlink member", "in.tar", "l.txt"),
        ("hard link member", "in.tar", "h.txt"),
        ("fifo member", "in.tar", "f.pipe"),
    ]
    assert skips.summary() == (
        "skipped 5 members: 2 without a field (no dot in the file name), "
        "1 symlink, 1 hard link, 1 fifo"
    )


def test_a_member_whose_name_starts_with_a_dot_is_skipped_for_that_reason() -> None:
    notes: list[tuple[str, str, str]] = []
    skips = SkipLog(lambda *note: notes.append(note))
    archive = member("d/.hidden.txt", b"h") + member(".x", b"x") + member("a.txt", b"a") + END
    assert samples(archive, source="in.tar", skips=skips) == [("a", {"txt": b"a"})]
    assert notes == [(DOT_FIRST, "in.tar", "d/.hidden.txt")]
    assert DOT_FIRST == "member whose file name starts with a dot (no key before it)"
    assert skips.summary() == (
        "skipped 2 members: 2 whose file name starts with a dot (no key before it)"
    )
    with pytest.raises(SampleError, match=r"^in.tar: member whose file name starts with a dot"):
        samples(archive, source="in.tar", strict=True)


def test_skip_summary_says_member_for_one() -> None:
    skips = SkipLog()
    skips.add("symlink member", "x.tar", "l")
    assert skips.summary() == "skipped 1 member: 1 symlink"
    assert skips.first == {"symlink member": ("x.tar", "l")}


@pytest.mark.parametrize(
    "bad, what",
    [
        (member("README", b"r"), "member without a field (no dot in the file name)"),
        (header("l.txt", 0, b"2", linkname=b"a.txt"), "symlink member"),
        (header("dev.raw", 0, b"3"), "character device member"),
    ],
)
def test_strict_makes_skipped_members_errors(bad: bytes, what: str) -> None:
    archive = member("a.txt", b"a") + bad + END
    with pytest.raises(SampleError) as info:
        samples(archive, source="in.tar", strict=True)
    assert str(info.value).startswith(f"in.tar: {what} is not allowed with --strict (byte 1024")


def test_directories_are_fine_even_with_strict() -> None:
    assert samples(member("d/", typeflag=b"5") + member("d/a.b") + END, strict=True) == [
        ("d/a", {"b": b""})
    ]


def test_a_field_twice_in_a_sample_is_an_error_naming_it() -> None:
    archive = make_tar([("a.jpg", b"1"), ("a.cls", b"2"), ("a.jpg", b"3")])
    with pytest.raises(SampleError) as info:
        samples(archive, source="in.tar")
    assert str(info.value) == (
        "in.tar: field 'jpg' appears twice in sample 'a' (a sample has one member per field: "
        "remove the extra member, or if two samples share this key, give them keys of their "
        "own) (byte 2048, member a.jpg)"
    )


def test_a_one_letter_field_twice_is_an_error_too() -> None:
    with pytest.raises(SampleError, match="field 'b' appears twice in sample 'a'"):
        samples(make_tar([("a.b", b"1"), ("a.b", b"2")]))


def test_fields_differing_only_in_case_are_duplicates_and_the_error_says_rename() -> None:
    # webdataset lowercases fields: x.JPG and x.jpg would overwrite each other there.
    with pytest.raises(SampleError) as info:
        samples(make_tar([("x.JPG", b"1"), ("x.jpg", b"2")]), source="in.tar")
    assert str(info.value) == (
        "in.tar: field 'jpg' appears twice in sample 'x' ('JPG' and 'jpg' differ only in "
        "case, and webdataset lowercases field names: rename one of them) "
        "(byte 1024, member x.jpg)"
    )


def test_a_key_that_comes_back_is_an_error_that_says_what_went_out_and_to_sort() -> None:
    archive = make_tar([("a.jpg", b"1"), ("b.jpg", b"2"), ("a.cls", b"3")])
    with pytest.raises(SampleError) as info:
        samples(archive, source="in.tar")
    assert str(info.value) == (
        "in.tar: key 'a' comes back after other keys: members of a sample must be adjacent, "
        "so sample 'a' read earlier lacks this member (sort the input: tarsort, or tar "
        "--sort=name; if these are two samples, give them keys of their own) "
        "(byte 2048, member a.cls)"
    )


def test_a_sample_is_yielded_only_when_the_next_member_proves_it_complete() -> None:
    def members() -> Iterator[Member]:
        yield from read_members(io.BytesIO(make_tar([("a.x", b"1"), ("b.x", b"2"), ("b.y", b"3")])))
        raise TruncatedError("input ends inside a header block", source="in.tar")

    grouped = group_samples(members())
    assert next(grouped).key == "a"
    # b.x and b.y were read, but b might have more fields: b must not come out.
    with pytest.raises(TruncatedError):
        next(grouped)


@given(
    st.text(alphabet="_./aé", min_size=1, max_size=10),
    st.sampled_from([FILE, DIRECTORY, SYMLINK, FIFO]),
)
def test_group_samples_keeps_a_member_exactly_when_skip_reason_says_it_is_data(
    name: str, kind: str
) -> None:
    one = Member(name, kind, 0, 0, b"", 0)
    skips = SkipLog()
    kept = [sample.key for sample in group_samples(iter([one]), skips=skips)]
    reason = skip_reason(one)
    assert kept == ([] if reason is not None else [split_name(name)[0]])  # type: ignore[index]
    assert skips.counts == ({reason: 1} if reason and reason not in QUIET_SKIPS else {})
