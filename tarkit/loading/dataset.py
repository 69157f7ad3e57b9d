"""A torch ``IterableDataset`` over tar shards that gives every sample exactly once.

:class:`ShardDataset` puts together the loader's parts, one module each (which shards:
:mod:`~tarkit.storage.shards`; epochs, their layouts, a worker's run, reading, shuffle,
transforms, batching, the hand-over: this folder's modules) in one generator chain, built
by :meth:`ShardDataset.__iter__` and drawn sample by sample in docs/architecture.md.
Samples are webdataset-style dicts (``__key__``, ``__url__`` and the fields, lowercased,
as bytes); tarkit's own modules shuffle and batch them (:mod:`~tarkit.loading.shuffle`,
:mod:`~tarkit.loading.batching`); of webdataset only the decoder runs
(:mod:`~tarkit.loading.transforms`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

import torch
from torch.utils.data import IterableDataset, default_collate, get_worker_info

from ..errors import UsageError
from ..format.manifest import Manifest
from ..format.shard_table import total_samples
from ..seeds import KeySplit
from ..storage import Reconnection, RetryPolicy, resolve_shards, retry_policy
from ..storage.cache import ShardCache
from . import splitting
from .batching import batches, padded
from .collate import collate
from .epoch_layout import EpochLayout, Generation, Shuffling, Topology, WorkerPosition
from .epochs import EpochClock
from .handoff import BUNDLE, handed_over
from .key_split import check_resumable, check_split, kept, no_length
from .mixing import MixRun, Mixture, counted, dataset_fingerprint, mixture_of, mixture_settings
from .ranks import rank_and_world
from .reading import PieceReader
from .resume import Derive, check_worker_state, resume_point, rotation
from .runs import INITIAL, WorkerRun
from .shared import keep_inherited_shared
from .shuffle import buffer_size
from .skips import COUNTER_ROWS, WARNED_IDLE, SharedState, SkipCounts
from .state import LoaderState
from .transforms import Transforms
from .transport import worker_collator, worker_pool

Derived = tuple[list[WorkerPosition], "int | None"]


class ShardDataset(IterableDataset):
    """Samples of tar shards, each delivered exactly once per epoch over ranks and workers.

    ``urls``: a brace pattern, a list of them, a manifest (``.json``) or a directory
    (its ``manifest.json``, else its tar files in name order). Local shards that do not
    exist fail here, naming the first. ``manifest`` gives sample counts (for ``len()``,
    ``equal_batches`` and splitting shards into pieces so that every worker has work);
    byte offsets in it let a worker start mid-shard by seeking. Without one, a
    ``manifest.json`` beside the shards is used when it lists exactly those shards;
    ``manifest=False`` reads without any.

    ``shuffle``: shuffle buffer size (``True``: 1,000 samples, webdataset's default; 0 or
    ``False``: no shuffle); any value above 0 also shuffles the shard order.
    Orders are a function of ``(seed, epoch, rank, worker)`` only. ``decode``,
    ``to_tuple`` and ``map`` apply in that order, by the rules of webdataset's stages of
    those names (:mod:`~tarkit.loading.transforms`); ``resize`` (``"224x224:crop"``, as
    ``tarkit shard --resize``) makes ``decode``'s image specs decode JPEGs reduced to that
    size (:mod:`~tarkit.loading.resized_images`);
    ``batch_size`` makes the dataset yield batches made by ``collate`` (torch's
    ``default_collate``) inside the workers; ``drop_last`` drops a partial last batch.

    ``handler="raise"`` stops at the first bad shard or sample with an
    :class:`~tarkit.errors.InputError` or :class:`~tarkit.errors.SourceError` naming
    shard, key and cause; ``"skip"`` skips it, warns once and counts it in
    :attr:`skipped`. ``equal_batches`` (needs a manifest) makes every rank yield the same
    number of samples and batches. ``cache_dir``/``cache_size``: see :mod:`tarkit.storage.cache`.
    ``rank``/``world_size`` override the detected ones. ``split``: a
    :class:`~tarkit.seeds.KeySplit`, the samples it keeps (``tarcat --fraction``'s rule);
    ``len()`` then raises TypeError (:mod:`~tarkit.loading.key_split`).

    Remote shards (and manifests) are read with ``storage_options`` (fsspec's), and a read
    that drops, stalls or trickles reconnects at the byte it reached: at most ``retries``
    reconnections in a row, ``timeout`` seconds to connect, for an HTTP answer's headers
    and per 64 KiB of its body (None: ``TARKIT_RETRIES``/``TARKIT_TIMEOUT`` in the
    workers, else 5 and 30 s; docs/remote.md).
    Reconnections are counted in ``skipped.reconnections``, with one warning per epoch.
    """

    def __init__(
        self,
        urls: str | Sequence[str] | Mapping[str, str | Sequence[str]] | None = None,
        *,
        weights: Mapping[str, float] | None = None,
        epoch_samples: int | None = None,
        shuffle: int | bool = 0,
        seed: int = 0,
        decode: Any = None,
        to_tuple: str | Sequence[str] | None = None,
        map: Callable[[Any], Any] | None = None,  # noqa: A002 - the issue's name
        resize: str | None = None,
        handler: str = "raise",
        manifest: str | Manifest | Literal[False] | None = None,
        equal_batches: bool = False,
        batch_size: int | None = None,
        drop_last: bool = False,
        collate: Callable[[list[Any]], Any] | None = None,
        cache_dir: str | None = None,
        cache_size: int | str | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        retries: int | None = None,
        timeout: float | None = None,
        split: KeySplit | None = None,
    ) -> None:
        super().__init__()
        check_split(split, mixture=isinstance(urls, Mapping), equal_batches=equal_batches)
        if handler not in ("raise", "skip"):
            raise UsageError(f"handler must be 'raise' or 'skip', not {handler!r}")
        if batch_size is not None and batch_size < 1:
            raise UsageError("batch_size must be at least 1")
        retry_policy(retries, timeout, base=RetryPolicy())  # malformed settings fail here
        self.mixture: Mixture | None = None
        if isinstance(urls, Mapping):
            if manifest is not None:
                raise UsageError("a mixture's sources name their own manifests, not manifest=")
            sources = {
                name: resolve_shards(spec, None, storage_options) for name, spec in urls.items()
            }
            self.urls: Sequence[str] = [u for found, _ in sources.values() for u in found]
            self.infos = None
        else:
            if weights is not None or epoch_samples is not None:
                raise UsageError("weights= and epoch_samples= mix several sources: give urls "
                                 "as a dict of them")  # fmt: skip
            self.urls, self.infos = resolve_shards(urls, manifest, storage_options, compact=True)
        if equal_batches and self.infos is None and not isinstance(urls, Mapping):
            raise UsageError(
                "equal_batches needs a manifest with sample counts (tarindex -o manifest.json)"
            )
        self.shuffle = buffer_size(shuffle)
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
        self.split = split
        # Counted once: a table of a million shards is summed (and fingerprinted) once.
        self._samples = total_samples(self.infos) if self.infos is not None else None
        self._fingerprint: str | None = None
        self._state = SharedState(len(self.urls))
        self._clock = EpochClock()
        self._reader = PieceReader(
            self.urls, self.infos, handler=handler, cache=self.cache, skip=self._skip,
            storage_options=storage_options, retries=retries, timeout=timeout,
            reconnected=self._reconnected, split=split,
        )  # fmt: skip
        if isinstance(urls, Mapping):
            readers, base = {}, 0
            for name, (found, infos) in sources.items():
                readers[name] = (found, infos, PieceReader(
                    found, infos, handler=handler, cache=self.cache, skip=self._skip,
                    shard_base=base, storage_options=storage_options, retries=retries,
                    timeout=timeout, reconnected=self._reconnected,
                ))  # fmt: skip
                base += len(found)
            self.mixture = mixture_of(readers, dict(weights) if weights else None, epoch_samples,
                                      seed=seed, shuffle=self.shuffle)  # fmt: skip
            self._samples = sum(s.total for s in self.mixture.sources)
            # Per source, one row per worker: a worker adds only to its own row.
            self._mixed = torch.zeros((COUNTER_ROWS, len(readers)), dtype=torch.int64)
            self._mixed.share_memory_()
        self._transforms = Transforms(decode, to_tuple, map, resize=resize, handler=handler,
                                      skip=self._skip)  # fmt: skip
        # Set by attach() alone (ShardLoader): workers hand over deliveries and errors
        # (handoff.py), in bundles of up to ``bundle`` batches.
        self.in_loader = False
        self.bundle = BUNDLE
        self._current: WorkerRun | MixRun | None = None  # this process's pass
        self._resume: LoaderState | None = None  # a loaded state, for the next pass
        self._worker_resume: LoaderState | None = None  # a worker's own (torchdata)

    # -- what tarkit.loader needs of it -------------------------------------------------

    def attach(self, bundle: int) -> None:
        """Be read by a :class:`~tarkit.loading.loader.ShardLoader`: its workers hand over
        deliveries and errors (:mod:`.handoff`) in bundles of up to ``bundle`` batches, and
        collate into the loader's reused shared memory (:mod:`.transport`)."""
        self.in_loader = True
        self.bundle = bundle

    @property
    def next_epoch(self) -> int:
        """The epoch the next pass reads (:class:`~tarkit.loading.epochs.EpochClock`)."""
        return self._clock.next_epoch

    @property
    def loaded_state(self) -> LoaderState | None:
        """The state :meth:`load_state_dict` loaded (parsed and checked), for the next pass."""
        return self._resume

    # -- epochs, ranks, lengths ------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass read epoch ``epoch`` (the passes after it ``epoch + 1``…).

        Not needed for training: every new pass over the dataset (a DataLoader's
        iteration, persistent workers or not) reads the next epoch by itself
        (:mod:`tarkit.loading.epochs`). Call it in the main process to pin an epoch
        exactly, for reproducibility.
        """
        self._clock.pin(epoch)
        self._state.reset()

    @property
    def epoch(self) -> int:
        """The epoch of the pass under way or last begun; before any, the next one's."""
        return self._clock.epoch

    @property
    def skipped(self) -> SkipCounts:
        """Samples and shards skipped in the current (or last) epoch, summed over workers."""
        return self._state.counts()

    def rank_and_world(self) -> tuple[int, int]:
        """This process's (rank, world size) (:mod:`~tarkit.loading.ranks`)."""
        return rank_and_world(self.rank, self.world_size)

    def __len__(self) -> int:
        """Samples (or batches, with ``batch_size``) this rank yields per epoch.

        Exact when nothing is skipped (and always with ``equal_batches``). Needs a
        manifest: without sample counts it raises TypeError, as ``len()`` of an
        unsized object does. When a DataLoader batches the samples instead of the
        dataset, each worker ends its share with a partial batch of its own, so an epoch
        may have up to ``num_workers - 1`` batches more than ``len(DataLoader)`` says:
        let the dataset batch (``tarkit.loader``) for an exact count (docs/loading.md).
        A mixture that ends with its first source (no ``epoch_samples``) depends on the
        number of workers: see :meth:`length`, which ``tarkit.loader`` uses.
        """
        if self.mixture is not None and self.mixture.epoch_samples is None:
            raise TypeError(
                "len() of a mixture that ends when its first source runs out depends on the "
                "DataLoader's workers: use tarkit.loader(...) (or ShardDataset.length(workers))"
            )
        return self.length(1)

    def length(self, workers: int, epoch: int | None = None) -> int:
        """What this rank yields in ``epoch`` (default: :attr:`epoch`; a mixture's epochs
        differ in length) with ``workers`` DataLoader workers; TypeError without counts,
        or with a split."""
        if self.split is not None:
            raise no_length()
        rank, world = self.rank_and_world()
        if self.mixture is not None:
            topology = self.topology(workers)
            layout = self.mixture.layout(self.epoch if epoch is None else epoch, [])
            lengths = [layout.length(topology, rank, w) for w in range(topology.workers)]
            size = self.batch_size or 1
            return sum(-(-n // size) for n in lengths)
        if self._samples is None:
            raise TypeError("len() of a ShardDataset needs a manifest with sample counts")
        return splitting.rank_length(
            self._samples,
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

    def topology(self, workers: int) -> Topology:
        """How this dataset splits an epoch over its ranks and ``workers`` workers a rank."""
        _, world = self.rank_and_world()
        return Topology(
            world, max(workers, 1), self.batch_size, self.drop_last and bool(self.batch_size),
            self.equal_batches,
        )  # fmt: skip

    def _shuffling(self, epoch: int) -> Shuffling:
        return Shuffling(self.shuffle, min(self.shuffle, INITIAL), self.seed, epoch)

    def derive(self, epoch: int) -> Derive | None:
        """How positions of other ranks are derived in ``epoch`` (None: no sample counts)."""
        mixture, total = self.mixture, self._samples
        if mixture is None and total is None:
            return None

        def derive(history: list[Generation], generation: Generation, rank: int) -> Derived:
            if mixture is not None:
                return mixture.layout(epoch, history).derived(generation, rank)
            assert total is not None
            return EpochLayout(total, history, self._shuffling(epoch)).derived(generation, rank)

        return derive

    def _run(
        self, epoch: int, topology: Topology, rank: int, worker: int, resume: LoaderState | None
    ) -> WorkerRun | MixRun:
        """The run of one (logical) worker over ``epoch``, from ``resume`` if given."""
        layout = None
        position = None
        if resume is not None:
            derive = self.derive(epoch)
            history, position = resume_point(resume, topology, rank, worker, derive)
        else:
            history = []
        if self.mixture is not None:
            return MixRun(self.mixture.layout(epoch, history), topology, rank, worker, position)
        if self._samples is not None:
            layout = EpochLayout(self._samples, history, self._shuffling(epoch))
        return WorkerRun(
            self._reader, self.infos, len(self.urls), shuffling=self._shuffling(epoch),
            topology=topology, rank=rank, worker=worker, layout=layout, position=position,
        )  # fmt: skip

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        if info is not None:
            keep_inherited_shared()
        physical, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        rank, _ = self.rank_and_world()
        topology = self.topology(workers)
        resume = self._worker_resume
        if resume is not None:  # a worker restored on its own state (torchdata)
            self._worker_resume = None
            epoch, new = resume.epoch, False
            self._clock.resume(epoch)
        else:
            seed = info.seed - info.id if info is not None else None
            epoch, new, resumed = self._clock.begin(physical, seed)
            resume = self._resume if resumed else None
        if self.split is not None and resume is not None:
            check_resumable(resume, topology, rank, physical)
        if new:
            self._state.reset()  # skip counts are per epoch
            if self.mixture is not None:
                self._mixed.zero_()
        turn = rotation(resume, topology, rank, self.derive(epoch))
        worker = (physical + turn) % topology.workers
        run = self._run(epoch, topology, rank, worker, resume)
        self._current = run
        if physical == 0:  # one worker decides, so that a warning comes once
            self._warn_if_idle(epoch, topology, rank, resume)
        items: Iterator[Any] = run.samples()
        if self.split is not None:
            items = kept(items, self.split)
        if self._transforms.active:
            items = self._transforms(items, worker)
        if self.equal_batches and run.expected is not None:
            items = padded(
                items, run.expected - run.position.taken, lambda n: self._state.repeat(worker, n),
                f"every sample of rank {rank} worker {worker} was skipped", self.urls[0],
            )  # fmt: skip
        if self.batch_size:
            collating = self._collator(info is not None)
            items = batches(items, self.batch_size, collating, partial=not self.drop_last,
                            origin=self._origin if self._transforms.active else None)  # fmt: skip
        mixed = self._mixed[physical % COUNTER_ROWS] if isinstance(run, MixRun) else None
        items = counted(items, run, mixed)
        if self.in_loader:
            generation = run.layout.generation if run.layout is not None else 0
            pool = worker_pool() if info is not None else None
            items = handed_over(items, run, epoch, generation, self.bundle if info else 1, pool)
        return items

    def _collator(self, in_worker: bool) -> Callable[[list[Any]], Any]:
        """How batches are collated: in a worker of ``tarkit.loader`` into reused shared
        memory (transport.py); else by ``collate=``, or by torch's ``default_collate`` in
        another DataLoader's worker (which expects new shared memory), or by tarkit's."""
        if in_worker and self.in_loader:
            return worker_collator(self.collate)
        return self.collate or (default_collate if in_worker else collate)

    # -- state --------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where this process's pass over the dataset stands, as a dict of JSON types.

        In a DataLoader worker (torchdata's ``StatefulDataLoader`` asks each worker) it is
        that worker's state; in the main process, the state of its own pass. A loader's
        state covering all its workers is :meth:`ShardLoader.state_dict`. See
        :mod:`tarkit.loading.state`.
        """
        run = self._current
        if run is None:
            if self._resume is not None:
                return self._resume.to_json()
            return self.fresh_state(self._clock.next_epoch).to_json()
        history = list(run.layout.history) if run.layout is not None else []
        generation = Generation(run.topology, run.position.items, run.rank, [run.snapshot()])
        state = self.fresh_state(run.shuffling.epoch)
        state.history, state.generation, state.covers = history, generation, [run.worker]
        return state.to_json()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from a state (:meth:`state_dict`, :meth:`ShardLoader.state_dict`): the
        next pass continues it. Call it before iterating.

        Raises :class:`~tarkit.errors.UsageError` naming the setting when the state
        belongs to another dataset, seed or shuffle, or (in a DataLoader worker) to
        another number of workers, ranks or batch size: torchdata restores each worker
        on its own state, so only tarkit's loader can resume on another topology; and
        naming the part of a state that is malformed or out of its bounds (:mod:`.state`).
        """
        parsed = LoaderState.from_json(state, like=self.fresh_state(0))
        parsed.check(self.fresh_state(parsed.epoch))
        info = get_worker_info()
        if info is not None:
            check_worker_state(parsed, self.topology(info.num_workers), info.id)
            self._worker_resume = parsed
            return
        self._resume = parsed
        self._current = None
        self._clock.pin(parsed.epoch, resume=parsed.generation is not None)

    def fresh_state(self, epoch: int) -> LoaderState:
        """The state of a pass of ``epoch`` that has not begun."""
        if self._fingerprint is None:
            self._fingerprint = dataset_fingerprint(self.mixture, self.urls, self.infos)
        return LoaderState(
            self._fingerprint, len(self.urls), self._samples,
            self.seed, self.shuffle, epoch, mixture=mixture_settings(self.mixture),
            split=self.split.to_json() if self.split is not None else None,
        )  # fmt: skip

    @property
    def source_counts(self) -> dict[str, int]:
        """A mixture's samples per source in the current (or last) epoch, all workers of
        this rank together (empty for a dataset that mixes nothing)."""
        if self.mixture is None:
            return {}
        totals = self._mixed.sum(dim=0).tolist()
        return {s.name: int(n) for s, n in zip(self.mixture.sources, totals, strict=True)}

    def _origin(self, item: Any) -> dict[str, Any]:
        """The sample dict an item of the transforms came from."""
        return self._transforms.current

    def _warn_if_idle(
        self, epoch: int, topology: Topology, rank: int, resume: LoaderState | None
    ) -> None:
        """Warn once if a worker of this rank has nothing to read (the same every epoch)."""
        if resume is not None:
            return  # a resumed pass: workers may well have finished their share
        workers = topology.workers
        if all(not self._run(epoch, topology, rank, w, None).empty for w in range(workers)):
            return
        if not self._state.first(WARNED_IDLE):
            return
        world = topology.world
        if self.infos is None:
            what = f"{len(self.urls)} shards"
            hint = " (a manifest with offsets lets tarkit split shards: tarindex --offsets)"
        else:
            what = f"{self._samples} samples"
            hint = (
                f" (in batches of {self.batch_size})"
                if self.batch_size and self.batch_size > 1
                else ""
            )
        warnings.warn(
            f"tarkit: {what} for {world} ranks x {workers} workers: some workers have nothing "
            f"to read{hint}",
            stacklevel=3,
        )

    def _skip(self, row: int, reason: str, samples: int, shard: int | None, message: str) -> None:
        if self._state.add(row, reason, samples, shard, message):
            warnings.warn(
                f"tarkit: skipping bad input ({message}); the counts of skipped samples and "
                "shards are in ShardDataset.skipped",
                stacklevel=2,
            )

    def _reconnected(self, event: Reconnection) -> None:
        if self._state.reconnected():
            warnings.warn(
                f"tarkit: {event}; reconnections are counted in ShardDataset.skipped.reconnections",
                stacklevel=2,
            )
