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
   rule (:mod:`tarkit.writing.cluster_walk`: a shard may end among the samples of one
   item, at a point: a position and a sample of it); as soon as a shard's end is known,
   a write task takes exactly its samples from the encode tasks' payloads (Ray moves
   them to its node), writes the shard and publishes it. Shards are written in
   parallel, in any order; items are encoded once.

gzip and zstd shards are cut by measuring the compressor, which only the writer can: their
write tasks find their own end, one shard after the other (encoding stays parallel).
Uncompressed, bzip2 and xz shards are cut by the driver.

Each shard gets a record (:mod:`tarkit.writing.shard_records`) before it is published,
so that ``mode="resume"`` keeps every complete shard, wherever it is in the set, and
writes only the others; the records stay when the set needs them (see there), and an
overwrite commits them with the shards (:mod:`tarkit.writing.finishing`). With a
manifest, each uncompressed shard's index is published before it
(:mod:`tarkit.writing.indexes`), and a resumed run checks the indexes of the shards it
keeps. An item that fails raises its error once every shard before it is written (as on one machine), or
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
from ..format.compression import MEASURED
from ..format.manifest import Manifest, ShardInfo
from ..storage import Move, manifest_at, manifest_files, remove_file, save_manifest
from .cluster_pieces import Piece, Pieces
from .cluster_tasks import Encoded, EncodeTask, WriteTask, Written
from .cluster_walk import ChainWalk, Cut, CutWalk
from .cuts import ShardCut
from .finishing import put_in_place, run_post
from .indexes import SetIndexes
from .items import ItemEncoder, ItemFailure, Point
from .patterns import (
    CREATE,
    OVERWRITE,
    RESUME,
    ShardPattern,
    existing_shards,
    finished_earlier,
    pending_name,
    record_path,
    refuse_existing,
    remove_pending,
    replaced_files,
    settle_earlier_run,
)
from .rejects import Rejected, save_rejects
from .shard_records import completed_ranges, first_uncounted, remove_records, run_digest

TICK = 0.5  # seconds between progress reports while waiting
PIECE_SECONDS = 1.0  # the work an encode task aims at
MAX_PIECE, PIECE_BYTES = 4096, 64 << 20  # the most items, and encoded bytes, of one


@dataclass(kw_only=True)
class Tally:
    """How far a run is, on either engine (:mod:`tarkit.writing.local_run` reports one
    too), for :class:`~tarkit.writing.from_dataset.ShardProgress`."""

    samples: int = 0
    shards: int = 0
    resumed: int = 0
    retries: int = 0
    message: str | None = None
    empty: int = 0
    rejected: int = 0


class ClusterRun:
    """One run of :func:`shard_on_engine` (see the module docstring); :meth:`run` it."""

    def __init__(
        self, encoder: ItemEncoder, order: list[int], pattern: str | ShardPattern, *,
        maxcount: int, maxsize: int, mode: str, start: int,
        storage_options: Mapping[str, Any] | None, manifest: str | None, skipping: bool, rejects: str | None, on_reject: Callable[[Rejected], object] | None,
        post: str | Callable[[str], object] | None,
        on_shard: Callable[[ShardInfo], object] | None, report: Callable[[Tally], object],
    ) -> None:  # fmt: skip
        pattern = self.pattern = ShardPattern.parse(pattern)
        self.encoder, self.order = encoder, order
        self.maxcount, self.maxsize, self.mode, self.start = maxcount, maxsize, mode, start
        self.options = dict(storage_options) if storage_options else None
        self.skipping, self.rejects_file, self.on_reject = skipping, rejects, on_reject
        self.post, self.on_shard, self.report = post, on_shard, report
        self.manifest = manifest
        self.total = len(order)
        # Workers write shards where the driver means: not relative to their own cwd.
        self.target = pattern.target
        self.compression = pattern.compression
        self.run_digest = run_digest(order, maxcount, maxsize, self.compression)
        if settle_earlier_run(pattern, self.options):
            report(Tally(message=finished_earlier(pattern)))
        existing = existing_shards(pattern, start, self.options)
        if mode == CREATE and existing:
            raise refuse_existing(pattern, existing, start)
        overwrite = mode == OVERWRITE
        self.replaced = replaced_files(pattern, existing, start, self.options) if overwrite else []
        self.indexes = SetIndexes(pattern, manifest, overwrite, self.options)
        covered = completed_ranges(pattern, start, self.run_digest, rejects if skipping else None,
                                   self.options, self.indexes.on) if mode == RESUME else []  # fmt: skip
        # The items whose samples are all in complete shards: not encoded again.
        lows = ((c.first[0] + (c.first[1] > 0), c.end[0]) for c in covered)
        skips = {low: high for low, high in lows if low < high}
        self.shards: dict[int, ShardInfo] = {}
        self.rejected: dict[int, Rejected] = {}  # by position
        self.unplaced: list[Rejected] = []  # rejects of shards without records
        self.tally = Tally()
        self.ends: dict[int, Point] = {}  # shard number: the point after its range
        self.uneven: dict[int, bool] = {}  # shard number: whether it is uneven
        self.records: dict[int, int] = {}  # overwrite: shard number: its record's bytes
        self.resumed: set[int] = set()
        for c in covered:
            self.ends[c.after - 1] = c.end
            self.uneven[c.after - 1] = c.uneven
            self.resumed.update(range(c.number, c.after))
            self.shards.update({c.number + i: info for i, info in enumerate(c.shards)})
            self.rejected.update(dict(c.rejects))
            self.unplaced += c.unplaced or []
            self.tally.resumed += sum(info.samples for info in c.shards)
        self.tally.samples = self.tally.resumed
        self.tally.shards = len(self.shards)
        self.failure: tuple[int, ItemFailure] | None = None  # the first item that failed
        # Encode tasks: generated in order over the positions not covered.
        self.pieces = Pieces(encoder, order, skips)
        cut = ShardCut(maxcount, maxsize, self.compression)
        walk = ChainWalk if self.compression in MEASURED else CutWalk  # (the module docstring)
        self.walk = walk(self.pieces, self.total, covered, pattern, start, cut, self._reject,
                         self._write)  # fmt: skip
        self.next_piece = 0
        self.piece_size = 0
        self.item_seconds: float | None = None
        self.item_bytes: float | None = None
        self.ids = iter(range(1 << 62))
        self.writing: dict[int, WriteTask] = {}
        self.in_order = start  # the next shard to announce (on_shard, post, rejects file)
        self.committing = False  # an overwrite's commit has begun

    # -- the loop ---------------------------------------------------------------------

    def run(self, runner: TaskRunner, capacity: int) -> Manifest:
        """Run every task; return the manifest (raises the first item's failure, or a
        task's that failed for good)."""
        self.runner = runner
        self.piece_size = max(1, min(32, -(-self.total // max(1, capacity * 4))))
        window = max(2, 2 * capacity)
        while True:
            self._add_pieces(runner, window)
            for position, failure in self.pieces.check():
                self._failed(position, failure)
            self.walk.advance()
            self.pieces.release(self.walk.pos)
            self._announce()
            if self._finished():
                break
            if not runner.busy():
                raise OutputError(f"{self.pattern.text}: nothing left to run at item position "
                                  f"{self.walk.pos} of {self.total}: a bug in tarkit, please "
                                  "report it")  # fmt: skip
            for outcome in runner.poll(TICK):
                self._ended(outcome)
            self.report(self.tally)
        if self.failure is not None:
            raise self.failure[1].exception()
        return self._finish()

    def _finished(self) -> bool:
        return self.walk.stopped(self.walk.pos) and not self.writing

    def _failed(self, position: int, failure: ItemFailure) -> None:
        """The item at ``position`` failed: the run stops there, unless it is skipping."""
        if not self.skipping and (self.failure is None or position < self.failure[0]):
            self.failure = position, failure
            self.walk.failed = position

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
            runner.add(
                EncodeTask(index=next(self.ids), first=first, indices=tuple(self.order[first:end]))
            )
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
            self.walk.written(task.number, None, task.stop)
            return
        assert result.info is not None and result.record is not None
        self.shards[task.number] = replace(result.info, url=self.pattern.name(task.number))
        self.indexes.written(self.shards[task.number].url, result.index_size)
        self.ends[task.number] = result.record.end
        self.uneven[task.number] = result.record.uneven
        if self.mode == OVERWRITE:
            self.records[task.number] = result.record_size
        self.tally.shards += 1
        self.walk.written(task.number, result.record.end, task.stop)

    def _reject(self, position: int, piece: Piece) -> Rejected:
        """The item at ``position`` is left out (once, however often the walk meets it)."""
        failure = piece.failures[position]
        reject = Rejected(failure.index, failure.source, str(failure.exception()))
        if position not in self.rejected:
            self.rejected[position] = reject
            if self.on_reject is not None:
                self.on_reject(reject)
        return reject

    def _write(self, cut: Cut) -> None:
        """Queue the write task of the shard ``cut``."""
        name = self.target.name(cut.number)
        task = WriteTask(
            index=next(self.ids), number=cut.number, name=name,
            path=pending_name(name) if self.mode == OVERWRITE else name,
            first=cut.first, slots=tuple(tuple(slots) for _, slots in cut.groups),
            rejects=tuple(cut.rejects), stop=cut.stop, known=cut.known, last=cut.last,
            sentinel=cut.sentinel, uneven_from=cut.uneven_from,
            maxcount=self.maxcount, maxsize=self.maxsize, run_digest=self.run_digest,
            storage_options=self.options,
            index_place=self.indexes.place(name) if self.indexes.on else None,
        )  # fmt: skip
        self.runner.add(task, [piece.payload for piece, _ in cut.groups], first=True)
        self.writing[cut.number] = task

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
        """Put the complete set in place (an overwrite: commit it whole, with the records
        the set needs), remove the other records and publish the manifest; return the
        manifest of the set."""
        numbers = sorted(self.shards)
        infos = [self.shards[n] for n in numbers]
        options, manifest, pattern = self.options, self.manifest, self.pattern
        ends = [(self.shards[n].samples, self.ends.get(n), self.uneven.get(n, False))
                for n in numbers]  # fmt: skip
        first = first_uncounted(ends, sorted(self.rejected), len(self.unplaced))
        kept = set(numbers[first:] if first is not None else [])  # shards that keep records
        if self.mode == OVERWRITE:
            records = []
            for n in numbers:
                name = pattern.name(n)
                if n in kept:
                    records.append(Move(pending_name(record_path(name)), record_path(name),
                                        self.records[n]))  # fmt: skip
                else:  # a record the set does not need
                    remove_file(pending_name(record_path(name)), options)
            pending = [pending_name(pattern.name(n)) for n in numbers]
            self.committing = True
            put_in_place(pattern, pending, infos, self.replaced, manifest, self.post, options,
                         self.indexes.sizes_of(infos), records)  # fmt: skip
        else:
            remove_records(pattern, self.start, [pattern.name(n) for n in sorted(kept)], options)
        if manifest is not None and self.mode != OVERWRITE:
            save_manifest(manifest_files(manifest, infos, self.indexes.on), options)
        return manifest_at(manifest, infos)

    def abandon(self) -> None:
        """After a failure: an overwrite that had not begun its commit removes its
        pending shards and records (the old set stays as it was, as with
        :class:`~tarkit.writing.shard_writer.ShardWriter`); a commit that failed leaves
        them to its journal, which the next run finishes."""
        if self.mode == OVERWRITE and not self.committing:
            remove_pending(self.pattern, self.options)

    def rejects_in_order(self) -> list[Rejected]:
        """Every item left out, in the order of the items."""
        return self.unplaced + [r for _, r in sorted(self.rejected.items())]


def shard_on_engine(
    encoder: ItemEncoder, order: list[int], pattern: str | ShardPattern, *, engine: str,
    workers: int | None, address: str | None, num_cpus: float, retries: int,
    manifest: str | None, **options: Any,
) -> tuple[Manifest, list[Rejected]]:  # fmt: skip
    """Write the items of ``encoder``'s dataset, in ``order``, into the shards ``pattern``
    names, on ``engine``; return the manifest and the items left out (see the module
    docstring; ``options`` are :class:`ClusterRun`'s)."""
    run = ClusterRun(encoder, order, pattern, manifest=manifest, **options)
    shared = start_engine(engine, encoder, workers=workers, address=address, num_cpus=num_cpus)
    runner = TaskRunner(shared, retries, lambda result: result.failed())
    finished = False
    try:
        made = run.run(runner, shared.capacity())
        finished = True
    finally:
        runner.close(cancel=not finished)
        if not finished:
            run.abandon()
    return made, run.rejects_in_order()


__all__ = ["ClusterRun", "Tally", "shard_on_engine"]
