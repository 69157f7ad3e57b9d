"""A local cache of remote shards, bounded in bytes, shared by every process of a machine.

A cached shard is named by a hash of its full URL (plus its base name, for people), so
two datasets whose shards share base names never collide. A shard that is not cached
yet is downloaded by a background thread of the first process that asks for it, which
reads the file as it grows: reading starts with the first bytes, not after the download,
and the download runs at network speed whatever that reader does. Other processes that
want the same shard meanwhile wait on its lock file (``fcntl.flock``) and then read the
finished file, so each shard is downloaded once per machine. A download goes to a
temporary name and is renamed into place only when complete; a failed or abandoned one
is removed.

The size bound is hard: the bytes of every file in the directory (finished shards and
downloads in progress, whose files grow by reservation) never exceed ``max_bytes``.
Room is made by deleting the least recently used shards (by modification time, which
every use of a shard refreshes). A shard larger than the whole cache is read without
being cached. A process reading a shard that another evicts keeps reading it (the file
is unlinked, not cut), so disk use can briefly exceed the bound by such open files.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import re
import threading
import time
import urllib.parse
import weakref
from typing import BinaryIO

from ..sizes import parse_size
from .filesystems import StorageOptions
from .retrying import RetryPolicy
from .sources import PIPE_BUFFER, Source, open_source
from .write_failures import write_failure

_DIRECTORY_LOCK = ".lock"
_PART = ".part-"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def cache_name(url: str) -> str:
    """The file name a shard from ``url`` gets in a cache: URL hash, then base name.

    >>> cache_name("https://host/a/shard-000.tar")
    'e7f83cab8e2fb150ac27c21249594033-shard-000.tar'
    >>> cache_name("s3://one/shard-000.tar") != cache_name("s3://two/shard-000.tar")
    True
    """
    digest = hashlib.sha256(url.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    base = os.path.basename(urllib.parse.urlsplit(url).path)
    return f"{digest}-{_UNSAFE.sub('_', base)[-80:]}"


class ShardCache:
    """A directory of cached shards holding at most ``max_bytes`` (None: no bound).

    ``max_bytes`` may be a size such as ``"20G"``. :meth:`open` returns a
    :class:`~tarkit.storage.sources.Source`-like object for a shard URL.
    """

    def __init__(self, directory: str, max_bytes: int | str | None = None) -> None:
        self.directory = os.path.abspath(directory)
        self.max_bytes = None if max_bytes is None else parse_size(max_bytes, "cache size")
        os.makedirs(self.directory, exist_ok=True)

    def path_for(self, url: str) -> str:
        """Where the shard from ``url`` is (or will be) cached."""
        return os.path.join(self.directory, cache_name(url))

    def open(
        self,
        url: str,
        storage_options: StorageOptions | None = None,
        policy: RetryPolicy | None = None,
    ) -> Source | Download:
        """Open a shard: the cached file, or a download that caches as it is read.

        The download reconnects as any remote read does (``policy``; see
        :mod:`tarkit.storage.retrying`). Blocks while another process downloads the same
        shard. Raises :class:`~tarkit.errors.SourceError` when the URL cannot be opened.
        """
        path = self.path_for(url)
        source = _open_cached(url, path)
        if source is not None:
            return source
        lock = os.open(path + ".lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            source = _open_cached(url, path)
            if source is not None:
                os.close(lock)
                return source
            remote = open_source(url, storage_options, policy)
        except BaseException:
            os.close(lock)  # closing the descriptor releases the lock
            raise
        return Download(self, url, path, remote, lock)

    def usage(self) -> int:
        """Bytes held: finished shards plus the room reserved by downloads in progress."""
        return sum(size for _, _, size in self._entries())

    def _entries(self) -> list[tuple[str, int, int]]:
        """(name, modification time, size) of every file that counts against the bound."""
        entries = []
        with os.scandir(self.directory) as scan:
            for entry in scan:
                if entry.name.endswith(".lock"):
                    continue
                try:
                    stat = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                entries.append((entry.name, stat.st_mtime_ns, stat.st_size))
        return entries

    def reserve(self, download: Download, size: int, wanted: int | None = None) -> bool:
        """Grow ``download``'s file to ``size`` bytes if the bound allows, evicting LRU shards.

        Up to ``wanted`` bytes are reserved when there is room without more eviction.
        Returns False (and changes nothing) when even an empty cache has no room.
        """
        if self.max_bytes is None:
            return True
        lock = os.open(os.path.join(self.directory, _DIRECTORY_LOCK), os.O_CREAT | os.O_RDWR)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            entries = self._entries()
            extra = size - download.reserved
            used = sum(entry[2] for entry in entries)
            finished = sorted(
                (mtime, name, length) for name, mtime, length in entries if _PART not in name
            )
            for name, _, length in entries:
                if _PART in name and used + extra > self.max_bytes and self._stale(name):
                    used -= length
            for _, name, length in finished:
                if used + extra <= self.max_bytes:
                    break
                try:
                    os.unlink(os.path.join(self.directory, name))
                    used -= length
                except FileNotFoundError:
                    pass
            if used + extra > self.max_bytes:
                return False
            size = max(size, min(wanted or size, self.max_bytes - used + download.reserved))
            os.ftruncate(download.fd, size)
            download.reserved = size
            return True
        finally:
            os.close(lock)

    def _stale(self, part: str) -> bool:
        """Remove a download left behind by a dead process (its shard lock is free)."""
        lock_path = os.path.join(self.directory, part.split(_PART)[0] + ".lock")
        try:
            lock = os.open(lock_path, os.O_RDWR)
        except FileNotFoundError:
            lock = -1
        try:
            if lock >= 0:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return False
            os.unlink(os.path.join(self.directory, part))
            return True
        except FileNotFoundError:
            return False
        finally:
            if lock >= 0:
                os.close(lock)


def _open_cached(url: str, path: str) -> Source | None:
    try:
        stream = open(path, "rb", buffering=PIPE_BUFFER)  # noqa: SIM115
    except FileNotFoundError:
        return None
    try:
        _touch(stream.fileno())  # a use: this shard is now the most recently used
    except OSError:
        pass
    return Source(url, stream)


def _touch(fd: int) -> None:
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

    def __init__(self, cache: ShardCache, url: str, path: str, remote: Source, lock: int) -> None:
        self.name = url
        self.cache = cache
        self.path = path
        self.remote = remote
        self.lock = lock
        self.part = f"{path}{_PART}{os.getpid()}"
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
            while not self.stopping:
                data = self._read_remote(1 << 20)
                if not data:
                    break
                end = self.written + len(data)
                if end > self.reserved and not self._grow(end):
                    self.pending = data  # no room: the reader goes on from the URL itself
                    state = _DIRECT
                    return
                self._store(data)
                with self.condition:
                    self.written = end
                    self.condition.notify_all()
            if not self.stopping:
                self.remote.close()
                os.ftruncate(self.fd, self.written)
                _touch(self.fd)
                os.replace(self.part, self.path)
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
