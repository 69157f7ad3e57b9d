"""One shard task of :func:`tarkit.map_shards`: read an input shard, map it, publish the output.

A task runs in a worker process (a local pool process or a Ray worker), so everything
it takes and returns is picklable and it never raises for a failure of the shard: it
returns a :class:`ShardResult` whose ``failure`` says which sample failed and why.

Publishing is atomic and ordered so that a finished-looking output is always complete:

1. the output is written under a hidden staging directory beside it
   (``.NAME.map-XXXX.tmp/``, or a local temporary directory for an ``s3://`` output)
   by :class:`~tarkit.writing.shard_writer.ShardWriter`, which hashes it;
2. the shard's record (``.NAME.map.json`` beside the output: its manifest entry, the
   input it came from, its metadata rows) is written atomically;
3. the output is renamed into place (or uploaded: an object appears only whole);
4. for a remote output, the record is written again with the ETag the store gives the
   object, if it gives one.

With ``resume``, a task whose output exists and matches its record (sha256 of the file
for a local output; for a remote one its size, and its ETag when recorded) is not
redone: its record is returned.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError, OutputError, SampleError, SourceError, TarkitError
from ..format.manifest import ShardInfo
from ..format.samples import Sample, SkipLog
from ..writing.shard_writer import ShardWriter, is_remote, local_path, publish

RECORD_FORMAT = "tarkit-map-shard"
RECORD_VERSION = 1
_HUGE = 1 << 62
_CHUNK = 1 << 20
PROGRESS_EVERY = 0.5  # seconds between a running task's progress reports

Row = dict[str, Any]
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
        remove_stale_staging(task.output)
        with _Staging(task.output) as staging:
            from ..stream.stages import read_samples

            skips = SkipLog()
            counted = _Counter(read_samples([task.input], skips=skips), progress)
            writer = ShardWriter(staging.pattern, maxcount=_HUGE, maxsize=_HUGE)
            with writer:
                for outputs, row in mapper.map_shard(iter(counted), task.input):
                    key = counted.key
                    for sample in outputs:
                        writer.write(sample)
                    if row is not None:
                        result.rows.append(row)
                key = None
            result.rejects = list(getattr(mapper, "take_rejects", lambda: [])())
            result.samples_in = counted.count
            if skips.total:
                result.skipped_members = skips.summary()
            info = staging.finish(writer.shards)
            _write_record(task, info, result.rows, result.rejects)
            staging.publish()
            etag = staging.etag()
            if etag is not None:  # a re-run can then tell this object from another
                _write_record(task, info, result.rows, result.rejects, etag)
        result.info = ShardInfo(task.output, info.samples, info.bytes, info.sha256)
    except SampleFailed as exc:
        result.failure = _failure(task, exc.key, exc.error)
    except (InputError, SourceError) as exc:
        result.failure = _failure(task, None, exc)  # the message says where
        # A local file reads the same way every time; a download or a command may not.
        local = not is_remote(task.input) and not task.input.startswith("pipe:")
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


# ---------------------------------------------------------------------------------------
# Staging and publishing


def record_path(output: str) -> str:
    """Where the record of ``output`` lives: ``.NAME.map.json`` beside it.

    >>> record_path("out/x-000.tar")
    'out/.x-000.tar.map.json'
    >>> record_path("s3://b/d/x.tar")
    's3://b/d/.x.tar.map.json'
    """
    head, _, name = output.rpartition("/")
    return f"{head}/.{name}.map.json" if head else f".{name}.map.json"


def _staging_prefix(output: str) -> str:
    return f".{os.path.basename(local_path(output))}.map-"


def remove_stale_staging(output: str) -> None:
    """Remove staging directories a killed task left beside the local ``output``."""
    if is_remote(output):
        return
    directory = os.path.dirname(os.path.abspath(local_path(output)))
    prefix = _staging_prefix(output)
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix) and name.endswith(".tmp"):
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


class _Staging:
    """A private directory where the output is written before it is published."""

    def __init__(self, output: str) -> None:
        self.output = output
        self.remote = is_remote(output)
        name = os.path.basename(output.rstrip("/"))
        if self.remote:
            parent = None
        else:
            parent = os.path.dirname(os.path.abspath(local_path(output)))
            try:
                os.makedirs(parent, exist_ok=True)
            except OSError as exc:
                raise OutputError(
                    f"{output}: cannot create its directory: {exc.strerror}"
                ) from None
        try:
            self.directory = tempfile.mkdtemp(
                prefix=_staging_prefix(output), suffix=".tmp", dir=parent
            )
        except OSError as exc:
            raise OutputError(f"{output}: cannot create: {exc.strerror}") from None
        # ShardWriter numbers its shards: escape braces so only {shard} is a field.
        escaped = os.path.join(self.directory, name).replace("{", "{{").replace("}", "}}")
        head, _, tail = escaped.rpartition(os.sep)
        self.pattern = f"{head}{os.sep}{{shard}}-{tail}"
        self.staged = os.path.join(self.directory, "0-" + name)

    def finish(self, shards: list[ShardInfo]) -> ShardInfo:
        """The staged file's entry; an output without samples is an empty archive."""
        if shards:
            return shards[0]
        from ..format.compression import compression_for, open_compressor
        from ..format.tar import END_OF_ARCHIVE

        with open(self.staged, "wb") as file:
            stream = open_compressor(file, compression_for(self.output))  # type: ignore[arg-type]
            stream.write(END_OF_ARCHIVE)
            if stream is not file:
                stream.close()
        size, sha256 = file_digest(self.staged)
        return ShardInfo(self.staged, 0, size, sha256)

    def publish(self) -> None:
        """Rename the staged output into place, or upload it whole."""
        if self.remote:
            fs, path = filesystem(self.output)
            try:
                fs.put_file(self.staged, path)
            except Exception as exc:  # fsspec back ends raise many kinds
                raise OutputError(f"{self.output}: upload failed: {exc}") from None
            return
        try:
            os.replace(self.staged, local_path(self.output))
        except OSError as exc:
            raise OutputError(f"{self.output}: cannot rename into place: {exc.strerror}") from None

    def etag(self) -> str | None:
        """The ETag the store gives the uploaded output (None: local, or no ETag)."""
        if not self.remote:
            return None
        fs, path = filesystem(self.output)
        try:
            return _etag(fs.info(path))
        except Exception:  # fsspec back ends raise many kinds: resume checks the size
            return None

    def __enter__(self) -> _Staging:
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def file_digest(path: str) -> tuple[int, str]:
    """(size, sha256 hex) of a local file."""
    sha256 = hashlib.sha256()
    size = 0
    with open(path, "rb") as stream:
        while chunk := stream.read(_CHUNK):
            sha256.update(chunk)
            size += len(chunk)
    return size, sha256.hexdigest()


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec file system and path of a remote URL; OutputError if unavailable."""
    try:
        import fsspec.core
    except ImportError:
        raise OutputError(
            f"{url}: this kind of URL needs fsspec (pip install 'tarkit[s3]')"
        ) from None
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as exc:
        raise OutputError(f"{url}: {exc} (pip install 'tarkit[s3]')") from None


def _write_record(
    task: ShardTask, info: ShardInfo, rows: list[Row], rejects: list[str], etag: str | None = None
) -> None:
    entry = ShardInfo(os.path.basename(task.output), info.samples, info.bytes, info.sha256)
    record: dict[str, Any] = {
        "format": RECORD_FORMAT,
        "version": RECORD_VERSION,
        "input": task.input,
        "shard": entry.to_json(),
        "metadata": rows,
        "rejects": rejects,
    }
    if etag is not None:
        record["etag"] = etag
    try:
        text = json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n"
    except (TypeError, ValueError) as exc:
        raise SampleError(f"a metadata row is not JSON: {exc}", source=task.input) from None
    write_text(record_path(task.output), text)


def write_text(location: str, text: str) -> None:
    """Write a small text file whole (local: temporary name + rename; remote: one upload)."""
    publish(location, text.encode("utf-8"))


def _read_bytes(location: str) -> bytes | None:
    if is_remote(location):
        fs, path = filesystem(location)
        try:
            return fs.cat_file(path)  # type: ignore[no-any-return]
        except FileNotFoundError:
            return None
    try:
        with open(local_path(location), "rb") as stream:
            return stream.read()
    except FileNotFoundError:
        return None


def _etag(info: Mapping[str, Any]) -> str | None:
    etag = info.get("ETag") or info.get("etag")
    return str(etag) if etag else None


def completed_record(
    output: str, source: str | None = None
) -> tuple[ShardInfo, list[Row], list[str]] | None:
    """The entry, metadata rows and rejects of ``output`` if it is complete, else None.

    Complete means: its record exists, names ``source`` as its input (when given), and
    the file matches it: the sha256 of a local file; the size of a remote object, and its
    ETag when the record has one (the store's ETag after the upload). A record that does
    not parse counts as absent.
    """
    text = _read_bytes(record_path(output))
    if text is None:
        return None
    try:
        record = json.loads(text)
        shard = record["shard"]
        if record.get("format") != RECORD_FORMAT or record.get("version") != RECORD_VERSION:
            return None
        if source is not None and record.get("input") != source:
            return None
        info = ShardInfo(output, int(shard["samples"]), int(shard["bytes"]), shard.get("sha256"))
        rows = list(record.get("metadata") or [])
        rejects = [str(r) for r in record.get("rejects") or []]
        etag = record.get("etag")
    except (ValueError, KeyError, TypeError):
        return None
    if is_remote(output):
        fs, path = filesystem(output)
        try:
            found = fs.info(path)
        except FileNotFoundError:
            return None
        if found.get("size") != info.bytes:
            return None
        if etag is not None and _etag(found) != etag:
            return None  # another object of the same size
        return info, rows, rejects
    try:
        size, sha256 = file_digest(local_path(output))
    except FileNotFoundError:
        return None
    if size != info.bytes or sha256 != info.sha256:
        return None
    return info, rows, rejects
