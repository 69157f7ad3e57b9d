"""``tarkit.loader``: a DataLoader whose workers read shards and hand over whole batches,
and whose state a checkpoint can hold."""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from torch.utils.data import DataLoader

from .arrivals import forget, unpacked
from .dataset import ShardDataset
from .epoch_layout import Generation, WorkerPosition
from .handoff import BUNDLE, Delivery, Interleaved, WorkerError
from .skips import SkipCounts
from .state import LoaderState


class ShardLoader(DataLoader):
    """A DataLoader over a :class:`ShardDataset` that batches in its workers.

    An error in a worker reaches the caller as tarkit's own exception, with its one-line
    message. :meth:`state_dict` and :meth:`load_state_dict` checkpoint where the loader
    stands across all its workers (:mod:`tarkit.loading.state`).
    """

    dataset: ShardDataset

    def __init__(self, dataset: ShardDataset, *args: Any, **kwargs: Any) -> None:
        super().__init__(dataset, *args, **kwargs)
        # Bundles make a worker's first delivery wait for several batches: not under a timeout.
        dataset.attach(1 if self.timeout else BUNDLE)
        self._pass: _Pass | None = None
        self._batches: weakref.ref[_Batches] | None = None  # the pass's iterator, while alive
        self._loaded: LoaderState | None = None  # resumed by the next pass

    def set_epoch(self, epoch: int) -> None:
        """See :meth:`ShardDataset.set_epoch`."""
        self.dataset.set_epoch(epoch)

    @property
    def skipped(self) -> SkipCounts:
        """See :attr:`ShardDataset.skipped`."""
        return self.dataset.skipped

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        workers = max(self.num_workers, 1)
        self._pass = _Pass(self.dataset, workers, self._loaded, self.dataset.next_epoch)
        self._loaded = None
        iterator = super().__iter__()  # persistent workers: the same one each epoch
        pools = _POOLS.get(iterator)
        if pools is None:
            # The worker pools (transport.py) whose batches came through this iterator:
            # forgotten with it, when its workers are gone.
            pools = _POOLS[iterator] = set()
            weakref.finalize(iterator, forget, pools)
        batches = _Batches(Interleaved(iterator, workers), self._pass, self, pools)
        self._batches = weakref.ref(batches)
        return batches

    def __len__(self) -> int:
        """Batches per epoch on this rank (see :meth:`ShardDataset.length`): of the pass
        under way, else of the next pass — what a progress bar or a learning-rate
        schedule asks for before iterating (a mixture's epochs differ in length)."""
        return self.dataset.length(max(self.num_workers, 1), self._epoch_of_len())

    def _epoch_of_len(self) -> int:
        """The epoch ``len()`` describes: the pass under way (its iterator alive and not
        exhausted), else the next pass (a loaded state's, after :meth:`load_state_dict`)."""
        current = self._pass
        alive = self._batches is not None and self._batches() is not None
        if current is not None and alive and not current.finished:
            return current.epoch if current.epoch is not None else current.pending
        return self.dataset.next_epoch

    def state_dict(self) -> dict[str, Any]:
        """Where the loader stands: the epoch, and how far each worker of this rank got.

        Taken in the main process, between batches; a dict of plain JSON types (it
        survives ``json`` and ``torch.save``), a few KB whatever the dataset or buffer.
        """
        if self._loaded is not None:
            return self._loaded.to_json()
        if self._pass is None:
            return self.dataset.fresh_state(self.dataset.next_epoch).to_json()
        return self._pass.state().to_json()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from ``state`` on the next iteration: exactly where it stood with the
        same ranks, workers and batch size, else elastically (every sample not yet
        delivered, once, over the new topology). Call it before iterating.

        Raises :class:`~tarkit.errors.UsageError` naming the setting when the state
        belongs to another dataset, seed or shuffle, and naming the part when it is
        malformed or out of bounds (see :meth:`ShardDataset.load_state_dict`).
        """
        self.dataset.load_state_dict(state)
        self._loaded = self.dataset.loaded_state
        self._pass = None


_POOLS: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


class _Pass:
    """What the main process knows of the pass under way: what each worker delivered."""

    def __init__(
        self, dataset: ShardDataset, workers: int, resume: LoaderState | None, epoch: int
    ) -> None:
        self.dataset = dataset
        self.pending = epoch  # the epoch the pass is to read (a resumed one: its state's)
        self.topology = dataset.topology(workers)
        self.rank = dataset.rank_and_world()[0]
        self.resume = resume
        self.epoch: int | None = None
        self.generation = 0
        self.finished = False
        self.delivered = 0
        self.last: int | None = None
        self.positions = [WorkerPosition() for _ in range(self.topology.workers)]
        self.history: list[Generation] = []

    def received(self, delivery: Delivery) -> None:
        if self.epoch is None:
            self._begin(delivery)
        self.positions[delivery.worker] = delivery.position
        self.delivered += 1
        self.last = delivery.worker

    def _begin(self, delivery: Delivery) -> None:
        """At the first item: which epoch and generation this pass is, and where its
        workers started (a resumed pass starts where its state stood)."""
        self.epoch, self.generation = delivery.epoch, delivery.generation
        resume = self.resume
        if resume is None or resume.epoch != delivery.epoch or resume.generation is None:
            return
        from .resume import last_worker, resume_point

        generation = resume.generation
        if generation.topology != self.topology:
            self.history = [*resume.history, generation]
            return
        self.history = list(resume.history)
        self.delivered = generation.delivered
        derive = self.dataset.derive(resume.epoch)
        for worker in range(self.topology.workers):
            _, position = resume_point(resume, self.topology, self.rank, worker, derive)
            self.positions[worker] = position or WorkerPosition()
        self.last = last_worker(resume, self.rank, derive)

    def ended(self) -> None:
        self.finished = True
        if self.epoch is None:
            self.epoch = self.pending

    def state(self) -> LoaderState:
        if self.epoch is None:  # nothing delivered yet: where the pass starts
            if self.resume is not None:
                return self.resume
            return self.dataset.fresh_state(self.pending)
        state = self.dataset.fresh_state(self.epoch + 1 if self.finished else self.epoch)
        if self.finished:
            return state
        state.history = self.history
        state.generation = Generation(
            self.topology, self.delivered, self.rank, list(self.positions), self.last
        )
        state.covers = list(range(self.topology.workers))
        return state


class _Batches:
    """The DataLoader's iterator: items unwrapped, counted, a worker's error raised."""

    def __init__(
        self, batches: Interleaved, current: _Pass, loader: ShardLoader, pools: set[str]
    ) -> None:
        self._batches = batches
        self._pass = current
        self._loader = loader
        self._pools = pools

    def __iter__(self) -> _Batches:
        return self

    def __next__(self) -> Any:
        try:
            delivery = next(self._batches)
        except StopIteration:
            self._pass.ended()
            raise
        if isinstance(delivery, WorkerError):
            delivery.reraise()
        self._pass.received(delivery)
        if delivery.pool is not None:
            self._pools.add(delivery.pool)
        return unpacked(delivery.item)

    def __len__(self) -> int:
        return len(self._loader)


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
