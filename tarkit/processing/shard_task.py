"""One shard task of :func:`tarkit.map_shards`: read an input shard, map it, publish the output.

A task runs in a worker process (a local pool process or a Ray worker), so everything
it takes and returns is picklable and it never raises for a failure of the shard: it
returns a :class:`ShardResult` whose ``failure`` says which sample failed and why.

Publishing is atomic and ordered so that a finished-looking output is always complete:

1. the output is written to a :class:`~tarkit.storage.StagedFile` (a temporary file
   beside it, or staged locally for an ``s3://`` output), which hashes it, and with an
   ``index_place`` its shard index is made from the same bytes
   (:mod:`tarkit.writing.indexes`) and published first;
2. its record (:mod:`tarkit.processing.records`) is published;
3. the output is published (renamed into place, or uploaded: an object appears only
   whole);
4. for a remote output, the record is published again with the ETag the store gives
   the object, if it gives one.

With ``resume``, a task whose output exists and matches its record (same input, same
maker) is not redone: its record is returned (and its index checked, made again when it
is not there). With ``staged`` (an overwrite), the output
and its record are published under their pending names, for the driver to commit the
whole set (:mod:`tarkit.processing.output_set`); they get no ETag (a commit in an object
store copies them). A remote input that reconnects mid-shard
(:mod:`tarkit.storage.retrying`) goes on at the byte reached; the result counts the
reconnections.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import InputError, SampleError, ShardFailure, SourceError
from ..format.manifest import ShardInfo
from ..format.samples import Sample, SkipLog
from ..format.tar import END_OF_ARCHIVE
from ..storage import (
    StagedFile,
    location,
    open_source,
    pending_name,
    publish,
    remove_stale_temp,
    retry_policy,
)
from ..writing.indexes import WrittenIndex, index_digest, settle_index
from ..writing.sample_encoder import SampleEncoder, key_of
from .mappers import Maker, Row, ShardMapper
from .records import completed_record, record_path, write_record

PROGRESS_EVERY = 0.5  # seconds between a running task's progress reports


@dataclass(frozen=True)
class ShardTask:
    """What one task does: map ``input`` (shard number ``index``) into ``output``, reading
    and writing remote locations with fsspec's ``storage_options``; ``made_by`` is what
    the records say made it (:func:`~tarkit.processing.mappers.made_by`); ``index_place``
    where the output's shard index goes (None: it gets none). An engine task
    (:class:`~tarkit.engines.base.Task`) whose shared object is the shard mapper."""

    index: int
    input: str
    output: str
    made_by: Maker
    resume: bool = True
    attempt: int = 1
    storage_options: dict[str, Any] | None = None
    index_place: str | None = None
    staged: bool = False

    @property
    def target(self) -> str:
        """Where the output is published: its name, or its pending name when ``staged``."""
        return pending_name(self.output) if self.staged else self.output

    @property
    def index_target(self) -> str | None:
        """Where the output's index is published (None: it has none): its place, or that
        place's pending name when ``staged``."""
        if self.index_place is None:
            return None
        return pending_name(self.index_place) if self.staged else self.index_place

    def run(
        self, shared: ShardMapper, inputs: Sequence[bytes], tell: Callable[[int], object] | None
    ) -> tuple[ShardResult, None]:
        return run_shard(shared, self, tell), None

    def retried(self) -> ShardTask:
        """The next attempt, which redoes the output whatever is there."""
        return replace(self, attempt=self.attempt + 1, resume=False)

    def abandon(self) -> None:
        for path in (self.target, self.index_target):
            if path is not None:
                remove_stale_temp(path, self.storage_options)


@dataclass
class ShardResult:
    """What a task reports back (picklable; rows are JSON values)."""

    index: int
    info: ShardInfo | None = None
    resumed: bool = False
    samples_in: int = 0
    rows: list[Row] = field(default_factory=list)
    rejects: list[str] = field(default_factory=list)
    record_bytes: int = 0  # of the record published beside the output
    index_bytes: int | None = None  # of the output's index, when it has one
    skipped_members: str | None = None
    reconnections: int = 0  # of the input's read, at the byte reached
    failure: ShardFailure | None = None
    seconds: float = 0.0
    worker: str = ""


def run_shard(
    mapper: ShardMapper, task: ShardTask, progress: Callable[[int], object] | None = None
) -> ShardResult:
    """Run one shard task; never raises for a failure of the shard (see the module doc).

    ``progress`` is called with the number of input samples read so far, at most every
    :data:`PROGRESS_EVERY` seconds while the shard runs.
    """
    started = time.monotonic()
    result = ShardResult(task.index, worker=f"{_hostname()}:{os.getpid()}")
    key: str | None = None
    options = task.storage_options

    def reconnected(event: object) -> None:
        result.reconnections += 1

    try:
        if task.resume:
            record = completed_record(task.output, task.input, task.made_by, options)
            if record is not None:
                result.info, result.rows, result.rejects, digest = record
                result.resumed = True
                if task.index_place is not None:
                    settle_index(task.output, task.index_place, None, digest, options)
                return result
        task.abandon()  # what an earlier attempt left
        index = WrittenIndex() if task.index_place is not None else None
        policy = retry_policy(on_reconnect=reconnected)
        with (
            StagedFile(task.target, options, hashing=True) as staged,
            open_source(task.input, options, policy) as source,
        ):
            from ..stream.stages import source_samples

            skips = SkipLog()
            counted = _Counter(source_samples(source, skips=skips), progress)
            encoder = SampleEncoder()
            written = 0
            for outputs, row in mapper.map_shard(iter(counted), task.input):
                key = counted.key
                for sample in outputs:
                    try:
                        raw = encoder.encode(sample)
                    except SampleError as exc:  # what the mapper made: another try repeats it
                        raise ShardFailure(task.input, "", None, str(exc), final=True) from None
                    if raw is not None:
                        staged.write(raw)
                        if index is not None:
                            index.add(raw, key_of(sample))
                        written += 1
                if row is not None:
                    result.rows.append(row)
            key = None
            staged.write(END_OF_ARCHIVE)
            result.rejects = mapper.take_rejects()
            result.samples_in = counted.count
            if skips.total:
                result.skipped_members = skips.summary()
            size, sha256 = staged.finish()
            info = ShardInfo(task.output, written, size, sha256)
            source.close()  # a pipe: input's exit status counts before the output is published
            digest = None
            if index is not None:  # before the output: an output in place has its index
                data = index.finish()
                publish(task.index_target, data, options)  # type: ignore[arg-type]
                digest, result.index_bytes = index_digest(data), len(data)
            made_by = task.made_by
            at = pending_name(record_path(task.output)) if task.staged else None
            result.record_bytes = write_record(task.output, task.input, info, result.rows,
                                               result.rejects, made_by, None, options, at,
                                               index=digest)  # fmt: skip
            staged.publish()
            published = None if task.staged else staged.info()
            if published is not None and published.etag is not None:
                # A re-run can then tell this object from another of the same size.
                write_record(
                    task.output, task.input, info, result.rows, result.rejects, made_by,
                    published.etag, options, index=digest,
                )  # fmt: skip
        result.info = info
    except ShardFailure as failure:  # the mapper names the sample that failed
        failure.output, failure.attempts = task.output, task.attempt
        result.failure = failure
    except (InputError, SourceError) as exc:
        result.failure = ShardFailure.of(exc, task.input, task.output, None, task.attempt)
        # A local file reads the same way every time (and a missing one stays missing); a
        # download or a command may not.
        repeats = isinstance(exc, InputError) or exc.reason == SourceError.MISSING
        result.failure.final = repeats and location(task.input).is_file
    except Exception as exc:
        result.failure = ShardFailure.of(exc, task.input, task.output, key, task.attempt)
    finally:
        result.seconds = time.monotonic() - started
    return result


class _Counter:
    """Counts the samples drawn from a stream, remembers the last key, tells ``progress``."""

    def __init__(
        self, samples: Iterable[Sample], progress: Callable[[int], object] | None = None
    ) -> None:
        self.samples = samples
        self.count = 0
        self.key: str | None = None
        self.progress = progress

    def __iter__(self) -> Iterator[Sample]:
        told = time.monotonic()
        for sample in self.samples:
            self.count += 1
            self.key = sample.key
            if self.progress is not None and time.monotonic() - told >= PROGRESS_EVERY:
                self.progress(self.count)
                told = time.monotonic()
            yield sample


def _hostname() -> str:
    import socket

    return socket.gethostname()
