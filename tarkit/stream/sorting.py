"""Sorting samples: regroup interleaved members, then an external merge sort in bounded memory.

:func:`sort_samples` reads every member of every input (it does not rely on members of a
sample being adjacent, so it repairs archives made without ``tar --sort=name``), gives
each member its key with :func:`~tarkit.format.samples.split_name`, and sorts:

1. **Members by key.** All members of a key come together, in the order they were read;
   they form one sample. Two members of one key with the same field (compared
   case-insensitively, as webdataset lowercases fields) raise
   :class:`~tarkit.errors.SampleError` naming both.
2. **Samples by a field** (``SortOrder(field=…)`` only): by the field's bytes with
   surrounding ASCII whitespace stripped, or with ``numeric`` by their value as a number.
   A sample without the field, or whose field is not a number, raises ``SampleError``.

The order of keys is that of their UTF-8 bytes (``LC_ALL=C sort``). Sorting is stable:
samples that compare equal keep the order in which their first member was read, with or
without ``reverse``. ``shuffle_seed`` orders samples by the first 8 bytes of
BLAKE2b(key, key=str(seed)) instead: a global shuffle that depends only on the keys and
the seed, the same on every machine.

Memory: items are gathered until they take about half of ``memory``, sorted, and
spilled to a temporary file (a *run*); the runs are then merged, at most as many at
once as ``memory`` allows buffers for (more runs take more merge passes). Inputs that
fit in half of ``memory`` are sorted without temporary files. The runs live in a private
directory (``tarsort-*`` under ``tempdir``, else ``$TMPDIR``, else ``/tmp``) that is
removed when the sorted iterator ends, fails or is closed: close it when you stop early.
One member is always held whole, as the reader does, even if it is larger than ``memory``.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import os
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO, Union

from ..errors import OutputError, SampleError, UsageError
from ..format.archives import archive_members
from ..format.samples import QUIET_SKIPS, Sample, SkipLog, skip_member, skip_reason, split_name
from ..format.tar import FILE, Member
from ..storage import expand_inputs, open_source, write_failure

DEFAULT_MEMORY = 256 << 20
MIN_MEMORY = 1 << 20
# Bytes of Python objects that hold one member in a run besides its raw bytes and name:
# the Member tuple, its name and raw objects, the item and entry tuples, the list slot.
# Measured with tracemalloc (tests/test_sorting.py keeps it honest).
ITEM_OVERHEAD = 512
_RUN_BUFFER = 64 << 10  # read buffer of each run being merged
_MAX_FAN_IN = 256  # runs merged at once, well below the usual limit of 1024 open files

Value = Union[bytes, int, float]
# (comparison value, tie-break, sequence number, members as (input index, member))
Item = tuple[Value, int, int, tuple[tuple[int, Member], ...]]

# A run record: sequence number, value length, member count; then the value; then per
# member: input index, byte offset, size, data start, name length, raw length, name, raw.
_RECORD = struct.Struct("<QII")
_ENTRY = struct.Struct("<IQQIIQ")


@dataclass(frozen=True)
class SortOrder:
    """How to order samples: by key (the default), by a field, or shuffled by key."""

    field: str | None = None
    numeric: bool = False
    reverse: bool = False
    shuffle_seed: int | None = None

    def __post_init__(self) -> None:
        if self.numeric and self.field is None:
            raise UsageError("--numeric needs a field to sort by (-k FIELD)")
        if self.shuffle_seed is not None and self.field is not None:
            raise UsageError("--shuffle orders by key: it cannot be combined with -k")


def shuffle_value(key: str, seed: int) -> bytes:
    """The value a key is ordered by under ``--shuffle --seed``: hash first, key after.

    The key is appended so that members of one key always come together.

    >>> shuffle_value("a", 1).hex()[:16], shuffle_value("a", 1)[8:]
    ('594d9fca33d87f37', b'a')
    """
    encoded = key.encode("utf-8", "surrogateescape")
    digest = hashlib.blake2b(encoded, digest_size=8, key=str(seed).encode()).digest()
    return digest + encoded


def parse_number(text: bytes) -> int | float:
    """A field's value as a number (int when it is one, else float); ValueError if none.

    >>> parse_number(b"12"), parse_number(b"-1.5e3")
    (12, -1500.0)
    """
    try:
        return int(text)
    except ValueError:
        value = float(text)
        if math.isnan(value):
            raise
        return value


def sort_samples(
    inputs: Sequence[str],
    order: SortOrder = SortOrder(),
    *,
    memory: int = DEFAULT_MEMORY,
    strict: bool = False,
    skips: SkipLog | None = None,
    ignore_zeros: bool = False,
    allow_empty: bool = False,
    tempdir: str | None = None,
    on_read: Callable[[int, bool], object] | None = None,
) -> Iterator[Sample]:
    """Yield the samples of all ``inputs`` (none: stdin) sorted as ``order`` says.

    Members are regrouped by key across all inputs, so interleaved members form whole
    samples. Members that are not sample data are skipped (counted in ``skips``) or,
    with ``strict``, raise, as :func:`~tarkit.format.samples.group_samples` does. Every input
    is read to its end before the first sample is yielded. See the module docstring for
    the order, the errors and the memory used. ``on_read(members, finished)`` is told
    how many members were read so far, every 256 members, and once more with
    ``finished`` true when every input is read (for a progress display).
    """
    if memory < MIN_MEMORY:
        raise UsageError(f"--memory must be at least {MIN_MEMORY >> 20}M (got {memory} bytes)")
    sorter = _Sorter(memory, tempdir)
    try:
        sources: list[str] = []
        members = _keyed_members(
            inputs, sources, memory, strict, skips, ignore_zeros, allow_empty, on_read
        )
        if order.field is None:
            items = _regroup(
                sorter.sort(_member_items(members, order), reverse=order.reverse), sources
            )
        else:
            by_key = sorter.sort(_member_items(members, SortOrder()), reverse=False)
            samples = _field_items(_regroup(by_key, sources), order, sources)
            decode = parse_number if order.numeric else None
            items = sorter.sort(samples, reverse=order.reverse, decode=decode)
        for item in items:
            yield _sample(item[3], sources)
    finally:
        sorter.cleanup()


def _keyed_members(
    inputs: Sequence[str],
    sources: list[str],
    memory: int,
    strict: bool,
    skips: SkipLog | None,
    ignore_zeros: bool,
    allow_empty: bool,
    on_read: Callable[[int, bool], object] | None = None,
) -> Iterator[tuple[int, Member]]:
    """(input index, member) for every member that is sample data, inputs in order."""
    chunk_size = min(1 << 20, memory // 16)
    read = 0
    for spec in expand_inputs(inputs):
        with open_source(spec) as source:
            index = len(sources)
            sources.append(source.name)
            for member in archive_members(
                source.stream, source.name, ignore_zeros=ignore_zeros, allow_empty=allow_empty,
                chunk_size=chunk_size,
            ):  # fmt: skip
                reason = skip_reason(member)
                if reason is None:
                    yield index, member
                    read += 1
                    if on_read is not None and not read & 255:
                        on_read(read, False)
                elif reason not in QUIET_SKIPS:
                    skip_member(reason, member, source.name, strict, skips)
    if on_read is not None:
        on_read(read, True)


def _member_items(members: Iterable[tuple[int, Member]], order: SortOrder) -> Iterator[Item]:
    """One item per member, valued by its key (or its shuffle value)."""
    seed = order.shuffle_seed
    tiebreak = -1 if order.reverse else 1
    for seq, (index, member) in enumerate(members):
        key = member.name[: member.name.find(".", member.name.rfind("/") + 1)]
        if seed is None:
            value = key.encode("utf-8", "surrogateescape")
        else:
            value = shuffle_value(key, seed)
        yield value, tiebreak * seq, seq, ((index, member),)


def _regroup(items: Iterable[Item], sources: Sequence[str]) -> Iterator[Item]:
    """Join consecutive member items of one key into one sample item; check its fields."""
    current: Item | None = None
    current_key = ""
    entries: list[tuple[int, Member]] = []
    folded: dict[str, tuple[int, Member]] = {}
    for item in items:
        entry = item[3][0]
        member = entry[1]
        key, field = split_name(member.name)  # type: ignore[misc]
        if current is None or key != current_key:
            if current is not None:
                yield current[0], current[1], current[2], tuple(entries)
            current, current_key, entries, folded = item, key, [], {}
        lower = field.lower()
        if lower in folded:
            first_index, first = folded[lower]
            raise SampleError(
                f"field {field!r} appears twice in sample {key!r} (first as {first.name} at "
                f"byte {first.offset} of {sources[first_index]}; fields are compared "
                "case-insensitively, as webdataset does)",
                source=sources[entry[0]],
                offset=member.offset,
                member=member.name,
            )
        folded[lower] = entry
        entries.append(entry)
    if current is not None:
        yield current[0], current[1], current[2], tuple(entries)


def _sample(entries: tuple[tuple[int, Member], ...], sources: Sequence[str]) -> Sample:
    members = [m for _, m in entries]
    key, _ = split_name(members[0].name)  # type: ignore[misc]
    fields = [m.name[len(key) + 1 :] for m in members]
    return Sample(key, fields, members, sources[entries[0][0]])


def _field_items(
    samples: Iterable[Item], order: SortOrder, sources: Sequence[str]
) -> Iterator[Item]:
    """Sample items valued by the field ``order.field`` (stripped bytes, or a number)."""
    assert order.field is not None
    wanted = order.field
    sign = -1 if order.reverse else 1
    for _, _, seq, entries in samples:
        sample = _sample(entries, sources)
        index = sample.field_index(wanted)
        if index is None:
            raise SampleError(
                f"sample {sample.key!r} has no field {order.field!r} to sort by",
                source=sample.source,
                offset=sample.members[0].offset,
            )
        member = sample.members[index]
        text = member.data.strip()
        value: Value = text
        if order.numeric:
            try:
                value = parse_number(text)
            except ValueError:
                shown = text[:40].decode("utf-8", "backslashreplace")
                raise SampleError(
                    f"field {order.field!r} of sample {sample.key!r} is not a number: {shown!r}",
                    source=sources[entries[index][0]],
                    offset=member.offset,
                    member=member.name,
                ) from None
        yield value, sign * seq, seq, entries


def _encode_value(value: Value) -> bytes:
    return value if isinstance(value, bytes) else repr(value).encode()


def _item_size(item: Item) -> int:
    """Bytes an item takes in memory, about."""
    value = item[0]
    size = len(value) + 33 if isinstance(value, bytes) else 32
    for _, member in item[3]:
        size += ITEM_OVERHEAD + len(member[4]) + 2 * len(member[0])
    return size


class _Sorter:
    """Sorts item streams through runs in a private temporary directory."""

    def __init__(self, memory: int, tempdir: str | None) -> None:
        self.budget = memory // 2
        self.tempdir = tempdir
        self.directory: str | None = None
        self.runs = 0
        self.largest = 0  # bytes of the largest item seen, for the merge fan-in
        self.open_files: list[BinaryIO] = []

    def sort(
        self,
        items: Iterable[Item],
        *,
        reverse: bool,
        decode: Callable[[bytes], Value] | None = None,
    ) -> Iterator[Item]:
        """The items in order (by value, then tie-break; both reversed with ``reverse``)."""
        buffer: list[Item] = []
        size = 0
        runs: list[str] = []
        for item in items:
            item_size = _item_size(item)
            self.largest = max(self.largest, item_size)
            buffer.append(item)
            size += item_size
            if size >= self.budget:
                buffer.sort(reverse=reverse)
                runs.append(self._write_run(buffer))
                buffer, size = [], 0
        buffer.sort(reverse=reverse)
        if not runs:
            return iter(buffer)
        if buffer:
            runs.append(self._write_run(buffer))
        del buffer
        return self._merge_all(runs, reverse, decode)

    def _merge_all(
        self, runs: list[str], reverse: bool, decode: Callable[[bytes], Value] | None
    ) -> Iterator[Item]:
        fan_in = max(2, min(_MAX_FAN_IN, self.budget // (_RUN_BUFFER + self.largest)))
        while len(runs) > fan_in:
            merged = []
            for start in range(0, len(runs), fan_in):
                group = runs[start : start + fan_in]
                if len(group) == 1:
                    merged.append(group[0])
                    continue
                merged.append(self._write_run(self._merge(group, reverse, decode)))
            runs = merged
        yield from self._merge(runs, reverse, decode)

    def _merge(
        self, runs: list[str], reverse: bool, decode: Callable[[bytes], Value] | None
    ) -> Iterator[Item]:
        files = [open(path, "rb", buffering=_RUN_BUFFER) for path in runs]  # noqa: SIM115
        self.open_files.extend(files)
        sign = -1 if reverse else 1
        try:
            yield from heapq.merge(*(_read_run(f, sign, decode) for f in files), reverse=reverse)
        finally:
            for f, path in zip(files, runs, strict=True):
                f.close()
                if f in self.open_files:
                    self.open_files.remove(f)
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass

    def _write_run(self, items: Iterable[Item]) -> str:
        if self.directory is None:
            try:
                self.directory = tempfile.mkdtemp(prefix="tarsort-", dir=self.tempdir)
            except OSError as exc:
                where = self.tempdir or tempfile.gettempdir()
                raise OutputError(
                    f"{where}: cannot create a temporary directory: {exc.strerror}"
                ) from None
        path = os.path.join(self.directory, f"run-{self.runs:06d}")
        self.runs += 1
        try:
            self._write_records(path, items)
        except OSError as exc:
            where = self.tempdir or tempfile.gettempdir()
            raise write_failure(f"{path} (a sorted run)", exc, where) from None
        return path

    def _write_records(self, path: str, items: Iterable[Item]) -> None:
        with open(path, "wb", buffering=1 << 20) as f:
            write = f.write
            for value, _, seq, entries in items:
                encoded = _encode_value(value)
                write(_RECORD.pack(seq, len(encoded), len(entries)))
                write(encoded)
                for index, member in entries:
                    name = member.name.encode("utf-8", "surrogateescape")
                    raw = member.raw
                    write(_ENTRY.pack(index, member.offset, member.size, member.data_start,
                                      len(name), len(raw)))  # fmt: skip
                    write(name)
                    write(raw)

    def cleanup(self) -> None:
        """Close the runs and remove the temporary directory (again if interrupted)."""
        for f in self.open_files:
            f.close()
        self.open_files.clear()
        if self.directory is not None:
            try:
                shutil.rmtree(self.directory, ignore_errors=True)
            except BaseException:
                shutil.rmtree(self.directory, ignore_errors=True)
                raise
            self.directory = None


def _read_run(f: BinaryIO, sign: int, decode: Callable[[bytes], Value] | None) -> Iterator[Item]:
    """The items of a run file, as written."""
    read = f.read
    record_size, entry_size = _RECORD.size, _ENTRY.size
    unpack_record, unpack_entry = _RECORD.unpack, _ENTRY.unpack
    while True:
        head = read(record_size)
        if not head:
            return
        seq, value_length, count = unpack_record(head)
        value: Value = read(value_length)
        if decode is not None:
            value = decode(value)  # type: ignore[arg-type]
        entries = []
        for _ in range(count):
            index, offset, size, data_start, name_length, raw_length = unpack_entry(
                read(entry_size)
            )
            name = read(name_length).decode("utf-8", "surrogateescape")
            member = Member(name, FILE, size, offset, read(raw_length), data_start)
            entries.append((index, member))
        yield value, sign * seq, seq, tuple(entries)
