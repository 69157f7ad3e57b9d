"""Indexing shards: the manifest entry of a shard, read once from end to end.

:func:`index_shard` counts a shard's samples (by the same rules the loader reads them
with), its stored bytes and their SHA-256, and optionally each sample's key and byte
offset in the uncompressed tar stream; :func:`index_shards` makes the
:class:`~tarkit.format.manifest.Manifest` of many. The format is :mod:`tarkit.format.manifest`'s.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..errors import UsageError
from ..format.compression import open_decompressed
from ..format.manifest import Manifest, ShardInfo, relative_url
from ..format.samples import SkipLog, group_samples
from ..format.tar import read_members
from ..storage.sources import expand_inputs, open_source
from .shard_writer import _BUFFER, _HashingReader

_SURROGATE = re.compile("[\ud800-\udfff]")


def manifest_bytes(manifest: Manifest) -> bytes:
    r"""The manifest's JSON as UTF-8, with keys or URLs that are not UTF-8 kept as escapes.

    Names that are not UTF-8 are read with ``surrogateescape``; their lone surrogates are
    written as ``\udcXX`` escapes, which JSON readers turn back into the same strings.

    >>> import json
    >>> data = manifest_bytes(Manifest([ShardInfo("caf\udce9.tar", 1, 512)]))
    >>> b'"caf\\udce9.tar"' in data, json.loads(data)["shards"][0]["url"] == "caf\udce9.tar"
    (True, True)
    """
    text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", manifest.dumps())
    return text.encode("utf-8")


def shard_url(spec: str, manifest_path: str | None) -> str:
    """How a manifest at ``manifest_path`` names the shard read from ``spec``.

    >>> shard_url("out/s-0.tar", "out/manifest.json"), shard_url("pipe:cat x.tar", "m.json")
    ('s-0.tar', 'pipe:cat x.tar')
    """
    if spec.startswith("pipe:") or "://" in spec:
        return spec
    return relative_url(manifest_path, spec.removeprefix("file:"))


def index_shard(
    spec: str,
    *,
    offsets: bool = False,
    manifest_path: str | None = None,
    strict: bool = False,
    skips: SkipLog | None = None,
) -> ShardInfo:
    """Read shard ``spec`` whole and return its manifest entry.

    ``bytes`` and ``sha256`` are those of the stored (possibly compressed) bytes; with
    ``offsets``, ``keys`` and ``offsets`` list every sample. Members are skipped or
    refused as by :func:`~tarkit.format.samples.group_samples`. Raises
    :class:`~tarkit.errors.TarkitError` for a shard that does not read cleanly.
    """
    if spec == "-":
        raise UsageError("tarindex needs shard paths or URLs: a manifest cannot name stdin")
    keys: list[str] = []
    starts: list[int] = []
    count = 0
    with open_source(spec) as source:
        hashing = _HashingReader(source.stream)
        stream = open_decompressed(hashing, source.name)  # type: ignore[arg-type]
        for sample in group_samples(
            read_members(stream, source.name), source.name, strict=strict, skips=skips
        ):
            count += 1
            if offsets:
                keys.append(sample.key)
                starts.append(sample.members[0].offset)
        while hashing.read(_BUFFER):
            pass
    return ShardInfo(
        shard_url(spec, manifest_path),
        count,
        hashing.size,
        hashing.sha256.hexdigest(),
        keys if offsets else None,
        starts if offsets else None,
    )


def index_shards(
    specs: Sequence[str],
    *,
    offsets: bool = False,
    manifest_path: str | None = None,
    strict: bool = False,
    skips: SkipLog | None = None,
) -> Manifest:
    """The manifest of the shards ``specs`` (brace-expanded), in the order given.

    ``manifest_path`` is where the manifest will be written: local shards beside or
    below it are named relative to it.
    """
    shards = [
        index_shard(spec, offsets=offsets, manifest_path=manifest_path, strict=strict,
                    skips=skips)
        for spec in expand_inputs(specs)
    ]  # fmt: skip
    return Manifest(shards, manifest_path)
