"""What a dataset shares with its DataLoader worker copies: a lock, however they start,
and the memory a forked worker inherits (:func:`keep_inherited_shared`).

Workers started by ``fork`` inherit the lock the dataset made; workers started by
``spawn`` or ``forkserver`` receive it pickled while they are being spawned, which a
lock made for ``fork`` does not allow: the first time a worker is spawned, the lock is
replaced by one made for ``spawn``, which forked workers can inherit too. A plain copy of
the dataset (``pickle.dumps``, ``copy.deepcopy``) goes without a lock.
"""

from __future__ import annotations

import gc
import multiprocessing
import multiprocessing.context
import os
from typing import Any


class SharedLock:
    """A context manager around a multiprocessing lock (a no-op after a plain copy)."""

    def __init__(self) -> None:
        self._context = "fork"
        try:
            self._lock: Any = multiprocessing.get_context("fork").Lock()
        except ValueError:  # pragma: no cover - no fork (Windows)
            self._context, self._lock = "spawn", multiprocessing.get_context("spawn").Lock()

    def __getstate__(self) -> dict[str, Any]:
        if multiprocessing.context.get_spawning_popen() is None:
            return {"_context": self._context, "_lock": None}
        if self._context == "fork":
            # The first spawned worker: from now on, one lock for every kind of child.
            self._context, self._lock = "spawn", multiprocessing.get_context("spawn").Lock()
        return dict(self.__dict__)

    def __enter__(self) -> None:
        if self._lock is not None:
            self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        if self._lock is not None:
            self._lock.release()


_frozen_in: int | None = None  # the process that froze its inherited objects


def keep_inherited_shared() -> None:
    """In a DataLoader worker, keep the memory inherited from the main process shared:
    once per process, move the objects there now out of the collector's reach
    (``gc.freeze``). A full collection writes into every object it visits, so that a
    forked worker would copy each page of the main process's objects (torch's and the
    dataset's: some 40 MB, more than the worker's own work). What the worker makes
    afterwards is collected as usual; what it inherited lives as long as it does anyway.
    """
    global _frozen_in
    if _frozen_in != os.getpid():
        _frozen_in = os.getpid()
        gc.freeze()
