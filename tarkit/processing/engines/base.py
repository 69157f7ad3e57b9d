"""What the driver, the engines and the shard tasks of :func:`tarkit.map_shards` share.

The driver (:mod:`tarkit.processing.driver`) hands each :class:`ShardTask` to an
:class:`Engine`; somewhere (a local worker process, a Ray worker) the task runs
(:func:`tarkit.processing.shard_task.run_shard`) with a :class:`ShardMapper`, and its
:class:`ShardResult` comes back. Tasks, results and mappers cross process boundaries:
they are picklable.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ...errors import ShardFailure
from ...format.manifest import ShardInfo
from ...format.samples import Sample

Row = dict[str, Any]  # a metadata row: JSON values
Outputs = list[Any]  # output samples: dicts as ShardWriter takes them, or Samples


@dataclass(frozen=True)
class ShardTask:
    """What one task does: map ``input`` (shard number ``index``) into ``output``, reading
    and writing remote locations with fsspec's ``storage_options``."""

    index: int
    input: str
    output: str
    resume: bool = True
    attempt: int = 1
    storage_options: dict[str, Any] | None = None


@dataclass
class ShardResult:
    """What a task reports back (picklable; rows are JSON values)."""

    index: int
    info: ShardInfo | None = None
    resumed: bool = False
    samples_in: int = 0
    rows: list[Row] = field(default_factory=list)
    rejects: list[str] = field(default_factory=list)
    skipped_members: str | None = None
    reconnections: int = 0  # of the input's read, at the byte reached
    failure: ShardFailure | None = None
    seconds: float = 0.0
    worker: str = ""


# A task that ended: its result, or a string saying how its worker died.
Ended = tuple[ShardTask, ShardResult | str]


@runtime_checkable
class ShardMapper(Protocol):
    """Maps the samples of one shard: :class:`~tarkit.processing.mappers.SampleMapper` (a
    function per sample) and :class:`~tarkit.processing.mappers.ShellCommand` (tarproc's
    command) are the two there are."""

    def map_shard(
        self, samples: Iterator[Sample], source: str
    ) -> Iterator[tuple[Outputs, Row | None]]:
        """Yield (output samples, metadata row or None) for each sample of ``source``.

        A sample that cannot be mapped raises :class:`~tarkit.errors.ShardFailure` naming
        it (``output`` may be left empty: the task fills it in).
        """
        ...

    def take_rejects(self) -> list[str]:
        """The ``key<TAB>status<TAB>reason`` lines of the samples the last shard left out
        or kept unchanged, in order (then forgotten)."""
        ...


class Engine(Protocol):
    """Where shard tasks run: :class:`~tarkit.processing.engines.local.LocalEngine` (worker
    processes of this machine) or :class:`~tarkit.processing.engines.ray.RayEngine`."""

    def room(self) -> int:
        """How many more tasks may be submitted now."""
        ...

    def submit(self, task: ShardTask) -> None:
        """Start ``task`` (there is room)."""
        ...

    def wait(self, timeout: float) -> list[Ended]:
        """The tasks that ended within ``timeout`` seconds (none: the list is empty)."""
        ...

    def running(self) -> int:
        """How many submitted tasks have not ended."""
        ...

    def samples_read(self) -> int:
        """Input samples read so far by the running tasks (for the progress display)."""
        ...

    def close(self, cancel: bool = False) -> None:
        """Stop the workers; with ``cancel``, tasks still running are abandoned."""
        ...
