"""engines: where tasks run — worker processes of this machine, or a Ray cluster.

An engine runs :class:`~tarkit.engines.base.Task` objects and knows nothing of what they
do; :func:`tarkit.map_shards` (a task per input shard) and :func:`tarkit.shard_dataset`
on a cluster (tasks that encode items, tasks that write shards) are its two users, and
both drive it through :class:`~tarkit.engines.running.TaskRunner`, so that resource
checks, retries, crash cleanup and progress work the same for both.

- :mod:`.base`: the :class:`~tarkit.engines.base.Engine` and
  :class:`~tarkit.engines.base.Task` protocols: ``capacity()``, ``room()``,
  ``submit(task, inputs)``, ``wait(timeout)`` (the tasks that ended: each with its result
  and payload, or how its worker died), ``running()``, ``samples_read()`` and
  ``close(cancel)``.
- :mod:`.local`: :class:`~tarkit.engines.local.LocalEngine`, worker processes of this
  machine, started with ``forkserver`` (``spawn`` where there is none), one task at a
  time each. A worker that dies (killed, out of memory) costs only its own task; the
  worker is replaced. Workers die with their driver.
- :mod:`.ray`: :class:`~tarkit.engines.ray.RayEngine`, one Ray task per task
  (``num_cpus`` each), on the cluster at ``address`` or ``RAY_ADDRESS``, else a local Ray
  started for the job. Ray's own task retries are off: the runner retries.
- :mod:`.running`: :class:`~tarkit.engines.running.TaskRunner`, retries and cleanup.
- :mod:`.ledger`: the crash ledger, with which the commands a killed worker started are
  found and killed.
- :mod:`.leftovers`: the mark every command's processes inherit and the adoption of
  orphans, with which what a command left in sessions of its own is found and killed.

A new engine is one module here with a class that has the methods of ``Engine``, and its
name in :func:`start_engine`.
"""

from __future__ import annotations

from typing import Any

from ..errors import UsageError
from .base import Engine

ENGINES = ("local", "ray")


def check_engine(name: str) -> str:
    """Return ``name`` if it is an engine's; else raise :class:`UsageError`.

    >>> check_engine("spark")
    Traceback (most recent call last):
    ...
    tarkit.errors.UsageError: unknown engine 'spark': use 'local' or 'ray'
    """
    if name not in ENGINES:
        raise UsageError(f"unknown engine {name!r}: use 'local' or 'ray'")
    return name


def start_engine(
    name: str, shared: Any, *, workers: int | None, address: str | None, num_cpus: float
) -> Engine:
    """The engine ``name`` running tasks with ``shared``: ``workers`` processes of this
    machine (default one per core), or tasks of ``num_cpus`` CPUs each on the Ray cluster
    at ``address`` (``workers`` then limits the tasks in flight)."""
    if check_engine(name) == "ray":
        from .ray import RayEngine

        return RayEngine(shared, workers, address, num_cpus)
    from .local import LocalEngine, default_workers

    return LocalEngine(shared, workers or default_workers())
