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
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import torch
import webdataset as wds
from torch.utils.data import IterableDataset, default_collate, get_worker_info

from ..errors import InputError, UsageError
from ..format.manifest import Manifest
from ..storage.cache import ShardCache
from . import splitting
from .batching import batches
from .epochs import EpochClock
from .reading import PieceReader, piece_length
from .shards import resolve_shards
from .skips import WARNED_IDLE, SharedState, SkipCounts
from .transforms import Transforms
from .worker_errors import errors_as_items


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
    (its ``manifest.json``, else its tar files in name order). Local shards that do not
    exist fail here, naming the first. ``manifest`` gives sample counts (for ``len()``,
    ``equal_batches`` and splitting shards into pieces so that every worker has work);
    byte offsets in it let a worker start mid-shard by seeking. Without one, a
    ``manifest.json`` beside the shards is used when it lists exactly those shards;
    ``manifest=False`` reads without any.

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
        manifest: str | Manifest | Literal[False] | None = None,
        equal_batches: bool = False,
        batch_size: int | None = None,
        drop_last: bool = False,
        collate: Callable[[list[Any]], Any] | None = None,
        cache_dir: str | None = None,
        cache_size: int | str | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__()
        if handler not in ("raise", "skip"):
            raise UsageError(f"handler must be 'raise' or 'skip', not {handler!r}")
        if batch_size is not None and batch_size < 1:
            raise UsageError("batch_size must be at least 1")
        if shuffle < 0:
            raise UsageError("shuffle must be a buffer size of 0 or more")
        self.urls, self.infos = resolve_shards(urls, manifest)
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
        self._clock = EpochClock()
        self._reader = PieceReader(
            self.urls, self.infos, handler=handler, cache=self.cache, skip=self._skip
        )
        self._transforms = Transforms(decode, to_tuple, map, handler=handler, skip=self._skip)
        # Set by ShardLoader: workers hand their errors over as items (worker_errors.py).
        self.errors_as_items = False

    # -- epochs, ranks, lengths ------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass read epoch ``epoch`` (the passes after it ``epoch + 1``…).

        Not needed for training: every new pass over the dataset (a DataLoader's
        iteration, persistent workers or not) reads the next epoch by itself
        (:mod:`tarkit.loading.epochs`). Call it in the main process to pin an epoch
        exactly, for reproducibility.
        """
        self._clock.pin(epoch)
        self._state.reset()

    @property
    def epoch(self) -> int:
        """The epoch of the pass under way or last begun; before any, the next one's."""
        return self._clock.epoch

    @property
    def skipped(self) -> SkipCounts:
        """Samples and shards skipped in the current (or last) epoch, summed over workers."""
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

    def pieces(
        self, worker: int = 0, workers: int = 1, epoch: int | None = None
    ) -> list[splitting.Piece]:
        """The pieces of shards one worker of this rank reads in ``epoch`` (default: the
        current one, :attr:`epoch`).

        With a manifest, the cuts between workers fall on multiples of ``batch_size``.
        """
        rank, world = self.rank_and_world()
        epoch = self.epoch if epoch is None else epoch
        if self.infos is not None:
            return splitting.epoch_pieces(
                [info.samples for info in self.infos],
                rank=rank,
                world=world,
                worker=worker,
                workers=workers,
                shuffle=self.shuffle > 0,
                seed=self.seed,
                epoch=epoch,
                equal=self.equal_batches,
                batch_size=self.batch_size,
                drop_last=self.drop_last and bool(self.batch_size),
            )
        order = splitting.shard_order(
            len(self.urls), shuffle=self.shuffle > 0, seed=self.seed, epoch=epoch
        )
        return splitting.whole_shards(order, rank=rank, world=world, worker=worker, workers=workers)

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        rank, _ = self.rank_and_world()
        epoch, new = self._clock.begin(worker, info.seed - info.id if info is not None else None)
        if new:
            self._state.reset()  # skip counts are per epoch
        if worker == 0:  # one worker decides, so that a warning comes once
            self._warn_if_idle(workers, epoch)
        pieces = self.pieces(worker, workers, epoch)
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
            items = batches(
                items,
                self.batch_size,
                self.collate or default_collate,
                partial=not self.drop_last,
                where=self._where,
            )
        if self.errors_as_items and info is not None:
            items = errors_as_items(items)
        return items

    def _where(self, item: Any) -> tuple[str, str]:
        """(shard, key) of the sample an item of the pipeline came from."""
        if self._transforms.active:
            return self._transforms.current
        return item.get("__url__", "-"), item.get("__key__", "?")

    def _warn_if_idle(self, workers: int, epoch: int) -> None:
        """Warn once if a worker of this rank has nothing to read (the same every epoch)."""
        shares = [self.pieces(w, workers, epoch) for w in range(workers)]
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
