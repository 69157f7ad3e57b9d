"""An epoch's layout: which samples each worker of each rank reads, and what is left of the
epoch after a checkpoint, so that a restored loader — on the same cluster or another —
delivers exactly the samples not yet delivered.

With a manifest, an epoch is one sequence of *positions* ``0 … N-1``: the samples of the
shards in the epoch's shard order, one after another. A :class:`Generation` splits what
is left of the epoch (at first, all of it) over its :class:`Topology`: contiguous ranges
per rank, then per worker on batch boundaries (:mod:`tarkit.loading.splitting`). Each
worker reads its positions in order through its shuffle buffer
(:mod:`tarkit.loading.shuffle`). A checkpoint records how far each worker got
(:class:`WorkerPosition`); restoring on the same topology continues each worker where it
stood, and restoring on another starts a new generation over what is left: for every
worker of the old one, the samples its shuffle buffer held, then the ones it had not read.

>>> Runs([(0, 3), (10, 12)]).slice(2, 4).spans
[(2, 3), (10, 11)]
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..seeds import stable_seed
from . import splitting
from .shuffle import replay

Span = tuple[int, int]


class Runs:
    """Positions as half-open spans, in order: ``[(0, 3), (10, 12)]`` is 0, 1, 2, 10, 11."""

    def __init__(self, spans: Sequence[Span] = ()) -> None:
        self.spans = [(a, b) for a, b in spans if b > a]
        self._ends: list[int] = []
        total = 0
        for a, b in self.spans:
            total += b - a
            self._ends.append(total)

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def at(self, index: int) -> int:
        """The position at ``index``."""
        run = bisect.bisect_right(self._ends, index)
        start = self._ends[run - 1] if run else 0
        return self.spans[run][0] + index - start

    def slice(self, lo: int, hi: int) -> Runs:
        """The positions from index ``lo`` up to ``hi``."""
        spans: list[Span] = []
        start = 0
        for (a, _), end in zip(self.spans, self._ends, strict=True):
            if end > lo and start < hi:
                spans.append((a + max(lo - start, 0), a + min(hi, end) - start))
            if end >= hi:
                break
            start = end
        return Runs(spans)

    def without(self, indices: Sequence[Span]) -> Runs:
        """These positions but those at the index spans ``indices`` (sorted)."""
        if not indices:
            return self
        kept: list[Span] = []
        cursor = 0
        for lo, hi in indices:
            kept.extend(self.slice(cursor, lo).spans)
            cursor = max(cursor, hi)
        kept.extend(self.slice(cursor, len(self)).spans)
        return Runs(kept)

    def __iter__(self) -> Iterator[int]:
        for a, b in self.spans:
            yield from range(a, b)

    @staticmethod
    def of(positions: Sequence[int]) -> Runs:
        """Runs of the positions in the given order (consecutive ones share a span)."""
        spans: list[Span] = []
        for p in positions:
            if spans and spans[-1][1] == p:
                spans[-1] = (spans[-1][0], p + 1)
            else:
                spans.append((p, p + 1))
        return Runs(spans)

    def __add__(self, other: Runs) -> Runs:
        spans = list(self.spans)
        for a, b in other.spans:
            if spans and spans[-1][1] == a:
                spans[-1] = (spans[-1][0], b)
            else:
                spans.append((a, b))
        return Runs(spans)


@dataclass(frozen=True)
class Topology:
    """How an epoch is split: ranks, DataLoader workers per rank, and batches."""

    world: int
    workers: int
    batch_size: int | None
    drop_last: bool = False
    equal: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "world": self.world,
            "workers": self.workers,
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "equal_batches": self.equal,
        }


@dataclass
class WorkerPosition:
    """How far one worker got in its generation: ``taken`` samples out of its shuffle
    (into delivered items), ``read`` samples into the shuffle, ``items`` delivered,
    whether its stream ``ended``, and the spans of its stream it never read (``lost``:
    bad shards skipped under ``handler="skip"``)."""

    taken: int = 0
    read: int = 0
    items: int = 0
    ended: bool = False
    lost: list[Span] = field(default_factory=list)
    parts: list[list[Span]] = field(default_factory=list)  # a mixture's: lost, per source

    def to_json(self) -> list[Any]:
        data: list[Any] = [self.taken, self.read, self.items, int(self.ended)]
        data.append([list(s) for s in self.lost])
        if self.parts:
            data.append([[list(s) for s in part] for part in self.parts])
        return data


@dataclass
class Generation:
    """A topology's part of an epoch and, once a checkpoint is taken in it, how far it
    got: the items ``delivered`` by every rank (ranks move in step), the checkpointing
    ``rank`` and its workers' exact positions (None: derived from ``delivered``)."""

    topology: Topology
    delivered: int = 0
    rank: int = 0
    workers: list[WorkerPosition] | None = None
    last_worker: int | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "topology": self.topology.to_json(),
            "delivered": self.delivered,
            "rank": self.rank,
            "last_worker": self.last_worker,
        }
        if self.workers is not None:
            data["workers"] = [w.to_json() for w in self.workers]
        return data


@dataclass(frozen=True)
class Shuffling:
    """The sample shuffle of the workers: buffer size, start, seed and epoch."""

    size: int
    initial: int
    seed: int
    epoch: int

    def rng(self, generation: int, rank: int, worker: int, cycle: int = 0) -> random.Random:
        """The random stream of one worker's shuffle in one generation of the epoch (and,
        for a mixed source read again, in its ``cycle``-th pass)."""
        if generation == 0:
            parts: tuple[object, ...] = ("samples", self.seed, self.epoch, rank, worker)
        else:
            parts = ("samples", self.seed, self.epoch, "resumed", generation, rank, worker)
        if cycle:
            parts = (*parts, "cycle", cycle)
        return random.Random(stable_seed(*parts))


class EpochLayout:
    """What of one epoch's ``total`` positions each worker reads, generation after
    generation (``history``: the generations before the current one, with their
    checkpoints). Positions, not samples: nothing here reads a shard."""

    def __init__(
        self,
        total: int,
        history: Sequence[Generation],
        shuffling: Shuffling,
        remaining: Runs | None = None,
    ) -> None:
        self.shuffling = shuffling
        self.history = list(history)
        self.remaining = Runs([(0, total)]) if remaining is None else remaining
        self.dropped = 0
        self.generation = len(history)
        if remaining is not None:
            return  # what is left was found by the caller (a mixture's source)
        for number, generation in enumerate(history):
            self.remaining, dropped = self._left_after(number, generation)
            self.dropped += dropped

    def rank_runs(self, topology: Topology, rank: int) -> Runs:
        """The positions rank ``rank`` reads in the current generation."""
        lo, hi = self._rank_range(topology, rank)
        return self.remaining.slice(lo, hi)

    def worker_runs(self, topology: Topology, rank: int, worker: int) -> Runs:
        """The positions (in reading order) one worker reads in the current generation."""
        lo, hi = self._rank_range(topology, rank)
        wlo, whi = splitting.worker_range(
            lo, hi, worker=worker, workers=topology.workers, batch_size=topology.batch_size
        )
        return self.remaining.slice(wlo, whi)

    def derived(self, generation: Generation, rank: int) -> tuple[list[WorkerPosition], int | None]:
        """The positions of ``rank``'s workers from the items delivered (no skips), as
        :meth:`MixLayout.derived <tarkit.loading.mixing.MixLayout.derived>` for a mixture."""
        topology = generation.topology
        sizes = [len(self.worker_runs(topology, rank, w)) for w in range(topology.workers)]
        return derive_positions(sizes, topology.batch_size, generation.delivered)

    def _rank_range(self, topology: Topology, rank: int) -> tuple[int, int]:
        return splitting.rank_range(
            len(self.remaining),
            rank=rank,
            world=topology.world,
            equal=topology.equal,
            batch_size=topology.batch_size,
            drop_last=topology.drop_last,
        )

    def dropped_now(self, topology: Topology) -> int:
        """Positions the current generation's split leaves out (equal batches, drop_last)."""
        read = sum(len(self.rank_runs(topology, r)) for r in range(topology.world))
        return len(self.remaining) - read

    def _left_after(self, number: int, generation: Generation) -> tuple[Runs, int]:
        """What is left of the epoch when ``generation`` (the ``number``-th) stopped."""
        topology = generation.topology
        left = Runs()
        dropped = self.dropped_now(topology)
        for rank in range(topology.world):
            streams = [self.worker_runs(topology, rank, w) for w in range(topology.workers)]
            if rank == generation.rank and generation.workers is not None:
                positions = generation.workers
            else:
                positions = derive_positions(
                    [len(s) for s in streams], topology.batch_size, generation.delivered
                )[0]
            for worker, (stream, position) in enumerate(zip(streams, positions, strict=True)):
                left = left + self.worker_left(number, rank, worker, stream, position)
        return left, dropped

    def worker_left(
        self,
        number: int,
        rank: int,
        worker: int,
        stream: Runs,
        position: WorkerPosition,
        cycle: int = 0,
    ) -> Runs:
        """What one worker of generation ``number`` had not delivered: the positions in its
        shuffle buffer, in buffer order, then those it had not read."""
        kept = stream.without(position.lost)
        if not self.shuffling.size:
            return kept.slice(position.taken, len(kept))
        state = replay(
            len(kept),
            size=self.shuffling.size,
            rng=self.shuffling.rng(number, rank, worker, cycle),
            initial=self.shuffling.initial,
            taken=position.taken,
        )
        return Runs.of([kept.at(i) for i in state.buffer]) + kept.slice(state.read, len(kept))


def derive_positions(
    sizes: Sequence[int], batch_size: int | None, delivered: int
) -> tuple[list[WorkerPosition], int | None]:
    """The positions of workers of ``sizes`` samples after a DataLoader delivered
    ``delivered`` items from them in turn (skipping workers with nothing left), and the
    worker of the last item: what every rank's workers reached when nothing was skipped.

    >>> [p.taken for p in derive_positions([7, 3, 0], 2, 4)[0]], derive_positions([7, 3, 0], 2, 4)[1]
    ([4, 3, 0], 1)
    """
    size = batch_size or 1
    totals = [-(-n // size) for n in sizes]
    items = [0] * len(sizes)
    last: int | None = None
    left = delivered
    while left > 0:
        active = [w for w in range(len(sizes)) if items[w] < totals[w]]
        if not active:
            break
        rounds = min(min(totals[w] - items[w] for w in active), left // len(active))
        if rounds:
            for w in active:
                items[w] += rounds
            left -= rounds * len(active)
            last = active[-1]
            continue
        for w in active[:left]:
            items[w] += 1
            last = w
        left = 0
    positions = [
        WorkerPosition(min(i * size, n), min(i * size, n), i)
        for i, n in zip(items, sizes, strict=True)
    ]
    return positions, last
