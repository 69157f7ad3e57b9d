"""Building tar archives for tests: raw headers and members, real archives made by GNU tar
and bsdtar, and what tarfile reads from them."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from tarkit.errors import InputError, SampleError
from tarkit.format.samples import Sample, group_samples, split_name
from tarkit.format.tar import BLOCK, DIRECTORY, FIFO, FILE, HARDLINK, SYMLINK, Member, read_members
from tarkit.format.tar_writer import DEFAULT_MTIME, make_header

END = bytes(1024)
LONG_DIR = "d" * 60 + "/" + "e" * 60  # 121 bytes: fits ustar only through the prefix field
LONG_BASE = "b" * 120  # a file name over 100 bytes: needs GNU L or pax


# --- building archives without tarkit ------------------------------------------------


def header(
    name: bytes | str,
    size: int = 0,
    typeflag: bytes = b"0",
    *,
    linkname: bytes = b"",
    prefix: bytes = b"",
    size_field: bytes | None = None,
    magic: bytes = b"ustar\x0000",
    checksum: bytes | None = None,
) -> bytes:
    """One 512-byte ustar header block with a correct checksum (unless ``checksum``)."""
    if isinstance(name, str):
        name = name.encode()
    block = bytearray(512)
    block[0 : len(name)] = name
    block[100:108] = b"0000644\0"
    block[108:116] = b"0000000\0"
    block[116:124] = b"0000000\0"
    block[124:136] = size_field if size_field is not None else b"%011o\0" % size
    block[136:148] = b"%011o\0" % DEFAULT_MTIME
    block[156:157] = typeflag
    block[157 : 157 + len(linkname)] = linkname
    block[257:265] = magic
    block[345 : 345 + len(prefix)] = prefix
    block[148:156] = b" " * 8
    block[148:156] = checksum if checksum is not None else b"%06o\0 " % sum(block)
    return bytes(block)


def padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


def member(name: bytes | str, data: bytes = b"", typeflag: bytes = b"0", **kw) -> bytes:
    """Header, data and padding of one member."""
    return header(name, len(data), typeflag, **kw) + padded(data)


def pax_record(keyword: str, value: bytes) -> bytes:
    body = b" " + keyword.encode() + b"=" + value + b"\n"
    length = len(body) + len(str(len(body)))
    length = len(body) + len(str(length))
    return str(length).encode() + body


def extension(payload: bytes, typeflag: bytes = b"x") -> bytes:
    """A pax (``x``/``g``) or GNU (``L``/``K``) extension header with its payload."""
    name = b"././@LongLink" if typeflag in (b"L", b"K") else b"././@PaxHeader"
    return header(name, len(payload), typeflag) + padded(payload)


def read_all(data: bytes, **kw) -> list:
    return list(read_members(io.BytesIO(data), "x.tar", **kw))


def input_error(data: bytes, **kw) -> InputError:
    with pytest.raises(InputError) as info:
        read_all(data, **kw)
    return info.value


# --- real archives -------------------------------------------------------------------

# (path, data) by the oldest format that can store the path.
V7_FILES = {
    "a.jpg": b"A" * 700,
    "a.cls": b"1",
    "a.seg.png": b"seg",
    "sub/c.txt": b"",
    "sub/c.bin": bytes(range(256)) * 4,
    "é-ü-日本.json": '{"x": "日本"}'.encode(),
    "exact.bin": b"x" * 512,
    "README": b"a file without a dot",
}
USTAR_FILES = {f"{LONG_DIR}/long.txt": b"in a long directory"}
FULL_FILES = {f"{LONG_BASE}.txt": b"a long base name"}


def make_tree(root: Path, level: str) -> Path:
    """A directory with files (by format ``level``: v7, ustar, full), a symlink, a subdir."""
    files = dict(V7_FILES)
    if level in ("ustar", "full"):
        files.update(USTAR_FILES)
    if level == "full":
        files.update(FULL_FILES)
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "link.jpg").symlink_to("a.jpg")
    (root / "empty-dir").mkdir()
    return root


# creating command (archive path and tree appended), tree level; bsdtar has no --sort,
# so "sorted" bsdtar archives get their paths listed in name order with -n.
ARCHIVERS = {
    "gnu-ustar": (["tar", "--format=ustar", "--sort=name"], "ustar"),
    "gnu-gnu": (["tar", "--format=gnu", "--sort=name"], "full"),
    "gnu-oldgnu": (["tar", "--format=oldgnu", "--sort=name"], "full"),
    "gnu-pax": (["tar", "--format=pax", "--sort=name"], "full"),
    "gnu-v7": (["tar", "--format=v7", "--sort=name"], "v7"),
    "gnu-pax-unsorted": (["tar", "--format=pax"], "full"),
    "bsdtar-ustar": (["bsdtar", "--format=ustar", "-n"], "ustar"),
    "bsdtar-pax": (["bsdtar", "--format=pax", "-n"], "full"),
    "bsdtar-gnutar": (["bsdtar", "--format=gnutar", "-n"], "full"),
    "bsdtar-v7": (["bsdtar", "--format=v7", "-n"], "v7"),
    "bsdtar-pax-unsorted": (["bsdtar", "--format=pax"], "full"),
}
COMPRESSIONS = {
    "gz": ["-z"],
    "bz2": ["-j"],
    "xz": ["-J"],
    "zst": ["--zstd"],
}


def sorted_paths(tree: Path) -> list[str]:
    """Every path under ``tree`` as ``./rel``, in name order (what tar --sort=name gives)."""
    paths = ["."]
    for directory, subdirs, files in os.walk(tree):
        rel = os.path.relpath(directory, tree)
        for name in subdirs + files:
            paths.append("./" + os.path.normpath(os.path.join(rel, name)))
    return sorted(paths)


def make_archive(directory: Path, kind: str, compression: str | None = None) -> Path:
    """Create an archive with the real tool ``kind`` (a key of ARCHIVERS)."""
    command, level = ARCHIVERS[kind]
    tree = directory / f"tree-{level}"
    if not tree.exists():
        make_tree(tree, level)
    suffix = f".tar.{compression}" if compression else ".tar"
    path = directory / f"{kind}{suffix}"
    flags = COMPRESSIONS[compression] if compression else []
    paths = sorted_paths(tree) if "-n" in command else ["."]
    subprocess.run([*command, *flags, "-cf", str(path), "-C", str(tree), *paths], check=True)
    return path


def tarfile_members(path: Path) -> list[tuple[str, str, bytes]]:
    """(name, kind, data) of every member as Python's tarfile reads the archive."""
    kinds = {
        tarfile.REGTYPE: FILE,
        tarfile.AREGTYPE: FILE,
        tarfile.DIRTYPE: DIRECTORY,
        tarfile.SYMTYPE: SYMLINK,
        tarfile.LNKTYPE: HARDLINK,
        tarfile.FIFOTYPE: FIFO,
    }
    result = []
    with tarfile.open(path) as archive:
        for info in archive:
            data = archive.extractfile(info).read() if info.isfile() else b""
            name = info.name + "/" if info.isdir() and info.name != "." else info.name
            result.append((name, kinds[info.type], data))
    return result


def expected_samples(path: Path) -> list[tuple[str, dict[str, bytes]]] | None:
    """The samples the key/field rule gives over tarfile's reading of the archive.

    None when a key comes back after other keys (an unsorted archive): tarkit refuses it.
    """
    samples: list[tuple[str, dict[str, bytes]]] = []
    for name, kind, data in tarfile_members(path):
        parts = split_name(name)
        if kind != FILE or parts is None:
            continue
        key, field = parts
        if samples and samples[-1][0] == key:
            samples[-1][1][field] = data
        elif any(k == key for k, _ in samples):
            return None
        else:
            samples.append((key, {field: data}))
    return samples


def check_samples(data: bytes, path: Path) -> None:
    """tarkit's samples of ``data`` are those of tarfile, or a SampleError if interleaved."""
    want = expected_samples(path)
    if want is None:
        with pytest.raises(SampleError, match="comes back after other keys"):
            tarkit_samples(data)
    else:
        assert tarkit_samples(data) == want


def tarkit_samples(data: bytes) -> list[tuple[str, dict[str, bytes]]]:
    return [(s.key, s.data()) for s in group_samples(read_members(io.BytesIO(data)))]


def strip_end(archive: bytes) -> bytes:
    """The archive without its end-of-archive marker and record padding."""
    end = len(archive)
    while end >= 512 and archive[end - 512 : end] == bytes(512):
        end -= 512
    return archive[:end]


# --- samples of many fields -----------------------------------------------------------


def wide_members(samples: int, fields: int) -> list[tuple[str, bytes]]:
    """Members of ``samples`` samples of ``fields`` empty fields each, whose names (87
    bytes) differ only in their last digits: a comparison of two runs over all of them."""
    return [
        (f"{key}.{'f' * 80}{i:06d}", b"") for key in "abcdefgh"[:samples] for i in range(fields)
    ]


class CountedName(str):
    """A field name that counts how often it is lowercased (``CountedName.folds``): a
    look-up by name folds each field once per sample, not once per column."""

    folds = 0

    def lower(self) -> str:
        CountedName.folds += 1
        return str.lower(self)


def counted_sample(fields: int) -> Sample:
    """A sample of ``fields`` one-byte fields named by :class:`CountedName`."""
    names = [CountedName(f"F{i:05d}") for i in range(fields)]
    members = [Member(f"k.{name}", FILE, 1, 0, b"%d" % (i % 10), 0) for i, name in enumerate(names)]
    return Sample("k", list(names), members, "-")


def member_size_on_disk(name: str, size: int) -> int:
    """Bytes a new member of ``size`` bytes named ``name`` takes in an archive tarkit
    writes (headers, data and padding)."""
    return len(make_header(name, size, mtime=0)) + size + (-size % BLOCK)
