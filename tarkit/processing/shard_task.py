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
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ..errors import InputError, OutputError, SampleError, ShardFailure, SourceError
from ..format.manifest import ShardInfo
from ..format.samples import Sample, SkipLog
from ..storage.locations import PIPE, location
from ..writing.shard_writer import ShardWriter, is_remote, local_path, publish
from .engines.base import Row, ShardMapper, ShardResult, ShardTask

RECORD_FORMAT = "tarkit-map-shard"
RECORD_VERSION = 1
_HUGE = 1 << 62
_CHUNK = 1 << 20
PROGRESS_EVERY = 0.5  # seconds between a running task's progress reports


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
            result.rejects = mapper.take_rejects()
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
    except ShardFailure as failure:  # the mapper names the sample that failed
        failure.output, failure.attempts = task.output, task.attempt
        result.failure = failure
    except (InputError, SourceError) as exc:
        result.failure = ShardFailure.of(exc, task.input, task.output, None, task.attempt)
        # A local file reads the same way every time; a download or a command may not.
        where = location(task.input)
        result.failure.final = (
            isinstance(exc, InputError) and not where.remote and where.kind != PIPE
        )
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
