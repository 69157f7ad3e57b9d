"""Which places of an epoch's order each rank delivers, across elastic resumes.

Pure arithmetic, no torch. An epoch's order is one sequence of ``total`` places (a
:class:`~tarkit.loading.block_order.BlockOrder` says which dataset position is at each);
ranks take contiguous parts of it, cut as :func:`~tarkit.loading.splitting.rank_range`
cuts a loader's epoch: sizes differ by at most one, or with ``drop_last`` every part is
``total // world`` long and fewer than ``world`` places are left out.

A *generation* is a stretch of an epoch on one topology (number of ranks, ``drop_last``).
An elastic resume ends it where its ranks stood — in step: each rank had delivered the
same count, up to its part's length — and begins a new one over what is left: each rank's
undelivered rest and what ``drop_last`` left out, in the order's sequence. That rest is a
sequence of its own, cut into parts for the new ranks the same way. A place of a
generation maps back to a place of the epoch's order by arithmetic (a binary search over
ranks per generation), never by lists, so a rank's part is a few *runs* of consecutive
places of the epoch's order, and a rank keeps reading blocks together.

>>> list(rank_runs(10, [], rank=1, world=2, drop_last=False, delivered=0))
[(5, 5)]
>>> ended = Generation(world=2, drop_last=False, delivered=3)  # places 0-2 and 5-7 delivered
>>> list(rank_runs(10, [ended], rank=0, world=1, drop_last=False, delivered=0))
[(3, 2), (8, 2)]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from .splitting import rank_range


@dataclass(frozen=True)
class Generation:
    """An ended stretch of an epoch: its topology and what each of its ranks had delivered
    (every rank the same count, up to its part's length)."""

    world: int
    drop_last: bool
    delivered: int


def part(total: int, *, rank: int, world: int, drop_last: bool) -> tuple[int, int]:
    """The places ``[start, stop)`` of a sequence of ``total`` that ``rank`` takes.

    >>> [part(11, rank=r, world=3, drop_last=True) for r in range(3)]
    [(0, 3), (3, 6), (7, 10)]
    """
    return rank_range(total, rank=rank, world=world, equal=drop_last)


def longest_part(total: int, *, world: int, drop_last: bool) -> int:
    """The length of the longest part of a sequence of ``total`` over ``world`` ranks."""
    return total // world if drop_last else -(-total // world)


def total_after(total: int, history: Sequence[Generation]) -> int:
    """The length of the sequence the generation after ``history`` cuts into parts.

    >>> total_after(10, [Generation(world=3, drop_last=False, delivered=2)])
    4
    """
    for generation in history:
        total = _Rest(total, generation).total
    return total


def rank_runs(
    total: int,
    history: Sequence[Generation],
    *,
    rank: int,
    world: int,
    drop_last: bool,
    delivered: int,
) -> Iterator[tuple[int, int]]:
    """The runs ``(first place, length)`` of the epoch's order that ``rank`` has still to
    deliver in the current generation (after the ended ones of ``history``), having
    delivered ``delivered`` of its part."""
    rests = []
    for generation in history:
        rests.append(_Rest(total, generation))
        total = rests[-1].total
    start, stop = part(total, rank=rank, world=world, drop_last=drop_last)
    yield from _runs(rests, start + min(delivered, stop - start), stop)


def _runs(rests: list[_Rest], start: int, stop: int) -> Iterator[tuple[int, int]]:
    """Places ``[start, stop)`` of the sequence after ``rests``, as runs of the epoch's."""
    if not rests:
        if start < stop:
            yield start, stop - start
        return
    rest, before = rests[-1], rests[:-1]
    while start < stop:
        place, run = rest.locate(start)
        run = min(run, stop - start)
        yield from _runs(before, place, place + run)
        start += run


class _Rest:
    """What a generation over a sequence of ``total`` left: the rest of each rank's
    stretch of the sequence (its part, and what drop_last left out after it), in order.

    Rank ``r``'s stretch is ``[total * r // world, total * (r + 1) // world)``; it had
    delivered ``taken`` of it (the same for every rank: part lengths differ by at most one
    and a rank delivers in step up to its length), so the rests before rank ``r`` hold
    ``total * r // world - r * taken`` places — unless every rank delivered its whole part.
    """

    def __init__(self, total: int, generation: Generation) -> None:
        self.sequence = total
        self.world = generation.world
        shortest = total // self.world
        self.complete = not generation.drop_last and generation.delivered > shortest
        self.taken = min(generation.delivered, shortest)
        self.total = self.before(self.world)

    def before(self, rank: int) -> int:
        """Places left by the ranks before ``rank``."""
        if self.complete:
            return 0
        return self.sequence * rank // self.world - rank * self.taken

    def locate(self, place: int) -> tuple[int, int]:
        """(the place in the generation's sequence of place ``place`` of the rest, how
        many consecutive places of the rest follow it there)."""
        low, high = 0, self.world - 1  # the last rank whose rest begins at or before place
        while low < high:
            middle = (low + high + 1) // 2
            if self.before(middle) <= place:
                low = middle
            else:
                high = middle - 1
        first = self.before(low)
        stretch = self.sequence * low // self.world
        return stretch + self.taken + place - first, self.before(low + 1) - place
