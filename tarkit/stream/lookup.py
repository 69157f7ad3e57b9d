"""Finding one field: the first sample that has it (and the given key), as ``tarfirst`` does.

>>> from tarkit.format.samples import Sample
>>> from tarkit.format.tar import Member
>>> def sample(key, *fields):
...     members = [Member(f"{key}.{f}", "file", 0, 0, b"", 0) for f in fields]
...     return Sample(key, list(fields), members, "-")
>>> found = first_field(iter([sample("a", "cls"), sample("b", "JPG", "cls")]), ["jpg", "png"])
>>> found.sample.key, found.field
('b', 'JPG')
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..errors import NotFound
from ..format.samples import Sample
from .stages import close_iterator


@dataclass(frozen=True)
class Found:
    """The match: the sample, and the name and bytes of its field."""

    sample: Sample
    field: str
    data: bytes


def first_field(
    samples: Iterator[Sample],
    fields: Sequence[str] | None = None,
    key: str | None = None,
) -> Found:
    """The first sample with ``key`` (any key if None) that has one of ``fields``.

    ``fields`` are alternatives, tried in order, matched case-insensitively (webdataset
    lowercases fields: :meth:`~tarkit.format.samples.Sample.field_index`); None takes
    the sample's first field in archive order. Reading
    stops at the match (``samples`` is closed). Raises :class:`NotFound` when no sample
    matches, after reading everything, and whatever reading raises.
    """
    count = 0
    key_seen = False
    try:
        for sample in samples:
            count += 1
            if key is not None and sample.key != key:
                continue
            key_seen = True
            if not fields:
                index = 0 if sample.fields else None
            else:
                index = sample.field_index(*fields)
            if index is not None:
                return Found(sample, sample.fields[index], sample.members[index].data)
    finally:
        close_iterator(samples)
    raise NotFound(_not_found(fields, key, key_seen, count))


def _not_found(fields: Sequence[str] | None, key: str | None, key_seen: bool, count: int) -> str:
    """Say what was looked for and not found.

    >>> _not_found(["jpg", "png"], None, False, 3)
    "no sample has a field 'jpg' or 'png' (3 samples read)"
    >>> _not_found(["jpg"], "k", True, 3)
    "sample 'k' has no field 'jpg'"
    """
    wanted = " or ".join(repr(f) for f in fields or [])
    noun = "sample" if count == 1 else "samples"
    if key is not None and not key_seen:
        return f"no sample has the key {key!r} ({count} {noun} read)"
    if key is not None:
        return f"sample {key!r} has no field {wanted}"
    if fields:
        return f"no sample has a field {wanted} ({count} {noun} read)"
    return "the input has no samples"
