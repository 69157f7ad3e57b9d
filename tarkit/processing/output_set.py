"""The outputs of :func:`tarkit.map_shards` as one set: an overwrite commits it whole.

With ``mode="overwrite"`` each task writes its output, and the output's record, under a
pending name beside it (:func:`~tarkit.storage.pending_name`); the old outputs stay
where they are, read as the old set, while the new one is made. Once every shard is
done, the set is committed through a journal (:mod:`tarkit.storage.commit`): the
metadata file is removed first (no file describes rows that are changing), then the
pending outputs, records and indexes take their names, the earlier outputs that are
not this run's go, and the manifest is published last. A run that fails, or is stopped before
the journal is written, leaves the old set whole, its pending files removed (by the next
run, after ``kill -9``); one stopped during the commit leaves the journal, which the
next run into these outputs finishes (:func:`settle_outputs`, whatever its mode); its
metadata file is then written again by a run with ``mode="resume"``, from the records.

The journal is ``.tarkit-map.commit.json`` in the deepest directory above every output;
it is followed only as far as these outputs, their records and the earlier outputs
beside them go (:class:`MapOutputs`).
"""

from __future__ import annotations

import contextlib
import glob as globbing
from collections.abc import Sequence

from ..errors import OutputError, SourceError, UsageError
from ..format.manifest import ShardInfo
from ..storage import (
    Move,
    StorageOptions,
    commit_files,
    finish_commit,
    journal_above,
    list_files,
    location,
    manifest_files,
    pending_name,
    remove_file,
)
from ..writing.indexes import index_name
from .records import record_path

JOURNAL = ".tarkit-map.commit.json"


class MapOutputs:
    """The files of a map run's set (a :class:`~tarkit.storage.CommitScope`): its
    ``outputs``, the ``earlier`` outputs its overwrite removes, their records and
    indexes beside them, and the outputs' ``indexes`` where the manifest puts them."""

    def __init__(
        self, outputs: Sequence[str], earlier: Sequence[str] = (), indexes: Sequence[str] = ()
    ) -> None:
        named = [*outputs, *earlier]
        beside = [name for url in named for name in (record_path(url), index_name(url))]
        self.names = {location(url).identity() for url in [*named, *beside, *indexes]}

    def holds(self, url: str) -> bool:
        return location(url).identity() in self.names


def settle_outputs(
    outputs: Sequence[str], earlier: Sequence[str], indexes: Sequence[str], overwrite: bool,
    storage_options: StorageOptions | None,
) -> str | None:  # fmt: skip
    """Before a run looks at its outputs: finish the commit of an overwrite into them that
    was stopped midway, then remove the pending files of one stopped before its commit
    (:func:`remove_pending`); ``indexes``: where the outputs' indexes go (with a
    manifest). What the user is told when a commit was finished (None:
    none was). Raises
    :class:`~tarkit.errors.UsageError` when ``overwrite`` cannot commit ``outputs``
    whole (they are in different stores)."""
    journal = journal_above([*outputs, *indexes], JOURNAL)
    if journal is None:
        if overwrite:
            raise UsageError(
                f"outputs {outputs[0]} and {outputs[-1]} are in different stores: an "
                "overwrite commits its outputs whole, from a directory above them all"
            )
        return None  # no commit into them could have been begun
    finished = finish_commit(journal, MapOutputs(outputs, earlier, indexes), storage_options)
    remove_pending(outputs, indexes, storage_options)
    if not finished:
        return None
    return (f"finished the commit of an earlier overwrite of these outputs that was stopped "
            f"midway ({journal}): its new set is in place")  # fmt: skip


def remove_pending(
    outputs: Sequence[str], indexes: Sequence[str], storage_options: StorageOptions | None
) -> None:
    """Remove the pending outputs, records and ``indexes`` of ``outputs`` (one listing per
    directory)."""
    files = [*outputs, *map(record_path, outputs), *indexes]
    ours = {location(pending_name(name)).identity() for name in files}
    directories = {location(name).sibling("") for name in files}
    for directory in sorted(directories):
        for found in list_files(globbing.escape(directory) + ".*.pending", storage_options):
            if location(found).identity() in ours:
                remove_file(found, storage_options)


def commit_outputs(
    shards: Sequence[ShardInfo], record_sizes: Sequence[int], earlier: Sequence[str],
    indexes: Sequence[tuple[str, int]], manifest: str | None, metadata: str | None,
    storage_options: StorageOptions | None,
) -> None:  # fmt: skip
    """Commit an overwrite's set (the module docstring): the pending outputs of
    ``shards`` (their records, of ``record_sizes`` bytes, and their ``indexes``: place and
    bytes) take their names, the ``earlier`` outputs and their records and indexes go,
    and the manifest of ``shards`` is published at ``manifest`` last; the ``metadata``
    file is removed before (the caller writes the new one after). Raises
    :class:`~tarkit.errors.OutputError` when a step fails."""
    outputs = [shard.url for shard in shards]
    moves = [Move(pending_name(s.url), s.url, s.bytes) for s in shards] + [
        Move(pending_name(record_path(url)), record_path(url), size)
        for url, size in zip(outputs, record_sizes, strict=True)
    ]
    moves += [Move(pending_name(place), place, size) for place, size in indexes]
    removals = [name for url in earlier for name in (url, record_path(url), index_name(url))]
    if metadata is not None:
        remove_file(metadata, storage_options)
    files = [] if manifest is None else manifest_files(manifest, shards, bool(indexes))
    journal = journal_above([*outputs, *(place for place, _ in indexes)], JOURNAL)
    assert journal is not None  # (settle_outputs refused outputs in different stores)
    commit_files(journal, moves, removals, files, storage_options)


def abandon_pending(
    outputs: Sequence[str], indexes: Sequence[str], storage_options: StorageOptions | None
) -> None:
    """Remove what an overwrite that did not reach its commit staged: the old set stays."""
    with contextlib.suppress(OutputError, SourceError):
        remove_pending(outputs, indexes, storage_options)
