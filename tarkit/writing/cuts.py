"""Where a numbered shard ends: :class:`ShardCut`, the one count and size rule of
:class:`~tarkit.writing.shard_writer.ShardWriter` (its module docstring states the rule),
used alike by the writer on one machine and by the cluster's write tasks."""

from __future__ import annotations

from collections.abc import Callable

from ..format.compression import size_budget


class ShardCut:
    """Where shards end: :class:`ShardWriter`'s rule (see the module docstring of :mod:`tarkit.writing.shard_writer`), over the
    tar bytes of samples, one sample after another.

    :meth:`takes` says whether a sample goes into the current shard or begins the next
    (then call :meth:`begin`); :meth:`add` counts it in. ``measure()`` gives the bytes
    on disk so far, after flushing the compressor, or None when it cannot be flushed:
    without compression, or with bzip2 and xz, that never changes a cut, so the cuts
    follow from the sizes alone; with gzip and zstd (in
    :data:`~tarkit.format.compression.MEASURED`) they depend on the compressed bytes.

    >>> cut = ShardCut(maxcount=10, maxsize=5000, compression=None)
    >>> ends = []
    >>> for size in [1536, 1536, 1536, 512]:
    ...     if not cut.takes(size, lambda: None):
    ...         ends.append(cut.count)
    ...         cut.begin()
    ...     cut.add(size)
    >>> ends, cut.count
    ([2], 2)
    """

    def __init__(self, maxcount: int, maxsize: int, compression: str | None) -> None:
        self.maxcount = maxcount
        self.maxsize = maxsize
        self.compression = compression
        self.begin()

    def begin(self) -> None:
        """Start a new shard."""
        self.count = 0
        # Tar bytes written since the compressor was last measured, and how many may
        # follow them.
        self.unmeasured = 0
        self.budget = size_budget(self.compression, self.maxsize)

    def takes(self, size: int, measure: Callable[[], int | None]) -> bool:
        """Whether a sample of ``size`` tar bytes goes into the current shard (a first
        sample always does)."""
        if self.count == 0:
            return True
        if self.count >= self.maxcount:
            return False
        if self.unmeasured + size + 1024 <= self.budget:
            return True
        if self.unmeasured == 0:
            return False
        measured = measure()
        if measured is None:
            return False
        self.unmeasured = 0
        self.budget = size_budget(self.compression, self.maxsize - measured)
        return size + 1024 <= self.budget

    def add(self, size: int) -> None:
        """Count a sample of ``size`` tar bytes into the current shard."""
        self.count += 1
        self.unmeasured += size
