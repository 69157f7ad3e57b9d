"""The shard table: a dataset's shards in order, compact enough for a million of them.

What a manifest says (either version), held as columns rather than an object per shard:
the names (:class:`~tarkit.format.shard_names.ShardNames`, a pattern when they are one),
the cumulative sample counts (8 bytes a shard, for ``len`` and for finding the shard of a
sample by bisection), and each shard's size and SHA-256 read on demand from the buffers
they came in (a memory-mapped columns file is then read only where asked). At 10⁶ shards
of a numbered pattern that is 8 MB, plus 40 MB of sizes and digests not touched.

>>> table = ShardTable.from_infos(
...     [ShardInfo("s-000000.tar", 3, 10240), ShardInfo("s-000001.tar", 2, 8192)]
... )
>>> len(table), table.samples, table.names.pattern, table.locate(4), table.name(1)
(2, 5, 's-%06d.tar', (1, 1), 's-000001.tar')
"""

from __future__ import annotations

import builtins
from array import array
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate
from operator import sub
from typing import overload

from ..errors import InputError
from ..sizes import MAX_COUNT
from .columns import NO_SHA256, Buffer, columns_bytes
from .manifest import Manifest, ShardInfo
from .shard_names import ShardNames

Extras = dict[int, tuple[list[str] | None, list[int] | None]]  # v1 keys and offsets


class ShardTable:
    """A dataset's shards: ``names``, and per shard its samples, bytes and SHA-256.

    ``sizes`` (a sequence of ints) and ``sha256`` (32 bytes a shard, zeros when not
    known) are kept as given, not copied: views of a columns file work. ``index`` is the
    pattern of the shards' index files (formatted with :meth:`number`), ``location`` where
    the manifest was read. ``extras`` holds the ``keys`` and ``offsets`` of the shards of
    a version 1 manifest that list them. Raises :class:`~tarkit.errors.InputError` (naming
    ``location``) for columns of the wrong length, negative counts, and counts past
    :data:`~tarkit.sizes.MAX_COUNT` (a shard's, or the sum).
    """

    def __init__(
        self,
        names: ShardNames,
        samples: Sequence[int],
        sizes: Sequence[int],
        sha256: Buffer,
        *,
        index: str | None = None,
        location: str | None = None,
        extras: Extras | None = None,
    ) -> None:
        self.names = names
        self.index = index
        self.location = location
        self.extras: Extras = extras or {}
        source = location or "manifest"
        count = len(names)
        if not len(samples) == len(sizes) == count or len(sha256) != 32 * count:
            raise InputError(
                f"columns for {len(samples)}, {len(sizes)} and {len(sha256) / 32:g} shards "
                f"where it names {count}",
                source=source,
            )
        if count and min(samples) < 0:
            raise InputError("a negative sample count", source=source)
        if count and (max(samples) > MAX_COUNT or sum(samples) > MAX_COUNT):
            raise InputError("more than 2**62 samples in a shard, or in all", source=source)
        self._starts = array("q", accumulate(samples, initial=0))
        self._samples_column: array | None = None
        self._sizes = sizes
        self._sha256 = sha256

    @classmethod
    def from_infos(
        cls, infos: Sequence[ShardInfo], *, index: str | None = None, location: str | None = None
    ) -> ShardTable:
        """The table of manifest entries (names as a pattern when they are one)."""
        digests = b"".join(bytes.fromhex(s.sha256) if s.sha256 else NO_SHA256 for s in infos)
        extras = {
            i: (s.keys, s.offsets)
            for i, s in enumerate(infos)
            if s.keys is not None or s.offsets is not None
        }
        return cls(
            ShardNames.of([s.url for s in infos]),
            array("q", [s.samples for s in infos]),
            array("q", [s.bytes for s in infos]),
            digests,
            index=index,
            location=location,
            extras=extras,
        )

    def __len__(self) -> int:
        return len(self.names)

    @property
    def samples(self) -> int:
        """Samples in all the shards."""
        return self._starts[-1]

    @property
    def bytes(self) -> int:
        """Bytes of all the shards, as stored (reads the whole sizes column)."""
        return sum(self._sizes)

    def name(self, shard: int) -> str:
        """The name of shard ``shard`` as the manifest gives it (relative to it, or a path
        or URL)."""
        return self.names[shard]

    def number(self, shard: int) -> int:
        """The number of shard ``shard``: in the names' pattern, else its position."""
        return self.names.number(shard)

    def index_name(self, shard: int) -> str | None:
        """The name of the index file of shard ``shard``, None without an index."""
        return None if self.index is None else self.index % self.names.number(shard)

    @property
    def starts(self) -> array:
        """The position of each shard's first sample, and the total last (S + 1 numbers:
        the cumulative counts). Not a copy: do not change it."""
        return self._starts

    def start(self, shard: int) -> int:
        """The position in the dataset of the first sample of shard ``shard``."""
        return self._starts[shard]

    def shard_samples(self, shard: int) -> int:
        """Samples in shard ``shard``."""
        return self._starts[shard + 1] - self._starts[shard]

    def shard_bytes(self, shard: int) -> int:
        """Bytes of shard ``shard`` as stored."""
        size = self._sizes[shard]
        if size < 0:
            raise InputError(f"a negative size for shard {shard}", source=self._source)
        return size

    def shard_sha256(self, shard: int) -> str | None:
        """The hex SHA-256 of shard ``shard``, None when not known."""
        if not 0 <= shard < len(self):
            raise IndexError(f"shard {shard} of {len(self)}")
        digest = bytes(self._sha256[32 * shard : 32 * shard + 32])
        return None if digest == NO_SHA256 else digest.hex()

    def locate(self, position: int) -> tuple[int, int]:
        """The shard holding sample ``position`` of the dataset, and the sample's position
        in it; IndexError unless 0 ≤ position < :attr:`samples`. O(log shards)."""
        if not 0 <= position < self.samples:
            raise IndexError(f"sample {position} of {self.samples}")
        shard = bisect_right(self._starts, position) - 1
        return shard, position - self._starts[shard]

    def info(self, shard: int) -> ShardInfo:
        """Shard ``shard`` as a manifest entry (version 1's, with its keys and offsets)."""
        keys, offsets = self.extras.get(shard, (None, None))
        return ShardInfo(
            self.name(shard),
            self.shard_samples(shard),
            self.shard_bytes(shard),
            self.shard_sha256(shard),
            keys,
            offsets,
        )

    def __iter__(self) -> Iterator[ShardInfo]:
        return map(self.info, range(len(self)))

    def entries(self) -> ShardEntries:
        """The table as a sequence of manifest entries, each made when asked for (what the
        loader plans from, as from a list of them, without a million objects)."""
        return ShardEntries(self)

    def to_manifest(self) -> Manifest:
        """The table as a version 1 :class:`~tarkit.format.manifest.Manifest` (an object
        per shard: for the callers that take one)."""
        return Manifest(list(self), self.location)

    def samples_column(self) -> array:
        """Samples of each shard, in order (made once, 8 bytes a shard; not a copy: do
        not change it)."""
        if self._samples_column is None:
            self._samples_column = array("q", map(sub, self._starts[1:], self._starts[:-1]))
        return self._samples_column

    def columns(self) -> builtins.bytes:
        """The columns file of manifest version 2 (:mod:`~tarkit.format.columns`)."""
        return columns_bytes(self.samples_column(), self._sizes, self._sha256)

    def __reduce__(self) -> tuple[object, ...]:
        # Whole, into another process: the views become bytes of their own.
        sizes = array("q", self._sizes)
        arguments = (self.names, self.samples_column(), sizes, bytes(self._sha256))
        return _rebuild, (arguments, self.index, self.location, self.extras)

    @property
    def _source(self) -> str:
        return self.location or "manifest"

    def __repr__(self) -> str:
        return f"ShardTable({len(self)} shards, {self.samples} samples, {self.names!r})"


class ShardEntries(Sequence[ShardInfo]):
    """A :class:`ShardTable` as a sequence of :class:`ShardInfo`, made on access."""

    def __init__(self, table: ShardTable) -> None:
        self.table = table
        table.samples_column()  # made in the process that opens: forked workers share it

    def __len__(self) -> int:
        return len(self.table)

    @overload
    def __getitem__(self, shard: int) -> ShardInfo: ...
    @overload
    def __getitem__(self, shard: slice) -> list[ShardInfo]: ...
    def __getitem__(self, shard: int | slice) -> ShardInfo | list[ShardInfo]:
        if isinstance(shard, slice):
            return [self.table.info(i) for i in range(*shard.indices(len(self)))]
        if shard < 0:
            shard += len(self)
        if not 0 <= shard < len(self):
            raise IndexError(f"shard {shard} of {len(self)}")
        return self.table.info(shard)

    def __iter__(self) -> Iterator[ShardInfo]:
        return iter(self.table)


def total_samples(infos: Sequence[ShardInfo]) -> int:
    """Samples in all the shards ``infos`` (a table's total, without a step per shard).

    >>> total_samples([ShardInfo("a.tar", 3, 0), ShardInfo("b.tar", 2, 0)])
    5
    """
    if isinstance(infos, ShardEntries):
        return infos.table.samples
    return sum(info.samples for info in infos)


def _rebuild(
    arguments: tuple[ShardNames, array, array, bytes], index: str | None, location: str | None,
    extras: Extras,
) -> ShardTable:  # fmt: skip
    return ShardTable(*arguments, index=index, location=location, extras=extras)
