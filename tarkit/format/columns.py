"""Columns of little-endian numbers in a buffer: the binary parts of the shard index and
of the manifest (version 2).

The manifest's columns file holds, for S shards, three columns one after the other::

    samples   S × u64   samples of each shard
    bytes     S × u64   its size as stored
    sha256    S × 32    the SHA-256 of its stored bytes (32 zero bytes: not known)

so that opening a dataset reads its first 8 S bytes only. The format only, no I/O.

>>> data = columns_bytes([3, 0], [10240, 1024], [bytes(range(32)), None])
>>> len(data), list(numbers(data[:16], "q"))
(96, [3, 0])
"""

from __future__ import annotations

import mmap
import sys
from array import array
from collections.abc import Sequence
from typing import Literal, Union

Buffer = Union[bytes, bytearray, memoryview, mmap.mmap]
NumberCode = Literal["q", "Q", "I"]  # i64, u64, u32

SHARD_COLUMNS_SIZE = 8 + 8 + 32  # bytes of the columns file per shard
NO_SHA256 = bytes(32)


def numbers(data: Buffer, code: NumberCode, start: int = 0, step: int = 1) -> Sequence[int]:
    """Every ``step``-th little-endian number of ``data`` from the ``start``-th, as a
    sequence of ints of :mod:`array` type ``code`` ("q" i64, "Q" u64, "I" u32).
    A view without copying on a little-endian machine; ``data`` must hold whole numbers.
    """
    view = memoryview(data).cast("B")
    if sys.byteorder == "little":
        return view.cast(code)[start::step]
    swapped = array(code, view)
    swapped.byteswap()
    return swapped[start::step]


def little_endian(values: Sequence[int], code: NumberCode) -> bytes:
    """``values`` as little-endian numbers of :mod:`array` type ``code``."""
    packed = (
        values if isinstance(values, array) and values.typecode == code else array(code, values)
    )
    if sys.byteorder != "little":
        packed = array(code, packed)
        packed.byteswap()
    return packed.tobytes()


def columns_bytes(
    samples: Sequence[int], sizes: Sequence[int], sha256: Sequence[bytes | None] | Buffer
) -> bytes:
    """The columns file of shards with these sample counts, sizes and SHA-256 digests
    (32 bytes each, or None; or all of them as one buffer of 32 bytes a shard)."""
    if isinstance(sha256, (bytes, bytearray, memoryview, mmap.mmap)):
        digests = bytes(sha256)
    else:
        digests = b"".join(NO_SHA256 if d is None else d for d in sha256)
    if not len(samples) == len(sizes) == len(digests) // 32 or len(digests) % 32:
        raise ValueError("columns of different lengths")
    return little_endian(samples, "q") + little_endian(sizes, "q") + digests
