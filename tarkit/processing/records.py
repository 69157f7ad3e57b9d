"""The record of a finished map output: what ``--resume`` trusts instead of redoing a shard.

Beside every output ``NAME`` of :func:`tarkit.map_shards` lies ``.NAME.map.json``: the
output's manifest entry, the input it came from, its metadata rows and rejects, and, for
an object store, the ETag the store gave the object. A task writes the record before it
publishes the output (so a published output always has one) and, for a remote output,
again after, with the ETag.

An output is complete when its record exists, names the same input, and the output
matches it: the size and sha256 of a local file; the size of a remote object, and its
ETag when the record has one (an object replaced by another of the same size then does
not pass). A record that does not parse counts as absent.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import SampleError
from ..format.manifest import ShardInfo
from ..storage import (
    StorageOptions,
    list_files,
    location,
    publish,
    read_bytes,
    stored_matches,
)
from .mappers import Row

RECORD_FORMAT = "tarkit-map-shard"
RECORD_VERSION = 1


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
    etag: str | None = None,
    storage_options: StorageOptions | None = None,
) -> None:
    """Publish the record of ``output`` (made from ``source``). Raises SampleError when a
    metadata row is not JSON."""
    where = location(output)
    entry = ShardInfo(where.basename, info.samples, info.bytes, info.sha256)
    record: dict[str, Any] = {
        "format": RECORD_FORMAT,
        "version": RECORD_VERSION,
        "input": source,
        "shard": entry.to_json(),
        "metadata": rows,
        "rejects": rejects,
    }
    if etag is not None:
        record["etag"] = etag
    try:
        # ASCII: a key or URL that is not UTF-8 survives as a \udcXX escape.
        text = json.dumps(record, allow_nan=False) + "\n"
    except (TypeError, ValueError) as exc:
        raise SampleError(f"a metadata row is not JSON: {exc}", source=source) from None
    publish(record_path(output), text.encode("ascii"), storage_options)


def completed_record(
    output: str, source: str | None = None, storage_options: StorageOptions | None = None
) -> tuple[ShardInfo, list[Row], list[str]] | None:
    """The entry, metadata rows and rejects of ``output`` if it is complete, else None
    (see the module docstring)."""
    text = read_bytes(record_path(output), storage_options)
    if text is None:
        return None
    try:
        record = json.loads(text)
        shard = record["shard"]
        if record.get("format") != RECORD_FORMAT or record.get("version") != RECORD_VERSION:
            return None
        if source is not None and record.get("input") != source:
            return None
        info = ShardInfo(output, int(shard["samples"]), int(shard["bytes"]), shard.get("sha256"))
        rows = list(record.get("metadata") or [])
        rejects = [str(r) for r in record.get("rejects") or []]
        etag = record.get("etag")
    except (ValueError, KeyError, TypeError):
        return None
    if not stored_matches(output, info.bytes, info.sha256, etag, storage_options):
        return None
    return info, rows, rejects


def recorded_outputs(pattern: str, storage_options: StorageOptions | None = None) -> list[str]:
    """The files matching the glob ``pattern`` that have a record beside them: outputs
    of an earlier :func:`~tarkit.map_shards` run (whatever its inputs)."""
    records = set(list_files(record_path(pattern), storage_options))
    return [
        found for found in list_files(pattern, storage_options) if record_path(found) in records
    ]
