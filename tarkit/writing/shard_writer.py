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
  temporary files, which the next run removes. A local shard is flushed and renamed
  on another thread while the next one is written; ``post`` and ``on_shard`` see it once
  it is in place.
- Files an earlier run left under the pattern are never mixed with the new shards:
  ``mode`` (:mod:`tarkit.writing.patterns`) refuses to start (``create``, the default),
  replaces them once the new set is complete (``overwrite``), or continues the
  interrupted run that wrote them (``resume``).
- Samples are turned into bytes by :class:`SampleEncoder`. The same samples and limits
  always give byte-identical shards.
- With a manifest, each uncompressed shard gets its index (``<shard>.idx``,
  :mod:`tarkit.writing.indexes`), made from the bytes as they are written and published
  just before the shard, and the manifest (version 2) names them: the set is
  random-access ready.
- With ``mode="overwrite"`` the new set is staged (:class:`~tarkit.writing.finishing.StagedSet`)
  and committed whole when the writer closes.

>>> import os, tempfile
>>> directory = tempfile.mkdtemp()
>>> with ShardWriter(os.path.join(directory, "s-%03d.tar"), maxcount=2) as writer:
...     for i in range(5):
...         writer.write({"__key__": f"k{i}", "txt": f"sample {i}"})
>>> [(os.path.basename(s.url), s.samples) for s in writer.shards]
[('s-000.tar', 2), ('s-001.tar', 2), ('s-002.tar', 1)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from ..errors import OutputError, UsageError
from ..format.manifest import Manifest, ShardInfo
from ..format.samples import Sample
from ..format.tar import END_OF_ARCHIVE
from ..storage import (
    Move,
    Publishing,
    StagedFile,
    StorageOptions,
    manifest_at,
    manifest_files,
    remove_stale_temp,
    save_manifest,
)
from .cuts import ShardCut
from .finishing import Discarded, StagedSet, run_post
from .indexes import SetIndexes, WrittenIndex
from .kept import KeptShard, kept_shards, skip_kept
from .patterns import (
    CREATE,
    OVERWRITE,
    RESUME,
    ShardPattern,
    check_mode,
    existing_shards,
    pending_name,
    refuse_existing,
    refuse_strangers,
    replaced_files,
    settle_earlier_run,
)
from .sample_encoder import SampleEncoder, key_of

S = TypeVar("S", bound="Sample | Mapping[str, Any]")
DEFAULT_PATTERN = "shard-%06d.tar"
DEFAULT_MAXCOUNT = 100_000
DEFAULT_MAXSIZE = 1 << 30  # 1G


class ShardWriter:
    """Write samples into numbered shards, within count and size limits.

    ``pattern`` names the shards (``%06d`` or ``{shard:06d}``, a string or a
    :class:`~tarkit.writing.patterns.ShardPattern` parsed already; a ``.gz``/``.zst``/…
    ending compresses them; ``s3://…`` and other fsspec URLs are uploaded when complete,
    with ``storage_options`` passed to fsspec). Shards are numbered from ``start``.
    ``maxcount`` and ``maxsize`` limit each shard (see the module docstring);
    ``maxshards`` limits how many shards this writer may write: a sample that would need
    one more raises :class:`OutputError`. ``post`` runs after each shard is in place (a
    bash command with ``{}`` for the path, or a callable); ``on_shard`` is called with
    each shard's :class:`ShardInfo` (``url`` is its path) once it is in place. A local
    shard is flushed and renamed on another thread while the next is written, so both are
    called when the next shard is finished (or at :meth:`close` or :meth:`abort`), in
    order; :attr:`shards` lists a shard from the moment it is complete. With
    ``overlap=False`` each shard is put in place and announced before the next sample is
    written (for callbacks that record progress beside the shards). ``manifest`` is a
    path or URL where :meth:`close` writes the manifest of all shards (version 2: its
    columns file beside it); with one, each uncompressed shard numbered in decimal gets
    its index beside it (:attr:`indexed`; :mod:`tarkit.writing.indexes`), published just
    before the shard.
    ``checksums=False`` leaves out the sha256 of each shard (``ShardInfo.sha256`` is
    None; a manifest then has none): hashing costs about a sixth of copying small
    samples, for output nobody checks. ``sealed`` is called with each shard's
    :class:`ShardInfo` once it is complete and before it is published (for a record
    that must exist whenever the shard does); under ``"overwrite"`` it returns the
    :class:`~tarkit.storage.Move` of a file it wrote beside the pending shard, which
    takes its name in the commit with the shards (or None).

    ``mode`` says what to do with files that already match the pattern from ``start``
    on (:mod:`tarkit.writing.patterns`): ``"create"`` (default) raises
    :class:`OutputError` naming how many and the first; ``"overwrite"`` keeps each new
    shard under a hidden pending name until :meth:`close`, which commits the set whole
    (:func:`~tarkit.writing.finishing.put_in_place`: they take their names, the other
    matching files are removed, the manifest is published last) and runs ``post`` on
    each (``on_shard`` is called as each shard is in place under its pending name);
    ``"resume"`` keeps the complete shards of an interrupted run (:attr:`kept`) and
    continues after them: ``samples_done`` says how many samples they hold, and
    :meth:`skip_kept` skips them in the input, checking that they are those shards'
    samples (stale temporary files are removed; another matching file raises
    :class:`OutputError`). ``resumed`` gives those shards when the caller has found
    them already (else they are read here: the complete shards from ``start`` on); the
    caller then checks its input against them. Whatever the mode, the commit of an
    overwrite stopped midway is first finished (its new set takes its place;
    :attr:`finished_commit` says so).

    As a context manager, leaving with an exception aborts: complete shards stay (with
    ``overwrite``, the pending ones are removed and the old files stay as they were), the
    unfinished one's temporary file is removed (:attr:`discarded` describes it) and no
    manifest is written.
    """

    def __init__(
        self,
        pattern: str | ShardPattern = DEFAULT_PATTERN,
        *,
        maxcount: int = DEFAULT_MAXCOUNT,
        maxsize: int | str = DEFAULT_MAXSIZE,
        maxshards: int | None = None,
        start: int = 0,
        post: str | Callable[[str], object] | None = None,
        manifest: str | None = None,
        on_shard: Callable[[ShardInfo], object] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        mode: str = CREATE,
        mtime: int | None = None,
        checksums: bool = True,
        overlap: bool = True,
        sealed: Callable[[ShardInfo], Move | None] | None = None,
        resumed: list[KeptShard] | None = None,
    ) -> None:
        from ..sizes import parse_size

        self.pattern = ShardPattern.parse(pattern)
        if maxcount < 1:
            raise UsageError(f"maxcount must be at least 1 (got {maxcount})")
        if maxshards is not None and maxshards < 1:
            raise UsageError(f"maxshards must be at least 1 (got {maxshards})")
        if start < 0:
            raise UsageError(f"the first shard number must not be negative (got {start})")
        self.maxshards = maxshards
        self.start = start
        self.post = post
        self.manifest = manifest
        self.on_shard = on_shard
        self.storage_options = storage_options
        self.checksums = checksums
        self.overlap = overlap
        self.sealed = sealed
        self._encoder = SampleEncoder(mtime)  # the one place None becomes default_mtime()
        self.shards: list[ShardInfo] = []
        self.samples_done = 0
        self._file: StagedFile | None = None
        self._publishing: tuple[Publishing, ShardInfo] | None = None  # the shard before
        self._name = ""  # the final name of the shard being written
        self._cut = ShardCut(maxcount, parse_size(maxsize, "maxsize"), self.pattern.compression)
        self._first_key: str | None = None
        self.mtime = self._encoder.mtime
        self._closed = False
        self.discarded: Discarded | None = None
        self.mode = check_mode(mode)
        self.indexes = SetIndexes(self.pattern, manifest, mode == OVERWRITE, storage_options)
        self.indexed = self.indexes.on
        self._index: WrittenIndex | None = None  # of the shard being written
        self._staged: StagedSet | None = None  # overwrite: the new set until its commit
        self.kept: list[KeptShard] = []  # resume: the shards kept, as read
        self.finished_commit = False
        self._start_over(storage_options, resumed)

    def _start_over(
        self, storage_options: StorageOptions | None, resumed: list[KeptShard] | None
    ) -> None:
        """Look at what an earlier run left under the pattern, as ``mode`` says."""
        pattern, start = self.pattern, self.start
        self.finished_commit = settle_earlier_run(pattern, storage_options)
        existing = existing_shards(pattern, start, storage_options)
        if self.mode == CREATE and existing:
            raise refuse_existing(pattern, existing, start)
        if self.mode == OVERWRITE:
            replaced = replaced_files(pattern, existing, start, storage_options)
            self._staged = StagedSet(pattern, replaced, storage_options)
        if self.mode == RESUME:
            if resumed is None:
                resumed = kept_shards(pattern, start, storage_options, indexes=self.indexed)
            self.kept = list(resumed)
            self.shards = [shard.info for shard in self.kept]
            self.samples_done = sum(s.samples for s in self.shards)
            kept = {s.url for s in self.shards}
            strangers = [shard for shard in existing if shard.url not in kept]
            if strangers:
                raise refuse_strangers(pattern, strangers)
            for number in range(2):  # the shard being published and the one being written
                name = pattern.name(start + len(self.shards) + number)
                remove_stale_temp(name, storage_options)

    def skip_kept(self, samples: Iterable[S]) -> Iterator[S]:
        """``samples`` (the whole input) past the samples of the kept shards
        (``mode="resume"``; else all of them), which must be those shards' samples: the
        same count and keys, shard by shard (:func:`~tarkit.writing.kept.skip_kept`).
        Raises :class:`UsageError` naming the first kept shard the input does not match,
        before anything is written."""
        return skip_kept(samples, self.kept)

    @property
    def maxcount(self) -> int:
        """Samples a shard may hold (the writer's limit and its cut's: one number);
        changing it applies from the next sample on."""
        return self._cut.maxcount

    @maxcount.setter
    def maxcount(self, value: int) -> None:
        self._cut.maxcount = value

    @property
    def maxsize(self) -> int:
        """Bytes a shard's file may take (the rule in the module docstring)."""
        return self._cut.maxsize

    @property
    def samples(self) -> int:
        """Samples written so far (those of resumed shards included)."""
        return self.samples_done + self._count

    @property
    def _count(self) -> int:
        """Samples in the shard being written."""
        return self._cut.count if self._file is not None else 0

    def write(self, sample: Sample | Mapping[str, Any]) -> None:
        """Write one sample: a :class:`Sample` byte for byte, or a dict with ``__key__``.

        Raises :class:`~tarkit.errors.SampleError` for a dict that cannot be encoded or a
        sample with the key of the one before, :class:`OutputError` when a shard cannot
        be written, and :class:`UsageError` for anything but one sample (a list of them:
        :meth:`write_all`).
        """
        if type(sample) is not dict and not isinstance(sample, (Sample, Mapping)):
            raise UsageError(
                f"a sample is a dict with '__key__' (or a Sample), not a {type(sample).__name__}: "
                "ShardWriter.write takes one sample, write_all an iterable of them"
            )
        raw = self._encoder.encode(sample)
        if raw is None:
            return
        key = key_of(sample)
        self.write_raw(raw, key)
        if self._count == 1:
            self._first_key = key

    def write_all(self, samples: Iterable[Sample | Mapping[str, Any]]) -> int:
        """Write every sample of ``samples``; return how many.

        Samples that lie one after another in the same read buffer (as the compiled
        scanner hands them over) and stay in the same uncompressed shard are written as
        one slice of that buffer: the same bytes, one write instead of one per sample.
        """
        count = 0
        write, admit, cut, measure = self.write, self._encoder.admit, self._cut, self._measure
        indexed = self.indexed
        sliced = cut.compression is None  # (compressed shards are written sample by sample)
        buffer: bytes | None = None  # the run of contiguous samples not yet written
        start = stop = 0
        try:
            for sample in samples:
                count += 1
                span = sample.span if sliced and type(sample) is Sample and sample.fields else None
                if span is None or self._file is None or not cut.takes(span[2] - span[1], measure):
                    if buffer is not None:
                        self._put(memoryview(buffer)[start:stop])
                        buffer = None
                    write(sample)
                    continue
                admit(sample)
                cut.add(span[2] - span[1])
                if indexed:
                    self._index.add(memoryview(span[0])[span[1] : span[2]], sample.key)  # type: ignore[union-attr]
                if buffer is span[0] and span[1] == stop:
                    stop = span[2]
                else:
                    if buffer is not None:
                        self._put(memoryview(buffer)[start:stop])
                    buffer, start, stop = span[0], span[1], span[2]
        finally:  # the samples of the run are counted in: write them, whatever came next
            if buffer is not None:
                self._put(memoryview(buffer)[start:stop])
        return count

    def _put(self, data: bytes | memoryview) -> None:
        """Write ``data`` (whole samples, already counted in) to the open shard."""
        try:
            self._file.write(data)  # type: ignore[union-attr]
        except OSError as exc:
            raise self._file.failure(exc) from None  # type: ignore[union-attr]

    def write_raw(self, raw: bytes, key: str | None = None) -> None:
        """Write one sample given as the complete raw blocks of its members. With
        :attr:`indexed`, ``key`` is its key; without it the key is read from the bytes
        (:func:`~tarkit.format.samples.raw_key`: InputError unless one sample's)."""
        if self._closed:
            raise UsageError("the shard writer is closed")
        size = len(raw)
        if self._file is not None and not self._cut.takes(size, self._measure):
            self._finish()
        if self._file is None:
            self._open()
        if self._index is not None:
            self._index.add(raw, key)
        self._put(raw)
        self._cut.add(size)

    def _measure(self) -> int | None:
        """The bytes of the shard on disk so far (None when they cannot be measured)."""
        assert self._file is not None
        try:
            return self._file.measure()
        except OSError as exc:
            raise self._file.failure(exc) from None

    def _open(self) -> None:
        if self.maxshards is not None and len(self.shards) >= self.maxshards:
            n = self.maxshards
            shards = "shard" if n == 1 else "shards"
            raise OutputError(
                f"the samples need more than {n} {shards} (maxshards {n}): the first {n} "
                f"{shards} are complete, the rest of the samples was not written"
            )
        name = self.pattern.name(self.start + len(self.shards))
        self._file = StagedFile(
            pending_name(name) if self.mode == OVERWRITE else name,
            self.storage_options,
            hashing=self.checksums,
            compressed_as=name,
        )
        self._name = name
        self._cut.begin()
        self._first_key = None
        self._index = self.indexes.start()

    def _finish(self) -> None:
        shard = self._file
        assert shard is not None
        self._settle()  # the shard before this one, published meanwhile
        try:
            shard.write(END_OF_ARCHIVE)
        except (OSError, OutputError) as exc:
            shard.abort()
            self._file = None
            raise shard.failure(exc) from None
        count = self._cut.count
        try:
            # One sample alone may be larger than maxsize; more than one over it is a bug.
            size, sha256 = shard.seal(self.maxsize if count > 1 else None)
        except OutputError:
            self._file = None  # the shard removed its temporary file
            raise
        info = ShardInfo(url=self._name, samples=count, bytes=size, sha256=sha256)
        beside = None if self.sealed is None else self.sealed(info)
        # (an error there leaves the shard to abort)
        if self._index is not None:  # published first: a shard in place has it
            try:
                self.indexes.publish(self._name, self._index)
            except BaseException:
                shard.abort()
                self._file = None
                raise
        try:
            # fsync and rename on another thread while the next shard is written
            publishing = shard.publish_soon(self.overlap)
        except BaseException as exc:
            self.indexes.drop(self._name)
            if isinstance(exc, OutputError):
                self._file = None  # the shard removed its temporary file
            raise
        self._file, self._publishing = None, (publishing, info)
        self.samples_done += count
        self._cut.begin()
        self.shards.append(info)
        if self._staged is not None:
            self._staged.add(shard.spec, beside)
        if not self.overlap:
            self._settle()  # in place already: announced now

    def _settle(self) -> None:
        """Wait until the last finished shard is in place, then announce it (``on_shard``,
        ``post``). An interrupt while waiting leaves it to :meth:`abort`."""
        if self._publishing is None:
            return
        publishing, info = self._publishing
        try:
            publishing.wait()
        except Exception:  # not published: not one of the writer's shards
            self._publishing = None
            self.shards.remove(info)
            self.samples_done -= info.samples
            if self._staged is not None:
                self._staged.drop(publishing.staged.spec)
            self.indexes.drop(info.url)
            raise
        self._publishing = None
        if self.on_shard is not None:
            self.on_shard(info)
        if self.post is not None and self.mode != OVERWRITE:
            run_post(self.post, info.url)

    def close(self) -> None:
        """Finish the last shard (if it has samples) and write the manifest."""
        if self._closed:
            return
        try:
            if self._file is not None:
                self._finish()
            self._settle()
        except BaseException:
            self.abort()
            raise
        self._closed = True
        if self._staged is not None:
            self._staged.commit(self.shards, self.manifest, self.post,
                                self.indexes.sizes_of(self.shards))  # fmt: skip
        elif self.manifest is not None:
            files = manifest_files(self.manifest, self.shards, self.indexed)
            save_manifest(files, self.storage_options)

    def manifest_of(self) -> Manifest:
        """The manifest of the shards finished so far, URLs relative to ``manifest``."""
        return manifest_at(self.manifest, self.shards)

    def abort(self) -> None:
        """Stop: remove the unfinished shard's temporary file; complete shards stay.

        :attr:`discarded` then says which shard that was and how many whole samples
        it held (None when no shard was open).
        """
        self._closed = True
        try:
            # The shard being put in place is complete: it stays, announced as always
            # (its failure, or its post command's, is raised: nothing is hidden).
            self._settle()
        finally:
            if self._file is not None:
                self._file.abort()
                if self.mode != OVERWRITE:  # with overwrite no new shard stays anyway
                    self.discarded = Discarded(self._name, self._count, self._first_key)
                self._file = None
            if self._staged is not None:  # every shard is pending, with its index
                self._staged.abandon()
                for shard in self.shards:
                    self.indexes.drop(shard.url)

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
