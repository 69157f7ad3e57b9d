"""What a worker of a :class:`~tarkit.loading.ShardLoader` hands the main process.

Each item travels as a :class:`Delivery`: the batch, and where the worker stood after it
(its logical number and :class:`~tarkit.loading.epoch_layout.WorkerPosition`), so that the
loader's :meth:`~tarkit.loading.ShardLoader.state_dict` knows exactly what every worker
has delivered — not what it has prefetched.

Deliveries travel in a :class:`Bundle`: a worker sends batches without tensors (bytes,
strings, numbers: what crosses by pickling) up to :data:`BUNDLE` at a time, since torch's
hand-over costs about 0.4 ms per item whatever its size — as much as reading 64 small
samples — and ships such a bundle through its shared memory (transport.py
:meth:`~tarkit.loading.transport.BatchPool.ship`). Batches with tensors (in shared memory too)
go one per bundle. The
main process puts the deliveries back in the order torch gives single items
(:class:`Interleaved`: round robin over the workers, each dropping out after its last), so
the batches, their order and the loader's state are those of one batch per item.

An error travels as a :class:`WorkerError`: torch would re-raise a worker's exception in
the main process as a new one of the same class built from a long text ("Caught
InputError in DataLoader worker process 0. Original Traceback…"), losing tarkit's
one-line message. The worker hands over a tarkit error itself, in tarkit's one carrier
(:class:`~tarkit.errors.CarriedError`: it pickles whole), and stops; the loader raises
it, with the worker's traceback chained only under ``TARKIT_DEBUG=1``. Any other error
travels in torch's own carrier, and is raised as torch raises it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any, NoReturn, Protocol

import numpy as np
import torch
from torch._utils import ExceptionWrapper
from torch.utils.data import get_worker_info

from ..errors import CarriedError, TarkitError
from .arrivals import Packed, Shipped, unpacked
from .epoch_layout import WorkerPosition
from .transport import BatchPool

BUNDLE = 32  # batches without tensors a worker hands over at most in one item
BUNDLE_BYTES = 4 << 20  # and about as many bytes as this, once shipped (transport.py)


class Delivery:
    """One item from a worker and where the worker stood after it; ``pool`` names the
    worker's pool of shared memory, which the item may have come through (transport.py)."""

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


class WorkerError:
    """An error raised in a worker, handed over as a delivery: a tarkit error in tarkit's
    carrier, any other in torch's (``ExceptionWrapper``, so that it is raised as torch
    raises it)."""

    __slots__ = ("carried",)

    def __init__(self, carried: CarriedError | ExceptionWrapper) -> None:
        self.carried = carried

    def reraise(self) -> NoReturn:
        """Raise the worker's error here, in the main process."""
        carried = self.carried
        if isinstance(carried, ExceptionWrapper):
            carried.reraise()
        assert isinstance(carried, CarriedError)
        raise carried.raised(where="the DataLoader worker")


class Bundle:
    """Consecutive deliveries of one worker (``worker``, its logical number) that travel as
    one item; ``last`` marks the worker's final bundle of the pass (it may be empty)."""

    __slots__ = ("deliveries", "worker", "last")

    def __init__(
        self, deliveries: list[Delivery | WorkerError], worker: int, last: bool = False
    ) -> None:
        self.deliveries = deliveries
        self.worker = worker
        self.last = last

    def pin_memory(self) -> Bundle:
        """torch's ``pin_memory=True``: each delivery pinned (see :meth:`Delivery.pin_memory`)."""
        pinned = [d.pin_memory() if type(d) is Delivery else d for d in self.deliveries]
        return Bundle(pinned, self.worker, self.last)


class _Run(Protocol):
    worker: int

    def snapshot(self) -> WorkerPosition: ...


def handed_over(
    items: Iterator[Any],
    run: _Run,
    epoch: int,
    generation: int,
    most: int = BUNDLE,
    pool: BatchPool | None = None,
) -> Iterator[Bundle]:
    """``items`` as deliveries in bundles: batches without tensors 1, 2, 4 … up to
    ``most`` at a time (the first is not held back), shipped through ``pool`` (a worker's)
    when there is one, and then fewer if a bundle came to more than :data:`BUNDLE_BYTES`;
    any other alone. The last bundle says so and ends with a :class:`WorkerError` instead
    of raising a tarkit error."""
    worker = run.worker
    token = pool.token if pool is not None else None
    ship = pool.ship if pool is not None else _unshipped
    bundle: list[Delivery | WorkerError] = []
    size = 1
    try:
        for item in items:
            delivery = Delivery(item, worker, epoch, generation, run.snapshot(), token)
            if type(item) is not Packed and _pickled_whole(item):
                bundle.append(delivery)
                if len(bundle) >= size:
                    out = ship(Bundle(bundle, worker))
                    if type(out) is Shipped and out.nbytes > BUNDLE_BYTES:
                        most = max(1, size * BUNDLE_BYTES // out.nbytes)
                    yield out
                    bundle, size = [], min(2 * size, most)
                continue
            if bundle:
                yield ship(Bundle(bundle, worker))
                bundle = []
            yield Bundle([delivery], worker)
    except TarkitError as exc:
        bundle.append(WorkerError(CarriedError(exc)))
    except Exception:  # not tarkit's: raised as torch would, after the batches before it
        info = get_worker_info()
        where = f"in DataLoader worker process {info.id}" if info else "in the main process"
        bundle.append(WorkerError(ExceptionWrapper(where=where)))
    yield ship(Bundle(bundle, worker, last=True))


def _unshipped(bundle: Bundle) -> Bundle:
    return bundle


def _pickled_whole(batch: Any) -> bool:
    """Whether ``batch`` (a dict, tuple or list of columns, or one value) holds no tensor
    or array: each column looked at, and a list column by its first value."""
    if isinstance(batch, dict):
        columns: Any = batch.values()
    else:
        columns = batch if isinstance(batch, (list, tuple)) else (batch,)
    for column in columns:
        first = column[0] if isinstance(column, (list, tuple)) and column else column
        if isinstance(first, (torch.Tensor, np.ndarray)):
            return False
    return True


class Interleaved:
    """The deliveries of the workers' bundles, in the order torch gives items sent one at
    a time: round robin over the ``workers`` in the order they are first heard from (as
    torch starts them), each dropping out at its turn once its last bundle is used up."""

    def __init__(self, bundles: Iterator[Bundle], workers: int) -> None:
        self._bundles = bundles
        self._workers = workers  # how many are to be heard from
        self._ring: list[int] = []  # workers in turn
        self._queues: dict[int, deque[Delivery | WorkerError]] = {}
        self._done: set[int] = set()  # workers whose last bundle came
        self._turn = 0

    def __iter__(self) -> Interleaved:
        return self

    def __next__(self) -> Delivery | WorkerError:
        ring = self._ring
        while True:
            if self._turn >= len(ring):
                if len(self._queues) < self._workers:  # the next in turn is not heard of yet
                    self._pull()
                    continue
                if not ring:  # every worker has ended: so does torch's iterator
                    next(self._bundles, None)  # (which stops non-persistent workers)
                    raise StopIteration
                self._turn = 0
            worker = ring[self._turn]
            queue = self._queues[worker]
            if queue:
                self._turn += 1
                return queue.popleft()
            if worker in self._done:
                del ring[self._turn]  # torch skips a worker that has ended
                continue
            self._pull()

    def _pull(self) -> None:
        """Take torch's next item into its worker's queue."""
        try:
            bundle = next(self._bundles)
        except StopIteration:  # no more items: every worker has ended
            self._workers = len(self._queues)
            self._done.update(self._queues)
            return
        queue = self._queues.get(bundle.worker)
        if queue is None:
            queue = self._queues[bundle.worker] = deque()
            self._ring.append(bundle.worker)
        queue.extend(bundle.deliveries)
        if bundle.last:
            self._done.add(bundle.worker)
