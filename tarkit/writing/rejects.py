"""The items ``shard_dataset(on_error="skip")`` left out, and the file that lists them.

The rejects file has one line per item that failed to load, decode or encode, in the
order met: ``index<TAB>source<TAB>cause`` — the item's index in the dataset, where it
came from (a file's path, a plan's line; empty when the dataset does not say) and the
error, tabs and newlines escaped. It is written beside the shards, named after their
pattern (:func:`default_rejects`: ``train-rejects.tsv`` for ``train-%06d.tar``), as shards
complete, so that ``mode="resume"`` knows how many items the complete shards
stand for, and whole at the end.

>>> line = Rejected(7, "photos/cat/1.jpg", "cannot decode\\tthe image").line()
>>> line
'7\\tphotos/cat/1.jpg\\tcannot decode\\\\tthe image'
>>> parse_rejects((line + "\\n").encode())
[Rejected(index=7, source='photos/cat/1.jpg', cause='cannot decode\\\\tthe image')]
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..storage import RECORD_LIMIT, StorageOptions, location, publish, read_bytes
from .patterns import ShardPattern

ON_ERROR = ("fail", "skip")


def default_rejects(pattern: str | ShardPattern) -> str:
    """Where the rejects of the shards ``pattern`` names go by default: beside them, named
    after them, so that two sets in one folder keep two lists.

    >>> default_rejects("shards/train-%06d.tar"), default_rejects("%04d.tar")
    ('shards/train-rejects.tsv', 'rejects.tsv')
    """
    pattern = ShardPattern.of(pattern)
    return location(pattern.text).sibling(f"{pattern.prefix}rejects.tsv")


@dataclass(frozen=True)
class Rejected:
    """An item left out: its dataset index, where it came from, and why."""

    index: int
    source: str
    cause: str

    def line(self) -> str:
        """The item's line in the rejects file (without the newline)."""
        return "\t".join([str(self.index), _escape(self.source), _escape(self.cause)])


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def parse_rejects(data: bytes, where: str = "rejects") -> list[Rejected]:
    """The items listed in a rejects file's bytes; :class:`InputError` for a bad line."""
    found = []
    for number, line in enumerate(data.decode("utf-8", "surrogateescape").splitlines(), 1):
        index, tab, rest = line.partition("\t")
        source, _, cause = rest.partition("\t")
        if not tab or not index.isdigit():
            raise InputError(f"line {number}: not index<TAB>source<TAB>cause", source=where)
        found.append(Rejected(int(index), source, cause))
    return found


def load_rejects(spec: str, storage_options: StorageOptions | None = None) -> list[Rejected]:
    """The items listed in the rejects file at ``spec``; none when there is no file."""
    data = read_bytes(spec, storage_options, limit=RECORD_LIMIT)
    return [] if data is None else parse_rejects(data, spec)


def save_rejects(
    rejected: list[Rejected], spec: str, storage_options: StorageOptions | None = None
) -> None:
    """Publish the rejects file (empty when nothing was left out)."""
    publish(spec, "".join(r.line() + "\n" for r in rejected).encode("utf-8"), storage_options)
