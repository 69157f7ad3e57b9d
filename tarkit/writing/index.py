"""Indexing shards: the manifest entry of a shard, read once from end to end.

:func:`index_shard` counts a shard's samples (by the same rules the loader reads them
with), its stored bytes and their SHA-256, and optionally each sample's key and byte
offset in the uncompressed tar stream (:func:`read_shard` also makes its shard index in
the same pass); :func:`index_shards` makes the
:class:`~tarkit.format.manifest.Manifest` of many, and :func:`index_set` makes many
random-access ready (``tarindex -o``: their indexes and a manifest of version 2). The
format is :mod:`tarkit.format.manifest`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import BinaryIO

from ..errors import UsageError
from ..format.archives import tar_stream
from ..format.index import ShardIndex, index_stream
from ..format.manifest import Manifest, ShardInfo
from ..format.samples import Sample, SkipLog, group_samples
from ..format.tar import read_members
from ..storage import (
    LISTED_INDEX,
    STDIO,
    HashingReader,
    StorageOptions,
    check_local_files,
    expand_inputs,
    index_places,
    location,
    manifest_at,
    manifest_files,
    move_file,
    open_source,
    publish,
    relative_url,
    remove_directory,
    remove_file,
    save_manifest,
)
from .patterns import pending_name


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
    options = (offsets, keys, manifest_path, strict, skips, storage_options)
    return _read(spec, *options, index=False, on_sample=on_sample)[0]


def read_shard(
    spec: str, *, keys: bool = False, strict: bool = False, skips: SkipLog | None = None,
    storage_options: StorageOptions | None = None,
) -> tuple[ShardInfo, bytes | None]:  # fmt: skip
    """Read shard ``spec`` whole, once, for its manifest entry (:func:`index_shard`:
    with ``keys``, the keys) and its shard index (:mod:`tarkit.format.index`), made in
    the same pass; None for a compressed shard, which has none."""
    return _read(spec, False, keys, None, strict, skips, storage_options, index=True)


def _read(
    spec: str, offsets: bool, keys: bool, manifest_path: str | None, strict: bool,
    skips: SkipLog | None, storage_options: StorageOptions | None, *, index: bool,
    on_sample: Callable[[Sample], object] | None = None,
) -> tuple[ShardInfo, bytes | None]:  # fmt: skip
    """:func:`index_shard`, and with ``index`` :func:`read_shard`'s index."""
    if location(spec).kind == STDIO:
        raise UsageError("tarindex needs shard paths or URLs: a manifest cannot name stdin")
    found: list[str] | None = None
    starts: list[int] | None = None
    made = None
    with open_source(spec, storage_options) as source:
        hashing = HashingReader(source.stream)
        kind, tar = tar_stream(hashing, source.name)  # type: ignore[arg-type]
        if index and kind is None:
            made = index_stream(tar, source.name, strict=strict, skips=skips)
            shard = ShardIndex(made, source.name)
            count = len(shard)
            if offsets or keys:
                found = shard.keys()
            if offsets:
                starts = shard.offsets()
        else:
            count, found, starts = _count(tar, source.name, offsets, keys, strict, skips,
                                          on_sample)  # fmt: skip
        hashing.drain()
    info = ShardInfo(relative_url(manifest_path, spec), count, hashing.size,
                     hashing.sha256.hexdigest(), found, starts)  # fmt: skip
    return info, made


def _count(
    stream: BinaryIO, source: str, offsets: bool, keys: bool, strict: bool,
    skips: SkipLog | None, on_sample: Callable[[Sample], object] | None = None,
) -> tuple[int, list[str] | None, list[int] | None]:  # fmt: skip
    """The samples of the tar ``stream``: how many, and their keys and offsets when asked."""
    found: list[str] = []
    starts: list[int] = []
    count = 0
    for sample in group_samples(read_members(stream, source), source, strict=strict,
                                skips=skips):  # fmt: skip
        count += 1
        if offsets or keys:
            found.append(sample.key)
        if on_sample is not None:
            on_sample(sample)
        if offsets:
            starts.append(sample.members[0].offset)
    return count, found if offsets or keys else None, starts if offsets else None


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


def index_set(
    specs: Sequence[str],
    manifest: str,
    *,
    strict: bool = False,
    skips: SkipLog | None = None,
    storage_options: StorageOptions | None = None,
    on_shard: Callable[[ShardInfo], object] | None = None,
) -> Manifest:
    """``tarindex -o``: make the shards ``specs`` (brace-expanded) random-access ready,
    each read once: the index of every uncompressed one
    (:func:`~tarkit.storage.index_places`: beside the shards when they are one numbered
    pattern in the manifest's directory or below it, else ``index/%06d.idx`` beside the
    manifest) and the manifest (version 2) at ``manifest``; return the manifest.

    Each index is published under a hidden pending name as its shard is read, and all
    take their names only once every shard has read cleanly, just before the manifest
    (an old one is removed first): a shard that does not read raises, and leaves the
    files there as they were.
    """
    shards = expand_inputs(specs)
    places = index_places(manifest, shards, beside=False)
    infos: list[ShardInfo] = []
    pending: list[tuple[str, str]] = []
    try:
        for spec, place in zip(shards, places, strict=True):
            info, index = read_shard(spec, strict=strict, skips=skips,
                                     storage_options=storage_options)  # fmt: skip
            if index is not None:
                pending.append((pending_name(place), place))
                publish(pending[-1][0], index, storage_options)
            infos.append(info)
            if on_shard is not None:
                on_shard(info)
    except BaseException:
        for staged, _ in pending:
            remove_file(staged, storage_options)
        remove_directory(location(manifest).sibling(LISTED_INDEX.partition("/")[0]))
        raise
    files = manifest_files(manifest, infos, bool(pending), beside=False)
    remove_file(manifest, storage_options)  # no reader takes it with the new indexes
    for staged, place in pending:
        move_file(staged, place, storage_options)
    save_manifest(files, storage_options)
    return manifest_at(manifest, infos)
