"""The record of a finished map output: what ``--resume`` trusts instead of redoing a shard.

Beside every output ``NAME`` of :func:`tarkit.map_shards` lies ``.NAME.map.json``: the
output's manifest entry, the input it came from, what made it (the function, or the
command and its options: :func:`~tarkit.processing.mappers.made_by`), its metadata rows
and rejects, and, for an object store, the ETag the store gave the object. A task writes
the record before it publishes the output (so a published output always has one) and,
for a remote output, again after, with the ETag.

An output is complete when its record exists, names the same input and the same maker,
and the output matches it: the size and sha256 of a local file; the size of a remote
object, and its ETag when the record has one (an object replaced by another of the same
size then does not pass). A record that does not parse, or of an older version, counts
as absent. Before a run resumes, :func:`check_made_by` refuses outputs that another
function or command made: resuming would keep them beside this run's.
"""

from __future__ import annotations

import glob as globbing
import json
from collections.abc import Sequence
from typing import Any

from ..errors import SampleError, UsageError
from ..format.manifest import ShardInfo
from ..storage import (
    RECORD_LIMIT,
    StorageOptions,
    list_files,
    location,
    publish,
    read_bytes,
    stored_matches,
)
from .mappers import Maker, Row

RECORD_FORMAT = "tarkit-map-shard"
RECORD_VERSION = 2  # 2: what made the output ("made_by")
_READERS = 16  # records of remote outputs read at once


def record_path(output: str) -> str:
    """Where the record of ``output`` lives: ``.NAME.map.json`` beside it.

    >>> record_path("out/x-000.tar")
    'out/.x-000.tar.map.json'
    >>> record_path("s3://b/d/x.tar")
    's3://b/d/.x.tar.map.json'
    """
    where = location(output)
    return where.sibling(f".{where.basename}.map.json")


def write_record(
    output: str,
    source: str,
    info: ShardInfo,
    rows: list[Row],
    rejects: list[str],
    made_by: Maker,
    etag: str | None = None,
    storage_options: StorageOptions | None = None,
    at: str | None = None,
    index: str | None = None,
) -> int:
    """Publish the record of ``output`` (made from ``source`` by ``made_by``; ``index``:
    the SHA-256 of its index, when it has one) at :func:`record_path` (or ``at``: its
    pending name, for an overwrite's commit); its size in bytes. Raises SampleError when
    a metadata row is not JSON."""
    where = location(output)
    entry = ShardInfo(where.basename, info.samples, info.bytes, info.sha256)
    record: dict[str, Any] = {
        "format": RECORD_FORMAT,
        "version": RECORD_VERSION,
        "input": source,
        "made_by": made_by,
        "shard": entry.to_json(),
        "metadata": rows,
        "rejects": rejects,
    }
    if etag is not None:
        record["etag"] = etag
    if index is not None:
        record["index"] = index
    try:
        # ASCII: a key or URL that is not UTF-8 survives as a \udcXX escape.
        text = json.dumps(record, allow_nan=False) + "\n"
    except (TypeError, ValueError) as exc:
        raise SampleError(f"a metadata row is not JSON: {exc}", source=source) from None
    data = text.encode("ascii")
    publish(at or record_path(output), data, storage_options)
    return len(data)


def completed_record(
    output: str,
    source: str,
    made_by: Maker,
    storage_options: StorageOptions | None = None,
) -> tuple[ShardInfo, list[Row], list[str], str | None] | None:
    """The entry, metadata rows, rejects and index digest (None: none recorded) of
    ``output`` if it is complete, else None (see the module docstring)."""
    record = _read_record(output, storage_options)
    if record is None or record.get("input") != source or record.get("made_by") != made_by:
        return None
    try:
        shard = record["shard"]
        info = ShardInfo(output, int(shard["samples"]), int(shard["bytes"]), shard.get("sha256"))
        rows = list(record.get("metadata") or [])
        rejects = [str(r) for r in record.get("rejects") or []]
        etag = record.get("etag")
        index = record.get("index")
    except (ValueError, KeyError, TypeError):
        return None
    if not stored_matches(output, info.bytes, info.sha256, etag, storage_options):
        return None
    return info, rows, rejects, index if isinstance(index, str) else None


def check_made_by(
    outputs: Sequence[str], made_by: Maker, storage_options: StorageOptions | None = None
) -> None:
    """Raise :class:`~tarkit.errors.UsageError` when an output that exists has a record
    saying that another maker (function, command, options) made it: a resumed run would
    keep it beside its own outputs. Names the first such output, how many there are, and
    what differs. Records of remote outputs are read several at once."""

    def made_otherwise(output: str) -> Maker | None:
        """The maker of ``output`` when it exists and another one made it."""
        record = _read_record(output, storage_options)
        if record is None or record.get("made_by") == made_by:
            return None
        if not list_files(globbing.escape(output), storage_options):
            return None  # a record whose output is gone: nothing to mix
        return record.get("made_by") or {}

    if any(location(output).remote for output in outputs):
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(_READERS, len(outputs))) as pool:
            makers = list(pool.map(made_otherwise, outputs))
    else:
        makers = [made_otherwise(output) for output in outputs]
    others = [(o, m) for o, m in zip(outputs, makers, strict=True) if m is not None]
    if others:
        output, then = others[0]
        raise UsageError(
            f"{output}: {_maker_difference(then, made_by)} ({len(others)} of {len(outputs)} "
            "outputs): resuming would keep outputs of both in one set. Pass --overwrite "
            "(mode='overwrite') to redo every shard, or write the outputs elsewhere"
        )


def _read_record(output: str, storage_options: StorageOptions | None) -> dict[str, Any] | None:
    """The record of ``output`` when there is one of this format and version, else None."""
    text = read_bytes(record_path(output), storage_options, limit=RECORD_LIMIT)
    if text is None:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    if record.get("format") != RECORD_FORMAT or record.get("version") != RECORD_VERSION:
        return None
    return record


def recorded_outputs(pattern: str, storage_options: StorageOptions | None = None) -> list[str]:
    """The files matching the glob ``pattern`` that have a record beside them: outputs
    of an earlier :func:`~tarkit.map_shards` run (whatever its inputs)."""
    records = set(list_files(record_path(pattern), storage_options))
    return [
        found for found in list_files(pattern, storage_options) if record_path(found) in records
    ]


def _describe_maker(maker: Maker) -> str:
    """How a message names a maker.

    >>> _describe_maker({"command": "gzip sample.txt", "options": {"multi": False}})
    "the command 'gzip sample.txt'"
    >>> _describe_maker({"function": "prep:resize"})
    'the function prep:resize'
    """
    if "command" in maker:
        return f"the command '{maker['command']}'"
    for kind in ("function", "mapper"):
        if kind in maker:
            return f"the {kind} {maker[kind]}"
    return "an unknown maker"


def _maker_difference(then: Maker, now: Maker) -> str:
    """How ``then`` (an output's record) differs from ``now`` (this run), in words.

    >>> _maker_difference({"function": "a:f"}, {"command": "true", "options": {}})
    "made by the function a:f, while this run maps with the command 'true'"
    >>> _maker_difference({"command": "x", "options": {"multi": True, "on_error": "skip"}},
    ...                  {"command": "x", "options": {"multi": True, "on_error": "fail"}})
    "made by the command 'x' with on_error 'skip', while this run has on_error 'fail'"
    """
    named = _describe_maker(then)
    if named != _describe_maker(now):
        return f"made by {named}, while this run maps with {_describe_maker(now)}"
    if then.get("options") != now.get("options"):
        old, new = then.get("options") or {}, now.get("options") or {}
        keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
        was = ", ".join(f"{k} {old.get(k)!r}" for k in keys)
        has = ", ".join(f"{k} {new.get(k)!r}" for k in keys)
        return f"made by {named} with {was}, while this run has {has}"
    return f"made by {named} with other arguments than this run's"
