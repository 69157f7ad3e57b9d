"""Samples: the key/field rule, grouping adjacent members, and the checks on them.

A member's key is its path up to the first dot of its file name, and its field is the
rest (``a/b/x.seg.png`` → key ``a/b/x``, field ``seg.png``): WebDataset's rule. A sample
is a run of adjacent members with the same key.

>>> split_name("a/b/x.seg.png")
('a/b/x', 'seg.png')
>>> split_name("a.d/README") is None
True
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable, Iterator

from ..errors import InputError, SampleError
from . import scanner
from .tar import BLOCK, DIRECTORY, END_OF_ARCHIVE, FILE, Member, MemberReader, read_members

# webdataset skips these metadata members without a word; so do we.
_META = re.compile(r"__[^/]*__($|/)")

NO_FIELD = "member without a field (no dot in the file name)"
DOT_FIRST = "member whose file name starts with a dot (no key before it)"
DIRECTORY_MEMBER = "directory member"
METADATA_MEMBER = "webdataset metadata member"
# Left out without a warning, by webdataset and by tarkit: they are not samples' data.
QUIET_SKIPS = frozenset({DIRECTORY_MEMBER, METADATA_MEMBER})
_NO_PREFIX = bytes(155)  # the ustar name prefix field, empty


def split_name(name: str) -> tuple[str, str] | None:
    """Split a member path into (key, field); None when the file name has no usable dot.

    A file name without a dot, or starting with one (``.hidden``), has no key.

    >>> split_name("x.JPG")
    ('x', 'JPG')
    >>> split_name("dir/.hidden.txt") is None
    True
    """
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot <= slash:
        return None
    return name[:dot], name[dot + 1 :]


def is_metadata(name: str) -> bool:
    """Whether ``name`` is webdataset metadata: its first part is ``__name__``.

    >>> is_metadata("__meta__/info.txt"), is_metadata("__index__"), is_metadata("__k__.txt")
    (True, True, False)
    """
    return name[:2] == "__" and _META.match(name) is not None


def skip_reason(member: Member) -> str | None:
    """Why readers leave ``member`` out of the samples; None for sample data.

    The reasons in :data:`QUIET_SKIPS` (directories, webdataset metadata) are left out
    without a word; the others (:data:`NO_FIELD`, :data:`DOT_FIRST`, ``"<kind> member"``
    for links, devices and FIFOs) are warned about and counted, or are errors under
    ``--strict``.

    >>> from tarkit.format.tar import DIRECTORY, FILE, SYMLINK
    >>> [skip_reason(Member(name, kind, 0, 0, b"", 0)) for name, kind in
    ...  [("a/x.jpg", FILE), ("a/README", FILE), ("a/", DIRECTORY), ("l.jpg", SYMLINK)]]
    [None, 'member without a field (no dot in the file name)', 'directory member', 'symlink member']
    >>> skip_reason(Member("a/.x.jpg", FILE, 0, 0, b"", 0))
    'member whose file name starts with a dot (no key before it)'
    """
    kind = member[1]
    if kind is not FILE:
        return DIRECTORY_MEMBER if kind is DIRECTORY else f"{kind} member"
    name = member[0]
    if name[:2] == "__" and _META.match(name):
        return METADATA_MEMBER
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot <= slash:
        return DOT_FIRST if dot == slash else NO_FIELD
    return None


class Sample:
    """One sample: its key and its members, in archive order.

    ``fields`` are the field names in the same order as ``members``, as written in the
    archive. A field is looked up by name in one way only, :meth:`field_index` (and
    :meth:`get`, its bytes): ignoring case, as webdataset lowercases field names, so
    that ``jpg`` finds ``x.JPG`` and ``JPG`` finds ``x.jpg`` in every tool and in the
    library alike. A sample the
    compiled scanner read keeps its members in the read buffer until ``members`` is
    first asked for: ``span`` is then ``(buffer, start, stop, offset)``, its raw bytes
    being ``buffer[start:stop]`` (the buffer's first byte at ``offset`` in the stream),
    else None. Writers copy runs of such samples as one slice of the buffer.
    """

    # _folded: each field name in lower case, to its index; made on the first look-up
    # in a long sample (the compiled scanner makes samples without it).
    __slots__ = ("key", "fields", "_members", "source", "span", "_folded")

    def __init__(self, key: str, fields: list[str], members: list[Member], source: str) -> None:
        self.key = key
        self.fields = fields
        self._members: list[Member] | None = members
        self.source = source
        self.span: tuple[bytes, int, int, int] | None = None

    @property
    def members(self) -> list[Member]:
        """The members, in archive order."""
        members = self._members
        if members is None:
            members = self._members = _span_members(self.span)
        return members

    def data(self) -> dict[str, bytes]:
        """The fields and their bytes, as a dict in archive order."""
        return {f: m.data for f, m in zip(self.fields, self.members, strict=True)}

    def field_index(self, *names: str) -> int | None:
        """The index of the field named by the first of ``names`` that the sample has, or
        None: the one look-up of a field by name (``-f``, ``--where``, ``-k``, captions,
        ``tar2tsv`` columns, :meth:`get`).

        Names match ignoring case, as webdataset lowercases field names: ``jpg`` finds
        ``x.JPG``. Samples never hold two fields that differ only in case
        (:func:`group_samples`, ``tarsort`` and ``tarproc`` refuse them), so which field a
        name finds is never in doubt. A long sample folds its names once, so looking up
        each of its fields is linear in their number.

        >>> sample = Sample("k", ["JPG", "seg.png", "cls"], [], "-")
        >>> sample.field_index("png", "jpg"), sample.field_index("Seg.PNG"), sample.field_index("txt")
        (0, 1, None)
        """
        fields = self.fields
        if len(fields) <= _SHORT:
            for name in names:
                if name in fields:  # the usual case, and a scan in C
                    return fields.index(name)
                folded = name.lower()
                for index, field in enumerate(fields):
                    if field.lower() == folded:
                        return index
            return None
        positions = getattr(self, "_folded", None)
        if positions is None:
            positions = {}
            for index, field in enumerate(fields):
                positions.setdefault(field.lower(), index)
            self._folded = positions
        for name in names:
            found = positions.get(name.lower())
            if found is not None:
                return found
        return None

    def get(self, *names: str) -> bytes | None:
        """The bytes of the field the first of ``names`` finds (:meth:`field_index`: case does
        not matter), or None."""
        index = self.field_index(*names)
        return None if index is None else self.data_at(index)

    def data_at(self, index: int) -> bytes:
        """The bytes of field number ``index`` (``members[index].data``), without making
        the member objects of a sample still in its read buffer."""
        if self._members is None and self.span is not None and _compiled is not None:
            data: bytes = _compiled.span_data(self.span, index)
            return data
        return self.members[index].data

    def data_of(self, indices: list[int]) -> list[bytes]:
        """The bytes of the fields numbered ``indices``, in that order (:meth:`data_at` of
        each, in one pass over a sample still in its read buffer)."""
        if self._members is None and self.span is not None and _compiled is not None:
            data: list[bytes] = _compiled.span_data_of(self.span, indices)
            return data
        members = self.members
        return [members[index].data for index in indices]

    def data_all(self) -> list[bytes]:
        """The bytes of every field, in order (as :meth:`data_at` of each, in one call)."""
        if self._members is None and self.span is not None and _compiled is not None:
            data: list[bytes] = _compiled.span_data_all(self.span)
            return data
        return [m.data for m in self.members]

    def extents(self) -> list[tuple[bytes, int, int]]:
        """Where each field's bytes lie, in field order: ``(buffer, start, stop)``, field
        ``i`` being ``buffer[start:stop]``.

        The buffers are those the bytes were read into, nothing is copied: a field's
        size, or its first bytes, cost nothing more to look at.
        """
        if self._members is None and self.span is not None and _compiled is not None:
            extents: list[tuple[bytes, int, int]] = _compiled.span_extents(self.span)
            return extents
        return [(m[4], m[5], m[5] + m[2]) for m in self.members]

    @property
    def raw(self) -> bytes:
        """All the sample's members as they were read."""
        span = self.span
        if span is not None:
            return span[0][span[1] : span[2]]
        return b"".join(m.raw for m in self.members)

    @property
    def size(self) -> int:
        """Bytes the sample's members take in the archive."""
        span = self.span
        if span is not None:
            return span[2] - span[1]
        return sum(len(m.raw) for m in self.members)

    def detached(self) -> Sample:
        """This sample holding only its own bytes, not the read buffer it came from (for
        a stage that keeps many samples a while, such as a shuffle buffer)."""
        if self.span is None:
            return self
        return Sample(self.key, self.fields, self.members, self.source)

    def __reduce__(self) -> tuple[type[Sample], tuple[str, list[str], list[Member], str]]:
        return Sample, (self.key, self.fields, self.members, self.source)

    def __repr__(self) -> str:
        return f"Sample({self.key!r}, {self.fields})"


def _span_members(span: tuple[bytes, int, int, int] | None) -> list[Member]:
    # Only the compiled scanner makes spans, so it is there (even if switched off since).
    assert span is not None and _compiled is not None
    members: list[Member] = _compiled.span_members(span)
    return members


class _Grouping:
    """What :func:`group_samples` knows between members, kept here rather than in
    locals because the compiled scanner reads and updates it: the open sample (its key,
    or None, its fields and members) and every key seen so far."""

    __slots__ = ("key", "fields", "members", "seen", "source")

    def __init__(self, source: str) -> None:
        self.key: str | None = None
        self.fields: list[str] = []
        self.members: list[Member] = []
        self.seen: set[str] = set()
        self.source = source


# Up to this many fields, a look-up scans the names rather than folding them into a dict.
_SHORT = 8

_compiled = scanner.compiled
if _compiled is not None:
    _compiled.init_sample(Sample)


class SkipLog:
    """Counts members that were skipped, by reason, with the first example of each.

    ``notify(reason, source, member)`` is called for the first skip of each reason
    (a command prints a warning there); the library itself never prints.
    """

    def __init__(self, notify: Callable[[str, str, str], None] | None = None) -> None:
        self.counts: dict[str, int] = {}
        self.first: dict[str, tuple[str, str]] = {}
        self.notify = notify

    def add(self, reason: str, source: str, member: str) -> None:
        if reason not in self.counts:
            self.counts[reason] = 0
            self.first[reason] = (source, member)
            if self.notify is not None:
                self.notify(reason, source, member)
        self.counts[reason] += 1

    def merge(self, other: SkipLog) -> None:
        """Add the skips ``other`` counted (a log kept apart, e.g. by another thread)."""
        for reason, count in other.counts.items():
            if reason not in self.counts:
                self.add(reason, *other.first[reason])
                count -= 1
            self.counts[reason] += count

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        """One line, e.g. ``skipped 3 members: 2 without a field (…), 1 symlink``."""
        parts = [
            f"{n} {reason.removeprefix('member ').removesuffix(' member')}"
            for reason, n in self.counts.items()
        ]
        noun = "member" if self.total == 1 else "members"
        return f"skipped {self.total} {noun}: {', '.join(parts)}"


def group_samples(
    members: Iterable[Member],
    source: str = "-",
    *,
    strict: bool = False,
    skips: SkipLog | None = None,
) -> Iterator[Sample]:
    """Group adjacent members with the same key into samples.

    Members that are not sample data are left out as :func:`skip_reason` says:
    directories and webdataset's ``__meta__`` members silently; members without a key
    and a field (no dot in the file name, or a dot first) and non-regular members counted
    in ``skips``, and with ``strict`` they raise
    :class:`~tarkit.errors.SampleError`. A field that appears twice in a sample
    (case-insensitively, as webdataset lowercases fields) and a key that comes back
    after its sample ended raise :class:`SampleError`. A sample is yielded only once
    the member after it (or the clean end of the archive) has been read, so an input
    error never lets a partial sample through.
    """
    state = _Grouping(source)
    items = members.grouped(state) if isinstance(members, MemberReader) else None
    if items is None:
        items = iter(members)
    sample_type = Sample
    while True:
        try:
            member = next(items)
        except StopIteration:
            break
        except InputError as exc:
            # A member whose header was read (so its name is known and its checksum
            # good) but whose data was not, under another key: the sample before it
            # is complete and goes out before the error.
            key = state.key
            if key is not None and exc.member is not None:
                parts = split_name(exc.member)
                if parts is not None and parts[0] != key and parts[0] not in state.seen:
                    _check_fields(key, state.fields, state.members, source)
                    yield Sample(key, state.fields, state.members, source)
            raise
        if type(member) is sample_type:
            yield member  # grouped by the compiled scanner, with the checks below
            continue
        name = member[0]
        slash = name.rfind("/") + 1
        dot = name.find(".", slash)
        # The common case, a regular file with a field and no leading "__", is sample
        # data by skip_reason's rule; only the others pay for the call.
        if dot <= slash or member[1] is not FILE or name[:2] == "__":
            reason = skip_reason(member)
            if reason is not None:
                if reason not in QUIET_SKIPS:
                    skip_member(reason, member, source, strict, skips)
                continue
        member_key = name[:dot]
        key = state.key
        if member_key == key:
            state.fields.append(name[dot + 1 :])
            state.members.append(member)
            continue
        if member_key in state.seen:
            # The input is not sorted: the sample before this member may have members
            # further on too, so it is not known complete and does not go out. The
            # earlier sample of this key has gone out without this member: no stream
            # reader can know a key comes back before it does, so the message says so.
            raise SampleError(
                f"key {member_key!r} comes back after other keys: members of a sample "
                f"must be adjacent, so sample {member_key!r} read earlier lacks this member "
                "(sort the input: tarsort, or tar --sort=name; if these are two samples, "
                "give them keys of their own)",
                source=source,
                offset=member.offset,
                member=name,
            )
        finished = None
        if key is not None:
            _check_fields(key, state.fields, state.members, source)
            finished = Sample(key, state.fields, state.members, source)
        state.seen.add(member_key)
        state.key = member_key
        state.fields = [name[dot + 1 :]]
        state.members = [member]
        if finished is not None:
            yield finished
    if state.key is not None:
        _check_fields(state.key, state.fields, state.members, source)
        yield Sample(state.key, state.fields, state.members, source)


def raw_key(raw: bytes | memoryview, source: str = "sample") -> str:
    """The key of the one sample whose members' raw blocks are ``raw`` (a sample a writer
    encoded, or was given as bytes), as every reader reads it.

    Taken from the first header when it is a plain member of the sample (a regular file
    without an extension header or a name prefix: what tarkit's encoders write), else
    read by the strict reader. Raises :class:`~tarkit.errors.InputError` naming
    ``source`` when the bytes are not the members of one sample.

    >>> from tarkit.format.tar_writer import encode_member
    >>> raw_key(encode_member("a/x.jpg", b"jpeg") + encode_member("a/x.cls", b"1"))
    'a/x'
    """
    header = bytes(raw[:BLOCK])
    if header[156:157] in (b"0", b"\0") and header[345:500] == _NO_PREFIX:
        end = header.find(b"\0", 0, 100)
        name = header[: end if end >= 0 else 100].decode("utf-8", "surrogateescape")
        slash = name.rfind("/") + 1
        dot = name.find(".", slash)
        if dot > slash and name[:2] != "__" and not name.endswith("/"):
            return name[:dot]
    stream = io.BytesIO(bytes(raw) + END_OF_ARCHIVE)
    samples = list(group_samples(read_members(stream, source), source))
    if len(samples) != 1:
        raise InputError(f"the members of {len(samples)} samples, not of one", source=source)
    return samples[0].key


def same_key_error(previous: Sample, sample: Sample) -> SampleError:
    """The error for ``sample`` written right after ``previous``, which has the same key.

    Every reader would merge the two into one sample (tarkit and webdataset then fail on
    a field that appears twice; GNU tar extracts one file over the other).
    """
    first = sample.members[0] if sample.members else None
    origin = "the same input" if previous.source == sample.source else previous.source
    return SampleError(
        f"sample {sample.key!r} follows a sample with the same key (from {origin}), and "
        "readers would merge the two: keys must be unique across inputs that are "
        "concatenated or mixed (give each input's keys a prefix of its own, e.g. with "
        "tarkit map)",
        source=sample.source,
        offset=first.offset if first is not None else None,
        member=first.name if first is not None else None,
    )


def _check_fields(key: str, fields: list[str], group: list[Member], source: str) -> None:
    """Raise if a field appears twice (case-insensitively, as webdataset lowercases)."""
    if len(fields) == 1 or len({f.lower() for f in fields}) == len(fields):
        return
    folded: dict[str, str] = {}
    for field, member in zip(fields, group, strict=True):
        first = folded.get(field.lower())
        if first is None:
            folded[field.lower()] = field
            continue
        if first == field:
            fix = (
                "a sample has one member per field: remove the extra member, or if two "
                "samples share this key, give them keys of their own"
            )
        else:
            fix = (
                f"{first!r} and {field!r} differ only in case, and webdataset lowercases "
                "field names: rename one of them"
            )
        raise SampleError(
            f"field {field!r} appears twice in sample {key!r} ({fix})",
            source=source,
            offset=member.offset,
            member=member.name,
        )


def skip_member(
    reason: str, member: Member, source: str, strict: bool, skips: SkipLog | None
) -> None:
    """Count ``member`` in ``skips`` under ``reason``; with ``strict``, raise
    :class:`SampleError` instead."""
    if strict:
        raise strict_refusal(reason, source, member.name, member.offset)
    if skips is not None:
        skips.add(reason, source, member.name)


def strict_refusal(reason: str, source: str, member: str, offset: int | None = None) -> SampleError:
    """The error of a member skipped for ``reason`` (:func:`skip_reason`) under ``--strict``."""
    return SampleError(
        f"{reason} is not allowed with --strict", source=source, offset=offset, member=member
    )
