"""Reading pieces of shards: the samples one worker reads, as webdataset-style dicts.

A piece is a shard or a range of its samples (:class:`~tarkit.loading.splitting.Piece`).
With a manifest the reader checks every sample against it (count, and keys when listed)
and, given byte offsets, starts mid-shard by seeking (:func:`~tarkit.storage.open_source_at`
for HTTP, else :func:`~tarkit.format.archives.tar_stream`: a seek, or reading past the
bytes). Remote shards go
through the shard cache when one is given. A bad shard raises, or with
``handler="skip"`` is counted (the samples of the piece it could not deliver) and left.
Remote shards reconnect at the byte reached (:mod:`tarkit.storage.retrying`), with the
reader's ``retries`` and ``timeout`` (None: from the environment, read in the worker) and
each reconnection told to ``reconnected``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..errors import InputError, SourceError
from ..format.archives import archive_members
from ..format.compression import compression_for
from ..format.manifest import ShardInfo
from ..format.samples import Sample, group_samples, split_name
from ..seeds import KeySplit
from ..storage import (
    HTTP,
    Reconnection,
    StorageOptions,
    location,
    open_source,
    open_source_at,
    retry_policy,
)
from ..storage.cache import ShardCache
from .skips import UNREADABLE, shard_reason
from .splitting import Piece

# (worker row, reason, samples lost, shard number or None, message)
SkipReport = Callable[[int, str, int, "int | None", str], None]


class PieceReader:
    """Reads pieces of the shards ``urls`` (with their manifest entries ``infos``)."""

    def __init__(
        self,
        urls: Sequence[str],
        infos: Sequence[ShardInfo] | None,
        *,
        handler: str,
        cache: ShardCache | None,
        skip: SkipReport,
        shard_base: int = 0,
        storage_options: StorageOptions | None = None,
        retries: int | None = None,
        timeout: float | None = None,
        reconnected: Callable[[Reconnection], object] | None = None,
        split: KeySplit | None = None,
    ) -> None:
        self.urls = urls
        self.infos = infos
        self.handler = handler
        self.cache = cache
        self.skip = skip
        self.shard_base = shard_base  # where these shards start in the skip counts
        self.storage_options = storage_options
        self.retries = retries
        self.timeout = timeout
        self.reconnected = reconnected
        self.split = split  # the samples a bad shard takes with it count only on its side

    def samples(self, pieces: Sequence[Piece], row: int) -> Iterator[dict[str, Any]]:
        """The samples of ``pieces``, one after another (``row``: the worker, for counts)."""
        for piece in pieces:
            yield from self.piece(piece, row)

    def piece(self, piece: Piece, row: int) -> Iterator[dict[str, Any]]:
        """The samples of one piece as webdataset dicts; bad input raises or is counted."""
        url = self.urls[piece.shard]
        info = self.infos[piece.shard] if self.infos is not None else None
        expected = piece_length(piece, info) if info is not None else None
        keys = info.keys if info is not None and info.keys is not None else None
        offset, skip = 0, piece.start
        if piece.start and info is not None and info.offsets is not None:
            offset, skip = info.offsets[piece.start], 0
        position, delivered = piece.start - skip, 0
        watch = _Watch()
        where = location(url)
        local_path = where.path if where.is_file else None
        try:
            source, positioned = self._open(url, offset, info)
            with source:
                members: Iterator[Any] = archive_members(
                    source.stream, url, offset=offset, positioned=positioned, data_only=True
                )
                if expected is None and self.handler == "skip":
                    # Only then is what a bad shard loses counted from the last member
                    # read: watching each member keeps the compiled scanner from grouping.
                    members = watch.members(members)
                for sample in group_samples(members, url):
                    watch.done = sample.key
                    if info is not None and (
                        position >= info.samples
                        or (keys is not None and sample.key != keys[position])
                    ):
                        raise _mismatch(url, info, position, sample)
                    position += 1
                    if skip:
                        skip -= 1
                        continue
                    yield sample_dict(sample, url, local_path)
                    delivered += 1
                    if delivered == expected and piece.stop is not None:
                        source.close(early=True)
                        return
                if info is not None and position != info.samples:
                    raise InputError(
                        f"the shard has {position} samples, the manifest says {info.samples}",
                        source=url,
                        reason=InputError.MISMATCH,
                    )
        except OSError as exc:
            error = SourceError(f"{url}: read failed: {exc}")
            if self.handler == "raise":
                raise error from exc
            lost = self._lost(piece, info, delivered, watch, error)
            self.skip(row, UNREADABLE, lost, self.shard_base + piece.shard, str(error))
        except (InputError, SourceError) as exc:
            if offset and isinstance(exc, InputError) and exc.offset is not None:
                exc.offset += offset
            if self.handler == "raise":
                raise
            lost = self._lost(piece, info, delivered, watch, exc)
            self.skip(row, shard_reason(exc), lost, self.shard_base + piece.shard, str(exc))

    def _lost(
        self, piece: Piece, info: ShardInfo | None, delivered: int, watch: _Watch, exc: Exception
    ) -> int:
        """How many samples of ``piece`` a bad shard took with it after ``delivered`` were
        read: with a manifest, the rest of the piece, else those started and never
        completed; with a split, only those on its side, when their keys are known."""
        if info is None:
            keys: Sequence[str] = watch.lost(exc)
        elif info.keys is None or self.split is None:
            return piece_length(piece, info) - delivered
        else:
            keys = info.keys[piece.start + delivered : piece.start + piece_length(piece, info)]
        return len(keys) if self.split is None else sum(map(self.split.test(), keys))

    def _open(self, url: str, offset: int, info: ShardInfo | None) -> tuple[Any, bool]:
        """Open a shard, and say whether its stream starts at byte ``offset`` of the tar
        already (a range asked of an HTTP server) rather than at its first byte. Through
        the cache, a download is kept only if it matches ``info``'s size and sha256."""
        where = location(url)
        options = self.storage_options
        policy = (
            retry_policy(self.retries, self.timeout, self.reconnected) if where.remote else None
        )
        if self.cache is not None and where.remote:
            size, sha256 = (info.bytes, info.sha256) if info is not None else (None, None)
            source = self.cache.open(url, options, policy, size, sha256)
        elif offset and where.kind == HTTP and not compression_for(url):
            return open_source_at(url, offset, options, policy), True
        else:
            source = open_source(url, options, policy)
        return source, False


def sample_dict(sample: Sample, url: str, local_path: str | None) -> dict[str, Any]:
    """A sample as the loader gives it: ``__key__``, ``__url__`` (and ``__local_path__``
    for a local shard), then each field, lowercased, with its bytes."""
    result: dict[str, Any] = {"__key__": sample.key, "__url__": url}
    if local_path is not None:
        result["__local_path__"] = local_path
    for name, data in zip(sample.fields, sample.data_all(), strict=True):
        result[name.lower()] = data
    return result


def piece_length(piece: Piece, info: ShardInfo) -> int:
    """The number of samples of ``piece`` (a shard's, per its manifest entry)."""
    return (info.samples if piece.stop is None else piece.stop) - piece.start


def _mismatch(url: str, info: ShardInfo, position: int, sample: Any) -> InputError:
    if position >= info.samples:
        what = f"the shard has more samples than the {info.samples} the manifest says"
    else:
        what = (
            f"sample {position} is {sample.key!r}, the manifest says "
            f"{info.keys[position]!r} (is the manifest out of date?)"  # type: ignore[index]
        )
    return InputError(
        what,
        source=url,
        offset=sample.members[0].offset,
        member=sample.key,
        reason=InputError.MISMATCH,
    )


class _Watch:
    """Remembers the last member read and the last sample taken, to count what is lost."""

    def __init__(self) -> None:
        self.last: Any = None
        self.done: str | None = None

    def members(self, members: Iterator[Any]) -> Iterator[Any]:
        for member in members:
            self.last = member
            yield member

    def lost(self, exc: Exception) -> list[str]:
        """The keys of samples whose members were read (or started) but that were never
        yielded."""
        keys = set()
        for name in (
            self.last.name if self.last is not None else None,
            getattr(exc, "member", None),
        ):
            parts = split_name(name) if name else None
            if parts is not None and parts[0] != self.done:
                keys.add(parts[0])
        return sorted(keys)
