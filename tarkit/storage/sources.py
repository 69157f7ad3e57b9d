"""Where bytes come from: stdin, files, ``pipe:`` commands, HTTP(S) and fsspec URLs.

Every input is opened by :func:`open_source` (or :func:`open_source_at`, to start at a
byte offset), whatever its kind (:mod:`tarkit.storage.locations`):

- ``-``: stdin;
- a path, ``file:PATH``: the file;
- ``pipe:CMD``: the command's stdout; its exit status is checked when the input is
  closed (141 is fine when tarkit stopped reading early);
- ``http://``, ``https://``: streamed (:mod:`tarkit.storage.http`);
- any other ``scheme://`` URL (``s3://``…): through fsspec
  (:mod:`tarkit.storage.filesystems`), with the caller's ``storage_options``.

Both remote kinds are read through a :class:`~tarkit.storage.retrying.ResumingStream`:
a dropped, reset or stalled connection is reopened at the byte reached, with the
caller's :class:`~tarkit.storage.retrying.RetryPolicy` (None: ``TARKIT_RETRIES`` and
``TARKIT_TIMEOUT``, else 5 reconnections and 30 s). A ``pipe:`` command is never timed
out: a command that stops producing is waited for.

:class:`HashingReader` counts and hashes what is read through it (a shard's size and
sha256 for a manifest); :func:`read_bytes` reads a small file whole.

A document tarkit holds whole or parses as it comes (a manifest, a commit's journal, a
shard's record) is read up to a bound, so that one from elsewhere that never ends cannot
fill the memory: :data:`MANIFEST_LIMIT`, :data:`JOURNAL_LIMIT`, :data:`RECORD_LIMIT`
(:class:`BoundedReader`; docs/format.md, "Bounds"). The samples' own bytes are not
bounded here: a member is read as large as it is.
"""

from __future__ import annotations

import io
import os
import signal
import sys
from typing import TYPE_CHECKING, BinaryIO

from ..errors import InputError, SourceError
from ..format.archives import skip_bytes
from .filesystems import FsspecObject, StorageOptions, object_info
from .http import HttpObject
from .locations import FILE, HTTP, PIPE, STDIO, location
from .retrying import Connector, ResumingStream, RetryPolicy, retry_policy

if TYPE_CHECKING:
    import subprocess

# The buffer of every stream tarkit opens on a file, stdin or stdout, or a ``pipe:``
# command, read or written; a pipe's kernel buffer is grown to it too.
STREAM_BUFFER = 1 << 20
BUFFER = 1 << 20
_F_SETPIPE_SZ = 1031
# The most bytes read of a document (the module docstring); generous: a version 1
# manifest of a million shards is about 160 MB.
MANIFEST_LIMIT = 1 << 30
JOURNAL_LIMIT = 2 << 30  # a commit's moves and the bytes of its manifest
RECORD_LIMIT = 256 << 20  # a shard's record (map's holds its metadata rows), a rejects list


def enlarge_pipe(fd: int) -> None:
    """Grow a pipe's kernel buffer to :data:`STREAM_BUFFER` (1 MiB): one 64 KiB pipe hop
    limits large members."""
    try:
        import fcntl
        import stat

        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            fcntl.fcntl(fd, _F_SETPIPE_SZ, STREAM_BUFFER)
    except (OSError, ValueError, ImportError):
        pass


class Source:
    """An opened input: ``stream`` gives its raw bytes; :meth:`close` checks how it ended.

    ``close(early=True)`` tells it the reader stopped before the end on purpose.
    ``expected_size`` is the input's length when its server or store told it (a remote
    input: the stream then ends exactly there, or raises), else None.
    """

    def __init__(self, name: str, stream: BinaryIO, process: subprocess.Popen | None = None,
                 expected_size: int | None = None) -> None:  # fmt: skip
        self.name = name
        self.stream = stream
        self.process = process
        self.expected_size = expected_size

    def close(self, early: bool = False) -> None:
        process = self.process
        if process is None:
            if self.stream is not getattr(sys.stdin, "buffer", None):
                self.stream.close()
            return
        self.process = None
        import subprocess  # loaded: it started the command

        if early:
            self.stream.close()  # the command now gets SIGPIPE if it is still writing
            try:
                status = process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                # Not writing, so no SIGPIPE (`sleep`, a stalled download): stop it.
                process.kill()
                status = process.wait()
        else:
            self.stream.read()
            self.stream.close()
            status = process.wait()
        if status == 0 or early:
            # After an early stop any status is fine: the command was cut off on
            # purpose (SIGPIPE gives 141; curl, for one, exits 23 instead).
            return
        raise SourceError(f"{self.name}: command {describe_exit(status)}")

    def __enter__(self) -> Source:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        process = self.process
        if process is not None and isinstance(exc, InputError):
            import subprocess  # loaded: it started the command

            # Bad input from a command that failed: the failure is the news (pipe:false
            # gives an empty input, a crashed producer a truncated one). A command still
            # writing after a second is cut off below, and its SIGPIPE is no failure.
            try:
                status = process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                status = 0
            if status not in (0, 141, -signal.SIGPIPE):
                self.close(early=True)
                raise SourceError(f"{self.name}: command {describe_exit(status)}") from None
        # On an error the command may still be writing: do not wait for all of it.
        self.close(early=exc_type is not None)


def describe_exit(status: int | None) -> str:
    """How a process ended, in words: the one wording of every tarkit message.

    ``status`` is a ``returncode`` (negative: killed by that signal); None means the
    process stopped answering without an exit status.

    >>> describe_exit(-9)
    'was killed by signal 9 (SIGKILL)'
    >>> describe_exit(3)
    'exited with status 3'
    """
    if status is None:
        return "stopped answering"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = "?"
        return f"was killed by signal {-status} ({name})"
    return f"exited with status {status}"


def open_source(
    spec: str, storage_options: StorageOptions | None = None, policy: RetryPolicy | None = None
) -> Source:
    """Open one input for reading. Raises :class:`SourceError` if it cannot be opened.

    ``storage_options`` go to fsspec for an fsspec URL (credentials, ``endpoint_url``…);
    ``policy`` says how a remote input reconnects (None: from the environment).
    """
    where = location(spec)
    if where.kind == STDIO:
        if sys.stdin is None:
            raise SourceError("<stdin>: not open")
        enlarge_pipe(0)
        return Source("<stdin>", sys.stdin.buffer)
    if where.kind == PIPE:
        import subprocess  # here: shell tools start faster without it

        try:
            process = subprocess.Popen(
                where.path, shell=True, stdout=subprocess.PIPE, bufsize=STREAM_BUFFER
            )
        except OSError as exc:
            raise SourceError(f"{spec}: cannot start command: {exc.strerror}") from None
        assert process.stdout is not None
        enlarge_pipe(process.stdout.fileno())
        return Source(spec, process.stdout, process)  # type: ignore[arg-type]
    if where.remote:
        return _open_remote(spec, storage_options, policy)
    try:
        stream = open(where.path, "rb", buffering=STREAM_BUFFER)  # noqa: SIM115
    except FileNotFoundError:
        raise SourceError(f"{spec}: no such file", reason=SourceError.MISSING) from None
    except IsADirectoryError:
        from .listing import what_directory_holds

        holds = what_directory_holds(where.path)
        raise SourceError(f"{spec}: is a directory, not a shard{holds}") from None
    except OSError as exc:
        raise SourceError(f"{spec}: cannot open: {exc.strerror}") from None
    return Source(spec, stream)


def open_source_at(
    spec: str,
    start: int,
    storage_options: StorageOptions | None = None,
    policy: RetryPolicy | None = None,
) -> Source:
    """Open one input so that its stream begins at byte ``start``.

    HTTP(S) asks for a byte range (and reads past the bytes itself when the server
    ignores the request); seekable files and fsspec URLs seek; ``pipe:`` and stdin read
    past the bytes. Raises :class:`SourceError` if the input is shorter than ``start``.
    """
    if location(spec).remote:
        return _open_remote(spec, storage_options, policy, start)
    source = open_source(spec, storage_options)
    if not start:
        return source
    seekable = getattr(source.stream, "seekable", None)
    if seekable is not None and seekable():
        source.stream.seek(start)
        return source
    try:
        skip_bytes(source.stream, start)
    except EOFError:
        source.close(early=True)
        raise SourceError(f"{spec}: input ends before byte {start}") from None
    return source


def _open_remote(
    spec: str, storage_options: StorageOptions | None, policy: RetryPolicy | None, start: int = 0
) -> Source:
    policy = policy or retry_policy()
    connector: Connector
    if location(spec).kind == HTTP:
        connector = HttpObject(spec)
    else:
        connector = FsspecObject(spec, storage_options, policy.timeout)
    stream = ResumingStream(connector, policy, start)
    return Source(spec, stream, expected_size=connector.size)  # type: ignore[arg-type]


def read_bytes(
    spec: str, storage_options: StorageOptions | None = None, *, limit: int | None = None
) -> bytes | None:
    """The whole content of a small file or object; None when there is none.

    Raises :class:`SourceError` when it exists but cannot be read, or holds more than
    ``limit`` bytes (a document's bound; None: any size, for the bytes of a sample).
    """
    where = location(spec)
    if where.remote:
        try:
            source = open_source(spec, storage_options)
        except SourceError as exc:
            if exc.reason == SourceError.MISSING:
                return None
            raise
        with source:
            return BoundedReader(source.stream, spec, limit).read()
    if where.kind == FILE:
        try:
            with open(where.path, "rb") as stream:
                return BoundedReader(stream, spec, limit).read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SourceError(f"{spec}: cannot read: {exc.strerror}") from None
    with open_source(spec, storage_options) as source:
        return BoundedReader(source.stream, spec, limit).read()


class BoundedReader:
    """Reads ``stream`` (the input ``spec``) and raises :class:`SourceError` once it gave
    more than ``limit`` bytes (None: no bound): a document read from elsewhere that never
    ends stops there.

    >>> BoundedReader(io.BytesIO(bytes(10)), "m.json", 8).read()
    Traceback (most recent call last):
    ...
    tarkit.errors.SourceError: m.json: more than 8 bytes, the most tarkit reads of such a document (docs/format.md, "Bounds")
    """

    def __init__(self, stream: BinaryIO, spec: str, limit: int | None) -> None:
        self.stream, self.spec, self.limit, self.count = stream, spec, limit, 0

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes (all that is left for None or a negative size)."""
        if self.limit is None:
            return bytes(self.stream.read(-1 if size is None else size))
        if size is not None and size >= 0:
            data = bytes(self.stream.read(min(size, self.limit + 1 - self.count)))
            self._count(len(data))
            return data
        whole = io.BytesIO()
        while chunk := self.stream.read(min(BUFFER, self.limit + 1 - self.count)):
            whole.write(chunk)
            self._count(len(chunk))
        return whole.getvalue()

    def _count(self, received: int) -> None:
        self.count += received
        if self.limit is not None and self.count > self.limit:
            raise SourceError(
                f"{self.spec}: more than {_size_text(self.limit)}, the most tarkit reads of "
                'such a document (docs/format.md, "Bounds")'
            )


def _size_text(limit: int) -> str:
    """``1 GiB``, ``256 MiB`` or ``8 bytes``: a bound in words."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if limit >= 1 << shift and limit % (1 << shift) == 0:
            return f"{limit >> shift} {unit}"
    return f"{limit} bytes"


def stored_matches(
    spec: str,
    size: int,
    sha256: str | None,
    etag: str | None = None,
    storage_options: StorageOptions | None = None,
) -> bool:
    """Whether the file or object at ``spec`` is the one a record describes.

    A local file is read whole: its size and sha256 must match. A remote object is not
    read: its size must match, and its ETag when one is given (an object replaced by
    another of the same size then does not pass). False when there is none; raises
    :class:`SourceError` when it cannot be read or asked about.
    """
    if location(spec).remote:
        found = object_info(spec, storage_options)
        if found is None or found.size != size:
            return False
        return etag is None or found.etag == etag
    try:
        with open_source(spec, storage_options) as opened:
            digest = HashingReader(opened.stream)
            digest.drain()
    except SourceError as exc:
        if exc.reason == SourceError.MISSING:
            return False
        raise
    return digest.size == size and digest.sha256.hexdigest() == sha256


class CountingReader(io.RawIOBase):
    """A readable stream that counts (``size``) every byte read through it: a shard's
    stored bytes, whatever reads it (a decompressor, the tar reader)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._read = getattr(stream, "read1", None) or stream.read
        self.size = 0

    def readable(self) -> bool:
        return True

    def read(self, n: int | None = -1) -> bytes:  # type: ignore[override]
        data = self._read(n if n is not None and n > 0 else BUFFER)
        self.size += len(data)
        return data

    read1 = read  # type: ignore[assignment]

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def, override]
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def drain(self) -> None:
        """Read (and count) the rest of the stream."""
        while self.read(BUFFER):
            pass


class HashingReader(CountingReader):
    """A readable stream that counts (``size``) and hashes (``sha256``) every byte read
    through it: what a manifest records of a shard as stored."""

    def __init__(self, stream: BinaryIO) -> None:
        import hashlib  # (not at import, which the shell tools wait for)

        super().__init__(stream)
        self.sha256 = hashlib.sha256()

    def read(self, n: int | None = -1) -> bytes:  # type: ignore[override]
        data = super().read(n)
        self.sha256.update(data)
        return data

    read1 = read  # type: ignore[assignment]
