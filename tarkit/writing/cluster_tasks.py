"""The two tasks of :func:`~tarkit.shard_dataset` on an engine: encode items, write a shard.

Both are :class:`~tarkit.engines.base.Task` objects run by a worker whose shared object
is the :class:`~tarkit.writing.items.ItemEncoder` (the dataset with it):

- :class:`EncodeTask` loads and encodes a run of consecutive positions of the item
  order. It reports the tar size of each sample of each item (an item may give none,
  one or several; or its failure, to be raised or left out) and leaves the encoded
  samples, one after another, as its payload: they stay in the engine (a Ray object
  store) until the shard that holds them is written.
- :class:`WriteTask` writes one shard from the payloads of the encode tasks that hold
  its samples, cutting it with :class:`~tarkit.writing.cuts.ShardCut` exactly as
  :class:`~tarkit.writing.shard_writer.ShardWriter` cuts: the same samples, the same
  write calls, so the same bytes. It publishes the shard's index when it has one
  (:mod:`tarkit.writing.indexes`, made from the bytes written), the shard's record
  (:mod:`tarkit.writing.shard_records`) and then the shard
  (:class:`~tarkit.storage.StagedFile`: a finished-looking shard is always complete).

Where a shard begins and ends is a point of the item order: a position and a sample of
that item (a shard may end among the samples of one item).
When the driver knows where the shard ends (``known``: no compression, bzip2 or xz,
whose cuts follow from the sizes), the task checks that it agrees. Otherwise (gzip and
zstd, whose cuts depend on the compressed bytes) the task finds the end itself among the
candidates it is given: it stops at the first sample that does not fit, or, when every
candidate fits, ends at ``stop`` if the data ends there or the sample after it
(``sentinel``, the first of a shard already written) would not fit, and else reports
that it needs more candidates (``short``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..engines.base import Tell
from ..errors import CarriedError, OutputError
from ..format.compression import compression_for
from ..format.manifest import ShardInfo
from ..format.samples import raw_key
from ..format.tar import END_OF_ARCHIVE
from ..storage import StagedFile, publish, remove_stale_temp
from .cuts import ShardCut
from .indexes import WrittenIndex, index_digest
from .items import ItemEncoder, ItemFailure, Point
from .patterns import pending_name, record_path
from .shard_records import Held, PositionedReject, ShardRecord, write_record

# A sample: (position in the item order, sample of that item, offset in the payload, tar size)
Slot = tuple[int, int, int, int]


@dataclass
class Encoded:
    """What an :class:`EncodeTask` reports, for each item from ``first`` on: the tar
    sizes of its samples (None for an item that failed) and the keys of its first and
    last sample (None for one without samples); and the failures, in order."""

    first: int
    sizes: list[list[int] | None]
    keys: list[tuple[str, str] | None] = field(default_factory=list)
    failures: list[ItemFailure] = field(default_factory=list)
    seconds: float = 0.0

    def failed(self) -> tuple[str, bool] | None:
        return None  # items that fail are the driver's to raise or leave out


@dataclass(frozen=True, kw_only=True)
class EncodeTask:
    """Encode the items ``indices`` (the dataset indices at positions ``first``… of the
    item order); the payload is their encoded samples, one after another."""

    index: int
    first: int
    indices: tuple[int, ...]
    attempt: int = 1

    def run(
        self, shared: ItemEncoder, inputs: Sequence[bytes], tell: Tell | None
    ) -> tuple[Encoded, bytes]:
        started = time.monotonic()
        result = Encoded(self.first, [])
        parts: list[bytes] = []
        for outcome in shared(self.indices):
            if isinstance(outcome, ItemFailure):
                result.sizes.append(None)
                result.keys.append(None)
                result.failures.append(outcome)
            else:
                result.sizes.append([len(sample) for sample in outcome.samples])
                first, last = outcome.first_key, outcome.last_key
                result.keys.append(None if first is None or last is None else (first, last))
                parts.extend(outcome.samples)
        result.seconds = time.monotonic() - started
        return result, b"".join(parts)

    def retried(self) -> EncodeTask:
        return replace(self, attempt=self.attempt + 1)

    def abandon(self) -> None:
        pass  # it leaves nothing outside the engine


@dataclass(kw_only=True)
class Written:
    """What a :class:`WriteTask` reports: the shard's entry and the positions it covers,
    or ``short`` (it needs more candidates), or its ``failure``."""

    number: int
    info: ShardInfo | None = None
    record: ShardRecord | None = None
    record_size: int = 0  # the bytes of its record's file
    short: bool = False
    failure: CarriedError | None = None
    final: bool = False  # the failure would happen again
    name: str = ""
    index_size: int | None = None  # bytes of the shard's index, when it has one

    def failed(self) -> tuple[str, bool] | None:
        if self.failure is None:
            return None
        return str(self.exception()), not self.final

    def exception(self) -> BaseException:
        """The failure as the exception to raise."""
        assert self.failure is not None
        return self.failure.raised(lambda text: OutputError(f"{self.name}: {text}"))


@dataclass(frozen=True, kw_only=True)
class WriteTask:
    """Write shard ``number`` to ``path`` (its name, or its pending name under
    ``mode="overwrite"``, and so its record: :attr:`record_at`) from the samples
    ``slots`` (one tuple per input payload) and publish it, with its index at
    ``index_place`` (when given) and its record (when ``run_digest`` is given) first; see the module docstring for ``known``, ``stop``, ``last`` and
    ``sentinel``. ``uneven_from`` is the first position of the item order whose item gave
    other than one sample, as far as the driver has walked (None: none)."""

    index: int
    number: int
    name: str
    path: str
    first: Point
    slots: tuple[tuple[Slot, ...], ...]
    rejects: tuple[PositionedReject, ...]
    stop: Point
    known: bool
    last: bool
    sentinel: int | None
    maxcount: int
    maxsize: int
    run_digest: str | None
    storage_options: dict[str, Any] | None = None
    uneven_from: int | None = None
    attempt: int = 1
    index_place: str | None = None

    @property
    def record_at(self) -> str:
        """Where the shard's record goes: beside it, or under a pending name beside its
        pending file, to take its name in the commit with it."""
        record = record_path(self.name)
        return record if self.path == self.name else pending_name(record)

    def run(
        self, shared: ItemEncoder, inputs: Sequence[bytes], tell: Tell | None
    ) -> tuple[Written, None]:
        try:
            return self._write(inputs), None
        except Exception as exc:
            return Written(number=self.number, failure=CarriedError(exc), name=self.name), None

    def _write(self, inputs: Sequence[bytes]) -> Written:
        options = self.storage_options
        self.abandon()  # what an earlier attempt left
        cut = ShardCut(self.maxcount, self.maxsize, compression_for(self.name))
        index = WrittenIndex() if self.index_place is not None else None
        with StagedFile(self.path, options, hashing=True, compressed_as=self.name) as staged:
            end: Point | None = None
            first = last = None  # the samples written first and last, and their bytes
            for payload, slots in zip(inputs, self.slots, strict=True):
                view = memoryview(payload)
                for position, sample, offset, size in slots:
                    if not cut.takes(size, staged.measure):
                        end = (position, sample)
                        break
                    last = (position, sample), view[offset : offset + size]
                    staged.write(last[1])
                    if index is not None:
                        index.add(last[1])
                    cut.add(size)
                    first = first or last
                if end is not None:
                    break
            if end is None:
                fits = self.sentinel is not None and cut.takes(self.sentinel, staged.measure)
                if not (self.known or self.last or self.sentinel is not None):
                    return Written(number=self.number, short=True, name=self.name)
                if fits:
                    return self._refused(
                        "the shard after it, written by an earlier run, does not begin where "
                        "this run's cut falls: it comes from another run (another item "
                        "order or other limits)"
                    )
                end = self.stop
            elif self.known:
                return self._refused(f"the cut fell at item point {end}, not {self.stop}: "
                                     "a bug in tarkit, please report it")  # fmt: skip
            staged.write(END_OF_ARCHIVE)
            count = cut.count
            size, sha256 = staged.finish(self.maxsize if count > 1 else None)
            info = ShardInfo(self.name, count, size, sha256)
            rejects = tuple(r for r in self.rejects if (r[0], 0) < end)
            assert first is not None and last is not None  # (a shard is never empty)
            held = Held(first[0], last[0], raw_key(first[1]), raw_key(last[1]))
            uneven = self.uneven_from is not None and (self.uneven_from, 0) < end
            index_size = digest = None
            if index is not None:
                data = index.finish()
                publish(self.index_place, data, options)  # type: ignore[arg-type]
                index_size, digest = len(data), index_digest(data)
            record = ShardRecord(run=self.run_digest or "", first=self.first, end=end,
                                 first_size=len(first[1]), rejects=rejects, held=held,
                                 uneven=uneven, index=digest)  # fmt: skip
            written = 0
            if self.run_digest is not None:
                written = write_record(self.name, record, info, options, self.record_at)
            staged.publish()
        return Written(number=self.number, info=info, record=record, record_size=written,
                       name=self.name, index_size=index_size)  # fmt: skip

    def _refused(self, why: str) -> Written:
        """A failure another attempt would meet again."""
        failure = CarriedError(OutputError(f"{self.name}: {why}"))
        return Written(number=self.number, failure=failure, final=True, name=self.name)

    def retried(self) -> WriteTask:
        return replace(self, attempt=self.attempt + 1)

    def abandon(self) -> None:
        for path in (self.path, self.index_place):
            if path is not None:
                remove_stale_temp(path, self.storage_options)
