"""What ``handler="skip"`` skipped, counted across DataLoader workers, and why.

A skip has a reason (the constants below; the first four are about shards: the rest of
the shard, or of the worker's piece of it, is skipped). The reason of a shard that
failed is read from the error's class and its ``reason`` attribute, never from its
message. Counts live in torch shared memory (:class:`SharedState`) so that the main
process sees what its workers skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..errors import InputError, SourceError
from .shared import SharedLock

# Why samples or shards were skipped under handler="skip". The first four are about
# shards (the rest of the shard, or of the worker's piece of it, is skipped).
UNREADABLE = "unreadable shard"
TRUNCATED = "truncated shard"
CORRUPT = "corrupt shard"
MISMATCH = "shard does not match the manifest"
UNDECODABLE = "undecodable field"
MISSING = "missing field"
MAP_FAILED = "map failed"
REASONS = (UNREADABLE, TRUNCATED, CORRUPT, MISMATCH, UNDECODABLE, MISSING, MAP_FAILED)
_SHARD_REASONS = 4

# Counter rows in shared memory: one per DataLoader worker (modulo), so that workers never
# add to the same cell at once.
COUNTER_ROWS = 64
_EXAMPLE = 400  # bytes kept of the first message of each reason
# Cells of the shared numbers tensor before the counter rows.
WARNED_IDLE, _WARNED_SKIP, _HEAD = 0, 1, 2
_COLUMNS = len(REASONS) + 1  # samples skipped per reason, then samples repeated


@dataclass
class SkipCounts:
    """What ``handler="skip"`` skipped in an epoch (all workers summed).

    ``samples`` and ``shards`` count by reason (a shard counts once however many
    workers read pieces of it); ``repeated`` counts samples repeated to keep
    ``equal_batches``; ``examples`` holds the first message of each reason.
    ``reconnections`` counts the times a remote shard's read reconnected at the byte it
    had reached (nothing was skipped: the read went on; docs/remote.md).
    """

    samples: dict[str, int] = field(default_factory=dict)
    shards: dict[str, int] = field(default_factory=dict)
    repeated: int = 0
    examples: dict[str, str] = field(default_factory=dict)
    reconnections: int = 0

    @property
    def total_samples(self) -> int:
        return sum(self.samples.values())

    @property
    def total_shards(self) -> int:
        return sum(self.shards.values())

    def __bool__(self) -> bool:
        return bool(self.samples or self.shards or self.repeated)

    def __str__(self) -> str:
        if not self:
            return "nothing skipped"
        parts = [f"{n} {reason}" for reason, n in self.samples.items()]
        text = f"skipped {self.total_samples} samples ({', '.join(parts) or 'none'})"
        text += f" and {self.total_shards} shards"
        if self.repeated:
            text += f"; repeated {self.repeated} samples to keep batches equal"
        return text


class SharedState:
    """Skip counts and warning flags in shared memory, seen by the dataset and its worker
    copies.

    Torch shared-memory tensors: forked workers share them, spawned workers get them
    through torch's pickler, and a plain ``pickle`` copies their values. A
    :class:`~tarkit.loading.shared.SharedLock` makes "first" mean first among workers
    (two workers skipping at once would both warn, or mix their examples).
    """

    def __init__(self, shards: int) -> None:
        self.numbers = torch.zeros(
            _HEAD + COUNTER_ROWS * _COLUMNS, dtype=torch.int64
        ).share_memory_()
        self.shard_reasons = torch.zeros(max(shards, 1), dtype=torch.int8).share_memory_()
        self.examples = torch.zeros((len(REASONS), _EXAMPLE), dtype=torch.uint8).share_memory_()
        # Reconnections of remote reads, and whether they were warned of.
        self.reconnections = torch.zeros(2, dtype=torch.int64).share_memory_()
        self.lock = SharedLock()

    def reset(self) -> None:
        self.numbers[_WARNED_SKIP:] = 0
        self.shard_reasons.zero_()
        self.examples.zero_()
        self.reconnections.zero_()

    def add(self, row: int, reason: str, samples: int, shard: int | None, message: str) -> bool:
        """Count a skip; True when it is the first of this dataset (time to warn)."""
        index = REASONS.index(reason)
        with self.lock:
            self.numbers[_HEAD + (row % COUNTER_ROWS) * _COLUMNS + index] += samples
            if shard is not None and int(self.shard_reasons[shard]) == 0:
                self.shard_reasons[shard] = index + 1
            if int(self.examples[index, 0]) == 0:
                data = message.encode("utf-8", "replace")[: _EXAMPLE - 1] or b"?"
                self.examples[index, : len(data)] = torch.frombuffer(
                    bytearray(data), dtype=torch.uint8
                )
            return self._first(_WARNED_SKIP)

    def reconnected(self) -> bool:
        """Count a reconnection; True for the first since the reset (time to warn)."""
        with self.lock:
            self.reconnections[0] += 1
            first = int(self.reconnections[1]) == 0
            self.reconnections[1] = 1
            return first

    def repeat(self, row: int, samples: int) -> None:
        with self.lock:
            self.numbers[_HEAD + (row % COUNTER_ROWS) * _COLUMNS + len(REASONS)] += samples

    def first(self, cell: int) -> bool:
        """Set a flag; True for the one process that set it."""
        with self.lock:
            return self._first(cell)

    def _first(self, cell: int) -> bool:
        if int(self.numbers[cell]):
            return False
        self.numbers[cell] = 1
        return True

    def counts(self) -> SkipCounts:
        rows = self.numbers[_HEAD:].view(COUNTER_ROWS, _COLUMNS).sum(dim=0).tolist()
        flags = torch.bincount(self.shard_reasons.long(), minlength=len(REASONS) + 1).tolist()
        result = SkipCounts(repeated=rows[len(REASONS)], reconnections=int(self.reconnections[0]))
        for index, reason in enumerate(REASONS):
            if rows[index]:
                result.samples[reason] = rows[index]
            if index < _SHARD_REASONS and flags[index + 1]:
                result.shards[reason] = flags[index + 1]
            raw = bytes(self.examples[index].tolist()).rstrip(b"\0")
            if raw:
                result.examples[reason] = raw.decode("utf-8", "replace")
        return result


def shard_reason(exc: Exception) -> str:
    """Why a shard is skipped, from the error that stopped its reading.

    >>> from tarkit.errors import TruncatedError
    >>> shard_reason(TruncatedError("ends early")), shard_reason(SourceError("gone"))
    ('truncated shard', 'unreadable shard')
    """
    if isinstance(exc, SourceError):
        return UNREADABLE
    if isinstance(exc, InputError) and exc.reason == InputError.TRUNCATED:
        return TRUNCATED
    if isinstance(exc, InputError) and exc.reason == InputError.MISMATCH:
        return MISMATCH
    return CORRUPT
