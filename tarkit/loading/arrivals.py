"""What a worker's pool (:mod:`tarkit.loading.transport`) sends the main process, and how
the main process takes it in.

A :class:`Packed` batch names its slot (a :class:`SlotAddress`) and holds its skeleton (or where in the slot the
skeleton lies pickled), each tensor a :class:`Ref` to its place in the slot; a
:class:`Shipped` value names the slot it was pickled into. Unpickled in the main process
(torch's queue does it, or its pinning thread), a Packed batch becomes :class:`Received`,
whose tensors are views of the slot, held by a lease until every one of them is gone; a
Shipped value becomes the value itself, copied out, and its slot is free at once. The
slot's memory is taken the first time it comes (:func:`_slot_memory`) and dropped with
the worker (:func:`forget`).
"""

from __future__ import annotations

import os
import pickle
import threading
import weakref
from typing import Any, NamedTuple

import numpy as np
import torch

PLAIN = frozenset((bytes, str, int, float, bool, type(None)))  # values pickled as they are


class Ref:
    """Where a tensor of a batch lies in its slot (in a skeleton)."""

    __slots__ = ("offset", "nbytes", "dtype", "shape")

    def __init__(self, offset: int, nbytes: int, dtype: torch.dtype, shape: tuple[int, ...]):
        self.offset = offset
        self.nbytes = nbytes
        self.dtype = dtype
        self.shape = shape

    def __reduce__(self) -> tuple[Any, ...]:
        return Ref, (self.offset, self.nbytes, self.dtype, self.shape)


class SlotAddress(NamedTuple):
    """Where a packed batch or a shipped value lies: its worker pool's token, the slot's
    number and version, and the memory of the slot and of the pool's flags, each the first
    time it goes out (None after: the main process keeps them)."""

    token: str
    number: int  # the slot's
    version: int
    storage: Any
    flags: Any


class Packed:
    """A batch packed into a slot of a worker's pool (what travels through the pipe): its
    skeleton, or where in the slot it lies pickled (``pickled``: offset and length)."""

    __slots__ = ("slot", "skeleton", "pickled")

    def __init__(
        self, slot: SlotAddress, skeleton: Any, pickled: tuple[int, int] | None = None
    ) -> None:
        self.slot = slot
        self.skeleton = skeleton
        self.pickled = pickled

    def __reduce__(self) -> tuple[Any, ...]:
        return _received, (self.slot, self.skeleton, self.pickled)


class _PoolView:
    """The main process's view of a worker's pool: its flags and its slots' memory."""

    def __init__(self, flags: np.ndarray) -> None:
        self.flags = flags
        self.slots: dict[int, tuple[int, np.ndarray]] = {}


_POOLS: dict[str, _PoolView] = {}
_LEASES: set[_Lease] = set()  # leases of batches not yet wholly freed


def _array(storage: Any) -> np.ndarray:
    return torch.empty(0, dtype=torch.uint8).set_(storage).numpy()


class _Lease:
    """A slot held by a received batch: free again when every holder is gone."""

    __slots__ = ("flags", "index", "count", "lock", "watched", "__weakref__")

    def __init__(self, flags: np.ndarray, index: int) -> None:
        self.flags = flags
        self.index = index
        self.count = 1  # the received batch itself
        self.lock = threading.Lock()
        self.watched: list[weakref.ref[np.ndarray]] = []
        _LEASES.add(self)

    def watch(self, array: np.ndarray) -> None:
        """Hold the slot while ``array`` (the memory of one rebuilt tensor) lives."""
        with self.lock:
            self.count += 1
        self.watched.append(weakref.ref(array, self.release))

    def release(self, _: object = None) -> None:
        with self.lock:
            self.count -= 1
            done = self.count == 0
        if done:
            self.flags[self.index] = 0
            _LEASES.discard(self)


class Received:
    """A packed batch in the main process; :meth:`unpack` rebuilds it. Holds its slot
    until it and every tensor rebuilt from it are gone."""

    __slots__ = ("token", "memory", "skeleton", "lease", "__weakref__")

    def __init__(self, token: str, memory: np.ndarray, skeleton: Any, lease: _Lease) -> None:
        self.token = token
        self.memory = memory
        self.skeleton = skeleton
        self.lease = lease

    def unpack(self) -> Any:
        """The batch as the worker collated it."""
        return self._rebuild(self.skeleton)

    def _rebuild(self, value: Any) -> Any:
        kind = type(value)
        if kind is Ref:
            array = self.memory[value.offset : value.offset + value.nbytes]
            self.lease.watch(array)
            return torch.from_numpy(array).view(value.dtype).view(value.shape)
        if kind is dict:
            return {k: self._rebuild(v) for k, v in value.items()}
        if kind is list or kind is tuple:
            if not value or type(value[0]) in PLAIN:
                return value
            items = [self._rebuild(v) for v in value]
            return items if kind is list else tuple(items)
        return value

    def __del__(self) -> None:
        self.lease.release()


def _slot_memory(slot: SlotAddress) -> tuple[_PoolView, np.ndarray]:
    """The main process's view of a worker's pool and of one of its slots. Its memory is
    taken in the order the worker sent it (a slot's first batch brings the slot)."""
    pool = _POOLS.get(slot.token)
    if pool is None:
        if slot.flags is None:
            raise RuntimeError("tarkit: a batch from a worker pool that was never announced")
        _forget_the_dead()
        pool = _POOLS[slot.token] = _PoolView(_array(slot.flags))
    if slot.storage is not None:
        pool.slots[slot.number] = (slot.version, _array(slot.storage))
    known, memory = pool.slots[slot.number]
    if known != slot.version:
        raise RuntimeError("tarkit: a batch in a slot whose memory was never received")
    return pool, memory


def _received(slot: SlotAddress, skeleton: Any, pickled: tuple[int, int] | None = None) -> Received:
    """Unpickling a :class:`Packed` in the main process."""
    pool, memory = _slot_memory(slot)
    lease = _Lease(pool.flags, slot.number)
    if pickled is not None:
        start, nbytes = pickled
        skeleton = pickle.loads(memory.data[start : start + nbytes])
    return Received(slot.token, memory, skeleton, lease)


class Shipped:
    """A value pickled into a slot of a worker's pool (what travels through the pipe);
    unpickled in the main process, it is that value, and the slot is free again."""

    __slots__ = ("slot", "nbytes")

    def __init__(self, slot: SlotAddress, nbytes: int) -> None:
        self.slot = slot
        self.nbytes = nbytes

    def __reduce__(self) -> tuple[Any, ...]:
        return _arrived, (self.slot, self.nbytes)


def _arrived(slot: SlotAddress, nbytes: int) -> Any:
    """Unpickling a :class:`Shipped` in the main process: the value, copied out of its
    slot, which is then free."""
    pool, memory = _slot_memory(slot)
    try:
        return pickle.loads(memory.data[:nbytes])
    finally:
        pool.flags[slot.number] = 0


def unpacked(item: Any) -> Any:
    """``item``, rebuilt if it came packed."""
    return item.unpack() if type(item) is Received else item


def _forget_the_dead() -> None:
    """Drop the views of pools whose worker process is gone. A loader forgets its
    workers' pools when its iterator goes (:func:`forget`), but only those it handed a
    batch from: a worker with nothing to read, or one whose batches were never taken,
    announced its pool all the same. Its token starts with its process id."""
    for token in list(_POOLS):
        try:
            os.kill(int(token.split("-", 1)[0]), 0)
        except ProcessLookupError:
            del _POOLS[token]
        except (ValueError, OSError):  # not a process id, or not ours to signal: kept
            pass


def forget(tokens: set[str]) -> None:
    """Drop the main process's views of these pools (their workers are gone); batches
    still alive keep their memory."""
    for token in tokens:
        _POOLS.pop(token, None)
    tokens.clear()
