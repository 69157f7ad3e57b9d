"""The items of a dataset encoded by worker processes of this machine, in order: the
local engine of :func:`~tarkit.shard_dataset` (its writing is in
:mod:`tarkit.writing.from_dataset`).

A map-style dataset is read and encoded in ``DataLoader`` worker processes, a chunk of
indices per task; an iterable is read in this process and its items are encoded in a
pool of forked processes, a window at a time. Either way each item comes back as its
:class:`~tarkit.writing.items.EncodedItem` (all its samples) or its
:class:`~tarkit.writing.items.ItemFailure`, in the order asked for, whatever the number
of workers.

torch is imported only when ``num_workers > 0`` for a map-style dataset.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..errors import UsageError
from .items import EncodedItem, ItemEncoder, ItemFailure

CHUNK = 8  # items per worker task: fewer, larger messages between processes
ItemResult = EncodedItem | ItemFailure


class _Chunks:
    """A map-style dataset over chunks of indices, for the DataLoader."""

    def __init__(self, encoder: ItemEncoder) -> None:
        self.encoder = encoder

    def __getitem__(self, indices: Sequence[int]) -> list[ItemResult]:
        return self.encoder(indices)


def _identity(batch: Any) -> Any:
    return batch


def close_results(results: Iterator[Any]) -> None:
    """Stop the workers behind ``results`` (a generator of this module)."""
    close = getattr(results, "close", None)
    if close is not None:
        close()


def _chunks(order: Sequence[int], size: int) -> list[list[int]]:
    return [list(order[i : i + size]) for i in range(0, len(order), size)]


def map_results(
    encoder: ItemEncoder, order: Sequence[int], num_workers: int
) -> Iterator[ItemResult]:
    """The encoded items of a map-style dataset, in ``order``."""
    if num_workers == 0:
        for index in order:
            yield from encoder((index,))
        return
    try:
        from torch.utils.data import DataLoader
    except ImportError:
        raise UsageError(
            "num_workers > 0 runs DataLoader workers and needs torch (pip install 'tarkit[torch]')"
        ) from None
    loader: Any = DataLoader(
        _Chunks(encoder),  # type: ignore[arg-type]
        batch_size=None,
        sampler=_chunks(order, CHUNK),  # type: ignore[arg-type]
        num_workers=num_workers,
        collate_fn=_identity,
        prefetch_factor=4,
    )
    iterator = iter(loader)
    try:
        for chunk in iterator:
            yield from chunk
    finally:
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


_ITERABLE_ENCODER: ItemEncoder | None = None


def _encode_in_worker(pair: tuple[int, Any]) -> ItemResult:
    assert _ITERABLE_ENCODER is not None
    return _ITERABLE_ENCODER.encode(*pair)


def iterable_results(
    encoder: ItemEncoder, items: Iterable[tuple[int, Any]], num_workers: int
) -> Iterator[ItemResult]:
    """The encoded items of an iterable's (index, item) pairs, in order.

    Workers are forked processes that inherit the encoder (so ``to_sample`` need not be
    picklable; the items must be). Items are handed out a window at a time, so memory
    stays bounded however long the iterable is.
    """
    if num_workers == 0:
        for index, item in items:
            yield encoder.encode(index, item)
        return
    import multiprocessing

    global _ITERABLE_ENCODER
    _ITERABLE_ENCODER = encoder
    window = num_workers * CHUNK * 4
    try:
        pool = multiprocessing.get_context("fork").Pool(num_workers)
    finally:
        _ITERABLE_ENCODER = None
    iterator = iter(items)
    try:
        while True:
            batch = list(itertools.islice(iterator, window))
            if not batch:
                break
            yield from pool.imap(_encode_in_worker, batch, chunksize=CHUNK)
        pool.close()
    finally:
        pool.terminate()
        pool.join()


__all__ = ["CHUNK", "close_results", "iterable_results", "map_results"]
