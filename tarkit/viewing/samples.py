"""Which samples a view shows, and how it reaches them: by position through the shards'
indexes, or in order through the shards themselves.

:class:`ViewedSamples` is the one interface of both (:mod:`.indexed` and
:mod:`.streamed`); :func:`open_samples` picks one for a source: random access when every
shard can be read by its index (uncompressed, its index there), the shards read in
order otherwise, with the reason kept in :attr:`~ViewedSamples.note`. Positions run over
the shards in order, the samples of each in archive order, in both: the order ``tarcat``
reads them in.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import NamedTuple, Protocol

from ..errors import UsageError
from ..format.samples import Sample, SkipLog
from ..storage import expand_inputs, location, resolve_shards
from ..storage.locations import STDIO


class Found(NamedTuple):
    """What a search for a key found: its ``position``, or None with the position to
    go on from (``resume``) when the search stopped at its deadline, or with ``resume``
    None too when no sample has it."""

    position: int | None
    resume: int | None


class ViewedSamples(Protocol):
    """The samples of a source, by position (see the module docstring). Not safe for
    threads: a caller holds a lock around every call and every iteration."""

    indexed: bool  # random access through the indexes
    note: str | None  # why the shards are read in order, when they are

    @property
    def shards(self) -> int:
        """How many shards the source has."""

    @property
    def samples(self) -> int | None:
        """How many samples it has; None while that is not known (the shards read in
        order without a manifest, before the last one ends)."""

    def places(self) -> list[str]:
        """The shards' locations, as far as their places may differ: the first alone
        when a pattern names them all (for what lies beside them: ``classes.json``)."""

    def read(self, start: int) -> Generator[tuple[int, Sample], None, None]:
        """(position, sample) from position ``start`` on, in order, to the end. Raises
        :class:`~tarkit.errors.TarkitError` for a shard that does not read."""

    def find(self, key: str, start: int, deadline: float) -> Found:
        """The first position at or after ``start`` whose key is ``key``, looked for
        until ``time.monotonic()`` passes ``deadline``."""

    def close(self) -> None:
        """Close what is open (reads open it again)."""


def open_samples(
    sources: Sequence[str], *, strict: bool = False, skips: SkipLog | None = None
) -> ViewedSamples:
    """The samples of ``sources`` (shards, brace patterns, a manifest, a directory; local
    or remote), by their indexes when they all have one, else read in order.

    Raises :class:`~tarkit.errors.UsageError` for stdin (a view reads its shards more
    than once) and for no source, and as :func:`~tarkit.storage.resolve_shards` does for
    shards that cannot be found.
    """
    if not sources or any(location(s).kind == STDIO for s in expand_inputs(list(sources))):
        raise UsageError(
            "tarkit view reads its shards more than once, so not from stdin: name the "
            "shards, their manifest or their directory"
        )
    from .indexed import IndexedSamples, indexed_samples

    source: str | list[str] = sources[0] if len(sources) == 1 else list(sources)
    indexed: IndexedSamples | str = indexed_samples(source)
    if not isinstance(indexed, str):
        return indexed
    from .streamed import StreamedSamples

    urls, infos = resolve_shards(source, None)
    return StreamedSamples(urls, infos, note=indexed, strict=strict, skips=skips)
