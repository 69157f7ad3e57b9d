"""Batches whose tensors cross from a DataLoader worker to the main process through reused
shared memory.

torch moves a worker's batch by putting each tensor in new shared memory (created,
mapped, faulted in, its descriptor passed over a socket, mapped again in the main
process): about 10 ms for a batch of 64 small images, as much as decoding a third of
them. Here each worker of a :class:`~tarkit.loading.ShardLoader` keeps a
:class:`BatchPool`: a few shared-memory *slots*, made once and reused. A batch's tensors
are collated straight into a free slot (:func:`~tarkit.loading.collate.collate`), and
a *skeleton* — the batch's structure, its bytes, strings and small values, and where
each tensor lies in the slot — is pickled into the slot after them, so that only the
slot's number and where the skeleton lies travel through the pipe (a column of JPEGs of
50 KB is 3 MB a batch; through the pipe, it cost more than torch's own hand-over). A
slot's memory is handed to the main process once, with the first batch that uses it.

Batches without tensors (bytes, strings, numbers) travel in bundles of several
(handoff.py), and a bundle is *shipped* through a slot too (:meth:`BatchPool.ship`): pickled
into it whole, with only its slot's number and length through the pipe. The main process
unpickles it from the slot, which copies every value out, and frees the slot at once.
Through the pipe instead, a megabyte of small bytes objects cost the main process some 2 ms
of reads from the pipe, more than torch's own 0.4 ms an item, and as much again in the
worker.

The main process rebuilds the batch as it was, with tensors that are views of the slot.
A slot is free again only when nothing of its batch is left: when every tensor built on
it has been freed (the tensor's storage holds the numpy array it was made from, and a
weak reference to that array counts it) and the received batch itself is gone. So a
consumer that keeps batches (or one tensor of one) keeps their slots, which are never
overwritten: the worker makes new slots, up to :data:`SLOTS`, and beyond that sends
batches torch's way. Pinning (``pin_memory``) copies the batch into pinned memory and lets
the slot go. A worker never waits for a slot. A worker that dies leaves the main
process's mappings valid until their tensors are gone (the memory is unlinked from the
start: nothing is left in /dev/shm).
"""

from __future__ import annotations

import os
import pickle
import secrets
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .arrivals import PLAIN, Packed, Ref, Shipped, SlotAddress
from .collate import collate, empty

SLOTS = 8  # slots a worker keeps at most
ALIGN = 64  # every tensor in a slot starts at a multiple of this


def _aligned(size: int) -> int:
    return (size + ALIGN - 1) & -ALIGN


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


class _Slot:
    """One shared-memory region of a worker's pool, filled from its start by a batch."""

    def __init__(self, index: int, capacity: int) -> None:
        self.index = index
        self.version = -1
        self.grow(capacity)

    def grow(self, capacity: int) -> None:
        """New memory of ``capacity`` bytes (a new version for the main process)."""
        self.version += 1
        self.storage = torch.UntypedStorage(capacity).share_memory_()
        self.bytes = torch.empty(0, dtype=torch.uint8).set_(self.storage)
        self.array = self.bytes.numpy()
        self.capacity = capacity
        self.pointer = self.storage.data_ptr()
        self.sent = False  # whether the main process has this version's memory
        self.used = 0

    def allocate(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A tensor in the slot if it fits, else a new one (copied in by ``place``)."""
        nbytes = dtype.itemsize
        for size in shape:
            nbytes *= size
        start = self.used
        if start + nbytes > self.capacity:
            return empty(shape, dtype)
        self.used = start + _aligned(nbytes)
        return self.bytes[start : start + nbytes].view(dtype).view(shape)

    def holds(self, tensor: torch.Tensor) -> bool:
        return tensor.untyped_storage().data_ptr() == self.pointer

    def place(self, tensor: torch.Tensor) -> Ref:
        """Where ``tensor`` lies in the slot, copying it in unless it was collated there."""
        nbytes = _nbytes(tensor)
        if self.holds(tensor):
            offset = tensor.data_ptr() - self.pointer
        else:
            offset = self.used
            self.used += _aligned(nbytes)
            if nbytes:
                self.bytes[offset : offset + nbytes].view(tensor.dtype).copy_(tensor.reshape(-1))
        return Ref(offset, nbytes, tensor.dtype, tuple(tensor.shape))


class BatchPool:
    """A worker's shared-memory slots, and the packing of its batches into them."""

    def __init__(self) -> None:
        self.token = f"{os.getpid()}-{secrets.token_hex(8)}"  # arrivals.py reads the pid
        self.flags = torch.zeros(SLOTS, dtype=torch.uint8).share_memory_()
        self.busy = self.flags.numpy()  # 1: in use (set here), 0: free (set by the receiver)
        self.flags_sent = False
        self.slots: list[_Slot] = []
        self.estimate = 0  # bytes the last batch packed: the next one's likely size
        self.tail = 0  # bytes of the last batch's pickled skeleton
        self.shipped = 0  # bytes of the last value shipped

    def collator(self, inner: Callable[[list[Any]], Any] | None) -> Callable[[list[Any]], Any]:
        """A collate function whose batches come out packed (``inner``: the user's, else
        :func:`~tarkit.loading.collate.collate` straight into a slot)."""

        def packed(batch: list[Any]) -> Any:
            if inner is not None:
                return self._pack(inner(batch), None)
            slot = self._acquire(self.estimate) if self.estimate else None
            try:
                out = collate(batch, slot.allocate if slot is not None else empty)
            except BaseException:
                if slot is not None:
                    self.busy[slot.index] = 0
                raise
            return self._pack(out, slot)

        return packed

    def _acquire(self, capacity: int) -> _Slot | None:
        """A free slot of at least ``capacity`` bytes, emptied and marked busy; None when
        every slot is in use (the batch then goes torch's way)."""
        busy = self.busy
        free = [slot for slot in self.slots if not busy[slot.index]]
        spare = next((slot for slot in free if slot.capacity >= capacity), None)
        if spare is None and free:
            spare = free[0]  # grown below
        elif spare is None and len(self.slots) < SLOTS:
            spare = _Slot(len(self.slots), _grown(capacity))
            self.slots.append(spare)
        if spare is None:
            return None
        if spare.capacity < capacity:
            spare.grow(_grown(capacity))
        busy[spare.index] = 1
        spare.used = 0
        return spare

    def _pack(self, out: Any, slot: _Slot | None) -> Any:
        """``out`` as a :class:`Packed` batch in ``slot`` (or in another slot if it does
        not fit), or ``out`` itself when it has no tensor or no slot is free."""
        tensors: list[torch.Tensor] = []
        skeleton = _strip(out, tensors)
        if not tensors:
            if slot is not None:
                self.busy[slot.index] = 0
            return out
        outside = sum(_aligned(_nbytes(t)) for t in tensors if slot is None or not slot.holds(t))
        if slot is None or slot.used + outside + self.tail > slot.capacity:
            if slot is not None:
                self.busy[slot.index] = 0
            slot = self._acquire(sum(_aligned(_nbytes(t)) for t in tensors) + self.tail)
            if slot is None:
                return out  # every slot is held: torch's way
        refs = [slot.place(t) for t in tensors]
        filled = _fill(skeleton, refs)
        address = self._address(slot)
        start = slot.used
        written = _dumped_into(slot.array, start, filled)
        if written is None:  # no room left (or it does not pickle): through the pipe
            data = _pickled(filled)
            self.tail = _aligned(len(data)) if data is not None else 0
            self.estimate = slot.used + self.tail
            return Packed(address, filled)
        self.tail = _aligned(written)
        slot.used += self.tail
        self.estimate = slot.used
        return Packed(address, None, (start, written))

    def ship(self, value: Any) -> Any:
        """``value`` pickled into a free slot, as a :class:`Shipped` (``value`` itself if
        it does not pickle, or if every slot is held). Pickled straight into a slot as large
        as the last one shipped; if it does not fit, pickled first to learn its size."""
        slot = self._acquire(self.shipped) if self.shipped else None
        written = _dumped_into(slot.array, 0, value) if slot is not None else None
        if slot is not None and written is None:
            self.busy[slot.index] = 0
            slot = None
        if slot is None:
            data = _pickled(value)
            if data is None:
                return value
            slot = self._acquire(len(data))
            if slot is None:
                return value
            written = len(data)
            slot.array[:written] = np.frombuffer(data, dtype=np.uint8)
        assert written is not None
        self.shipped = written
        return Shipped(self._address(slot), written)

    def _address(self, slot: _Slot) -> SlotAddress:
        """Where ``slot`` is, with its memory and the pool's flags the first time each
        goes out."""
        storage = None if slot.sent else slot.storage
        slot.sent = True
        flags = None if self.flags_sent else self.flags.untyped_storage()
        self.flags_sent = True
        return SlotAddress(self.token, slot.index, slot.version, storage, flags)


_POOL: list[BatchPool] = []  # this worker process's pool, once it has batched


class _SlotWriter:
    """A file for :class:`pickle.Pickler` that writes into a slot's memory from ``at``:
    the pickler writes a large bytes object straight through, with no copy of its own."""

    __slots__ = ("array", "at")

    def __init__(self, array: np.ndarray, at: int) -> None:
        self.array = array
        self.at = at

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        end = self.at + view.nbytes
        if end > len(self.array):
            raise BufferError("the slot is full")
        self.array[self.at : end] = np.frombuffer(view, dtype=np.uint8)
        self.at = end
        return view.nbytes


def _dumped_into(array: np.ndarray, at: int, value: Any) -> int | None:
    """Pickle ``value`` into ``array`` from byte ``at``: the bytes written, or None if it
    does not fit or does not pickle."""
    writer = _SlotWriter(array, at)
    try:
        pickle.Pickler(writer, pickle.HIGHEST_PROTOCOL).dump(value)
    except Exception:
        return None
    return writer.at - at


def _pickled(value: Any) -> bytes | None:
    """``value`` pickled, or None if pickle refuses it (it then goes torch's way, whose
    pickler may know it)."""
    try:
        return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    except Exception:
        return None


def worker_pool() -> BatchPool:
    """This DataLoader worker's pool, made on first use (a worker process serves one
    loader)."""
    if not _POOL:
        _POOL.append(BatchPool())
    return _POOL[0]


def worker_collator(inner: Callable[[list[Any]], Any] | None) -> Callable[[list[Any]], Any]:
    """The collate function of a DataLoader worker: :meth:`BatchPool.collator` of the
    process's pool."""
    return worker_pool().collator(inner)


def _grown(capacity: int) -> int:
    """Room for ``capacity`` bytes and a little more (the batches of one loader vary)."""
    return max(_aligned(capacity + capacity // 8), 1 << 16)


def _packable(tensor: torch.Tensor) -> bool:
    return (
        tensor.device.type == "cpu"
        and tensor.layout == torch.strided
        and not tensor.requires_grad
        and not tensor.is_quantized
        and not tensor.is_nested
        and not tensor.is_conj()
        and not tensor.is_neg()
        and tensor.is_contiguous()
    )


class _Leaf:
    """A tensor's place in a skeleton while it is being packed."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


def _strip(value: Any, tensors: list[torch.Tensor]) -> Any:
    """``value`` with its packable tensors replaced by placeholders, appended to
    ``tensors``; dicts, lists and tuples are walked (not columns of plain values)."""
    kind = type(value)
    if kind is torch.Tensor:
        if _packable(value):
            tensors.append(value)
            return _Leaf(len(tensors) - 1)
        return value
    if kind is dict:
        return {k: _strip(v, tensors) for k, v in value.items()}
    if kind is list or kind is tuple:
        if not value or type(value[0]) in PLAIN:
            return value  # a column of keys, bytes or numbers: pickled as it is
        items = [_strip(v, tensors) for v in value]
        return items if kind is list else tuple(items)
    return value


def _fill(skeleton: Any, refs: list[Ref]) -> Any:
    kind = type(skeleton)
    if kind is _Leaf:
        return refs[skeleton.index]
    if kind is dict:
        return {k: _fill(v, refs) for k, v in skeleton.items()}
    if kind is list or kind is tuple:
        if not skeleton or type(skeleton[0]) in PLAIN:
            return skeleton
        items = [_fill(v, refs) for v in skeleton]
        return items if kind is list else tuple(items)
    return skeleton
