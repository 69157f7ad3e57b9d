"""Indexing shards: the manifest entry of a shard, read once from end to end.

:func:`index_shard` counts a shard's samples (by the same rules the loader reads them
with), its stored bytes and their SHA-256, and optionally each sample's key and byte
offset in the uncompressed tar stream; :func:`index_shards` makes the
:class:`~tarkit.format.manifest.Manifest` of many. The format is :mod:`tarkit.format.manifest`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..errors import UsageError
from ..format.compression import open_decompressed
from ..format.manifest import Manifest, ShardInfo
from ..format.samples import Sample, SkipLog, group_samples
from ..format.tar import read_members
from ..storage import (
    STDIO,
    HashingReader,
    StorageOptions,
    check_local_files,
    expand_inputs,
    location,
    open_source,
    relative_url,
)


def index_shard(
    spec: str,
    *,
    offsets: bool = False,
    manifest_path: str | None = None,
    strict: bool = False,
    skips: SkipLog | None = None,
    storage_options: StorageOptions | None = None,
    keys: bool = False,
    on_sample: Callable[[Sample], object] | None = None,
) -> ShardInfo:
    """Read shard ``spec`` whole and return its manifest entry.

    ``bytes`` and ``sha256`` are those of the stored (possibly compressed) bytes; with
    ``offsets``, ``keys`` and ``offsets`` list every sample (with ``keys`` alone, the
    keys). Members are skipped or
    refused as by :func:`~tarkit.format.samples.group_samples`. The shard's URL is named
    relative to ``manifest_path`` (:func:`~tarkit.storage.relative_url`). Raises
    :class:`~tarkit.errors.TarkitError` for a shard that does not read cleanly. This is
    the one function that reads a shard whole to count and hash it: ``tarindex``,
    ``--resume`` of the shard writers, the manifest checks and ``tarkit verify`` all use
    it. ``on_sample`` is called with each sample as it is read (so that a caller knows
    how far a shard that fails was read).
    """
    if location(spec).kind == STDIO:
        raise UsageError("tarindex needs shard paths or URLs: a manifest cannot name stdin")
    found: list[str] = []
    starts: list[int] = []
    count = 0
    with open_source(spec, storage_options) as source:
        hashing = HashingReader(source.stream)
        stream = open_decompressed(hashing, source.name)  # type: ignore[arg-type]
        for sample in group_samples(
            read_members(stream, source.name), source.name, strict=strict, skips=skips
        ):
            count += 1
            if offsets or keys:
                found.append(sample.key)
            if on_sample is not None:
                on_sample(sample)
            if offsets:
                starts.append(sample.members[0].offset)
        hashing.drain()
    return ShardInfo(
        relative_url(manifest_path, spec),
        count,
        hashing.size,
        hashing.sha256.hexdigest(),
        found if offsets or keys else None,
        starts if offsets else None,
    )


def index_shards(
    specs: Sequence[str],
    *,
    offsets: bool = False,
    manifest_path: str | None = None,
    strict: bool = False,
    skips: SkipLog | None = None,
    storage_options: StorageOptions | None = None,
    on_shard: Callable[[ShardInfo], object] | None = None,
) -> Manifest:
    """The manifest of the shards ``specs`` (brace-expanded), in the order given.

    ``manifest_path`` is where the manifest will be written: local shards beside or
    below it are named relative to it. ``storage_options`` go to fsspec; ``on_shard`` is
    called with each entry as it is made. Local shards are checked first
    (:func:`~tarkit.storage.check_local_files`: missing, a directory, a set whose commit
    was stopped midway raise :class:`~tarkit.errors.SourceError`).
    """
    shards = []
    named = expand_inputs(specs)
    check_local_files(named, "shards")
    for spec in named:
        shard = index_shard(spec, offsets=offsets, manifest_path=manifest_path, strict=strict,
                            skips=skips, storage_options=storage_options)  # fmt: skip
        shards.append(shard)
        if on_shard is not None:
            on_shard(shard)
    return Manifest(shards, manifest_path)
