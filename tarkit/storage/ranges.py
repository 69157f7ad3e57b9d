"""Byte ranges of a shard: one sample's bytes with one positioned read or one ranged request.

:func:`open_ranges` opens a location for random access as a :class:`RangeSource`, one
implementation per kind:

- a local file (:class:`LocalRanges`): ``os.pread`` on a descriptor opened once; the size
  from ``fstat``. A forked process (a DataLoader worker) closes the descriptors it
  inherited and opens its own on its first read, whose size it learns again;
- ``http(s)://``: one ``Range: bytes=A-B`` GET per read through
  :class:`~tarkit.storage.http.HttpObject`, so every rule of docs/remote.md holds (the
  wait budget, reconnecting at the byte reached, backoff, ``Retry-After``); the first
  answer's ``Content-Range`` gives the object's size, and its ETag or Last-Modified must
  stay the same in every later answer (else ``SourceError`` with reason ``CHANGED``);
- fsspec URLs (``s3://``…): ``cat_file(path, start, stop)`` per read, retried by the same
  rules (:class:`~tarkit.storage.filesystems.FsspecRange`), the size and ETag asked once.

A read past the object's end returns the bytes there are (fewer than asked): the caller
checks lengths against what it expects (a shard index's span and shard size). The size
is learnt once per source, so a shard's stale check costs nothing per sample.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol

from ..errors import SourceError, UsageError
from .filesystems import FsspecRange, StorageOptions
from .http import HttpObject
from .locations import FILE, HTTP, location
from .retrying import ResumingStream, RetryPolicy, retry_policy


class RangeSource(Protocol):
    """One object read by byte ranges (see the module docstring)."""

    name: str

    def read(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)``: fewer when the object ends before ``stop``. Raises
        :class:`~tarkit.errors.SourceError` when they cannot be read."""
        ...

    def size(self) -> int:
        """The object's length, learnt once (after a read, over HTTP, at no cost)."""
        ...

    def close(self) -> None: ...


def open_ranges(
    spec: str, storage_options: StorageOptions | None = None, policy: RetryPolicy | None = None
) -> RangeSource:
    """The object at ``spec`` for ranged reads; remote reads follow ``policy`` (None: from
    ``TARKIT_RETRIES``/``TARKIT_TIMEOUT``). A local file is opened here (SourceError when
    it cannot be, reason ``MISSING`` when it does not exist); a remote object on its first
    read. Raises :class:`~tarkit.errors.UsageError` for stdin and ``pipe:``, which have
    no byte ranges.
    """
    where = location(spec)
    if where.kind == FILE:
        return LocalRanges(spec, where.path)
    if not where.remote:
        raise UsageError(f"{spec}: random access needs a file or a URL, not a stream")
    policy = policy or retry_policy()
    if where.kind == HTTP:
        return RemoteRanges(HttpObject(spec), policy)
    return RemoteRanges(FsspecRange(spec, storage_options, policy.timeout), policy)


_OPEN: weakref.WeakSet[LocalRanges] = weakref.WeakSet()


class LocalRanges:
    """A local file read with ``os.pread`` (see the module docstring). ``fd``: a
    descriptor of the file already open, which this object then owns."""

    def __init__(self, name: str, path: str, fd: int | None = None) -> None:
        self.name = name
        self.path = path
        self._fd = self._open() if fd is None else fd
        self._size: int | None = None
        _OPEN.add(self)

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise SourceError(f"{self.name}: no such file", reason=SourceError.MISSING) from None
        except IsADirectoryError:
            raise SourceError(f"{self.name}: is a directory") from None
        except OSError as exc:
            raise SourceError(f"{self.name}: cannot open: {exc.strerror}") from None

    def read(self, start: int, stop: int) -> bytes:
        fd = self._fd
        if fd < 0:
            fd = self._fd = self._open()
        try:
            data = os.pread(fd, stop - start, start)
            if len(data) == stop - start or not data:
                return data
            parts = [data]  # a short read before the end: go on to the end
            start += len(data)
            while start < stop and (data := os.pread(fd, stop - start, start)):
                parts.append(data)
                start += len(data)
            return b"".join(parts)
        except OSError as exc:
            raise SourceError(f"{self.name}: read failed: {exc.strerror}") from None

    def size(self) -> int:
        if self._size is None:
            if self._fd < 0:
                self._fd = self._open()
            self._size = os.fstat(self._fd).st_size
        return self._size

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def forget(self) -> None:
        """In a forked child: close the inherited descriptor; the next read opens the
        file again (perhaps another file by now: its size is learnt again)."""
        self.close()
        self._size = None


def _forget_after_fork() -> None:
    for source in list(_OPEN):
        source.forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


class RangeConnector(Protocol):
    """A remote object that opens connections for byte ranges (``http.py``,
    ``filesystems.py``): ``size`` once known, validators checked on every connection."""

    name: str
    size: int | None

    def connect(self, offset: int, timeout: float, stop: int | None = None) -> object: ...


class RemoteRanges:
    """A remote object read one ranged request at a time, each through a
    :class:`~tarkit.storage.retrying.ResumingStream` (reconnecting at the byte reached)."""

    def __init__(self, target: RangeConnector, policy: RetryPolicy) -> None:
        self.name = target.name
        self.target = target
        self.policy = policy
        self.reconnections = 0

    def read(self, start: int, stop: int) -> bytes:
        size = self.target.size
        if size is not None:
            stop = min(stop, size)
        if stop <= start:
            return b""
        stream = ResumingStream(_Range(self.target, stop), self.policy, start)  # type: ignore[arg-type]
        try:
            parts, got = [], start
            while got < stop:
                data = stream.read1(stop - got)
                if not data:
                    break
                parts.append(data)
                got += len(data)
        finally:
            self.reconnections += stream.reconnections
            stream.close()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def size(self) -> int:
        if self.target.size is None:
            self.read(0, 1)
        if self.target.size is None:
            raise SourceError(f"{self.name}: the server does not say how long it is")
        return self.target.size

    def close(self) -> None:
        pass


class _Range:
    """The connector of one ranged read: the object's, ending at ``stop`` (or at the
    object's end when that comes first: the size is learnt by the first answer)."""

    seekable = False

    def __init__(self, target: RangeConnector, stop: int) -> None:
        self.name = target.name
        self.target = target
        self.stop = stop

    @property
    def size(self) -> int:
        size = self.target.size
        return self.stop if size is None else min(self.stop, size)

    def connect(self, offset: int, timeout: float) -> object:
        return self.target.connect(offset, timeout, self.size)
