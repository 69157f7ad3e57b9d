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
- Each shard is a :class:`~tarkit.storage.StagedFile`: written under a temporary name and
  published (renamed, or uploaded to an fsspec URL such as ``s3://…``) when complete. An
  interrupted run never leaves a finished-looking partial shard; a SIGKILL can leave the
  temporary file, which ``resume=True`` removes.
- Samples are turned into bytes by :class:`SampleEncoder`. The same samples and limits
  always give byte-identical shards.

>>> import os, tempfile
>>> directory = tempfile.mkdtemp()
>>> with ShardWriter(os.path.join(directory, "s-%03d.tar"), maxcount=2) as writer:
...     for i in range(5):
...         writer.write({"__key__": f"k{i}", "txt": f"sample {i}"})
>>> [(os.path.basename(s.url), s.samples) for s in writer.shards]
[('s-000.tar', 2), ('s-001.tar', 2), ('s-002.tar', 1)]
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import OutputError, SampleError, SourceError, UsageError
from ..format.compression import size_budget
from ..format.manifest import Manifest, ShardInfo
from ..format.samples import Sample, same_key_error
from ..format.tar import END_OF_ARCHIVE, default_mtime
from ..storage import (
    StagedFile,
    StorageOptions,
    describe_exit,
    relative_url,
    remove_stale_temp,
    save_manifest,
)

DEFAULT_PATTERN = "shard-%06d.tar"
DEFAULT_MAXCOUNT = 100_000
DEFAULT_MAXSIZE = 1 << 30  # 1G


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


class SampleEncoder:
    """Turns samples into the raw tar bytes of their members, one sample after another.

    A :class:`Sample` read by the reader is copied byte for byte; a dict is encoded by
    field extension with deterministic headers (:func:`~tarkit.format.encoding.encode_sample`).
    A sample with the key of the one before raises :class:`~tarkit.errors.SampleError`:
    every reader would merge the two, across shards too when they are read in order.

    >>> encoder = SampleEncoder(mtime=0)
    >>> len(encoder.encode({"__key__": "a", "txt": "x"}))
    1024
    >>> encoder.encode({"__key__": "a", "txt": "y"})
    Traceback (most recent call last):
    ...
    tarkit.errors.SampleError: dataset: sample 'a' follows a sample with the same key, and readers would merge the two: give every sample a key of its own
    """

    def __init__(self, mtime: int | None = None) -> None:
        self.mtime = default_mtime() if mtime is None else mtime
        self._previous: Sample | Mapping[str, Any] | None = None

    def encode(self, sample: Sample | Mapping[str, Any]) -> bytes | None:
        """The raw bytes of ``sample``'s members; None for a sample without members."""
        if isinstance(sample, Sample) and not sample.members:
            return None
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
            members = sample.members
            raw = members[0].raw if len(members) == 1 else b"".join([m.raw for m in members])
        else:
            from ..format.encoding import encode_sample

            raw = encode_sample(sample, mtime=self.mtime)
        self._previous = sample
        return raw


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
        self._file: StagedFile | None = None
        self._count = 0
        # Tar bytes written since the compressor was last measured, and how many may
        # follow them (see the module docstring).
        self._unmeasured = 0
        self._budget = 0
        self._first_key: str | None = None
        self._encoder = SampleEncoder(self.mtime)
        self._closed = False
        self.discarded: Discarded | None = None
        if resume:
            self.shards = completed_shards(pattern, start, storage_options)
            self.samples_done = sum(s.samples for s in self.shards)
            remove_stale_temp(shard_name(pattern, start + len(self.shards)), storage_options)

    @property
    def samples(self) -> int:
        """Samples written so far (those of resumed shards included)."""
        return self.samples_done + self._count

    def write(self, sample: Sample | Mapping[str, Any]) -> None:
        """Write one sample: a :class:`Sample` byte for byte, or a dict with ``__key__``.

        Raises :class:`~tarkit.errors.SampleError` for a dict that cannot be encoded or a
        sample with the key of the one before, and :class:`OutputError` when a shard
        cannot be written.
        """
        raw = self._encoder.encode(sample)
        if raw is None:
            return
        self.write_raw(raw)
        if self._count == 1:
            self._first_key = _key_of(sample)

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
            raise OutputError(f"{self._file.spec}: write failed: {exc.strerror}") from None  # type: ignore[union-attr]
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
            raise OutputError(f"{self._file.spec}: write failed: {exc.strerror}") from None
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
        self._file = StagedFile(
            shard_name(self.pattern, self.start + len(self.shards)),
            self.storage_options,
            hashing=self.checksums,
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
            raise OutputError(f"{shard.spec}: write failed: {exc.strerror}") from None
        self._file = None
        # One sample alone may be larger than maxsize; more than one over it is a bug.
        size, sha256 = shard.commit(self.maxsize if self._count > 1 else None)
        info = ShardInfo(url=shard.spec, samples=self._count, bytes=size, sha256=sha256)
        self.samples_done += self._count
        self._count = 0
        self._unmeasured = 0
        self.shards.append(info)
        if self.on_shard is not None:
            self.on_shard(info)
        if self.post is not None:
            run_post(self.post, shard.spec)

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
            ShardInfo(relative_url(where, s.url), s.samples, s.bytes, s.sha256) for s in self.shards
        ]
        return Manifest(entries, where)

    def abort(self) -> None:
        """Stop: remove the unfinished shard's temporary file; complete shards stay.

        :attr:`discarded` then says which shard that was and how many whole samples
        it held (None when no shard was open).
        """
        self._closed = True
        if self._file is not None:
            self._file.abort()
            self.discarded = Discarded(self._file.spec, self._count, self._first_key)
            self._file = None

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def completed_shards(
    pattern: str, start: int = 0, storage_options: StorageOptions | None = None
) -> list[ShardInfo]:
    """The complete shards present from number ``start`` on, up to the first missing one.

    Each is read whole (:func:`~tarkit.writing.index.index_shard`) to count its samples
    and hash its bytes; a shard that does not read cleanly raises
    :class:`~tarkit.errors.InputError` (shards appear only when complete, so that means
    something else wrote it).
    """
    from .index import index_shard

    found: list[ShardInfo] = []
    number = start
    while True:
        path = shard_name(pattern, number)
        try:
            found.append(index_shard(path, strict=True, storage_options=storage_options))
        except SourceError as exc:
            if exc.reason == SourceError.MISSING:
                break
            raise
        number += 1
    return found


def _key_of(sample: Sample | Mapping[str, Any]) -> Any:
    return sample.key if isinstance(sample, Sample) else sample.get("__key__")
