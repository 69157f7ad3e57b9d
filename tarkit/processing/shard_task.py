"""One shard task of :func:`tarkit.map_shards`: read an input shard, map it, publish the output.

A task runs in a worker process (a local pool process or a Ray worker), so everything
it takes and returns is picklable and it never raises for a failure of the shard: it
returns a :class:`ShardResult` whose ``failure`` says which sample failed and why.

Publishing is atomic and ordered so that a finished-looking output is always complete:

1. the output is written to a :class:`~tarkit.storage.StagedFile` (a temporary file
   beside it, or staged locally for an ``s3://`` output), which hashes it;
2. its record (:mod:`tarkit.processing.records`) is published;
3. the output is published (renamed into place, or uploaded: an object appears only
   whole);
4. for a remote output, the record is published again with the ETag the store gives
   the object, if it gives one.

With ``resume``, a task whose output exists and matches its record is not redone: its
record is returned.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError, SourceError, TarkitError
from ..format.manifest import ShardInfo
from ..format.samples import Sample, SkipLog
from ..format.tar import END_OF_ARCHIVE
from ..storage import StagedFile, location, remove_stale_temp
from ..writing.shard_writer import SampleEncoder
from .records import Row, completed_record, write_record

PROGRESS_EVERY = 0.5  # seconds between a running task's progress reports

Outputs = list[Any]


@dataclass(frozen=True)
class ShardTask:
    """What one task does: map ``input`` (shard number ``index``) into ``output``."""

    index: int
    input: str
    output: str
    resume: bool = True
    attempt: int = 1


@dataclass
class ShardFailure:
    """Why a shard failed: the sample (key, None before the first one) and the error.

    ``final`` marks a failure that another attempt would repeat (a local input file
    that is corrupt), so it is not retried.
    """

    input: str
    output: str
    key: str | None
    error: str
    traceback: str = ""
    attempts: int = 1
    final: bool = False

    def __str__(self) -> str:
        where = f", sample {self.key!r}" if self.key is not None else ""
        # An input error names its source already: say the input once.
        return f"{self.input}{where}: {self.error.removeprefix(f'{self.input}: ')}"


@dataclass
class ShardResult:
    """What a task reports back (picklable; rows are JSON values)."""

    index: int
    info: ShardInfo | None = None
    resumed: bool = False
    samples_in: int = 0
    rows: list[Row] = field(default_factory=list)
    rejects: list[str] = field(default_factory=list)
    skipped_members: str | None = None
    failure: ShardFailure | None = None
    seconds: float = 0.0
    worker: str = ""


class SampleFailed(Exception):
    """Mapping one sample failed: carries its key and the original exception."""

    def __init__(self, key: str | None, error: BaseException) -> None:
        super().__init__(key, error)
        self.key = key
        self.error = error


class SampleMapper:
    """Applies a per-sample function to a shard's samples (see :func:`tarkit.map_shards`).

    ``fn`` gets a dict: ``__key__``, ``__url__`` (the input shard) and the bytes of each
    field. It returns a sample, a list of samples, None, or ``(samples, metadata_row)``.
    """

    def __init__(self, fn: Callable[[dict[str, Any]], Any]) -> None:
        self.fn = fn

    def map_shard(
        self, samples: Iterator[Sample], source: str
    ) -> Iterator[tuple[Outputs, Row | None]]:
        fn = self.fn
        for sample in samples:
            item: dict[str, Any] = {"__key__": sample.key, "__url__": source}
            item.update(sample.data())
            try:
                outputs, row = split_result(fn(item))
                for output in outputs:
                    if not isinstance(output, (Mapping, Sample)):
                        raise TypeError(
                            f"the function returned a {type(output).__name__}, not a sample "
                            "dict (or a list of them, None, or (samples, metadata row))"
                        )
            except Exception as exc:
                raise SampleFailed(sample.key, exc) from exc
            yield outputs, row


def split_result(result: Any) -> tuple[Outputs, Row | None]:
    """Normalize what a map function returned into (output samples, metadata row).

    A tuple of two whose second item is a dict without ``__key__`` is
    ``(samples, metadata)``; a list is several samples; None is none.

    >>> split_result(None)
    ([], None)
    >>> split_result(({"__key__": "a", "txt": "x"}, {"n": 1}))
    ([{'__key__': 'a', 'txt': 'x'}], {'n': 1})
    >>> split_result([{"__key__": "a"}, {"__key__": "b"}])[0]
    [{'__key__': 'a'}, {'__key__': 'b'}]
    """
    row = None
    if (
        isinstance(result, tuple)
        and len(result) == 2
        and (result[1] is None or (isinstance(result[1], Mapping) and "__key__" not in result[1]))
    ):
        result, row = result
        if row is not None:
            row = dict(row)
    if result is None:
        return [], row
    if isinstance(result, (list, tuple)):
        return list(result), row
    return [result], row


def run_shard(
    mapper: Any, task: ShardTask, progress: Callable[[int], object] | None = None
) -> ShardResult:
    """Run one shard task; never raises for a failure of the shard (see the module doc).

    ``progress`` is called with the number of input samples read so far, at most every
    :data:`PROGRESS_EVERY` seconds while the shard runs.
    """
    started = time.monotonic()
    result = ShardResult(task.index, worker=f"{_hostname()}:{os.getpid()}")
    key: str | None = None
    try:
        if task.resume:
            record = completed_record(task.output, task.input)
            if record is not None:
                result.info, result.rows, result.rejects = record
                result.resumed = True
                return result
        remove_stale_temp(task.output)
        with StagedFile(task.output, hashing=True) as staged:
            from ..stream.stages import read_samples

            skips = SkipLog()
            counted = _Counter(read_samples([task.input], skips=skips), progress)
            encoder = SampleEncoder()
            written = 0
            for outputs, row in mapper.map_shard(iter(counted), task.input):
                key = counted.key
                for sample in outputs:
                    raw = encoder.encode(sample)
                    if raw is not None:
                        staged.write(raw)
                        written += 1
                if row is not None:
                    result.rows.append(row)
            key = None
            staged.write(END_OF_ARCHIVE)
            result.rejects = list(getattr(mapper, "take_rejects", lambda: [])())
            result.samples_in = counted.count
            if skips.total:
                result.skipped_members = skips.summary()
            size, sha256 = staged.finish()
            info = ShardInfo(task.output, written, size, sha256)
            write_record(task.output, task.input, info, result.rows, result.rejects)
            staged.publish()
            published = staged.info()
            if published is not None and published.etag is not None:
                # A re-run can then tell this object from another of the same size.
                write_record(
                    task.output, task.input, info, result.rows, result.rejects, published.etag
                )
        result.info = info
    except SampleFailed as exc:
        result.failure = _failure(task, exc.key, exc.error)
    except (InputError, SourceError) as exc:
        result.failure = _failure(task, None, exc)  # the message says where
        # A local file reads the same way every time; a download or a command may not.
        local = location(task.input).is_file
        result.failure.final = isinstance(exc, InputError) and local
    except Exception as exc:
        result.failure = _failure(task, key, exc)
    finally:
        result.seconds = time.monotonic() - started
    return result


def _failure(task: ShardTask, key: str | None, exc: BaseException) -> ShardFailure:
    if isinstance(exc, TarkitError):
        error = str(exc)
        trace = ""
    else:
        error = f"{type(exc).__name__}: {exc}"
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return ShardFailure(task.input, task.output, key, error, trace, task.attempt)


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
