"""One worker's pass over its part of an epoch: what it reads, its shuffle, how far it got.

A :class:`WorkerRun` turns the worker's part of the epoch (:mod:`tarkit.loading.epoch_layout`)
into a stream of samples through the shuffle buffer, counting as it goes
(:class:`~tarkit.loading.epoch_layout.WorkerPosition`: samples taken out of the shuffle, samples
read into it, whether the stream ended, spans lost to bad shards). Started at a position
(a checkpoint), it refills the shuffle buffer with exactly the samples it held — reading
only those, by their manifest offsets — and reads on from where the stream stood.
Without a manifest, positions in the stream are not known in advance: the run reads the
worker's shards from their start and drops what was delivered before (exact, but its cost
grows with the position; a manifest with offsets avoids it).
"""

from __future__ import annotations

import bisect
import random
from array import array
from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import Any

from ..errors import InputError, UsageError
from ..format.manifest import ShardInfo
from ..format.shard_table import ShardEntries
from . import splitting
from .epoch_layout import EpochLayout, Runs, Shuffling, Topology, WorkerPosition
from .reading import PieceReader
from .shuffle import replay, shuffled

INITIAL = 100  # samples buffered before the shuffle starts giving (webdataset's default)


class WorkerRun:
    """The pass of worker ``worker`` of rank ``rank`` over epoch ``epoch``."""

    def __init__(
        self,
        reader: PieceReader,
        infos: Sequence[ShardInfo] | None,
        shards: int,
        *,
        shuffling: Shuffling,
        topology: Topology,
        rank: int,
        worker: int,
        layout: EpochLayout | None,
        position: WorkerPosition | None = None,
        stream: Runs | None = None,
        cycle: int = 0,
    ) -> None:
        self.reader = reader
        self.infos = infos
        self.shuffling = shuffling
        self.topology = topology
        self.rank = rank
        self.worker = worker
        self.layout = layout
        self.cycle = cycle
        start = position or WorkerPosition()
        self.position = WorkerPosition(start.taken, start.read, start.items, start.ended,
                                       list(start.lost))  # fmt: skip
        self.order = splitting.shard_order(
            shards, shuffle=shuffling.size > 0, seed=shuffling.seed, epoch=shuffling.epoch
        )
        if infos is not None:
            if stream is None:
                assert layout is not None
                stream = layout.worker_runs(topology, rank, worker)
            self.stream: Runs | None = stream
            # Columns of 8 bytes a shard, not lists of ints: a million shards in a worker.
            counts = (
                infos.table.samples_column()
                if isinstance(infos, ShardEntries)
                else array("q", [info.samples for info in infos])
            )
            self._ends: Sequence[int]  # where the samples of each shard of the order end
            if isinstance(self.order, range) and isinstance(infos, ShardEntries):
                self._ends = memoryview(infos.table.starts)[1:]  # the table's own, shared
            else:
                self._ends = array("q", accumulate(map(counts.__getitem__, self.order)))
            self._counts = counts
        else:
            self.stream = None
            self.shards = [
                p.shard
                for p in splitting.whole_shards(
                    self.order, rank=rank, world=topology.world, worker=worker,
                    workers=topology.workers,
                )
            ]  # fmt: skip

    @property
    def expected(self) -> int | None:
        """Samples this worker reads in its whole pass (None without a manifest)."""
        return None if self.stream is None else len(self.stream)

    @property
    def empty(self) -> bool:
        """Whether the worker has nothing at all to read in this pass."""
        return (self.stream is not None and not len(self.stream)) or (
            self.stream is None and not self.shards
        )

    def rng(self) -> random.Random:
        generation = self.layout.generation if self.layout is not None else 0
        return self.shuffling.rng(generation, self.rank, self.worker, self.cycle)

    def samples(self) -> Iterator[dict[str, Any]]:
        """The worker's samples, shuffled, from its position on."""
        if self.stream is not None:
            return self._planned()
        return self._whole_shards()

    # -- with a manifest: positions ---------------------------------------------------

    def _planned(self) -> Iterator[dict[str, Any]]:
        assert self.stream is not None
        kept = self.stream.without(self.position.lost)
        if self.position.taken > len(kept):
            raise UsageError(_past_end(self.position.taken, len(kept)))
        size = self.shuffling.size
        if not size:
            rest = kept.slice(self.position.taken, len(kept))
            return self._counting(self._read(rest), len(kept) - len(rest), taking=True)
        rng = self.rng()
        state = replay(
            len(kept), size=size, rng=rng, initial=self.shuffling.initial,
            taken=self.position.taken,
        )  # fmt: skip
        buffer = self._refill([kept.at(i) for i in state.buffer])
        rest = kept.slice(state.read, len(kept))
        counted = self._counting(self._read(rest), state.read)
        return self._taking(
            shuffled(counted, size=size, rng=rng, initial=self.shuffling.initial, buffer=buffer)
        )

    def _refill(self, positions: list[int]) -> list[dict[str, Any]]:
        """The samples at ``positions`` (the buffer's, in buffer order)."""
        if not positions:
            return []
        found = {}
        for position, sample in self._read(Runs.of(sorted(positions)), track=False):
            found[position] = sample
        missing = [p for p in positions if p not in found]
        if missing:
            shard, index = self._locate(missing[0])
            raise InputError(
                f"sample {index} of the shard, held in the shuffle buffer at the checkpoint, "
                "can no longer be read",
                source=self.reader.urls[shard],
            )
        return [found[p] for p in positions]

    def _read(self, runs: Runs, track: bool = True) -> Iterator[Any]:
        """(position, sample) for ``track=False``, else samples, of the positions ``runs``;
        samples a bad shard takes with it are noted as lost."""
        for a, b in runs.spans:
            for piece in splitting.range_pieces(self._counts, self.order, a, b):
                base = self._position_of(piece.shard, piece.start)
                got = 0
                for sample in self.reader.piece(piece, self.worker):
                    if track:
                        yield sample
                    else:
                        yield base + got, sample
                    got += 1
                length = (self._counts[piece.shard] if piece.stop is None else piece.stop) - (
                    piece.start
                )
                if got < length and track:
                    self.position.lost.append((base + got, base + length))

    def _position_of(self, shard: int, index: int) -> int:
        slot = self.order.index(shard)
        return (self._ends[slot - 1] if slot else 0) + index

    def _locate(self, position: int) -> tuple[int, int]:
        slot = bisect.bisect_right(self._ends, position)
        return self.order[slot], position - (self._ends[slot - 1] if slot else 0)

    # -- without a manifest: whole shards, read from their start ----------------------

    def _whole_shards(self) -> Iterator[dict[str, Any]]:
        stream = self.reader.samples([splitting.Piece(s) for s in self.shards], self.worker)
        size = self.shuffling.size
        start = self.position
        if not start.taken:
            if not size:
                return self._counting(stream, 0, taking=True)
            counted = self._counting(stream, 0)
            return self._taking(
                shuffled(counted, size=size, rng=self.rng(), initial=self.shuffling.initial)
            )
        if not size:
            return self._counting(_skipping(stream, start.taken), start.taken, taking=True)
        # The shuffle run again on the samples themselves, its first ``taken`` dropped: the
        # same order (its draws depend on counts only), and no longer than the shards
        # are, whatever a state says.
        counted = self._counting(stream, 0)
        again = shuffled(counted, size=size, rng=self.rng(), initial=self.shuffling.initial)
        return self._taking(_skipping(again, start.taken))

    # -- counting -----------------------------------------------------------------------

    def _counting(
        self, samples: Iterator[Any], already: int, *, taking: bool = False
    ) -> Iterator[Any]:
        """Count each sample read (``already`` read before); with ``taking``, taken as
        well, as :meth:`_taking` would count it (one step for an unshuffled run)."""
        position = self.position
        position.read = already
        if taking:
            for sample in samples:
                position.read += 1
                position.taken += 1
                yield sample
        else:
            for sample in samples:
                position.read += 1
                yield sample
        position.ended = True

    def _taking(self, samples: Iterator[Any]) -> Iterator[Any]:
        position = self.position
        for sample in samples:
            position.taken += 1
            yield sample

    def delivered(self) -> None:
        """Count an item handed on (a batch, or a sample when the dataset does not batch)."""
        self.position.items += 1

    def snapshot(self) -> WorkerPosition:
        """A copy of the position now."""
        p = self.position
        return WorkerPosition(p.taken, p.read, p.items, p.ended, list(p.lost))


def _skipping(samples: Iterator[Any], count: int) -> Iterator[Any]:
    """``samples`` but the first ``count``, which a resumed worker had delivered."""
    for skipped in range(count):
        if next(samples, None) is None:
            raise UsageError(_past_end(count, skipped))
    yield from samples


def _past_end(taken: int, held: int) -> str:
    return (
        f"the loader state says a worker had taken {taken} samples of its share of the epoch, "
        f"which holds {held}: the state is not of these shards (or they changed since)"
    )
