"""A view's samples read by position through the shards' indexes (random access).

A page anywhere in a dataset costs what its samples cost: one positioned read (a local
shard) or ranged request (a remote one) each, checked against the shard's index, a shard
changed since it was indexed refused (:mod:`tarkit.format.index`). Opening reads the
manifest, or each listed shard's index header; a shard's index is read when one of its
samples is first shown, at most 32 shards open at a time.
"""

from __future__ import annotations

from collections.abc import Generator
from time import monotonic

from ..errors import UsageError
from ..format.samples import Sample
from ..storage.indexed_shards import IndexedShards, open_indexed
from .samples import Found


class IndexedSamples:
    """The samples of indexed ``shards`` by position (see the module docstring)."""

    indexed = True
    note: str | None = None

    def __init__(self, shards: IndexedShards) -> None:
        self._shards = shards

    @property
    def shards(self) -> int:
        return len(self._shards.catalog)

    @property
    def samples(self) -> int:
        return len(self._shards)

    def places(self) -> list[str]:
        catalog = self._shards.catalog
        if catalog.names.pattern is not None:
            return [catalog.url(0)]
        return [catalog.url(shard) for shard in range(len(catalog))]

    def read(self, start: int) -> Generator[tuple[int, Sample], None, None]:
        for position in range(start, len(self._shards)):
            yield position, self._shards.read(position)[0]

    def find(self, key: str, start: int, deadline: float) -> Found:
        """As :meth:`ViewedSamples.find`; reads the shards' indexes, never their bytes."""
        shards = self._shards
        catalog = shards.catalog
        if start >= len(shards):
            return Found(None, None)
        shard, place = shards.locate(start)
        while shard < len(catalog):
            keys = shards.shard(shard).index.keys()
            if key in keys[place:]:
                return Found(int(catalog.starts[shard]) + keys.index(key, place), None)
            shard, place = shard + 1, 0
            if shard < len(catalog) and monotonic() > deadline:
                return Found(None, int(catalog.starts[shard]))
        return Found(None, None)

    def close(self) -> None:
        self._shards.close()


def indexed_samples(source: str | list[str]) -> IndexedSamples | str:
    """The samples of ``source`` by random access; or, when its shards cannot be read
    so (a shard compressed or without its index, a directory without a manifest), why.

    Raises :class:`~tarkit.errors.InputError` and :class:`~tarkit.errors.SourceError`
    for a manifest or index that is there but does not read.
    """
    try:
        shards = open_indexed(source)
        if len(shards.catalog):
            shards.shard(0)  # its index is there (a manifest does not say)
    except UsageError as exc:  # a refusal: no index, compressed, no manifest
        return str(exc)
    return IndexedSamples(shards)
