"""A shard downloaded into the shard cache while it is being read (:class:`Download`).

A background thread reads the URL into a temporary file (``NAME.part-PID``) that the
reader follows as it grows, and renames it to the shard's name in the cache only once
it is known whole: its length is the one the server (``Content-Length``) or the manifest
gave, its sha256 the manifest's when it has one, and without any length it must read as
a complete archive (the strict tar reader, end-of-archive marker included). A download
that is not whole is an error for its reader and is never kept. The directory, its
names and its size bound are :mod:`tarkit.storage.cache`'s.
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, BinaryIO

from ..errors import InputError, SourceError
from ..format.archives import archive_members
from .sources import Source
from .write_failures import write_failure

if TYPE_CHECKING:
    from .cache import ShardCache

PART = ".part-"  # a download's file is the shard's name, this, and the process id


def mark_used(fd: int) -> None:
    """Make the file ``fd`` the most recently used of the cache (its modification time)."""
    # Explicit nanoseconds: the kernel's own timestamps are as coarse as a clock tick.
    now = time.time_ns()
    os.utime(fd, ns=(now, now))


class Download:
    """A shard downloaded into the cache by a background thread while it is being read.

    The thread reads the URL at network speed whatever the reader does, and holds the
    shard's lock until the file is published or given up, so a process waiting for the
    shard never waits on another process's consumer (two DDP ranks on one machine that
    share a shard cannot deadlock). Same protocol as :class:`~tarkit.storage.sources.Source`: read
    ``stream``, then :meth:`close`. Closing early lets the download finish in the
    background; leaving a ``with`` block with an exception abandons it. When the cache
    has no room for the shard, the reader takes the rest straight from the URL.
    """

    def __init__(
        self,
        cache: ShardCache,
        url: str,
        path: str,
        remote: Source,
        lock: int,
        size: int | None = None,
        sha256: str | None = None,
    ) -> None:
        self.name = url
        self.cache = cache
        self.path = path
        self.remote = remote
        self.lock = lock
        self.size = size  # the manifest's, if any
        self.sha256 = sha256.lower() if sha256 else None
        self.hash = hashlib.sha256() if self.sha256 else None
        self.part = f"{path}{PART}{os.getpid()}"
        self.fd = os.open(self.part, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o644)
        self.read_fd = os.open(self.part, os.O_RDONLY)
        self.open_fds = {self.fd, self.read_fd, lock}
        self.written = 0
        self.reserved = 0
        self.position = 0
        self.state = _DOWNLOADING
        self.error: BaseException | None = None
        self.pending = b""
        self.stopping = False
        self.closed = False
        self.condition = threading.Condition()
        self._read_remote = getattr(remote.stream, "read1", None) or remote.stream.read
        self.stream: BinaryIO = _Tee(self)  # type: ignore[assignment]
        _ACTIVE.add(self)
        self.thread = threading.Thread(target=self._download, name=f"download {url}", daemon=True)
        self.thread.start()

    def _download(self) -> None:
        state, error = _FAILED, None
        try:
            told = self.remote.expected_size
            if told is not None and self.size is not None and told != self.size:
                raise self._mismatch(f"the shard is {told} bytes, the manifest says {self.size}")
            while not self.stopping:
                data = self._read_remote(1 << 20)
                if not data:
                    break
                end = self.written + len(data)
                if self.size is not None and end > self.size:
                    raise self._mismatch(
                        f"the shard has more bytes than the {self.size} the manifest says"
                    )
                if end > self.reserved and not self._grow(end):
                    self.pending = data  # no room: the reader goes on from the URL itself
                    state = _DIRECT
                    return
                self._store(data)
                if self.hash is not None:
                    self.hash.update(data)
                with self.condition:
                    self.written = end
                    self.condition.notify_all()
            if not self.stopping:
                self.remote.close()
                os.ftruncate(self.fd, self.written)
                self._check_whole()
                mark_used(self.fd)
                try:
                    os.replace(self.part, self.path)
                except OSError:  # something not the cache's own holds the name: not kept
                    _remove(self.part)
                state = _DONE
        except BaseException as exc:
            error = exc
        finally:
            if state != _DONE:
                _remove(self.part)
            if state == _FAILED:
                try:
                    self.remote.close(early=True)
                except Exception:
                    pass
            self._close_fd(self.fd)
            self._close_fd(self.lock)  # lets waiting processes in
            with self.condition:
                self.state, self.error = state, error
                self.condition.notify_all()

    def _check_whole(self) -> None:
        """Raise unless the downloaded file is the whole shard (see the module docstring)."""
        told, got = self.remote.expected_size, self.written
        if told is not None and got != told:
            raise SourceError(f"{self.name}: the download ended after {got} of {told} bytes")
        if self.size is not None and got != self.size:
            raise self._mismatch(
                f"the download ended after {got} bytes, the manifest says {self.size}"
            )
        if self.hash is not None and self.hash.hexdigest() != self.sha256:
            raise self._mismatch(
                f"the downloaded shard's sha256 is {self.hash.hexdigest()}, "
                f"the manifest says {self.sha256}"
            )
        if told is None and self.size is None:  # nobody said how long: the archive must end
            with open(self.part, "rb") as file:
                for _ in archive_members(file, self.name):
                    pass

    def _mismatch(self, what: str) -> InputError:
        return InputError(what, source=self.name, reason=InputError.MISMATCH)

    def _store(self, data: bytes) -> None:
        """Write ``data`` at the end of the download; a full disk names the cache's."""
        view, offset = memoryview(data), self.written
        try:
            while view:  # a write may be short on a disk that is filling up
                done = os.pwrite(self.fd, view, offset)
                view, offset = view[done:], offset + done
        except OSError as exc:
            raise write_failure(self.name, exc, self.cache.directory, "cannot cache") from None

    def _close_fd(self, fd: int) -> None:
        self.open_fds.discard(fd)
        os.close(fd)

    def _grow(self, end: int) -> bool:
        if self.cache.max_bytes is None:
            return True
        step = min(8 << 20, max(self.cache.max_bytes // 16, 1 << 16))
        return self.cache.reserve(self, end, end + step)

    @property
    def kept(self) -> bool:
        """Whether the download ended whole and is now the cached shard."""
        return self.state == _DONE

    def read1(self, n: int = -1) -> bytes:
        n = n if n and n > 0 else 1 << 20
        with self.condition:
            while self.position >= self.written and self.state == _DOWNLOADING:
                self.condition.wait()
            available = self.written - self.position
            state = self.state
        if available > 0:
            data = os.pread(self.read_fd, min(n, available), self.position)
            self.position += len(data)
            return data
        if state == _DONE:
            return b""
        if state == _DIRECT:
            if self.pending:
                data, self.pending = self.pending, b""
                return data
            return self._read_remote(n)
        raise self.error or EOFError("download stopped")

    def close(self, early: bool = False) -> None:
        """Stop reading; without ``early``, wait for the download and check it ended well."""
        if self.closed:
            return
        self.closed = True
        self._close_fd(self.read_fd)
        if not early:
            self.thread.join()
        if self.state == _DIRECT:
            self.remote.close(early=early)
        elif not early and self.state == _FAILED and self.error is not None:
            raise self.error

    def abandon(self, wait: float = 10) -> None:
        """Stop downloading: the partial file is removed and another process may try."""
        self.stopping = True
        if not self.closed:
            self.closed = True
            self._close_fd(self.read_fd)
            if self.state == _DIRECT:
                self.remote.close(early=True)
        self.thread.join(wait)

    def __enter__(self) -> Download:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abandon()


_DOWNLOADING, _DONE, _DIRECT, _FAILED = "downloading", "done", "direct", "failed"
_ACTIVE: weakref.WeakSet[Download] = weakref.WeakSet()


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _forget_downloads_after_fork() -> None:
    # A forked child has no download threads: drop its copies of their descriptors
    # (the parent's copies keep the shard locks).
    for download in list(_ACTIVE):
        for fd in list(download.open_fds):
            try:
                os.close(fd)
            except OSError:
                pass
        download.open_fds.clear()
    _ACTIVE.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_downloads_after_fork)


class _Tee(io.RawIOBase):
    def __init__(self, download: Download) -> None:
        self._download = download

    def readable(self) -> bool:
        return True

    def read1(self, n: int = -1) -> bytes:  # type: ignore[override]
        return self._download.read1(n)

    def read(self, n: int | None = -1) -> bytes:  # type: ignore[override]
        if n is not None and n >= 0:
            return self.read1(n)
        return b"".join(iter(lambda: self.read1(1 << 20), b""))

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def, override]
        data = self.read1(len(b))
        b[: len(data)] = data
        return len(data)
