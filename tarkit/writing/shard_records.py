"""The record of a shard: where in the item order it begins and ends, which is what
``mode="resume"`` trusts of it where counting samples cannot say.

Shards written by :func:`~tarkit.shard_dataset` on an engine are published as they are
complete, in any order, so an interrupted run can leave shard 5 without shard 3. Beside
each such shard ``NAME`` lies ``.NAME.shard.json`` (:func:`~.patterns.record_path`),
published before the shard itself (so a published shard always has one): the shard's
manifest entry, the points of the item order it covers (from its first sample to the
first sample of the next shard, the items left out by ``on_error="skip"`` between them
included), the tar size of its first sample (with which a resumed run checks that its
cut before the shard falls where the shard begins), where its first and last samples
lie and their keys (:class:`Held`, with which a resumed run checks that its dataset
still gives them: :func:`~tarkit.writing.kept.check_kept_items`) and the run digest (of
the item order and the limits: :func:`run_digest`). A resumed run keeps a shard whose
record has the same run digest and whose file matches the entry
(:func:`~tarkit.storage.stored_matches`), and writes only the others. A record also keeps
the SHA-256 of the shard's index when it has one: with indexes, a resumed run keeps an
index that matches the record and makes the others again
(:func:`~tarkit.writing.indexes.settle_index`).

A point is (position in the item order, sample of that item): an item may give several
samples (or none), and a shard may begin or end among the samples of one item.

Shards without records are counted (:func:`counted_end`): their samples and the items
left out before their end stand for as many items, as when every item gives one
sample; that is what they must be. A shard after an item that gave other than one
sample is *uneven* (its record is of version 2). The local engine writes records only
from the first shard that is uneven or whose end the count does not find. Once the
whole set is complete, the records before that shard are removed
(:func:`remove_records`), every record when there is none: they are for interrupted
runs only. Otherwise the records from that shard on stay, so that a resumed run, even
of a complete set, knows where each shard ends. Under ``mode="overwrite"`` the records
are committed with the shards they describe (:mod:`tarkit.writing.finishing`).
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
from array import array
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ..errors import OutputError
from ..format.manifest import ShardInfo
from ..storage import (
    RECORD_LIMIT,
    StorageOptions,
    location,
    publish,
    read_bytes,
    remove_file,
    stored_matches,
)
from .indexes import index_name, settle_index
from .items import Point
from .kept import KeptShard, Span, read_kept
from .patterns import ShardPattern, existing_shards, record_path, refuse_strangers
from .rejects import Rejected, load_rejects

RECORD_FORMAT = "tarkit-shard"
RECORD_VERSIONS = (1, 2)  # 2: an uneven shard (after an item that gave other than one sample)
PositionedReject = tuple[int, Rejected]  # (position in the item order, the item left out)


def counted_end(samples: int, rejects: int) -> Point:
    """Where shards without records end, by the count: ``samples`` (in them and every
    shard before) and ``rejects`` (the items left out before their end) stand for as
    many items, as when each item gives one sample.

    >>> counted_end(40, 2)
    (42, 0)
    """
    return (samples + rejects, 0)


def first_uncounted(
    shards: Sequence[tuple[int, Point | None, bool]], rejected: Sequence[int], unplaced: int
) -> int | None:
    """The first shard that is uneven or whose end :func:`counted_end` does not find
    (None when there is none: then a resumed run needs no records). ``shards`` gives
    each shard's samples, end (None for a shard counted already) and whether it is
    uneven, in order; ``rejected`` the positions of the items left out, sorted;
    ``unplaced`` how many more were left out before every one of those ends.

    >>> first_uncounted([(2, (3, 0), False), (2, (5, 0), False)], [1], 0) is None
    True
    >>> first_uncounted([(2, (2, 0), False), (2, (3, 1), True), (2, (5, 0), True)], [], 0)
    1
    >>> first_uncounted([(2, (2, 0), False), (2, (4, 0), True)], [], 0)  # one item gave 2, one 0
    1
    """
    held = 0
    for number, (samples, end, uneven) in enumerate(shards):
        held += samples
        if uneven:
            return number
        if end is None:
            continue
        before = bisect.bisect_left(rejected, end[0] + (end[1] > 0))  # at positions < end
        if end != counted_end(held, unplaced + before):
            return number
    return None


@dataclass(frozen=True)
class Held:
    """Where a shard's first and last samples lie in the item order (points), and their
    keys (as stored in the shard)."""

    first: Point
    last: Point
    first_key: str
    last_key: str

    @property
    def span(self) -> Span:
        return self.first, self.last


@dataclass(frozen=True, kw_only=True)
class ShardRecord:
    """What a shard covers: points ``first`` to ``end`` (exclusive) of the item order
    of the run whose digest is ``run``; ``first_size``: the tar bytes of its first
    sample; ``rejects``: the items left out in that range, with their positions;
    ``held``: its first and last samples (None in a record written before tarkit kept
    them); ``uneven``: whether an item before its end gave other than one sample;
    ``index``: the SHA-256 of the shard's index, when it has one."""

    run: str
    first: Point
    end: Point
    first_size: int
    rejects: tuple[PositionedReject, ...] = ()
    held: Held | None = None
    uneven: bool = False
    index: str | None = None


def run_digest(order: Sequence[int], maxcount: int, maxsize: int, compression: str | None) -> str:
    """The digest of what decides the cuts: the item order and the limits.

    >>> run_digest([2, 0, 1], 10, 1000, None) == run_digest([2, 0, 1], 10, 1000, None)
    True
    >>> run_digest([2, 0, 1], 10, 1000, None) == run_digest([0, 1, 2], 10, 1000, None)
    False
    """
    digest = hashlib.sha256(array("q", order).tobytes())
    digest.update(json.dumps([maxcount, maxsize, compression]).encode())
    return digest.hexdigest()[:32]


def write_record(
    shard: str, record: ShardRecord, info: ShardInfo, storage_options: StorageOptions | None,
    path: str | None = None,
) -> int:  # fmt: skip
    """Publish the record of ``shard`` (whose entry is ``info``) at ``path`` (default
    :func:`~.patterns.record_path`; an overwrite's pending one); return its size."""
    within = record.first[1] or record.end[1]
    held = record.held
    data = {
        "format": RECORD_FORMAT,
        "version": RECORD_VERSIONS[record.uneven],
        # The key stays "plan" (the digest's old name) so that existing records still resume.
        "plan": record.run,
        "positions": [record.first[0], record.end[0]],
        **({"samples": [record.first[1], record.end[1]]} if within else {}),
        "first_size": record.first_size,
        "shard": ShardInfo(
            location(shard).basename, info.samples, info.bytes, info.sha256
        ).to_json(),
        "rejects": [[p, r.index, r.source, r.cause] for p, r in record.rejects],
        **(
            {}
            if held is None
            else {"held": [[*held.first, held.first_key], [*held.last, held.last_key]]}
        ),  # fmt: skip
    }
    if record.index is not None:
        data["index"] = record.index
    # ASCII: a name, key or cause that is not UTF-8 survives as a \udcXX escape.
    text = (json.dumps(data) + "\n").encode("ascii")
    publish(path or record_path(shard), text, storage_options)
    return len(text)


def read_record(
    shard: str, run: str, storage_options: StorageOptions | None
) -> tuple[ShardRecord, ShardInfo] | None:
    """The record and entry of ``shard`` when its record is of the run ``run`` and the
    shard matches it; else None (a record that does not parse counts as absent)."""
    text = read_bytes(record_path(shard), storage_options, limit=RECORD_LIMIT)
    return _usable(shard, text, run, storage_options)


def _usable(
    shard: str, text: bytes | None, run: str, storage_options: StorageOptions | None
) -> tuple[ShardRecord, ShardInfo] | None:
    """The record ``text`` of ``shard`` and its entry, when it is of the run ``run`` and the
    shard matches it."""
    if text is None:
        return None
    try:
        data = json.loads(text)
        if data.get("format") != RECORD_FORMAT or data.get("version") not in RECORD_VERSIONS:
            return None
        entry = data["shard"]
        info = ShardInfo(shard, int(entry["samples"]), int(entry["bytes"]), entry.get("sha256"))
        first, end = (int(p) for p in data["positions"])
        first_sample, end_sample = (int(k) for k in data.get("samples") or (0, 0))
        rejects = tuple(
            (int(p), Rejected(int(index), str(source), str(cause)))
            for p, index, source, cause in data.get("rejects") or []
        )
        held = None
        if data.get("held") is not None:
            (p, k, first_key), (q, j, last_key) = data["held"]
            held = Held((int(p), int(k)), (int(q), int(j)), str(first_key), str(last_key))
        index = data.get("index")
        record = ShardRecord(run=str(data["plan"]), first=(first, first_sample),
                             end=(end, end_sample), first_size=int(data["first_size"]),
                             rejects=rejects, held=held, uneven=data["version"] == 2,
                             index=index if isinstance(index, str) else None)  # fmt: skip
    except (ValueError, KeyError, TypeError):
        return None
    if record.run != run or not stored_matches(shard, info.bytes, info.sha256, None,
                                                 storage_options):  # fmt: skip
        return None
    return record, info


@dataclass(kw_only=True)
class Covered:
    """Complete shards ``number``… of a run being resumed, covering points ``first``
    to ``end`` of its item order: one shard with a record (``held``, ``uneven``: the
    record's), or the shards an interrupted run left without records before the first
    missing one or the first with a record (counted: :func:`counted_end`; read whole, so
    ``kept`` has their keys). ``first_size`` is the tar size of the first sample (None
    when unknown)."""

    number: int
    kept: list[KeptShard]
    first: Point
    end: Point
    rejects: list[PositionedReject]
    first_size: int | None = None
    unplaced: list[Rejected] | None = None  # rejects of a run without records
    held: Held | None = None
    uneven: bool = False

    @property
    def shards(self) -> list[ShardInfo]:
        return [shard.info for shard in self.kept]

    @property
    def after(self) -> int:
        """The number of the shard after these."""
        return self.number + len(self.shards)


def completed_ranges(
    pattern: ShardPattern,
    start: int,
    run: str,
    rejects: str | None,
    storage_options: StorageOptions | None,
    indexes: bool = False,
) -> list[Covered]:
    """What an interrupted run left under ``pattern`` (from shard ``start`` on) that a
    resumed run whose digest is ``run`` keeps, in order of position.

    The shards from ``start`` on up to the first missing one or the first with a record
    are those of a run without records: they are read whole (counting their samples and
    taking their keys: :func:`~tarkit.writing.kept.read_kept`) and, with the items of the
    rejects file ``rejects`` (``on_error="skip"``) that no record places, cover the items their samples and those rejects stand for
    (:func:`counted_end`). Every other shard needs a record of this run. With
    ``indexes``, the index of each shard kept is made right
    (:func:`~tarkit.writing.indexes.settle_index`: made in the read of a shard without a
    record, else checked against its record). Raises
    :class:`~tarkit.errors.OutputError` for a shard that is neither (another run's, or
    one with a record of another run), and for shards whose points do not follow one
    another.
    """
    existing = existing_shards(pattern, start, storage_options)
    names = {shard.url for shard in existing}
    found: list[Covered] = []
    number = start
    prefix: list[KeptShard] = []
    first_recorded = None  # the record that ends the shards without records, read once
    while pattern.name(number) in names:
        name = pattern.name(number)
        text = read_bytes(record_path(name), storage_options, limit=RECORD_LIMIT)
        if text is not None:  # a record of another run makes it a stranger, not counted
            first_recorded = _usable(name, text, run, storage_options)
            break
        prefix.append(read_kept(name, storage_options, indexes))
        number += 1
    strangers = []
    for shard in existing:
        canonical = shard.url == pattern.name(shard.number)
        if canonical and shard.number < number:
            continue  # one of the shards without records
        if not canonical:
            recorded = None
        elif shard.number == number:
            recorded = first_recorded
        else:
            recorded = read_record(shard.url, run, storage_options)
        if recorded is None:
            strangers.append(shard)
            continue
        record, info = recorded
        if indexes:
            settle_index(shard.url, index_name(shard.url), None, record.index, storage_options)
        held = record.held
        first_key, last_key = (held.first_key, held.last_key) if held else (None, None)
        kept = KeptShard(info, first_key, last_key, None)
        found.append(Covered(number=shard.number, kept=[kept], first=record.first,
                             end=record.end, rejects=list(record.rejects),
                             first_size=record.first_size, held=held,
                             uneven=record.uneven))  # fmt: skip
    if strangers:
        raise refuse_strangers(pattern, strangers)
    if prefix:
        # The rejects file lists the items left out up to the last complete shard: those
        # no record places are the counted shards'.
        placed = {reject.index for covered in found for _, reject in covered.rejects}
        listed = load_rejects(rejects, storage_options) if rejects is not None else []
        unplaced = [reject for reject in listed if reject.index not in placed]
        end = counted_end(sum(s.info.samples for s in prefix), len(unplaced))
        found.insert(0, Covered(number=start, kept=prefix, first=(0, 0), end=end, rejects=[],
                                unplaced=unplaced))  # fmt: skip
    for before, after in itertools.pairwise(found):
        if after.number < before.after or after.first < before.end:
            raise OutputError(
                f"{pattern.text}: shard {after.number} does not follow shard {before.after - 1} "
                "in the item order: the shards come from another run (another item order or other "
                "limits). Pass "
                "--overwrite (mode='overwrite') to write the whole set anew"
            )
    return found


def remove_records(
    pattern: ShardPattern, start: int, keep: Collection[str],
    storage_options: StorageOptions | None,
) -> None:  # fmt: skip
    """Remove the records of the shards ``pattern`` names from ``start`` on, but those of
    the shards ``keep`` names."""
    kept = {record_path(shard) for shard in keep}
    for record in existing_shards(pattern.records, start, storage_options):
        if record.url not in kept:
            remove_file(record.url, storage_options)
