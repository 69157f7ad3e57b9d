"""shard_dataset on this machine (the local engine): workers of this machine encode the
items (:mod:`tarkit.writing.workers`), this process writes their samples in order into
one :class:`~tarkit.writing.shard_writer.ShardWriter`.

Each item's samples are written one after another, and the shard cut counts samples. A
shard that comes after an item that gave other than one sample, or whose end the count
does not find (:func:`~tarkit.writing.shard_records.counted_end`), gets a record before
it is published, and so does every shard after it (:mod:`tarkit.writing.shard_records`;
under ``mode="overwrite"`` the records wait under pending names and are committed with
the shards). ``mode="resume"`` first finishes an overwrite's stopped commit, checks
that the dataset still gives the first and last samples of every kept shard
(:func:`~tarkit.writing.kept.check_kept_items`: where the shard's record says, or by the
count for shards without one), then goes on from the item, and the sample of it, where
the complete shards end.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import OutputError
from ..format.manifest import Manifest, ShardInfo
from ..format.samples import raw_key
from ..sizes import parse_size
from ..storage import Move
from .cluster import Tally
from .indexes import indexed_pattern
from .items import EncodedItem, ItemEncoder, ItemFailure, Point
from .kept import check_kept_items, counted_spans
from .patterns import (
    OVERWRITE,
    RESUME,
    ShardPattern,
    finished_earlier,
    pending_name,
    record_path,
    settle_earlier_run,
)
from .rejects import Rejected, save_rejects
from .shard_records import (
    Covered,
    Held,
    PositionedReject,
    ShardRecord,
    completed_ranges,
    counted_end,
    first_uncounted,
    remove_records,
    run_digest,
    write_record,
)
from .shard_writer import ShardWriter
from .workers import close_results, iterable_results, map_results


@dataclass
class _Walk:
    """Where the local run is in the item order, for the records of its shards."""

    point: Point  # the sample being written; after the last item, where the items end
    first: Point  # where the shard being written begins
    recording: bool  # records from now on: a shard was uneven or not counted, or had a record
    ends: list[tuple[Point | None, bool]]  # of the complete shards (None: counted by a run
    # without records), and whether each is uneven
    rejected_at: list[int]  # the positions of the items left out (but a counted run's)
    uneven_from: int | None  # the first item that gave other than one sample
    first_sample: tuple[Point, bytes] | None = None  # of the shard being written
    last_sample: tuple[Point, bytes] | None = None  # the one written last
    rejects: list[PositionedReject] = field(default_factory=list)  # left out since ``first``
    empty: int = 0  # items that gave no sample

    def uneven(self) -> bool:
        """Whether the shard ending at :attr:`point` comes after an uneven item."""
        return self.uneven_from is not None and (self.uneven_from, 0) < self.point

    def held(self) -> Held:
        """The first and last samples of the shard that ends at :attr:`point`."""
        assert self.first_sample is not None and self.last_sample is not None
        (first, head), (last, tail) = self.first_sample, self.last_sample
        return Held(first, last, raw_key(head), raw_key(tail))


def write_here(
    encoder: ItemEncoder, order: list[int] | None, num_workers: int, pattern: ShardPattern,
    maxcount: int, maxsize: int | str, manifest: str | None, skipping: bool,
    rejects: str | None, report: Callable[[Tally], object], *, mode: str, start: int,
    storage_options: Mapping[str, Any] | None,
    post: str | Callable[[str], object] | None, on_shard: Callable[[ShardInfo], object] | None,
    on_reject: Callable[[Rejected], object] | None,
) -> tuple[Manifest, list[Rejected]]:  # fmt: skip
    """Write the items of ``encoder``'s dataset (in ``order``, or as an iterable yields
    them) into the shards ``pattern`` names, on this machine (see the module docstring);
    return the manifest and the items left out. ``report`` is called after each item."""
    options = storage_options
    digest = run_digest(order or [], maxcount, parse_size(maxsize, "maxsize"),
                        pattern.compression)  # fmt: skip
    if settle_earlier_run(pattern, options):  # (before a resume looks at the shards)
        report(Tally(message=finished_earlier(pattern)))
    covered = _resumable(pattern, start, digest, rejects if skipping else None, options, mode,
                         indexed_pattern(pattern, manifest))  # fmt: skip
    rejected = [r for c in covered for r in [*(c.unplaced or []), *(r for _, r in c.rejects)]]
    published: list[int | None] = [len(rejected) if covered else None]  # in the rejects file
    at = covered[-1].end if covered else (0, 0)
    ends = [(c.end if c.unplaced is None else None, c.uneven) for c in covered for _ in c.kept]
    rejected_at = [position for c in covered for position, _ in c.rejects]
    uneven_from = min((c.first[0] for c in covered if c.uneven), default=None)
    walk = _Walk(at, at, any(c.unplaced is None for c in covered), ends, rejected_at,
                 uneven_from)  # fmt: skip
    unplaced = sum(len(c.unplaced or ()) for c in covered)

    def sealed(info: ShardInfo) -> Move | None:
        held, uneven = writer.samples_done + info.samples, walk.uneven()
        counted = walk.point == counted_end(held, len(rejected))
        walk.recording = walk.recording or uneven or not counted
        walk.ends.append((walk.point, uneven))
        beside = None
        if walk.recording:
            assert walk.first_sample is not None
            record = ShardRecord(run=digest, first=walk.first, end=walk.point,
                                 first_size=len(walk.first_sample[1]),
                                 rejects=tuple(walk.rejects), held=walk.held(),
                                 uneven=uneven)  # fmt: skip
            if mode == OVERWRITE:  # committed with the shards
                pending = pending_name(record_path(info.url))
                size = write_record(info.url, record, info, options, pending)
                beside = Move(pending, record_path(info.url), size)
            else:
                write_record(info.url, record, info, options)
        walk.first, walk.first_sample, walk.rejects = walk.point, None, []
        return beside

    def shard_done(info: ShardInfo) -> None:
        # The rejects file keeps up with the complete shards, for mode="resume".
        if rejects is not None and mode != OVERWRITE and published[0] != len(rejected):
            save_rejects(rejected, rejects, options)
            published[0] = len(rejected)
        if on_shard is not None:
            on_shard(info)

    writer = ShardWriter(
        pattern, maxcount=maxcount, maxsize=maxsize, start=start, post=post,
        manifest=manifest, on_shard=shard_done, storage_options=options, mode=mode,
        mtime=encoder.mtime,
        # the rejects file must keep step with the shards in place: one at a time
        overlap=rejects is None, sealed=sealed,
        resumed=[shard for c in covered for shard in c.kept] if mode == RESUME else None,
    )  # fmt: skip
    resumed = writer.samples_done
    position, skip = at
    if order is not None:
        if covered:
            _check_kept(covered, encoder, order, None, position)
        results = map_results(encoder, order[position:], num_workers)
    else:
        items: Iterator[tuple[int, Any]] = enumerate(encoder.dataset)
        if covered:  # (read here up to where the run goes on)
            items = _check_kept(covered, encoder, None, items, position)
        results = iterable_results(encoder, items, num_workers)
    previous_key = None  # of the sample written last
    with writer:
        try:
            for result in results:
                index = position if order is None else order[position]
                if isinstance(result, ItemFailure):
                    failure: ItemFailure | None = result
                else:
                    failure = None if skip else encoder.follows(previous_key, result.first_key,
                                                                index)  # fmt: skip
                    if failure is None:
                        _write_item(writer, walk, result, position, skip, index)
                        previous_key = result.last_key or previous_key
                if failure is not None:
                    if not skipping:
                        raise failure.exception()
                    reject = Rejected(failure.index, failure.source, str(failure.exception()))
                    rejected.append(reject)
                    walk.rejects.append((position, reject))
                    walk.rejected_at.append(position)
                    if on_reject is not None:
                        on_reject(reject)
                position, skip = position + 1, 0
                report(Tally(samples=writer.samples, shards=len(writer.shards), resumed=resumed,
                             rejected=len(rejected), empty=walk.empty))  # fmt: skip
            walk.point = (position, 0)  # the last shard ends where the items do
        finally:
            close_results(results)
    # The records stay from the first shard that is uneven or not counted on.
    held = [(shard.samples, *end) for shard, end in zip(writer.shards, walk.ends, strict=True)]
    first = first_uncounted(held, walk.rejected_at, unplaced)
    keep = [shard.url for shard in writer.shards[first:]] if first is not None else []
    remove_records(pattern, start, keep, options)
    return writer.manifest_of(), rejected


def _write_item(writer: ShardWriter, walk: _Walk, item: EncodedItem, position: int,
                skip: int, index: int) -> None:  # fmt: skip
    """Write the samples of the item at ``position`` (but the first ``skip``, which the
    complete shards of the run being resumed hold)."""
    if len(item.samples) < skip:
        raise OutputError(
            f"item {index} gave {len(item.samples)} samples, and the complete shards of the "
            f"run being resumed hold {skip} of them: to_sample must give the same samples "
            "on every run"
        )
    if not item.samples:
        walk.empty += 1
    if len(item.samples) != 1 and walk.uneven_from is None:
        walk.uneven_from = position
    for number in range(skip, len(item.samples)):
        raw = item.samples[number]
        walk.point = (position, number)
        writer.write_raw(raw)
        walk.last_sample = walk.point, raw
        if walk.first_sample is None:
            walk.first_sample = walk.last_sample


def _check_kept(
    covered: list[Covered], encoder: ItemEncoder, order: list[int] | None,
    items: Iterator[tuple[int, Any]] | None, resume_at: int,
) -> Iterator[tuple[int, Any]]:  # fmt: skip
    """Check the dataset against the shards a resumed run keeps, by the keys of each
    one's first and last samples (:func:`~tarkit.writing.kept.check_kept_items`): where
    its record places them, or by the count for shards without records (each of their
    items gave one sample). Only the items of those samples are encoded; a shard whose
    record predates the keys is not checked. ``order`` is a map-style dataset's item
    order; else ``items`` are an iterable's (index, item) pairs from the first, read
    here up to ``resume_at``: returns them from there on (those read again included)."""
    kept, spans = [], []
    for c in covered:
        if c.unplaced is not None:
            left_out = {reject.index for reject in c.unplaced}
            end = c.end[0] if order is None else min(c.end[0], len(order))
            positions = (
                p for p in range(end) if (p if order is None else order[p]) not in left_out
            )
            kept += c.kept
            spans += counted_spans(c.kept, positions)
        elif c.held is not None:
            kept += c.kept
            spans.append(c.held.span)
    needed = {point[0] for span in spans if span is not None for point in span}
    encoded: dict[int, EncodedItem | ItemFailure] = {}
    rest: Iterator[tuple[int, Any]] = iter(())
    if order is not None:
        encoded.update((p, encoder((order[p],))[0]) for p in needed if p < len(order))
        count: int | None = len(order)
    else:
        assert items is not None
        last = max(needed | {resume_at - 1})  # read up to here
        read, again = 0, []
        for position, item in itertools.islice(items, last + 1):
            read += 1
            if position in needed:
                encoded[position] = encoder.encode(position, item)
            if position >= resume_at:
                again.append((position, item))
        count = read if read <= last else None
        rest = itertools.chain(again, items)

    def key_at(point: Point) -> str | None:
        found = encoded.get(point[0])
        return found.key(point[1]) if isinstance(found, EncodedItem) else None

    check_kept_items(kept, spans, key_at, count)
    return rest


def _resumable(
    pattern: ShardPattern, start: int, digest: str, rejects: str | None,
    options: Mapping[str, Any] | None, mode: str, indexes: bool,
) -> list[Covered]:  # fmt: skip
    """The complete shards a resumed run keeps, from ``start`` on without a gap (a
    shard after a gap, which a run on a cluster can leave, is refused by the writer);
    the caller first finishes the commit of an overwrite stopped midway (as every writer
    does: :func:`~tarkit.writing.patterns.settle_earlier_run`); with ``indexes``, their
    indexes made right (:func:`~tarkit.writing.shard_records.completed_ranges`)."""
    if mode != RESUME:
        return []
    kept: list[Covered] = []
    for covered in completed_ranges(pattern, start, digest, rejects, options, indexes):
        if covered.number != (kept[-1].after if kept else start):
            break
        kept.append(covered)
    return kept


__all__ = ["write_here"]
