r"""Samples as TSV: one line per sample, ``__key__`` then one cell per column.

A cell holds a field's bytes as UTF-8 text with tab, newline, carriage return and
backslash escaped as ``\t \n \r \\``; bytes that are not text are written as
``<N bytes>``; a missing field is an empty cell.

>>> from tarkit.format.field_spec import parse_field_spec
>>> from tarkit.format.tar import Member
>>> def sample(key, **fields):
...     members = [Member(f"{key}.{f}", "file", len(d), 0, d, 0) for f, d in fields.items()]
...     return Sample(key, list(fields), members, "-")
>>> samples = [sample("a", txt=b"one\ttwo", jpg=b"\xff\xd8\xff"), sample("b", cls=b"7")]
>>> lines = tsv_lines(samples, parse_field_spec("txt cls;jpg"))
>>> print("".join(lines).replace("\t", " | "), end="")
__key__ | txt | cls;jpg
a | one\ttwo | <3 bytes>
b |  | 7
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from ..format.samples import Sample

# Control characters other than tab, newline and carriage return mark binary data.
_BINARY = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SPECIAL = re.compile(r"[\t\n\r\\\udc80-\udcff]")
_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\\": "\\\\"}

KEY = "__key__"


def escape(text: str) -> str:
    """Escape tab, newline, carriage return and backslash; undecodable bytes as ``\\xNN``.

    Names read from an archive keep bytes that are not UTF-8 as lone surrogates
    (``surrogateescape``); they come out as ``\\xNN``, unambiguous because a real
    backslash is doubled.

    >>> print(escape("a\\tb\\nc\\\\d"))
    a\\tb\\nc\\\\d
    >>> print(escape(b"caf\\xe9".decode("utf-8", "surrogateescape")))
    caf\\xe9
    """
    if not _SPECIAL.search(text):
        return text
    return _SPECIAL.sub(_escape_one, text)


def _escape_one(match: re.Match[str]) -> str:
    char = match.group()
    return _ESCAPES.get(char) or f"\\x{ord(char) - 0xDC00:02x}"


def as_text(data: bytes) -> str | None:
    """``data`` decoded as UTF-8 text, or None when it is not text.

    Text is valid UTF-8 without control characters other than tab, newline and
    carriage return (a NUL byte decodes as UTF-8 but is binary data).

    >>> as_text("héllo".encode())
    'héllo'
    >>> as_text(b"\\x00\\x01") is None, as_text(b"\\xff") is None
    (True, True)
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if _BINARY.search(text):
        return None
    return text


def cell(data: bytes | None) -> str:
    """One TSV cell: escaped text, ``<N bytes>`` for binary data, empty for None.

    >>> cell(b"two\\nlines"), cell(b"\\x89PNG"), cell(None)
    ('two\\\\nlines', '<4 bytes>', '')
    """
    if data is None:
        return ""
    if data.isalnum():  # ASCII letters and digits: text with nothing to escape
        return data.decode("ascii")
    text = as_text(data)
    return f"<{len(data)} bytes>" if text is None else escape(text)


def pick(sample: Sample, alternatives: list[str]) -> bytes | None:
    """The bytes of the first of ``alternatives`` the sample has, or None.

    Names match case-insensitively, as in ``tarcat -f`` (webdataset lowercases fields).
    """
    return sample.get(*alternatives)


def tsv_lines(
    samples: Iterable[Sample],
    columns: list[list[str]] | None = None,
    *,
    header: bool = True,
    key: bool = True,
) -> Iterator[str]:
    """Yield the TSV lines (each ending in a newline) for ``samples``.

    ``columns`` is a parsed field spec (:func:`~tarkit.format.field_spec.parse_field_spec`): each
    column lists alternatives, the first one present fills the cell. None means the
    fields of the first sample, in archive order. The header names ``__key__`` and each
    column as written in the spec (``jpg;png``). With no column and no key, a sample
    has nothing to show and no line is written.
    """
    iterator = iter(samples)
    first: Sample | None = None
    if columns is None:
        first = next(iterator, None)
        columns = [] if first is None else [[field] for field in first.fields]
    if not columns and not key:
        return
    if header:
        names = [escape(";".join(alternatives)) for alternatives in columns]
        yield "\t".join([KEY, *names] if key else names) + "\n"
    where = _Columns(columns)
    if first is not None:
        yield _line(first, where, key)
    for sample in iterator:
        yield _line(sample, where, key)


def _line(sample: Sample, where: _Columns, key: bool) -> str:
    picked, present = where.find(sample)
    data = iter(sample.data_of(present))  # one pass over the sample's members
    cells = [cell(next(data)) if index is not None else "" for index in picked]
    if key:
        cells.insert(0, escape(sample.key))
    return "\t".join(cells) + "\n"


class _Columns:
    """Where each column's field is in a sample (:meth:`Sample.field_index`, which folds
    a long sample's names once: a sample may have many thousands), remembered for its
    list of field names, which the samples of a dataset mostly share."""

    def __init__(self, columns: list[list[str]]) -> None:
        self.columns = columns
        self.known: dict[tuple[str, ...], tuple[list[int | None], list[int]]] = {}

    def find(self, sample: Sample) -> tuple[list[int | None], list[int]]:
        """The field index of each column (None when missing), and those present."""
        names = tuple(sample.fields)
        found = self.known.get(names)
        if found is None:
            picked = [sample.field_index(*alternatives) for alternatives in self.columns]
            found = (picked, [index for index in picked if index is not None])
            if len(self.known) >= 64:
                self.known.clear()
            self.known[names] = found
        return found


WRITE_CHUNK = 1 << 16


def write_lines(lines: Iterable[str], stream: BinaryIO) -> None:
    """Write text lines to ``stream`` as UTF-8, gathered into writes of about 64 KiB.

    When ``lines`` raises, every line it produced before goes out first, then the
    error propagates; a line is never written in part.
    """
    pending: list[str] = []
    size = 0
    try:
        for line in lines:
            pending.append(line)
            size += len(line)
            if size >= WRITE_CHUNK:
                stream.write("".join(pending).encode("utf-8", "surrogateescape"))
                pending.clear()
                size = 0
    finally:
        if pending:
            stream.write("".join(pending).encode("utf-8", "surrogateescape"))
        stream.flush()
