"""Random access to indexed shards: a sample by its position, the positions of keys.

:class:`IndexedShards` is what ``tarkit.IndexedDataset`` (a torch layer over it) and the
shell tools (``tarcat --keys``, ``tarfirst --key``, ``tarshow --position``/``--key``) read
an indexed dataset with, importing no torch. Positions run over the shards in order, the
samples of each in archive order: the order ``tarcat`` reads them in. Each rule has its
one place here or below:

- which shards, their counts, where their indexes are: :mod:`~tarkit.storage.catalog`;
- a position's shard (:meth:`IndexedShards.locate`), a negative one counted from the end
  (:meth:`IndexedShards.position`);
- reading sample i (:meth:`IndexedShards.read`): one positioned read or ranged request of
  its span, checked against its index, a shard changed since it was indexed refused with
  reason ``STALE`` (:mod:`~tarkit.storage.indexed_shard`);
- keys to positions: one pass over the shards' indexes in order, never their bytes
  (:meth:`IndexedShards.positions`, for a few keys once), or a table made by that pass
  for many lookups (:class:`KeyTable`, 16 bytes a sample). A key's position is its first.

>>> import io, os, tempfile
>>> from tarkit.format.index import index_stream
>>> from tarkit.format.tar_writer import TarWriter
>>> shard = os.path.join(tempfile.mkdtemp(), "s.tar")
>>> with open(shard, "wb") as file, TarWriter(file) as writer:
...     for key in "abc":
...         writer.add(f"{key}.txt", key.encode() * 3)
>>> with open(shard, "rb") as file, open(shard + ".idx", "wb") as index:
...     _ = index.write(index_stream(file, shard))
>>> shards = open_indexed([shard])
>>> len(shards), shards.key(-1), list(shards.positions({"c", "a", "z"}))
(3, 'c', [0, 2])
>>> shards.read(1)[0].data(), KeyTable(shards).find("c")
({'txt': b'bbb'}, 2)
"""

from __future__ import annotations

import operator
from array import array
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..format.samples import Sample, SkipLog
from .catalog import Catalog, open_catalog
from .filesystems import StorageOptions
from .indexed_shard import IndexedShard, OpenShards
from .retrying import RetryPolicy, retry_policy

if TYPE_CHECKING:  # the shell tools read without a cache, and start without it
    from .cache import ShardCache


class IndexedShards:
    """The shards of ``catalog`` read by position (see the module docstring).

    Shards are opened on first use, their indexes only until a sample of theirs is read,
    at most 32 at a time (the least recently used closed first; a forked process opens
    its own). ``cache``: remote shards are read from local copies made whole first
    (:class:`~tarkit.storage.cache.ShardCache`). Remote reads follow ``retries`` and
    ``timeout`` (None: from ``TARKIT_RETRIES``/``TARKIT_TIMEOUT``; malformed ones raise
    :class:`~tarkit.errors.UsageError` here). Pickles without its open shards, and
    without the manifest's sizes and digests unless it caches.
    """

    def __init__(
        self,
        catalog: Catalog,
        *,
        cache: ShardCache | None = None,
        storage_options: StorageOptions | None = None,
        retries: int | None = None,
        timeout: float | None = None,
    ) -> None:
        retry_policy(retries, timeout, base=RetryPolicy())  # malformed settings fail here
        self.catalog = catalog
        self.cache = cache
        self.storage_options = storage_options
        self.retries, self.timeout = retries, timeout
        self._shards = OpenShards(self._open_shard)

    def __len__(self) -> int:
        return self.catalog.samples

    def position(self, index: int) -> int:
        """``index`` as a position (0 ≤ it < len), counted from the end when negative;
        IndexError out of range, TypeError for what is not an integer."""
        position = operator.index(index)
        total = self.catalog.samples
        if position < 0:
            position += total
        if not 0 <= position < total:
            raise IndexError(f"sample {index} of a dataset of {total}")
        return position

    def locate(self, position: int) -> tuple[int, int]:
        """(shard, place in it) of ``position`` (0 ≤ it < len)."""
        return self.catalog.locate(position)

    def shard(self, shard: int) -> IndexedShard:
        """Shard number ``shard``, opened (its index loaded and checked)."""
        return self._shards.get(shard)

    def key(self, index: int) -> str:
        """The key of the sample at ``index`` (negative from the end), from its index."""
        shard, place = self.locate(self.position(index))
        return self.shard(shard).index.key(place)

    def read(
        self, index: int, *, skips: SkipLog | None = None, strict: bool = False
    ) -> tuple[Sample, IndexedShard]:
        """The sample at ``index`` (negative from the end) and its shard: one read of its
        bytes, checked against its index (:meth:`IndexedShard.sample
        <tarkit.storage.indexed_shard.IndexedShard.sample>`, which says what it raises)."""
        shard, place = self.locate(self.position(index))
        opened = self.shard(shard)
        return opened.sample(place, skips=skips, strict=strict), opened

    def samples(
        self, positions: Iterable[int], *, skips: SkipLog | None = None, strict: bool = False
    ) -> Iterator[Sample]:
        """The samples at ``positions``, in that order, each read as :meth:`read` does."""
        for position in positions:
            yield self.read(position, skips=skips, strict=strict)[0]

    def keys(self) -> Iterator[tuple[int, list[str]]]:
        """(position of its first sample, its keys in order) for each shard, in order:
        its index read, not its bytes."""
        starts = self.catalog.starts
        for shard in range(len(self.catalog)):
            yield int(starts[shard]), self.shard(shard).index.keys()

    def positions(self, keys: Collection[str]) -> Iterator[int]:
        """Every position whose key is one of ``keys``, in position order: one pass over
        the shards' indexes (a key in two shards gives both; stopping early stops the
        pass). For many lookups of one key at a time, a :class:`KeyTable`."""
        wanted = keys if isinstance(keys, (set, frozenset)) else frozenset(keys)
        for start, shard_keys in self.keys():
            yield from [start + at for at, key in enumerate(shard_keys) if key in wanted]

    def close(self) -> None:
        """Close this process's open shards (they reopen on the next read)."""
        self._shards.close()

    def _open_shard(self, shard: int) -> IndexedShard:
        policy = retry_policy(self.retries, self.timeout)
        return IndexedShard(self.catalog, shard, cache=self.cache,
                            storage_options=self.storage_options, policy=policy)  # fmt: skip

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_shards"] = None  # a process opens its own
        if self.cache is None:
            state["catalog"] = self.catalog.light()  # counts and names only
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._shards = OpenShards(self._open_shard)

    def __repr__(self) -> str:
        return f"IndexedShards({len(self.catalog)} shards, {self.catalog.samples} samples)"


def open_indexed(
    source: str | Sequence[str],
    *,
    cache: ShardCache | None = None,
    storage_options: StorageOptions | None = None,
    retries: int | None = None,
    timeout: float | None = None,
) -> IndexedShards:
    """The indexed shards ``source`` names: a manifest, its directory, a brace pattern or
    a list of shard URLs (:func:`~tarkit.storage.catalog.open_catalog`, which says what
    it raises)."""
    return IndexedShards(open_catalog(source, storage_options), cache=cache,
                         storage_options=storage_options, retries=retries,
                         timeout=timeout)  # fmt: skip


HashSort = Callable[[array], tuple[Sequence[int], Sequence[int]]]


def sort_hashes(hashes: array) -> tuple[Sequence[int], Sequence[int]]:
    """(``hashes`` sorted, the position of each in ``hashes``), equal hashes in position
    order: :class:`KeyTable`'s sort, in Python (about 4 s for 10⁶ keys).

    >>> sort_hashes(array("q", [5, -1, 5, 2]))
    (array('q', [-1, 2, 5, 5]), array('q', [1, 3, 0, 2]))
    """
    order = sorted(range(len(hashes)), key=hashes.__getitem__)  # stable
    return array("q", map(hashes.__getitem__, order)), array("q", order)


class KeyTable:
    """Every key's first position, for many lookups: this process's 64-bit ``hash`` of
    each key, sorted, with the positions in that order (16 bytes a sample, none per key
    object), made by one pass over the indexes (:meth:`IndexedShards.keys`). A hash that
    matches is confirmed against the key in the index. ``sort`` sorts the hashes as
    :func:`sort_hashes` does (a caller with a faster sort, torch's, passes it).
    """

    def __init__(self, shards: IndexedShards, sort: HashSort = sort_hashes) -> None:
        hashes = array("q")
        for _, keys in shards.keys():
            hashes.extend(map(hash, keys))
        self.hashes, self.positions = sort(hashes)
        self.shards = shards

    def find(self, key: str) -> int | None:
        """The first position of ``key``; None when no sample has it."""
        wanted = hash(key)
        hashes = self.hashes
        at = bisect_left(hashes, wanted)
        while at < len(hashes) and hashes[at] == wanted:
            position = int(self.positions[at])
            if self.shards.key(position) == key:
                return position
            at += 1
        return None
