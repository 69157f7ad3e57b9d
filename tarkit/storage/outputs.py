"""Where bytes go: the one atomic publish of tarkit, for local files, stdout and object stores.

Every file tarkit writes — a shard, a manifest, ``tarcat -o``'s archive, a map task's
output and record, ``classes.json`` — is a :class:`StagedFile`: written under a temporary
name and published under its final name only when complete.

- A local file is written as ``.NAME.XXXX.tmp`` in its own directory, flushed to disk
  (``fsync``) and renamed over ``NAME``: the rename is atomic, so a reader sees the old
  file or the whole new one, never part of it.
- An fsspec URL (``s3://…``) is staged in the temporary directory (``$TMPDIR``, else
  ``/tmp``) as ``tarkit-upload-<12 hex digits of the URL's sha256>-NAME.XXXX.tmp`` and
  uploaded whole when complete (``fs.put_file``): the object appears only then. s3fs
  sends a file under 100 MiB in one PUT and a larger one as a multipart upload of
  50 MiB parts, completed at the end (an object appears only on completion) and aborted
  when a part fails; tarkit aborts it too when the upload is interrupted (Ctrl-C,
  SIGTERM), and a resuming writer aborts those a killed run left
  (:func:`remove_stale_temp`).

A run killed with SIGKILL can leave a temporary file; :func:`remove_stale_temp` removes
those of one output (writers call it when they resume). :class:`Sink` is the output of a
command: stdout, a device or FIFO written in place, or a :class:`StagedFile`.

A write that fails raises the OutputError of
:func:`~tarkit.storage.write_failures.write_failure`, which names the file system that
is full (``$TMPDIR`` when an upload is staged there).

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "hello.txt")
>>> publish(path, b"hello")
>>> open(path, "rb").read()
b'hello'
"""

from __future__ import annotations

import io
import os
import stat
import sys
import threading
from typing import BinaryIO

from ..errors import OutputError
from ..format.compression import compression_for, measure, open_compressor
from .filesystems import ObjectInfo, StorageOptions, abort_uploads, filesystem, object_info
from .locations import FILE, FSSPEC, STDIO, location
from .sources import STREAM_BUFFER, enlarge_pipe
from .write_failures import descriptor_failure, write_failure

BUFFER = 1 << 20


def temp_place(spec: str) -> tuple[str, str]:
    """(directory, name prefix) of the temporary files of the output ``spec``.

    >>> temp_place("out/s-000003.tar")[1]
    '.s-000003.tar.'
    >>> temp_place("s3://bucket/data/s-000003.tar")[1]
    'tarkit-upload-02ded27e47c4-s-000003.tar.'
    """
    where = location(spec)
    base = where.basename
    if where.kind == FSSPEC:
        import hashlib  # (here and below: not at import, which the shell tools wait for)
        import tempfile

        digest = hashlib.sha256(spec.encode("utf-8", "surrogateescape")).hexdigest()[:12]
        return tempfile.gettempdir(), f"tarkit-upload-{digest}-{base}."
    return os.path.dirname(os.path.abspath(where.path)), f".{base}."


def remove_stale_temp(spec: str, storage_options: StorageOptions | None = None) -> None:
    """Remove what an interrupted writer left for the output ``spec``: its temporary
    files and, for ``s3://``, the multipart uploads it started and never completed."""
    if location(spec).kind == FSSPEC:
        abort_uploads(spec, storage_options)
    directory, prefix = temp_place(spec)
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


class _CountingFile(io.RawIOBase):
    """A raw file that counts every byte written to it and, if ``hashing``, hashes them.

    A write that fails raises :func:`write_failure`'s OutputError for ``spec``: here is
    where the bytes of every output reach the disk, in ``directory``.
    """

    def __init__(self, fd: int, hashing: bool, spec: str, directory: str, action: str) -> None:
        self.file = open(fd, "wb", buffering=0)  # noqa: SIM115
        self.spec = spec
        self.directory = directory
        self.action = action
        self.sha256 = None
        if hashing:
            import hashlib

            self.sha256 = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[no-untyped-def, override]
        if self.sha256 is not None:
            self.sha256.update(data)
        try:
            written = self.file.write(data)
            while written < len(data):  # a raw write may be short
                written += self.file.write(memoryview(data)[written:])
        except OSError as exc:
            raise write_failure(self.spec, exc, self.directory, self.action) from None
        self.size += len(data)
        return len(data)


class StagedFile:
    """One output file, written whole or not at all (see the module docstring).

    ``stream`` takes the bytes (compressed by the name's ending: ``.gz``, ``.zst``…, or
    by the ending of ``compressed_as``: a hidden name such as ``.x.tar.gz.pending`` is
    compressed as ``x.tar.gz``). :meth:`commit` publishes it and returns ``(bytes stored,
    sha256 or None)``; :meth:`abort` removes it. ``hashing`` computes the sha256 of the
    stored bytes; ``parents`` creates a local file's missing directories.
    Raises :class:`~tarkit.errors.OutputError` when it cannot be written; a location
    that cannot hold a file (stdin, ``pipe:``, ``http://``) is refused at once.
    """

    def __init__(
        self,
        spec: str,
        storage_options: StorageOptions | None = None,
        *,
        hashing: bool = False,
        parents: bool = True,
        compressed_as: str | None = None,
    ) -> None:
        where = location(spec)
        if where.kind not in (FILE, FSSPEC):
            raise OutputError(f"{spec}: cannot write here: give a file path or an fsspec URL")
        self.spec = spec
        self.remote = where.kind == FSSPEC
        self.storage_options = storage_options
        self._published = False
        directory, prefix = temp_place(spec)
        if not self.remote and parents:
            try:
                os.makedirs(directory, exist_ok=True)
            except OSError as exc:
                raise OutputError(f"{spec}: cannot create its directory: {exc.strerror}") from None
        import tempfile

        # An upload is staged in $TMPDIR: a full one must not read as the store's fault.
        staging = "cannot stage the upload" if self.remote else None
        try:
            fd, self.temp_path = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=directory)
        except OSError as exc:
            raise write_failure(spec, exc, directory, staging or "cannot create") from None
        self.raw = _CountingFile(fd, hashing, spec, directory, staging or "write failed")
        self.buffered = io.BufferedWriter(self.raw, buffer_size=BUFFER)
        self.compression = compression_for(compressed_as or spec)
        self.stream: BinaryIO = open_compressor(self.buffered, self.compression)  # type: ignore[arg-type]
        self.write = self.stream.write

    def measure(self) -> int | None:
        """The exact bytes stored so far, after pushing everything written out of the
        compressor; None when the compression cannot be flushed mid-stream."""
        if not measure(self.stream, self.compression):
            return None
        self.buffered.flush()
        return self.raw.size

    def finish(self, limit: int | None = None) -> tuple[int, str | None]:
        """Close the temporary file (flushed to disk); return (bytes, sha256 or None).

        A file of more than ``limit`` bytes is removed and raises OutputError (the
        writer's bound did not hold: a bug). The same as :meth:`seal` then :meth:`settle`.
        """
        result = self.seal(limit)
        self.settle()
        return result

    def seal(self, limit: int | None = None) -> tuple[int, str | None]:
        """Write out everything buffered; return (bytes, sha256 or None), final from now.

        The file is complete but not yet on disk: :meth:`settle` puts it there (a writer
        may do that on another thread while it writes the next file).
        """
        try:
            if self.stream is not self.buffered:
                self.stream.close()
            self.buffered.flush()
        except (OSError, OutputError) as exc:
            self.abort()
            raise self.failure(exc) from None
        if limit is not None and self.raw.size > limit:
            self.abort()
            raise OutputError(
                f"{self.spec}: the shard came out {self.raw.size} bytes on disk, over "
                f"the limit of {limit}: a bug in tarkit, please report it; the shard "
                "was not written"
            )
        self._mode = 0o666 & ~_umask()  # here: the umask is read on the caller's thread
        sha256 = self.raw.sha256
        return self.raw.size, None if sha256 is None else sha256.hexdigest()

    def settle(self) -> None:
        """Flush the sealed file to disk (``fsync``) and close it, ready to publish."""
        try:
            os.fsync(self.raw.file.fileno())
            self.raw.file.close()
            os.chmod(self.temp_path, self._mode)
        except OSError as exc:
            self.abort()
            raise self.failure(exc) from None

    def publish(self) -> None:
        """Put the finished file under its final name: rename it, or upload it whole."""
        try:
            if self.remote:
                fs, path = filesystem(self.spec, self.storage_options, writing=True)
                try:
                    fs.put_file(self.temp_path, path)
                except Exception as exc:  # fsspec back ends raise many kinds
                    raise OutputError(f"{self.spec}: upload failed: {exc}") from None
                except BaseException:  # interrupted: leave no parts of it behind
                    abort_uploads(self.spec, self.storage_options)
                    raise
            else:
                try:
                    os.replace(self.temp_path, location(self.spec).path)
                except OSError as exc:
                    raise OutputError(
                        f"{self.spec}: cannot rename into place: {exc.strerror}"
                    ) from None
            self._published = True
        finally:
            self.abort()

    def publish_soon(self, background: bool = True) -> Publishing:
        """:meth:`settle` and :meth:`publish` the sealed file on a thread of its own, so
        the caller can write on meanwhile (``fsync`` and ``rename`` let other threads
        run); call ``wait()`` on the result before relying on the file. Without
        ``background``, and for an upload to an fsspec URL, it is done here and now (an
        interrupted upload is cleaned up on the thread that sees the interrupt)."""
        return Publishing(self, background and not self.remote)

    def commit(self, limit: int | None = None) -> tuple[int, str | None]:
        """:meth:`finish` then :meth:`publish`; return (bytes, sha256 or None)."""
        result = self.finish(limit)
        self.publish()
        return result

    def failure(self, exc: OSError | OutputError) -> OutputError:
        """The error to raise for ``exc``, met writing this file (:func:`write_failure`;
        an OutputError as it is)."""
        if isinstance(exc, OutputError):
            return exc
        return write_failure(self.spec, exc, self.raw.directory, self.raw.action)

    def info(self) -> ObjectInfo | None:
        """What the store says of the published object (None for a local file)."""
        return object_info(self.spec, self.storage_options) if self.remote else None

    def abort(self) -> None:
        """Remove the temporary file; nothing (more) appears under the final name."""
        try:
            self.raw.file.close()
        except OSError:
            pass
        try:
            os.unlink(self.temp_path)
        except OSError:
            pass

    def __enter__(self) -> StagedFile:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None or not self._published:
            self.abort()


class Publishing:
    """A sealed :class:`StagedFile` on its way to its final name (see
    :meth:`StagedFile.publish_soon`); :meth:`wait` returns once it is there, or raises
    what stopped it (:class:`~tarkit.errors.OutputError`)."""

    def __init__(self, staged: StagedFile, background: bool) -> None:
        self.staged = staged
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        if not background:
            staged.settle()
            staged.publish()
        else:
            self.thread = threading.Thread(target=self._run, name=f"publish {staged.spec}")
            self.thread.start()

    def _run(self) -> None:
        try:
            self.staged.settle()
            self.staged.publish()
        except BaseException as exc:  # handed to wait(), on the caller's thread
            self.error = exc

    def wait(self) -> None:
        """Return once the file is under its final name; raise what stopped it."""
        if self.thread is not None:
            self.thread.join()
        error, self.error = self.error, None
        if error is not None:
            raise error


def publish(spec: str, data: bytes, storage_options: StorageOptions | None = None) -> None:
    """Write a small file whole (a manifest, a record, ``classes.json``): see StagedFile."""
    with StagedFile(spec, storage_options) as staged:  # interrupted: nothing left behind
        try:
            staged.write(data)
        except OSError as exc:
            raise staged.failure(exc) from None
        staged.commit()


def stdout_stream() -> BinaryIO:
    """The binary stdout. Raises :class:`OutputError` when it is not open (``>&-``)."""
    if sys.stdout is None:
        raise OutputError("<stdout>: not open")
    return sys.stdout.buffer


class Sink:
    """The output of a command: ``stream`` takes bytes; :meth:`commit` publishes it,
    :meth:`abort` does not.

    ``-`` (or None) is stdout: commit and abort both flush what was written (on abort
    the caller has not written the end-of-archive marker, so readers downstream fail
    too). A device or FIFO (``/dev/null``, a named pipe) is written in place: renaming a
    temporary file over it would replace it. Anything else is a :class:`StagedFile`.
    """

    def __init__(self, spec: str | None, storage_options: StorageOptions | None = None) -> None:
        self.spec = spec if spec not in (None, "-") else "-"
        self.staged: StagedFile | None = None
        where = location(self.spec)
        if where.kind == STDIO:
            stdout_stream()  # fails when stdout is not open
            enlarge_pipe(1)
            self._file: BinaryIO = io.BufferedWriter(  # type: ignore[assignment]
                io.FileIO(sys.stdout.fileno(), "wb", closefd=False), buffer_size=STREAM_BUFFER
            )
            self.stream: BinaryIO = self._file
        elif where.kind == FILE and _is_special_file(where.path):
            try:
                self._file = open(where.path, "wb", buffering=STREAM_BUFFER)  # noqa: SIM115
            except OSError as exc:
                raise OutputError(f"{self.spec}: cannot open: {exc.strerror}") from None
            self.stream = self._file
        else:
            # A command's output goes into an existing directory, as with `>`.
            self.staged = StagedFile(self.spec, storage_options, parents=False)
            self.stream = self.staged.stream

    def failure(self, exc: OSError | OutputError) -> OutputError:
        """The error to raise for ``exc``, met writing this output (:func:`write_failure`)."""
        if self.staged is not None:
            return self.staged.failure(exc)
        if isinstance(exc, OutputError):
            return exc
        return descriptor_failure("<stdout>" if self.spec == "-" else self.spec,
                                  self._file.fileno(), exc)  # fmt: skip

    def commit(self) -> None:
        """Finish the output: publish a file, flush stdout or a device."""
        if self.staged is not None:
            self.staged.commit()
        else:
            self._file.flush()

    def abort(self) -> None:
        """Give up: remove a file's temporary; flush what stdout already holds."""
        if self.staged is not None:
            self.staged.abort()
            return
        try:
            self._file.flush()
        except OSError:
            pass


def written_in_place(spec: str | None) -> bool:
    """Whether :class:`Sink` writes the output ``spec`` in place: stdout (``-`` or None),
    a device or a FIFO; else it is a file or an object, published whole.

    >>> written_in_place("-"), written_in_place("/dev/null"), written_in_place("out/x.tar")
    (True, True, False)
    """
    where = location(spec or "-")
    return where.kind == STDIO or (where.kind == FILE and _is_special_file(where.path))


def _is_special_file(path: str) -> bool:
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
