"""The shard indexes the writers leave beside their shards: a set written with a manifest
is random-access ready, with no second pass over it (docs/format.md, "The shard index").

Every writer of a manifest (:class:`~tarkit.writing.shard_writer.ShardWriter`, the cluster
run, ``tarkit map``) makes the index of each uncompressed shard from the bytes it writes
(:class:`WrittenIndex`) and publishes it just before the shard, so that a shard in place
always has its index beside it (``<shard>.idx``; an overwrite commits both together).
The manifest's ``index`` pattern says where the set's indexes are
(:func:`~tarkit.storage.index_pattern`): beside the shards when their names are one
pattern, else ``index/%06d.idx`` beside the manifest. Which writers' shards get indexes:
:func:`indexed_pattern`. A resumed run keeps the indexes of the shards it keeps right
(:func:`settle_index`): made again in the read that checks a shard, or checked against
the digest its record keeps (:func:`index_digest`).

>>> from tarkit.format.tar_writer import encode_member
>>> index = WrittenIndex()
>>> index.add(encode_member("a.txt", b"hello"))
>>> index.add(encode_member("b.txt", b"world"), "b")
>>> len(index.finish())  # a 64-byte header, 16 bytes a sample and the keys
98
"""

from __future__ import annotations

import re

from ..format.index import SUFFIX, IndexBuilder, span_crc
from ..format.manifest import ShardInfo
from ..format.samples import raw_key
from ..format.tar import END_OF_ARCHIVE
from ..storage import StorageOptions, publish, read_bytes, remove_file
from .patterns import ShardPattern, pending_name

# A shard pattern whose number a manifest's names pattern writes the same way: one %d or
# %0Nd (or %i, %u), or {shard}, {shard:d}, {shard:0Nd}; nothing else converted.
_DECIMAL = re.compile(r"%(?:0[0-9]+)?[diu]|\{shard(?::(?:0[0-9]+)?d)?\}")
_CONVERSION = re.compile(r"%[^%]|\{")


class WrittenIndex:
    """The index of a shard being written: :meth:`add` the bytes of each sample as they
    are written, in order; :meth:`finish` gives the index once the end-of-archive marker
    follows them. The same bytes as :func:`~tarkit.format.index.index_stream` makes by
    reading the shard. Memory: 16 bytes a sample and its key."""

    def __init__(self) -> None:
        self._builder = IndexBuilder()
        self.size = 0  # tar bytes added: where the next sample begins

    def add(self, raw: bytes | memoryview, key: str | None = None) -> None:
        """Add the next sample, the raw blocks of its members; ``key`` when known (else
        read from them: :func:`~tarkit.format.samples.raw_key`)."""
        if key is None:
            key = raw_key(raw)
        self._builder.add(self.size, key, span_crc(raw))
        self.size += len(raw)

    def finish(self) -> bytes:
        """The index's bytes, for the shard of the samples added and its end marker."""
        return self._builder.finish(self.size + len(END_OF_ARCHIVE), self.size)


class SetIndexes:
    """The indexes of the shards of a set being written, ``on`` when the writer's
    ``pattern`` and ``manifest`` ask for them (:func:`indexed_pattern`): each published
    before its shard (:meth:`publish`), under its pending name with ``overwrite`` until
    the set's commit, which moves them by their bytes (:meth:`sizes_of`)."""

    def __init__(
        self, pattern: ShardPattern, manifest: str | None, overwrite: bool,
        storage_options: StorageOptions | None,
    ) -> None:  # fmt: skip
        self.on = indexed_pattern(pattern, manifest)
        self.overwrite = overwrite
        self.storage_options = storage_options
        self.sizes: dict[str, int] = {}  # shard name: the bytes of its index

    def start(self) -> WrittenIndex | None:
        """The index of a new shard (None when the set has none)."""
        return WrittenIndex() if self.on else None

    def place(self, shard: str) -> str:
        """Where the index of ``shard`` is published."""
        return pending_name(index_name(shard)) if self.overwrite else index_name(shard)

    def publish(self, shard: str, index: WrittenIndex) -> None:
        """Publish ``index``, of the complete shard named ``shard``."""
        data = index.finish()
        publish(self.place(shard), data, self.storage_options)
        self.written(shard, len(data))

    def drop(self, shard: str) -> None:
        """Remove the index of ``shard``, which is not published after all."""
        if self.on:
            self.sizes.pop(shard, None)
            remove_file(self.place(shard), self.storage_options)

    def written(self, shard: str, size: int | None) -> None:
        """Note that the index of ``shard``, ``size`` bytes, is published (elsewhere)."""
        if size is not None:
            self.sizes[shard] = size

    def sizes_of(self, shards: list[ShardInfo]) -> list[int] | None:
        """The bytes of the indexes of ``shards``, for the commit (None: no indexes)."""
        return [self.sizes[shard.url] for shard in shards] if self.on else None


def index_name(shard: str) -> str:
    """The index file beside ``shard``.

    >>> index_name("out/train-000003.tar"), index_name("s3://b/s-%06d.tar")
    ('out/train-000003.tar.idx', 's3://b/s-%06d.tar.idx')
    """
    return shard + SUFFIX


def indexed_pattern(pattern: str | ShardPattern, manifest: str | None) -> bool:
    """Whether a writer of the shards ``pattern`` names, with the manifest ``manifest``,
    writes their indexes: with a manifest, for uncompressed shards numbered in decimal
    (a pattern a manifest's names take: one ``%06d`` or ``{shard:06d}``; a pattern of
    another kind, ``%x``, gets none: ``tarindex`` indexes such a set).

    >>> indexed_pattern("s-%06d.tar", "m.json"), indexed_pattern("s-{shard}.tar", "m.json")
    (True, True)
    >>> indexed_pattern("s-%06d.tar.gz", "m.json"), indexed_pattern("s-%04x.tar", "m.json")
    (False, False)
    >>> indexed_pattern("s-%06d.tar", None)
    False
    """
    pattern = ShardPattern.of(pattern)
    if manifest is None or pattern.compression is not None:
        return False
    plain = pattern.text.replace("%%", "").replace("{{", "")
    return len(_DECIMAL.findall(plain)) == 1 and len(_CONVERSION.findall(plain)) == 1


def settle_index(
    shard: str, where: str, made: bytes | None = None, digest: str | None = None,
    storage_options: StorageOptions | None = None,
) -> None:  # fmt: skip
    """Make the index at ``where`` of a shard a resumed run keeps (``shard``) right.

    ``made``: its index as made by reading the shard, published unless the file there has
    those bytes. Without it, the file there is kept when its SHA-256 is ``digest`` (what
    the shard's record says of the index published with it); else the shard is read to
    make it. Raises what reading the shard raises."""
    found = read_bytes(where, storage_options)
    if made is None:
        if found is not None and digest is not None and index_digest(found) == digest:
            return
        from .index import read_shard

        made = read_shard(shard, strict=True, storage_options=storage_options)[1]
        if made is None:  # compressed (an index is asked for uncompressed shards only)
            return
    if found != made:
        publish(where, made, storage_options)


def index_digest(index: bytes) -> str:
    """The SHA-256 of an index's bytes, as a shard's record keeps it (hex)."""
    import hashlib

    return hashlib.sha256(index).hexdigest()
