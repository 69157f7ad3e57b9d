"""The driver's walk along the item order, for :func:`~tarkit.shard_dataset` on an engine
(:mod:`tarkit.writing.cluster`): where each shard begins and ends.

The walk reads the tar size of every sample in order, as the encode tasks report them
(:class:`~tarkit.writing.cluster_pieces.Pieces`), and cuts with the rule of
:class:`~tarkit.writing.cuts.ShardCut`, sample by sample: a shard may end among the
samples of one item, at a point (a position of the item order and a sample of that
item). As soon as a shard's end is known it hands the shard's samples over
(:class:`Cut`), and the run queues the write task that takes them from the encode
tasks' payloads. Items that failed are left out (the run says which are: ``reject``);
the ranges an interrupted run completed (:class:`~tarkit.writing.shard_records.Covered`)
are stepped over, and the cut before one must fall where it begins.

Two walks share these steps: uncompressed, bzip2 and xz shards are cut here
(:class:`CutWalk`); gzip and zstd shards are cut by measuring the compressor, which only
the writer can: :class:`ChainWalk` hands a write task its candidates (samples enough for
more than a shard) and the task finds the end itself; the next shard's walk waits for it
(:meth:`ChainWalk.written`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import OutputError
from .cluster_pieces import Piece, Pieces
from .cluster_tasks import Slot
from .cuts import ShardCut
from .items import Point
from .patterns import ShardPattern
from .rejects import Rejected
from .shard_records import Covered, PositionedReject

CHAIN_BYTES = 4  # gzip/zstd: a write task gets this many times maxsize of tar bytes


@dataclass(kw_only=True)
class Cut:
    """A shard whose samples are known: its ``number``, the point where it begins, its
    samples grouped by the piece that holds them, the items left out among them, the
    point ``stop`` before which it ends (or its candidates do, unless ``known``), whether
    it is the ``last``, the tar size of the first sample of the covered shard after it
    (``sentinel``) and the first item that gave other than one sample (``uneven_from``)."""

    number: int
    first: Point
    groups: list[tuple[Piece, list[Slot]]]
    rejects: list[PositionedReject]
    stop: Point
    known: bool
    last: bool
    sentinel: int | None
    uneven_from: int | None


class Walk:
    """The walk of one run: from shard ``number`` on, over the items of ``pieces`` (of
    ``total`` positions), stepping over ``covered`` (by their first point), cutting by
    ``cut`` (here: :class:`CutWalk`; in the write tasks: :class:`ChainWalk`).
    ``reject(position, piece)`` is
    called for an item that failed (it gives its :class:`~tarkit.writing.rejects.Rejected`),
    ``queue(cut)`` for a shard to write; the run sets
    :attr:`failed` to the position of the first item that fails (the walk stops there)."""

    def __init__(
        self, pieces: Pieces, total: int, covered: list[Covered], pattern: ShardPattern, number: int,
        cut: ShardCut, reject: Callable[[int, Piece], Rejected], queue: Callable[[Cut], object],
    ) -> None:  # fmt: skip
        self.pieces, self.pattern, self.cut = pieces, pattern, cut
        self.reject, self.queue = reject, queue
        self.covered = {c.first: c for c in covered}
        self.last: Point = (total, 0)  # where the items end
        self.failed: int | None = None
        self.pos: Point = (0, 0)  # the next point
        self.number = number  # the shard being cut
        self.shard_first: Point = (0, 0)
        self.slots: list[tuple[Piece, Slot]] = []
        self.shard_rejects: list[PositionedReject] = []
        # A shard after an item that gave other than one sample is uneven (see
        # shard_records); a covered one was, from somewhere in it on.
        self.uneven_from = min((c.first[0] for c in covered if c.uneven), default=None)

    def stopped(self, point: Point) -> bool:
        """Whether the walk ends before ``point``: the items end, or one failed there."""
        return point >= self.last or (self.failed is not None and point[0] >= self.failed)

    def _sample(self, point: Point) -> tuple[Piece, list[int] | None] | None:
        """The piece of the item at ``point`` and its samples' sizes (None: it failed),
        once it is encoded and checked; None before."""
        piece = self.pieces.at(point[0])
        if piece is None:
            return None
        sizes = piece.item(point[0])
        uneven = self.uneven_from
        if sizes is not None and len(sizes) != 1 and (uneven is None or point[0] < uneven):
            self.uneven_from = point[0]
        return piece, sizes

    def advance(self) -> None:
        """Walk as far as the sizes known in order allow, and queue the shards' writes."""
        raise NotImplementedError

    def written(self, number: int, end: Point | None, stop: Point) -> None:
        """The write of shard ``number`` (its samples, or candidates, ending before
        ``stop``) ended at ``end``, or needs more candidates (None)."""

    def _misfit(self, covered: Covered) -> str:
        return (
            f"{self.pattern.name(covered.number)}: this run's cut before it does not "
            "fall where it begins: the shards come from another run (another item order or other "
            "limits). Pass "
            "--overwrite (mode='overwrite') to write the whole set anew"
        )

    def _enter(self, covered: Covered) -> None:
        """Step over a covered range; the shard after it begins there."""
        if self.shard_rejects or covered.number != self.number:
            raise OutputError(self._misfit(covered))
        self.number, self.pos = covered.after, covered.end
        self.shard_first = self.pos
        self.cut.begin()

    def _take(self, piece: Piece, position: int, number: int) -> None:
        """Give sample ``number`` of the item at ``position`` to the shard being cut (or,
        for gzip/zstd, to its write's candidates)."""
        k = position - piece.first
        size = piece.sizes[k][number]  # type: ignore[index]
        self.slots.append((piece, (position, number, piece.offsets[k][number], size)))
        piece.users.add(self.number)

    def _reject(self, position: int, piece: Piece) -> None:
        self.shard_rejects.append((position, self.reject(position, piece)))

    def _write(self, stop: Point, *, known: bool, last: bool = False,
               sentinel: int | None = None) -> None:  # fmt: skip
        """Queue the write of the shard being cut, whose samples end before ``stop``."""
        groups: list[tuple[Piece, list[Slot]]] = []
        for piece, slot in self.slots:
            if not groups or groups[-1][0] is not piece:
                groups.append((piece, []))
                piece.users.add(self.number)
            groups[-1][1].append(slot)
        self.queue(Cut(number=self.number, first=self.shard_first, groups=groups,
                       rejects=list(self.shard_rejects), stop=stop, known=known, last=last,
                       sentinel=sentinel, uneven_from=self.uneven_from))  # fmt: skip


class CutWalk(Walk):
    """Uncompressed, bzip2 and xz shards: the walk cuts each shard here, and goes on at
    once."""

    def advance(self) -> None:
        """Cut what the sizes known in order allow, and queue the shards' writes."""
        while True:
            covered = self.covered.get(self.pos)
            if covered is not None:
                if self.cut.count:
                    # The shard being cut must end where the covered one begins.
                    size = covered.first_size
                    if size is None or self.cut.takes(size, _unmeasured):
                        raise OutputError(self._misfit(covered))
                    self._cut_at(self.pos)
                self._enter(covered)
                continue
            if self.pos >= self.last:
                if self.cut.count:
                    self._cut_at(self.last, last=True)
                return
            found = self._sample(self.pos)
            if found is None or self.stopped(self.pos):
                return
            piece, sizes = found
            position, number = self.pos
            if sizes is None:
                self._reject(position, piece)
            elif number < len(sizes):
                if not self.cut.takes(sizes[number], _unmeasured):
                    self._cut_at(self.pos)
                self._take(piece, position, number)
                self.cut.add(sizes[number])
            self.pos = _after(self.pos, sizes)

    def _cut_at(self, stop: Point, *, last: bool = False) -> None:
        """Queue the write of the shard being cut, which ends before ``stop``; begin the next."""
        self._write(stop, known=True, last=last)
        self.number += 1
        self.shard_first, self.slots, self.shard_rejects = stop, [], []
        self.cut.begin()


class ChainWalk(Walk):
    """gzip/zstd shards: the write tasks cut (by measuring the compressor); the walk
    gives each its candidates, one shard after the other."""

    chain_factor = CHAIN_BYTES  # the candidates' tar bytes, in maxsize (doubled while short)
    chain_busy = False  # a write task has the candidates: the walk waits for it

    def advance(self) -> None:
        """gzip/zstd: give the next shard's write its candidates once they are encoded."""
        limit = self.chain_factor * self.cut.maxsize
        maxcount = self.cut.maxcount
        while not self.chain_busy:
            if self.failed is not None and self.pos >= (self.failed, 0):
                return
            covered = self.covered.get(self.pos)
            if covered is not None:
                self._enter(covered)
                continue
            if self.pos >= self.last:
                return
            self.slots, self.shard_rejects = [], []
            count = size_sum = 0
            stop = self.pos
            while not (count > maxcount or size_sum > limit):
                found = None if self.stopped(stop) else self._sample(stop)
                if found is None or (stop != self.pos and stop in self.covered):
                    break
                piece, sizes = found
                position, number = stop
                if sizes is None:
                    self._reject(position, piece)
                elif number < len(sizes):
                    self._take(piece, position, number)
                    count, size_sum = count + 1, size_sum + sizes[number]
                stop = _after(stop, sizes)
            covered = self.covered.get(stop)
            last = stop >= self.last
            enough = count > maxcount or size_sum > limit
            # Before an item that failed, the write finds whether a cut falls first.
            failed = self.failed is not None and stop >= (self.failed, 0)
            if not (enough or last or failed or covered is not None):
                for piece, _ in self.slots:
                    piece.users.discard(self.number)
                return  # wait for more encoded items
            if not self.slots:
                if covered is not None and self.shard_rejects:
                    raise OutputError(self._misfit(covered))
                self.pos = stop
                continue
            sentinel = covered.first_size if covered is not None else None
            self._write(stop, known=False, last=last, sentinel=sentinel)
            self.chain_busy = True

    def written(self, number: int, end: Point | None, stop: Point) -> None:
        """The walk goes on where the write ended (or gives it more candidates)."""
        self.chain_busy = False
        if end is not None:
            self.chain_factor = CHAIN_BYTES
            self.pos, self.number = end, number + 1
            self.shard_first = self.pos
        elif self.failed is not None and stop >= (self.failed, 0):
            self.pos = (self.failed, 0)  # the shard would hold the item that failed
        else:
            self.chain_factor *= 2


def _unmeasured() -> int | None:
    return None  # the driver cuts only shards whose compression is never measured


def _after(point: Point, sizes: list[int] | None) -> Point:
    """The point after ``point``, an item whose samples have ``sizes`` (None: it failed).

    >>> _after((4, 0), [512, 512]), _after((4, 1), [512, 512]), _after((4, 0), [])
    ((4, 1), (5, 0), (5, 0))
    """
    position, number = point
    if sizes is None or number + 1 >= len(sizes):
        return (position + 1, 0)
    return (position, number + 1)


__all__ = ["ChainWalk", "Cut", "CutWalk", "Walk"]
