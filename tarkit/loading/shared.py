"""A lock that a dataset shares with its DataLoader worker copies, however they start.

Workers started by ``fork`` inherit the lock the dataset made; workers started by
``spawn`` or ``forkserver`` receive it pickled while they are being spawned, which a
lock made for ``fork`` does not allow: the first time a worker is spawned, the lock is
replaced by one made for ``spawn``, which forked workers can inherit too. A plain copy of
the dataset (``pickle.dumps``, ``copy.deepcopy``) goes without a lock.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
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
