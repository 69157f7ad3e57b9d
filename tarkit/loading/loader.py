"""``tarkit.loader``: a DataLoader whose workers read shards and hand over whole batches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch.utils.data import DataLoader

from .dataset import ShardDataset
from .skips import SkipCounts


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
