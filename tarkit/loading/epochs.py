"""Which epoch a pass over a dataset reads: epochs advance by themselves.

A *pass* is one iteration of a DataLoader over the dataset (each of its workers calls
``iter()`` on its copy of the dataset once), or one ``iter()`` in the main process. Every
new pass reads the next epoch, so a plain loop, a ``persistent_workers`` DataLoader and
Lightning's ``Trainer`` (which calls ``set_epoch`` only on samplers) all get a new order
each epoch with no code of their own; ``set_epoch(e)`` makes the next pass read epoch
``e`` exactly (the one after it ``e + 1``…), for reproducibility and resume.

The workers of one pass must agree on its epoch without talking to each other: they
recognise their pass by its *identity* — the DataLoader iterator's base seed, which all
its workers share (``get_worker_info().seed - id``), and how many passes this worker
process has begun (persistent workers keep one seed across passes) — and by who has
begun it: a worker that begins again begins a new pass, even when a DataLoader rebuilt
with a fixed ``generator`` repeats its seeds. The first worker to begin a pass claims the
next epoch for it under a :class:`~tarkit.loading.shared.SharedLock`, in torch shared
memory that every copy of the dataset sees.
"""

from __future__ import annotations

from typing import Any

import torch

from ..seeds import stable_seed
from .shared import SharedLock

_NEXT, _CURRENT, _PASS, _BEGUN, _MARKED, _RESUMED, _CELLS = 0, 1, 2, 3, 4, 5, 6
_NO_PASS = -1
_MASK = (1 << 62) - 1


class EpochClock:
    """The epoch of each pass, shared by a dataset and its worker copies."""

    def __init__(self, first_epoch: int = 0) -> None:
        self.cells = torch.zeros(_CELLS, dtype=torch.int64).share_memory_()
        self.cells[_NEXT] = first_epoch
        self.cells[_CURRENT] = _NO_PASS
        self.lock = SharedLock()
        self._passes = 0  # passes begun by this process's copy (a worker's, or the main one)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_passes": 0}

    def pin(self, epoch: int, *, resume: bool = False) -> None:
        """Make the next pass read ``epoch`` (:meth:`ShardDataset.set_epoch`); with
        ``resume``, that pass is the one a loaded state resumes."""
        with self.lock:
            self.cells[_NEXT] = int(epoch)
            self.cells[_CURRENT] = _NO_PASS
            self.cells[_BEGUN] = 0
            self.cells[_MARKED] = int(resume)
            self.cells[_RESUMED] = _NO_PASS

    def resume(self, epoch: int) -> None:
        """A worker resumes a pass of ``epoch`` on its own state (torchdata's
        StatefulDataLoader restores each worker): the next new pass reads the epoch after."""
        self._passes += 1
        with self.lock:
            self.cells[_NEXT] = max(int(self.cells[_NEXT]), epoch + 1)
            self.cells[_CURRENT] = epoch
            self.cells[_PASS] = _NO_PASS

    @property
    def epoch(self) -> int:
        """The epoch of the pass under way or last begun; before any, the next one's."""
        current = int(self.cells[_CURRENT])
        return current if current != _NO_PASS else int(self.cells[_NEXT])

    @property
    def next_epoch(self) -> int:
        """The epoch the next new pass will read."""
        return int(self.cells[_NEXT])

    def begin(self, worker: int, seed: int | None) -> tuple[int, bool, bool]:
        """Begin a pass in worker ``worker`` (0 in the main process) of a DataLoader
        iterator whose workers share ``seed`` (None in the main process): (the pass's
        epoch, whether this call began a new pass, whether the pass resumes a state)."""
        self._passes += 1
        identity = stable_seed("pass", seed, self._passes) & _MASK
        bit = 1 << (worker % 62)
        with self.lock:
            cells = self.cells
            joining = (
                seed is not None
                and int(cells[_CURRENT]) != _NO_PASS
                and int(cells[_PASS]) == identity
                and not int(cells[_BEGUN]) & bit
            )
            if joining:
                cells[_BEGUN] = int(cells[_BEGUN]) | bit
                return int(cells[_CURRENT]), False, int(cells[_RESUMED]) == identity
            epoch = int(cells[_NEXT])
            cells[_CURRENT] = epoch
            cells[_NEXT] = epoch + 1
            cells[_PASS] = identity
            cells[_BEGUN] = bit
            resumed = bool(int(cells[_MARKED]))
            cells[_MARKED] = 0
            cells[_RESUMED] = identity if resumed else _NO_PASS
            return epoch, True, resumed
