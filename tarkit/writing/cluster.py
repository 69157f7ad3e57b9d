"""shard_dataset on an engine: items encoded by many workers, shards cut as one machine cuts.

The item order (index order, or the seeded permutation) is cut by the rule of
:class:`~tarkit.writing.cuts.ShardCut`, which depends on the tar size of every
sample in order. The work goes in two kinds of task (:mod:`tarkit.writing.cluster_tasks`),
run by the same :class:`~tarkit.engines.running.TaskRunner` as :func:`tarkit.map_shards`:

1. Encode tasks load and encode runs of consecutive positions (about a second of work
   each), in parallel on every node, and report the sizes of their samples (an item may
   give none, one or several); the samples stay where they were encoded (the Ray object
   store of that node): no item passes through the driver
   (:mod:`tarkit.writing.cluster_pieces` is what the driver holds of them).
2. The driver walks the sizes sample by sample in order as they arrive, with the cut
   rule (a shard may end among the samples of one item, at a point: a position and a
   sample of it); as soon as a shard's end is known, a write task takes exactly its
   samples from the encode tasks' payloads (Ray moves them to its node), writes the
   shard and publishes it. Shards are written in parallel, in any order; items are
   encoded once.

gzip and zstd shards are cut by measuring the compressor, which only the writer can: their
write tasks find their own end, one shard after the other (encoding stays parallel).
Uncompressed, bzip2 and xz shards are cut by the driver.

Each shard gets a record (:mod:`tarkit.writing.shard_records`) before it is published,
so that ``mode="resume"`` keeps every complete shard, wherever it is in the set, and
writes only the others; the records stay when the set needs them (see there). An item
that fails raises its error once every shard before it is written (as on one machine), or
with ``on_error="skip"`` is left out; a task whose worker dies is tried again
(``retries``); a write that keeps failing is raised.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..engines import start_engine
from ..engines.base import Handle
from ..engines.running import DONE, FAILED, RETRY, Outcome, TaskRunner
from ..errors import EngineError, OutputError
from ..format.compression import MEASURED, compression_for
from ..format.manifest import Manifest, ShardInfo
from ..storage import location, manifest_at, save_manifest
from .cluster_pieces import Piece, Pieces
from .cluster_tasks import Encoded, EncodeTask, Slot, WriteTask, Written
from .completion import put_in_place, run_post
from .cuts import ShardCut
from .items import ItemEncoder, ItemFailure
from .patterns import (
    CREATE,
    OVERWRITE,
    RESUME,
    existing_shards,
    pending_name,
    refuse_existing,
    remove_pending,
    shard_name,
)
from .rejects import Rejected, save_rejects
from .shard_records import (
    Point,
    completed_ranges,
    first_uncounted,
    plan_digest,
    remove_records,
)

TICK = 0.5  # seconds between progress reports while waiting
PIECE_SECONDS = 1.0  # the work an encode task aims at
MAX_PIECE, PIECE_BYTES = 4096, 64 << 20  # the most items, and encoded bytes, of one
CHAIN_BYTES = 4  # gzip/zstd: a write task gets this many times maxsize of tar bytes


@dataclass
class Tally:
    """How far a run is, for :class:`~tarkit.writing.from_dataset.ShardProgress`."""

    samples: int = 0
    shards: int = 0
    resumed: int = 0
    retries: int = 0
    message: str | None = None
    empty: int = 0


class ClusterRun:
    """One run of :func:`shard_on_engine` (see the module docstring); :meth:`run` it."""

    def __init__(
        self, encoder: ItemEncoder, order: list[int], pattern: str, *, maxcount: int,
        maxsize: int, mode: str, start: int, storage_options: Mapping[str, Any] | None,
        skipping: bool, rejects: str | None, on_reject: Callable[[Rejected], object] | None,
        post: str | Callable[[str], object] | None,
        on_shard: Callable[[ShardInfo], object] | None, report: Callable[[Tally], object],
    ) -> None:  # fmt: skip
        self.encoder, self.order, self.pattern = encoder, order, pattern
        self.maxcount, self.maxsize, self.mode, self.start = maxcount, maxsize, mode, start
        self.options = dict(storage_options) if storage_options else None
        self.skipping, self.rejects_file, self.on_reject = skipping, rejects, on_reject
        self.post, self.on_shard, self.report = post, on_shard, report
        self.total = len(order)
        self.last: Point = (self.total, 0)  # where the items end
        # Workers write shards where the driver means: not relative to their own cwd.
        self.target = location(pattern).identity()
        self.compression = compression_for(pattern)
        self.chain = self.compression in MEASURED
        self.plan = plan_digest(order, maxcount, maxsize, self.compression)
        remove_pending(pattern, self.options)
        existing = existing_shards(pattern, start, self.options)
        if mode == CREATE and existing:
            raise refuse_existing(pattern, existing, start)
        self.replaced = [s.url for s in existing] if mode == OVERWRITE else []
        covered = completed_ranges(pattern, start, self.plan, rejects if skipping else None,
                                   self.options) if mode == RESUME else []  # fmt: skip
        self.covered = {c.first: c for c in covered}
        # The items whose samples are all in complete shards: not encoded again.
        lows = ((c.first[0] + (c.first[1] > 0), c.end[0]) for c in covered)
        skips = {low: high for low, high in lows if low < high}
        self.shards: dict[int, ShardInfo] = {}
        self.rejected: dict[int, Rejected] = {}  # by position
        self.unplaced: list[Rejected] = []  # rejects of shards without records
        self.tally = Tally()
        self.ends: dict[int, Point] = {}  # shard number: the point after its range
        self.resumed: set[int] = set()
        for c in covered:
            self.ends[c.after - 1] = c.end
            self.resumed.update(range(c.number, c.after))
            self.shards.update({c.number + i: info for i, info in enumerate(c.shards)})
            self.rejected.update(dict(c.rejects))
            self.unplaced += c.unplaced or []
            self.tally.resumed += sum(info.samples for info in c.shards)
        self.tally.samples = self.tally.resumed
        self.tally.shards = len(self.shards)
        # The walk along the item order: the next point and shard, the shard being cut.
        self.pos: Point = (0, 0)
        self.number = start
        self.cut = ShardCut(maxcount, maxsize, self.compression)
        self.shard_first: Point = (0, 0)
        self.slots: list[tuple[Piece, Slot]] = []
        self.shard_rejects: list[tuple[int, Rejected]] = []
        self.failure: tuple[int, ItemFailure] | None = None  # the first item that failed
        self.chain_factor, self.chain_busy = CHAIN_BYTES, False
        # Encode tasks: generated in order over the positions not covered.
        self.pieces = Pieces(encoder, order, skips)
        self.next_piece = 0
        self.piece_size = 0
        self.item_seconds: float | None = None
        self.item_bytes: float | None = None
        self.ids = iter(range(1 << 62))
        self.writing: dict[int, WriteTask] = {}
        self.in_order = start  # the next shard to announce (on_shard, post, rejects file)

    # -- the loop ---------------------------------------------------------------------

    def run(self, runner: TaskRunner, capacity: int) -> Manifest:
        """Run every task; return the manifest (raises the first item's failure, or a
        task's that failed for good)."""
        self.piece_size = max(1, min(32, -(-self.total // max(1, capacity * 4))))
        window = max(2, 2 * capacity)
        while True:
            self._add_pieces(runner, window)
            for position, failure in self.pieces.check():
                self._failed(position, failure)
            self._walk(runner)
            self.pieces.release(self.pos)
            self._announce()
            if self._finished():
                break
            if not runner.busy():
                raise OutputError(f"{self.pattern}: nothing left to run at item position "
                                  f"{self.pos} of {self.total}: a bug in tarkit, please "
                                  "report it")  # fmt: skip
            for outcome in runner.poll(TICK):
                self._ended(outcome)
            self.report(self.tally)
        if self.failure is not None:
            raise self.failure[1].exception()
        return self._finish()

    def _finished(self) -> bool:
        return self._stopped(self.pos) and not self.writing

    def _stopped(self, point: Point) -> bool:
        """Whether the walk ends before ``point``: the items end, or one failed there."""
        return point >= self.last or (self.failure is not None and point[0] >= self.failure[0])

    def _failed(self, position: int, failure: ItemFailure) -> None:
        """The item at ``position`` failed: the run stops there, unless it is skipping."""
        if not self.skipping and (self.failure is None or position < self.failure[0]):
            self.failure = position, failure

    def _add_pieces(self, runner: TaskRunner, window: int) -> None:
        """Queue encode tasks in order while fewer than ``window`` are unfinished."""
        waiting = self.pieces.waiting()
        skips = self.pieces.skips
        while waiting < window and self.failure is None:
            first = self.next_piece
            while first in skips:
                first = skips[first]
            if first >= self.total:
                return
            later = min((low for low in skips if low > first), default=self.total)
            end = min(first + self._next_size(), later)
            self.pieces.add(first, end)
            runner.add(EncodeTask(next(self.ids), first, tuple(self.order[first:end])))
            self.next_piece = end
            waiting += 1

    def _next_size(self) -> int:
        """Items of the next encode task: about PIECE_SECONDS of work, once measured."""
        if self.item_seconds is None or self.item_bytes is None:
            return self.piece_size
        by_time = PIECE_SECONDS / max(self.item_seconds, 1e-6)
        by_bytes = PIECE_BYTES / max(self.item_bytes, 1.0)
        return int(max(1, min(MAX_PIECE, by_time, by_bytes)))

    def _ended(self, outcome: Outcome) -> None:
        task = outcome.task
        if outcome.event == RETRY:
            self.tally.retries += 1
            self.tally.message = f"retrying {self._what(task)}: {outcome.reason}"
            self.report(self.tally)
            self.tally.message = None
            return
        if outcome.event == FAILED:
            result = outcome.result
            if isinstance(result, Written) and result.failure is not None:
                raise result.exception()
            raise EngineError(f"{self._what(task)}: {outcome.reason} (after {task.attempt} "
                              f"attempt{'s' * (task.attempt > 1)})")  # fmt: skip
        assert outcome.event == DONE
        if isinstance(outcome.result, Encoded):
            self._encoded(outcome.result, outcome.payload)
        else:
            self._written(task, outcome.result)

    def _what(self, task: Any) -> str:
        if isinstance(task, EncodeTask):
            last = task.first + len(task.indices) - 1
            return f"encoding the items at positions {task.first}…{last}"
        return f"writing {task.name}"

    def _encoded(self, result: Encoded, payload: Handle) -> None:
        piece = self.pieces.encoded(result, payload)
        good = [sizes for sizes in result.sizes if sizes is not None]
        self.tally.samples += sum(len(sizes) for sizes in good)
        self.tally.empty += sum(1 for sizes in good if not sizes)
        if result.sizes:
            self.item_seconds = result.seconds / len(result.sizes)
            self.item_bytes = sum(map(sum, good)) / max(len(good), 1)
        if piece.failures:
            first = min(piece.failures)
            self._failed(first, piece.failures[first])

    def _written(self, task: WriteTask, result: Written) -> None:
        del self.writing[task.number]
        for piece in self.pieces.pieces.values():
            piece.users.discard(task.number)
        if result.short:
            self.chain_busy = False
            if self.failure is not None and task.stop >= (self.failure[0], 0):
                self.pos = (self.failure[0], 0)  # the shard would hold the item that failed
            else:
                self.chain_factor *= 2
            return
        assert result.info is not None and result.record is not None
        self.shards[task.number] = replace(result.info, url=shard_name(self.pattern, task.number))
        self.ends[task.number] = result.record.end
        self.tally.shards += 1
        if self.chain:
            self.chain_busy = False
            self.chain_factor = CHAIN_BYTES
            self.pos, self.number = result.record.end, task.number + 1
            self.shard_first = self.pos

    # -- the walk along the item order ---------------------------------------------------

    def _sample(self, point: Point) -> tuple[Piece, list[int] | None] | None:
        """The piece of the item at ``point`` and its samples' sizes (None: it failed),
        once it is encoded and checked; None before."""
        piece = self.pieces.at(point[0])
        return None if piece is None else (piece, piece.item(point[0]))

    def _walk(self, runner: TaskRunner) -> None:
        """Cut what the sizes known in order allow, and queue the shards' writes."""
        if self.chain:
            self._walk_chain(runner)
            return
        while True:
            covered = self.covered.get(self.pos)
            if covered is not None:
                if self.cut.count:
                    # The shard being cut must end where the covered one begins.
                    size = covered.first_size
                    if size is None or self.cut.takes(size, _unmeasured):
                        raise OutputError(self._misfit(covered))
                    self._write(runner, self.pos, known=True)
                self._enter(covered)
                continue
            if self.pos >= self.last:
                if self.cut.count:
                    self._write(runner, self.last, known=True, last=True)
                return
            found = self._sample(self.pos)
            if found is None or self._stopped(self.pos):
                return
            piece, sizes = found
            position, number = self.pos
            if sizes is None:
                self._reject(position, piece)
            elif number < len(sizes):
                if not self.cut.takes(sizes[number], _unmeasured):
                    self._write(runner, self.pos, known=True)
                self._take(piece, position, number)
                self.cut.add(sizes[number])
            self.pos = _after(self.pos, sizes)

    def _misfit(self, covered: Any) -> str:
        return (
            f"{shard_name(self.pattern, covered.number)}: this run's cut before it does not "
            "fall where it begins: the shards come from runs of other plans. Pass "
            "--overwrite (mode='overwrite') to write the whole set anew"
        )

    def _enter(self, covered: Any) -> None:
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
        failure = piece.failures[position]
        reject = Rejected(failure.index, failure.source, str(failure.exception()))
        self.shard_rejects.append((position, reject))
        if position not in self.rejected:
            self.rejected[position] = reject
            if self.on_reject is not None:
                self.on_reject(reject)

    def _write(self, runner: TaskRunner, stop: Point, *, known: bool, last: bool = False,
               sentinel: int | None = None) -> None:  # fmt: skip
        """Queue the write of the shard being cut, whose samples end before ``stop``."""
        groups: list[tuple[Piece, list[Slot]]] = []
        for piece, slot in self.slots:
            if not groups or groups[-1][0] is not piece:
                groups.append((piece, []))
                piece.users.add(self.number)
            groups[-1][1].append(slot)
        name = shard_name(self.target, self.number)
        task = WriteTask(
            next(self.ids), self.number, name,
            pending_name(name) if self.mode == OVERWRITE else name, self.shard_first,
            tuple(tuple(slots) for _, slots in groups), tuple(self.shard_rejects), stop, known,
            last, sentinel, self.maxcount, self.maxsize, self.plan, self.options,
        )  # fmt: skip
        runner.add(task, [piece.payload for piece, _ in groups], first=True)
        self.writing[self.number] = task
        if not self.chain:
            self.number += 1
            self.shard_first, self.slots, self.shard_rejects = stop, [], []
            self.cut.begin()

    def _walk_chain(self, runner: TaskRunner) -> None:
        """gzip/zstd: give the next shard's write its candidates once they are encoded."""
        limit = self.chain_factor * self.maxsize
        while not self.chain_busy:
            if self.failure is not None and self.pos >= (self.failure[0], 0):
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
            while not (count > self.maxcount or size_sum > limit):
                found = None if self._stopped(stop) else self._sample(stop)
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
            enough = count > self.maxcount or size_sum > limit
            # Before an item that failed, the write finds whether a cut falls first.
            failed = self.failure is not None and stop >= (self.failure[0], 0)
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
            self._write(runner, stop, known=False, last=last, sentinel=sentinel)
            self.chain_busy = True

    # -- what the user sees -------------------------------------------------------------

    def _announce(self) -> None:
        """Tell of the shards complete from the first on, in order: ``on_shard``,
        ``post`` and the rejects file, as :class:`ShardWriter` does."""
        announced = False
        while self.in_order in self.shards:
            number = self.in_order
            self.in_order += 1
            if number in self.resumed:
                continue
            info = self.shards[number]
            if self.on_shard is not None:
                self.on_shard(info)
            if self.post is not None and self.mode != OVERWRITE:
                run_post(self.post, info.url)
            announced = True
        if announced and self.skipping and self.rejects_file and self.mode != OVERWRITE:
            end = self.ends[self.in_order - 1]  # where the shards from the first on reach
            before = [r for p, r in sorted(self.rejected.items()) if (p, 0) < end]
            save_rejects(self.unplaced + before, self.rejects_file, self.options)

    def _finish(self) -> Manifest:
        numbers = sorted(self.shards)
        infos = [self.shards[n] for n in numbers]
        options = self.options
        if self.mode == OVERWRITE:
            pending = [pending_name(shard_name(self.pattern, n)) for n in numbers]
            put_in_place(pending, infos, self.replaced, self.post, options)
        ends = [(self.shards[n].samples, self.ends.get(n)) for n in numbers]
        first = first_uncounted(ends, sorted(self.rejected), len(self.unplaced))
        keep = [shard_name(self.pattern, n) for n in numbers[first:]] if first is not None else []
        remove_records(self.pattern, self.start, keep, options)
        return Manifest(infos, None)

    def rejects_in_order(self) -> list[Rejected]:
        """Every item left out, in the order of the items."""
        return self.unplaced + [r for _, r in sorted(self.rejected.items())]


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


def shard_on_engine(
    encoder: ItemEncoder, order: list[int], pattern: str, *, engine: str, workers: int | None,
    address: str | None, num_cpus: float, retries: int, manifest: str | None,
    **options: Any,
) -> tuple[Manifest, list[Rejected]]:  # fmt: skip
    """Write the items of ``encoder``'s dataset, in ``order``, into the shards ``pattern``
    names, on ``engine``; return the manifest and the items left out (see the module
    docstring; ``options`` are :class:`ClusterRun`'s)."""
    run = ClusterRun(encoder, order, pattern, **options)
    shared = start_engine(engine, encoder, workers=workers, address=address, num_cpus=num_cpus)
    runner = TaskRunner(shared, retries, lambda result: result.failed())
    finished = False
    try:
        result = run.run(runner, shared.capacity())
        finished = True
    finally:
        runner.close(cancel=not finished)
    made = manifest_at(manifest, result.shards)
    if manifest is not None:
        save_manifest(made, manifest, run.options)
    return made, run.rejects_in_order()


__all__ = ["ClusterRun", "Tally", "shard_on_engine"]
