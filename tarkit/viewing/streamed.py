"""A view's samples read in order from the shards, for shards without random access
(compressed, without an index, ``pipe:`` commands).

One reader goes forward through the shards, a thread reading ahead of it at most
:data:`READ_AHEAD` bytes of samples (:func:`~tarkit.stream.combining.read_ahead`), so that
the next page is ready when it is asked for. A page behind the reader, or past a shard
whose start is known, starts a new reader at the start of its shard: where each shard
starts is learnt as the reader passes it, or known at once from a manifest's counts.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Generator, Iterator, Sequence
from itertools import accumulate
from time import monotonic

from ..errors import InputError
from ..format.manifest import ShardInfo
from ..format.samples import Sample, SkipLog
from ..stream.combining import read_ahead
from ..stream.stages import close_iterator
from .samples import Found

READ_AHEAD = 16 << 20  # bytes of samples read ahead of the page shown


class StreamedSamples:
    """The samples of the shards ``urls`` read in order (see the module docstring);
    ``infos``, their manifest's entries when there is one, give where each starts."""

    indexed = False

    def __init__(
        self,
        urls: Sequence[str],
        infos: Sequence[ShardInfo] | None,
        *,
        note: str | None = None,
        strict: bool = False,
        skips: SkipLog | None = None,
    ) -> None:
        self.note = note
        self._urls = list(urls)
        self._options = {"strict": strict, "skips": skips}
        self._counts = None if infos is None else [info.samples for info in infos]
        # Where each shard starts, as far as known: all of them from a manifest.
        self._starts = [0] if self._counts is None else list(accumulate(self._counts, initial=0))
        self._total: int | None = None if self._counts is None else self._starts[-1]
        self._reader: Iterator[Sample] | None = None
        self._shard = 0  # the shard the reader reads
        self._at = 0  # the position of the sample it gives next

    @property
    def shards(self) -> int:
        return len(self._urls)

    @property
    def samples(self) -> int | None:
        return self._total

    def places(self) -> list[str]:
        return list(self._urls)

    def read(self, start: int) -> Generator[tuple[int, Sample], None, None]:
        if self._total is not None and start >= self._total:
            return
        if start < self._at or self._shard_of(start) > self._shard:
            self._restart(start)
        while True:
            sample = self._next()
            if sample is None:
                return
            if self._at > start:
                yield self._at - 1, sample

    def find(self, key: str, start: int, deadline: float) -> Found:
        for position, sample in self.read(start):
            if sample.key == key:
                return Found(position, None)
            if monotonic() > deadline:
                return Found(None, position + 1)
        return Found(None, None)

    def close(self) -> None:
        self._stop()
        self._shard, self._at = 0, 0

    def _shard_of(self, position: int) -> int:
        """The last shard known to start at or before ``position``."""
        return min(bisect_right(self._starts, position) - 1, len(self._urls) - 1)

    def _restart(self, position: int) -> None:
        self._stop()
        self._shard = self._shard_of(position)
        self._at = self._starts[self._shard]

    def _stop(self) -> None:
        if self._reader is not None:
            close_iterator(self._reader)  # stops its thread
            self._reader = None

    def _next(self) -> Sample | None:
        """The reader's next sample, on to the next shard at the end of one; None at the
        end of the last. Raises :class:`~tarkit.errors.InputError` (reason ``MISMATCH``)
        for a shard whose count is not its manifest's."""
        while self._shard < len(self._urls):
            if self._reader is None:
                url = self._urls[self._shard]
                self._reader = read_ahead([url], 1, READ_AHEAD, **self._options)
            sample = next(self._reader, None)
            counted = self._at - self._starts[self._shard] + (sample is not None)
            if self._counts is not None and (
                counted > self._counts[self._shard]
                or sample is None
                and counted != self._counts[self._shard]
            ):
                self._stop()
                found = f"more than {counted - 1}" if sample is not None else str(counted)
                raise InputError(
                    f"{found} samples, its manifest says {self._counts[self._shard]}",
                    source=self._urls[self._shard],
                    reason=InputError.MISMATCH,
                )
            if sample is not None:
                self._at += 1
                return sample.detached()  # not the read buffer: the page keeps it a while
            self._stop()
            self._shard += 1
            if self._shard == len(self._starts):
                self._starts.append(self._at)
        self._total = self._at
        return None
