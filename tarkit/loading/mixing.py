"""Weighted mixing of several datasets in the loader, resumable exactly and elastically.

Each source is split over ranks and DataLoader workers like a dataset of its own, and
read through its own shuffle buffer; each worker then takes its sources' samples in the
proportions of the weights by a :class:`~tarkit.stream.combining.MixSchedule` seeded by
``(seed, epoch, generation, rank, worker)`` — exact to within one sample in every aligned
block of 1,000 samples of every worker's stream, in a random order inside each block.
``tarcat --mix`` takes its inputs by the same rule.

Two epoch rules:

- ``epoch_samples=None`` (*until the first runs out*): a worker's epoch ends at the first
  slot of a source it has no sample of left, so every sample of a source comes at most
  once, and the other sources' tails wait for the next epoch;
- ``epoch_samples=N`` (*resampled*): every epoch has ``N`` samples; a source that runs
  out is read again, in a new order (each pass over a source is exact-once), so small
  sources are repeated and large ones sampled.

With a batch size, each worker's share is a whole number of batches. A worker's position
is the number of slots it filled; each source's place follows from the schedule, so a
checkpoint is as small as for one dataset.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..format.manifest import ShardInfo
from ..format.shard_table import total_samples
from ..seeds import stable_seed
from ..stream.combining import MixSchedule
from . import splitting
from .epoch_layout import (
    EpochLayout,
    Generation,
    Runs,
    Shuffling,
    Topology,
    WorkerPosition,
    derive_positions,
)
from .reading import PieceReader
from .runs import INITIAL, WorkerRun
from .state import fingerprint

if TYPE_CHECKING:
    import torch


@dataclass
class Source:
    """One dataset of a mixture: its name, shards, manifest entries and reader."""

    name: str
    urls: Sequence[str]
    infos: Sequence[ShardInfo]
    reader: PieceReader

    @property
    def total(self) -> int:
        return total_samples(self.infos)


_SCHEDULES = 4  # schedules a Mixture keeps (each keeps the blocks it drew)


class Mixture:
    """The sources of a mixed :class:`~tarkit.loading.ShardDataset`, their weights, and
    the epoch rule."""

    def __init__(
        self,
        sources: Sequence[Source],
        weights: Sequence[float],
        epoch_samples: int | None,
        *,
        seed: int,
        shuffle: int,
    ) -> None:
        if epoch_samples is not None and epoch_samples < 1:
            raise UsageError(f"epoch_samples must be at least 1 (got {epoch_samples})")
        self.sources = list(sources)
        self.weights = list(weights)
        self.epoch_samples = epoch_samples
        self.seed = seed
        self.shuffle = shuffle
        self._schedules: dict[tuple[int, int, int, int], MixSchedule] = {}

    def shuffling(self, epoch: int, source: int) -> Shuffling:
        seed = stable_seed(self.seed, "source", self.sources[source].name)
        return Shuffling(self.shuffle, min(self.shuffle, INITIAL), seed, epoch)

    def schedule(self, epoch: int, generation: int, rank: int, worker: int) -> MixSchedule:
        """The schedule of one worker's pass: the last few asked for are kept, so that the
        blocks drawn to find a pass's length are those its samples then follow."""
        key = (epoch, generation, rank, worker)
        found = self._schedules.get(key)
        if found is None:
            if len(self._schedules) >= _SCHEDULES:
                self._schedules.clear()
            found = self._schedules[key] = MixSchedule(
                self.weights, seed=("loader", self.seed, *key)
            )
        return found

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_schedules": {}}  # drawn again where they are used

    @staticmethod
    def source_topology(topology: Topology) -> Topology:
        """Sources are split sample by sample: the mix, not a source, makes the batches."""
        return Topology(topology.world, topology.workers, None)

    def layout(self, epoch: int, history: Sequence[Generation]) -> MixLayout:
        """The mixture's layout of ``epoch`` after the generations ``history``."""
        remaining = [Runs([(0, s.total)]) for s in self.sources]
        earlier: list[MixLayout] = []
        for number, generation in enumerate(history):
            before = MixLayout(self, epoch, number, remaining, history[:number], earlier[:])
            earlier.append(before)
            remaining = before.left_after(generation)
        return MixLayout(self, epoch, len(history), remaining, history, earlier)


class MixLayout:
    """One generation of a mixed epoch: what is left of each source, and each worker's
    length (slots)."""

    def __init__(
        self,
        mixture: Mixture,
        epoch: int,
        generation: int,
        remaining: list[Runs],
        history: Sequence[Generation],
        earlier: Sequence[MixLayout] = (),
    ) -> None:
        self.mixture = mixture
        self.epoch = epoch
        self.generation = generation
        self.remaining = remaining
        self.history = list(history)
        # The layouts of the generations before, made once: asking the mixture for them
        # again would cost time exponential in the generations.
        self.earlier = list(earlier)
        self._before: int | None = None
        self._equal: dict[Topology, int] = {}
        self._until: dict[tuple[Topology, int, int], int] = {}

    def stream(self, topology: Topology, rank: int, worker: int, source: int) -> Runs:
        """A worker's share of what is left of a source."""
        layout = EpochLayout(
            0, (), self.mixture.shuffling(self.epoch, source), self.remaining[source]
        )
        return layout.worker_runs(Mixture.source_topology(topology), rank, worker)

    def full_stream(self, topology: Topology, rank: int, worker: int, source: int) -> Runs:
        """A worker's share of a whole source (what a source read again goes over)."""
        total = self.mixture.sources[source].total
        layout = EpochLayout(total, (), self.mixture.shuffling(self.epoch, source))
        return layout.worker_runs(Mixture.source_topology(topology), rank, worker)

    def length(self, topology: Topology, rank: int, worker: int) -> int:
        """The slots worker ``worker`` of rank ``rank`` fills in this generation."""
        size = topology.batch_size or 1
        samples = self.mixture.epoch_samples
        if samples is not None:
            left = samples - self._delivered_before()
            lo, hi = splitting.rank_range(
                max(left, 0), rank=rank, world=topology.world, equal=topology.equal,
                batch_size=topology.batch_size, drop_last=topology.drop_last,
            )  # fmt: skip
            wlo, whi = splitting.worker_range(
                lo, hi, worker=worker, workers=topology.workers, batch_size=topology.batch_size
            )
            return whi - wlo
        if topology.equal:  # the same for every worker: found once
            if topology not in self._equal:
                self._equal[topology] = min(
                    self._until_first(topology, r, w) // size * size
                    for r in range(topology.world)
                    for w in range(topology.workers)
                )
            return self._equal[topology]
        return self._until_first(topology, rank, worker) // size * size

    def _until_first(self, topology: Topology, rank: int, worker: int) -> int:
        found = self._until.get((topology, rank, worker))
        if found is None:  # (a schedule's blocks are costly to draw: asked once a worker)
            limits = [
                len(self.stream(topology, rank, worker, s))
                for s in range(len(self.mixture.sources))
            ]
            schedule = self.mixture.schedule(self.epoch, self.generation, rank, worker)
            found = self._until[(topology, rank, worker)] = schedule.length(limits)
        return found

    def _delivered_before(self) -> int:
        """Samples the earlier generations of this epoch delivered, all ranks together."""
        if self._before is not None:
            return self._before
        total = 0
        for before, generation in zip(self.earlier, self.history, strict=True):
            topology = generation.topology
            for rank in range(topology.world):
                for position in before.positions(generation, rank):
                    total += position.taken
        self._before = total
        return total

    def positions(self, generation: Generation, rank: int) -> list[WorkerPosition]:
        """Where the workers of ``rank`` stood when ``generation`` was checkpointed."""
        if rank == generation.rank and generation.workers is not None:
            return generation.workers
        return self.derived(generation, rank)[0]

    def derived(self, generation: Generation, rank: int) -> tuple[list[WorkerPosition], int | None]:
        """The positions of ``rank``'s workers from the items delivered (no skips)."""
        topology = generation.topology
        lengths = [self.length(topology, rank, w) for w in range(topology.workers)]
        return derive_positions(lengths, topology.batch_size, generation.delivered)

    def left_after(self, generation: Generation) -> list[Runs]:
        """What is left of each source when ``generation`` was checkpointed: every
        worker's buffered and unread samples of its current pass over the source."""
        topology = generation.topology
        left = [Runs() for _ in self.mixture.sources]
        for rank in range(topology.world):
            for worker, position in enumerate(self.positions(generation, rank)):
                run = MixRun(self, topology, rank, worker, position)
                for source in range(len(left)):
                    left[source] = left[source] + run.left_of(source)
        return left


class MixRun:
    """One worker's pass over a mixed epoch (the counterpart of a
    :class:`~tarkit.loading.runs.WorkerRun`)."""

    def __init__(
        self,
        layout: MixLayout,
        topology: Topology,
        rank: int,
        worker: int,
        position: WorkerPosition | None = None,
    ) -> None:
        self.layout = layout
        self.topology = topology
        self.rank = rank
        self.worker = worker
        mixture = layout.mixture
        self.shuffling = mixture.shuffling(layout.epoch, 0)
        start = position or WorkerPosition()
        parts = [list(p) for p in start.parts] or [[] for _ in mixture.sources]
        self.position = WorkerPosition(start.taken, start.taken, start.items, start.ended, [],
                                       parts)  # fmt: skip
        self.schedule = mixture.schedule(layout.epoch, layout.generation, rank, worker)
        self.length = layout.length(topology, rank, worker)
        self.streams = [
            layout.stream(topology, rank, worker, s) for s in range(len(mixture.sources))
        ]
        self.counts = [0] * len(mixture.sources)  # samples of each source handed on

    @property
    def expected(self) -> int:
        return self.length

    @property
    def empty(self) -> bool:
        return not self.length

    def _place(self, source: int, draws: int) -> tuple[int, int, Runs]:
        """(pass, samples taken in it, the pass's stream) of a source drawn ``draws`` times."""
        first = len(self.streams[source])
        if draws < first or self.layout.mixture.epoch_samples is None:
            return 0, draws, self.streams[source]
        again = self.layout.full_stream(self.topology, self.rank, self.worker, source)
        if not len(again):
            return 1, 0, again
        cycle, taken = divmod(draws - first, len(again))
        return cycle + 1, taken, again

    def _source_run(self, source: int, draws: int) -> WorkerRun:
        cycle, taken, stream = self._place(source, draws)
        mixture = self.layout.mixture
        info = mixture.sources[source]
        lost = self.position.parts[source]
        return WorkerRun(
            info.reader, info.infos, len(info.urls), shuffling=mixture.shuffling(self.layout.epoch, source),
            topology=Mixture.source_topology(self.topology), rank=self.rank, worker=self.worker,
            layout=EpochLayout(0, self.layout.history, mixture.shuffling(self.layout.epoch, source), stream),
            position=WorkerPosition(taken, taken, 0, False, lost), stream=stream, cycle=cycle,
        )  # fmt: skip

    def left_of(self, source: int) -> Runs:
        """What this worker had not delivered of its current pass over a source."""
        draws = self.schedule.draws(self.position.taken)[source]
        cycle, taken, stream = self._place(source, draws)
        layout = EpochLayout(
            0, (), self.layout.mixture.shuffling(self.layout.epoch, source), stream
        )
        position = WorkerPosition(taken, taken, 0, False, self.position.parts[source])
        return layout.worker_left(
            self.layout.generation, self.rank, self.worker, stream, position, cycle
        )

    def samples(self) -> Iterator[dict[str, Any]]:
        """The worker's mixed samples from its position on."""
        draws = self.schedule.draws(self.position.taken)
        runs: list[WorkerRun | None] = [None] * len(draws)
        iterators: list[Iterator[dict[str, Any]] | None] = [None] * len(draws)
        position = self.position
        for slot in range(position.taken, self.length):
            source = self.schedule.source_at(slot)
            item = None
            while item is None:
                if iterators[source] is None:
                    run = self._source_run(source, draws[source])
                    runs[source], iterators[source] = run, run.samples()
                item = next(iterators[source], None)  # type: ignore[arg-type]
                if item is None:
                    if self.layout.mixture.epoch_samples is None:
                        return  # a bad shard took samples with it: the first to run out
                    iterators[source] = None  # read the source again
            draws[source] += 1
            current = runs[source]
            assert current is not None
            lost = current.position.lost
            if position.parts[source] != lost:  # (almost always both empty)
                position.parts[source] = list(lost)
            position.taken += 1
            position.read = position.taken
            self.counts[source] += 1
            yield item
        position.ended = True

    def delivered(self) -> None:
        self.position.items += 1

    def snapshot(self) -> WorkerPosition:
        p = self.position
        return WorkerPosition(p.taken, p.read, p.items, p.ended, [], [list(s) for s in p.parts])


def mixture_of(
    sources: dict[str, tuple[Sequence[str], Sequence[ShardInfo] | None, PieceReader]],
    weights: dict[str, float] | None,
    epoch_samples: int | None,
    *,
    seed: int,
    shuffle: int,
) -> Mixture:
    """A :class:`Mixture` from named sources; UsageError for a source without sample
    counts or weights that do not name the sources."""
    names = list(sources)
    weights = weights if weights is not None else {name: 1.0 for name in names}
    if set(weights) != set(names):
        raise UsageError(
            f"weights name {sorted(weights)}, the sources are {sorted(names)}: give one weight "
            "per source"
        )
    mixed: list[Source] = []
    for name, (urls, infos, reader) in sources.items():
        if infos is None:
            raise UsageError(
                f"source {name!r} has no manifest: mixing needs every source's sample counts "
                "(tarindex -o manifest.json)"
            )
        mixed.append(Source(name, urls, infos, reader))
    return Mixture(mixed, [float(weights[n]) for n in names], epoch_samples, seed=seed,
                   shuffle=shuffle)  # fmt: skip


def dataset_fingerprint(
    mixture: Mixture | None, urls: Sequence[str], infos: Sequence[ShardInfo] | None
) -> str:
    """The fingerprint of a dataset's shards (:func:`~tarkit.loading.state.fingerprint`),
    every source of a mixture's."""
    if mixture is None:
        return fingerprint([("", urls, infos)])
    return fingerprint([(s.name, s.urls, s.infos) for s in mixture.sources])


def mixture_settings(mixture: Mixture | None) -> dict[str, Any] | None:
    """What a state records of a mixture: its weights by source, and its epoch rule."""
    if mixture is None:
        return None
    weights = {s.name: w for s, w in zip(mixture.sources, mixture.weights, strict=True)}
    return {"weights": weights, "epoch_samples": mixture.epoch_samples}


def counted(
    items: Iterator[Any], run: WorkerRun | MixRun, mixed: torch.Tensor | None
) -> Iterator[Any]:
    """``items``, each counted as delivered by ``run`` as it is handed on; a mixture's
    samples per source are added to the shared counts ``mixed`` item by item."""
    told = [0] * len(mixed) if mixed is not None else []
    for item in items:
        run.delivered()
        if mixed is not None and isinstance(run, MixRun):
            for source, count in enumerate(run.counts):
                if count != told[source]:
                    mixed[source] += count - told[source]
                    told[source] = count
        yield item
