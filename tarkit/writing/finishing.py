"""What becomes of shards: the commit of an overwrite's new set (with the records and
indexes beside its shards), the post command each shard gets once it has its name, and
what is said of the unfinished one an aborted writer removes (:class:`Discarded`).
:class:`~tarkit.writing.shard_writer.ShardWriter` and the cluster run
(:mod:`tarkit.writing.cluster`) both end here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import OutputError
from ..format.manifest import ShardInfo
from ..storage import (
    Move,
    StorageOptions,
    commit_files,
    describe_exit,
    location,
    manifest_files,
    remove_file,
)
from .indexes import index_name
from .patterns import ShardPattern, pending_name


def run_post(post: str | Callable[[str], object], path: str) -> None:
    """Run the post command for a finished shard; raise :class:`OutputError` if it fails.

    A string is a bash command with every ``{}`` replaced by the shell-quoted path (the
    path is also in ``TARKIT_SHARD``); a callable is called with the path.
    """
    if callable(post):
        post(path)
        return
    import shlex
    import subprocess

    command = post.replace("{}", shlex.quote(path))
    env = dict(os.environ, TARKIT_SHARD=path)
    try:
        status = subprocess.run(["bash", "-c", command], env=env).returncode
    except OSError as exc:
        raise OutputError(f"{path}: cannot run the post command: {exc.strerror}") from None
    if status != 0:
        raise OutputError(f"{path}: post command {describe_exit(status)}: {command}")


class StagedSet:
    """An overwrite's new set while it is written (:class:`ShardWriter`, ``mode=
    "overwrite"``): its complete shards under pending names, each with the file
    ``sealed`` staged beside it (its record), and the files of the old set it replaces;
    :meth:`commit` puts it in place whole, :meth:`abandon` removes what it staged (the
    old set stays as it was)."""

    def __init__(
        self, pattern: ShardPattern, replaced: list[str], storage_options: StorageOptions | None
    ) -> None:
        self.pattern = pattern
        self.replaced = replaced
        self.storage_options = storage_options
        self.pending: list[str] = []
        self.beside: dict[str, Move] = {}  # by pending shard

    def add(self, pending: str, beside: Move | None) -> None:
        """A complete shard staged at ``pending``, with ``beside`` (or nothing)."""
        self.pending.append(pending)
        if beside is not None:
            self.beside[pending] = beside

    def drop(self, pending: str) -> None:
        """The shard staged at ``pending`` is not one of the set after all: forget it and
        remove the file staged beside it (its own staged file removed itself)."""
        self.pending.remove(pending)
        self._remove_beside(pending)

    def commit(
        self, shards: list[ShardInfo], manifest: str | None,
        post: str | Callable[[str], object] | None, indexes: list[int] | None,
    ) -> None:  # fmt: skip
        """Put the set of ``shards`` in place (:func:`put_in_place`)."""
        pending, self.pending = self.pending, []
        beside = [self.beside[spec] for spec in pending if spec in self.beside]
        put_in_place(self.pattern, pending, shards, self.replaced, manifest, post,
                     self.storage_options, indexes, beside)  # fmt: skip

    def abandon(self) -> None:
        """Remove every staged shard and the files beside them."""
        for pending in self.pending:
            remove_file(pending, self.storage_options)
            self._remove_beside(pending)
        self.pending = []

    def _remove_beside(self, pending: str) -> None:
        beside = self.beside.pop(pending, None)
        if beside is not None:
            remove_file(beside.source, self.storage_options)


def put_in_place(
    pattern: ShardPattern, pending: list[str], shards: list[ShardInfo], replaced: list[str],
    manifest: str | None, post: str | Callable[[str], object] | None,
    storage_options: StorageOptions | None, indexes: list[int] | None = None,
    beside: Sequence[Move] = (),
) -> None:  # fmt: skip
    """``mode="overwrite"``, once the new set is complete: commit it whole through the
    journal of ``pattern`` (:mod:`tarkit.storage.commit`): the ``pending`` files take the
    names of ``shards``, with ``indexes`` (the byte counts of their indexes) each shard's
    pending index takes the name beside it, and the files ``beside`` them (their records,
    staged under pending names too) take theirs; the ``replaced`` files the new set does
    not reuse (the old shards, their records and indexes, stale manifests:
    :func:`.patterns.replaced_files`) are removed, and the manifest of ``shards`` is
    published at ``manifest`` (when given), last; then run ``post`` on each shard. A run
    stopped during the commit leaves its journal, and the next run into ``pattern``
    finishes it (:func:`.patterns.settle_earlier_run`).
    """
    moves = [
        Move(name, shard.url, shard.bytes) for name, shard in zip(pending, shards, strict=True)
    ] + list(beside)
    if indexes is not None:
        moves += [
            Move(pending_name(index_name(shard.url)), index_name(shard.url), size)
            for shard, size in zip(shards, indexes, strict=True)
        ]
    shard_file = pattern.target.regex
    removals = list(replaced) + [
        index_name(url) for url in replaced if shard_file.fullmatch(location(url).identity())
    ]
    files = [] if manifest is None else manifest_files(manifest, shards, indexes is not None)
    commit_files(pattern.journal, moves, removals, files, storage_options)
    if post is not None:
        for shard in shards:
            run_post(post, shard.url)


@dataclass(frozen=True)
class Discarded:
    """The unfinished shard an aborted :class:`ShardWriter` removed: its name, the whole
    samples it held (in no shard now) and the key of its first one, when known."""

    path: str
    samples: int
    first_key: str | None

    def describe(self, samples_before: int) -> str:
        """One line for the user: what was removed and where to start again.

        >>> Discarded("out/s-2.tar", 3, "k0008").describe(8)
        'out/s-2.tar: unfinished shard removed with its 3 complete samples (from k0008 on), which are in no shard; the complete shards hold the first 8 samples'
        """
        noun, verb = ("sample", "is") if self.samples == 1 else ("samples", "are")
        first = f" (from {self.first_key} on)" if self.first_key is not None else ""
        before = "sample" if samples_before == 1 else "samples"
        return (
            f"{self.path}: unfinished shard removed with its {self.samples} complete {noun}"
            f"{first}, which {verb} in no shard; the complete shards hold the first "
            f"{samples_before} {before}"
        )
