"""The one way tarkit reaches an fsspec file system (``s3://``, ``gs://``, ``memory://``…).

Every fsspec location, read or written, is opened here with the caller's
``storage_options`` (credentials, ``endpoint_url``, ``anon``…), which fsspec merges with its
own configuration (``FSSPEC_S3_ENDPOINT_URL``, ``FSSPEC_S3='{"anon": true}'`` and the like).
fsspec is imported only when such a location is used; without it the error says which
extra to install.

Objects are read through :class:`FsspecObject`, a connector of
:class:`~tarkit.storage.retrying.ResumingStream`: a failed read reopens the object and
seeks to the byte reached, after checking that its size and ETag have not changed. For
``s3://`` tarkit owns the retries and the timeouts of a read: the file system it reads
with gets ``connect_timeout`` and ``read_timeout`` (the policy's ``timeout``) and no
retries of its own (botocore ``total_max_attempts=1``, s3fs ``retries=1``), unless the
storage options say otherwise; it is tarkit's own instance, so the file systems of the
caller are left as they are. Other fsspec back ends keep their own timeouts.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from ..errors import OutputError, SourceError, TarkitError, _ConnectionFailed
from .retrying import changed

StorageOptions = Mapping[str, Any]
# The extra of pyproject.toml that installs the package of a scheme.
_EXTRAS = {"gs": "gs", "gcs": "gs", "az": "az", "abfs": "az", "abfss": "az", "adl": "az"}


def filesystem(
    spec: str, storage_options: StorageOptions | None = None, *, writing: bool = False
) -> tuple[Any, str]:
    """(fsspec file system, path within it) of the URL ``spec``.

    Raises :class:`~tarkit.errors.OutputError` (``writing``) or
    :class:`~tarkit.errors.SourceError` when fsspec or the scheme's package is missing or
    the URL is malformed.
    """
    error: type[TarkitError] = OutputError if writing else SourceError
    extra = _EXTRAS.get(spec.split("://", 1)[0].lower(), "s3")
    try:
        import fsspec.core
    except ImportError:
        raise error(
            f"{spec}: this kind of URL needs fsspec (pip install 'tarkit[{extra}]')"
        ) from None
    try:
        return fsspec.core.url_to_fs(spec, **dict(storage_options or {}))
    except ImportError as exc:
        raise error(f"{spec}: {exc} (pip install 'tarkit[{extra}]')") from None
    except Exception as exc:  # fsspec back ends raise many kinds
        raise error(f"{spec}: cannot open: {exc}") from None


class ObjectInfo(NamedTuple):
    """What a store says of an object: its size and, when it gives one, its ETag."""

    size: int
    etag: str | None


def object_info(spec: str, storage_options: StorageOptions | None = None) -> ObjectInfo | None:
    """The size and ETag of the object at ``spec``; None when there is none.

    Raises :class:`~tarkit.errors.SourceError` when the store cannot be asked.
    """
    fs, path = filesystem(spec, storage_options)
    try:
        info = fs.info(path)
    except FileNotFoundError:
        return None
    except Exception as exc:  # fsspec back ends raise many kinds
        raise SourceError(f"{spec}: cannot read its details: {exc}") from None
    etag = info.get("ETag") or info.get("etag")
    return ObjectInfo(int(info.get("size") or 0), str(etag) if etag else None)


_S3 = ("s3", "s3a")


def abort_uploads(spec: str, storage_options: StorageOptions | None = None) -> None:
    """Abort the S3 multipart uploads of ``spec`` that were started and never completed.

    An upload cut short (a killed writer) leaves no object, but its parts stay, and are
    billed, until aborted. Other stores have nothing to abort. Without the permission to
    list uploads nothing is done; another failure raises
    :class:`~tarkit.errors.OutputError`.
    """
    if spec.split("://", 1)[0].lower() not in _S3:
        return
    fs, path = filesystem(spec, storage_options, writing=True)
    bucket, _, key = path.partition("/")
    try:
        listing = fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=key)
        for upload in listing.get("Uploads") or []:
            if upload.get("Key") == key:
                fs.call_s3(
                    "abort_multipart_upload", Bucket=bucket, Key=key, UploadId=upload["UploadId"]
                )
    except PermissionError:
        return
    except Exception as exc:  # fsspec back ends raise many kinds
        raise OutputError(f"{spec}: cannot abort its unfinished uploads: {exc}") from None


_readers: dict[str, tuple[Any, int]] = {}  # tarkit's own reading file systems, by options


def reading_filesystem(
    spec: str, storage_options: StorageOptions | None, timeout: float
) -> tuple[Any, str]:
    """(file system, path) to read ``spec`` with; for ``s3://`` with tarkit's timeouts and
    no retries of its own (see the module docstring). Raises like :func:`filesystem`."""
    protocol = spec.split("://", 1)[0].lower()
    if protocol not in _S3:
        return filesystem(spec, storage_options)
    import json  # (here: the tools read local files without it)

    import fsspec.config

    options = dict(storage_options or {})
    config = dict(fsspec.config.conf.get("s3", {}).get("config_kwargs") or {})
    config.update(options.get("config_kwargs") or {})
    config.setdefault("connect_timeout", timeout)
    config.setdefault("read_timeout", timeout)
    config.setdefault("retries", {"total_max_attempts": 1})
    options["config_kwargs"] = config
    key = json.dumps([protocol, options], sort_keys=True, default=repr)
    cached = _readers.get(key)
    if cached is not None and cached[1] == os.getpid():  # not one inherited over a fork
        return cached[0], spec.split("://", 1)[1].rstrip("/")
    fs, path = filesystem(spec, dict(options, skip_instance_cache=True))
    fs.retries = 1  # s3fs retries a request itself: tarkit's policy is the one that counts
    _readers[key] = (fs, os.getpid())
    return fs, path


@contextlib.contextmanager
def _store_errors(name: str, known: bool, doing: str) -> Iterator[None]:
    """What a store's error on the object ``name`` raises, for opening it and asking its
    details alike: gone when it was ``known`` to be there, :func:`~.retrying.changed`;
    never there, a :class:`SourceError` (``MISSING``); refused, a :class:`SourceError`;
    anything else, a :class:`_ConnectionFailed` saying what it was ``doing`` (retried)."""
    try:
        yield
    except FileNotFoundError:
        if known:
            raise changed(name, "it no longer exists") from None
        raise SourceError(f"{name}: no such object", reason=SourceError.MISSING) from None
    except (PermissionError, IsADirectoryError, NotADirectoryError, ValueError) as exc:
        raise SourceError(f"{name}: cannot open: {exc}") from None
    except Exception as exc:  # fsspec back ends raise many kinds
        raise _ConnectionFailed(f"{doing}: {exc}") from None


class FsspecObject:
    """One fsspec object: opened at byte offsets, checked to stay the same object (size, ETag)."""

    seekable = True

    def __init__(self, spec: str, storage_options: StorageOptions | None, timeout: float) -> None:
        self.name = spec
        self.fs, self.path = reading_filesystem(spec, storage_options, timeout)
        self.size: int | None = None
        self.etag: str | None = None
        self._known = False

    def connect(self, offset: int, timeout: float) -> _FileConnection:
        from fsspec.spec import AbstractBufferedFile

        fs = self.fs
        with _store_errors(self.name, self._known, "cannot open"):
            if self._known:
                fs.invalidate_cache(self.path)  # ask the store, not a listing made earlier
            file = fs.open(self.path, "rb")
        try:
            if isinstance(file, AbstractBufferedFile):
                details = file.details
            else:
                details = fs.info(self.path)
            etag = details.get("ETag") or details.get("etag")
            self._check(int(details.get("size") or 0), str(etag) if etag else None)
            if offset:
                file.seek(offset)
        except BaseException as exc:
            file.close()
            if isinstance(exc, Exception) and not isinstance(exc, TarkitError):
                raise _ConnectionFailed(f"cannot open: {exc}") from None
            raise
        return _FileConnection(file)

    def _check(self, size: int, etag: str | None) -> None:
        if not self._known:
            self._known, self.size, self.etag = True, size, etag
            return
        if etag != self.etag:
            raise changed(self.name, f"its ETag was {self.etag}, now {etag}")
        if size != self.size:
            raise changed(self.name, f"it was {self.size} bytes long, now {size}")


class _FileConnection:
    """An open fsspec file read by chunks; its failures raise
    :class:`~tarkit.errors._ConnectionFailed`."""

    def __init__(self, file: Any) -> None:
        self._file = file

    def read(self, size: int) -> bytes:
        try:
            return bytes(self._file.read(size))
        except Exception as exc:  # fsspec back ends raise many kinds
            # An object that changed (s3fs's FileExpired, a FileNotFoundError) is found
            # out by the reconnection, which checks its size and ETag.
            raise _ConnectionFailed(f"read failed: {exc}") from None

    def seek(self, offset: int) -> bool:
        try:
            self._file.seek(offset)  # fsspec files seek without a request
        except Exception:  # fsspec back ends raise many kinds
            return False
        return True

    def close(self) -> None:
        self._file.close()


class FsspecRange:
    """One fsspec object read by byte ranges (:mod:`~tarkit.storage.ranges`): each
    connection is one ``cat_file(path, offset, stop)``, a ranged GET on object stores
    rather than a read-ahead block. The size and ETag are asked once, on the first
    connection; a read that comes back short asks again, and an object that changed is a
    :func:`~tarkit.storage.retrying.changed` error."""

    seekable = False

    def __init__(self, spec: str, storage_options: StorageOptions | None, timeout: float) -> None:
        self.name = spec
        self._spec = (spec, storage_options, timeout)
        self._fs: tuple[Any, str, int] | None = None  # file system, path, process
        self.size: int | None = None
        self.etag: str | None = None

    def _filesystem(self) -> tuple[Any, str]:
        if self._fs is None or self._fs[2] != os.getpid():  # not one inherited over a fork
            fs, path = reading_filesystem(*self._spec)
            self._fs = (fs, path, os.getpid())
        return self._fs[0], self._fs[1]

    def _details(self, again: bool) -> tuple[int, str | None]:
        fs, path = self._filesystem()
        with _store_errors(self.name, again, "cannot read its details"):
            if again:
                fs.invalidate_cache(path)
            details = fs.info(path)
        etag = details.get("ETag") or details.get("etag")
        return int(details.get("size") or 0), str(etag) if etag else None

    def connect(self, offset: int, timeout: float, stop: int | None = None) -> _BytesConnection:
        if self.size is None:
            self.size, self.etag = self._details(False)
        end = self.size if stop is None else min(stop, self.size)
        if end <= offset:
            return _BytesConnection(b"")
        fs, path = self._filesystem()
        try:
            data = bytes(fs.cat_file(path, start=offset, end=end))
        except FileNotFoundError:
            raise changed(self.name, "it no longer exists") from None
        except Exception as exc:  # fsspec back ends raise many kinds
            raise _ConnectionFailed(f"read failed: {exc}") from None
        if len(data) != end - offset:
            size, etag = self._details(True)
            if (size, etag) != (self.size, self.etag):
                raise changed(self.name, f"it was {self.size} bytes long, ETag {self.etag}; "
                                         f"now {size}, {etag}")  # fmt: skip
        return _BytesConnection(data)


class _BytesConnection:
    """The answer of one ranged read, already whole (a short one ends early: the
    resuming stream asks again from the byte reached)."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def read(self, size: int) -> bytes:
        at = self._at
        if not at and size >= len(self._data):
            self._at = len(self._data)
            return self._data
        self._at = min(at + size, len(self._data))
        return self._data[at : self._at]

    def seek(self, offset: int) -> bool:
        return False

    def close(self) -> None:
        self._data = b""
