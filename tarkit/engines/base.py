"""What every engine, its tasks and the task runner share.

A driver (:func:`tarkit.map_shards`, :func:`tarkit.shard_dataset` on a cluster) hands
:class:`Task` objects to an :class:`Engine`, through a
:class:`~tarkit.engines.running.TaskRunner` that retries the failed ones. Somewhere (a
local worker process, a Ray worker) ``task.run(shared, inputs, tell)`` runs: ``shared``
is the object the engine was made with (sent to each worker once), ``inputs`` the
payloads of earlier tasks the task was submitted with, and ``tell`` a callback for how
far it is. It returns its result and, optionally, a payload: bytes the engine keeps where
they were made (Ray's object store) until a later task takes them as an input, so that
they never pass through the driver. Tasks, results and shared objects cross process
boundaries: they are picklable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

Tell = Callable[[int], object]  # a running task says how many items it has read
Handle = Any  # an engine's reference to a payload a task left, for a later task
T = TypeVar("T", bound="Task")


class Task(Protocol):
    """One unit of work: picklable, numbered, and re-runnable."""

    @property
    def index(self) -> int:
        """Tells the task from the others of its run (the progress display keys on it)."""
        ...

    @property
    def attempt(self) -> int:
        """1 for the first attempt, then 2, 3…"""
        ...

    def run(
        self, shared: Any, inputs: Sequence[bytes], tell: Tell | None
    ) -> tuple[Any, bytes | None]:
        """Do the work (in a worker); return (result, payload or None).

        A failure of the work is reported in the result, never raised; an exception
        that escapes is a bug and ends the worker.
        """
        ...

    def retried(self: T) -> T:
        """This task's next attempt."""
        ...

    def abandon(self) -> None:
        """In the driver: remove what an attempt that did not finish may have left (its
        temporary files). Called for a task still running when the run stops, and for a
        task that failed for good."""
        ...


@dataclass
class Ended:
    """A task that ended: its ``result`` and ``payload`` handle, or (``result`` None) how
    its worker died."""

    task: Any
    result: Any = None
    payload: Handle | None = None
    died: str | None = None


class Engine(Protocol):
    """Where tasks run: :class:`~tarkit.engines.local.LocalEngine` (worker processes of
    this machine) or :class:`~tarkit.engines.ray.RayEngine` (a Ray cluster)."""

    def capacity(self) -> int:
        """How many tasks can run at once."""
        ...

    def room(self) -> int:
        """How many more tasks may be submitted now."""
        ...

    def submit(self, task: Task, inputs: Sequence[Handle] = ()) -> None:
        """Start ``task`` (there is room), with the payloads of ``inputs``."""
        ...

    def wait(self, timeout: float) -> list[Ended]:
        """The tasks that ended within ``timeout`` seconds (none: the list is empty)."""
        ...

    def running(self) -> int:
        """How many submitted tasks have not ended."""
        ...

    def samples_read(self) -> int:
        """Items read so far by the running tasks (for the progress display)."""
        ...

    def close(self, cancel: bool = False) -> None:
        """Stop the workers; with ``cancel``, tasks still running are abandoned."""
        ...
