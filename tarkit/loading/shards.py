"""Which shards a dataset reads: brace patterns, lists, manifests and directories, resolved
once when the dataset is built.

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

from ..errors import InputError, UsageError
from ..format.manifest import Manifest, ShardInfo
from ..storage import StorageOptions, expand_inputs, load_manifest, location, manifest_urls

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
    manifest: str | Manifest | None,
    storage_options: StorageOptions | None = None,
) -> tuple[list[str], list[ShardInfo] | None]:
    """Shard URLs and, with a manifest, their entries (see :class:`ShardDataset`'s ``urls``).

    Raises :class:`~tarkit.errors.UsageError` when nothing is named or a named shard is
    not in the manifest, and :class:`~tarkit.errors.InputError` for a malformed manifest.
    """
    if isinstance(urls, str) and manifest is None:
        if urls.endswith(".json"):
            urls, manifest = None, urls
        elif os.path.isdir(urls):
            beside = os.path.join(urls, "manifest.json")
            if os.path.exists(beside):
                urls, manifest = None, beside
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
        return expanded, None
    urls = manifest_urls(manifest)
    entries = dict(zip((location(u).identity() for u in urls), manifest.shards, strict=True))
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
        return urls, list(manifest.shards)
    infos: list[ShardInfo] = []
    for url in expanded:
        info = entries.get(location(url).identity())
        if info is None:
            raise UsageError(f"{url}: not in the manifest {manifest.location or ''}".rstrip())
        infos.append(info)
    return expanded, infos
