"""``tarkit.loader``: a DataLoader whose workers read shards and hand over whole batches."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from torch.utils.data import DataLoader

from .dataset import ShardDataset
from .skips import SkipCounts
from .worker_errors import WorkerError


class ShardLoader(DataLoader):
    """A DataLoader over a :class:`ShardDataset` that batches in its workers.

    An error in a worker reaches the caller as tarkit's own exception, with its one-line
    message (:mod:`~tarkit.loading.worker_errors`).
    """

    dataset: ShardDataset

    def __init__(self, dataset: ShardDataset, *args: Any, **kwargs: Any) -> None:
        super().__init__(dataset, *args, **kwargs)
        dataset.errors_as_items = True

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        return _Batches(super().__iter__())

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


class _Batches:
    """The DataLoader's iterator, raising a worker's error as the worker raised it."""

    def __init__(self, batches: Iterator[Any]) -> None:
        self._batches = batches

    def __iter__(self) -> _Batches:
        return self

    def __next__(self) -> Any:
        batch = next(self._batches)
        if isinstance(batch, WorkerError):
            batch.reraise()
        return batch

    def __len__(self) -> int:
        return len(self._batches)  # type: ignore[arg-type]
