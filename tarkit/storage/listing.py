"""The files already at a place: listing by a glob or a whole tree, and moving or removing them.

Writers ask before they write: which files match their output pattern (an earlier run's
shards), so that they never leave a mix of two runs behind. Local paths are listed with
:mod:`glob` (hidden files, such as the temporary files of :mod:`.outputs`, are not
matched by ``*``); fsspec URLs through the one opener, :func:`.filesystems.filesystem`.
Matches come back written as the glob was (``file:`` prefix, ``s3://`` scheme).

>>> import os, tempfile
>>> directory = tempfile.mkdtemp()
>>> for name in ("s-1.tar", "s-2.tar", ".s-3.tar.x.tmp", "notes.txt"):
...     open(os.path.join(directory, name), "wb").close()
>>> [os.path.basename(f) for f in list_files(os.path.join(directory, "s-*.tar"))]
['s-1.tar', 's-2.tar']
"""

from __future__ import annotations

import contextlib
import glob
import os

from ..errors import OutputError, SourceError
from .filesystems import StorageOptions, filesystem
from .locations import FILE, FSSPEC, location


def list_files(pattern: str, storage_options: StorageOptions | None = None) -> list[str]:
    """The files (or objects) whose location matches the glob ``pattern``, sorted.

    Only ``*``, ``?`` and ``[…]`` in the path are special (escape a literal one with
    :func:`glob.escape`). Locations that cannot hold files (stdin, ``pipe:``, http) have
    none. Raises :class:`~tarkit.errors.SourceError` when the store cannot be listed.
    """
    where = location(pattern)
    if where.kind == FILE:
        prefix = pattern[: len(pattern) - len(where.path)]
        return sorted(prefix + p for p in glob.glob(where.path) if os.path.isfile(p))
    if where.kind != FSSPEC:
        return []
    fs, path = filesystem(pattern, storage_options)
    try:
        found = fs.glob(path, detail=True)
    except FileNotFoundError:
        return []
    except Exception as exc:  # fsspec back ends raise many kinds
        raise SourceError(f"{pattern}: cannot list: {exc}") from None
    # Written with the pattern's own scheme (gcs:// stays gcs://, not fsspec's gs://).
    scheme = pattern[: pattern.index("://") + 3]
    return sorted(
        scheme + name.split("://", 1)[-1]
        for name, info in found.items()
        if info.get("type") != "directory"
    )


def is_directory(spec: str, storage_options: StorageOptions | None = None) -> bool:
    """Whether ``spec`` is a directory: a local one, or an fsspec URL under which objects
    lie (``s3://bucket/train/``). Raises :class:`~tarkit.errors.SourceError` when the
    store cannot be asked."""
    where = location(spec)
    if where.kind == FILE:
        return os.path.isdir(where.path)
    if where.kind != FSSPEC:
        return False
    fs, path = filesystem(spec, storage_options)
    try:
        return bool(fs.isdir(path.rstrip("/")))
    except Exception as exc:  # fsspec back ends raise many kinds
        raise SourceError(f"{spec}: cannot list: {exc}") from None


_LOOKED_AT = 1000  # files a directory given for a shard is judged by


def what_directory_holds(path: str) -> str:
    """What the local directory ``path``, given where shards are expected, holds and how
    to make shards of it (:func:`~tarkit.format.file_types.describe_directory`): the end
    of the message that says it is not a shard. Judged by its first files in a walk (at
    most a thousand), so that a directory of millions costs no more."""
    from ..format.file_types import describe_directory  # only for this error

    names: list[str] = []
    for parent, directories, files in os.walk(path):
        directories.sort()
        relative = os.path.relpath(parent, path).replace(os.sep, "/")
        names += (name if relative == "." else f"{relative}/{name}" for name in sorted(files))
        if len(names) >= _LOOKED_AT:
            break
    return describe_directory(names[:_LOOKED_AT], path)


def files_below(root: str, storage_options: StorageOptions | None = None) -> list[str]:
    """The paths, relative to the fsspec directory ``root`` and ``/``-separated, of every
    object below it, sorted: one listing of the whole tree. Raises
    :class:`~tarkit.errors.SourceError` when the store cannot be listed."""
    fs, path = filesystem(root, storage_options)
    base = path.rstrip("/")
    try:
        found = fs.find(base, withdirs=False)
    except FileNotFoundError:
        return []
    except Exception as exc:  # fsspec back ends raise many kinds
        raise SourceError(f"{root}: cannot list: {exc}") from None
    prefix = base + "/"
    return sorted(name[len(prefix) :] for name in found if name.startswith(prefix))


def remove_file(spec: str, storage_options: StorageOptions | None = None) -> None:
    """Remove the file or object ``spec``; one already gone is fine.

    Raises :class:`~tarkit.errors.OutputError` when it exists and cannot be removed.
    """
    where = location(spec)
    try:
        if where.kind == FSSPEC:
            fs, path = filesystem(spec, storage_options, writing=True)
            fs.rm_file(path)
        else:
            os.unlink(where.path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise OutputError(f"{spec}: cannot remove: {exc.strerror or exc}") from None
    except Exception as exc:  # fsspec back ends raise many kinds
        raise OutputError(f"{spec}: cannot remove: {exc}") from None


def remove_directory(spec: str) -> None:
    """Remove the local directory ``spec`` if it is there and empty (a directory a run
    made for files it then did not keep); anything else stays, without an error."""
    where = location(spec)
    if where.is_file:
        with contextlib.suppress(OSError):
            os.rmdir(where.path)


def move_file(source: str, target: str, storage_options: StorageOptions | None = None) -> None:
    """Put the file ``source`` under the name ``target`` (same kind of place), replacing it.

    A local file is renamed (atomic); an object is copied within its store and the
    original removed. Raises :class:`~tarkit.errors.OutputError` when that fails.
    """
    where = location(source)
    try:
        if where.kind == FSSPEC:
            fs, path = filesystem(source, storage_options, writing=True)
            fs.mv(path, filesystem(target, storage_options, writing=True)[1])
        else:
            os.replace(where.path, location(target).path)
    except OSError as exc:
        raise OutputError(
            f"{target}: cannot move {source} into place: {exc.strerror or exc}"
        ) from None
    except Exception as exc:  # fsspec back ends raise many kinds
        raise OutputError(f"{target}: cannot move {source} into place: {exc}") from None
