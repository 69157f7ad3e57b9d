"""The one way tarkit reaches an fsspec file system (``s3://``, ``gs://``, ``memory://``…).

Every fsspec location, read or written, is opened here with the caller's
``storage_options`` (credentials, ``endpoint_url``, ``anon``…), which fsspec merges with its
own configuration (``FSSPEC_S3_ENDPOINT_URL`` and the like). fsspec is imported only when
such a location is used; without it the error says which extra to install.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import OutputError, SourceError, TarkitError

StorageOptions = Mapping[str, Any]


def filesystem(
    spec: str, storage_options: StorageOptions | None = None, *, writing: bool = False
) -> tuple[Any, str]:
    """(fsspec file system, path within it) of the URL ``spec``.

    Raises :class:`~tarkit.errors.OutputError` (``writing``) or
    :class:`~tarkit.errors.SourceError` when fsspec or the scheme's package is missing or
    the URL is malformed.
    """
    error: type[TarkitError] = OutputError if writing else SourceError
    try:
        import fsspec.core
    except ImportError:
        raise error(f"{spec}: this kind of URL needs fsspec (pip install 'tarkit[s3]')") from None
    try:
        return fsspec.core.url_to_fs(spec, **dict(storage_options or {}))
    except ImportError as exc:
        raise error(f"{spec}: {exc} (pip install 'tarkit[s3]')") from None
    except Exception as exc:  # fsspec back ends raise many kinds
        raise error(f"{spec}: cannot open: {exc}") from None


@dataclass(frozen=True)
class ObjectInfo:
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
