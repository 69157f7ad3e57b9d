"""The shard index: where each sample of an uncompressed shard lies, and the check of it.

One binary file per shard, made by whoever writes the shard or by ``tarindex``, so that
any sample can be read with one positioned read of its *span*: its bytes from its first
header block to the next sample's first header block (or to the end-of-archive marker),
members the reader skips after it included. Little-endian (docs/format.md, "The shard
index")::

    header, 64 bytes   magic b"TKSIDX\\0" and the version byte 1, then u64 samples N,
                       u64 shard size, u64 end (where the end-of-archive marker begins),
                       u64 key bytes K, 24 zero bytes
    table, 16 N bytes  per sample: u64 offset, u32 crc32 of its span, u32 key start
    keys, K bytes      the keys in sample order, UTF-8 (surrogateescape), back to back

What is read is checked against what was recorded (:func:`sample_from_span`), so a shard
changed after it was indexed gives an :class:`~tarkit.errors.InputError` with reason
``STALE``, never another sample's bytes. The format only, no I/O: a caller reads the index
file and the spans.

>>> import io
>>> from tarkit.format.tar_writer import TarWriter
>>> shard = io.BytesIO()
>>> with TarWriter(shard) as w:
...     w.add("a.txt", b"hello")
...     w.add("b.txt", b"world")
>>> index = ShardIndex(index_stream(io.BytesIO(shard.getvalue()), "s.tar"), "s.tar.idx")
>>> len(index), index.key(1), index.position("b")
(2, 'b', 1)
>>> entry = index.entry(1)
>>> sample_from_span(entry, shard.getvalue()[entry.offset : entry.stop], "s.tar").data()
{'txt': b'world'}
"""

from __future__ import annotations

import struct
import zlib
from collections import deque
from collections.abc import Callable
from operator import lt
from typing import BinaryIO, NamedTuple, cast

from ..errors import InputError, UsageError
from . import scanner
from .columns import Buffer, numbers
from .samples import Sample, SkipLog, group_samples
from .tar import BLOCK, END_OF_ARCHIVE, read_members

MAGIC = b"TKSIDX\x00"
VERSION = 1
SUFFIX = ".idx"  # a shard's index beside it: train-000000.tar.idx
HEADER_SIZE = 64
ROW_SIZE = 16
REINDEX = "index it again with tarindex"
_HEADER = struct.Struct("<7sBQQQQ24s")
_ROW = struct.Struct("<QII")
_TWO_ROWS = struct.Struct("<QIIQII")  # a row and the next one: where its span and key end
_KEY_START_LIMIT = 1 << 32
_JOINED_SPAN = 1 << 20  # up to here a span is copied once to read it in one pass


def span_crc(data: Buffer, crc: int = 0) -> int:
    """The crc32 of a span's bytes (zlib's), continuing ``crc`` for a span taken in pieces.

    The compiled scanner's (:mod:`.scanner`) when it runs: the same numbers, about ten
    times faster where the processor multiplies without carry (x86's PCLMULQDQ).

    >>> span_crc(b"world", span_crc(b"hello ")) == span_crc(b"hello world")
    True
    """
    return (zlib.crc32 if scanner.compiled is None else _crc32)(data, crc)


def _fast_crc32() -> Callable[..., int]:
    compiled = scanner.compiled
    if compiled is not None and getattr(compiled, "CRC32_ACCELERATED", False):
        return cast(Callable[..., int], compiled.crc32)
    return zlib.crc32


_crc32 = _fast_crc32()  # when the compiled scanner runs (scanner.compiled is not None)


class IndexEntry(NamedTuple):
    """Where sample ``position`` of a shard lies: its span is ``[offset, stop)``."""

    position: int
    key: str
    offset: int
    stop: int
    crc: int


class IndexBuilder:
    """A shard's index, made sample by sample as the shard is written or read.

    :meth:`add` each sample in archive order; :meth:`finish` gives the index's bytes, the
    same bytes for the same samples. Memory: 16 bytes a sample and its key. Raises
    ValueError for offsets that do not increase by whole blocks (a caller's bug).
    """

    def __init__(self) -> None:
        self._table = bytearray()
        self._keys = bytearray()
        self._last = -1

    @property
    def samples(self) -> int:
        """Samples added so far."""
        return len(self._table) // ROW_SIZE

    def add(self, offset: int, key: str, crc: int) -> None:
        """Add the next sample: the offset of its first header block, its key and the
        :func:`span_crc` of its span."""
        if offset <= self._last or offset % BLOCK:
            raise ValueError(f"sample offset {offset} after {self._last}: not the next block")
        encoded = key.encode("utf-8", "surrogateescape")
        if not encoded:
            raise ValueError("a sample key is never empty")
        start = len(self._keys)
        if start >= _KEY_START_LIMIT:
            raise UsageError("the keys of one shard take over 4 GiB, more than an index holds")
        self._table += _ROW.pack(offset, crc, start)
        self._keys += encoded
        self._last = offset

    def finish(self, shard_size: int, end: int) -> bytes:
        """The index's bytes, for a shard of ``shard_size`` bytes whose end-of-archive
        marker begins at ``end``."""
        if end <= self._last or end % BLOCK or end > shard_size:
            raise ValueError(
                f"end {end} of a shard of {shard_size} bytes, last sample {self._last}"
            )
        header = _HEADER.pack(MAGIC, VERSION, self.samples, shard_size, end, len(self._keys), b"")
        return header + self._table + self._keys


class ShardIndex:
    """A shard's index read from ``data`` (bytes or a memory map), named ``source``.

    Checked whole on opening, in O(N) without a Python object per sample: raises
    :class:`~tarkit.errors.InputError` for data that is not a well-formed index (short,
    lengths that disagree, offsets that do not increase, keys out of range) and
    :class:`~tarkit.errors.UsageError` for an index of another format version. Rows are
    read on demand (:meth:`entry`); :meth:`position` builds a key → position dict on
    first use (O(N) memory). Holds a view of ``data``: release it (:meth:`close`) before
    closing a memory map.
    """

    def __init__(self, data: Buffer, source: str) -> None:
        self.source = source
        view = memoryview(data).cast("B")
        self._view = view
        samples, size, end, key_bytes = _header(view, source)
        expected = HEADER_SIZE + ROW_SIZE * samples + key_bytes
        if len(view) != expected:
            raise self._malformed(
                f"{len(view)} bytes where its header ({samples} samples, {key_bytes} bytes "
                f"of keys) says {expected}"
            )
        if end > size or end % BLOCK:
            raise self._malformed(f"its end ({end}) is not a block within the shard's {size} bytes")
        self.samples: int = samples
        self.shard_size: int = size
        self.end: int = end
        self._keys_at = HEADER_SIZE + ROW_SIZE * samples
        self._key_bytes = key_bytes
        self._positions: dict[str, int] | None = None
        self._check_table()

    def __len__(self) -> int:
        return self.samples

    def entry(self, position: int) -> IndexEntry:
        """Where sample ``position`` (0 ≤ position < N) lies; IndexError out of range."""
        if not 0 <= position < self.samples:
            raise IndexError(f"sample {position} of a shard of {self.samples}")
        at = HEADER_SIZE + ROW_SIZE * position
        if position + 1 < self.samples:
            offset, crc, key_start, stop, _, key_stop = _TWO_ROWS.unpack_from(self._view, at)
        else:
            offset, crc, key_start = _ROW.unpack_from(self._view, at)
            stop, key_stop = self.end, self._key_bytes
        keys = self._keys_at
        key = str(self._view[keys + key_start : keys + key_stop], "utf-8", "surrogateescape")
        return IndexEntry(position, key, offset, stop, crc)

    def key(self, position: int) -> str:
        """The key of sample ``position``."""
        return self.entry(position).key

    def keys(self) -> list[str]:
        """Every key, in sample order."""
        if not self.samples:
            return []
        starts = numbers(self._table(), "I", 3, 4)
        blob = bytes(self._view[self._keys_at :])
        stops = [*starts[1:], len(blob)]
        return [
            blob[a:b].decode("utf-8", "surrogateescape") for a, b in zip(starts, stops, strict=True)
        ]

    def offsets(self) -> list[int]:
        """The offset of every sample's first header block, in sample order."""
        return list(numbers(self._table(), "Q", 0, 2))

    def position(self, key: str) -> int:
        """The position of the sample with ``key``; KeyError when the shard has none."""
        if self._positions is None:
            keys = self.keys()
            positions = dict(zip(keys, range(len(keys)), strict=True))
            if len(positions) != len(keys):
                twice = next(k for i, k in enumerate(keys) if positions[k] != i)
                raise self._malformed(f"key {twice!r} twice")
            self._positions = positions
        return self._positions[key]

    def check_size(self, size: int, shard: str, entry: IndexEntry | None = None) -> None:
        """Raise :class:`~tarkit.errors.InputError` (reason ``STALE``) naming ``shard``
        (and the sample ``entry`` being read, when given) unless it is ``size`` bytes
        long, as when it was indexed."""
        if size != self.shard_size and entry is not None:
            raise _stale(shard, entry, f"the shard has {size} bytes, its index says "
                                       f"{self.shard_size}")  # fmt: skip
        if size != self.shard_size:
            raise InputError(
                f"the shard changed after it was indexed (it has {size} bytes, its index "
                f"says {self.shard_size}): {REINDEX}",
                source=shard,
                reason=InputError.STALE,
            )

    def close(self) -> None:
        """Release the view of the data."""
        self._view.release()

    def __reduce__(self) -> tuple[object, ...]:
        # Into another process with bytes of its own (a memory map does not pickle).
        return ShardIndex, (self._view.tobytes(), self.source)

    def _table(self) -> memoryview:
        return self._view[HEADER_SIZE : self._keys_at]

    def _check_table(self) -> None:
        if not self.samples:
            if self._key_bytes:
                raise self._malformed("keys but no samples")
            return
        offsets = numbers(self._table(), "Q", 0, 2)
        if not all(map(lt, offsets, offsets[1:])):
            raise self._malformed("sample offsets that do not increase")
        if any(map((BLOCK - 1).__and__, offsets)) or offsets[-1] >= self.end:
            raise self._malformed(
                f"a sample offset that is not a block before its end ({self.end})"
            )
        starts = numbers(self._table(), "I", 3, 4)
        if starts[0] or not all(map(lt, starts, starts[1:])) or starts[-1] >= self._key_bytes:
            raise self._malformed("key starts out of order or out of its keys")

    def _malformed(self, what: str) -> InputError:
        return InputError(f"not a well-formed shard index: {what}", source=self.source)


def index_header(data: Buffer, source: str) -> tuple[int, int]:
    """(samples, shard size) from the first :data:`HEADER_SIZE` bytes of an index (more
    may follow): what a dataset of listed shards reads of each index when it opens.
    Raises as :class:`ShardIndex` does for a header that is not one.
    """
    samples, size, _, _ = _header(memoryview(data).cast("B")[:HEADER_SIZE], source)
    return samples, size


def _header(view: memoryview, source: str) -> tuple[int, int, int, int]:
    """(samples, shard size, end, key bytes) of the index header at the start of ``view``."""
    if len(view) < HEADER_SIZE:
        raise InputError(
            f"not a well-formed shard index: {len(view)} bytes, less than its "
            f"{HEADER_SIZE}-byte header",
            source=source,
        )
    magic, version, samples, size, end, key_bytes, reserved = _HEADER.unpack_from(view)
    if magic != MAGIC:
        raise InputError("not a tarkit shard index (no TKSIDX magic)", source=source)
    if version != VERSION:
        raise UsageError(
            f"{source}: an index of another format version ({version}; this tarkit "
            f"reads version {VERSION}): {REINDEX}"
        )
    if reserved != bytes(24):
        raise InputError(
            "not a well-formed shard index: reserved header bytes that are not zero",
            source=source,
        )
    return samples, size, end, key_bytes


def sample_from_span(
    entry: IndexEntry, span: Buffer, shard: str, *, skips: SkipLog | None = None
) -> Sample:
    """The sample ``entry`` describes, read from ``span``: the bytes of its shard
    ``shard`` from ``entry.offset`` to ``entry.stop``.

    The span's length and crc32 must be those recorded, and the strict reader must find
    in it exactly one sample with the recorded key (members it skips after the sample
    are counted in ``skips``). Anything else raises :class:`~tarkit.errors.InputError`
    with reason ``STALE`` naming the shard, the position and the key: the shard changed
    after it was indexed. Offsets in the sample and in errors are the shard's.
    """
    if len(span) != entry.stop - entry.offset:
        raise _stale(
            shard, entry, f"{len(span)} bytes where its index says {entry.stop - entry.offset}"
        )
    compiled = scanner.compiled
    if (zlib.crc32 if compiled is None else _crc32)(span) != entry.crc:
        raise _stale(shard, entry, "its bytes differ from the crc32 in the index")
    if compiled is not None and type(span) is bytes:
        # One run of ordinary members of one key: the sample the reader below would give,
        # at a fraction of its cost. Anything else is read below, which names what is wrong.
        sample = compiled.span_sample(span, entry.offset, shard)
        if sample is not None and sample.key == entry.key:
            return cast(Sample, sample)
    stream = _SpanStream(span)
    members = read_members(cast(BinaryIO, stream), shard, start=entry.offset)
    try:
        samples = list(group_samples(members, shard, skips=skips))
    except InputError as exc:
        raise _stale(shard, entry, f"it does not read: {exc}") from exc
    if len(samples) != 1 or samples[0].key != entry.key or members.end != entry.stop:
        keys = ", ".join(repr(s.key) for s in samples[:3]) or "none"
        raise _stale(shard, entry, f"its bytes hold the samples {keys}")
    return samples[0]


def _stale(shard: str, entry: IndexEntry, why: str) -> InputError:
    return InputError(
        f"sample {entry.position} (key {entry.key!r}) is not as indexed ({why}): the shard "
        f"changed after it was indexed; {REINDEX}",
        source=shard,
        offset=entry.offset,
        reason=InputError.STALE,
    )


class _SpanStream:
    """A span and an end-of-archive marker after it, as a stream. A small span is joined
    to the marker (the reader then takes the sample in one pass); a large one is not
    copied: each read returns the next part whole (the reader takes any length)."""

    __slots__ = ("_parts",)

    def __init__(self, span: Buffer) -> None:
        if len(span) <= _JOINED_SPAN:
            self._parts = [bytes(span) + END_OF_ARCHIVE]
        else:
            self._parts = [END_OF_ARCHIVE, span if type(span) is bytes else bytes(span)]

    def read(self, n: int = -1) -> bytes:
        return self._parts.pop() if self._parts else b""


def index_stream(
    stream: BinaryIO, source: str = "-", *, strict: bool = False, skips: SkipLog | None = None
) -> bytes:
    """The index of the uncompressed tar ``stream`` (named ``source``), read once to its end.

    Samples are read as :func:`~tarkit.format.samples.group_samples` reads them (skipped
    members counted in ``skips``, refused under ``strict``); raises what the reader
    raises. Each span's crc32 is taken from the bytes as they are read, so nothing is
    read twice. Memory: the reader's, and the bytes read since the last sample began.
    """
    tee = _Tee(stream)
    members = read_members(cast(BinaryIO, tee), source)
    builder = IndexBuilder()
    add, crc_to = builder.add, tee.crc_to
    offset, key, crc = 0, None, 0  # the sample before, its span's crc so far
    for sample in group_samples(members, source, strict=strict, skips=skips):
        span = sample.span
        if span is not None:  # read by the compiled scanner: buffer, start, stop, offset
            start, stop = span[3] + span[1], span[3] + span[2]
        else:
            start, stop = _bounds(sample)
        if key is None:
            tee.skip_to(start)
        else:
            add(offset, key, crc_to(start, crc))
        offset, key, crc = start, sample.key, crc_to(stop, 0)
    end = members.end
    assert end is not None  # the reader ends at the marker or raises
    if key is not None:
        add(offset, key, crc_to(end, crc))
    return builder.finish(tee.position, end)


def _bounds(sample: Sample) -> tuple[int, int]:
    """Where the members of ``sample`` (read in Python) begin and end in the stream."""
    members = sample.members
    return members[0].offset, members[-1].offset + len(members[-1].raw)


class _Tee:
    """The stream being indexed: its reads go to the reader and are kept until the spans
    they hold have been checksummed (:meth:`crc_to`), which are then let go."""

    def __init__(self, stream: BinaryIO) -> None:
        self._read = getattr(stream, "read1", None) or stream.read
        self._chunks: deque[memoryview] = deque()
        self._first = 0  # stream offset of _chunks[0]
        self._done = 0  # the bytes before this offset are taken
        self.position = 0  # bytes read
        self._crc32 = zlib.crc32 if scanner.compiled is None else _crc32

    def read1(self, n: int = -1) -> bytes:
        chunk: bytes = self._read(n)
        if chunk:
            self._chunks.append(memoryview(chunk))
            self.position += len(chunk)
        return chunk

    read = read1

    def skip_to(self, stop: int) -> None:
        """Let the bytes up to offset ``stop`` go unchecksummed."""
        self._take(stop, None)

    def crc_to(self, stop: int, crc: int) -> int:
        """``crc`` continued over the bytes from where the last call stopped to ``stop``."""
        if self._done == stop:
            return crc
        first = self._first
        chunk = self._chunks[0]
        if stop - first < len(chunk):  # within the first chunk kept, and not its end
            crc = self._crc32(chunk[self._done - first : stop - first], crc)
            self._done = stop
            return crc
        return cast(int, self._take(stop, crc))

    def _take(self, stop: int, crc: int | None) -> int | None:
        chunks = self._chunks
        while self._done < stop:
            chunk = chunks[0]
            begin = self._done - self._first
            end = min(len(chunk), stop - self._first)
            if crc is not None:
                crc = self._crc32(chunk[begin:end], crc)
            self._done = self._first + end
            if end == len(chunk):
                chunks.popleft()
                self._first += end
        return crc
