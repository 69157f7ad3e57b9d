"""Stream stages over samples: read many inputs, take, slice, shuffle, write (samples, or
new members made from files, as ``tarcreate`` does).

Every stage takes an iterator and returns one, so the commands are compositions:

>>> list(slice_samples(iter(range(10)), "2:8:3"))
[2, 5]
"""

from __future__ import annotations

import errno
import itertools
import sys
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from time import monotonic
from typing import BinaryIO, TypeVar

from ..errors import UsageError
from ..format.archives import archive_members
from ..format.samples import Sample, SkipLog, group_samples, same_key_error
from ..format.tar_writer import TarWriter
from ..storage import (
    Sink,
    Source,
    StorageOptions,
    check_local_files,
    descriptor_failure,
    expand_inputs,
    open_source,
)

T = TypeVar("T")
WRITE_CHUNK = 1 << 20
FLUSH_INTERVAL = 0.1  # seconds a written sample may wait in memory for more to come


def read_samples(
    inputs: Sequence[str],
    *,
    strict: bool = False,
    skips: SkipLog | None = None,
    ignore_zeros: bool = False,
    allow_empty: bool = False,
    storage_options: StorageOptions | None = None,
) -> Iterator[Sample]:
    """Yield the samples of every input in order (brace-expanded; none means stdin).

    Each input is opened only when the previous one is done, and closed (its
    ``pipe:`` command's exit status checked) before the next. Stopping early closes
    the current input without reading the rest. ``storage_options`` go to fsspec for
    fsspec URLs. Raises :class:`~tarkit.errors.TarkitError` for any bad input; local
    files that are missing, directories or part of a set whose commit was stopped midway
    before the first sample (:func:`~tarkit.storage.check_local_files`).
    """
    specs = expand_inputs(inputs)
    check_local_files(specs)
    for spec in specs:
        with open_source(spec, storage_options) as source:
            yield from source_samples(
                source, strict=strict, skips=skips, ignore_zeros=ignore_zeros,
                allow_empty=allow_empty,
            )  # fmt: skip


def source_samples(
    source: Source,
    *,
    strict: bool = False,
    skips: SkipLog | None = None,
    ignore_zeros: bool = False,
    allow_empty: bool = False,
) -> Iterator[Sample]:
    """The samples of one opened input (decompressed if need be); the caller closes it."""
    members = archive_members(
        source.stream, source.name, ignore_zeros=ignore_zeros, allow_empty=allow_empty
    )
    yield from group_samples(members, source.name, strict=strict, skips=skips)


def write_all(stream: BinaryIO, data: bytes) -> None:
    """Write all of ``data`` to ``stream``.

    A buffered write to a pipe whose reader has left can return a short count instead of
    raising (CPython writes what fits, then drops the rest); the next write raises
    BrokenPipeError, so a command ends with 141 rather than 0.
    """
    view = memoryview(data)
    while view:
        view = view[stream.write(view) :]


def take(items: Iterable[T], count: int | None) -> Iterator[T]:
    """The first ``count`` items (all of them for None); stops reading after that."""
    if count is None:
        yield from items
        return
    if count < 0:
        raise UsageError("the count must not be negative")
    iterator = iter(items)
    try:
        yield from itertools.islice(iterator, min(count, _BEYOND_ANY_STREAM))
    finally:
        close_iterator(iterator)


def close_iterator(items: object) -> None:
    """Close a generator chain now, so inputs it still holds open are closed early."""
    close = getattr(items, "close", None)
    if close is not None:
        close()


def parse_slice(text: str) -> slice:
    """Parse ``START:STOP[:STEP]`` (any part may be empty, as in Python).

    >>> parse_slice("10:-5")
    slice(10, -5, None)
    """
    parts = text.split(":")
    if not 1 <= len(parts) <= 3:
        raise UsageError(f"--slice {text!r}: expected START:STOP[:STEP]")
    try:
        numbers = [int(p) if p.strip() else None for p in parts]
    except ValueError:
        raise UsageError(f"--slice {text!r}: expected integers, as in START:STOP[:STEP]") from None
    if len(numbers) == 1:
        start = numbers[0]
        return slice(start, None if start is None or start == -1 else start + 1)
    step = numbers[2] if len(numbers) == 3 else None
    if step is not None and step <= 0:
        raise UsageError(f"--slice {text!r}: the step must be positive on a stream")
    return slice(numbers[0], numbers[1], step)


# No stream has this many items, so a larger index or step selects the same items
# (half of sys.maxsize: islice overflows when its next index passes sys.maxsize).
_BEYOND_ANY_STREAM = sys.maxsize // 2


def _clamp(index: int) -> int:
    return max(-_BEYOND_ANY_STREAM, min(index, _BEYOND_ANY_STREAM))


def slice_samples(items: Iterator[T], spec: str | slice) -> Iterator[T]:
    """Python slice semantics on the item index, negative indices included.

    Negative indices hold back at most that many items in memory.
    """
    s = parse_slice(spec) if isinstance(spec, str) else spec
    start, step = _clamp(s.start or 0), _clamp(s.step or 1)
    stop = None if s.stop is None else _clamp(s.stop)
    if start >= 0 and (stop is None or stop >= 0):
        try:
            yield from itertools.islice(items, start, stop, step)
        finally:
            close_iterator(items)
        return
    # Negative bounds: index relative to the end, so buffer just enough.
    if start < 0:
        window: deque[tuple[int, T]] = deque(maxlen=-start)
        total = 0
        for item in items:
            window.append((total, item))
            total += 1
        first = max(total + start, 0)
        last = total if stop is None else (stop if stop >= 0 else total + stop)
        for index, item in window:
            if first <= index < last and (index - first) % step == 0:
                yield item
        return
    # start >= 0, stop < 0: hold back -stop items.
    assert stop is not None
    held: deque[tuple[int, T]] = deque()
    for index, item in enumerate(items):
        held.append((index, item))
        if len(held) > -stop:
            i, it = held.popleft()
            if i >= start and (i - start) % step == 0:
                yield it


def shuffle_samples(items: Iterable[T], bufsize: int, seed: int = 0) -> Iterator[T]:
    """A seeded buffer shuffle: the same seed and input give the same order.

    Memory: ``bufsize`` items.

    >>> list(shuffle_samples(range(5), 3, seed=1)) == list(shuffle_samples(range(5), 3, seed=1))
    True
    """
    if bufsize < 1:
        raise UsageError("--shuffle needs a buffer size of at least 1")
    import random  # here: its import is a start-up cost of every tool

    rng = random.Random(seed)
    buffer: list[T] = []
    for item in items:
        if isinstance(item, Sample):
            # Held a while: it must not keep the whole read buffer it came from.
            item = item.detached()  # type: ignore[assignment]
        if len(buffer) < bufsize:
            buffer.append(item)
            continue
        index = rng.randrange(bufsize)
        yield buffer[index]
        buffer[index] = item
    rng.shuffle(buffer)
    yield from buffer


def write_samples(samples: Iterable[Sample], sink: Sink) -> int:
    """Write samples to ``sink`` as one archive and commit it; returns the sample count.

    If reading fails, everything before the failing sample has been written, the
    end-of-archive marker has not, and the sink is aborted (a file output is removed).
    A sample with the same key as the one before it (two inputs numbered alike,
    concatenated or mixed) raises :class:`~tarkit.errors.SampleError` the same way:
    every reader would merge the two into one sample.
    """
    count = 0
    previous: Sample | None = None
    previous_key: object = None
    pending = _Pending()
    # The open run of samples read by the compiled scanner: buffer[start:stop] (kept in
    # locals: this loop runs once per sample).
    buffer: bytes | None = None
    start = stop = 0
    flushed = monotonic()
    clock, interval, chunk = monotonic, FLUSH_INTERVAL, WRITE_CHUNK
    with new_archive(sink) as writer:
        try:
            for sample in samples:
                key = sample.key
                if key == previous_key:
                    raise same_key_error(previous, sample)  # type: ignore[arg-type]
                previous, previous_key = sample, key
                span = sample.span
                if span is not None and span[0] is buffer and span[1] == stop:
                    stop = span[2]
                else:
                    if buffer is not None:
                        pending.add_view(buffer, start, stop)
                        buffer, start, stop = None, 0, 0
                    if span is not None:
                        buffer, start, stop = span[0], span[1], span[2]
                    else:
                        for member in sample.members:
                            raw = member.raw
                            if len(raw) >= chunk:
                                # A large member goes out as it is, without another copy.
                                pending.write_to(writer)
                                writer.write_raw(raw)
                                continue
                            pending.add(raw)
                count += 1
                if stop - start + pending.size >= chunk or clock() - flushed > interval:
                    # A slow input must not hold samples back from the next command.
                    if buffer is not None:
                        pending.add_view(buffer, start, stop)
                        buffer, start, stop = None, 0, 0
                    pending.write_to(writer)
                    sink.stream.flush()
                    flushed = clock()
        finally:
            # Whole samples read before a failure still go out.
            if buffer is not None:
                pending.add_view(buffer, start, stop)
            pending.write_to(writer)
        close_iterator(samples)
    return count


def write_members(members: Iterable[tuple[str, bytes]], sink: Sink) -> int:
    """Write new members, (name, data) pairs, to ``sink`` as one archive with
    :meth:`~tarkit.format.tar_writer.TarWriter.add`'s deterministic headers, and commit it;
    return the count.

    On any error the sink is aborted (a file output does not appear) and the
    end-of-archive marker is not written.
    """
    count = 0
    with new_archive(sink) as writer:
        for name, data in members:
            writer.add(name, data)
            count += 1
    return count


@contextmanager
def new_archive(sink: Sink) -> Iterator[TarWriter]:
    """A :class:`~tarkit.format.tar_writer.TarWriter` on ``sink``: leaving the block ends the
    archive and commits the sink; an error aborts it (a file output does not appear)
    without the end-of-archive marker. Disk errors become :class:`OutputError`."""
    try:
        with output_errors(sink):
            writer = TarWriter(sink.stream)
            yield writer
            writer.close()
            sink.commit()
    except BaseException:
        sink.abort()
        raise


class _Pending:
    """Raw bytes waiting to be written, gathered into writes of about a megabyte: one
    write call per small member would cost more than reading it. A run of samples the
    compiled scanner read lies in its read buffer: it is kept as one slice of that buffer
    and written without a copy."""

    __slots__ = ("pieces", "size")

    def __init__(self) -> None:
        self.pieces: list[bytes | memoryview] = []
        self.size = 0

    def add(self, raw: bytes) -> None:
        self.pieces.append(raw)
        self.size += len(raw)

    def add_view(self, buffer: bytes, start: int, stop: int) -> None:
        self.pieces.append(memoryview(buffer)[start:stop])
        self.size += stop - start

    def write_to(self, writer: TarWriter) -> None:
        """Write everything pending: each run as it is, the pieces between joined."""
        small: list[bytes | memoryview] = []
        for piece in self.pieces:
            if isinstance(piece, memoryview):
                if small:
                    writer.write_raw(small[0] if len(small) == 1 else b"".join(small))
                    small = []
                writer.write_raw(piece)
            else:
                small.append(piece)
        if small:
            writer.write_raw(small[0] if len(small) == 1 else b"".join(small))
        self.pieces = []
        self.size = 0


class output_errors:
    """Turn an OSError while writing stdout or a device (full disk, quota) into an
    OutputError naming the sink (:func:`~tarkit.storage.write_failure`).

    ``sink`` is a :class:`Sink` or ``-`` (stdout). A file sink names its own failures
    (:class:`~tarkit.storage.StagedFile`), so an OSError that reaches here past one is
    not the sink's and is not blamed on it.
    """

    def __init__(self, sink: Sink | str) -> None:
        self.sink = sink

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:  # fmt: skip
        if isinstance(exc, OSError) and not isinstance(exc, BrokenPipeError):
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS):
                if isinstance(self.sink, str):
                    raise descriptor_failure("<stdout>", 1, exc) from None
                if self.sink.staged is None:
                    raise self.sink.failure(exc) from None
