"""Plans: CSV or TSV files that say which samples to build, one row per sample.

The header names the fields. A column named ``@field`` holds paths of files whose
contents become ``field``; any other column holds text, written as UTF-8. A ``__key__``
column sets each sample's key, else the key is the row number as ``%09d`` (the first data
row is 0), or made by ``key_format`` from ``{row}`` and the row's text columns
(``"train/{cls}/{row:06d}"``). An empty cell leaves that field out of that row's sample. Relative paths are
relative to the plan's own directory. Blank lines are skipped.

::

    __key__,@jpg,cls,txt
    cat/001,images/cat1.jpg,0,a sleeping cat
    dog/001,images/dog1.jpg,1,

The delimiter comes from the file name (``.csv``: comma; ``.tsv``, ``.tab``: tab) or the ``delimiter`` argument. :func:`read_plan` checks every row first — row
length, keys, files that exist and can be read — and raises
:class:`~tarkit.errors.InputError` naming the plan and the line, so a bad plan fails
before anything is written. A header without any ``@`` column embeds no file: every
column is text, which is rarely what was meant, so ``warn`` is told (with the ``@``
header that would embed the files). A file that is not a plan at all (a zip, a tar, a
binary file) is named as such instead of being read as one.

:func:`plan_members` gives a plan's rows as tar members (``tarcreate``);
:class:`PlanDataset` as a Dataset for :func:`~tarkit.shard_dataset` (``tarkit shard``).
"""

from __future__ import annotations

import csv
import io
import os
import string
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from ..errors import InputError, SampleError, SourceError, UsageError
from ..format.compression import compression_of
from ..format.encoding import ImageTransform, check_key
from ..format.file_types import ARCHIVE, binary_kind
from ..storage import MANIFEST_LIMIT, StorageOptions, location, read_bytes, resolve_url
from .files import read_file

KEY_COLUMN = "__key__"


@dataclass(frozen=True)
class PlanRow:
    """One sample of a plan: its key, text fields and file fields (field → path)."""

    line: int
    key: str
    texts: tuple[tuple[str, str], ...]
    files: tuple[tuple[str, str], ...]

    @property
    def fields(self) -> list[str]:
        """The row's field names, sorted."""
        return sorted([f for f, _ in self.texts] + [f for f, _ in self.files])

    def load(self, storage_options: StorageOptions | None = None) -> dict[str, object]:
        """The sample dict: ``__key__``, text fields as str, file fields as bytes (URLs
        read with ``storage_options``).

        Raises :class:`SourceError` naming the file when one cannot be read.
        """
        sample: dict[str, object] = {KEY_COLUMN: self.key}
        sample.update(self.texts)
        for field, path in self.files:
            sample[field] = read_file(path, storage_options)
        return sample


def plan_members(rows: Iterable[PlanRow]) -> Iterator[tuple[str, bytes]]:
    """(member name, data) for every field of every row, fields sorted; text as UTF-8.

    Files are read as they are needed; one that cannot be read raises
    :class:`~tarkit.errors.SourceError` naming it.
    """
    for row in rows:
        sample = row.load()
        for field in row.fields:
            value = sample[field]
            data = value if isinstance(value, bytes) else str(value).encode("utf-8")
            yield f"{row.key}.{field}", data


class PlanDataset:
    """The rows of a plan (checked when built), loaded per item and transformed by
    ``transform``; ``key_format`` makes the keys as in :func:`read_plan`; the plan and
    the URLs in it are read with ``storage_options``."""

    def __init__(
        self,
        plan: str | Sequence[PlanRow],
        transform: ImageTransform | None = None,
        delimiter: str | None = None,
        *,
        key_format: str | None = None,
        warn: Callable[[str], object] | None = None,
        storage_options: StorageOptions | None = None,
    ) -> None:
        self.storage_options = dict(storage_options) if storage_options else None
        if isinstance(plan, str):
            self.rows = read_plan(plan, delimiter, key_format=key_format, warn=warn,
                                  storage_options=storage_options)  # fmt: skip
        else:
            self.rows = list(plan)
        self.transform = transform or ImageTransform()
        self.source = plan if isinstance(plan, str) else "plan"

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, object]:
        row = self.rows[index]
        return self.transform.sample(row.load(self.storage_options), self.item_source(index))

    def item_source(self, index: int) -> str:
        """Where item ``index`` comes from: the plan's line (and the files it names)."""
        row = self.rows[index]
        files = " ".join(path for _, path in row.files)
        return f"{self.source}: line {row.line}" + (f" ({files})" if files else "")


def plan_delimiter(path: str, delimiter: str | None = None) -> str:
    """The delimiter of plan ``path``: ``delimiter`` if given, else from the file name.

    >>> plan_delimiter("plan.csv"), plan_delimiter("plan.tsv"), plan_delimiter("x", ";")
    (',', '\\t', ';')
    """
    if delimiter is not None:
        if delimiter in ("\\t", "tab", "TAB"):
            return "\t"
        if len(delimiter) != 1:
            raise UsageError(f"the delimiter must be one character (got {delimiter!r})")
        return delimiter
    lower = path.lower()
    if lower.endswith(".csv"):
        return ","
    if lower.endswith((".tsv", ".tab")):
        return "\t"
    raise UsageError(f"{path}: cannot tell the delimiter from the file name: pass -d ',' or -d tab")


def check_plan_file(path: str, head: bytes | None = None) -> None:
    """Raise :class:`InputError` when ``path`` (whose first bytes are ``head``, when
    given) is plainly not a CSV/TSV plan (an archive, an image, any binary file), naming
    what it is; a missing file passes (read_plan says).
    """
    if head is None:
        try:
            with open(path, "rb") as f:
                head = f.read(4096)
        except OSError:
            return
    kind = binary_kind(head)  # an image, an archive…: format/file_types.py's one table
    if kind is not None:
        hint = _DIRECTORY_HINT if kind.category == ARCHIVE else ""
        raise InputError(f"{kind.name}, not a CSV/TSV plan{hint}", source=path)
    compression = compression_of(head)
    if compression is not None:
        raise InputError(f"{_COMPRESSED[compression]}, not a CSV/TSV plan", source=path)
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(f"UTF-16 text, not a CSV/TSV plan{_HINTS['UTF-16 text']}", source=path)
    if len(head) >= 512 and head[257:262] == b"ustar":
        raise InputError(f"a tar archive, not a CSV/TSV plan{_HINTS['a tar archive']}",
                         source=path)  # fmt: skip
    if b"\0" in head:
        raise InputError("a binary file, not a CSV/TSV plan (a text file, one row per sample)",
                         source=path)  # fmt: skip


_COMPRESSED = {"gzip": "a gzip file", "bzip2": "a bzip2 file", "xz": "an xz file",
               "zstd": "a zstd file"}  # fmt: skip


_DIRECTORY_HINT = (
    ": unpack it and give the directory (tarkit shard DIR), or list its files in a .csv "
    "plan with an @ column"
)
_HINTS = {
    "a tar archive": ": it may already be a shard (tarcat, tarsplit -c N re-cut it)",
    "UTF-16 text": ": save the plan as UTF-8",
}


def read_plan(
    path: str,
    delimiter: str | None = None,
    *,
    key_format: str | None = None,
    warn: Callable[[str], object] | None = None,
    storage_options: StorageOptions | None = None,
) -> list[PlanRow]:
    """Read and check a whole plan; return its rows in order.

    A plan in an object store (``s3://…``) is read with ``storage_options``; its relative
    paths are relative to its URL. Paths that are URLs, and the paths of a remote plan,
    are not checked here (that would ask the store about every file from this machine):
    one that cannot be read fails its item when it is read. A plan is data, not the
    user's word (:func:`~tarkit.storage.resolve_url`): a cell that is a command
    (``pipe:…``), or a local path in a remote plan, is an :class:`InputError`.

    Raises :class:`InputError` for a file that is not a plan (see
    :func:`check_plan_file`), a malformed header, a row whose length differs from the
    header's, a bad or repeated key, a row without fields, and a file that is missing or
    unreadable (naming the path it was looked for at and the plan's directory it was
    resolved against); :class:`SourceError` when the plan itself cannot be read;
    :class:`UsageError` for a ``key_format`` that names no such column, or one given for
    a plan with a ``__key__`` column. ``warn`` is called with a message when the header
    has no ``@`` column (no file is embedded).
    """
    remote = location(path).remote
    try:
        # What the file is comes first: a zip named photos.zip is a zip, not a plan
        # whose delimiter cannot be told.
        if remote:
            data = read_bytes(path, storage_options, limit=MANIFEST_LIMIT)
            if data is None:
                raise SourceError(f"{path}: no such file")
            check_plan_file(path, data[:4096])
            sep = plan_delimiter(path, delimiter)
            text = io.StringIO(data.decode("utf-8-sig"), newline="")
            lines = list(csv.reader(text, delimiter=sep, strict=True))
        else:
            check_plan_file(path)
            sep = plan_delimiter(path, delimiter)
            with open(path, encoding="utf-8-sig", newline="") as f:
                lines = list(csv.reader(f, delimiter=sep, strict=True))
    except FileNotFoundError:
        raise SourceError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise InputError("the plan is not UTF-8 text", source=path) from None
    except csv.Error as exc:
        raise InputError(f"malformed plan: {exc}", source=path) from None
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror}") from None
    numbered = [(n, row) for n, row in enumerate(lines, 1) if any(cell.strip() for cell in row)]
    if not numbered:
        raise InputError("the plan is empty (it needs a header line naming the fields)",
                         source=path)  # fmt: skip
    (header_line, header), body = numbered[0], numbered[1:]
    columns = _check_header(header, path, header_line)
    if key_format is not None:
        _check_key_format(key_format, columns, path)
    base = "" if remote else os.path.dirname(os.path.abspath(path))
    if warn is not None and not any(is_file for _, is_file in columns):
        warn(_no_file_column(header, body, base, path))
    rows: list[PlanRow] = []
    keys: dict[str, int] = {}
    for index, (line, cells) in enumerate(body):
        rows.append(_check_row(cells, columns, index, line, base, path, keys, key_format))
    return rows


def _no_file_column(
    header: list[str], body: list[tuple[int, list[str]]], base: str, path: str
) -> str:
    """The warning for a header without ``@`` columns, with the header that would embed
    the files of the first column whose first cell names an existing file."""
    first = body[0][1] if body else []
    suggested = list(header)
    for i, cell in enumerate(first[: len(header)]):
        exists = bool(base) and os.path.isfile(os.path.join(base, cell))  # not for a remote plan
        if cell and exists and "." in os.path.basename(cell):
            suggested[i] = "@" + os.path.basename(cell).rsplit(".", 1)[1].lower()
            break
    else:
        suggested = ["@jpg", *header[1:]] if header else ["@jpg"]
    return (
        f"{path}: no column starts with @, so no file is embedded: every cell is text. "
        f"To pack the files a column lists, name it @<field> (header "
        f"{','.join(suggested)!r} instead of {','.join(header)!r})"
    )


def fill_key(key_format: str, values: Mapping[str, object]) -> str:
    """``key_format`` with every ``{name}`` or ``{name:spec}`` replaced from ``values``.

    Unlike :meth:`str.format`, a name is taken whole, dots included, so every column of a
    plan can be named (``{class.txt}``). Raises KeyError for an unknown name and
    ValueError for a bad template or a spec the value cannot take.

    >>> fill_key("{class.txt}/{row:04d}", {"class.txt": "cat", "row": 7})
    'cat/0007'
    """
    parts = []
    for literal, name, spec, conversion in string.Formatter().parse(key_format):
        parts.append(literal)
        if name is None:
            continue
        if name == "" or name.isdigit():
            raise ValueError(f"name the column inside {{}} (got {{{name}}})")
        value = values[name]
        if conversion == "r":
            value = repr(value)
        elif conversion is not None:
            value = str(value)
        parts.append(format(value, spec or ""))
    return "".join(parts)


def _check_key_format(key_format: str, columns: list[tuple[str, bool]], path: str) -> None:
    """Raise UsageError unless ``key_format`` can be filled from ``{row}`` and text columns."""
    if any(field == KEY_COLUMN for field, _ in columns):
        raise UsageError(f"{path}: the plan has a {KEY_COLUMN} column: leave out --key")
    names = {field: "" for field, is_file in columns if not is_file}
    try:
        fill_key(key_format, dict(names, row=0))
    except KeyError as exc:
        known = ", ".join(["row", *names])
        raise UsageError(
            f"--key {key_format!r}: no text column {exc.args[0]!r} (it can use: {known})"
        ) from None
    except ValueError as exc:
        raise UsageError(f"--key {key_format!r}: {exc}") from None


def _check_header(header: list[str], path: str, line: int) -> list[tuple[str, bool]]:
    """(field name or __key__, is a file column) per column."""
    columns: list[tuple[str, bool]] = []
    seen: set[str] = set()
    for cell in header:
        name = cell.strip()
        is_file = name.startswith("@")
        field = name[1:] if is_file else name
        if not field or "/" in field or "\0" in field or (is_file and field == KEY_COLUMN):
            raise InputError(f"line {line}: bad column name {cell!r} in the header", source=path)
        if field.lower() in seen:
            raise InputError(f"line {line}: column {field!r} appears twice", source=path)
        seen.add(field.lower())
        columns.append((field, is_file))
    if all(field == KEY_COLUMN for field, _ in columns):
        raise InputError(f"line {line}: the header names no field", source=path)
    return columns


def _check_row(
    cells: list[str],
    columns: list[tuple[str, bool]],
    index: int,
    line: int,
    base: str,
    path: str,
    keys: dict[str, int],
    key_format: str | None = None,
) -> PlanRow:
    if len(cells) != len(columns):
        raise InputError(
            f"line {line}: {len(cells)} cells, but the header has {len(columns)} columns",
            source=path,
        )
    key = f"{index:09d}"
    texts: list[tuple[str, str]] = []
    files: list[tuple[str, str]] = []
    for (field, is_file), cell in zip(columns, cells, strict=True):
        if field == KEY_COLUMN:
            key = cell.strip()
            continue
        if cell == "":
            continue
        if not is_file:
            texts.append((field, cell))
            continue
        # The trust rule: no command, and no local file in a remote plan.
        file_path = resolve_url(path, cell, f"line {line}: field {field!r}")
        if not base or not location(file_path).is_file:  # a remote plan, or a URL: not checked
            files.append((field, file_path))
            continue
        if not os.path.isfile(file_path):
            what = "is not a regular file" if os.path.exists(file_path) else "no such file"
            raise InputError(
                f"line {line}: field {field!r}: {cell}: {what} "
                f"({_resolved(cell, file_path, base)})",
                source=path,
            )
        if not os.access(file_path, os.R_OK):
            raise InputError(f"line {line}: field {field!r}: {cell}: not readable", source=path)
        files.append((field, file_path))
    if key_format is not None:
        values = {field: cell for (field, is_file), cell in zip(columns, cells, strict=True)
                  if not is_file}  # fmt: skip
        try:
            key = fill_key(key_format, dict(values, row=index))
        except ValueError as exc:  # a number format on a text cell
            raise InputError(f"line {line}: --key {key_format!r}: {exc}", source=path) from None
    try:
        check_key(key)
    except SampleError as exc:
        raise InputError(f"line {line}: {exc}", source=path) from None
    if key in keys:
        raise InputError(
            f"line {line}: key {key!r} is already used on line {keys[key]}", source=path
        )
    keys[key] = line
    if not texts and not files:
        raise InputError(f"line {line}: the row has no fields (every cell is empty)",
                         source=path)  # fmt: skip
    return PlanRow(line, key, tuple(texts), tuple(files))


def _resolved(cell: str, file_path: str, base: str) -> str:
    """Where a plan's path was looked for, and against what."""
    if os.path.isabs(cell):
        return f"looked for at {os.path.normpath(file_path)}"
    return (
        f"looked for at {os.path.normpath(file_path)}: relative paths are resolved "
        f"against the plan's directory, {base}"
    )
