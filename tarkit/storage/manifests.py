"""Manifests at their locations: read one from a path or URL, publish one, resolve its shards.

The format itself is :mod:`tarkit.format.manifest`; this module only moves it in and out
of storage, through the same opener and the same atomic publish as every shard.
"""

from __future__ import annotations

import os

from ..errors import InputError, SourceError
from ..format.columns import Buffer
from ..format.manifest import Manifest, ShardInfo, parse
from ..format.manifest_reader import read_table
from ..format.shard_table import ShardTable
from .filesystems import StorageOptions
from .locations import location, relative_url, resolve_url
from .outputs import publish
from .sources import MANIFEST_LIMIT, BoundedReader, open_source, read_bytes


def load_manifest(spec: str, storage_options: StorageOptions | None = None) -> Manifest:
    """Read a manifest from a path or URL (anything :func:`open_source` opens).

    Raises :class:`~tarkit.errors.SourceError` when it cannot be read (or holds more than
    :data:`~tarkit.storage.MANIFEST_LIMIT` bytes) and :class:`~tarkit.errors.InputError`
    when it is not a tarkit manifest.
    """
    with open_source(spec, storage_options) as source:
        try:
            text = BoundedReader(source.stream, spec, MANIFEST_LIMIT).read().decode("utf-8")
        except UnicodeDecodeError:
            raise InputError("manifest is not UTF-8 text", source=spec) from None
        except OSError as exc:
            raise SourceError(f"{spec}: cannot read: {exc}") from None
    return parse(text, spec)


def load_table(spec: str, storage_options: StorageOptions | None = None) -> ShardTable:
    """Read the manifest at ``spec`` (version 1 or 2) into a
    :class:`~tarkit.format.shard_table.ShardTable` in bounded memory: a version 1
    manifest in slices, a version 2 one with its columns file (memory-mapped when local,
    so that only the pages asked for are read). Raises like :func:`load_manifest`.
    """
    import mmap

    def columns(name: str) -> Buffer:
        where = location(resolve_url(spec, name))
        if where.is_file:
            try:
                with open(where.path, "rb") as file:
                    if os.fstat(file.fileno()).st_size == 0:
                        return b""
                    return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
            except OSError as exc:
                raise SourceError(f"{where.spec}: cannot read: {exc.strerror}") from None
        data = read_bytes(where.spec, storage_options, limit=MANIFEST_LIMIT)
        if data is None:
            raise SourceError(f"{where.spec}: no such file", reason=SourceError.MISSING)
        return data

    with open_source(spec, storage_options) as source:
        try:
            stream = BoundedReader(source.stream, spec, MANIFEST_LIMIT)
            return read_table(stream, spec, columns)  # type: ignore[arg-type]
        except OSError as exc:
            raise SourceError(f"{spec}: cannot read: {exc}") from None


def manifest_at(where: str | None, shards: list[ShardInfo]) -> Manifest:
    """The manifest of ``shards`` to be written at ``where``: URLs relative to it."""
    entries = [ShardInfo(relative_url(where, s.url), s.samples, s.bytes, s.sha256) for s in shards]
    return Manifest(entries, where)


def save_manifest(
    manifest: Manifest, spec: str, storage_options: StorageOptions | None = None
) -> None:
    """Publish ``manifest`` at ``spec`` (a path, atomically, or an fsspec URL)."""
    publish(spec, manifest.to_bytes(), storage_options)


def manifest_urls(manifest: Manifest, *, opened: bool = True) -> list[str]:
    """The shard URLs of ``manifest``, resolved against the location it was loaded from.

    A manifest loaded from a location is data, not the user's word: an entry that is a
    command, or a local path in a remote manifest, raises
    :class:`~tarkit.errors.InputError` naming the manifest and the shard
    (:func:`~tarkit.storage.resolve_url`, the trust rule). ``opened=False``: the URLs are
    only matched with shards the caller named itself, never opened, and none is refused.
    """
    where = manifest.location
    return [resolve_url(where, shard.url, f"shard {i}", opened=opened)
            for i, shard in enumerate(manifest.shards)]  # fmt: skip
