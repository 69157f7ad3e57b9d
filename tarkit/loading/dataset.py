"""A torch ``IterableDataset`` over tar shards that gives every sample exactly once.

:class:`ShardDataset` reads shards with tarkit's strict reader (one worker reads its
shards, or pieces of them, one after another) and hands the samples, as webdataset-style
dicts (``__key__``, ``__url__`` and the fields, lowercased, as bytes), to webdataset's
own pipeline stages: ``wds.shuffle``, ``wds.decode`` (its image specs and basic
handlers), ``wds.to_tuple``, ``wds.map`` and ``wds.batched``. Which shards a worker
reads is :mod:`tarkit.loading.splitting`; remote shards can go through a :mod:`tarkit.storage.cache`.

This is the only module of tarkit that imports torch.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import random
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, BinaryIO

import torch
import webdataset as wds
from torch.utils.data import DataLoader, IterableDataset, default_collate, get_worker_info

from ..errors import CompressionError, InputError, SourceError, TruncatedError, UsageError
from ..format.compression import compression_for, open_decompressed, sniff
from ..format.manifest import Manifest, ShardInfo
from ..format.manifest import load as load_manifest
from ..format.samples import group_samples, split_name
from ..format.tar import read_members
from ..storage.cache import ShardCache, is_remote
from ..storage.sources import expand_inputs, open_source, open_source_at
from . import splitting

# Why samples or shards were skipped under handler="skip". The first four are about
# shards (the rest of the shard, or of the worker's piece of it, is skipped).
UNREADABLE = "unreadable shard"
TRUNCATED = "truncated shard"
CORRUPT = "corrupt shard"
MISMATCH = "shard does not match the manifest"
UNDECODABLE = "undecodable field"
MISSING = "missing field"
MAP_FAILED = "map failed"
REASONS = (UNREADABLE, TRUNCATED, CORRUPT, MISMATCH, UNDECODABLE, MISSING, MAP_FAILED)
_SHARD_REASONS = 4

_TAR_SUFFIXES = (
    ".tar",
    ".tar.gz",
    ".tgz",
    ".tar.bz2",
    ".tbz2",
    ".tar.xz",
    ".txz",
    ".tar.zst",
    ".tzst",
)
_ROWS = 64  # counter rows in shared memory: one per DataLoader worker (modulo)
_EXAMPLE = 400  # bytes kept of the first message of each reason
# Cells of the shared numbers tensor before the counter rows.
_EPOCH, _WARNED_IDLE, _WARNED_TWICE, _WARNED_SKIP, _HEAD = 0, 1, 2, 3, 4
_COLUMNS = len(REASONS) + 1  # samples skipped per reason, then samples repeated


@dataclass
class SkipCounts:
    """What ``handler="skip"`` skipped since the last ``set_epoch`` (all workers summed).

    ``samples`` and ``shards`` count by reason (a shard counts once however many
    workers read pieces of it); ``repeated`` counts samples repeated to keep
    ``equal_batches``; ``examples`` holds the first message of each reason.
    """

    samples: dict[str, int] = field(default_factory=dict)
    shards: dict[str, int] = field(default_factory=dict)
    repeated: int = 0
    examples: dict[str, str] = field(default_factory=dict)

    @property
    def total_samples(self) -> int:
        return sum(self.samples.values())

    @property
    def total_shards(self) -> int:
        return sum(self.shards.values())

    def __bool__(self) -> bool:
        return bool(self.samples or self.shards or self.repeated)

    def __str__(self) -> str:
        if not self:
            return "nothing skipped"
        parts = [f"{n} {reason}" for reason, n in self.samples.items()]
        text = f"skipped {self.total_samples} samples ({', '.join(parts) or 'none'})"
        text += f" and {self.total_shards} shards"
        if self.repeated:
            text += f"; repeated {self.repeated} samples to keep batches equal"
        return text


class _SharedState:
    """Epoch and skip counts in shared memory, seen by the dataset and its worker copies.

    Torch shared-memory tensors: forked workers share them, spawned workers get them
    through torch's pickler, and a plain ``pickle`` copies their values. A lock makes
    "first" mean first among forked workers (two workers skipping at once would both
    warn, or mix their examples); spawned workers and copies go without it.
    """

    def __init__(self, shards: int) -> None:
        self.numbers = torch.zeros(_HEAD + _ROWS * _COLUMNS, dtype=torch.int64).share_memory_()
        self.shard_reasons = torch.zeros(max(shards, 1), dtype=torch.int8).share_memory_()
        self.examples = torch.zeros((len(REASONS), _EXAMPLE), dtype=torch.uint8).share_memory_()
        self.lock = _fork_lock()

    def __getstate__(self) -> dict[str, Any]:
        # Only a forked child can share the lock (inheriting it); pickling it fails.
        return {**self.__dict__, "lock": None}

    def _locked(self) -> contextlib.AbstractContextManager[Any]:
        return self.lock if self.lock is not None else contextlib.nullcontext()

    def reset(self) -> None:
        self.numbers[_WARNED_SKIP:] = 0
        self.shard_reasons.zero_()
        self.examples.zero_()

    def add(self, row: int, reason: str, samples: int, shard: int | None, message: str) -> bool:
        """Count a skip; True when it is the first of this dataset (time to warn)."""
        index = REASONS.index(reason)
        with self._locked():
            self.numbers[_HEAD + (row % _ROWS) * _COLUMNS + index] += samples
            if shard is not None and int(self.shard_reasons[shard]) == 0:
                self.shard_reasons[shard] = index + 1
            if int(self.examples[index, 0]) == 0:
                data = message.encode("utf-8", "replace")[: _EXAMPLE - 1] or b"?"
                self.examples[index, : len(data)] = torch.frombuffer(
                    bytearray(data), dtype=torch.uint8
                )
            return self._first(_WARNED_SKIP)

    def repeat(self, row: int, samples: int) -> None:
        with self._locked():
            self.numbers[_HEAD + (row % _ROWS) * _COLUMNS + len(REASONS)] += samples

    def first(self, cell: int) -> bool:
        """Set a flag; True for the one process that set it."""
        with self._locked():
            return self._first(cell)

    def _first(self, cell: int) -> bool:
        if int(self.numbers[cell]):
            return False
        self.numbers[cell] = 1
        return True

    def counts(self) -> SkipCounts:
        rows = self.numbers[_HEAD:].view(_ROWS, _COLUMNS).sum(dim=0).tolist()
        flags = torch.bincount(self.shard_reasons.long(), minlength=len(REASONS) + 1).tolist()
        result = SkipCounts(repeated=rows[len(REASONS)])
        for index, reason in enumerate(REASONS):
            if rows[index]:
                result.samples[reason] = rows[index]
            if index < _SHARD_REASONS and flags[index + 1]:
                result.shards[reason] = flags[index + 1]
            raw = bytes(self.examples[index].tolist()).rstrip(b"\0")
            if raw:
                result.examples[reason] = raw.decode("utf-8", "replace")
        return result


def _fork_lock() -> Any:
    """A lock for forked children (no resource tracker process), or None without fork."""
    try:
        return multiprocessing.get_context("fork").Lock()
    except ValueError:  # pragma: no cover - Windows
        return None


def distributed_rank() -> tuple[int, int]:
    """(rank, world size): from ``torch.distributed`` when initialised, else RANK/WORLD_SIZE."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise UsageError("RANK and WORLD_SIZE must be integers") from None


class ShardDataset(IterableDataset):
    """Samples of tar shards, each delivered exactly once per epoch over ranks and workers.

    ``urls``: a brace pattern, a list of them, a manifest (``.json``) or a directory
    (its ``manifest.json``, else its tar files in name order). ``manifest`` gives sample
    counts (for ``len()``, ``equal_batches`` and splitting shards into pieces so that
    every worker has work); byte offsets in it let a worker start mid-shard by seeking.

    ``shuffle``: shuffle buffer size; any value above 0 also shuffles the shard order.
    Orders are a function of ``(seed, epoch, rank, worker)`` only. ``decode``,
    ``to_tuple`` and ``map`` are passed to webdataset's stages of those names, in that
    order; ``batch_size`` makes the dataset yield batches made by ``collate`` (torch's
    ``default_collate``) inside the workers; ``drop_last`` drops a partial last batch.

    ``handler="raise"`` stops at the first bad shard or sample with an
    :class:`~tarkit.errors.InputError` or :class:`~tarkit.errors.SourceError` naming
    shard, key and cause; ``"skip"`` skips it, warns once and counts it in
    :attr:`skipped`. ``equal_batches`` (needs a manifest) makes every rank yield the same
    number of samples and batches. ``cache_dir``/``cache_size``: see :mod:`tarkit.storage.cache`.
    ``rank``/``world_size`` override the detected ones.
    """

    def __init__(
        self,
        urls: str | Sequence[str] | None = None,
        *,
        shuffle: int = 0,
        seed: int = 0,
        decode: Any = None,
        to_tuple: str | Sequence[str] | None = None,
        map: Callable[[Any], Any] | None = None,  # noqa: A002 - the issue's name
        handler: str = "raise",
        manifest: str | Manifest | None = None,
        equal_batches: bool = False,
        batch_size: int | None = None,
        drop_last: bool = False,
        collate: Callable[[list[Any]], Any] | None = None,
        cache_dir: str | None = None,
        cache_size: int | str | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__()
        if handler not in ("raise", "skip"):
            raise UsageError(f"handler must be 'raise' or 'skip', not {handler!r}")
        if batch_size is not None and batch_size < 1:
            raise UsageError("batch_size must be at least 1")
        if shuffle < 0:
            raise UsageError("shuffle must be a buffer size of 0 or more")
        self.urls, self.infos = _resolve_shards(urls, manifest)
        if equal_batches and self.infos is None:
            raise UsageError(
                "equal_batches needs a manifest with sample counts (tarindex -o manifest.json)"
            )
        self.shuffle = int(shuffle)
        self.seed = seed
        self.decode = decode
        self.to_tuple = to_tuple
        self.map = map
        self.handler = handler
        self.equal_batches = equal_batches
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.collate = collate
        self.cache = ShardCache(cache_dir, cache_size) if cache_dir is not None else None
        self.rank = rank
        self.world_size = world_size
        self._state = _SharedState(len(self.urls))

    # -- epochs, ranks, lengths ------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch``: it decides the orders; skip counts start again from 0.

        Call it in the main process before iterating (workers, persistent or not,
        read it when their epoch starts).
        """
        self._state.numbers[_EPOCH] = int(epoch)
        self._state.reset()

    @property
    def epoch(self) -> int:
        return int(self._state.numbers[_EPOCH])

    @property
    def skipped(self) -> SkipCounts:
        """Samples and shards skipped since the last :meth:`set_epoch`, summed over workers."""
        return self._state.counts()

    def rank_and_world(self) -> tuple[int, int]:
        """This process's (rank, world size)."""
        detected = distributed_rank()
        rank = detected[0] if self.rank is None else self.rank
        world = detected[1] if self.world_size is None else self.world_size
        if world < 1 or not 0 <= rank < world:
            raise UsageError(f"rank {rank} is not in a world of size {world}")
        return rank, world

    def __len__(self) -> int:
        """Samples (or batches, with ``batch_size``) this rank yields per epoch.

        Exact when nothing is skipped (and always with ``equal_batches``). Needs a
        manifest: without sample counts it raises TypeError, as ``len()`` of an
        unsized object does. ``len()`` of a DataLoader over the dataset is exact too
        when either the dataset or the DataLoader batches, not both (docs/loading.md).
        """
        if self.infos is None:
            raise TypeError("len() of a ShardDataset needs a manifest with sample counts")
        rank, world = self.rank_and_world()
        return splitting.rank_length(
            sum(info.samples for info in self.infos),
            rank=rank,
            world=world,
            equal=self.equal_batches,
            batch_size=self.batch_size,
            drop_last=self.drop_last,
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        # A spawned worker cannot see the parent's process group: take the rank along.
        if self.rank is None or self.world_size is None:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                state["rank"], state["world_size"] = dist.get_rank(), dist.get_world_size()
        return state

    # -- iteration ------------------------------------------------------------------

    def pieces(
        self, worker: int = 0, workers: int = 1, *, loader_batch_size: int | None = None
    ) -> list[splitting.Piece]:
        """The pieces of shards one worker of this rank reads in the current epoch.

        With a manifest, the cuts between workers fall on multiples of ``batch_size``
        or, when the dataset does not batch, of ``loader_batch_size`` (the batch size of
        a DataLoader that batches each worker's samples).
        """
        rank, world = self.rank_and_world()
        if self.infos is not None:
            return splitting.epoch_pieces(
                [info.samples for info in self.infos],
                rank=rank,
                world=world,
                worker=worker,
                workers=workers,
                shuffle=self.shuffle > 0,
                seed=self.seed,
                epoch=self.epoch,
                equal=self.equal_batches,
                batch_size=self.batch_size or loader_batch_size,
                drop_last=self.drop_last and bool(self.batch_size),
            )
        order = splitting.shard_order(
            len(self.urls), shuffle=self.shuffle > 0, seed=self.seed, epoch=self.epoch
        )
        return splitting.whole_shards(order, rank=rank, world=world, worker=worker, workers=workers)

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        rank, _ = self.rank_and_world()
        return self._epoch(worker, workers, rank)

    def _epoch(self, worker: int, workers: int, rank: int) -> Iterator[Any]:
        """One worker's items of the current epoch; its shards are chosen on the first next().

        Only then can a DataLoader that batches be seen (its batch size is in the first
        request torch sends a worker): cutting the workers' shares on its batches makes
        ``len(DataLoader)`` exact.
        """
        loader_batch_size = _loader_batch_size(sys._getframe(1))
        if worker == 0:  # one worker decides, so that a warning comes once
            if loader_batch_size and self.batch_size:
                self._warn_batched_twice(loader_batch_size)
            self._warn_if_idle(workers, loader_batch_size)
        epoch = self.epoch
        pieces = self.pieces(worker, workers, loader_batch_size=loader_batch_size)
        items: Iterator[Any] = self._samples(pieces, worker)
        if self.shuffle:
            rng = random.Random(splitting.stable_seed("samples", self.seed, epoch, rank, worker))
            items = wds.shuffle(self.shuffle, initial=min(self.shuffle, 100), rng=rng)(items)
        if self.decode is not None or self.to_tuple is not None or self.map is not None:
            items = self._transformed(items, worker)
        if self.equal_batches and self.infos is not None:
            infos = self.infos
            expected = sum(_piece_length(piece, infos[piece.shard]) for piece in pieces)
            items = self._padded(items, expected, worker, rank)
        if self.batch_size:
            collate = self.collate or default_collate
            items = wds.batched(self.batch_size, collation_fn=collate, partial=not self.drop_last)(
                items
            )
        yield from items

    def _warn_batched_twice(self, loader_batch_size: int) -> None:
        if self._state.first(_WARNED_TWICE):
            warnings.warn(
                f"tarkit: ShardDataset(batch_size={self.batch_size}) yields batches, and the "
                f"DataLoader batches them again in lists of {loader_batch_size} (a DataLoader's "
                "batch_size is 1 unless given): give the DataLoader batch_size=None",
                stacklevel=3,
            )

    def _warn_if_idle(self, workers: int, loader_batch_size: int | None) -> None:
        """Warn once if a worker of this rank has nothing to read (the same every epoch)."""
        shares = [
            self.pieces(w, workers, loader_batch_size=loader_batch_size) for w in range(workers)
        ]
        if all(shares) or not self._state.first(_WARNED_IDLE):
            return
        _, world = self.rank_and_world()
        if self.infos is None:
            what = f"{len(self.urls)} shards"
            hint = " (a manifest with offsets lets tarkit split shards: tarindex --offsets)"
        else:
            what = f"{sum(i.samples for i in self.infos)} samples"
            batch_size = self.batch_size or loader_batch_size
            hint = f" (in batches of {batch_size})" if batch_size and batch_size > 1 else ""
        warnings.warn(
            f"tarkit: {what} for {world} ranks x {workers} workers: some workers have nothing "
            f"to read{hint}",
            stacklevel=3,
        )

    def _samples(self, pieces: list[splitting.Piece], row: int) -> Iterator[dict[str, Any]]:
        for piece in pieces:
            yield from self._piece_samples(piece, row)

    def _piece_samples(self, piece: splitting.Piece, row: int) -> Iterator[dict[str, Any]]:
        """The samples of one piece as webdataset dicts; bad input raises or is counted."""
        url = self.urls[piece.shard]
        info = self.infos[piece.shard] if self.infos is not None else None
        expected = _piece_length(piece, info) if info is not None else None
        keys = info.keys if info is not None and info.keys is not None else None
        offset, skip = 0, piece.start
        if piece.start and info is not None and info.offsets is not None:
            offset, skip = info.offsets[piece.start], 0
        position, delivered = piece.start - skip, 0
        watch = _Watch()
        local_path = None if "://" in url or url.startswith("pipe:") else url.removeprefix("file:")
        try:
            source, stream = self._open(url, offset)
            with source:
                for sample in group_samples(watch.members(read_members(stream, url)), url):
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
                    result: dict[str, Any] = {"__key__": sample.key, "__url__": url}
                    if local_path is not None:
                        result["__local_path__"] = local_path
                    for name, member in zip(sample.fields, sample.members, strict=True):
                        result[name.lower()] = member.data
                    yield result
                    delivered += 1
                    if delivered == expected and piece.stop is not None:
                        source.close(early=True)
                        return
                if info is not None and position != info.samples:
                    raise InputError(
                        f"the shard has {position} samples, the manifest says {info.samples}",
                        source=url,
                    )
        except OSError as exc:
            error = SourceError(f"{url}: read failed: {exc}")
            if self.handler == "raise":
                raise error from exc
            lost = expected - delivered if expected is not None else watch.lost(error)
            self._skip(row, UNREADABLE, lost, piece.shard, str(error))
        except (InputError, SourceError) as exc:
            if offset and isinstance(exc, InputError) and exc.offset is not None:
                exc.offset += offset
            if self.handler == "raise":
                raise
            lost = expected - delivered if expected is not None else watch.lost(exc)
            self._skip(row, _shard_reason(exc), lost, piece.shard, str(exc))

    def _open(self, url: str, offset: int) -> tuple[Any, BinaryIO]:
        """Open a shard; the returned tar stream starts at byte ``offset`` of the tar."""
        if self.cache is not None and is_remote(url):
            source = self.cache.open(url)
        elif offset and url.startswith(("http://", "https://")) and not compression_for(url):
            source = open_source_at(url, offset)
            return source, source.stream
        else:
            source = open_source(url)
        try:
            return source, self._tar_stream(source.stream, url, offset)
        except BaseException as exc:
            source.__exit__(type(exc), exc, exc.__traceback__)  # close early, or abandon
            raise

    def _tar_stream(self, stream: Any, url: str, offset: int) -> BinaryIO:
        """The tar bytes of ``stream`` from byte ``offset`` (seeking when it can)."""
        if offset and getattr(stream, "seekable", lambda: False)():
            head = stream.read(6)
            if sniff(io.BytesIO(head))[0] is None:
                stream.seek(offset)
                return stream
            stream.seek(0)
        tar = open_decompressed(stream, url)
        left = offset
        read = getattr(tar, "read1", None) or tar.read
        while left:
            chunk = read(min(left, 1 << 20))
            if not chunk:
                raise TruncatedError(f"the shard ends before byte {offset}", source=url)
            left -= len(chunk)
        return tar

    def _transformed(self, samples: Iterator[dict[str, Any]], row: int) -> Iterator[Any]:
        """Run webdataset's decode, to_tuple and map stages; name or count failures."""
        stages: list[tuple[str, Any]] = []
        if self.decode is not None:
            handlers = self.decode if isinstance(self.decode, (list, tuple)) else [self.decode]
            stages.append((UNDECODABLE, wds.decode(*handlers)))
        if self.to_tuple is not None:
            columns = [self.to_tuple] if isinstance(self.to_tuple, str) else self.to_tuple
            stages.append((MISSING, wds.to_tuple(*columns)))
        if self.map is not None:
            stages.append((MAP_FAILED, wds.map(self.map)))
        while True:
            feed = _Feed(samples, stages[0][0])
            items: Iterator[Any] = iter(feed)
            for index, (_, stage) in enumerate(stages):
                items = stage(items)
                if index + 1 < len(stages):
                    items = feed.mark(items, stages[index + 1][0])
            try:
                yield from items
                return
            except Exception as exc:  # a stage failed on feed.current: rebuild the chain
                if exc is feed.upstream:
                    raise  # the shard reader's own error, already named
                sample = feed.current or {}
                error = _sample_error(feed.stage, sample, exc)
                if self.handler == "raise":
                    raise error from exc
                self._skip(row, feed.stage, 1, None, str(error))

    def _padded(self, items: Iterator[Any], expected: int, row: int, rank: int) -> Iterator[Any]:
        """Exactly ``expected`` items: skipped samples are made up by repeating the last one."""
        count = 0
        last: Any = None
        for item in items:
            count += 1
            last = item
            yield item
        if count < expected:
            if count == 0:
                raise InputError(
                    f"every sample of rank {rank} worker {row} was skipped: "
                    "equal_batches cannot make them up",
                    source=self.urls[0],
                )
            self._state.repeat(row, expected - count)
            for _ in range(expected - count):
                yield last

    def _skip(self, row: int, reason: str, samples: int, shard: int | None, message: str) -> None:
        if self._state.add(row, reason, samples, shard, message):
            warnings.warn(
                f"tarkit: skipping bad input ({message}); the counts of skipped samples and "
                "shards are in ShardDataset.skipped",
                stacklevel=2,
            )


def _loader_batch_size(caller: FrameType | None) -> int | None:
    """The batch size of the DataLoader whose worker (or main process) asks ``caller``.

    None unless ``caller`` is torch's fetcher for iterable datasets batching for a
    DataLoader (``batch_size`` not None): it asks for a batch as a list of
    ``batch_size`` indices, the only place torch tells a dataset the batch size.
    """
    try:
        from torch.utils.data._utils.fetch import _IterableDatasetFetcher
    except ImportError:  # pragma: no cover - a torch without it batches some other way
        return None
    if caller is None or caller.f_code is not _IterableDatasetFetcher.fetch.__code__:
        return None
    fetcher = caller.f_locals.get("self")
    request = caller.f_locals.get("possibly_batched_index")
    if not getattr(fetcher, "auto_collation", False) or not isinstance(request, list):
        return None
    return len(request) or None


def _piece_length(piece: splitting.Piece, info: ShardInfo) -> int:
    return (info.samples if piece.stop is None else piece.stop) - piece.start


def _mismatch(url: str, info: ShardInfo, position: int, sample: Any) -> InputError:
    if position >= info.samples:
        what = f"the shard has more samples than the {info.samples} the manifest says"
    else:
        what = (
            f"sample {position} is {sample.key!r}, the manifest says "
            f"{info.keys[position]!r} (is the manifest out of date?)"  # type: ignore[index]
        )
    return InputError(what, source=url, offset=sample.members[0].offset, member=sample.key)


def _shard_reason(exc: Exception) -> str:
    if isinstance(exc, SourceError):
        return UNREADABLE
    if isinstance(exc, TruncatedError) or (
        isinstance(exc, CompressionError) and "cut short" in exc.what
    ):
        return TRUNCATED
    if isinstance(exc, InputError) and "manifest" in exc.what:
        return MISMATCH
    return CORRUPT


def _sample_error(stage: str, sample: dict[str, Any], exc: BaseException) -> InputError:
    key = sample.get("__key__", "?")
    url = sample.get("__url__", "-")
    cause = exc.__cause__ if isinstance(exc, wds.autodecode.DecodingError) else exc
    reason = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
    if stage == UNDECODABLE:
        what = f"cannot decode field {getattr(exc, 'k', '?')!r} of sample {key!r}: {reason}"
    elif stage == MISSING:
        what = f"sample {key!r} lacks a field for to_tuple: {reason}"
    else:
        what = f"map failed on sample {key!r}: {reason}"
    return InputError(what, source=url, member=key)


class _Watch:
    """Remembers the last member read and the last sample taken, to count what is lost."""

    def __init__(self) -> None:
        self.last: Any = None
        self.done: str | None = None

    def members(self, members: Iterator[Any]) -> Iterator[Any]:
        for member in members:
            self.last = member
            yield member

    def lost(self, exc: Exception) -> int:
        """Samples whose members were read (or started) but that were never yielded."""
        keys = set()
        for name in (
            self.last.name if self.last is not None else None,
            getattr(exc, "member", None),
        ):
            parts = split_name(name) if name else None
            if parts is not None and parts[0] != self.done:
                keys.add(parts[0])
        return len(keys)


class _Feed:
    """Feeds samples to a chain of stages and knows which sample and stage is current."""

    def __init__(self, samples: Iterator[dict[str, Any]], first: str) -> None:
        self.samples = samples
        self.first = first
        self.stage = first
        self.current: dict[str, Any] | None = None
        self.upstream: BaseException | None = None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while True:
            try:
                sample = next(self.samples)
            except StopIteration:
                return
            except BaseException as exc:
                self.upstream = exc
                raise
            self.current = sample
            self.stage = self.first
            yield sample

    def mark(self, items: Iterator[Any], stage: str) -> Iterator[Any]:
        for item in items:
            self.stage = stage
            yield item


def _resolve_shards(
    urls: str | Sequence[str] | None, manifest: str | Manifest | None
) -> tuple[list[str], list[ShardInfo] | None]:
    """Shard URLs and, with a manifest, their entries."""
    if isinstance(urls, str) and manifest is None:
        if urls.endswith(".json"):
            urls, manifest = None, urls
        elif os.path.isdir(urls):
            beside = os.path.join(urls, "manifest.json")
            if os.path.exists(beside):
                urls, manifest = None, beside
            else:
                names = sorted(n for n in os.listdir(urls) if n.endswith(_TAR_SUFFIXES))
                if not names:
                    raise UsageError(f"{urls}: no tar shards in this directory")
                urls = [os.path.join(urls, n) for n in names]
    if isinstance(manifest, str):
        manifest = load_manifest(manifest)
    expanded = None
    if urls is not None:
        expanded = expand_inputs([urls] if isinstance(urls, str) else list(urls))
    if manifest is None:
        if not expanded or expanded == ["-"]:
            raise UsageError("ShardDataset needs shard URLs or a manifest")
        return expanded, None
    entries = dict(zip((_normal(u) for u in manifest.urls()), manifest.shards, strict=True))
    for entry in manifest.shards:
        for listed in (entry.keys, entry.offsets):
            if listed is not None and len(listed) != entry.samples:
                raise InputError(
                    f"shard {entry.url} lists {len(listed)} keys or offsets for "
                    f"{entry.samples} samples",
                    source=manifest.location or "manifest",
                )
    if expanded is None:
        if not manifest.shards:
            raise UsageError(f"{manifest.location}: the manifest lists no shards")
        return manifest.urls(), list(manifest.shards)
    infos: list[ShardInfo] = []
    for url in expanded:
        info = entries.get(_normal(url))
        if info is None:
            raise UsageError(f"{url}: not in the manifest {manifest.location or ''}".rstrip())
        infos.append(info)
    return expanded, infos


def _normal(url: str) -> str:
    if "://" in url or url.startswith("pipe:"):
        return url
    return os.path.abspath(url[5:] if url.startswith("file:") else url)


class ShardLoader(DataLoader):
    """A DataLoader over a :class:`ShardDataset` that batches in its workers."""

    dataset: ShardDataset

    def set_epoch(self, epoch: int) -> None:
        """See :meth:`ShardDataset.set_epoch`."""
        self.dataset.set_epoch(epoch)

    @property
    def skipped(self) -> SkipCounts:
        """See :attr:`ShardDataset.skipped`."""
        return self.dataset.skipped


_LOADER_OPTIONS = (
    "persistent_workers",
    "pin_memory",
    "prefetch_factor",
    "timeout",
    "multiprocessing_context",
    "worker_init_fn",
    "pin_memory_device",
)


def loader(
    urls: str | Sequence[str] | None, batch_size: int, num_workers: int = 0, **options: Any
) -> ShardLoader:
    """A DataLoader of batches of ``batch_size`` from shards, batched inside the workers.

    ``options`` go to :class:`ShardDataset`, except DataLoader's own
    (``persistent_workers``, ``pin_memory``, ``prefetch_factor``, ``timeout``,
    ``multiprocessing_context``, ``worker_init_fn``). Passing single samples from
    workers through shared memory costs more than reading them; batches do not.
    """
    loader_options = {k: options.pop(k) for k in _LOADER_OPTIONS if k in options}
    dataset = ShardDataset(urls, batch_size=batch_size, **options)
    return ShardLoader(dataset, batch_size=None, num_workers=num_workers, **loader_options)
