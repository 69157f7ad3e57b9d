"""A stored archive read: its compression sniffed, its tar bytes decompressed and brought
to a start offset, its members read.

The one home of that rule: the shell tools (:func:`~tarkit.stream.stages.source_samples`),
``tarsort``, ``tarkit stats``, the indexer, the loader and the shard cache all read an
input through :func:`archive_members` (or :func:`tar_stream`, when they must know the
compression). Opening the input is :mod:`tarkit.storage`'s business: callers hand in its
stream, wrapped as they need (counting or hashing what is read).

>>> import io
>>> from tarkit.format.tar import END_OF_ARCHIVE
>>> from tarkit.format.tar_writer import encode_member
>>> data = encode_member("a.txt", b"1") + encode_member("b.txt", b"2") + END_OF_ARCHIVE
>>> [m.name for m in archive_members(io.BytesIO(data), "x.tar")]
['a.txt', 'b.txt']
>>> [m.name for m in archive_members(io.BytesIO(data), "x.tar", offset=1024)]
['b.txt']
"""

from __future__ import annotations

from typing import BinaryIO

from ..errors import TruncatedError
from .compression import compression_of, decompressed, sniff
from .tar import MemberReader, read_members

# What read_members reads at once unless told (its own default).
READ_CHUNK = 4 << 20


def tar_stream(
    stream: BinaryIO, source: str, *, offset: int = 0, positioned: bool = False
) -> tuple[str | None, BinaryIO]:
    """The compression of ``stream`` (None for a plain tar) and its tar bytes from byte
    ``offset`` of the tar.

    The compression is sniffed from the first bytes. A plain archive in a seekable
    stream seeks to ``offset``; any other reads ``offset`` bytes of the tar and drops
    them (raising :class:`~tarkit.errors.TruncatedError` when the tar ends before).
    ``positioned`` says the stream already starts at ``offset`` of a plain archive (a
    range of an uncompressed shard): nothing is sniffed or skipped. Errors name
    ``source``.
    """
    if positioned:
        return None, stream
    if offset and getattr(stream, "seekable", lambda: False)():
        if compression_of(stream.read(6)) is None:
            stream.seek(offset)
            return None, stream
        stream.seek(0)
    kind, stream = sniff(stream)
    tar = stream if kind is None else decompressed(stream, kind, source)
    if offset:
        try:
            skip_bytes(tar, offset)
        except EOFError:
            raise TruncatedError(f"the shard ends before byte {offset}", source=source) from None
    return kind, tar


def archive_members(
    stream: BinaryIO,
    source: str,
    *,
    offset: int = 0,
    positioned: bool = False,
    ignore_zeros: bool = False,
    allow_empty: bool = False,
    chunk_size: int = READ_CHUNK,
    data_only: bool = False,
) -> MemberReader:
    """The members of the archive in ``stream`` (compressed or not), from byte ``offset``
    of its tar bytes (:func:`tar_stream`), read by
    :func:`~tarkit.format.tar.read_members` with the other options, whose offsets count
    from where reading starts. Raises what those two raise, naming ``source``.
    """
    tar = tar_stream(stream, source, offset=offset, positioned=positioned)[1]
    return read_members(
        tar, source, ignore_zeros=ignore_zeros, allow_empty=allow_empty,
        chunk_size=chunk_size, data_only=data_only,
    )  # fmt: skip


def skip_bytes(stream: BinaryIO, count: int) -> None:
    """Read and drop ``count`` bytes of ``stream``; EOFError when it ends before."""
    read = getattr(stream, "read1", None) or stream.read
    left = count
    while left:
        chunk = read(min(left, 1 << 20))
        if not chunk:
            raise EOFError(count - left)
        left -= len(chunk)
