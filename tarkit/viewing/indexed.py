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
from ..storage import retry_policy
from .samples import Found

# The torch-free random-access core. It moves from loading/ (whose package imports torch)
# to storage/; until then it comes from loading/, here only.
try:
    from ..storage.catalog import Catalog, open_catalog  # type: ignore[import-not-found]
    from ..storage.indexed_shard import IndexedShard, OpenShards  # type: ignore[import-not-found]
except ImportError:
    from ..loading.catalog import Catalog, open_catalog
    from ..loading.indexed_shard import IndexedShard, OpenShards


class IndexedSamples:
    """The samples of ``catalog``'s shards by position (see the module docstring)."""

    indexed = True
    note: str | None = None

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog
        self._open = OpenShards(self._open_shard)

    @property
    def shards(self) -> int:
        return len(self._catalog)

    @property
    def samples(self) -> int:
        return self._catalog.samples

    def places(self) -> list[str]:
        catalog = self._catalog
        if catalog.names.pattern is not None:
            return [catalog.url(0)]
        return [catalog.url(shard) for shard in range(len(catalog))]

    def read(self, start: int) -> Generator[tuple[int, Sample], None, None]:
        catalog = self._catalog
        for position in range(start, catalog.samples):
            shard, place = catalog.locate(position)
            yield position, self._open.get(shard).sample(place)

    def find(self, key: str, start: int, deadline: float) -> Found:
        """As :meth:`ViewedSamples.find`; reads the shards' indexes, never their bytes."""
        catalog = self._catalog
        if start >= catalog.samples:
            return Found(None, None)
        shard, place = catalog.locate(start)
        while shard < len(catalog):
            keys = self._open.get(shard).index.keys()
            if key in keys[place:]:
                return Found(int(catalog.starts[shard]) + keys.index(key, place), None)
            shard, place = shard + 1, 0
            if shard < len(catalog) and monotonic() > deadline:
                return Found(None, int(catalog.starts[shard]))
        return Found(None, None)

    def close(self) -> None:
        self._open.close()

    def _open_shard(self, shard: int) -> IndexedShard:
        policy = retry_policy(None, None)
        return IndexedShard(self._catalog, shard, cache=None, storage_options=None, policy=policy)


def indexed_samples(source: str | list[str]) -> IndexedSamples | str:
    """The samples of ``source`` by random access; or, when its shards cannot be read
    so (a shard compressed or without its index, a directory without a manifest), why.

    Raises :class:`~tarkit.errors.InputError` and :class:`~tarkit.errors.SourceError`
    for a manifest or index that is there but does not read.
    """
    try:
        catalog = open_catalog(source)
        samples = IndexedSamples(catalog)
        if len(catalog):
            samples._open.get(0)  # its index is there (a manifest does not say)
    except UsageError as exc:  # a refusal: no index, compressed, no manifest
        return str(exc)
    return samples
