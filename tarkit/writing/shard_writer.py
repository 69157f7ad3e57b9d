"""ShardWriter: the one place that cuts a stream of samples into shard files.

Guarantees, for ``tarsplit``, ``tarkit shard`` and library users alike:

- A shard never holds more than ``maxcount`` samples, and its file never exceeds
  ``maxsize`` bytes on disk, headers, padding and the 1024-byte end-of-archive marker
  included, unless one sample alone is larger: then that sample sits alone in its shard.
  For a compressed pattern the writer adds a sample only if the shard surely stays
  within ``maxsize``: the bytes on disk when the compressor was last measured, plus the
  compressor's worst case for the tar bytes written since
  (:func:`~tarkit.format.compression.compressed_bound`). gzip and zstd are measured (flushed)
  whenever that sum would not fit, so their shards fill up to ``maxsize`` on disk; bzip2
  and xz cannot be flushed mid-stream, so their shards hold the tar bytes that fit at the
  worst case, and come out smaller by the compression ratio. A finished shard is checked
  on disk: one over ``maxsize`` with more than one sample raises :class:`OutputError`
  (a bug) and is not published.
- A shard file is created only once its first sample arrives: no empty shard is written.
- Each shard is written under a temporary name in its directory (``.NAME.XXXX.tmp``) and
  renamed when complete; a remote shard (``s3://…``, through fsspec) is staged in a local
  temporary file (:func:`temp_place`) and uploaded when complete. An interrupted run never
  leaves a finished-looking partial shard; a SIGKILL can leave the temporary file, which
  ``resume=True`` removes.
- Samples read by the reader are copied byte for byte; dicts are encoded by field
  extension with deterministic headers (:mod:`tarkit.format.encoding`). The same samples and
  limits always give byte-identical shards.

>>> import os, tempfile
>>> directory = tempfile.mkdtemp()
>>> with ShardWriter(os.path.join(directory, "s-%03d.tar"), maxcount=2) as writer:
...     for i in range(5):
...         writer.write({"__key__": f"k{i}", "txt": f"sample {i}"})
>>> [(os.path.basename(s.url), s.samples) for s in writer.shards]
[('s-000.tar', 2), ('s-001.tar', 2), ('s-002.tar', 1)]
"""

from __future__ import annotations

import hashlib
import io
import os
import shlex
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

from ..errors import OutputError, SampleError, SourceError, UsageError
from ..format.compression import compression_for, measure, open_compressor, size_budget
from ..format.manifest import Manifest, ShardInfo, relative_url
from ..format.samples import Sample, same_key_error
from ..format.tar import END_OF_ARCHIVE, default_mtime
from ..storage.sources import _umask, describe_exit

DEFAULT_PATTERN = "shard-%06d.tar"
DEFAULT_MAXCOUNT = 100_000
DEFAULT_MAXSIZE = 1 << 30  # 1G
_BUFFER = 1 << 20


def shard_name(pattern: str, number: int) -> str:
    """The name of shard ``number``: ``pattern`` takes ``%06d`` or ``{shard:06d}``.

    >>> shard_name("shard-%06d.tar", 3)
    'shard-000003.tar'
    >>> shard_name("s3://b/train-{shard:04d}.tar.gz", 12)
    's3://b/train-0012.tar.gz'
    """
    if "{shard" in pattern:
        return pattern.format(shard=number)
    return pattern % number


def check_pattern(pattern: str) -> None:
    """Raise :class:`UsageError` unless ``pattern`` names a different file per shard.

    >>> check_pattern("out.tar")
    Traceback (most recent call last):
    ...
    tarkit.errors.UsageError: shard pattern 'out.tar' has no shard number: use one %06d or {shard:06d}, as in shard-%06d.tar
    """
    first: str | None
    second: str | None
    try:
        first, second = shard_name(pattern, 0), shard_name(pattern, 1)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        first = second = None
    if first is None or first == second:
        what = "is malformed" if "%" in pattern or "{" in pattern else "has no shard number"
        raise UsageError(
            f"shard pattern {pattern!r} {what}: use one %06d or {{shard:06d}}, as in shard-%06d.tar"
        )
    if first.endswith(("/", os.sep)):
        raise UsageError(f"shard pattern {pattern!r} names a directory, not a file")


def is_remote(path: str) -> bool:
    """Whether ``path`` is a URL written through fsspec rather than a local path.

    >>> is_remote("s3://bucket/x.tar"), is_remote("out/x.tar"), is_remote("file:x.tar")
    (True, False, False)
    """
    return "://" in path and not path.startswith("file:")


def local_path(path: str) -> str:
    """A local path without its optional ``file:`` prefix (``file://`` too)."""
    if path.startswith("file://"):
        return path[7:]
    if path.startswith("file:"):
        return path[5:]
    return path


def _filesystem(url: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    try:
        import fsspec.core
    except ImportError:
        raise OutputError(
            f"{url}: writing this kind of URL needs fsspec (pip install 'tarkit[s3]')"
        ) from None
    try:
        return fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    except ImportError as exc:
        raise OutputError(f"{url}: {exc} (pip install 'tarkit[s3]')") from None
    except Exception as exc:  # fsspec back ends raise many kinds
        raise OutputError(f"{url}: cannot open: {exc}") from None


class _HashingFile(io.RawIOBase):
    """A raw file that counts every byte written to it and, if ``hashing``, hashes them."""

    def __init__(self, fd: int, hashing: bool = True) -> None:
        self.file = open(fd, "wb", buffering=0)  # noqa: SIM115
        self.sha256 = hashlib.sha256() if hashing else None
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[no-untyped-def, override]
        if self.sha256 is not None:
            self.sha256.update(data)
        written = self.file.write(data)
        while written < len(data):  # a raw write may be short
            written += self.file.write(memoryview(data)[written:])
        self.size += len(data)
        return len(data)


def temp_place(path: str) -> tuple[str, str]:
    """(directory, name prefix) of the temporary files of the shard ``path``.

    A local shard's is hidden beside it (``.NAME.``); a remote shard is staged in the
    temporary directory (``$TMPDIR``, else ``/tmp``) under a name that says whose it is:
    ``tarkit-upload-`` and 12 hex digits of the URL's sha256, then the shard's name.

    >>> temp_place("out/s-000003.tar")[1]
    '.s-000003.tar.'
    >>> temp_place("s3://bucket/data/s-000003.tar")[1]
    'tarkit-upload-02ded27e47c4-s-000003.tar.'
    """
    base = os.path.basename(path.rstrip("/"))
    if is_remote(path):
        digest = hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:12]
        return tempfile.gettempdir(), f"tarkit-upload-{digest}-{base}."
    return os.path.dirname(os.path.abspath(local_path(path))), f".{base}."


class _ShardFile:
    """One shard being written: a temporary file, renamed or uploaded by :meth:`commit`."""

    def __init__(
        self, path: str, storage_options: Mapping[str, Any] | None, checksum: bool = True
    ) -> None:
        self.path = path
        self.remote = is_remote(path)
        self.storage_options = storage_options
        directory, prefix = temp_place(path)
        if not self.remote:
            try:
                os.makedirs(directory, exist_ok=True)
            except OSError as exc:
                raise OutputError(f"{path}: cannot create its directory: {exc.strerror}") from None
        try:
            fd, self.temp_path = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=directory)
        except OSError as exc:
            raise OutputError(f"{path}: cannot create: {exc.strerror}") from None
        self.raw = _HashingFile(fd, checksum)
        self.buffered = io.BufferedWriter(self.raw, buffer_size=_BUFFER)
        self.compression = compression_for(path)
        self.stream: BinaryIO = open_compressor(self.buffered, self.compression)  # type: ignore[arg-type]
        self.write = self.stream.write

    def measure(self) -> int | None:
        """The exact bytes of the file so far, after pushing everything written out of
        the compressor; None when the compression cannot be flushed mid-stream."""
        if not measure(self.stream, self.compression):
            return None
        self.buffered.flush()
        return self.raw.size

    def commit(self, limit: int | None = None) -> tuple[int, str | None]:
        """Finish the file and publish it under its name; return (bytes, sha256 or None).

        A file of more than ``limit`` bytes is removed and raises :class:`OutputError`.
        """
        try:
            if self.stream is not self.buffered:
                self.stream.close()
            self.buffered.flush()
            if limit is not None and self.raw.size > limit:
                self.abort()
                raise OutputError(
                    f"{self.path}: the shard came out {self.raw.size} bytes on disk, over "
                    f"the limit of {limit}: a bug in tarkit, please report it; the shard "
                    "was not written"
                )
            os.fsync(self.raw.file.fileno())
            self.raw.file.close()
            if not self.remote:
                os.chmod(self.temp_path, 0o666 & ~_umask())
                os.replace(self.temp_path, local_path(self.path))
        except OSError as exc:
            self.abort()
            raise OutputError(f"{self.path}: write failed: {exc.strerror}") from None
        if self.remote:
            try:
                fs, remote = _filesystem(self.path, self.storage_options)
                try:
                    fs.put_file(self.temp_path, remote)
                except Exception as exc:  # fsspec back ends raise many kinds
                    raise OutputError(f"{self.path}: upload failed: {exc}") from None
            finally:
                self.abort()
        sha256 = self.raw.sha256
        return self.raw.size, None if sha256 is None else sha256.hexdigest()

    def abort(self) -> None:
        """Remove the temporary file; nothing appears under the shard's name."""
        try:
            self.raw.file.close()
        except OSError:
            pass
        try:
            os.unlink(self.temp_path)
        except OSError:
            pass


def run_post(post: str | Callable[[str], object], path: str) -> None:
    """Run the post command for a finished shard; raise :class:`OutputError` if it fails.

    A string is a bash command with every ``{}`` replaced by the shell-quoted path (the
    path is also in ``TARKIT_SHARD``); a callable is called with the path.
    """
    if callable(post):
        post(path)
        return
    command = post.replace("{}", shlex.quote(path))
    env = dict(os.environ, TARKIT_SHARD=path)
    try:
        status = subprocess.run(["bash", "-c", command], env=env).returncode
    except OSError as exc:
        raise OutputError(f"{path}: cannot run the post command: {exc.strerror}") from None
    if status != 0:
        raise OutputError(f"{path}: post command {describe_exit(status)}: {command}")


@dataclass(frozen=True)
class Discarded:
    """The unfinished shard an aborted :class:`ShardWriter` removed: its name, the whole
    samples it held (in no shard now) and the key of its first one, when known."""

    path: str
    samples: int
    first_key: str | None

    def describe(self, samples_before: int) -> str:
        """One line for the user: what was removed and where to start again.

        >>> Discarded("out/s-2.tar", 3, "k0008").describe(8)
        'out/s-2.tar: unfinished shard removed with its 3 complete samples (from k0008 on), which are in no shard; the complete shards hold the first 8 samples'
        """
        noun, verb = ("sample", "is") if self.samples == 1 else ("samples", "are")
        first = f" (from {self.first_key} on)" if self.first_key is not None else ""
        before = "sample" if samples_before == 1 else "samples"
        return (
            f"{self.path}: unfinished shard removed with its {self.samples} complete {noun}"
            f"{first}, which {verb} in no shard; the complete shards hold the first "
            f"{samples_before} {before}"
        )


class ShardWriter:
    """Write samples into numbered shards, within count and size limits.

    ``pattern`` names the shards (``%06d`` or ``{shard:06d}``; a ``.gz``/``.zst``/…
    ending compresses them; ``s3://…`` and other fsspec URLs are uploaded when complete,
    with ``storage_options`` passed to fsspec). Shards are numbered from ``start``.
    ``maxcount`` and ``maxsize`` limit each shard (see the module docstring);
    ``maxshards`` limits how many shards this writer may write: a sample that would need
    one more raises :class:`OutputError`. ``post`` runs after each shard is complete (a
    bash command with ``{}`` for the path, or a callable); ``on_shard`` is called with
    each finished shard's :class:`ShardInfo` (``url`` is its path). ``manifest`` is a
    path or URL where :meth:`close` writes the manifest of all shards.
    ``checksums=False`` leaves out the sha256 of each shard (``ShardInfo.sha256`` is
    None; a manifest then has none): hashing costs about a sixth of copying small
    samples, for output nobody checks.

    ``resume=True`` keeps the complete shards already present from ``start`` on (an
    interrupted run's) and continues after them: ``samples_done`` says how many samples
    they hold, so the caller skips that many before writing. Stale temporary files are
    removed.

    As a context manager, leaving with an exception aborts: complete shards stay, the
    unfinished one's temporary file is removed (:attr:`discarded` describes it) and no
    manifest is written.
    """

    def __init__(
        self,
        pattern: str = DEFAULT_PATTERN,
        *,
        maxcount: int = DEFAULT_MAXCOUNT,
        maxsize: int | str = DEFAULT_MAXSIZE,
        maxshards: int | None = None,
        start: int = 0,
        post: str | Callable[[str], object] | None = None,
        manifest: str | None = None,
        on_shard: Callable[[ShardInfo], object] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        resume: bool = False,
        mtime: int | None = None,
        checksums: bool = True,
    ) -> None:
        from ..sizes import parse_size

        check_pattern(pattern)
        if maxcount < 1:
            raise UsageError(f"maxcount must be at least 1 (got {maxcount})")
        if maxshards is not None and maxshards < 1:
            raise UsageError(f"maxshards must be at least 1 (got {maxshards})")
        if start < 0:
            raise UsageError(f"the first shard number must not be negative (got {start})")
        self.pattern = pattern
        self.maxcount = maxcount
        self.maxsize = parse_size(maxsize, "maxsize")
        self.maxshards = maxshards
        self.start = start
        self.post = post
        self.manifest = manifest
        self.on_shard = on_shard
        self.storage_options = storage_options
        self.checksums = checksums
        self.mtime = default_mtime() if mtime is None else mtime
        self.shards: list[ShardInfo] = []
        self.samples_done = 0
        self._file: _ShardFile | None = None
        self._count = 0
        # Tar bytes written since the compressor was last measured, and how many may
        # follow them (see the module docstring).
        self._unmeasured = 0
        self._budget = 0
        self._first_key: str | None = None
        self._previous: Sample | Mapping[str, Any] | None = None
        self._closed = False
        self.discarded: Discarded | None = None
        if resume:
            self.shards = completed_shards(pattern, start, storage_options)
            self.samples_done = sum(s.samples for s in self.shards)
            remove_stale_temp(shard_name(pattern, start + len(self.shards)))

    @property
    def samples(self) -> int:
        """Samples written so far (those of resumed shards included)."""
        return self.samples_done + self._count

    def write(self, sample: Sample | Mapping[str, Any]) -> None:
        """Write one sample: a :class:`Sample` byte for byte, or a dict with ``__key__``.

        Raises :class:`~tarkit.errors.SampleError` for a dict that cannot be encoded and
        :class:`OutputError` when a shard cannot be written.
        """
        if isinstance(sample, Sample) and not sample.fields:  # (fields: members unmade)
            return
        # Adjacent samples with one key merge in every reader, across shards too when
        # the shards are read in order.
        key = _key_of(sample)
        previous = self._previous
        if previous is not None and key == _key_of(previous):
            if isinstance(previous, Sample) and isinstance(sample, Sample):
                raise same_key_error(previous, sample)
            raise SampleError(
                f"sample {key!r} follows a sample with the same key, and readers would "
                "merge the two: give every sample a key of its own",
                source="dataset",
            )
        if isinstance(sample, Sample):
            raw = sample.raw
        else:
            from ..format.encoding import encode_sample

            raw = encode_sample(sample, mtime=self.mtime)
        self.write_raw(raw)
        self._previous = sample
        if self._count == 1:
            self._first_key = key

    def write_all(self, samples: Iterable[Sample | Mapping[str, Any]]) -> int:
        """Write every sample of ``samples``; return how many."""
        count = 0
        write = self.write
        for sample in samples:
            write(sample)
            count += 1
        return count

    def write_raw(self, raw: bytes) -> None:
        """Write one sample given as the complete raw blocks of its members."""
        if self._closed:
            raise UsageError("the shard writer is closed")
        size = len(raw)
        if self._file is not None and (
            self._count >= self.maxcount
            or (
                self._unmeasured + size + 1024 > self._budget
                and not self._room_after_measuring(size)
            )
        ):
            self._finish()
        if self._file is None:
            self._open()
        try:
            self._file.write(raw)  # type: ignore[union-attr]
        except OSError as exc:
            raise OutputError(f"{self._file.path}: write failed: {exc.strerror}") from None  # type: ignore[union-attr]
        self._count += 1
        self._unmeasured += size

    def _room_after_measuring(self, size: int) -> bool:
        """Measure the compressed shard on disk; whether ``size`` more tar bytes then fit."""
        assert self._file is not None
        if self._unmeasured == 0:
            return False
        try:
            measured = self._file.measure()
        except OSError as exc:
            raise OutputError(f"{self._file.path}: write failed: {exc.strerror}") from None
        if measured is None:
            return False
        self._unmeasured = 0
        self._budget = size_budget(self._file.compression, self.maxsize - measured)
        return size + 1024 <= self._budget

    def _open(self) -> None:
        if self.maxshards is not None and len(self.shards) >= self.maxshards:
            n = self.maxshards
            shards = "shard" if n == 1 else "shards"
            raise OutputError(
                f"the samples need more than {n} {shards} (maxshards {n}): the first {n} "
                f"{shards} are complete, the rest of the samples was not written"
            )
        self._file = _ShardFile(
            shard_name(self.pattern, self.start + len(self.shards)),
            self.storage_options,
            self.checksums,
        )
        self._count = 0
        self._unmeasured = 0
        self._budget = size_budget(self._file.compression, self.maxsize)
        self._first_key = None

    def _finish(self) -> None:
        shard = self._file
        assert shard is not None
        try:
            shard.write(END_OF_ARCHIVE)
        except OSError as exc:
            shard.abort()
            self._file = None
            raise OutputError(f"{shard.path}: write failed: {exc.strerror}") from None
        self._file = None
        # One sample alone may be larger than maxsize; more than one over it is a bug.
        size, sha256 = shard.commit(self.maxsize if self._count > 1 else None)
        info = ShardInfo(url=shard.path, samples=self._count, bytes=size, sha256=sha256)
        self.samples_done += self._count
        self._count = 0
        self._unmeasured = 0
        self.shards.append(info)
        if self.on_shard is not None:
            self.on_shard(info)
        if self.post is not None:
            run_post(self.post, shard.path)

    def close(self) -> None:
        """Finish the last shard (if it has samples) and write the manifest."""
        if self._closed:
            return
        if self._file is not None:
            self._finish()
        self._closed = True
        if self.manifest is not None:
            save_manifest(self.manifest_of(), self.manifest, self.storage_options)

    def manifest_of(self) -> Manifest:
        """The manifest of the shards finished so far, URLs relative to ``manifest``."""
        where = self.manifest
        entries = [
            ShardInfo(relative_url(where, local_path(s.url) if not is_remote(s.url) else s.url),
                      s.samples, s.bytes, s.sha256)
            for s in self.shards
        ]  # fmt: skip
        return Manifest(entries, where)

    def abort(self) -> None:
        """Stop: remove the unfinished shard's temporary file; complete shards stay.

        :attr:`discarded` then says which shard that was and how many whole samples
        it held (None when no shard was open).
        """
        self._closed = True
        if self._file is not None:
            self._file.abort()
            self.discarded = Discarded(self._file.path, self._count, self._first_key)
            self._file = None

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def save_manifest(
    manifest: Manifest, location: str, storage_options: Mapping[str, Any] | None = None
) -> None:
    """Write ``manifest`` to a local path (atomically) or upload it to a URL."""
    publish(location, manifest.dumps().encode("utf-8"), storage_options)


def publish(location: str, data: bytes, storage_options: Mapping[str, Any] | None = None) -> None:
    """Write a small file whole: locally under a temporary name then renamed, or uploaded."""
    if is_remote(location):
        fs, remote = _filesystem(location, storage_options)
        try:
            fs.pipe_file(remote, data)
        except Exception as exc:  # fsspec back ends raise many kinds
            raise OutputError(f"{location}: upload failed: {exc}") from None
        return
    shard = _ShardFile(location, None)
    try:
        shard.write(data)
    except OSError as exc:
        shard.abort()
        raise OutputError(f"{location}: write failed: {exc.strerror}") from None
    shard.commit()


def completed_shards(
    pattern: str, start: int = 0, storage_options: Mapping[str, Any] | None = None
) -> list[ShardInfo]:
    """The complete shards present from number ``start`` on, up to the first missing one.

    Each is read to count its samples and hash its bytes; a shard that does not read
    cleanly raises :class:`~tarkit.errors.InputError` (shards appear only when complete,
    so that means something else wrote it).
    """
    from ..format.compression import open_decompressed
    from ..format.samples import group_samples
    from ..format.tar import read_members

    found: list[ShardInfo] = []
    fs = None
    if is_remote(pattern):
        fs, _ = _filesystem(pattern, storage_options)
    number = start
    while True:
        path = shard_name(pattern, number)
        if fs is not None:
            _, remote = _filesystem(path, storage_options)
            if not fs.exists(remote):
                break
            opened = fs.open(remote, "rb")
        else:
            try:
                opened = open(local_path(path), "rb")  # noqa: SIM115
            except FileNotFoundError:
                break
            except OSError as exc:
                raise SourceError(f"{path}: cannot open: {exc.strerror}") from None
        with opened:
            hashing = _HashingReader(opened)
            stream = open_decompressed(hashing, path)  # type: ignore[arg-type]
            count = sum(1 for _ in group_samples(read_members(stream, path), path, strict=True))
            while hashing.read(_BUFFER):
                pass
        found.append(ShardInfo(path, count, hashing.size, hashing.sha256.hexdigest()))
        number += 1
    return found


class _HashingReader(io.RawIOBase):
    """A readable stream that hashes and counts every byte read through it."""

    def __init__(self, stream: BinaryIO) -> None:
        self._read = stream.read
        self.sha256 = hashlib.sha256()
        self.size = 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        data = self._read(n if n is not None and n > 0 else _BUFFER)
        self.sha256.update(data)
        self.size += len(data)
        return data

    read1 = read

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def, override]
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


def remove_stale_temp(path: str) -> None:
    """Remove the temporary files an interrupted writer left for the shard ``path``: beside
    a local shard, or staged in the temporary directory for a remote one
    (:func:`temp_place`)."""
    directory, prefix = temp_place(path)
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix) and name.endswith(".tmp"):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass


def _key_of(sample: Sample | Mapping[str, Any]) -> Any:
    return sample.key if isinstance(sample, Sample) else sample.get("__key__")
