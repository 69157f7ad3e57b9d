"""The dataset manifest: which shards a dataset has, how many samples, and their bytes.

One JSON format, written by ``tarsplit --manifest``, ``tarindex``, ``ShardWriter`` and
``shard_dataset``, and read by the loader for ``len()`` and exact splitting::

    {
      "format": "tarkit-manifest",
      "version": 1,
      "samples": 3,
      "bytes": 10240,
      "shards": [
        {"url": "shard-000000.tar", "samples": 3, "bytes": 10240, "sha256": "…",
         "keys": ["a", "b", "c"], "offsets": [0, 2048, 5120]}
      ]
    }

``url`` is relative to the manifest's own directory when the shard lies beside or below
it, else a path or URL as given. ``keys`` and ``offsets`` (byte offset of each sample's
first header block in the uncompressed tar stream) are present only when indexed with
offsets. Output is deterministic: the same shards give the same manifest bytes.
"""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass, field

from ..errors import InputError, OutputError, SourceError

FORMAT = "tarkit-manifest"
VERSION = 1


@dataclass
class ShardInfo:
    """One shard's entry in a manifest."""

    url: str
    samples: int
    bytes: int
    sha256: str | None = None
    keys: list[str] | None = None
    offsets: list[int] | None = None

    def to_json(self) -> dict[str, object]:
        entry: dict[str, object] = {"url": self.url, "samples": self.samples, "bytes": self.bytes}
        if self.sha256 is not None:
            entry["sha256"] = self.sha256
        if self.keys is not None:
            entry["keys"] = self.keys
        if self.offsets is not None:
            entry["offsets"] = self.offsets
        return entry


@dataclass
class Manifest:
    """A dataset: its shards in order. ``location`` is where it was loaded from."""

    shards: list[ShardInfo] = field(default_factory=list)
    location: str | None = None

    @property
    def samples(self) -> int:
        return sum(s.samples for s in self.shards)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    def urls(self) -> list[str]:
        """Shard URLs resolved against the manifest's location."""
        return [resolve_url(self.location, s.url) for s in self.shards]

    def to_json(self) -> dict[str, object]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "samples": self.samples,
            "bytes": self.bytes,
            "shards": [s.to_json() for s in self.shards],
        }

    def dumps(self) -> str:
        """The manifest as JSON text (deterministic)."""
        return json.dumps(self.to_json(), indent=1, ensure_ascii=False) + "\n"

    def save(self, path: str) -> None:
        """Write the manifest atomically (temporary name, then rename)."""
        directory = os.path.dirname(os.path.abspath(path))
        temp = os.path.join(directory, f".{os.path.basename(path)}.tmp-{os.getpid()}")
        try:
            with open(temp, "w", encoding="utf-8") as f:
                f.write(self.dumps())
            os.replace(temp, path)
        except OSError as exc:
            try:
                os.unlink(temp)
            except OSError:
                pass
            raise OutputError(f"{path}: cannot write manifest: {exc.strerror}") from None


def relative_url(manifest_path: str | None, shard_path: str) -> str:
    """How a manifest at ``manifest_path`` names a local shard at ``shard_path``.

    >>> relative_url("out/manifest.json", "out/shard-000000.tar")
    'shard-000000.tar'
    >>> relative_url("m.json", "s3://bucket/x.tar")
    's3://bucket/x.tar'
    >>> relative_url("s3://bucket/d/m.json", "s3://bucket/d/x.tar")
    'x.tar'
    """
    if manifest_path is None:
        return shard_path
    if "://" in shard_path or "://" in manifest_path:
        # Remote: relative only below the manifest's own "directory" (resolve_url's inverse).
        base = posixpath.dirname(manifest_path) + "/"
        if "://" in base and shard_path.startswith(base):
            return shard_path[len(base) :]
        return shard_path
    base = os.path.dirname(os.path.abspath(manifest_path))
    target = os.path.abspath(shard_path)
    relative = os.path.relpath(target, base)
    if relative.startswith(".."):
        return target
    return relative.replace(os.sep, "/")


def resolve_url(location: str | None, url: str) -> str:
    """Resolve a shard URL of a manifest found at ``location``.

    >>> resolve_url("/data/m.json", "shard-0.tar")
    '/data/shard-0.tar'
    >>> resolve_url("http://h/d/m.json", "s-0.tar")
    'http://h/d/s-0.tar'
    """
    if location is None or "://" in url or os.path.isabs(url) or url.startswith("pipe:"):
        return url
    if "://" in location:
        return posixpath.join(posixpath.dirname(location), url)
    return os.path.join(os.path.dirname(os.path.abspath(location)), url)


def parse(text: str, location: str | None = None) -> Manifest:
    """Parse manifest JSON; raise :class:`InputError` when it is not one."""
    name = location or "manifest"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"not a JSON manifest: {exc.msg} at line {exc.lineno}", source=name
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f'not a tarkit manifest (no "format": "{FORMAT}")', source=name)
    if data.get("version") != VERSION:
        raise InputError(f"unsupported manifest version {data.get('version')!r}", source=name)
    shards = []
    for i, entry in enumerate(data.get("shards", [])):
        try:
            shards.append(
                ShardInfo(
                    url=str(entry["url"]),
                    samples=int(entry["samples"]),
                    bytes=int(entry["bytes"]),
                    sha256=entry.get("sha256"),
                    keys=entry.get("keys"),
                    offsets=entry.get("offsets"),
                )
            )
        except (KeyError, TypeError, ValueError):
            raise InputError(f"malformed shard entry {i}", source=name) from None
    return Manifest(shards, location)


def load(location: str) -> Manifest:
    """Read a manifest from a path or URL (anything :func:`tarkit.storage.sources.open_source` opens)."""
    from ..storage.sources import open_source

    with open_source(location) as source:
        try:
            text = source.stream.read().decode("utf-8")
        except UnicodeDecodeError:
            raise InputError("manifest is not UTF-8 text", source=location) from None
        except OSError as exc:
            raise SourceError(f"{location}: cannot read: {exc}") from None
    return parse(text, location)
