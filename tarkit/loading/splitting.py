"""Who reads what in an epoch: shards and sample ranges split over ranks and workers.

Pure arithmetic, no torch. Every function is a function of its arguments only, so each
rank and each DataLoader worker computes its own share and the shares of all of them
cover every sample of the epoch exactly once.

Without sample counts, whole shards are dealt out: first over ranks, then over the
workers of a rank. With sample counts (a manifest), the epoch is one sequence of samples
(the shards in epoch order, one after another) cut into contiguous ranges: one per rank,
then one per worker on batch boundaries, so a rank's number of batches does not depend
on how many workers it has. A range becomes :class:`Piece` s: a shard, or part of one.

>>> whole_shards(list(range(5)), rank=1, world=2, worker=0, workers=1)
[Piece(shard=1, start=0, stop=None), Piece(shard=3, start=0, stop=None)]
>>> epoch_pieces([4, 4, 4], rank=0, world=2, worker=0, workers=1)
[Piece(shard=0, start=0, stop=None), Piece(shard=1, start=0, stop=2)]
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from ..seeds import stable_seed


@dataclass(frozen=True)
class Piece:
    """Samples ``start`` up to ``stop`` (exclusive; None: the end) of shard number ``shard``."""

    shard: int
    start: int = 0
    stop: int | None = None


def shard_order(
    count: int, *, shuffle: bool = False, seed: int = 0, epoch: int = 0
) -> Sequence[int]:
    """The order in which an epoch visits ``count`` shards: the same on every rank.

    8 bytes a shard when shuffled (the permutation of a list of them, as before), none
    when not (a ``range``): a worker over a million shards makes its own.

    >>> list(shard_order(4))
    [0, 1, 2, 3]
    >>> shard_order(4, shuffle=True, seed=0, epoch=0) != shard_order(4, shuffle=True, epoch=1)
    True
    """
    if not shuffle:
        return range(count)
    order = array("q", range(count))
    random.Random(stable_seed("shard order", seed, epoch)).shuffle(order)  # type: ignore[arg-type]
    return order


def whole_shards(
    order: Sequence[int], *, rank: int, world: int, worker: int, workers: int
) -> list[Piece]:
    """The whole shards one worker of one rank reads: dealt over ranks, then over workers.

    >>> whole_shards([3, 1, 0, 2], rank=0, world=1, worker=1, workers=2)
    [Piece(shard=1, start=0, stop=None), Piece(shard=2, start=0, stop=None)]
    """
    return [Piece(shard) for shard in list(order)[rank::world][worker::workers]]


def rank_range(
    total: int,
    *,
    rank: int,
    world: int,
    equal: bool = False,
    batch_size: int | None = None,
    drop_last: bool = False,
) -> tuple[int, int]:
    """The range of the epoch's ``total`` samples that ``rank`` reads.

    Ranks get contiguous ranges whose sizes differ by at most one. With ``equal``
    every rank gets ``total // world`` samples (the rest of its range is dropped);
    with ``drop_last`` and a ``batch_size`` the size is rounded down to whole batches.
    Either way fewer than ``world * batch_size`` samples are dropped.

    >>> [rank_range(10, rank=r, world=3) for r in range(3)]
    [(0, 3), (3, 6), (6, 10)]
    >>> [rank_range(10, rank=r, world=3, equal=True) for r in range(3)]
    [(0, 3), (3, 6), (6, 9)]
    """
    start = total * rank // world
    stop = total * (rank + 1) // world
    count = total // world if equal else stop - start
    if drop_last and batch_size:
        count -= count % batch_size
    return start, start + count


def worker_range(
    start: int, stop: int, *, worker: int, workers: int, batch_size: int | None = None
) -> tuple[int, int]:
    """The part of a rank's range ``[start, stop)`` one of its workers reads.

    The cuts fall on multiples of ``batch_size`` from ``start``, so only the last
    worker with samples can have a partial batch: the rank yields
    ``ceil((stop - start) / batch_size)`` batches whatever the number of workers.

    >>> [worker_range(0, 10, worker=w, workers=3, batch_size=4) for w in range(3)]
    [(0, 4), (4, 8), (8, 10)]
    """
    size = batch_size or 1
    count = stop - start
    batches = -(-count // size)
    first = batches * worker // workers
    last = batches * (worker + 1) // workers
    return start + min(count, first * size), start + min(count, last * size)


def range_pieces(counts: Sequence[int], order: Sequence[int], start: int, stop: int) -> list[Piece]:
    """The pieces holding samples ``[start, stop)`` of the shards read in ``order``.

    ``counts[i]`` is the number of samples of shard ``i``. A piece that reaches the
    end of its shard has ``stop`` None (the reader then checks that the shard ends there).

    >>> range_pieces([3, 3], [1, 0], 2, 5)
    [Piece(shard=1, start=2, stop=None), Piece(shard=0, start=0, stop=2)]
    """
    pieces: list[Piece] = []
    position = 0
    for shard in order:
        count = counts[shard]
        low, high = max(start, position), min(stop, position + count)
        if low < high:
            end = None if high - position == count else high - position
            pieces.append(Piece(shard, low - position, end))
        position += count
        if position >= stop:
            break
    return pieces


def epoch_pieces(
    counts: Sequence[int],
    *,
    rank: int,
    world: int,
    worker: int,
    workers: int,
    shuffle: bool = False,
    seed: int = 0,
    epoch: int = 0,
    equal: bool = False,
    batch_size: int | None = None,
    drop_last: bool = False,
) -> list[Piece]:
    """The pieces one worker of one rank reads in an epoch, from the shards' sample counts."""
    order = shard_order(len(counts), shuffle=shuffle, seed=seed, epoch=epoch)
    low, high = rank_range(
        sum(counts),
        rank=rank,
        world=world,
        equal=equal,
        batch_size=batch_size,
        drop_last=drop_last,
    )
    low, high = worker_range(low, high, worker=worker, workers=workers, batch_size=batch_size)
    return range_pieces(counts, order, low, high)


def rank_length(
    total: int,
    *,
    rank: int,
    world: int,
    equal: bool = False,
    batch_size: int | None = None,
    drop_last: bool = False,
) -> int:
    """What ``rank`` yields in an epoch: samples, or batches when ``batch_size`` is given.

    >>> rank_length(10, rank=0, world=3, batch_size=2), rank_length(10, rank=2, world=3)
    (2, 4)
    """
    low, high = rank_range(
        total, rank=rank, world=world, equal=equal, batch_size=batch_size, drop_last=drop_last
    )
    if not batch_size:
        return high - low
    return -(-(high - low) // batch_size)
