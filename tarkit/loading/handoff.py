"""What a worker of a :class:`~tarkit.loading.ShardLoader` hands the main process.

Each item travels as a :class:`Delivery`: the batch, and where the worker stood after it
(its logical number and :class:`~tarkit.loading.plans.WorkerPosition`), so that the
loader's :meth:`~tarkit.loading.ShardLoader.state_dict` knows exactly what every worker
has delivered — not what it has prefetched.

An error travels as a :class:`WorkerError`: torch would re-raise a worker's exception in
the main process as a new one of the same class built from a long text ("Caught
InputError in DataLoader worker process 0. Original Traceback…"), losing tarkit's
one-line message. The worker hands over the error itself (it pickles whole) and stops;
the loader raises it, with the worker's traceback chained only under ``TARKIT_DEBUG=1``.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterator
from typing import Any, Protocol

from ..errors import TarkitError
from .plans import WorkerPosition
from .transport import Packed, unpacked


class Delivery:
    """One item from a worker and where the worker stood after it; ``pool`` names the
    worker's pool of shared memory when the item came packed in it (transport.py)."""

    __slots__ = ("item", "worker", "epoch", "generation", "position", "pool")

    def __init__(
        self, item: Any, worker: int, epoch: int, generation: int, position: WorkerPosition,
        pool: str | None = None,
    ) -> None:  # fmt: skip
        self.item = item
        self.worker = worker
        self.epoch = epoch
        self.generation = generation
        self.position = position
        self.pool = pool

    def pin_memory(self) -> Delivery:
        """torch's ``pin_memory=True`` pins the item inside (rebuilt first if it came
        packed: pinning copies it, and the worker's slot is free again)."""
        return Delivery(_pinned(unpacked(self.item)), self.worker, self.epoch,
                        self.generation, self.position, self.pool)  # fmt: skip


def _pinned(data: Any) -> Any:
    if hasattr(data, "pin_memory") and not isinstance(data, type):
        return data.pin_memory()
    if isinstance(data, dict):
        return {k: _pinned(v) for k, v in data.items()}
    if isinstance(data, tuple):
        return tuple(_pinned(v) for v in data)
    if isinstance(data, list):
        return [_pinned(v) for v in data]
    return data


class WorkerTraceback(Exception):
    """The traceback of an error in a DataLoader worker (shown under ``TARKIT_DEBUG=1``)."""


class WorkerError:
    """An error raised in a worker, travelling to the main process as an item."""

    def __init__(self, error: TarkitError, trace: str) -> None:
        self.error = error
        self.trace = trace

    def reraise(self) -> None:
        """Raise the worker's error here, in the main process."""
        if os.environ.get("TARKIT_DEBUG"):
            raise self.error from WorkerTraceback("in the DataLoader worker:\n" + self.trace)
        raise self.error from None


class _Run(Protocol):
    worker: int

    def snapshot(self) -> WorkerPosition: ...


def handed_over(
    items: Iterator[Any], run: _Run, epoch: int, generation: int
) -> Iterator[Delivery | WorkerError]:
    """``items`` as deliveries, ending with a :class:`WorkerError` instead of raising a
    tarkit error."""
    try:
        for item in items:
            pool = item.token if type(item) is Packed else None
            yield Delivery(item, run.worker, epoch, generation, run.snapshot(), pool)
    except TarkitError as exc:
        yield WorkerError(exc, traceback.format_exc())
