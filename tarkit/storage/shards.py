"""Which shards a source names: brace patterns, lists, manifests and directories, resolved
once, when a dataset is built or a command starts (``ShardDataset``, ``tarkit verify``).

>>> import os, tempfile
>>> directory = tempfile.mkdtemp()
>>> for name in ("b.tar", "a.tar", "notes.txt"):
...     open(os.path.join(directory, name), "wb").close()
>>> [os.path.basename(u) for u in resolve_shards(directory, None)[0]]
['a.tar', 'b.tar']
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Literal

from ..errors import InputError, SourceError, UsageError
from ..format.manifest import Manifest, ShardInfo
from .commit import refuse_unfinished
from .filesystems import StorageOptions
from .locations import expand_inputs, location
from .manifests import load_manifest, manifest_urls

BUILD_INDEX = "tarindex SHARDS… -o DIR/manifest.json"  # what makes shards random-access
_TAR_SUFFIXES = (
    ".tar",
    ".tar.gz",
    ".tgz",
    ".tar.bz2",
    ".tbz2",
    ".tar.xz",
    ".txz",
    ".tar.zst",
    ".tzst",
)


def resolve_shards(
    urls: str | Sequence[str] | None,
    manifest: str | Manifest | Literal[False] | None,
    storage_options: StorageOptions | None = None,
    *,
    missing_ok: bool = False,
) -> tuple[list[str], list[ShardInfo] | None]:
    """Shard URLs and, with a manifest, their entries (see :class:`ShardDataset`'s ``urls``).

    Without a manifest (None), a ``manifest.json`` beside the shards is used when it
    lists exactly those shards; ``manifest=False`` reads them without one. Raises :class:`~tarkit.errors.SourceError` when local shards
    do not exist (naming the first and how many; ``missing_ok`` leaves them to the
    caller, which reports each), :class:`~tarkit.errors.UsageError`
    when nothing is named or a named shard is not in the manifest, and
    :class:`~tarkit.errors.InputError` for a malformed manifest and for one whose shards
    the trust rule refuses (:func:`~tarkit.storage.manifest_urls`): shards the caller
    names (``pipe:`` ones too) are read with a manifest's counts, but a manifest's own
    entries never run a command, and a remote one's never name a local file.
    """
    beside = manifest is None
    if manifest is False:
        manifest = None
    if isinstance(urls, str) and manifest is None and names_shard_set(urls):
        if not os.path.isdir(urls):
            urls, manifest = None, urls
        else:
            listing = os.path.join(urls, "manifest.json")
            if beside and os.path.exists(listing):
                urls, manifest = None, listing
            else:
                names = sorted(n for n in os.listdir(urls) if n.endswith(_TAR_SUFFIXES))
                if not names:
                    raise UsageError(f"{urls}: no tar shards in this directory")
                urls = [os.path.join(urls, n) for n in names]
    if isinstance(manifest, str):
        manifest = load_manifest(manifest, storage_options)
    expanded = None
    if urls is not None:
        expanded = expand_inputs([urls] if isinstance(urls, str) else list(urls))
    if manifest is None:
        if not expanded or expanded == ["-"]:
            raise UsageError("ShardDataset needs shard URLs or a manifest")
        if not missing_ok:
            _check_local_shards(expanded)
        manifest = _manifest_beside(expanded) if beside else None
        if manifest is None:
            return expanded, None
    for entry in manifest.shards:
        for listed in (entry.keys, entry.offsets):
            if listed is not None and len(listed) != entry.samples:
                raise InputError(
                    f"shard {entry.url} lists {len(listed)} keys or offsets for "
                    f"{entry.samples} samples",
                    source=manifest.location or "manifest",
                )
    if expanded is None:
        if not manifest.shards:
            raise UsageError(f"{manifest.location}: the manifest lists no shards")
        urls = manifest_urls(manifest)  # opened: the trust rule refuses what data may not name
        if not missing_ok:
            _check_local_shards(urls)
        return urls, list(manifest.shards)
    # The shards the caller named are opened; the manifest only gives their counts.
    named = manifest_urls(manifest, opened=False)
    entries = dict(zip((location(u).identity() for u in named), manifest.shards, strict=True))
    infos: list[ShardInfo] = []
    for url in expanded:
        info = entries.get(location(url).identity())
        if info is None:
            raise UsageError(f"{url}: not in the manifest {manifest.location or ''}".rstrip())
        infos.append(info)
    return expanded, infos


def dataset_manifest(source: str) -> str | None:
    """The manifest of the indexed dataset ``source`` names, for random access: itself
    (``.json``), its directory's (a local directory, or a URL ending in ``/``); None for
    shards. Raises :class:`~tarkit.errors.UsageError` for a local directory without
    ``manifest.json``.

    >>> dataset_manifest("https://host/data/"), dataset_manifest("data/train-000.tar")
    ('https://host/data/manifest.json', None)
    >>> dataset_manifest("s3://bucket/manifest.json"), dataset_manifest("pipe:cat a.json")
    ('s3://bucket/manifest.json', None)
    """
    where = location(source)
    if source.endswith(".json") and (where.is_file or where.remote):
        return source
    if where.is_file and os.path.isdir(where.path):
        manifest = os.path.join(where.path, "manifest.json")
        if not os.path.isfile(manifest):
            raise UsageError(
                f"{source}: a directory without manifest.json (build one and the shards' "
                f"indexes with {BUILD_INDEX})"
            )
        return manifest
    if where.remote and source.endswith("/"):
        return source + "manifest.json"
    return None


def names_shard_set(source: str) -> bool:
    """Whether ``source`` names a set of shards (a manifest, a directory) rather than
    shards themselves: what :func:`resolve_shards` resolves alone.

    >>> names_shard_set("data/manifest.json"), names_shard_set("data/train-{000..009}.tar")
    (True, False)
    """
    return source.endswith(".json") or os.path.isdir(source)


def _check_local_shards(urls: Sequence[str]) -> None:
    """Raise SourceError when local shards do not exist: a brace range past the last
    shard or a typo fails here, not mid-epoch in a worker; and when they are a mix of two
    runs, an overwrite stopped in its commit (:func:`~tarkit.storage.refuse_unfinished`)."""
    refuse_unfinished(urls)
    missing = [u for u in urls if location(u).is_file and not os.path.exists(location(u).path)]
    if missing:
        raise SourceError(
            f"{missing[0]}: no such shard ({len(missing)} of {len(urls)} shards do not exist)",
            reason=SourceError.MISSING,
        )


def _manifest_beside(urls: Sequence[str]) -> Manifest | None:
    """The ``manifest.json`` in the directory of the local shards ``urls`` when it lists
    exactly those shards (so that ``len()`` works without naming it); else None."""
    places = [location(u) for u in urls]
    directories = {os.path.dirname(os.path.abspath(p.path)) for p in places if p.is_file}
    if len(directories) != 1 or not all(p.is_file for p in places):
        return None
    beside = os.path.join(directories.pop(), "manifest.json")
    if not os.path.isfile(beside):
        return None
    try:
        manifest = load_manifest(beside)
    except (InputError, SourceError):
        return None  # not a tarkit manifest: the shards are read without one
    listed = {location(u).identity() for u in manifest_urls(manifest, opened=False)}
    if listed != {p.identity() for p in places} or len(manifest.shards) != len(urls):
        return None
    return manifest
