"""The tar reader: archives made by GNU tar and bsdtar, crafted headers, every strict error.

Helpers here build archives block by block without tarkit (so the reader is checked
against an independent encoding) and are shared with the command tests.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest
from tarfiles import (
    ARCHIVERS,
    COMPRESSIONS,
    END,
    LONG_BASE,
    LONG_DIR,
    check_samples,
    expected_samples,
    extension,
    header,
    input_error,
    make_archive,
    member,
    padded,
    pax_record,
    read_all,
    strip_end,
    tarfile_members,
)

from tarkit.errors import HeaderError, InputError, TruncatedError
from tarkit.format import tar as tario
from tarkit.format.tar import DIRECTORY, FILE, SYMLINK, read_members

# Every test here runs with the compiled scanner and with the pure-Python reader.
pytestmark = pytest.mark.usefixtures("reader")


@pytest.mark.parametrize("kind", sorted(ARCHIVERS))
def test_real_archive_reads_like_tarfile(archive_dir: Path, kind: str) -> None:
    path = make_archive(archive_dir, kind)
    data = path.read_bytes()
    members = read_all(data)
    got = [(m.name.rstrip("/") + ("/" if m.kind is DIRECTORY else ""), m.kind, m.data)
           for m in members]  # fmt: skip
    want = [(n.rstrip("/") + ("/" if k == DIRECTORY else ""), k, d)
            for n, k, d in tarfile_members(path)]  # fmt: skip
    assert got == want
    check_samples(data, path)
    # Pass-through fidelity: the members' raw bytes are the archive, block for block.
    assert b"".join(m.raw for m in members) == strip_end(data)


@pytest.mark.parametrize("kind", ["gnu-gnu", "gnu-pax", "bsdtar-pax"])
def test_real_archive_has_long_and_utf8_names_and_symlink_target(
    archive_dir: Path, kind: str
) -> None:
    members = {m.name: m for m in read_all(make_archive(archive_dir, kind).read_bytes())}
    assert f"./{LONG_BASE}.txt" in members
    assert members[f"./{LONG_DIR}/long.txt"].data == b"in a long directory"
    assert members["./é-ü-日本.json"].data == '{"x": "日本"}'.encode()
    assert members["./link.jpg"].kind is SYMLINK
    assert members["./link.jpg"].linkname == "a.jpg"


def test_ustar_prefix_field_joins_the_name(archive_dir: Path) -> None:
    data = make_archive(archive_dir, "gnu-ustar").read_bytes()
    long = [m for m in read_all(data) if m.name.endswith("long.txt")]
    assert [m.name for m in long] == [f"./{LONG_DIR}/long.txt"]
    assert len(long[0].raw) == 1024  # one header block: the prefix field, no extension


@pytest.mark.parametrize("compression", sorted(COMPRESSIONS))
@pytest.mark.parametrize("kind", ["gnu-pax", "bsdtar-pax"])
def test_compressed_real_archive_reads_like_uncompressed(
    archive_dir: Path, kind: str, compression: str
) -> None:
    from tarkit.stream.stages import read_samples

    plain = make_archive(archive_dir, kind)
    packed = make_archive(archive_dir, kind, compression)
    got = [(s.key, s.data()) for s in read_samples([str(packed)])]
    assert got == expected_samples(plain)
    assert len(got) == 6


# --- crafted headers: formats the reader accepts ---------------------------------------


def test_v7_header_without_magic_is_read() -> None:
    data = member("old.txt", b"v7", magic=bytes(8)) + END
    [m] = read_all(data)
    assert (m.name, m.kind, m.data) == ("old.txt", FILE, b"v7")


def test_old_style_directory_is_marked_by_trailing_slash() -> None:
    data = header("dir/", 0, b"\0", magic=bytes(8)) + member("dir/x.txt", b"x") + END
    assert [(m.name, m.kind) for m in read_all(data)] == [("dir/", DIRECTORY), ("dir/x.txt", FILE)]


def test_gnu_long_name_and_long_link_apply_to_next_member() -> None:
    name = "n" * 300 + ".txt"
    target = "t" * 200 + ".txt"
    data = (
        extension(name.encode() + b"\0", b"L")
        + member(name[:100], b"hello")
        + extension(target.encode() + b"\0", b"K")
        + extension(b"link.txt\0", b"L")
        + header("link.txt", 0, b"2", linkname=target[:100].encode())
        + END
    )
    first, link = read_all(data)
    assert (first.name, first.data, first.offset) == (name, b"hello", 0)
    assert (link.name, link.kind, link.linkname) == ("link.txt", SYMLINK, target)
    assert first.raw == data[: len(first.raw)]


def test_pax_path_size_and_linkpath_override_the_header() -> None:
    payload = pax_record("path", "日本/ラベル.txt".encode()) + pax_record("size", b"5")
    data = extension(payload) + header("ignored", 0) + padded(b"hello") + END
    [m] = read_all(data)
    assert (m.name, m.size, m.data) == ("日本/ラベル.txt", 5, b"hello")
    link = extension(pax_record("linkpath", b"far/away.txt")) + header("l.txt", 0, b"2")
    [m] = read_all(link + END)
    assert (m.kind, m.linkname) == (SYMLINK, "far/away.txt")


def test_pax_global_header_with_a_comment_is_dropped() -> None:
    data = extension(pax_record("comment", b"made by git"), b"g") + member("a.txt", b"a") + END
    [m] = read_all(data)
    assert m.name == "a.txt"
    assert m.offset == 1024


def test_base256_size_is_read() -> None:
    size_field = b"\x80" + (5).to_bytes(11, "big")
    data = header("big.bin", size_field=size_field) + padded(b"12345") + END
    assert read_all(data)[0].data == b"12345"


def test_signed_byte_checksum_of_old_tars_is_accepted() -> None:
    block = bytearray(header("é.txt", 1))
    signed = sum(b - 256 if b > 127 else b for b in block[:148] + block[156:]) + 8 * 32
    block[148:156] = b"%06o\0 " % signed
    assert read_all(bytes(block) + padded(b"x") + END)[0].data == b"x"


def test_unknown_typeflag_is_read_as_a_member_with_data() -> None:
    [m] = read_all(member("odd.txt", b"data", b"Z") + END)
    assert m.data == b"data"
    assert m.kind not in (FILE, DIRECTORY)


@pytest.mark.parametrize("cut", [1, 511, 512, 513, 700, 1023])
def test_reader_gives_same_members_whatever_the_read_sizes(cut: int) -> None:
    archive = b"".join(member(f"s{i}.bin", bytes([i]) * (i * 97)) for i in range(20)) + END

    class Trickle(io.RawIOBase):
        """A stream that returns at most ``cut`` bytes per read, like a slow pipe."""

        def __init__(self) -> None:
            self.data = io.BytesIO(archive)

        def readable(self) -> bool:
            return True

        def read1(self, n: int = -1) -> bytes:
            return self.data.read(min(cut, n if n > 0 else cut))

        read = read1

    got = [(m.name, m.raw) for m in read_members(Trickle(), chunk_size=cut)]  # type: ignore[arg-type]
    assert got == [(m.name, m.raw) for m in read_all(archive)]


# --- the strict errors ------------------------------------------------------------------

GOOD = member("a.txt", b"hello")


def with_size_field(field: bytes) -> bytes:
    return header("a.txt", size_field=field) + padded(b"hello") + END


def test_empty_input_is_an_error_unless_allowed() -> None:
    error = input_error(b"")
    assert isinstance(error, TruncatedError)
    assert "empty input" in str(error)
    assert read_all(b"", allow_empty=True) == []


def test_input_cut_inside_a_header_names_the_offset() -> None:
    error = input_error(GOOD + GOOD[:100])
    assert isinstance(error, TruncatedError)
    assert str(error) == "x.tar: input ends inside a header block (byte 1024)"


def test_input_cut_inside_data_names_the_member() -> None:
    error = input_error(GOOD + member("b.bin", b"z" * 2000)[:1000])
    assert isinstance(error, TruncatedError)
    assert str(error) == (
        "x.tar: input ends inside member data (488 of 2000 bytes) (byte 1024, member b.bin)"
    )


def test_input_cut_between_members_without_end_marker_is_an_error() -> None:
    error = input_error(GOOD + GOOD)
    assert isinstance(error, TruncatedError)
    assert "without the end-of-archive marker" in str(error)
    assert error.offset == 2048


def test_one_trailing_zero_block_is_accepted_as_the_end() -> None:
    assert [m.name for m in read_all(GOOD + bytes(512))] == ["a.txt"]


def test_zero_padding_after_the_end_marker_is_accepted() -> None:
    assert len(read_all(GOOD + END + bytes(9216))) == 1


class Zeros(io.RawIOBase):
    """``head``, then ``count`` zero bytes made as they are read; ``served`` counts bytes."""

    def __init__(self, head: bytes, count: int) -> None:
        self._head = head
        self._left = count
        self.served = 0

    def readable(self) -> bool:
        return True

    def read1(self, n: int = -1) -> bytes:  # type: ignore[override]
        n = n if n > 0 else 1 << 20
        if self._head:
            data, self._head = self._head[:n], self._head[n:]
        else:
            data = bytes(min(n, self._left))
            self._left -= len(data)
        self.served += len(data)
        return data

    read = read1  # type: ignore[assignment]


@pytest.mark.parametrize("ignore_zeros", [False, True])
def test_zero_padding_up_to_the_bound_is_read_to_its_end(
    monkeypatch: pytest.MonkeyPatch, ignore_zeros: bool
) -> None:
    monkeypatch.setattr(tario, "MAX_TRAILING_ZEROS", 1 << 20)
    stream = Zeros(GOOD + END, 1 << 20)
    names = [m.name for m in read_members(stream, "x.tar", ignore_zeros=ignore_zeros)]  # type: ignore[arg-type]
    assert names == ["a.txt"]
    assert stream.served == len(GOOD + END) + (1 << 20)


@pytest.mark.parametrize("ignore_zeros", [False, True])
def test_zeros_beyond_the_bound_after_the_end_marker_stop_the_read_with_an_error_there(
    monkeypatch: pytest.MonkeyPatch, ignore_zeros: bool
) -> None:
    # A gigabyte of zeros, read to its end before this bound (a second's work, not a
    # stalled test): a server or a command can send zeros without end.
    monkeypatch.setattr(tario, "MAX_TRAILING_ZEROS", 1 << 20)
    stream = Zeros(GOOD + END, 1 << 30)
    with pytest.raises(InputError) as info:
        list(read_members(stream, "x.tar", ignore_zeros=ignore_zeros))  # type: ignore[arg-type]
    assert str(info.value) == (
        "x.tar: more than 1 MiB of zeros after the end-of-archive marker (no tar writer pads "
        "an archive that much: see docs/format.md) (byte 1050624)"
    )
    assert info.value.offset == len(GOOD + END) + (1 << 20)
    assert stream.served < 8 << 20


def test_data_after_the_end_marker_is_an_error_unless_ignore_zeros() -> None:
    error = input_error(GOOD + END + GOOD + END)
    assert "data after the end-of-archive marker" in str(error)
    assert "--ignore-zeros" in str(error)
    assert error.offset == 2048
    assert [m.offset for m in read_all(GOOD + END + GOOD + END, ignore_zeros=True)] == [0, 2048]


@pytest.mark.parametrize(
    "archive, ignore_zeros, end",
    [
        (GOOD + END, False, 1024),
        (GOOD + END + bytes(9216), False, 1024),
        (GOOD + bytes(512), False, 1024),  # one zero block at the very end
        (END, False, 0),
        (GOOD + END + GOOD + END, True, 3072),  # the last run of zero blocks
        (GOOD + bytes(512) + GOOD + END, True, 2560),
    ],
)
def test_the_reader_says_where_the_end_of_archive_marker_begins(
    archive: bytes, ignore_zeros: bool, end: int
) -> None:
    members = read_members(io.BytesIO(archive), ignore_zeros=ignore_zeros)
    assert members.end is None
    list(members)
    assert members.end == end


def test_a_stream_that_starts_inside_an_archive_gives_the_archive_offsets() -> None:
    members = read_members(io.BytesIO(GOOD + GOOD + END), "x.tar", start=4096)
    assert [m.offset for m in members] == [4096, 5120]
    assert members.end == 6144
    error = input_error(GOOD + GOOD[:700], start=4096)
    assert isinstance(error, TruncatedError) and error.offset == 5120


def test_a_lone_zero_block_followed_by_members_is_an_error() -> None:
    error = input_error(GOOD + bytes(512) + GOOD + END)
    assert isinstance(error, HeaderError)
    assert error.offset == 1024
    assert len(read_all(GOOD + bytes(512) + GOOD + END, ignore_zeros=True)) == 2


def test_bad_checksum_in_the_first_header_says_not_a_tar_archive() -> None:
    block = bytearray(GOOD)
    block[0] ^= 1
    error = input_error(bytes(block) + END)
    assert (
        str(error) == "x.tar: not a tar archive (bad header checksum in the first block) (byte 0)"
    )


def test_bad_checksum_mid_archive_names_its_offset() -> None:
    block = bytearray(GOOD)
    block[10] = ord("x")
    error = input_error(GOOD + GOOD + bytes(block) + END)
    assert isinstance(error, HeaderError)
    assert str(error) == "x.tar: bad header checksum (byte 2048)"


def test_non_numeric_checksum_field_is_a_bad_checksum() -> None:
    error = input_error(header("a.txt", 5, checksum=b"zzzzzz\0 ") + padded(b"hello") + END)
    assert "bad header checksum" in str(error)


@pytest.mark.parametrize(
    "field, what",
    [
        (b"\xff" * 12, "negative size"),
        (b"\xff" + b"\xff" * 10 + b"\xfe", "negative size"),
        (b"-0000000005\0", "malformed size"),
        (b"0000000x005\0", "malformed size"),
        (b"00000000 05\0", "malformed size"),
    ],
)
def test_negative_or_malformed_size_field_is_a_header_error(field: bytes, what: str) -> None:
    error = input_error(with_size_field(field))
    assert isinstance(error, HeaderError)
    assert what in str(error)
    assert error.offset == 0


def test_base256_size_beyond_any_input_is_a_clean_error() -> None:
    # 2**70 bytes: must be reported as bad input (truncated or too large), not crash.
    error = input_error(with_size_field(b"\x80" + (2**70).to_bytes(11, "big")))
    assert error.offset == 0


def test_size_beyond_the_input_is_truncation() -> None:
    error = input_error(with_size_field(b"\x80" + (2**40).to_bytes(11, "big")))
    assert isinstance(error, TruncatedError)
    assert "inside member data" in str(error)


@pytest.mark.parametrize("typeflag", [b"x", b"L", b"K", b"g"])
def test_oversized_extension_header_is_refused_before_it_is_read(typeflag: bytes) -> None:
    name = b"././@LongLink" if typeflag in (b"L", b"K") else b"././@PaxHeader"
    # Only the header: the reader must refuse it without waiting for 16 MiB of payload.
    error = input_error(header(name, 16 << 20, typeflag) + bytes(4096))
    assert isinstance(error, HeaderError)
    assert "over the 1048576-byte limit" in str(error)


@pytest.mark.parametrize(
    "payload",
    [
        b"15 path=abc.txt\n",  # length one short
        b"99 path=abc.txt\n",  # length beyond the header
        b"16 path=abc.txt\x00",  # no closing newline
        b"x6 path=abc.txt\n",  # length not a number
        b"16 pathabc.txtX\n",  # no '='
        b"0 path=abc.txt\n",  # zero length
    ],
)
def test_malformed_pax_record_is_a_header_error(payload: bytes) -> None:
    error = input_error(extension(payload) + GOOD + END)
    assert isinstance(error, HeaderError)
    assert "malformed pax extended header record" in str(error)


def test_malformed_pax_size_is_a_header_error() -> None:
    error = input_error(extension(pax_record("size", b"12a")) + GOOD + END)
    assert "malformed pax size" in str(error)


def test_extension_header_then_end_of_input_is_truncation() -> None:
    error = input_error(extension(pax_record("path", b"x.txt")))
    assert isinstance(error, TruncatedError)


def test_extension_header_then_zero_block_is_an_error() -> None:
    assert isinstance(input_error(extension(pax_record("path", b"x.txt")) + END), HeaderError)


def test_pax_and_gnu_long_name_for_one_member_conflict() -> None:
    data = extension(pax_record("path", b"one.txt")) + extension(b"two.txt\0", b"L") + GOOD + END
    assert "conflicting" in str(input_error(data))


def test_global_pax_header_that_renames_is_refused() -> None:
    error = input_error(extension(pax_record("path", b"x.txt"), b"g") + GOOD + END)
    assert "global pax header sets path" in str(error)


# --- headers that downstream readers would disagree on -----------------------------------


@pytest.mark.parametrize("keyword", ["path", "linkpath"])
def test_pax_path_or_linkpath_with_a_nul_is_a_header_error(keyword: str) -> None:
    data = extension(pax_record(keyword, b"a\0b.txt")) + header("l.txt", 0, b"2") + END
    error = input_error(data)
    assert isinstance(error, HeaderError)
    assert f"pax {keyword} contains a NUL byte" in str(error)


@pytest.mark.parametrize(("typeflag", "what"), [(b"L", "name"), (b"K", "link name")])
def test_gnu_long_name_without_its_nul_is_a_header_error(typeflag: bytes, what: str) -> None:
    # The padding is not zero: GNU tar and tarfile would read on into it, bsdtar would not.
    payload = b"long/name.txt"
    data = header(b"././@LongLink", len(payload), typeflag) + payload + b"\x80" * 499
    error = input_error(data + header("link.txt", 0, b"2") + END)
    assert isinstance(error, HeaderError)
    assert f"GNU long {what} without its NUL terminator" in str(error)
    assert error.offset == 0


@pytest.mark.parametrize("charset", [b"BINARY", b"ISO-IR 10646 2000 UTF-8"])
def test_the_two_pax_hdrcharsets_are_accepted(charset: bytes) -> None:
    data = extension(pax_record("hdrcharset", charset) + pax_record("path", b"x.txt")) + GOOD
    assert [m.name for m in read_all(data + END)] == ["x.txt"]


def test_an_unknown_pax_hdrcharset_is_a_header_error() -> None:
    data = extension(pax_record("hdrcharset", b"latin-1")) + GOOD + END
    error = input_error(data)
    assert isinstance(error, HeaderError)
    assert "unknown pax hdrcharset 'latin-1'" in str(error)


@pytest.mark.parametrize("magic", [bytes(8), b"ustar  \0"], ids=["v7", "gnu"])
def test_prefix_bytes_without_the_ustar_magic_are_a_header_error(magic: bytes) -> None:
    # GNU headers keep atime where ustar keeps the prefix; v7 headers nothing.
    data = member("x.txt", b"x", magic=magic, prefix=b"00007315272") + END
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        assert archive.getnames() == ["00007315272/x.txt"]  # tarfile joins them anyway
    error = input_error(data)
    assert isinstance(error, HeaderError)
    assert "name prefix field of a header without the ustar magic" in str(error)


def test_checksum_digits_after_a_nul_do_not_count() -> None:
    block = bytearray(header("x.txt", 1))
    block[148:156] = b"\0" + block[148:154] + b" "  # the right digits, behind a NUL
    data = bytes(block) + padded(b"x") + END
    with pytest.raises(tarfile.ReadError):  # tarfile reads the field as 0
        tarfile.open(fileobj=io.BytesIO(data)).getnames()
    error = input_error(data)
    assert "bad header checksum" in str(error)


@pytest.mark.parametrize("typeflag", [b"S", b"V", b"M"])
def test_gnu_special_members_are_unsupported(typeflag: bytes) -> None:
    error = input_error(member("sparse.bin", b"x", typeflag) + END)
    assert "unsupported member type" in str(error)
    assert error.member == "sparse.bin"


def test_crafted_pax_sparse_member_is_unsupported_and_named_by_its_header() -> None:
    data = extension(pax_record("GNU.sparse.major", b"1")) + GOOD + END
    error = input_error(data)
    assert (
        str(error)
        == "x.tar: unsupported member type: GNU sparse member (pax) (byte 0, member a.txt)"
    )


@pytest.mark.parametrize("version", ["0.0", "0.1", "1.0"])
def test_gnu_tar_pax_sparse_member_is_unsupported_not_misread(tmp_path: Path, version: str) -> None:
    # A sparse member's data is a map plus the non-hole bytes: reading it as a plain
    # file would give wrong content without a word.
    (tmp_path / "hole.bin").write_bytes(b"")
    with open(tmp_path / "hole.bin", "r+b") as f:
        f.truncate(1 << 20)
        f.seek(0, 2)
        f.write(b"end")
    path = tmp_path / "sparse.tar"
    subprocess.run(
        ["tar", "--format=pax", "--sparse", f"--sparse-version={version}", "-cf", str(path),
         "-C", str(tmp_path), "hole.bin"],
        check=True,
    )  # fmt: skip
    error = input_error(path.read_bytes())
    # 0.1 and 1.0 name it in a record (the header says GNUSparseFile.N/hole.bin), 0.0 in
    # the header that follows the pax header.
    assert (
        str(error)
        == "x.tar: unsupported member type: GNU sparse member (pax) (byte 0, member hole.bin)"
    )


@pytest.mark.parametrize("typeflag", [b"1", b"2", b"3", b"4", b"6"])
def test_non_regular_member_with_a_size_is_refused(typeflag: bytes) -> None:
    # tarfile reads no data after such headers, other readers skip it: they disagree.
    error = input_error(header("odd.txt", 512, typeflag) + bytes(512) + END)
    assert "nonzero size field" in str(error)


def listing(tool: str, data: bytes) -> tuple[int, list[str]]:
    """(exit status, names) of ``tool -tf -`` on ``data``."""
    result = subprocess.run([tool, "-tf", "-"], input=data, capture_output=True)
    return result.returncode, result.stdout.decode().splitlines()


def tarfile_listing(data: bytes) -> list[tuple[str, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as archive:
        return [(i.name, archive.extractfile(i).read() if i.isreg() else b"")  # type: ignore[union-attr]
                for i in archive]  # fmt: skip


SIZED_DIRECTORIES = {
    "ustar": header("d/", 255, b"5"),
    "beyond the input": header("d/", 1 << 30, b"5"),
    "base-256": header("d/", size_field=b"\x80" + (300).to_bytes(11, "big"), typeflag=b"5"),
    "without a slash": header("d", 255, b"5"),
    "pax path": extension(pax_record("path", b"dd/")) + header("d/", 255, b"5"),
    "GNU long name": extension(b"dd/\0", b"L") + header("d/", 255, b"5"),
}


@pytest.mark.parametrize("directory", SIZED_DIRECTORIES.values(), ids=list(SIZED_DIRECTORIES))
def test_directory_with_a_size_field_is_read_with_no_data_as_every_reader_reads_it(
    directory: bytes,
) -> None:
    # As in CPython's own test archive (ustar/dirtype-with-size): GNU tar, bsdtar, tarfile
    # and Go read the next header right after the directory's.
    data = member("a.txt", b"A" * 10) + directory + member("b.txt", b"B" * 20) + END
    a, d, b = read_all(data)
    assert (d.kind, d.size, d.data, d.raw, d.offset) == (DIRECTORY, 0, b"", directory, 1024)
    assert (b.name, b.data, b.offset) == ("b.txt", b"B" * 20, 1024 + len(directory))
    names = ["a.txt", d.name, "b.txt"]
    assert listing("tar", data) == (0, names)
    assert listing("bsdtar", data) == (0, names)
    assert [n for n, _ in tarfile_listing(data)] == [n.rstrip("/") for n in names]
    assert tarfile_listing(data)[2] == ("b.txt", b"B" * 20)


def test_directory_sized_by_a_pax_record_is_refused_as_bsdtar_skips_that_size() -> None:
    data = (member("a.txt", b"A" * 10) + extension(pax_record("size", b"700"))
            + header("d/", 0, b"5") + member("b.txt", b"B" * 20) + END)  # fmt: skip
    error = input_error(data)
    assert (error.what, error.offset, error.member) == (
        "directory member with a nonzero pax size (700)",
        2048,
        "d/",
    )
    assert listing("bsdtar", data) == (0, ["a.txt", "d/"])  # b.txt silently lost
    assert listing("tar", data) == (0, ["a.txt", "d/", "b.txt"])


@pytest.mark.parametrize(
    "odd", [header("f", 255, b"6"), header("d/", 255, b"\0")], ids=["fifo", "old-style directory"]
)
def test_fifo_or_old_style_directory_with_a_size_stays_refused_as_gnu_tar_loses_its_place(
    odd: bytes,
) -> None:
    data = member("a.txt", b"A" * 10) + odd + member("b.txt", b"B" * 20) + END
    error = input_error(data)
    assert error.what.endswith("member with a nonzero size field (255)")
    assert listing("tar", data)[0] == 2  # "Skipping to next header"
    assert [n for n, _ in tarfile_listing(data)] == ["a.txt", odd[:1].decode(), "b.txt"]


def pax_time(keyword: str, value: bytes, typeflag: bytes = b"x") -> bytes:
    record = extension(pax_record(keyword, value), typeflag)
    return member("a.txt", b"A" * 10) + record + member("b.txt", b"B" * 20) + END


# What Go's archive/tar (ParseInt of the seconds, digits after the dot) or GNU tar refuse.
BAD_PAX_TIMES = [b"abc", b"12a", b"1.5x", b"1e5", b"0x10", b"1_000", b"1.2.3", b"5 ", b" 5",
                 b"+5", b".5", b"-", b"", "١".encode()]  # fmt: skip
GOOD_PAX_TIMES = [b"5", b"-5", b"0", b"1.", b"1.5", b"-1.5", b"946684800.123456789012",
                  b"09223372036854775807", b"-9223372036854775808"]  # fmt: skip


@pytest.mark.parametrize("keyword", ["mtime", "atime", "ctime"])
@pytest.mark.parametrize("value", BAD_PAX_TIMES)
def test_pax_time_that_is_not_a_decimal_number_is_a_header_error(
    keyword: str, value: bytes
) -> None:
    for typeflag in (b"x", b"g"):
        data = pax_time(keyword, value, typeflag)
        error = input_error(data)
        shown = value.decode("ascii", "backslashreplace")
        assert isinstance(error, HeaderError)
        assert (error.what, error.offset) == (f"malformed pax {keyword} {shown!r}", 1024)
        assert [n for n, _ in tarfile_listing(data)] == ["a.txt", "b.txt"]  # read as time 0


@pytest.mark.parametrize("value", [b"9223372036854775808", b"-9223372036854775809", b"9" * 5000])
def test_pax_time_beyond_64_bits_is_a_header_error(value: bytes) -> None:
    error = input_error(pax_time("mtime", value))
    assert error.what.startswith("pax mtime '") and error.what.endswith(
        "' is out of the 64-bit range"
    )
    assert len(error.what) < 100
    assert listing("tar", pax_time("mtime", value))[0] == 2


@pytest.mark.parametrize("value", [b"abc", b"+5", b".5", b"", b" 5"])
def test_gnu_tar_fails_on_the_pax_times_tarkit_refuses_too(value: bytes) -> None:
    assert listing("tar", pax_time("mtime", value))[0] == 2


@pytest.mark.parametrize("value", GOOD_PAX_TIMES)
def test_pax_time_in_decimal_seconds_is_read(value: bytes) -> None:
    data = pax_time("mtime", value)
    assert [(m.name, m.data) for m in read_all(data)] == [
        ("a.txt", b"A" * 10),
        ("b.txt", b"B" * 20),
    ]
    assert listing("tar", data) == (0, ["a.txt", "b.txt"])
