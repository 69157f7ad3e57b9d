"""Manifests at their locations: read one from a path or URL, publish one, resolve its shards.

The format itself is :mod:`tarkit.format.manifest`; this module only moves it in and out
of storage, through the same opener and the same atomic publish as every shard. Either
version is read (:func:`load_table`); writers publish version 2 (:func:`manifest_files`):
its columns file first, then its JSON, the commit point.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence
from typing import overload

from ..errors import InputError, SourceError
from ..format.columns import Buffer
from ..format.index import SUFFIX
from ..format.manifest import Manifest, ShardInfo, columns_name, dumps_v2
from ..format.manifest_reader import read_table
from ..format.shard_names import ShardNames
from ..format.shard_table import ShardTable
from .filesystems import StorageOptions
from .listing import remove_file
from .locations import FILE, location, relative_url, resolve_url
from .outputs import publish
from .sources import MANIFEST_LIMIT, BoundedReader, open_source, read_bytes

ManifestFile = tuple[str, bytes]  # where a file of a manifest goes, and its bytes
LISTED_INDEX = "index/%06d" + SUFFIX  # indexes of shards not named by one pattern


def load_manifest(spec: str, storage_options: StorageOptions | None = None) -> Manifest:
    """:func:`load_table` as a :class:`~tarkit.format.manifest.Manifest`, an object per
    shard (for the readers that take one)."""
    return load_table(spec, storage_options).to_manifest()


def load_table(spec: str, storage_options: StorageOptions | None = None) -> ShardTable:
    """Read the manifest at ``spec`` (version 1 or 2) into a
    :class:`~tarkit.format.shard_table.ShardTable` in bounded memory: a version 1
    manifest in slices, a version 2 one with its columns file (memory-mapped when local,
    so that only the pages asked for are read).

    Raises :class:`~tarkit.errors.SourceError` when it cannot be read (or holds more than
    :data:`~tarkit.storage.MANIFEST_LIMIT` bytes) and :class:`~tarkit.errors.InputError`
    when it is not a tarkit manifest, or names a columns file that is not a relative
    name beside or below it.
    """
    import mmap

    def columns(name: str) -> Buffer:
        if not _relative(name):
            raise InputError(f'"columns" names {name!r}, not a file beside it', source=spec)
        where = location(resolve_url(spec, name, '"columns"'))
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


def manifest_files(
    where: str, shards: Sequence[ShardInfo], indexed: bool = False, beside: bool = True
) -> list[ManifestFile]:
    """The files of the version 2 manifest of ``shards`` to be published at ``where``
    (names relative to it), in the order they are published: its columns file, then its
    JSON (the commit point). With ``indexed`` (each shard has an index, but a compressed
    one), the manifest says where the indexes are, as :func:`index_places` put them."""
    manifest = manifest_at(where, list(shards))
    table = ShardTable.from_infos(manifest.shards, location=where)
    if indexed:
        table.index = index_pattern(table.names, beside or _inside(manifest))
    name = columns_name(where)
    document, columns = dumps_v2(table, name)
    return [(location(where).sibling(name), columns), (where, document)]


def index_pattern(names: ShardNames, beside: bool = True) -> str:
    """The manifest's ``index`` for shards named ``names`` (relative to the manifest):
    ``<names pattern>.idx``, beside each shard, when the names are one pattern and the
    indexes may lie beside the shards (``beside``); else ``index/%06d.idx`` beside the
    manifest, by the shard's number.

    >>> index_pattern(ShardNames.of(["s-000.tar", "s-001.tar"]))
    's-%03d.tar.idx'
    >>> index_pattern(ShardNames.of(["a.tar", "b.tar"]))
    'index/%06d.idx'
    """
    if beside and names.pattern is not None:
        return names.pattern + SUFFIX
    return LISTED_INDEX


def index_places(where: str, shards: Sequence[str], beside: bool = True) -> list[str]:
    """Where the index of each of the shards ``shards`` goes, as the manifest at
    ``where`` will say (:func:`index_pattern`); ``beside=False`` puts them beside the
    manifest unless the shards lie in its directory or below it.

    >>> index_places("out/m.json", ["out/s-0.tar", "out/s-1.tar"])
    ['out/s-0.tar.idx', 'out/s-1.tar.idx']
    >>> index_places("out/m.json", ["/data/a.tar", "/data/b.tar"], beside=False)
    ['out/index/000000.idx', 'out/index/000001.idx']
    """
    manifest = manifest_at(where, [ShardInfo(shard, 0, 0) for shard in shards])
    names = ShardNames.of([shard.url for shard in manifest.shards])
    pattern = index_pattern(names, beside or _inside(manifest))
    if pattern != LISTED_INDEX:
        return [shard + SUFFIX for shard in shards]
    return [location(where).sibling(pattern % names.number(i)) for i in range(len(shards))]


def save_manifest(
    files: Sequence[ManifestFile], storage_options: StorageOptions | None = None
) -> None:
    """Publish the files of a manifest (:func:`manifest_files`; each atomically, at a
    path or an fsspec URL): the one there before is removed first, so that no reader
    takes it with the new columns; the JSON, the commit point, comes last."""
    remove_file(files[-1][0], storage_options)
    for where, data in files:
        publish(where, data, storage_options)


def _inside(manifest: Manifest) -> bool:
    """Whether every shard of ``manifest`` lies in its directory or below (is named
    relative to it)."""
    return all(_relative(shard.url) for shard in manifest.shards)


def _relative(name: str) -> bool:
    """Whether ``name``, as a manifest names a file, is relative to the manifest."""
    where = location(name)
    if where.kind != FILE or where.path != name or name.startswith("/"):
        return False
    return ".." not in posixpath.normpath(name).split("/")


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


class ShardUrls(Sequence[str]):
    """The shard URLs of a manifest's table, resolved against its location on access
    (:func:`manifest_urls` without a string per shard: a million of them numbered by one
    pattern hold the pattern only). Made, the trust rule has refused what the manifest
    may not name (:func:`~tarkit.storage.resolve_url`): every name of a listed table,
    the first and last of a pattern, whose names differ only in their digits.

    >>> from tarkit.format.shard_table import ShardTable
    >>> from tarkit.format.manifest import ShardInfo
    >>> table = ShardTable.from_infos([ShardInfo(f"s-{i}.tar", 1, 512) for i in range(3)],
    ...                               location="/data/m.json")
    >>> urls = ShardUrls(table)
    >>> len(urls), urls[-1], urls.pattern
    (3, '/data/s-2.tar', '/data/s-%d.tar')
    """

    def __init__(self, table: ShardTable) -> None:
        self.names = table.names
        self.base = table.location
        count = len(self.names)
        checked = range(count) if self.names.pattern is None else {0, count - 1} - {-1}
        for shard in sorted(checked):
            resolve_url(self.base, self.names[shard], f"shard {shard}")

    @property
    def pattern(self) -> str | None:
        """The URLs as one pattern (``%06d`` for the number) when the names are one and
        their number lies in the last part of the path; else None."""
        pattern = self.names.pattern
        if pattern is None or "/" in pattern.partition("%")[2] or not len(self):
            return None
        head, _, tail = self[0].rpartition("/")
        name_tail = pattern.rpartition("/")[2]
        if tail != name_tail % self.names.first:
            return None
        return head.replace("%", "%%") + "/" + name_tail

    def __len__(self) -> int:
        return len(self.names)

    @overload
    def __getitem__(self, shard: int) -> str: ...
    @overload
    def __getitem__(self, shard: slice) -> list[str]: ...
    def __getitem__(self, shard: int | slice) -> str | list[str]:
        if isinstance(shard, slice):
            return [self[i] for i in range(*shard.indices(len(self)))]
        if shard < 0:
            shard += len(self)
        return resolve_url(self.base, self.names[shard])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ShardUrls):
            return (self.names, self.base) == (other.names, other.base)
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ShardUrls({self.names!r} at {self.base!r})"
