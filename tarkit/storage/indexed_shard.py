"""One shard opened for random access: its index, its bytes, and the checks between them.

:class:`IndexedShard` loads the shard's index (memory-mapped when local, fetched whole once
when remote), checks it against what the dataset expects of the shard (its sample count,
the manifest's size), and reads samples by their spans: one positioned read or ranged
request each (:mod:`tarkit.storage.ranges`), or a read of the whole shard cached on local
disk (:class:`~tarkit.storage.cache.ShardCache`). The shard's size is checked against the
index on the first sample read, and every sample through
:func:`~tarkit.format.index.sample_from_span` (crc32, strict parse, key): a shard changed
after it was indexed is an :class:`~tarkit.errors.InputError` with reason ``STALE``, never
another sample's bytes.

:class:`OpenShards` keeps the shards a process opened, a bounded number, least recently
used first out, and forgets them in a forked child (whose DataLoader worker opens its own).
"""

from __future__ import annotations

import mmap
import os
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from ..errors import InputError, SourceError
from ..format.index import ShardIndex, sample_from_span
from ..format.samples import Sample, SkipLog, strict_refusal
from .catalog import Catalog, missing_index, refuse_compressed
from .filesystems import StorageOptions
from .locations import location
from .ranges import RangeSource, open_ranges
from .retrying import RetryPolicy
from .sources import MANIFEST_LIMIT, read_bytes

if TYPE_CHECKING:  # the shell tools read without a cache, and start without it
    from .cache import ShardCache

OPEN_SHARDS = 32  # a BlockSampler reads from two windows of 8 shards at a time


class IndexedShard:
    """Shard ``shard`` of ``catalog``, its index loaded (see the module docstring); the
    shard itself is opened on the first sample read (a look at keys reads the index only).

    Raises :class:`~tarkit.errors.UsageError` for a compressed shard or one without an
    index (naming the command that builds it), :class:`~tarkit.errors.InputError` for an
    index that is malformed or disagrees with the manifest (reason ``MISMATCH``) or with
    the count the dataset was opened with (``STALE``).
    """

    def __init__(
        self,
        catalog: Catalog,
        shard: int,
        *,
        cache: ShardCache | None,
        storage_options: StorageOptions | None,
        policy: RetryPolicy | None,
    ) -> None:
        url = catalog.url(shard)
        refuse_compressed(url)
        self.url = url
        where = location(url)
        self.local_path = where.path if where.is_file else None
        self._map: mmap.mmap | None = None
        self._source: RangeSource | None = None
        self.index = self._load_index(catalog.index_url(shard), storage_options)
        try:
            self._check_index(catalog, shard)
        except BaseException:
            self.close()
            raise
        self._opening = (cache if where.remote else None, storage_options, policy,
                         catalog.expected(shard))  # fmt: skip
        self._checked = False  # the shard's size, on the first sample read

    def _open(self) -> RangeSource:
        cache, storage_options, policy, (size, sha256) = self._opening
        if cache is not None:
            # Kept only if whole and as the manifest (else as the index) says.
            expected = self.index.shard_size if size is None else size
            source = cache.fetch(self.url, storage_options, policy, expected, sha256)
            if source is not None:
                return source
        return open_ranges(self.url, storage_options, policy)

    def _load_index(self, index: str, storage_options: StorageOptions | None) -> ShardIndex:
        where = location(index)
        if where.is_file:
            try:
                with open(where.path, "rb") as file:
                    if os.fstat(file.fileno()).st_size:
                        self._map = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
            except FileNotFoundError:
                raise missing_index(self.url, index) from None
            except OSError as exc:
                raise SourceError(f"{index}: cannot read: {exc.strerror}") from None
            return ShardIndex(self._map if self._map is not None else b"", index)
        data = read_bytes(index, storage_options, limit=MANIFEST_LIMIT)
        if data is None:
            raise missing_index(self.url, index)
        return ShardIndex(data, index)

    def _check_index(self, catalog: Catalog, shard: int) -> None:
        samples, (size, _) = catalog.shard_samples(shard), catalog.expected(shard)
        index = self.index
        if catalog.table is not None and (index.samples, index.shard_size) != (samples, size):
            raise InputError(
                f"its index ({index.source}) has {index.samples} samples of a shard of "
                f"{index.shard_size} bytes, the manifest says {samples} and {size} (index the "
                "shards again, with their manifest)",
                source=self.url,
                reason=InputError.MISMATCH,
            )
        if index.samples != samples:
            raise InputError(
                f"its index ({index.source}) has {index.samples} samples, {samples} when the "
                "dataset was opened: it changed meanwhile",
                source=self.url,
                reason=InputError.STALE,
            )

    def sample(
        self, position: int, *, skips: SkipLog | None = None, strict: bool = False
    ) -> Sample:
        """Sample ``position`` of the shard, read and checked (see the module docstring).

        Members the reader skips in its span (after the sample) are counted in ``skips``,
        or with ``strict`` refused as a stream's reader refuses them
        (:class:`~tarkit.errors.SampleError`). Raises :class:`~tarkit.errors.InputError`
        (``STALE``) naming the shard, the position and the key when the shard is not as
        indexed, and :class:`~tarkit.errors.SourceError` when its bytes cannot be read.
        """
        entry = self.index.entry(position)
        source = self._source
        if source is None:
            source = self._source = self._open()
        span = source.read(entry.offset, entry.stop)
        if not self._checked:
            self.index.check_size(source.size(), self.url, entry)
            self._checked = True
        if not strict:
            return sample_from_span(entry, span, self.url, skips=skips)
        skipped = SkipLog()
        sample = sample_from_span(entry, span, self.url, skips=skipped)
        for reason, (shard, member) in skipped.first.items():
            raise strict_refusal(reason, shard, member)
        return sample

    def close(self) -> None:
        if self._source is not None:
            self._source.close()
            self._source = None
        index = getattr(self, "index", None)
        if index is not None:
            index.close()
        if self._map is not None:
            self._map.close()
            self._map = None


class OpenShards:
    """The shards this process has open, at most ``bound``, the least recently used
    closed first; empty again in a process forked from the one that opened them."""

    def __init__(self, opener: Any, bound: int = OPEN_SHARDS) -> None:
        self._opener = opener  # shard number -> IndexedShard
        self._bound = bound
        self._open: OrderedDict[int, IndexedShard] = OrderedDict()
        self._pid = os.getpid()

    def get(self, shard: int) -> IndexedShard:
        if self._pid != os.getpid():  # a forked child: its parent's are not its own
            self._open = OrderedDict()
            self._pid = os.getpid()
        opened = self._open.get(shard)
        if opened is not None:
            self._open.move_to_end(shard)
            return opened
        opened = self._opener(shard)
        self._open[shard] = opened
        while len(self._open) > self._bound:
            self._open.popitem(last=False)[1].close()
        return opened

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()
