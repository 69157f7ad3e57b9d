"""The field spec of ``-f``: columns of alternatives, parsed, and a sample's fields
selected by it.

Spaces or commas separate columns, ``;`` the alternatives of a column, of which the first
the sample has is taken; names match ignoring case
(:meth:`~tarkit.format.samples.Sample.field_index`, the one look-up of a field by name).

>>> from tarkit.format.tar import Member
>>> sample = Sample("k", ["JPG", "cls", "txt"], [Member(f"k.{f}", "file", 0, 0, b"", 0)
...     for f in ("JPG", "cls", "txt")], "-")
>>> select_fields(sample, parse_field_spec("png;jpg cls")).fields
['JPG', 'cls']
"""

from __future__ import annotations

import re

from .samples import Sample


def parse_field_spec(spec: str) -> list[list[str]]:
    """Parse a field selection: spaces or commas separate columns, ``;`` alternatives.

    >>> parse_field_spec("jpg;png cls")
    [['jpg', 'png'], ['cls']]
    """
    columns = [c for c in re.split(r"[\s,]+", spec.strip()) if c]
    return [[a for a in column.split(";") if a] for column in columns]


def select_fields(sample: Sample, spec: list[list[str]]) -> Sample:
    """Keep, for each column of ``spec``, the first alternative the sample has.

    Fields keep their archive order. Names match case-insensitively, as webdataset
    lowercases fields (``-f jpg`` keeps ``x.JPG``).
    """
    found = {sample.field_index(*alternatives) for alternatives in spec}
    indices = sorted(index for index in found if index is not None)
    return Sample(
        sample.key,
        [sample.fields[i] for i in indices],
        [sample.members[i] for i in indices],
        sample.source,
    )
