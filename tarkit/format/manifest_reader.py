"""Reading a manifest of either version into a :class:`~tarkit.format.shard_table.ShardTable`,
in bounded memory.

A version 1 manifest of a million shards is 160 MB of JSON, and parsed whole it takes
770 MB. This reader walks the top-level object itself and parses the ``shards`` array in
slices of about 8 MB cut between entries, turning each slice into columns at once (the
names into a pattern while they fit one), so that memory stays near the table's own
size. A version 2 manifest is small JSON and a binary columns file. The format only: the
caller opens the manifest and its columns file.
"""

from __future__ import annotations

import codecs
import json
import re
from array import array
from collections.abc import Callable
from operator import itemgetter, methodcaller
from typing import Any, BinaryIO

from ..errors import InputError
from ..sizes import MAX_COUNT
from .columns import SHARD_COLUMNS_SIZE, Buffer, numbers
from .manifest import FORMAT, VERSION, VERSION_2
from .shard_names import NamesBuilder, ShardNames, is_pattern
from .shard_table import Extras, ShardTable

SLICE = 4 << 20  # bytes of the shards array parsed at a time
_SPACE = re.compile(rb"[ \t\n\r]*")
_COMMA = re.compile(rb"[ \t\n\r]*,")
_CUT_TRIES = 4  # a "}," inside a string fails to parse: try an earlier one, then grow
_DECODER = json.JSONDecoder()
_NO_DIGEST = "0" * 64
_URL, _SAMPLES, _BYTES = itemgetter("url"), itemgetter("samples"), itemgetter("bytes")
_SHA256, _SHA256_OR_NONE = itemgetter("sha256"), methodcaller("get", "sha256")


def read_table(
    stream: BinaryIO,
    location: str | None = None,
    columns: Callable[[str], Buffer] | None = None,
    *,
    slice_size: int = SLICE,
) -> ShardTable:
    """The shard table of the manifest read from ``stream`` (version 1 or 2).

    ``columns(name)`` gives the bytes (or a memory map) of a version 2 manifest's columns
    file, ``name`` as the manifest gives it (relative to the manifest). Raises
    :class:`~tarkit.errors.InputError` naming ``location`` for anything that is not a
    tarkit manifest: not UTF-8 JSON, another format or version, malformed entries,
    columns that do not match. Memory for version 1: the table, and one slice of
    ``slice_size`` bytes of JSON parsed at a time.
    """
    source = location or "manifest"
    reader = _JsonReader(stream, source, slice_size)
    shards = _V1Columns(source)
    document: dict[str, Any] = {}
    reader.expect(b"{")
    if reader.peek() == b"}":
        reader.advance(1)
    else:
        while True:
            key = reader.value()
            if not isinstance(key, str) or key in document:
                raise reader.error(f"a key {key!r} that is not a new string")
            reader.expect(b":")
            if key == "shards" and reader.peek() == b"[":
                reader.advance(1)
                reader.array(shards.add)
                document[key] = shards
            else:
                document[key] = reader.value()
            after = reader.peek()
            reader.advance(1)
            if after == b"}":
                break
            if after != b",":
                raise reader.error("expected ',' or '}' after a value")
    if reader.peek():
        raise reader.error("data after the manifest")
    if document.get("format") != FORMAT:
        raise InputError(f'not a tarkit manifest (no "format": "{FORMAT}")', source=source)
    version = document.get("version")
    if version == VERSION:
        if not isinstance(document.get("shards", shards), _V1Columns):
            raise InputError('malformed "shards": not a list of entries', source=source)
        return shards.table(location)
    if version == VERSION_2:
        if columns is None:
            raise ValueError("a version 2 manifest is read with its columns file")
        return _v2_table(document, columns, location)
    raise InputError(f"unsupported manifest version {version!r}", source=source)


def _v2_table(
    document: dict[str, Any], columns: Callable[[str], Buffer], location: str | None
) -> ShardTable:
    """The table of a version 2 manifest's JSON ``document`` and its columns file."""
    source = location or "manifest"
    count, samples = _count(document, "shards", source), _count(document, "samples", source)
    _count(document, "bytes", source)
    name, index = document.get("columns"), document.get("index")
    if not isinstance(name, str) or not name:
        raise InputError('malformed "columns": not the name of a file', source=source)
    if index is not None and not (isinstance(index, str) and is_pattern(index)):
        raise InputError('malformed "index": not a pattern such as "%06d.idx"', source=source)
    names = ShardNames.from_json(document.get("names"), count, source)
    data = columns(name)
    if len(data) != SHARD_COLUMNS_SIZE * count:
        raise InputError(
            f"its columns file {name} has {len(data)} bytes, not {SHARD_COLUMNS_SIZE} for "
            f"each of its {count} shards",
            source=source,
        )
    view = memoryview(data).cast("B")
    table = ShardTable(
        names,
        numbers(view[: 8 * count], "q"),
        numbers(view[8 * count : 16 * count], "q"),
        view[16 * count :],
        index=index,
        location=location,
    )
    if table.samples != samples:
        raise InputError(
            f"its columns file {name} counts {table.samples} samples, the manifest {samples}",
            source=source,
        )
    return table


class _V1Columns:
    """The entries of a version 1 ``shards`` array, a slice at a time, as columns."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.names = NamesBuilder()
        self.samples = array("q")
        self.sizes = array("q")
        self.sha256 = bytearray()
        self.extras: Extras = {}

    def add(self, entries: list[Any]) -> None:
        """Add ``entries`` (parsed JSON); raise InputError naming the first malformed one."""
        first = len(self.samples)
        try:
            urls = list(map(_URL, entries))
            samples = list(map(_SAMPLES, entries))
            sizes = list(map(_BYTES, entries))
            try:  # every entry with a sha256 (the common case)
                digests = list(map(_SHA256, entries))
                others = max(map(len, entries)) > 4
            except KeyError:
                digests = list(map(_SHA256_OR_NONE, entries))
                others = True
            if None in digests or {*map(len, digests)} != {64}:  # unknown ones, or malformed
                digests = [digest or _NO_DIGEST for digest in digests]
                if {*map(len, digests)} != {64}:
                    raise ValueError
            if min(samples) < 0 or min(sizes) < 0 or max(samples) > MAX_COUNT:
                raise ValueError
            binary = bytes.fromhex("".join(digests))
            if len(binary) != 32 * len(entries):
                raise ValueError
            self.names.extend(urls)
            self.samples += array("q", samples)
            self.sizes += array("q", sizes)
        except (KeyError, TypeError, AttributeError, ValueError, OverflowError):
            bad = next((i for i, entry in enumerate(entries) if not _entry_ok(entry)), 0)
            raise InputError(f"malformed shard entry {first + bad}", source=self.source) from None
        self.sha256 += binary
        if others:  # looked at one by one only when some entry has more fields
            for i, entry in enumerate(entries):
                if "keys" in entry or "offsets" in entry:
                    self.extras[first + i] = (entry.get("keys"), entry.get("offsets"))

    def table(self, location: str | None) -> ShardTable:
        return ShardTable(
            self.names.finish(),
            self.samples,
            self.sizes,
            self.sha256,
            location=location,
            extras=self.extras,
        )


def _entry_ok(entry: object) -> bool:
    """Whether one version 1 entry is well formed (to name the first that is not)."""
    if not isinstance(entry, dict):
        return False
    digest = entry.get("sha256") or _NO_DIGEST
    return (
        isinstance(entry.get("url"), str)
        and _natural(entry.get("samples"))
        and _natural(entry.get("bytes"))
        and isinstance(digest, str)
        and len(digest) == 64
        and all(c in "0123456789abcdefABCDEF" for c in digest)
    )


def _count(document: dict[str, Any], key: str, source: str) -> int:
    value = document.get(key)
    if not _natural(value):
        raise InputError(f'malformed "{key}": not a count', source=source)
    assert isinstance(value, int)
    return value


def _natural(value: object) -> bool:
    return type(value) is int and 0 <= value <= MAX_COUNT


class _JsonReader:
    """JSON text read from a stream a window at a time: ``buf[pos:]`` is what is read
    and not yet taken; ``line`` the line ``pos`` is on (for error messages)."""

    def __init__(self, stream: BinaryIO, source: str, slice_size: int) -> None:
        self._read = stream.read
        self.source = source
        self.slice = slice_size
        self.buf = b""
        self.pos = 0
        self.eof = False
        self.line = 1

    def want(self, n: int) -> None:
        """Read until ``n`` bytes are after ``pos``, or the stream ends."""
        if len(self.buf) - self.pos >= n or self.eof:
            return
        parts: list[bytes | memoryview] = [memoryview(self.buf)[self.pos :]]
        have = len(parts[0])
        while have < n:
            more = self._read(max(n - have, self.slice))
            if not more:
                self.eof = True
                break
            parts.append(more)
            have += len(more)
        self.buf, self.pos = b"".join(parts), 0

    def advance(self, n: int) -> None:
        """Take ``n`` bytes."""
        self.line += self.buf.count(b"\n", self.pos, self.pos + n)
        self.pos += n

    def peek(self) -> bytes:
        """The next byte after white space (taking the space), b"" at the end."""
        while True:
            self.want(1)
            self.advance(_SPACE.match(self.buf, self.pos).end() - self.pos)  # type: ignore[union-attr]
            if self.pos < len(self.buf) or self.eof:
                return self.buf[self.pos : self.pos + 1]

    def expect(self, char: bytes) -> None:
        if self.peek() != char:
            raise self.error(f"expected {char.decode()!r}")
        self.advance(1)

    def value(self) -> Any:
        """The next JSON value (a small one: read in a window that grows until it holds it)."""
        self.peek()
        window = 1 << 12
        while True:
            text, whole = self.text(window)
            try:
                value, end = _DECODER.raw_decode(text)
            except json.JSONDecodeError as exc:
                if whole:
                    raise self.json_error(exc) from None
                window *= 4
                continue
            if end == len(text) and not whole:  # a number may go on after the window
                window *= 4
                continue
            self.advance(len(text[:end].encode("utf-8")))
            return value

    def array(self, add: Callable[[list[Any]], None]) -> None:
        """The rest of an array whose "[" is taken, given to ``add`` a slice of entries at
        a time."""
        if self.peek() == b"]":
            self.advance(1)
            return
        window = self.slice
        while True:
            self.want(window)
            cut = self._cut(min(len(self.buf), self.pos + window))
            if cut is not None:
                chunk = memoryview(self.buf)[self.pos : cut[0]]
                try:
                    entries = json.loads(self._decode(b"".join((b"[", chunk, b"]")), True))
                except ValueError:
                    entries = None
                if entries is not None:
                    add(entries)
                    self.advance(cut[1] - self.pos)
                    if self.peek() == b"]":
                        raise self.error("a comma before the end of the shards")
                    window = self.slice
                    continue
            # No cut that parses: the array ends in the window, or an entry is longer.
            text, whole = self.text(window)
            try:
                entries, end = _DECODER.raw_decode("[" + text)
            except json.JSONDecodeError as exc:
                if whole:
                    raise self.json_error(exc) from None
                window *= 4
                continue
            add(entries)
            self.advance(len(text[: end - 1].encode("utf-8")))
            return

    def _cut(self, stop: int) -> tuple[int, int] | None:
        """Where entries end before ``stop``: just after an entry's "}" and just after
        the "," that follows it. Checked by parsing, as a "}" may be inside a string."""
        buf = self.buf
        for _ in range(_CUT_TRIES):
            stop = buf.rfind(b"}", self.pos, stop)
            if stop < 0:
                return None
            comma = _COMMA.match(buf, stop + 1)
            if comma is not None:
                return stop + 1, comma.end()
        return None

    def text(self, window: int) -> tuple[str, bool]:
        """Up to ``window`` bytes from ``pos`` as text, and whether that is all there is."""
        self.want(window)
        whole = self.eof and self.pos + window >= len(self.buf)
        return self._decode(self.buf[self.pos : self.pos + window], whole), whole

    def _decode(self, data: bytes, final: bool) -> str:
        try:
            text: str = codecs.utf_8_decode(data, "strict", final)[0]
        except UnicodeDecodeError:
            raise InputError("manifest is not UTF-8 text", source=self.source) from None
        return text

    def error(self, what: str) -> InputError:
        return InputError(f"not a JSON manifest: {what} at line {self.line}", source=self.source)

    def json_error(self, exc: json.JSONDecodeError) -> InputError:
        line = self.line + exc.lineno - 1
        return InputError(f"not a JSON manifest: {exc.msg} at line {line}", source=self.source)
