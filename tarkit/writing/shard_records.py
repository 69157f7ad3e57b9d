"""The record of a shard written on a cluster: what ``mode="resume"`` trusts of it.

Shards written by :func:`~tarkit.shard_dataset` on an engine are published as they are
complete, in any order, so an interrupted run can leave shard 5 without shard 3. Beside
each such shard ``NAME`` lies ``.NAME.shard.json``, published before the shard itself
(so a published shard always has one): the shard's manifest entry, the positions of the
item order it covers (from its first item to the first item of the next shard, the
items left out by ``on_error="skip"`` between them included), the tar size of its first
sample (with which a resumed run checks that its cut before the shard falls where the
shard begins), the plan of the run (a digest of the item order and the limits) and the
SHA-256 of the shard's index when it has one. A resumed run keeps a shard whose record
has the same plan and whose file matches the entry
(:func:`~tarkit.storage.stored_matches`), and writes only the others; with indexes, it
keeps an index that matches the record and makes the others again
(:func:`~tarkit.writing.indexes.settle_index`). Once the whole set is complete the
records are removed: they are for interrupted runs only.

>>> record_path("out/train-000003.tar"), record_path("s3://b/train-%06d.tar")
('out/.train-000003.tar.shard.json', 's3://b/.train-%06d.tar.shard.json')
"""

from __future__ import annotations

import hashlib
import itertools
import json
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import OutputError
from ..format.manifest import ShardInfo
from ..storage import StorageOptions, location, publish, read_bytes, stored_matches
from .index import index_shard, read_shard
from .indexes import index_name, settle_index
from .patterns import existing_shards, refuse_strangers, shard_name
from .rejects import Rejected, load_rejects

RECORD_FORMAT = "tarkit-shard"
RECORD_VERSION = 1
PositionedReject = tuple[int, Rejected]  # (position in the item order, the item left out)


@dataclass(frozen=True)
class ShardRecord:
    """What a shard covers: positions ``first`` to ``end`` (exclusive) of the item order
    of the run whose plan digest is ``plan``; ``first_size``: the tar bytes of its first
    sample; ``rejects``: the items left out in that range, with their positions;
    ``index``: the SHA-256 of the shard's index, when it has one."""

    plan: str
    first: int
    end: int
    first_size: int
    rejects: tuple[PositionedReject, ...] = ()
    index: str | None = None


def plan_digest(order: Sequence[int], maxcount: int, maxsize: int, compression: str | None) -> str:
    """The digest of what decides the cuts: the item order and the limits.

    >>> plan_digest([2, 0, 1], 10, 1000, None) == plan_digest([2, 0, 1], 10, 1000, None)
    True
    >>> plan_digest([2, 0, 1], 10, 1000, None) == plan_digest([0, 1, 2], 10, 1000, None)
    False
    """
    digest = hashlib.sha256(array("q", order).tobytes())
    digest.update(json.dumps([maxcount, maxsize, compression]).encode())
    return digest.hexdigest()[:32]


def record_path(shard: str) -> str:
    """Where the record of ``shard`` lives: ``.NAME.shard.json`` beside it (of a shard
    pattern: the pattern of the records)."""
    where = location(shard)
    return where.sibling(f".{where.basename}.shard.json")


def write_record(
    shard: str, record: ShardRecord, info: ShardInfo, storage_options: StorageOptions | None
) -> None:
    """Publish the record of ``shard`` (whose entry is ``info``)."""
    data = {
        "format": RECORD_FORMAT,
        "version": RECORD_VERSION,
        "plan": record.plan,
        "positions": [record.first, record.end],
        "first_size": record.first_size,
        "shard": ShardInfo(
            location(shard).basename, info.samples, info.bytes, info.sha256
        ).to_json(),
        "rejects": [[p, r.index, r.source, r.cause] for p, r in record.rejects],
    }
    if record.index is not None:
        data["index"] = record.index
    # ASCII: a name or cause that is not UTF-8 survives as a \udcXX escape.
    publish(record_path(shard), (json.dumps(data) + "\n").encode("ascii"), storage_options)


def read_record(
    shard: str, plan: str, storage_options: StorageOptions | None
) -> tuple[ShardRecord, ShardInfo] | None:
    """The record and entry of ``shard`` when its record is of the plan ``plan`` and the
    shard matches it; else None (a record that does not parse counts as absent)."""
    text = read_bytes(record_path(shard), storage_options)
    if text is None:
        return None
    try:
        data = json.loads(text)
        if (data.get("format"), data.get("version")) != (RECORD_FORMAT, RECORD_VERSION):
            return None
        entry = data["shard"]
        info = ShardInfo(shard, int(entry["samples"]), int(entry["bytes"]), entry.get("sha256"))
        first, end = (int(p) for p in data["positions"])
        rejects = tuple(
            (int(p), Rejected(int(index), str(source), str(cause)))
            for p, index, source, cause in data.get("rejects") or []
        )
        index = data.get("index")
        record = ShardRecord(str(data["plan"]), first, end, int(data["first_size"]), rejects,
                             index if isinstance(index, str) else None)  # fmt: skip
    except (ValueError, KeyError, TypeError):
        return None
    if record.plan != plan or not stored_matches(shard, info.bytes, info.sha256, None,
                                                 storage_options):  # fmt: skip
        return None
    return record, info


@dataclass
class Covered:
    """Complete shards ``number``… of a run being resumed, covering positions ``first``
    to ``end`` of its item order: one shard with a record, or the shards an interrupted
    run that kept no records (the local engine's) left before the first missing one.
    ``first_size`` is the tar size of the first sample (None when unknown)."""

    number: int
    shards: list[ShardInfo]
    first: int
    end: int
    rejects: list[PositionedReject]
    first_size: int | None = None
    unplaced: list[Rejected] | None = None  # rejects of a run without records

    @property
    def after(self) -> int:
        """The number of the shard after these."""
        return self.number + len(self.shards)


def completed_ranges(
    pattern: str,
    start: int,
    plan: str,
    rejects: str | None,
    storage_options: StorageOptions | None,
    indexes: bool = False,
) -> list[Covered]:
    """What an interrupted run left under ``pattern`` (from shard ``start`` on) that a
    resumed run of plan ``plan`` keeps, in order of position.

    The shards from ``start`` on up to the first missing one or the first with a record
    are those of a run without records: they are read whole (counting their samples)
    and, with the rejects file ``rejects`` (``on_error="skip"``), cover the positions
    their samples and those rejects stand for, as :class:`ShardWriter`'s resume counts
    them. Every other shard needs a record of this plan. With ``indexes``, the index of
    each shard kept is made right (:func:`~tarkit.writing.indexes.settle_index`: made in
    the read of a shard without a record, else checked against its record). Raises
    :class:`~tarkit.errors.OutputError` for a shard that is neither (another run's), and
    for shards whose positions do not follow one another.
    """
    existing = existing_shards(pattern, start, storage_options)
    names = {shard.url for shard in existing}
    found: list[Covered] = []
    number = start
    prefix: list[ShardInfo] = []
    first_recorded = None  # the record that ends the shards without records, read once
    while shard_name(pattern, number) in names:
        name = shard_name(pattern, number)
        first_recorded = read_record(name, plan, storage_options)
        if first_recorded is not None:
            break
        if indexes:
            info, made = read_shard(name, strict=True, storage_options=storage_options)
            settle_index(name, index_name(name), made, None, storage_options)
        else:
            info = index_shard(name, strict=True, storage_options=storage_options)
        prefix.append(info)
        number += 1
    if prefix:
        unplaced = load_rejects(rejects, storage_options) if rejects is not None else []
        consumed = sum(s.samples for s in prefix) + len(unplaced)
        found.append(Covered(start, prefix, 0, consumed, [], None, unplaced))
    strangers = []
    for shard in existing:
        canonical = shard.url == shard_name(pattern, shard.number)
        if canonical and shard.number < number:
            continue  # one of the shards without records
        if not canonical:
            recorded = None
        elif shard.number == number and first_recorded is not None:
            recorded = first_recorded
        else:
            recorded = read_record(shard.url, plan, storage_options)
        if recorded is None:
            strangers.append(shard)
            continue
        record, info = recorded
        if indexes:
            settle_index(shard.url, index_name(shard.url), None, record.index, storage_options)
        found.append(Covered(shard.number, [info], record.first, record.end,
                             list(record.rejects), record.first_size))  # fmt: skip
    if strangers:
        raise refuse_strangers(pattern, strangers)
    for before, after in itertools.pairwise(found):
        if after.number < before.after or after.first < before.end:
            raise OutputError(
                f"{pattern}: shard {after.number} does not follow shard {before.after - 1} "
                "in the item order: the shards come from runs of other plans. Pass "
                "--overwrite (mode='overwrite') to write the whole set anew"
            )
    return found
