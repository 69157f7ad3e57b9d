"""A torch ``IterableDataset`` over tar shards that gives every sample exactly once.

:class:`ShardDataset` puts together the loader's parts, one module each: which shards
(:mod:`~tarkit.loading.shards`), who reads what in an epoch
(:mod:`~tarkit.loading.splitting`), reading pieces of shards with tarkit's strict reader
(:mod:`~tarkit.loading.reading`), webdataset's per-sample stages
(:mod:`~tarkit.loading.transforms`) and what was skipped (:mod:`~tarkit.loading.skips`).
Samples are webdataset-style dicts (``__key__``, ``__url__`` and the fields, lowercased,
as bytes); webdataset's own ``shuffle`` and ``batched`` stages buffer and batch them.

torch is imported by this folder only.
"""

from __future__ import annotations

import os
import random
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
import webdataset as wds
from torch.utils.data import IterableDataset, default_collate, get_worker_info

from ..errors import InputError, UsageError
from ..format.manifest import Manifest
from ..storage import Reconnection, RetryPolicy, retry_policy
from ..storage.cache import ShardCache
from . import splitting
from .reading import PieceReader, piece_length
from .shards import resolve_shards
from .skips import WARNED_IDLE, SharedState, SkipCounts
from .transforms import Transforms


def distributed_rank() -> tuple[int, int]:
    """(rank, world size): from ``torch.distributed`` when initialised, else RANK/WORLD_SIZE."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise UsageError("RANK and WORLD_SIZE must be integers") from None


class ShardDataset(IterableDataset):
    """Samples of tar shards, each delivered exactly once per epoch over ranks and workers.

    ``urls``: a brace pattern, a list of them, a manifest (``.json``) or a directory
    (its ``manifest.json``, else its tar files in name order). ``manifest`` gives sample
    counts (for ``len()``, ``equal_batches`` and splitting shards into pieces so that
    every worker has work); byte offsets in it let a worker start mid-shard by seeking.

    ``shuffle``: shuffle buffer size; any value above 0 also shuffles the shard order.
    Orders are a function of ``(seed, epoch, rank, worker)`` only. ``decode``,
    ``to_tuple`` and ``map`` are passed to webdataset's stages of those names, in that
    order; ``batch_size`` makes the dataset yield batches made by ``collate`` (torch's
    ``default_collate``) inside the workers; ``drop_last`` drops a partial last batch.

    ``handler="raise"`` stops at the first bad shard or sample with an
    :class:`~tarkit.errors.InputError` or :class:`~tarkit.errors.SourceError` naming
    shard, key and cause; ``"skip"`` skips it, warns once and counts it in
    :attr:`skipped`. ``equal_batches`` (needs a manifest) makes every rank yield the same
    number of samples and batches. ``cache_dir``/``cache_size``: see :mod:`tarkit.storage.cache`.
    ``rank``/``world_size`` override the detected ones.

    Remote shards (and manifests) are read with ``storage_options`` (fsspec's), and a read
    that drops or stalls reconnects at the byte it reached: at most ``retries``
    reconnections in a row, ``timeout`` seconds to connect and between bytes (None:
    ``TARKIT_RETRIES``/``TARKIT_TIMEOUT`` in the workers, else 5 and 30 s; docs/remote.md).
    Reconnections are counted in ``skipped.reconnections``, with one warning per epoch.
    """

    def __init__(
        self,
        urls: str | Sequence[str] | None = None,
        *,
        shuffle: int = 0,
        seed: int = 0,
        decode: Any = None,
        to_tuple: str | Sequence[str] | None = None,
        map: Callable[[Any], Any] | None = None,  # noqa: A002 - the issue's name
        handler: str = "raise",
        manifest: str | Manifest | None = None,
        equal_batches: bool = False,
        batch_size: int | None = None,
        drop_last: bool = False,
        collate: Callable[[list[Any]], Any] | None = None,
        cache_dir: str | None = None,
        cache_size: int | str | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        retries: int | None = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__()
        if handler not in ("raise", "skip"):
            raise UsageError(f"handler must be 'raise' or 'skip', not {handler!r}")
        if batch_size is not None and batch_size < 1:
            raise UsageError("batch_size must be at least 1")
        if shuffle < 0:
            raise UsageError("shuffle must be a buffer size of 0 or more")
        retry_policy(retries, timeout, base=RetryPolicy())  # malformed settings fail here
        self.urls, self.infos = resolve_shards(urls, manifest, storage_options)
        if equal_batches and self.infos is None:
            raise UsageError(
                "equal_batches needs a manifest with sample counts (tarindex -o manifest.json)"
            )
        self.shuffle = int(shuffle)
        self.seed = seed
        self.decode = decode
        self.to_tuple = to_tuple
        self.map = map
        self.handler = handler
        self.equal_batches = equal_batches
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.collate = collate
        self.cache = ShardCache(cache_dir, cache_size) if cache_dir is not None else None
        self.rank = rank
        self.world_size = world_size
        self._state = SharedState(len(self.urls))
        self._reader = PieceReader(
            self.urls, self.infos, handler=handler, cache=self.cache, skip=self._skip,
            storage_options=storage_options, retries=retries, timeout=timeout,
            reconnected=self._reconnected,
        )  # fmt: skip
        self._transforms = Transforms(decode, to_tuple, map, handler=handler, skip=self._skip)

    # -- epochs, ranks, lengths ------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch``: it decides the orders; skip counts start again from 0.

        Call it in the main process before iterating (workers, persistent or not,
        read it when their epoch starts).
        """
        self._state.epoch = epoch
        self._state.reset()

    @property
    def epoch(self) -> int:
        return self._state.epoch

    @property
    def skipped(self) -> SkipCounts:
        """Samples and shards skipped since the last :meth:`set_epoch`, summed over workers."""
        return self._state.counts()

    def rank_and_world(self) -> tuple[int, int]:
        """This process's (rank, world size)."""
        detected = distributed_rank()
        rank = detected[0] if self.rank is None else self.rank
        world = detected[1] if self.world_size is None else self.world_size
        if world < 1 or not 0 <= rank < world:
            raise UsageError(f"rank {rank} is not in a world of size {world}")
        return rank, world

    def __len__(self) -> int:
        """Samples (or batches, with ``batch_size``) this rank yields per epoch.

        Exact when nothing is skipped (and always with ``equal_batches``). Needs a
        manifest: without sample counts it raises TypeError, as ``len()`` of an
        unsized object does. When a DataLoader batches the samples instead of the
        dataset, each worker ends its share with a partial batch of its own, so an epoch
        may have up to ``num_workers - 1`` batches more than ``len(DataLoader)`` says:
        let the dataset batch (``tarkit.loader``) for an exact count (docs/loading.md).
        """
        if self.infos is None:
            raise TypeError("len() of a ShardDataset needs a manifest with sample counts")
        rank, world = self.rank_and_world()
        return splitting.rank_length(
            sum(info.samples for info in self.infos),
            rank=rank,
            world=world,
            equal=self.equal_batches,
            batch_size=self.batch_size,
            drop_last=self.drop_last,
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        # A spawned worker cannot see the parent's process group: take the rank along.
        if self.rank is None or self.world_size is None:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                state["rank"], state["world_size"] = dist.get_rank(), dist.get_world_size()
        return state

    # -- iteration ------------------------------------------------------------------

    def pieces(self, worker: int = 0, workers: int = 1) -> list[splitting.Piece]:
        """The pieces of shards one worker of this rank reads in the current epoch.

        With a manifest, the cuts between workers fall on multiples of ``batch_size``.
        """
        rank, world = self.rank_and_world()
        if self.infos is not None:
            return splitting.epoch_pieces(
                [info.samples for info in self.infos],
                rank=rank,
                world=world,
                worker=worker,
                workers=workers,
                shuffle=self.shuffle > 0,
                seed=self.seed,
                epoch=self.epoch,
                equal=self.equal_batches,
                batch_size=self.batch_size,
                drop_last=self.drop_last and bool(self.batch_size),
            )
        order = splitting.shard_order(
            len(self.urls), shuffle=self.shuffle > 0, seed=self.seed, epoch=self.epoch
        )
        return splitting.whole_shards(order, rank=rank, world=world, worker=worker, workers=workers)

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        rank, _ = self.rank_and_world()
        if worker == 0:  # one worker decides, so that a warning comes once
            self._warn_if_idle(workers)
        epoch = self.epoch
        pieces = self.pieces(worker, workers)
        items: Iterator[Any] = self._reader.samples(pieces, worker)
        if self.shuffle:
            rng = random.Random(splitting.stable_seed("samples", self.seed, epoch, rank, worker))
            items = wds.shuffle(self.shuffle, initial=min(self.shuffle, 100), rng=rng)(items)
        if self._transforms.active:
            items = self._transforms(items, worker)
        if self.equal_batches and self.infos is not None:
            infos = self.infos
            expected = sum(piece_length(piece, infos[piece.shard]) for piece in pieces)
            items = self._padded(items, expected, worker, rank)
        if self.batch_size:
            collate = self.collate or default_collate
            items = wds.batched(self.batch_size, collation_fn=collate, partial=not self.drop_last)(
                items
            )
        return items

    def _warn_if_idle(self, workers: int) -> None:
        """Warn once if a worker of this rank has nothing to read (the same every epoch)."""
        shares = [self.pieces(w, workers) for w in range(workers)]
        if all(shares) or not self._state.first(WARNED_IDLE):
            return
        _, world = self.rank_and_world()
        if self.infos is None:
            what = f"{len(self.urls)} shards"
            hint = " (a manifest with offsets lets tarkit split shards: tarindex --offsets)"
        else:
            what = f"{sum(i.samples for i in self.infos)} samples"
            hint = (
                f" (in batches of {self.batch_size})"
                if self.batch_size and self.batch_size > 1
                else ""
            )
        warnings.warn(
            f"tarkit: {what} for {world} ranks x {workers} workers: some workers have nothing "
            f"to read{hint}",
            stacklevel=3,
        )

    def _padded(self, items: Iterator[Any], expected: int, row: int, rank: int) -> Iterator[Any]:
        """Exactly ``expected`` items: skipped samples are made up by repeating the last one."""
        count = 0
        last: Any = None
        for item in items:
            count += 1
            last = item
            yield item
        if count < expected:
            if count == 0:
                raise InputError(
                    f"every sample of rank {rank} worker {row} was skipped: "
                    "equal_batches cannot make them up",
                    source=self.urls[0],
                )
            self._state.repeat(row, expected - count)
            for _ in range(expected - count):
                yield last

    def _skip(self, row: int, reason: str, samples: int, shard: int | None, message: str) -> None:
        if self._state.add(row, reason, samples, shard, message):
            warnings.warn(
                f"tarkit: skipping bad input ({message}); the counts of skipped samples and "
                "shards are in ShardDataset.skipped",
                stacklevel=2,
            )

    def _reconnected(self, event: Reconnection) -> None:
        if self._state.reconnected():
            warnings.warn(
                f"tarkit: {event}; reconnections are counted in ShardDataset.skipped.reconnections",
                stacklevel=2,
            )
