"""``tarkit.IndexedDataset``: any sample of indexed tar shards, by its position or its key.

A map-style torch ``Dataset`` over uncompressed shards and their indexes
(docs/format.md, "The shard index"): ``len(ds)``, ``ds[i]``, ``ds.index(key)``,
``ds.key(i)``, and ``ds.shard_sizes`` for :class:`~tarkit.loading.sampler.BlockSampler`.
A thin torch layer: positions, keys, reading and checking samples are
:class:`~tarkit.storage.indexed_shards.IndexedShards` (torch-free, shared with the shell
tools); this module adds the same per-sample stages as the sequential loader
(:mod:`~tarkit.loading.transforms`, the sample dicts of
:func:`~tarkit.loading.reading.sample_dict`), ``handler="skip"`` and torch's sort for the
key table.
"""

from __future__ import annotations

import warnings
from array import array
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset, default_collate, get_worker_info

from ..errors import InputError, SourceError, UsageError
from ..storage import StorageOptions
from ..storage.cache import ShardCache
from ..storage.indexed_shards import IndexedShards, KeyTable, open_indexed
from .reading import sample_dict
from .shared import keep_inherited_shared
from .skips import SharedState, SkipCounts, shard_reason
from .transforms import DROPPED, Transforms


class IndexedDataset(Dataset):
    """Samples of indexed, uncompressed tar shards by position: a map-style ``Dataset``.

    ``source`` as :class:`~tarkit.loading.ShardDataset` takes it: a manifest (version 1
    or 2), a directory holding ``manifest.json``, a brace pattern or a list of shard
    paths or URLs (``http(s)://``, ``s3://``…, with fsspec's ``storage_options``). Each
    shard's index is where the manifest's ``"index"`` pattern says, else beside the shard
    (``<shard>.idx``); a listed shard's index header is read on opening, for its count.
    Opening a manifest reads the manifest only: a shard and its index are opened on the
    first read of one of its samples (so 10⁶ shards open in about a second).

    Positions run over the shards in order, the samples of each in archive order, so
    ``[ds.key(i) for i in range(len(ds))]`` are the keys ``tarcat`` gives over the same
    shards. ``ds[i]`` (negative ``i`` from the end, IndexError out of range) is the sample
    exactly as :class:`~tarkit.loading.ShardDataset` yields it with the same ``decode``,
    ``to_tuple``, ``map`` (webdataset's stages) and ``resize``: a dict of ``__key__``, ``__url__``
    (``__local_path__`` for a local shard) and the fields' bytes when none is given. It
    reads that sample's bytes only: one positioned read of a local file, one ranged
    request over HTTP(S) or S3 (reconnecting at the byte reached, with the timeouts of
    docs/remote.md), or, with ``cache_dir``, a read of the shard cached whole on local
    disk (fetched once per machine, kept only if it matches the manifest's size and
    SHA-256, else its index's size; ``cache_size`` bounds the cache).

    **Never wrong bytes.** A shard's size is checked against its index on its first read
    in each process, and every sample's bytes against its index's crc32, key and the
    strict reader: a shard changed after it was indexed (appended, truncated, rewritten,
    a member replaced by another of the same size) raises
    :class:`~tarkit.errors.InputError` with reason ``STALE`` naming the shard, the
    sample's position in it and its key. Refusals are
    :class:`~tarkit.errors.UsageError`: a compressed shard, a shard without an index
    (naming the command that builds the indexes), an index of another version.

    **handler.** ``"raise"`` raises the first bad sample's error. ``"skip"`` counts it
    in :attr:`skipped` (all workers together), warns once, and returns None for it (a
    sample that ``map`` maps to None is None too): batch with :meth:`collate`, which
    leaves out the Nones.

    **Memory.** The dataset holds the cumulative sample counts (8 bytes a shard) and the
    shard names (a pattern when they are one), never a table per sample. A process opens
    the shards it reads, up to 32 at a time (the least recently used closed first): a
    local index is memory-mapped, a remote one fetched once. Pickled into DataLoader
    workers (fork or spawn) it carries the counts and names only (the manifest's sizes
    and digests too with ``cache_dir``); :meth:`index` builds its key table on first use,
    in the process that asks.
    """

    def __init__(
        self,
        source: str | Sequence[str],
        *,
        decode: Any = None,
        to_tuple: str | Sequence[str] | None = None,
        map: Callable[[Any], Any] | None = None,  # noqa: A002 - the issue's name
        resize: str | None = None,
        handler: str = "raise",
        cache_dir: str | None = None,
        cache_size: int | str | None = None,
        storage_options: StorageOptions | None = None,
        retries: int | None = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__()
        if handler not in ("raise", "skip"):
            raise UsageError(f"handler must be 'raise' or 'skip', not {handler!r}")
        self.handler = handler
        self.cache = ShardCache(cache_dir, cache_size) if cache_dir is not None else None
        self._shards: IndexedShards = open_indexed(
            source, cache=self.cache, storage_options=storage_options, retries=retries,
            timeout=timeout,
        )  # fmt: skip
        self._transforms = Transforms(decode, to_tuple, map, resize=resize, handler=handler,
                                      skip=self._skip)  # fmt: skip
        self._state = SharedState(len(self._shards.catalog))
        self._keys: KeyTable | None = None

    # -- sizes and keys -----------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._shards)

    @property
    def shard_sizes(self) -> torch.Tensor:
        """The samples of each shard, in position order, as a tensor of int64 (for
        :class:`~tarkit.loading.sampler.BlockSampler`)."""
        starts = torch.frombuffer(self._shards.catalog.starts, dtype=torch.int64)
        return starts.diff() if len(starts) else starts

    @property
    def urls(self) -> list[str]:
        """The shards' locations, in position order."""
        catalog = self._shards.catalog
        return [catalog.url(shard) for shard in range(len(catalog))]

    def key(self, index: int) -> str:
        """The key of the sample at position ``index`` (negative from the end)."""
        return self._shards.key(index)

    def index(self, key: str) -> int:
        """The first position of the sample with ``key``; KeyError when there is none.

        The first call builds this process's key table from every shard's index: 16
        bytes a sample (a 64-bit hash of each key and its position, sorted), not the keys
        themselves, which are read from the indexes to confirm a match.
        """
        if self._keys is None:
            self._keys = KeyTable(self._shards, sort=_sort_hashes)
        position = self._keys.find(key)
        if position is None:
            raise KeyError(key)
        return position

    # -- samples ------------------------------------------------------------------------

    def __getitem__(self, index: int) -> Any:
        if get_worker_info() is not None:
            keep_inherited_shared()
        position = self._shards.position(index)
        try:
            sample, opened = self._shards.read(position)
        except (InputError, SourceError) as exc:
            if self.handler == "raise":
                raise
            self._skip(_row(), shard_reason(exc), 1, self._shards.locate(position)[0], str(exc))
            return None
        item = sample_dict(sample, opened.url, opened.local_path)
        if self._transforms.active:
            item = self._transforms.apply(item, _row())
            if item is DROPPED:
                return None
        return item

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        # DataLoader's batched fetch: one call per batch rather than one per sample.
        return [self[i] for i in indices]

    @staticmethod
    def collate(batch: Sequence[Any]) -> Any:
        """torch's ``default_collate`` of ``batch`` without its Nones (the samples that
        ``handler="skip"`` skipped, or that ``map`` dropped); None when all were.
        For ``DataLoader(…, collate_fn=IndexedDataset.collate)``."""
        kept = [item for item in batch if item is not None]
        return default_collate(kept) if kept else None

    @property
    def skipped(self) -> SkipCounts:
        """Samples skipped under ``handler="skip"`` since the dataset was made, all
        DataLoader workers together, by reason (with the first message of each)."""
        return self._state.counts()

    # -- processes ----------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_keys"] = None  # a worker builds its own, if it asks
        return state  # _shards pickles without its open shards (and light, uncached)

    def close(self) -> None:
        """Close this process's open shards (they reopen on the next read)."""
        self._shards.close()

    def _skip(self, row: int, reason: str, samples: int, shard: int | None, message: str) -> None:
        if self._state.add(row, reason, samples, shard, message):
            warnings.warn(
                f"tarkit: skipping bad input ({message}); the counts of skipped samples are in "
                "IndexedDataset.skipped",
                stacklevel=3,
            )

    def __repr__(self) -> str:
        catalog = self._shards.catalog
        return f"IndexedDataset({len(catalog)} shards, {catalog.samples} samples)"


def _row() -> int:
    """This process's row of the skip counts: its DataLoader worker's id, else 0."""
    info = get_worker_info()
    return info.id if info is not None else 0


def _sort_hashes(hashes: array) -> tuple[array, array]:
    """:func:`~tarkit.storage.indexed_shards.sort_hashes` by torch's sort (four times
    faster than Python's)."""
    if not hashes:
        return array("q"), array("q")
    values, order = torch.sort(torch.frombuffer(hashes, dtype=torch.int64), stable=True)
    return array("q", values.tolist()), array("q", order.tolist())
