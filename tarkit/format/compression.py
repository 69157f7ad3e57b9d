"""Compression: detect it on input by magic bytes, choose it on output by file name.

Input: gzip (CRC checked; the stream is read to its end), bzip2, xz and zstd. A corrupt or
cut-short compressed stream raises :class:`~tarkit.errors.CompressionError`.
Output: ``.gz``/``.tgz``, ``.bz2``, ``.xz``, ``.zst``; gzip headers carry no name and mtime
0, so compressed output is as reproducible as the tar inside it.

Shard size limits hold on disk for compressed output too: :func:`compressed_bound` is
the most bytes a stream can take at each compressor's documented worst case, and
:func:`measure` makes a gzip or zstd stream count every byte written so far, so a writer
knows the exact size on disk at that point.
"""

from __future__ import annotations

import io
import zlib
from typing import BinaryIO

from ..errors import CompressionError

_MAGICS = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    # A zstd stream may start with skippable frames (magic 0x184D2A50 to 0x184D2A5F):
    # zstd and bsdtar read past them, and so does the frame reader here.
    *((bytes((0x50 + low, 0x2A, 0x4D, 0x18)), "zstd") for low in range(16)),
)
_SUFFIXES = (
    (".tar.gz", "gzip"),
    (".tgz", "gzip"),
    (".gz", "gzip"),
    (".bz2", "bzip2"),
    (".tbz2", "bzip2"),
    (".xz", "xz"),
    (".txz", "xz"),
    (".zst", "zstd"),
    (".tzst", "zstd"),
)


class _Prefixed(io.RawIOBase):
    """A readable stream that first returns ``prefix``, then the rest of ``stream``."""

    def __init__(self, prefix: bytes, stream: BinaryIO) -> None:
        self._prefix = prefix
        self._stream = stream
        self._read = getattr(stream, "read1", None) or stream.read

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def, override]
        data = self.read1(len(b))
        b[: len(data)] = data
        return len(data)

    def read1(self, n: int = -1) -> bytes:  # type: ignore[override]
        if self._prefix:
            # Never more than asked: gzip reads its 2-byte magic with read(2).
            if n is not None and 0 < n < len(self._prefix):
                data, self._prefix = self._prefix[:n], self._prefix[n:]
            else:
                data, self._prefix = self._prefix, b""
            return data
        return self._read(n if n and n > 0 else 1 << 20)

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        if n is None or n < 0:
            parts = [self._prefix, self._stream.read()]
            self._prefix = b""
            return b"".join(parts)
        return self.read1(n)


def sniff(stream: BinaryIO) -> tuple[str | None, BinaryIO]:
    """Detect the compression of ``stream`` from its first bytes.

    Returns the compression name (or None) and a stream that still starts at byte 0.
    """
    peek = getattr(stream, "peek", None)
    head = b""
    if peek is not None:
        try:
            head = peek(6)[:6]
        except (OSError, ValueError):
            peek = None
    if peek is None or len(head) < 6:
        read = getattr(stream, "read1", None) or stream.read
        head = b""
        while len(head) < 6:
            chunk = read(6 - len(head))
            if not chunk:
                break
            head += chunk
        stream = _Prefixed(head, stream)  # type: ignore[assignment]
    return compression_of(head), stream


def compression_of(head: bytes) -> str | None:
    """The compression (``"gzip"``, ``"bzip2"``, ``"xz"``, ``"zstd"``) whose magic bytes
    ``head`` starts with, or None.

    >>> compression_of(b"\\x1f\\x8b\\x08"), compression_of(b"name,label")
    ('gzip', None)
    """
    for magic, name in _MAGICS:
        if head.startswith(magic):
            return name
    return None


class _Decompressed(io.RawIOBase):
    """Wrap a decompressing reader so its errors become CompressionError."""

    def __init__(self, reader: BinaryIO, kind: str, source: str) -> None:
        self._reader = reader
        self._kind = kind
        self._source = source
        self._read = getattr(reader, "read1", None) or reader.read

    def readable(self) -> bool:
        return True

    def read1(self, n: int = -1) -> bytes:  # type: ignore[override]
        try:
            return self._read(n if n and n > 0 else 1 << 20)
        except EOFError:
            raise CompressionError(
                f"{self._kind} stream is cut short",
                source=self._source,
                reason=CompressionError.TRUNCATED,
            ) from None
        except (OSError, zlib.error, ValueError) as exc:
            raise CompressionError(
                f"corrupt {self._kind} stream: {_reason(exc)}", source=self._source
            ) from None
        except Exception as exc:  # lzma.LZMAError, zstandard.ZstdError
            if type(exc).__name__ in ("LZMAError", "ZstdError"):
                raise CompressionError(
                    f"corrupt {self._kind} stream: {_reason(exc)}", source=self._source
                ) from None
            raise

    def read(self, n: int | None = -1) -> bytes:  # type: ignore[override]
        return _read_all(self.read1) if n is None or n < 0 else self.read1(n) if n else b""

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def, override]
        data = self.read1(len(b))
        b[: len(data)] = data
        return len(data)


def _read_all(read1) -> bytes:  # type: ignore[no-untyped-def]
    """Everything ``read1`` gives until the end: ``read()`` must not stop at one chunk."""
    return b"".join(iter(lambda: read1(1 << 20), b""))


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0]


class _ZstdReader(io.RawIOBase):
    """zstd frames, one after another, failing on a frame cut short.

    A read gives at most what it asks for, decompressed as asked: a few kilobytes of zstd
    can hold gigabytes, so inflating a whole chunk of input at once is no bound on memory.
    zstandard's ``stream_reader`` decompresses that way but takes a frame cut short for
    the end of the stream; :class:`_ZstdFrames` says where the frames end.
    """

    def __init__(self, stream: BinaryIO) -> None:
        import zstandard

        self._frames = _ZstdFrames(stream)
        self._reader = zstandard.ZstdDecompressor().stream_reader(
            self._frames,  # type: ignore[arg-type]  # only read() is used
            read_size=1 << 20,
            read_across_frames=True,
            closefd=False,
        )

    def readable(self) -> bool:
        return True

    def read1(self, n: int = -1) -> bytes:  # type: ignore[override]
        data = self._reader.read1(n if n and n > 0 else 1 << 20)
        if not data and self._frames.inside:
            raise EOFError("zstd frame cut short")
        return data

    def read(self, n: int | None = -1) -> bytes:  # type: ignore[override]
        return _read_all(self.read1) if n is None or n < 0 else self.read1(n) if n else b""


_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE_MAGIC = 0x184D2A50  # the low four bits are free
_MAGIC, _FRAME_HEADER, _BLOCK_HEADER, _SKIPPABLE_SIZE, _UNKNOWN = range(5)
_HEADER_SIZES = (4, 1, 3, 4)  # bytes of the header read in each state


class _ZstdFrames:
    """The compressed bytes of ``stream``, read through (``read``) while following the
    zstd frame format (RFC 8878: frame and block headers, skippable frames) to know
    whether the bytes so far end inside a frame (``inside``). Only headers are looked at;
    the decompressor checks everything else."""

    def __init__(self, stream: BinaryIO) -> None:
        self._read = getattr(stream, "read1", None) or stream.read
        self._state = _MAGIC
        self._header = b""  # the bytes of the header being read
        self._skip = 0  # bytes to pass before the next header
        self._checksum = 0  # bytes of checksum after the current frame's last block

    @property
    def inside(self) -> bool:
        return self._state != _MAGIC or bool(self._header) or self._skip > 0

    def read(self, n: int) -> bytes:
        data = self._read(n)
        pos, size = 0, len(data)
        while pos < size and self._state != _UNKNOWN:
            if self._skip:
                passed = min(self._skip, size - pos)
                self._skip -= passed
                pos += passed
                continue
            length = _HEADER_SIZES[self._state]
            taken = data[pos : pos + length - len(self._header)]
            self._header += taken
            pos += len(taken)
            if len(self._header) == length:
                self._next(int.from_bytes(self._header, "little"))
                self._header = b""
        return data

    def _next(self, value: int) -> None:
        """Take the header just read: what comes after it, and how long it is."""
        if self._state == _MAGIC:
            if value == _ZSTD_MAGIC:
                self._state = _FRAME_HEADER
            elif value & ~0xF == _SKIPPABLE_MAGIC:
                self._state = _SKIPPABLE_SIZE
            else:
                self._state = _UNKNOWN  # not zstd: the decompressor says so
        elif self._state == _FRAME_HEADER:
            # Frame header descriptor: content size flag, single segment, checksum and
            # dictionary id flags; the window descriptor, dictionary id and content size
            # follow.
            single = value >> 5 & 1
            self._skip = (1 - single) + (0, 1, 2, 4)[value & 3] + (single, 2, 4, 8)[value >> 6]
            self._checksum = 4 if value & 4 else 0
            self._state = _BLOCK_HEADER
        elif self._state == _BLOCK_HEADER:
            # Last-block bit, block type (raw, RLE: one byte, compressed), block size.
            self._skip = 1 if value >> 1 & 3 == 1 else value >> 3
            if value & 1:
                self._skip += self._checksum
                self._state = _MAGIC
        else:
            self._skip = value
            self._state = _MAGIC


def open_decompressed(stream: BinaryIO, source: str) -> BinaryIO:
    """Return a stream of the tar bytes inside ``stream``, decompressing if needed."""
    kind, stream = sniff(stream)
    return stream if kind is None else decompressed(stream, kind, source)


def decompressed(stream: BinaryIO, kind: str, source: str) -> BinaryIO:
    """The bytes of ``stream``, compressed with ``kind`` (as :func:`sniff` named it),
    decompressed; errors name ``source``."""
    reader: BinaryIO
    if kind == "gzip":
        import gzip

        reader = gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[assignment]
    elif kind == "bzip2":
        import bz2

        reader = bz2.BZ2File(stream)  # type: ignore[assignment]
    elif kind == "xz":
        import lzma

        reader = lzma.LZMAFile(stream)  # type: ignore[assignment]
    else:
        reader = _ZstdReader(stream)  # type: ignore[assignment]
    return _Decompressed(reader, kind, source)  # type: ignore[return-value]


def compression_for(name: str) -> str | None:
    """The compression an output named ``name`` gets.

    >>> compression_for("shard-000.tar.gz"), compression_for("x.tar")
    ('gzip', None)
    """
    lower = name.lower()
    for suffix, kind in _SUFFIXES:
        if lower.endswith(suffix):
            return kind
    return None


def open_compressor(stream: BinaryIO, kind: str | None) -> BinaryIO:
    """Wrap ``stream`` for writing with compression ``kind``; close the result to finish.

    Closing the returned wrapper does not close ``stream``.
    """
    if kind is None:
        return stream
    if kind == "gzip":
        import gzip

        return gzip.GzipFile(  # type: ignore[return-value]
            filename="", mode="wb", fileobj=stream, compresslevel=6, mtime=0
        )
    if kind == "bzip2":
        import bz2

        return _Compressing(stream, bz2.BZ2Compressor(9))  # type: ignore[return-value]
    if kind == "xz":
        import lzma

        return _Compressing(stream, lzma.LZMACompressor())  # type: ignore[return-value]
    import zstandard

    return zstandard.ZstdCompressor(level=3, write_checksum=True).stream_writer(  # type: ignore[return-value]
        stream, closefd=False
    )


# Safety margin on top of each documented bound: a few hundred bytes and 1/4096.
_MARGIN = 256


def compressed_bound(kind: str | None, size: int) -> int:
    """The most bytes ``size`` input bytes can take in a stream tarkit compresses
    with ``kind``: headers and trailer included, at the compressor's documented worst
    case (for incompressible data), plus a safety margin.

    gzip: zlib's ``deflateBound`` for its default window and memory level, plus the
    10-byte header and 8-byte trailer. bzip2: 1% and 600 bytes (libbzip2's manual).
    xz: 6 bytes per LZMA2 chunk of at least 64 KiB, the stream header and footer, the
    block header, CRC64 check, padding and index. zstd: ``ZSTD_COMPRESSBOUND`` (which
    holds the frame header) and the 4-byte checksum.

    >>> compressed_bound(None, 1000), compressed_bound("gzip", 1 << 20)
    (1000, 1049433)
    """
    if kind is None:
        return size
    margin = _MARGIN + (size >> 12)
    if kind == "gzip":
        return size + (size >> 12) + (size >> 14) + (size >> 25) + 7 + 18 + margin
    if kind == "bzip2":
        return size + size // 100 + 600 + margin
    if kind == "xz":
        chunks = size // 65536 + 1
        return size + 6 * chunks + 12 + 12 + 16 + 8 + 3 + 24 + margin
    if kind == "zstd":
        small = (131072 - size) >> 11 if size < 131072 else 0
        return size + (size >> 8) + small + 4 + margin
    raise ValueError(f"unknown compression {kind!r}")


def size_budget(kind: str | None, room: int) -> int:
    """The most input bytes that surely fit in ``room`` bytes compressed with ``kind``
    (-1 when not even an empty stream does).

    >>> size_budget(None, 5000), compressed_bound("xz", size_budget("xz", 5000)) <= 5000
    (5000, True)
    """
    if compressed_bound(kind, 0) > room:
        return -1
    low, high = 0, room  # the bound never falls below the input size
    while low < high:
        middle = (low + high + 1) // 2
        if compressed_bound(kind, middle) <= room:
            low = middle
        else:
            high = middle - 1
    return low


MEASURED = ("gzip", "zstd")  # the compressions :func:`measure` can flush mid-stream


def measure(stream: BinaryIO, kind: str | None) -> bool:
    """Push every byte written to ``stream`` so far out of its compressor, so that the
    bytes below it are the exact compressed size up to here; False when ``kind`` cannot
    (``kind`` not in :data:`MEASURED`; no compression needs no measuring).

    gzip gets a sync flush (an empty stored block, 5 bytes) and zstd ends its current
    block; both are ordinary stream content every reader takes. bzip2 and xz have no
    such flush in their one-stream format.
    """
    if kind == "gzip":
        stream.flush()  # GzipFile.flush: Z_SYNC_FLUSH
        return True
    if kind == "zstd":
        import zstandard

        stream.flush(zstandard.FLUSH_BLOCK)  # type: ignore[call-arg]
        return True
    return False


class _Compressing(io.RawIOBase):
    def __init__(self, stream: BinaryIO, compressor) -> None:  # type: ignore[no-untyped-def]
        self._stream = stream
        self._compressor = compressor

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[no-untyped-def, override]
        out = self._compressor.compress(data)
        if out:
            self._stream.write(out)
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._stream.write(self._compressor.flush())
        super().close()
