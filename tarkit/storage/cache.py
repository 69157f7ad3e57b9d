"""A local cache of remote shards, bounded in bytes, shared by every process of a machine.

A cached shard is named by a hash of its full URL and, when the manifest gives one, of
its sha256 (plus its base name, for people), so two datasets whose shards share base
names never collide, and a shard whose manifest now gives another sha256 (the shard was
written again, maybe with the same size) is another file, downloaded anew. A shard that is not cached
yet is downloaded by a background thread of the first process that asks for it, which
reads the file as it grows: reading starts with the first bytes, not after the download,
and the download runs at network speed whatever that reader does. Other processes that
want the same shard meanwhile wait on its lock file (``fcntl.flock``) and then read the
finished file, so each shard is downloaded once per machine. A download goes to a
temporary name and is renamed into place only once it is known whole (its length, the
manifest's sha256, else the archive's end: :mod:`~tarkit.storage.downloads`); one that is
not whole is an error for its reader and is never kept, and a failed or abandoned one is
removed. A cached shard whose size differs from the manifest's is downloaded again (the
old version of a shard, under its old name, goes as the least recently used).

The cache touches only its own files, known by their names (a 32-digit hash, a dash,
the base name; ``.part-PID`` while downloading; ``.lock``): anything else in the
directory (a file, a subdirectory, a link) is neither counted, nor evicted, nor read,
and a shard whose name is taken by such a thing is read from its URL without caching.

The size bound is hard: the bytes of the cache's files (finished shards and downloads
in progress, whose files grow by reservation) never exceed ``max_bytes``. Room is made
by deleting the least recently used shards (by modification time, which every use of a
shard refreshes). A shard larger than the whole cache is read without being cached. A
process reading a shard that another evicts keeps reading it (the file is unlinked, not
cut), so disk use can briefly exceed the bound by such open files.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import stat
import urllib.parse

from ..errors import _CacheNameTaken
from ..sizes import parse_size
from .downloads import PART, Download, mark_used
from .filesystems import StorageOptions
from .ranges import LocalRanges
from .retrying import RetryPolicy
from .sources import STREAM_BUFFER, Source, open_source

_DIRECTORY_LOCK = ".lock"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_OWN = re.compile(r"[0-9a-f]{32}-[A-Za-z0-9._-]*")  # cache_name(), and its .part- files


def cache_name(url: str, sha256: str | None = None) -> str:
    """The file name a shard from ``url`` gets in a cache: a hash of the URL and of the
    manifest's ``sha256`` of the shard (when it gives one), then the base name.

    >>> cache_name("https://host/a/shard-000.tar")
    'e7f83cab8e2fb150ac27c21249594033-shard-000.tar'
    >>> cache_name("s3://one/shard-000.tar") != cache_name("s3://two/shard-000.tar")
    True
    >>> cache_name("s3://b/s.tar", "ab" * 32) != cache_name("s3://b/s.tar", "cd" * 32)
    True
    """
    named = url if sha256 is None else f"{url}\n{sha256.lower()}"
    digest = hashlib.sha256(named.encode("utf-8", "surrogateescape")).hexdigest()[:32]
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

    def path_for(self, url: str, sha256: str | None = None) -> str:
        """Where the shard from ``url`` (whose manifest gives ``sha256``) is, or will be,
        cached."""
        return os.path.join(self.directory, cache_name(url, sha256))

    def open(
        self,
        url: str,
        storage_options: StorageOptions | None = None,
        policy: RetryPolicy | None = None,
        size: int | None = None,
        sha256: str | None = None,
    ) -> Source | Download:
        """Open a shard: the cached file, or a download that caches as it is read.

        ``size`` and ``sha256`` are the manifest's for the shard, when it has them: a
        download is kept only if it matches them. The download reconnects as any remote
        read does (``policy``; see :mod:`tarkit.storage.retrying`). Blocks while another
        process downloads the same shard. Raises :class:`~tarkit.errors.SourceError` when
        the URL cannot be opened; a download that is not whole raises from its reads or
        :meth:`Download.close` (``SourceError``, or ``InputError``: a cut archive, or
        :attr:`~tarkit.errors.InputError.MISMATCH` with the manifest).
        """
        path = self.path_for(url, sha256)
        try:
            return self._open(url, path, storage_options, policy, size, sha256)
        except _CacheNameTaken:  # by something the cache did not make: read past the cache
            return open_source(url, storage_options, policy)

    def _open(
        self,
        url: str,
        path: str,
        storage_options: StorageOptions | None,
        policy: RetryPolicy | None,
        size: int | None,
        sha256: str | None,
    ) -> Source | Download:
        source = _open_cached(url, path, size)
        if source is not None:
            return source
        lock = _open_lock(path + ".lock")
        remote = None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            source = _open_cached(url, path, size)
            if source is not None:
                os.close(lock)
                return source
            remote = open_source(url, storage_options, policy)
            return Download(self, url, path, remote, lock, size, sha256)
        except BaseException:
            os.close(lock)  # closing the descriptor releases the lock
            if remote is not None:
                remote.close(early=True)
            raise

    def fetch(
        self,
        url: str,
        storage_options: StorageOptions | None = None,
        policy: RetryPolicy | None = None,
        size: int | None = None,
        sha256: str | None = None,
    ) -> LocalRanges | None:
        """The shard from ``url`` whole in the cache, open for ranged reads
        (:mod:`~tarkit.storage.ranges`): downloaded first when it is not there (once per
        machine, as :meth:`open` downloads, kept only if whole and matching ``size`` and
        ``sha256``). None when the cache cannot hold it (a shard larger than the cache, or
        a name taken by something the cache did not make): read it from its URL. Raises
        what a download that is not whole raises.
        """
        path = self.path_for(url, sha256)
        for _ in range(3):  # a shard evicted by another process right after its download
            try:
                cached = _open_cached(url, path, size)
            except _CacheNameTaken:
                return None
            if cached is not None:
                with cached.stream as stream:
                    return LocalRanges(url, path, os.dup(stream.fileno()))
            source = self.open(url, storage_options, policy, size, sha256)
            if not isinstance(source, Download):  # cached meanwhile, or past the cache
                source.close(early=True)
                continue
            source.close()  # waits for the whole shard; raises if it is not whole
            if not source.kept:
                return None
        return None

    def usage(self) -> int:
        """Bytes held: finished shards plus the room reserved by downloads in progress."""
        return sum(size for _, _, size in self._entries())

    def _entries(self) -> list[tuple[str, int, int]]:
        """(name, modification time, size) of the cache's own shards and downloads: the
        files that count against the bound, and the only ones it may delete."""
        entries = []
        with os.scandir(self.directory) as scan:
            for entry in scan:
                if entry.name.endswith(".lock") or not _OWN.fullmatch(entry.name):
                    continue
                try:
                    status = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISREG(status.st_mode):
                    entries.append((entry.name, status.st_mtime_ns, status.st_size))
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
                (mtime, name, length) for name, mtime, length in entries if PART not in name
            )
            for name, _, length in entries:
                if PART in name and used + extra > self.max_bytes and self._stale(name):
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
        lock_path = os.path.join(self.directory, part.split(PART)[0] + ".lock")
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


def _open_cached(url: str, path: str, size: int | None) -> Source | None:
    """The cached shard at ``path``; None when there is none, or one of another size
    than the manifest's ``size``. Raises :class:`~tarkit.errors._CacheNameTaken` when
    something else is there."""
    try:
        status = os.stat(path, follow_symlinks=False)
        if not stat.S_ISREG(status.st_mode):
            raise _CacheNameTaken(path)
        if size is not None and status.st_size != size:
            return None  # another version of the shard: download it again
        stream = open(path, "rb", buffering=STREAM_BUFFER)  # noqa: SIM115
    except FileNotFoundError:
        return None
    try:
        mark_used(stream.fileno())  # a use: this shard is now the most recently used
    except OSError:
        pass
    return Source(url, stream)


def _open_lock(path: str) -> int:
    try:
        return os.open(path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o644)
    except (IsADirectoryError, NotADirectoryError):
        raise _CacheNameTaken(path) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symbolic link
            raise _CacheNameTaken(path) from None
        raise
