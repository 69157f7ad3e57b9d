"""The task runner: tasks onto an engine, failed attempts retried, what is left cleaned up.

Every driver that runs tasks on an engine (:func:`tarkit.map_shards`,
:func:`tarkit.shard_dataset` on a cluster) goes through :class:`TaskRunner`, so that
retries and crash cleanup are the same whatever the work: an attempt whose worker died
(killed, out of memory, its node lost) is tried again, and so is a failure the task says
another attempt may cure, up to ``retries`` more times; a task that fails for good, and
every task still running when the run stops, is :meth:`~tarkit.engines.base.Task.abandon`-ed
(its temporary files removed).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .base import Engine, Handle, Task

DONE, RETRY, FAILED = "done", "retry", "failed"

# Says why a result is a failure and whether another attempt may succeed; None: success.
Judge = Callable[[Any], "tuple[str, bool] | None"]


@dataclass
class Outcome:
    """What became of a task: ``event`` is :data:`DONE` (``result`` and ``payload``),
    :data:`RETRY` (an attempt failed, ``reason`` says why; the next attempt is queued)
    or :data:`FAILED` (no attempts left, or a failure that would happen again;
    ``result`` is None when its worker died)."""

    event: str
    task: Any
    result: Any = None
    payload: Handle | None = None
    reason: str = ""


class TaskRunner:
    """Runs tasks on ``engine`` in the order added, ``retries`` more attempts each.

    ``judge(result)`` tells a failed result from a successful one (see :data:`Judge`).
    Call :meth:`poll` until :meth:`busy` is false, then :meth:`close`.
    """

    def __init__(self, engine: Engine, retries: int, judge: Judge) -> None:
        self.engine = engine
        self.retries = retries
        self.judge = judge
        self.queue: deque[tuple[Task, Sequence[Handle]]] = deque()
        self.in_flight: dict[int, tuple[Task, Sequence[Handle]]] = {}

    def add(self, task: Task, inputs: Sequence[Handle] = (), *, first: bool = False) -> None:
        """Queue ``task`` with the payloads of ``inputs``; ``first`` puts it before the
        tasks already queued."""
        if first:
            self.queue.appendleft((task, inputs))
        else:
            self.queue.append((task, inputs))

    def busy(self) -> bool:
        """Whether tasks are queued or running."""
        return bool(self.queue or self.in_flight)

    def running(self) -> int:
        """Tasks submitted to the engine that have not ended."""
        return len(self.in_flight)

    def poll(self, timeout: float) -> list[Outcome]:
        """Submit queued tasks while the engine has room, then wait up to ``timeout``
        seconds; return what became of the tasks that ended (none: an empty list)."""
        engine = self.engine
        while self.queue and engine.room() > 0:
            task, inputs = self.queue.popleft()
            self.in_flight[task.index] = (task, inputs)
            engine.submit(task, inputs)
        outcomes: list[Outcome] = []
        for ended in engine.wait(timeout):
            task, inputs = self.in_flight.pop(ended.task.index)
            if ended.died is not None:
                reason, again = ended.died, True
            else:
                judged = self.judge(ended.result)
                if judged is None:
                    outcomes.append(Outcome(DONE, task, ended.result, ended.payload))
                    continue
                reason, again = judged
            if again and task.attempt <= self.retries:
                self.queue.append((task.retried(), inputs))
                outcomes.append(Outcome(RETRY, task, ended.result, reason=reason))
            else:
                task.abandon()
                outcomes.append(Outcome(FAILED, task, ended.result, reason=reason))
        return outcomes

    def close(self, cancel: bool = False) -> None:
        """Stop the engine; with ``cancel``, the tasks still running are abandoned."""
        try:
            self.engine.close(cancel=cancel)
        finally:
            for task, _ in self.in_flight.values():
                task.abandon()
            self.in_flight = {}
            self.queue.clear()
