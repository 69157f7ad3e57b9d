"""Block-level streaming tar reader: strict, never seeks, byte-exact.

The reader turns any readable byte stream (a pipe, a socket, a decompressor) into
:class:`Member` objects. It accepts ustar (with the prefix field), GNU (``L``/``K`` long
names), pax (``x`` and ``g``) and v7 headers, and raises :class:`~tarkit.errors.InputError`
for everything a downstream reader (GNU tar, bsdtar, Python's ``tarfile``) would stop at,
misread or silently drop: bad checksums, malformed numeric fields, odd extension records,
and a stream that ends without its end-of-archive marker.

Each member keeps its raw bytes (extension headers, header, data, padding), so copying a
member writes exactly what was read (:class:`~tarkit.format.tar_writer.TarWriter`, which
also makes new members).

>>> import io
>>> from tarkit.format.tar_writer import TarWriter
>>> archive = io.BytesIO()
>>> with TarWriter(archive) as w:
...     w.add("a/x.txt", b"hello")
>>> _ = archive.seek(0)
>>> [(m.name, m.data) for m in read_members(archive)]
[('a/x.txt', b'hello')]
"""

from __future__ import annotations

import io
import re
import zlib
from collections.abc import Iterator
from operator import itemgetter
from typing import Any, BinaryIO

from ..errors import HeaderError, InputError, TruncatedError
from . import scanner

BLOCK = 512
ZERO_BLOCK = bytes(BLOCK)
END_OF_ARCHIVE = bytes(2 * BLOCK)
MAX_EXTENSION_SIZE = 1 << 20  # pax / GNU long-name data; real names are under 4 KiB
# Zeros allowed after the end-of-archive marker: tar pads an archive to a whole record
# (10 KiB by default; GNU tar -b N gives N x 512 bytes, bsdtar allows N up to 8192, 4 MiB).
# 64 MiB admits GNU tar -b 131072; a longer run is no writer's padding (docs/format.md).
MAX_TRAILING_ZEROS = 64 << 20

# Member kinds, from the type flag.
FILE, DIRECTORY, SYMLINK, HARDLINK, CHARDEV, BLOCKDEV, FIFO = (
    "file",
    "directory",
    "symlink",
    "hard link",
    "character device",
    "block device",
    "fifo",
)
_KINDS = {
    b"0": FILE,
    b"\0": FILE,
    b"7": FILE,
    b"1": HARDLINK,
    b"2": SYMLINK,
    b"3": CHARDEV,
    b"4": BLOCKDEV,
    b"5": DIRECTORY,
    b"6": FIFO,
    b"D": DIRECTORY,  # GNU dumpdir: a directory listing, no file content
}
_UNSUPPORTED = {
    b"S": "GNU sparse member",
    b"V": "GNU volume label",
    b"M": "GNU multi-volume continuation",
    b"N": "old GNU long-name member",
}

_KIND_OBJECTS = {
    kind: kind for kind in (FILE, DIRECTORY, SYMLINK, HARDLINK, CHARDEV, BLOCKDEV, FIFO)
}
_PAX_CHARSETS = (b"BINARY", b"ISO-IR 10646 2000 UTF-8")
_NO_DATA_KINDS = (DIRECTORY, SYMLINK, HARDLINK, CHARDEV, BLOCKDEV, FIFO)
USTAR_MAGIC = b"ustar\x0000"
_NAME_FIELD = 100  # bytes of the name field, first in a header
# Numeric fields are validated by their "shape": each byte mapped to 0 (octal digit),
# z (NUL), space, or x (anything else). Whether a shape is valid, and where its digits
# are, depends on the shape alone, so verdicts are memoized: a header costs one
# translate and one dict look-up instead of eight field parses.
_SHAPE_TABLE = bytes(
    ord("0") if chr(c) in "01234567" else ord("z") if c == 0 else ord(" ") if c == 32 else ord("x")
    for c in range(256)
)
_SHAPE_FIELD = re.compile(rb" *(0*)[ z]*")
_SHAPE_CACHE_LIMIT = 4096
# Offsets within header[100:345]: mode, uid, gid, size, mtime, chksum, devmajor, devminor.
_SHAPE_FIELDS = ((0, 8), (8, 16), (16, 24), (24, 36), (36, 48), (48, 56), (229, 237), (237, 245))
# shape -> (size digits start, stop, chksum digits start, stop, byte sum of the chksum
# field's digits as '0' plus its spaces), or None for a shape that needs the slow path.
_shapes: dict[bytes, tuple[int, int, int, int, int] | None] = {}
# Sum of the octal digits of i, for the checksum field's own byte sum (built from the
# sums of two digits: a quarter of the cost at import, which every command pays).
_TWO_DIGIT_SUM = [(i & 7) + (i >> 3) for i in range(64)]
_OCTAL_DIGIT_SUM = [high + low for high in _TWO_DIGIT_SUM for low in _TWO_DIGIT_SUM]


def _learn_shape(shape: bytes) -> tuple[int, int, int, int, int] | None:
    """What a header shape says: where the size and checksum digits are, if valid."""
    spans: list[tuple[int, int]] = []
    for start, stop in _SHAPE_FIELDS:
        match = _SHAPE_FIELD.fullmatch(shape, start, stop)
        if match is None:
            spans = []
            break
        spans.append(match.span(1))
    verdict = None
    if spans and spans[5][0] < spans[5][1]:
        (size_start, size_stop), (sum_start, sum_stop) = spans[3], spans[5]
        field = shape[48:56]
        constant = 48 * field.count(b"0") + 32 * field.count(b" ")
        verdict = (100 + size_start, 100 + size_stop, 100 + sum_start, 100 + sum_stop, constant)
    if len(_shapes) < _SHAPE_CACHE_LIMIT:
        _shapes[shape] = verdict
    return verdict


_OCTAL = re.compile(rb" *([0-7]*)[ \0]*")
_PAX_RECORD = re.compile(rb"([1-9][0-9]*) ([^=\n\0]+)=")
_NUMERIC_FIELDS = (
    ("mode", 100, 108),
    ("uid", 108, 116),
    ("gid", 116, 124),
    ("size", 124, 136),
    ("mtime", 136, 148),
    ("devmajor", 329, 337),
    ("devminor", 337, 345),
)


class Member(tuple):  # type: ignore[type-arg]
    """One archive member, with its raw bytes as they were read.

    ``raw`` holds every block of the member: extension headers, the header, the data
    and the padding. ``name`` is the resolved path (pax ``path``, GNU long name or ustar
    prefix applied); ``kind`` is one of the kind constants of this module. A tuple
    underneath, because the reader makes one per member and that must be cheap.
    """

    __slots__ = ()

    def __new__(
        cls,
        name: str,
        kind: str,
        size: int,
        offset: int,
        raw: bytes,
        data_start: int,
        linkname: str = "",
    ) -> Member:
        kind = _KIND_OBJECTS.get(kind, kind)  # the constant itself: kinds compare with `is`
        return tuple.__new__(cls, (name, kind, size, offset, raw, data_start, linkname))

    name: str = property(itemgetter(0))  # type: ignore[assignment]
    kind: str = property(itemgetter(1))  # type: ignore[assignment]
    size: int = property(itemgetter(2))  # type: ignore[assignment]
    offset: int = property(itemgetter(3))  # type: ignore[assignment]
    raw: bytes = property(itemgetter(4))  # type: ignore[assignment]
    data_start: int = property(itemgetter(5))  # type: ignore[assignment]
    linkname: str = property(itemgetter(6))  # type: ignore[assignment]

    @property
    def data(self) -> bytes:
        """The member's content."""
        return self[4][self[5] : self[5] + self[2]]

    def __getnewargs__(self) -> tuple[Any, ...]:  # for pickle
        return tuple(self)

    def __repr__(self) -> str:
        return f"Member({self.name!r}, {self.kind}, size={self.size}, offset={self.offset})"


_new_member = tuple.__new__
if scanner.compiled is not None:
    scanner.compiled.init_member(Member, FILE)


def _decode(name: bytes) -> str:
    return name.decode("utf-8", "surrogateescape")


def _cstring(field: bytes) -> bytes:
    end = field.find(b"\0")
    return field if end < 0 else field[:end]


def parse_number(field: bytes, what: str, source: str, offset: int) -> int:
    """Parse a numeric header field: octal text, or GNU base-256 (first byte 0x80).

    Raises :class:`HeaderError` for a malformed value (base-256 0xFF is negative).

    >>> parse_number(b"0000644\\0", "mode", "-", 0)
    420
    >>> parse_number(b"\\x80" + (5).to_bytes(11, "big"), "size", "-", 0)
    5
    """
    if field[0] == 0x80:
        return int.from_bytes(field[1:], "big")
    if field[0] == 0xFF:
        return int.from_bytes(field[1:], "big") - 256 ** (len(field) - 1)
    match = _OCTAL.fullmatch(field)
    if match is None:
        shown = _cstring(field).decode("ascii", "backslashreplace")
        raise HeaderError(
            f"malformed {what} field {shown!r} in header", source=source, offset=offset
        )
    digits = match.group(1)
    return int(digits, 8) if digits else 0


def _parse_pax(data: bytes, source: str, offset: int) -> dict[str, bytes]:
    records: dict[str, bytes] = {}
    pos = 0
    while pos < len(data):
        match = _PAX_RECORD.match(data, pos)
        end = pos + int(match.group(1)) if match else 0
        if match is None or end > len(data) or end <= match.end() or data[end - 1] != 0x0A:
            raise HeaderError(
                f"malformed pax extended header record at its byte {pos}",
                source=source,
                offset=offset,
            )
        keyword = _decode(match.group(2))
        records[keyword] = data[match.end() : end - 1]
        pos = end
    return records


def _pax_size(value: bytes, source: str, offset: int) -> int:
    if not value.isdigit():
        shown = value.decode("ascii", "backslashreplace")
        raise HeaderError(f"malformed pax size {shown!r}", source=source, offset=offset)
    return int(value)


_PAX_TIME = re.compile(rb"-?([0-9]+)(?:\.[0-9]*)?")
_INT64_DIGITS = len(str(1 << 63))


def _check_pax_times(records: dict[str, bytes], source: str, offset: int) -> None:
    """Refuse a pax ``atime``, ``ctime`` or ``mtime`` that is not a decimal number of
    seconds within 64 bits (``-?DIGITS[.DIGITS]``).

    Go's ``archive/tar`` refuses the archive and GNU tar fails on such a record (GNU tar
    also on ``+5``, ``.5`` and an empty value); ``tarfile`` and bsdtar read it as 0.
    """
    for keyword in ("atime", "ctime", "mtime"):
        value = records.get(keyword)
        if value is None:
            continue
        match = _PAX_TIME.fullmatch(value)
        shown = value[:40].decode("ascii", "backslashreplace") + ("…" if len(value) > 40 else "")
        if match is None:
            raise HeaderError(f"malformed pax {keyword} {shown!r}", source=source, offset=offset)
        digits = match.group(1).lstrip(b"0")
        seconds = int(value.partition(b".")[0]) if len(digits) <= _INT64_DIGITS else 1 << 64
        if not -(1 << 63) <= seconds < 1 << 63:
            raise HeaderError(
                f"pax {keyword} {shown!r} is out of the 64-bit range", source=source, offset=offset
            )


class _Extensions:
    """Extension headers (pax ``x``, GNU ``L``/``K``) waiting for their member."""

    __slots__ = ("raw", "offset", "name", "linkname", "size", "pax_seen", "sparse")

    def __init__(self, offset: int) -> None:
        self.raw: list[bytes] = []
        self.offset = offset
        self.name: bytes | None = None
        self.linkname: bytes | None = None
        self.size: int | None = None
        self.pax_seen = False
        self.sparse: bytes | None = None  # a GNU sparse member's real name (b"": not given)


Carry = tuple[bytes, int]  # read data not in the buffer yet: chunk[offset:]


def _refill(  # type: ignore[no-untyped-def]
    buf: bytes, pos: int, base: int, n: int, carry: Carry | None, read, chunk_size: int,
    head: list[bytes] | None = None,
) -> tuple[bytes, int, int, Carry | None]:  # fmt: skip
    """Return ``(buffer, start, base, carry)``: ``buffer[start:]`` holds ``head`` (blocks
    read before, such as a member's extension headers), ``buf[pos:]`` and then the data
    read after it, at least ``n`` bytes unless the stream ended; ``base`` is the stream
    offset of ``buffer[0]`` (given: of ``buf[0]``); ``carry`` is read data beyond that,
    for the next call. Every refill of the reader is this one call.

    A read chunk becomes the buffer itself, not a copy, once nothing before it is left:
    only a member (or header) that straddles two chunks is copied, into a buffer of its
    own of ``n`` bytes. That buffer is filled read by read (each read is copied in and
    let go, and reads ask for a megabyte then), so a member of any size is held once,
    plus a read or two. Reads ask for ``chunk_size`` bytes otherwise, whatever is
    carried or missing: a size field far beyond the input fails at the input's end,
    never allocates what it claims.
    """
    parts = [(block, 0) for block in head or ()]
    if pos < len(buf):
        parts.append((buf, pos))
    if carry is not None:
        parts.append(carry)
    avail = sum(len(chunk) - start for chunk, start in parts)
    own: io.BytesIO | None = None  # the parts before the last one, copied in
    size = chunk_size
    while avail < n:
        chunk = read(size)
        if not chunk:
            break
        parts.append((chunk, 0))
        avail += len(chunk)
        if len(parts) > 1:
            own = _spill(own, parts, n)
            size = min(chunk_size, _GATHERING_READ)
    # The stream offset of the first part's first byte: head lies just before buf[pos].
    first = base + pos - sum(map(len, head)) if head else base + pos
    if own is None and len(parts) < 2:
        if not parts:
            return b"", 0, first, None
        chunk, start = parts[0]
        return chunk, start, first - start, None
    own = _spill(own, parts, n)
    rest = None
    if parts:
        last, start = parts[0]
        stop = start + n - own.tell()
        own.write(memoryview(last)[start:stop])
        rest = (last, stop) if stop < len(last) else None
    own.truncate()  # to what came, when the stream ended short of n
    # CPython's BytesIO hands over its own buffer, not a copy: the member is held once.
    return own.getvalue(), 0, first, rest


def _spill(own: io.BytesIO | None, parts: list[Carry], n: int) -> io.BytesIO:
    """Copy every part but the last into ``own`` (a new buffer for ``n`` bytes if None)
    and let go of them."""
    own = own or _own_buffer(n)
    for data, start in parts[:-1]:
        own.write(memoryview(data)[start:])
    del parts[:-1]
    return own


_PRESIZED = 33 << 20
_GATHERING_READ = 1 << 20


def _own_buffer(n: int) -> io.BytesIO:
    """An empty buffer for the ``n`` bytes to come. One over a megabyte is allocated at
    once (zero-filled), up to 33 MiB, rather than grown write by write: in glibc's heap
    each step would leave the memory of the one before resident. A block over 32 MiB is
    always a mapping of its own, which grows in place; so a size field far beyond the
    input costs at most 33 MiB before it fails, not what it claims.
    """
    own = io.BytesIO()
    if n > 1 << 20:
        own.seek(min(n, _PRESIZED) - 1)
        own.write(b"\0")
        own.seek(0)
    return own


def read_members(
    stream: BinaryIO,
    source: str = "-",
    *,
    ignore_zeros: bool = False,
    allow_empty: bool = False,
    chunk_size: int = 4 << 20,
    start: int = 0,
    data_only: bool = False,
) -> MemberReader:
    """Yield the members of the tar stream ``stream``, strictly, reading forward only.

    Raises :class:`~tarkit.errors.InputError` (naming ``source``, the byte offset and the
    member) for truncation, bad checksums, malformed fields, odd extension headers, an
    empty input (unless ``allow_empty``) and data after the end-of-archive marker
    (unless ``ignore_zeros``, which reads concatenated archives like ``tar -i``). After
    the marker it reads the stream to its end, so a compressed input's checksum is
    verified; zeros are the only bytes allowed there, and at most
    :data:`MAX_TRAILING_ZEROS` of them (beyond that, an error at the byte where they
    pass it: no tar writer pads that much, and a stream of zeros never ends). Memory:
    one member at a time, plus one read of ``chunk_size`` bytes (4 MiB: a run of small
    members that long goes out in one write). ``data_only`` is for callers that take
    members' data and never their raw bytes (the loader): a member too large for the
    read buffer then comes with its data alone as ``raw`` (``data_start`` 0), so that
    its ``data`` is that very buffer, not a second copy. Given to
    :func:`~tarkit.format.samples.group_samples` before it is started, the reader groups
    samples as it reads (in the compiled scanner, when it runs: :mod:`.scanner`).
    ``start`` is the archive offset of the stream's first byte, for a stream that begins
    at a member inside an archive (one sample read by its index): offsets count from it.
    """
    return MemberReader(stream, source, ignore_zeros, allow_empty, chunk_size, start, data_only)


class MemberReader:
    """The iterator :func:`read_members` returns: members, or grouped samples.

    Iterating it runs the reader; :meth:`grouped` runs it for
    :func:`~tarkit.format.samples.group_samples` instead, with the grouping ``state`` the
    compiled scanner keeps up to date. :attr:`end` is the offset where the end-of-archive
    marker begins (with ``ignore_zeros``, the last run of zero blocks), once read.
    """

    __slots__ = ("_args", "_items", "end")

    def __init__(
        self, stream: BinaryIO, source: str, ignore_zeros: bool, allow_empty: bool,
        chunk_size: int, start: int = 0, data_only: bool = False,
    ) -> None:  # fmt: skip
        self._args = (stream, source, ignore_zeros, allow_empty, chunk_size, start, data_only)
        self._items: Iterator[Any] | None = None
        self.end: int | None = None

    def __iter__(self) -> Iterator[Member]:
        if self._items is None:
            self._items = _read(*self._args, None, self)
        return self._items

    def __next__(self) -> Member:
        return next(iter(self))

    def grouped(self, state: Any) -> Iterator[Any] | None:
        """Members and finished samples, with the scanner grouping into ``state``; None
        when the reader has started already or the pure reader runs (then the caller
        groups the members)."""
        if self._items is not None or scanner.compiled is None:
            return None
        self._items = _read(*self._args, state, self)
        return self._items

    def close(self) -> None:
        """Stop reading (the stream itself is not closed)."""
        if self._items is not None:
            close = getattr(self._items, "close", None)
            if close is not None:
                close()


def _read(
    stream: BinaryIO,
    source: str,
    ignore_zeros: bool,
    allow_empty: bool,
    chunk_size: int,
    start: int,
    data_only: bool,
    state: Any,
    reader: MemberReader,
) -> Iterator[Any]:
    """The reader: members; with a grouping ``state``, finished samples from the scanner
    too (for ``group_samples``). Every header the scanner leaves is read here; the
    offset of the end-of-archive marker goes to ``reader.end``."""
    read = getattr(stream, "read1", None) or stream.read
    buf = b""
    pos = 0
    base = start  # stream offset of buf[0]
    last_zero: int | None = None  # offset of the last zero block read
    carry: Carry | None = None  # read data after buf (_refill)
    ext: _Extensions | None = None
    zeros_start = zeros_end = -1  # the run of zero blocks read last (ignore_zeros)
    adler32 = zlib.adler32
    shapes: dict[bytes, Any] = _shapes
    digit_sum = _OCTAL_DIGIT_SUM
    kinds = _KINDS
    new_member = _new_member
    compiled = scanner.compiled
    scanned: list[Any] = []

    while True:
        if compiled is not None and ext is None:
            if state is None:
                pos = compiled.scan_members(buf, pos, base, scanned)
            else:
                pos = compiled.scan_samples(buf, pos, base, state, scanned)
            if scanned:
                yield from scanned
                scanned.clear()
        if len(buf) - pos < BLOCK:
            buf, pos, base, carry = _refill(buf, pos, base, BLOCK, carry, read, chunk_size)
            if len(buf) - pos < BLOCK:
                _check_end_of_input(buf[pos:], base + pos, ext, allow_empty, source)
                return
        header = buf[pos : pos + BLOCK]
        offset = base + pos

        if header == ZERO_BLOCK:
            if ext is not None:
                raise HeaderError(
                    "extension header followed by a zero block", source=source, offset=offset
                )
            if last_zero is None or offset != last_zero + BLOCK:
                reader.end = offset
            last_zero = offset
            pos += BLOCK
            if len(buf) - pos < BLOCK:
                buf, pos, base, carry = _refill(buf, pos, base, BLOCK, carry, read, chunk_size)
            if ignore_zeros:
                if offset != zeros_end:
                    zeros_start = offset  # a new run of zero blocks
                zeros_end = offset + BLOCK
                if zeros_end - zeros_start > len(END_OF_ARCHIVE) + MAX_TRAILING_ZEROS:
                    raise _too_many_zeros(source, zeros_start + len(END_OF_ARCHIVE))
                if pos >= len(buf):
                    return
                continue
            if len(buf) - pos < BLOCK:
                if buf[pos:].count(0) != len(buf) - pos:
                    raise InputError(
                        "data after the end-of-archive marker", source=source, offset=offset
                    )
                return  # one zero block at the very end: accepted, as GNU tar and Go do
            if buf[pos : pos + BLOCK] != ZERO_BLOCK:
                raise HeaderError(
                    "a lone zero block is followed by more members "
                    "(pass --ignore-zeros to read past it)",
                    source=source,
                    offset=offset,
                )
            pos += BLOCK
            rest = buf[pos:] if carry is None else buf[pos:] + carry[0][carry[1] :]
            _drain(rest, read, source, base + pos)
            return

        shape = header[100:345].translate(_SHAPE_TABLE)
        known = shapes.get(shape, False)
        if known is False:
            known = _learn_shape(shape)
        if known is None:
            size = _slow_header(header, source, offset)
        else:
            stored = int(header[known[2] : known[3]], 8)
            # The checksum is the unsigned byte sum with its own field read as spaces.
            # adler32's low half is 1 + the byte sum modulo 65521: exact for 256 bytes.
            # The field's own bytes are known from its shape and value.
            total = (
                (adler32(header[:256]) & 0xFFFF) + (adler32(header[256:]) & 0xFFFF) + 254
                - known[4] - digit_sum[stored & 4095] - digit_sum[stored >> 12]
            )  # fmt: skip
            if total != stored:
                _bad_checksum(header, stored, source, offset)
            size = int(header[known[0] : known[1]] or b"0", 8)
        typeflag = header[156:157]
        kind = kinds.get(typeflag)

        if kind is None and typeflag in (b"x", b"g", b"L", b"K"):
            padded = (size + 511) & ~511
            if len(buf) - pos < BLOCK + padded:
                if size > MAX_EXTENSION_SIZE:
                    _extension_too_large(size, source, offset)
                buf, pos, base, carry = _refill(
                    buf, pos, base, BLOCK + padded, carry, read, chunk_size
                )
            ext = _extension(ext, header, buf[pos : pos + BLOCK + padded], size, source, offset)
            pos += BLOCK + padded
            continue

        if ext is not None and ext.size is not None:
            size = ext.size
        if ext is not None and ext.name is not None:
            raw_name = ext.name
        else:
            end = header.find(0, 0, 100)
            raw_name = header[:end] if end >= 0 else header[:100]
            if header[345]:
                raw_name = _prefixed_name(header, raw_name, typeflag, source, offset)
        name = raw_name.decode("utf-8", "surrogateescape")
        if ext is not None and ext.sparse is not None:
            _refuse_sparse(ext, name, source)

        if kind is not FILE or typeflag == b"\0":
            kind = _check_kind(kind, typeflag, raw_name, size, ext, source, offset, name)
            if kind is DIRECTORY and typeflag == b"5":
                size = 0  # no data follows, whatever its size field says (_check_kind)
        padded = (size + 511) & ~511
        total = BLOCK + padded
        lead = 0  # bytes of extension headers before the member in buf
        if len(buf) - pos < total:
            # The member straddles reads: it gets a buffer of its own (_refill).
            if data_only:
                buf, pos, base, carry = _refill(
                    buf, pos + BLOCK, base, size, carry, read, chunk_size
                )
                data = buf[pos : pos + size]  # the buffer itself, when it is the data's own
                pos += len(data)
                if len(data) == size and len(buf) - pos < padded - size:
                    buf, pos, base, carry = _refill(
                        buf, pos, base, padded - size, carry, read, chunk_size
                    )
                if len(data) < size or len(buf) - pos < padded - size:
                    raise _cut_member(len(data) + len(buf) - pos, size, source, offset, name)
                pos += padded - size
                linkname = _link_name(kind, ext, header)
                ext = None
                yield Member(name, kind, size, offset, data, 0, linkname)
                data = b""  # not held while the next member is read
                continue
            head = ext.raw if ext is not None else []
            lead = sum(map(len, head))
            buf, pos, base, carry = _refill(
                buf, pos, base, lead + total, carry, read, chunk_size, head
            )
            pos += lead
            if len(buf) - pos < total:
                raise _cut_member(len(buf) - pos - BLOCK, size, source, offset, name)
        if ext is None:
            linkname = "" if kind is FILE else _decode(_cstring(header[157:257]))
            yield new_member(
                Member, (name, kind, size, offset, buf[pos : pos + total], BLOCK, linkname)
            )
        else:
            if lead:  # its extension headers are in the member's own buffer already
                raw = buf[pos - lead : pos + total]
            else:
                ext.raw.append(buf[pos : pos + total])
                raw = b"".join(ext.raw)
            linkname = _link_name(kind, ext, header)
            ext_offset = ext.offset
            ext = None
            pos += total
            yield Member(name, kind, size, ext_offset, raw, len(raw) - total + BLOCK, linkname)
            raw = b""  # not held while the next member is read
            continue
        pos += total


def _link_name(kind: str, ext: _Extensions | None, header: bytes) -> str:
    """A member's link target: a link's from its long link name or pax ``linkpath``, else
    from the header (where only a plain file's is ignored; ``_read`` inlines that case)."""
    if ext is None:
        return "" if kind is FILE else _decode(_cstring(header[157:257]))
    if kind is SYMLINK or kind is HARDLINK:
        return _decode(ext.linkname if ext.linkname is not None else _cstring(header[157:257]))
    return ""


def _cut_member(got: int, size: int, source: str, offset: int, name: str) -> TruncatedError:
    """The error for a member whose data (``got`` of ``size`` bytes) or padding is cut."""
    what = (
        f"inside member data ({got} of {size} bytes)"
        if got < size
        else "inside the padding after member data"
    )
    return TruncatedError(f"input ends {what}", source=source, offset=offset, member=name)


def _prefixed_name(
    header: bytes, raw_name: bytes, typeflag: bytes, source: str, offset: int
) -> bytes:
    """The name with the ustar prefix field joined, for a header whose prefix is not empty.

    Only POSIX ustar headers have a prefix field: GNU headers keep atime there, v7 headers
    nothing. GNU tar ignores those bytes; ``tarfile`` (so webdataset) joins them to the
    name whatever the magic. Readers would disagree on the name, so that is an error.
    """
    if header[257:265] == USTAR_MAGIC or typeflag in _UNSUPPORTED:
        return _cstring(header[345:500]) + b"/" + raw_name
    raise HeaderError(
        "bytes in the name prefix field of a header without the ustar magic "
        "(GNU tar ignores them, tarfile prefixes them to the name)",
        source=source,
        offset=offset,
    )


def _check_end_of_input(
    rest: bytes, offset: int, ext: _Extensions | None, allow_empty: bool, source: str
) -> None:
    """The stream ended where a header should start: say how it was cut."""
    if offset == 0 and not rest:
        if allow_empty:
            return
        raise TruncatedError("empty input (0 bytes)", source=source)
    if rest:
        # Fewer bytes than a name field, with no NUL and no line break, may be a header cut
        # inside its name: that is told as a cut archive, not as another kind of file.
        if offset == 0 and (len(rest) > _NAME_FIELD or b"\0" in rest or b"\n" in rest):
            _refuse_not_tar(rest, source)
        raise TruncatedError("input ends inside a header block", source=source, offset=offset)
    if ext is not None:
        raise TruncatedError(
            "input ends after an extension header, before its member",
            source=source,
            offset=offset,
        )
    raise TruncatedError(
        "input ends without the end-of-archive marker (truncated, or cut between two members)",
        source=source,
        offset=offset,
    )


def _slow_header(header: bytes, source: str, offset: int) -> int:
    """Check a header of an unusual shape field by field; return its size."""
    stored = _slow_checksum_field(header)
    total = sum(header) - sum(header[148:156]) + 256
    if total != stored:
        _bad_checksum(header, stored, source, offset)
    return _slow_size(header, source, offset)


def _bad_checksum(header: bytes, stored: int, source: str, offset: int) -> None:
    """Raise for a checksum mismatch, unless the old signed-byte sum matches."""
    if stored >= 0 and _signed_checksum_ok(header, stored):
        return
    if offset == 0:
        _refuse_not_tar(header, source)
        raise HeaderError(
            "not a tar archive (bad header checksum in the first block)", source=source, offset=0
        )
    raise HeaderError("bad header checksum", source=source, offset=offset)


def _refuse_not_tar(head: bytes, source: str) -> None:
    """Raise for an input whose first block is no tar header when its first bytes say
    what it is instead (an image, a zip, an lz4 stream…: :mod:`.file_types`), with what
    to do; the whole input is meant, so no byte offset is given."""
    from .file_types import not_tar  # only on this error: no cost to every command

    what = not_tar(head, source)
    if what is not None:
        raise HeaderError(what, source=source)


def _slow_checksum_field(header: bytes) -> int:
    """The stored checksum, or -1 when the field is not a number.

    Readers stop at the field's first NUL (``tarfile`` reads a field that starts with one
    as 0), so digits after a NUL do not count.
    """
    try:
        return int(_cstring(header[148:156]).strip(b" ") or b"x", 8)
    except ValueError:
        return -1


def _signed_checksum_ok(header: bytes, stored: int) -> bool:
    # Old tars summed signed bytes; GNU tar, bsdtar and tarfile all accept that too.
    signed = sum(b - 256 if b > 127 else b for b in header[:148])
    signed += sum(b - 256 if b > 127 else b for b in header[156:]) + 256
    return signed == stored


def _slow_size(header: bytes, source: str, offset: int) -> int:
    """Validate every numeric field the slow way; return the size."""
    size = 0
    for what, start, stop in _NUMERIC_FIELDS:
        number = parse_number(header[start:stop], what, source, offset)
        if what == "size":
            size = number
    if size < 0:
        raise HeaderError(f"negative size field ({size})", source=source, offset=offset)
    return size


def _extension_too_large(size: int, source: str, offset: int) -> None:
    raise HeaderError(
        f"extension header of {size} bytes is over the {MAX_EXTENSION_SIZE}-byte limit",
        source=source,
        offset=offset,
    )


def _extension(
    ext: _Extensions | None, header: bytes, raw: bytes, size: int, source: str, offset: int
) -> _Extensions | None:
    """Record one extension header (pax x/g, GNU L/K) for the member that follows."""
    if size > MAX_EXTENSION_SIZE:
        _extension_too_large(size, source, offset)
    if len(raw) < BLOCK + size:
        raise TruncatedError("input ends inside an extension header", source=source, offset=offset)
    typeflag = header[156:157]
    payload = raw[BLOCK : BLOCK + size]
    if typeflag == b"g":
        # A global header belongs to no member: it is read and dropped. Records that
        # change how members are named or sized would change what the members mean
        # without it, so they are refused.
        if ext is not None:
            raise HeaderError(
                "global pax header between an extension header and its member",
                source=source,
                offset=offset,
            )
        records = _parse_pax(payload, source, offset)
        _check_pax_times(records, source, offset)
        critical = sorted(
            k for k in records
            if k in ("path", "linkpath", "size", "hdrcharset") or k.startswith("GNU.sparse")
        )  # fmt: skip
        if critical:
            raise HeaderError(
                f"global pax header sets {', '.join(critical)}, "
                "which tarkit does not apply across members",
                source=source,
                offset=offset,
            )
        return None
    if ext is None:
        ext = _Extensions(offset)
    ext.raw.append(raw)
    if typeflag == b"x":
        if ext.pax_seen:
            raise HeaderError(
                "two pax extended headers for one member", source=source, offset=offset
            )
        ext.pax_seen = True
        records = _parse_pax(payload, source, offset)
        _check_pax_times(records, source, offset)
        if any(k.startswith("GNU.sparse") for k in records):
            # The data of a sparse member is a map plus the non-hole bytes: reading it as
            # a plain file would give the wrong content without a word. Refused once the
            # member's header is read: format 0.0 names it there only.
            ext.sparse = records.get("GNU.sparse.name", records.get("path", b""))
        for keyword in ("path", "linkpath"):
            if b"\0" in records.get(keyword, b""):
                raise HeaderError(
                    # C readers cut the name at the NUL, tarfile keeps it.
                    f"pax {keyword} contains a NUL byte",
                    source=source,
                    offset=offset,
                )
        charset = records.get("hdrcharset")
        if charset is not None and charset not in _PAX_CHARSETS:
            shown = charset.decode("ascii", "backslashreplace")
            raise HeaderError(
                f"unknown pax hdrcharset {shown!r} (expected BINARY or 'ISO-IR 10646 2000 UTF-8')",
                source=source,
                offset=offset,
            )
        if "path" in records:
            if ext.name is not None:
                raise HeaderError(
                    "conflicting extension headers both set the member name",
                    source=source,
                    offset=offset,
                )
            ext.name = records["path"]
        if "linkpath" in records:
            ext.linkname = records["linkpath"]
        if "size" in records:
            ext.size = _pax_size(records["size"], source, offset)
    elif typeflag == b"L":
        if ext.name is not None:
            raise HeaderError(
                "conflicting extension headers both set the member name",
                source=source,
                offset=offset,
            )
        ext.name = _gnu_long_name(payload, "name", source, offset)
    else:
        if ext.linkname is not None:
            raise HeaderError("two long link names for one member", source=source, offset=offset)
        ext.linkname = _gnu_long_name(payload, "link name", source, offset)
    return ext


def _refuse_sparse(ext: _Extensions, name: str, source: str) -> None:
    """Refuse a GNU sparse member of the pax formats, named by its real name (formats 0.1
    and 1.0 give it in a record, the header holding ``GNUSparseFile.N/name``), else by its
    header's name (format 0.0)."""
    raise HeaderError(
        "unsupported member type: GNU sparse member (pax)",
        source=source,
        offset=ext.offset,
        member=_decode(ext.sparse) if ext.sparse else name,
    )


def _gnu_long_name(payload: bytes, what: str, source: str, offset: int) -> bytes:
    """A GNU ``L``/``K`` name: up to its NUL, which must lie within the header's size.

    Without it, GNU tar and ``tarfile`` read on into the padding and bsdtar stops at the
    size: the readers would disagree on the name.
    """
    end = payload.find(0)
    if end < 0:
        raise HeaderError(
            f"GNU long {what} without its NUL terminator", source=source, offset=offset
        )
    return payload[:end]


def _check_kind(
    kind: str | None,
    typeflag: bytes,
    raw_name: bytes,
    size: int,
    ext: _Extensions | None,
    source: str,
    offset: int,
    name: str,
) -> str:
    """The kind of a member that is not a plain file; raise for unsupported ones."""
    if kind is None:
        what = _UNSUPPORTED.get(typeflag)
        if what is not None:
            raise HeaderError(
                f"unsupported member type: {what}", source=source, offset=offset, member=name
            )
        # Unknown types are read as files with data by tar and tarfile alike.
        kind = f"unknown type {typeflag.decode('latin-1')!r}"
    elif kind is FILE and typeflag == b"\0" and raw_name.endswith(b"/"):
        kind = DIRECTORY  # old tars mark directories only by the trailing slash
    if size and kind in _NO_DATA_KINDS and typeflag != b"D":
        from_pax = ext is not None and ext.size is not None
        if typeflag == b"5" and not from_pax:
            # GNU tar, bsdtar, tarfile and Go all read the next header right after a
            # directory's, whatever its size field says (CPython's own test archive has one).
            return kind
        # For the other kinds (and a directory sized by a pax record, which bsdtar skips)
        # tarfile reads no data after the header, GNU tar or bsdtar skip `size` bytes:
        # the readers would disagree on where the next header is.
        what = "pax size" if from_pax else "size field"
        raise HeaderError(
            f"{kind} member with a nonzero {what} ({size})",
            source=source,
            offset=offset,
            member=name,
        )
    return kind


def _drain(rest: bytes, read, source: str, offset: int) -> None:  # type: ignore[no-untyped-def]
    """Read past the end-of-archive marker (which ends at ``offset``): only zero padding
    may follow, at most :data:`MAX_TRAILING_ZEROS` bytes."""
    limit = offset + MAX_TRAILING_ZEROS
    while True:
        if rest.count(0) != len(rest):
            nonzero = offset + len(rest) - len(rest.lstrip(b"\0"))
            raise InputError(
                "data after the end-of-archive marker "
                "(concatenated archives? pass --ignore-zeros to read them all)",
                source=source,
                offset=nonzero - nonzero % BLOCK,
            )
        offset += len(rest)
        if offset > limit:
            raise _too_many_zeros(source, limit - MAX_TRAILING_ZEROS)
        rest = read(1 << 20)
        if not rest:
            return


def _too_many_zeros(source: str, marker_end: int) -> InputError:
    """The error for more zeros after the end-of-archive marker (ending at ``marker_end``)
    than any tar writer pads with: named at the byte where they pass the bound."""
    return InputError(
        f"more than {MAX_TRAILING_ZEROS >> 20} MiB of zeros after the end-of-archive marker "
        "(no tar writer pads an archive that much: see docs/format.md)",
        source=source,
        offset=marker_end + MAX_TRAILING_ZEROS,
    )
