"""How far a commit's journal is followed: only within the set of the run that finishes it.

A journal (:mod:`tarkit.storage.commit`) is data found in the output place, which someone
else may have written: an output directory copied from elsewhere, a shared one. The run
that finishes it knows its own set (:class:`CommitScope`: a writer's shard pattern and the
files that go with each shard, ``tarkit map``'s outputs and their records); the journal
does not. So :func:`refusal` refuses a whole journal that does anything the commit of
that set never does:

- a name that is not relative, in the journal's directory or below it (:func:`inside`),
  or (locally) whose directory is a link that leads out of it;
- a move that is not a file's staged copy (:func:`pending_name`, a regular file, never a
  link) taking the name of a file of the set;
- a removal of anything but a file of the set, or a tarkit manifest that lists only files
  of the set (one that an overwrite found stale: :func:`set_manifests`);
- a manifest that does not lie beside the journal (:func:`beside`), lists anything but
  files of the set, or would replace a file that is not a tarkit manifest; or a file
  published with it other than its columns file (version 2).
"""

from __future__ import annotations

import glob
import json
import os
import posixpath
import re
from collections.abc import Sequence
from typing import Protocol

from ..errors import InputError, SourceError
from ..format.manifest import VERSION_2, columns_name, parse
from ..format.shard_names import ShardNames
from .filesystems import StorageOptions, object_info
from .listing import list_files
from .locations import FILE, location, relative_url, resolve_url
from .sources import MANIFEST_LIMIT, read_bytes

MAX_LISTED = 10**8  # shards a manifest in a journal may list, to be checked one by one
_MANIFEST_HEAD = re.compile(rb'\s*\{\s*"format"\s*:\s*"tarkit-manifest"')


class CommitScope(Protocol):
    """The files of the set a run commits: all that a journal found at its place may
    touch. A writer of numbered shards gives its pattern's
    (:class:`~tarkit.writing.patterns.PatternFiles`), ``tarkit map`` its outputs'
    (:class:`~tarkit.processing.output_set.MapOutputs`)."""

    def holds(self, url: str) -> bool:
        """Whether the file at ``url`` (as :func:`~tarkit.storage.resolve_url` gives a
        journal's entry: a local file as its absolute path) is one of the set's: a shard
        or an output, or a file that goes with one (its record, its index)."""
        ...


def pending_name(spec: str) -> str:
    """Where a complete file waits until the set it belongs to is committed: a hidden
    name beside it (of a shard pattern: the pattern of those names).

    >>> pending_name("out/s-000001.tar"), pending_name("s3://b/s-%06d.tar")
    ('out/.s-000001.tar.pending', 's3://b/.s-%06d.tar.pending')
    """
    where = location(spec)
    return where.sibling(f".{where.basename}.pending")


def refusal(
    journal: str, moves: Sequence[tuple[str, str]], removals: Sequence[str],
    manifest: Sequence[tuple[str, bytes]], scope: CommitScope,
    storage_options: StorageOptions | None,
) -> str | None:  # fmt: skip
    """What the journal at ``journal`` does (its ``moves``, staged file and name, its
    ``removals``, the places and bytes of its ``manifest``'s files, its JSON last) that a commit of ``scope``'s set
    never does, in words; None: nothing (the module docstring)."""
    for source, target in moves:
        if not scope.holds(target):
            return f"it puts a file at {target}, not a file of the set"
        if location(source).identity() != location(pending_name(target)).identity():
            return f"it moves {source}, not the staged copy of {target}"
    for url in removals:
        if not scope.holds(url) and not _lists_set(url, scope, storage_options, gone=True):
            return f"it removes {url}, neither a file of the set nor a manifest of it"
    if manifest:
        where, data = manifest[-1]  # its JSON; before it, its columns file (version 2)
        listed = _listed(data, where)
        if not beside(journal, where) or scope.holds(where) or not _all_held(listed, scope):
            return f"its manifest {where} is not a manifest of the set beside it"
        if not _replaceable(where, storage_options):
            return f"its manifest would replace {where}, which is not a tarkit manifest"
        for part, _ in manifest[:-1]:
            if location(part).identity() != location(_columns_of(where)).identity():
                return f"it publishes {part}, not the columns file of its manifest {where}"
    if not location(journal).is_file:
        return None
    named = [*(name for move in moves for name in move), *removals]
    return _escape(journal, named + [where for where, _ in manifest],
                   [source for source, _ in moves])  # fmt: skip


def set_manifests(
    journal: str, scope: CommitScope, storage_options: StorageOptions | None = None
) -> list[str]:
    """The tarkit manifests beside ``journal`` (``*.json``) that list files of
    ``scope``'s set and nothing else: those an overwrite of the set leaves stale, which
    its commit removes (one it does not replace would describe files that are gone)."""
    head, slash, _ = journal.rpartition("/")
    found = []
    for url in list_files(f"{glob.escape(head)}{slash}*.json", storage_options):
        try:
            if _lists_set(url, scope, storage_options):
                found.append(url)
                if _exists(_columns_of(url), storage_options):  # version 2's other file
                    found.append(_columns_of(url))
        except SourceError:
            continue  # unreadable or too large: not one tarkit wrote
    return found


def inside(named: str) -> bool:
    """Whether ``named`` (as a journal names a location) is a relative path that stays
    in the journal's directory.

    >>> inside("s-1.tar"), inside("sub/.s-1.tar.pending"), inside("/etc/passwd")
    (True, True, False)
    >>> inside("../x.tar"), inside("s3://other/x.tar"), inside("file:x.tar")
    (False, False, False)
    """
    where = location(named)
    if where.kind != FILE or where.path != named or not named or os.path.isabs(named):
        return False
    return ".." not in posixpath.normpath(named).split("/")


def beside(journal: str, url: str) -> bool:
    """Whether ``url`` lies in the journal's own directory (not below it).

    >>> beside("out/.s.commit.json", "out/manifest.json"), beside("out/.j", "out/m/x.json")
    (True, False)
    """
    named = relative_url(journal, url)
    return inside(named) and "/" not in posixpath.normpath(named)


def _columns_of(manifest: str) -> str:
    """Where the columns file of the (version 2) manifest at ``manifest`` lies."""
    return location(manifest).sibling(columns_name(manifest))


def _listed(data: bytes, where: str) -> list[str] | None:
    """The files the manifest ``data`` (at ``where``; version 1, or version 2 whose JSON
    names them) lists; None when it is not one."""
    try:
        document = json.loads(data)
        if isinstance(document, dict) and document.get("version") == VERSION_2:
            count = document.get("shards")
            if not isinstance(count, int) or not 0 <= count <= MAX_LISTED:
                return None
            names = list(ShardNames.from_json(document.get("names"), count, where))
        else:
            names = [shard.url for shard in parse(data.decode("utf-8"), where).shards]
        return [resolve_url(where, name, opened=False) for name in names]
    except (InputError, ValueError, TypeError):
        return None


def _all_held(files: list[str] | None, scope: CommitScope) -> bool:
    """Whether ``files`` are some files and all of the set's."""
    return bool(files) and all(scope.holds(url) for url in files or ())


def _lists_set(
    url: str, scope: CommitScope, storage_options: StorageOptions | None, gone: bool = False
) -> bool:
    """Whether the file at ``url`` is a tarkit manifest that lists files of ``scope``'s set
    and nothing else, or the columns file beside one (``gone``: or there is no file
    there)."""
    if url.endswith(".columns"):
        return _lists_set(url.removesuffix(".columns") + ".json", scope, storage_options, gone)
    if not _is_manifest(url, storage_options):
        return gone and not _exists(url, storage_options)
    data = read_bytes(url, storage_options, limit=MANIFEST_LIMIT) or b""
    return _all_held(_listed(data, url), scope)


def _replaceable(url: str, storage_options: StorageOptions | None) -> bool:
    """Whether a commit's manifest may take the place of what is at ``url``: nothing, or
    a tarkit manifest (known by how the file begins)."""
    return not _exists(url, storage_options) or _is_manifest(url, storage_options)


def _exists(url: str, storage_options: StorageOptions | None) -> bool:
    where = location(url)
    if where.is_file:
        return os.path.lexists(where.path)
    return object_info(url, storage_options) is not None


def _is_manifest(url: str, storage_options: StorageOptions | None) -> bool:
    """Whether the file at ``url`` begins as a tarkit manifest does (False: none there)."""
    where = location(url)
    try:
        if where.is_file:
            with open(where.path, "rb") as stream:
                head = stream.read(4096)
        else:
            head = (read_bytes(url, storage_options, limit=MANIFEST_LIMIT) or b"")[:4096]
    except (OSError, SourceError):
        return False
    return _MANIFEST_HEAD.match(head) is not None


def _escape(journal: str, named: Sequence[str], staged: Sequence[str]) -> str | None:
    """A local file among ``named`` that a link takes out of the journal's directory, or
    a ``staged`` file that is a link, in words; None: none."""
    base = os.path.realpath(os.path.dirname(os.path.abspath(location(journal).path)))
    real: dict[str, str] = {}  # one realpath per directory
    for url in named:
        parent = os.path.dirname(os.path.abspath(location(url).path))
        if parent not in real:
            real[parent] = os.path.realpath(parent)
        if real[parent] != base and not real[parent].startswith(base.rstrip(os.sep) + os.sep):
            return f"{url} lies outside its directory (through a link)"
    for url in staged:
        if os.path.islink(location(url).path):
            return f"{url} is a link, not a staged file"
    return None
