"""Creating a shard from files: the rows of a plan, or a directory tree.

Members are written with :meth:`~tarkit.format.tar.TarWriter.add`'s deterministic headers
(mode 0444, uid/gid 0, mtime ``SOURCE_DATE_EPOCH`` or 2000-01-01), the fields of a sample
sorted by name, so the same plan or tree always gives the same bytes.

A tree (:func:`list_tree`) becomes samples by WebDataset's key rule — a file's key is
its path up to the first dot of its file name — in the order of the keys' UTF-8 bytes
(as ``tarsort`` orders them). What a reader would skip or misread is left out, warned
about, or refused:

- hidden files and directories (name starting with ``.``) are ignored, as ``tarkit
  shard`` and ``ls`` do;
- a file without a dot in its name, a symlink, a FIFO, socket or device, and anything
  below a top-level ``__name__`` directory (webdataset metadata, which readers skip) is
  skipped and counted in ``skips``; with ``strict`` it raises
  :class:`~tarkit.errors.InputError`. With ``dereference``, a symlink to a regular file
  is read as that file (symlinks to directories are never followed);
- two files that would be the same field of one sample (``x.jpg``, ``x.JPG``) raise
  :class:`~tarkit.errors.InputError` naming both.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ..errors import InputError, SourceError
from ..format.samples import SkipLog, split_name
from ..format.tar import TarWriter
from ..storage import Sink
from ..stream.stages import output_errors
from .plan import PlanRow

NO_FIELD_FILE = "file without a field (no dot in the file name)"
METADATA_FILE = "file below a webdataset metadata directory (__name__), which readers skip"


@dataclass(frozen=True)
class TreeSample:
    """A sample of a tree: its key and (field, path) pairs sorted by field."""

    key: str
    files: tuple[tuple[str, str], ...]


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


def list_tree(
    root: str, *, strict: bool = False, skips: SkipLog | None = None, dereference: bool = False
) -> list[TreeSample]:
    """The samples of the tree ``root``, sorted by key (see the module docstring).

    Raises :class:`~tarkit.errors.SourceError` when ``root`` is not a directory or a
    directory cannot be listed, and :class:`InputError` for a field that appears twice
    and for a skipped file under ``strict``.
    """
    if not os.path.isdir(root):
        what = "no such directory" if not os.path.exists(root) else "not a directory"
        raise SourceError(f"{root}: {what}")
    groups: dict[str, dict[str, tuple[str, str]]] = {}
    for path, kind in _walk(root, dereference):
        reason = _skip_reason(path, kind)
        if reason is not None:
            _skip(root, path, reason, strict, skips)
            continue
        key, field = split_name(path)  # type: ignore[misc]
        fields = groups.setdefault(key, {})
        other = fields.get(field.lower())
        if other is not None:
            raise InputError(
                f"{other[1]} and {path} would both be field {field!r} of sample {key!r} "
                "(fields are compared case-insensitively, as webdataset does)",
                source=root,
            )
        fields[field.lower()] = (field, path)
    return [
        TreeSample(key, tuple(sorted(groups[key].values())))
        for key in sorted(groups, key=lambda k: k.encode("utf-8", "surrogateescape"))
    ]


def tree_members(root: str, samples: Iterable[TreeSample]) -> Iterator[tuple[str, bytes]]:
    """(member name, data) for every file of ``samples``, read from below ``root``."""
    for sample in samples:
        for field, path in sample.files:
            full = os.path.join(root, path)
            try:
                with open(full, "rb") as f:
                    data = f.read()
            except OSError as exc:
                raise SourceError(f"{full}: cannot read: {exc.strerror}") from None
            yield f"{sample.key}.{field}", data


def write_members(members: Iterable[tuple[str, bytes]], sink: Sink) -> int:
    """Write new members to ``sink`` as one archive and commit it; return the count.

    On any error the sink is aborted (a file output does not appear) and the
    end-of-archive marker is not written.
    """
    count = 0
    try:
        with output_errors(sink):
            writer = TarWriter(sink.stream)
            for name, data in members:
                writer.add(name, data)
                count += 1
            writer.close()
            sink.commit()
    except BaseException:
        sink.abort()
        raise
    return count


def _walk(root: str, dereference: bool) -> Iterator[tuple[str, str]]:
    """(relative path with '/', kind) of every entry that is not a directory, in name
    order, a directory's files before its subdirectories; hidden entries are left out."""
    pending = [""]
    while pending:
        relative = pending.pop()
        directory = os.path.join(root, relative) if relative else root
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            raise SourceError(f"{directory}: cannot list: {exc.strerror}") from None
        subdirectories = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = f"{relative}/{entry.name}" if relative else entry.name
            if entry.is_dir(follow_symlinks=False):
                subdirectories.append(path)
                continue
            yield path, _kind(entry, dereference)
        pending.extend(reversed(subdirectories))


def _kind(entry: os.DirEntry[str], dereference: bool) -> str:
    """``file`` for a regular file (or, with ``dereference``, a symlink to one), else what it is."""
    try:
        mode = entry.stat(follow_symlinks=False).st_mode
    except OSError as exc:
        raise SourceError(f"{entry.path}: cannot stat: {exc.strerror}") from None
    if stat.S_ISLNK(mode) and dereference:
        try:
            if stat.S_ISREG(entry.stat(follow_symlinks=True).st_mode):
                return "file"
        except OSError:
            return "broken symlink"
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return "special file"


_KINDS = (
    (stat.S_ISREG, "file"),
    (stat.S_ISLNK, "symlink"),
    (stat.S_ISFIFO, "fifo"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
)


def _skip_reason(path: str, kind: str) -> str | None:
    if kind != "file":
        return kind
    top = path.split("/", 1)
    if len(top) == 2 and top[0].startswith("__") and top[0].endswith("__"):
        return METADATA_FILE
    if split_name(path) is None:
        return NO_FIELD_FILE
    return None


def _skip(root: str, path: str, reason: str, strict: bool, skips: SkipLog | None) -> None:
    if strict:
        raise InputError(f"{reason} is not allowed with --strict", source=os.path.join(root, path))
    if skips is not None:
        skips.add(reason, root, path)
