"""The dataset manifest: which shards a dataset has, how many samples, and their bytes.

Version 1 is one JSON document, written by ``tarindex`` to stdout and with ``--offsets``,
and read by the loader for ``len()`` and exact splitting::

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
it, else a path or URL as given (:func:`tarkit.storage.relative_url`). ``keys`` and ``offsets`` (byte offset of each sample's
first header block in the uncompressed tar stream) are present only when indexed with
offsets. Output is deterministic: the same shards give the same manifest bytes.

Version 2 stays small at a million shards: the JSON holds the dataset-level part, the
shard names as a pattern (or a list), the name of a binary columns file beside it
(samples, bytes and SHA-256 of each shard: :mod:`.columns`) and the pattern of the shards'
index files (:mod:`.index`)::

    {
     "format": "tarkit-manifest",
     "version": 2,
     "samples": 1000000000,
     "bytes": 100000000000000,
     "shards": 1000000,
     "names": {"pattern": "train-%06d.tar", "first": 0},
     "columns": "manifest.columns",
     "index": "train-%06d.tar.idx"
    }

Every other writer of a manifest writes version 2 (:func:`dumps_v2`, from a
:class:`~tarkit.format.shard_table.ShardTable`);
:func:`~tarkit.format.manifest_reader.read_table` reads either version into one.

This module is the format only (no I/O): :mod:`tarkit.storage.manifests` reads and
writes manifests at their locations.
"""

from __future__ import annotations

import builtins
import json
import posixpath
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..sizes import MAX_COUNT

if TYPE_CHECKING:
    from .shard_table import ShardTable

FORMAT = "tarkit-manifest"
_SURROGATE = re.compile("[\ud800-\udfff]")
VERSION = 1
VERSION_2 = 2


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

    def to_json(self) -> dict[str, object]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "samples": self.samples,
            "bytes": self.bytes,
            "shards": [s.to_json() for s in self.shards],
        }

    def dumps(self) -> str:
        r"""The manifest as JSON text (deterministic).

        Keys and URLs that are not UTF-8 (read with ``surrogateescape``) keep their lone
        surrogates as ``\udcXX`` escapes, which JSON readers turn back into the same
        strings, so the text always encodes as UTF-8.

        >>> text = Manifest([ShardInfo("caf\udce9.tar", 1, 512)]).dumps()
        >>> '"caf\\udce9.tar"' in text, parse(text).shards[0].url == "caf\udce9.tar"
        (True, True)
        """
        return _json_text(self.to_json())

    def to_bytes(self) -> builtins.bytes:
        """The manifest as UTF-8 JSON: what every writer of a manifest writes."""
        return self.dumps().encode("utf-8")


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
    listed = data.get("shards", [])
    if not isinstance(listed, list):
        raise InputError('"shards" is not a list', source=name)
    shards = []
    for i, entry in enumerate(listed):
        problem = _malformed(entry)
        if problem is not None:
            raise InputError(f"malformed shard entry {i} ({problem})", source=name)
        shards.append(
            ShardInfo(entry["url"], entry["samples"], entry["bytes"], entry.get("sha256"),
                      entry.get("keys"), entry.get("offsets"))
        )  # fmt: skip
    if sum(shard.samples for shard in shards) > MAX_COUNT:
        raise InputError("its shards hold more than 2**62 samples in all", source=name)
    return Manifest(shards, location)


def dumps_v2(table: ShardTable, columns: str) -> tuple[builtins.bytes, builtins.bytes]:
    """Manifest version 2 of ``table``: its JSON (UTF-8) naming the columns file
    ``columns`` (relative to the manifest, see :func:`columns_name`), and that file's
    bytes. Deterministic: the same table gives the same bytes.
    """
    document: dict[str, object] = {
        "format": FORMAT,
        "version": VERSION_2,
        "samples": table.samples,
        "bytes": table.bytes,
        "shards": len(table),
        "names": table.names.to_json(),
        "columns": columns,
    }
    if table.index is not None:
        document["index"] = table.index
    return _json_text(document).encode("utf-8"), table.columns()


def columns_name(manifest: str) -> str:
    """The name of the columns file of the manifest at path or URL ``manifest``, relative
    to it: its file name with ``.columns`` for ``.json``.

    >>> columns_name("data/manifest.json"), columns_name("s3://b/train.manifest")
    ('manifest.columns', 'train.manifest.columns')
    """
    base = posixpath.basename(manifest) or "manifest.json"
    return base.removesuffix(".json") + ".columns"


def _json_text(document: Any) -> str:
    """``document`` as manifest JSON text: one space of indent, lone surrogates (names
    that are not UTF-8, read with ``surrogateescape``) as ``\\udcXX`` escapes."""
    text = json.dumps(document, indent=1, ensure_ascii=False) + "\n"
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _malformed(entry: object) -> str | None:
    """What is wrong with a shard entry read from a file (None: nothing): every field of
    its type, counts not negative, since the loader's plans are made from them."""
    if not isinstance(entry, dict):
        return "not an object"
    for name, kind in (("url", str), ("samples", int), ("bytes", int)):
        if name not in entry:
            return f'no "{name}"'
        if not isinstance(entry[name], kind) or isinstance(entry[name], bool):
            return f'"{name}" is {entry[name]!r}'
    if entry["samples"] < 0 or entry["bytes"] < 0:
        return "a negative count"
    if entry["samples"] > MAX_COUNT or entry["bytes"] > MAX_COUNT:
        return "a count past 2**62"
    if not isinstance(entry.get("sha256"), (str, type(None))):
        return '"sha256" is not text'
    keys, offsets = entry.get("keys"), entry.get("offsets")
    if keys is not None and not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
        return '"keys" is not a list of text'
    if offsets is not None and not (
        isinstance(offsets, list)
        and all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
    ):
        return '"offsets" is not a list of byte offsets'
    return None
