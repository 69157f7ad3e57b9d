"""A known number of samples cut into a given number of shards of equal counts.

A stream of unknown length cannot be cut into N equal shards in one pass: where to cut
the first shard depends on the total. So the total is given up front (a number, or the
sum of a manifest's counts), and the stream is checked against it as it is written: one
sample more, or the end coming early, is an error (the complete shards stay, the
unfinished one is removed, as for any input error of :class:`ShardWriter`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

from ..errors import InputError, UsageError
from .shard_writer import ShardWriter

T = TypeVar("T")
UNLIMITED_SIZE = 1 << 62  # the counts alone cut the shards


def equal_counts(total: int, num_shards: int) -> list[int]:
    """The sample counts of ``num_shards`` shards holding ``total`` samples: as equal as
    possible, the larger ones first. Raises :class:`UsageError` when a shard would be
    empty (no empty shard is ever written).

    >>> equal_counts(10, 4)
    [3, 3, 2, 2]
    >>> equal_counts(9, 3)
    [3, 3, 3]
    """
    if num_shards < 1:
        raise UsageError(f"the number of shards must be at least 1 (got {num_shards})")
    if total < 0:
        raise UsageError(f"the total must not be negative (got {total})")
    if num_shards > total:
        raise UsageError(
            f"{total} samples cannot fill {num_shards} shards (no shard is ever left empty)"
        )
    base, larger = divmod(total, num_shards)
    return [base + 1] * larger + [base] * (num_shards - larger)


def checked_total(items: Iterable[T], total: int, source: str) -> Iterator[T]:
    """``items`` unchanged, checked to be exactly ``total``: one more, or the end coming
    before, raises :class:`InputError` (reason ``MISMATCH``) naming ``source``."""
    count = 0
    for item in items:
        if count == total:
            raise InputError(
                f"more than the {total} samples given as the total",
                source=source, reason=InputError.MISMATCH,
            )  # fmt: skip
        count += 1
        yield item
    if count != total:
        raise InputError(
            f"{count} samples, not the {total} given as the total",
            source=source, reason=InputError.MISMATCH,
        )  # fmt: skip


def write_equal_shards(
    writer: ShardWriter, samples: Iterable[T], total: int, num_shards: int, source: str
) -> int:
    """Write exactly ``total`` samples into ``num_shards`` shards of
    :func:`equal_counts`; return ``total``. ``writer`` must have no size limit that
    could cut a shard early (:data:`UNLIMITED_SIZE`). Raises :class:`InputError` when
    the samples are not ``total`` (see :func:`checked_total`).
    """
    counts = equal_counts(total, num_shards)
    larger = counts[0]
    smaller_from = counts.count(larger) * larger  # the sample that starts a smaller shard
    writer.maxcount = larger
    for index, sample in enumerate(checked_total(samples, total, source)):
        if index == smaller_from:
            writer.maxcount = counts[-1]  # the open shard is full: it is cut here
        writer.write(sample)  # type: ignore[arg-type]
    return total
