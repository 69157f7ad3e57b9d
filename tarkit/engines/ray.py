"""The Ray engine: one Ray task per task, on a cluster or on a local Ray started for the job.

Each task asks for ``num_cpus`` CPUs; Ray's own task retries are off (the task runner
retries, the same way for every engine). The shared object is put in Ray's object store
once and fetched once by each worker process; a task's payload stays in the object store
of the node that made it until a later task takes it as an input (Ray moves it there,
never through the driver). Ray is imported only when this engine is chosen.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from ..errors import EngineError, UsageError
from .base import Ended, Handle, Task
from .ledger import record_commands, sweep_ledgers

_RESOURCES_EVERY = 5.0  # seconds between looks at the cluster's size


def import_ray() -> Any:
    """Import Ray, or raise :class:`EngineError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise EngineError(
            "engine 'ray' needs Ray, which is not installed: pip install 'tarkit[ray]'"
        ) from None
    return ray


class RayEngine:
    """One Ray task per task, each asking for ``num_cpus`` CPUs of the cluster.

    Connects to ``address`` (or ``RAY_ADDRESS``, or the cluster last started on this
    machine with ``ray start``), else starts a local Ray for the job; a Ray the caller
    initialized already is used as it is. ``workers`` limits the tasks in flight (None:
    all of them; Ray queues what the cluster cannot run yet). Raises
    :class:`EngineError` when Ray cannot be reached, :class:`UsageError` when no node
    has ``num_cpus`` CPUs or ``shared`` cannot be sent to the workers.
    """

    def __init__(
        self, shared: Any, workers: int | None, address: str | None, num_cpus: float
    ) -> None:
        ray = import_ray()
        self.ray = ray
        self.connected_here = False
        if not ray.is_initialized():
            where = address or os.environ.get("RAY_ADDRESS") or None
            try:
                ray.init(
                    address=where,
                    include_dashboard=False,
                    logging_level=logging.WARNING,
                    log_to_driver=True,
                )
            except (ConnectionError, ValueError, RuntimeError) as exc:
                what = f"the Ray cluster at {where}" if where else "a local Ray"
                raise EngineError(f"cannot connect to {what}: {exc}") from None
            self.connected_here = True
        try:
            check_cpus(ray.nodes(), num_cpus)
            try:
                # In a list, so that Ray hands each task the reference, not the object:
                # a worker fetches the object once (see run_on_ray).
                self.shared = [ray.put(shared)]
            except Exception as exc:  # pickling raises many kinds
                raise UsageError(f"cannot send {type(shared).__name__} to the Ray workers: "
                                 f"{type(exc).__name__}: {exc}") from None  # fmt: skip
        except UsageError:
            if self.connected_here:
                ray.shutdown()
            raise
        remote = ray.remote(num_cpus=num_cpus, max_retries=0, retry_exceptions=False,
                            num_returns=2)  # fmt: skip
        self.function = remote(run_on_ray)
        self.num_cpus = num_cpus
        self.size = workers
        self.refs: dict[Any, tuple[Task, Any]] = {}  # result ref: (task, payload ref)
        self._capacity = (0, 0.0)  # (tasks at once, when it was looked at)

    def capacity(self) -> int:
        count, when = self._capacity
        if not count or time.monotonic() - when > _RESOURCES_EVERY:
            cpus = float(self.ray.cluster_resources().get("CPU", 1))
            count = max(1, int(cpus // self.num_cpus) if self.num_cpus > 0 else int(cpus))
            self._capacity = (count, time.monotonic())
        return count if self.size is None else min(count, self.size)

    def samples_read(self) -> int:
        return 0  # Ray tasks report their items when they end

    def room(self) -> int:
        if self.size is None:
            return 1 << 30
        return self.size - len(self.refs)

    def running(self) -> int:
        return len(self.refs)

    def submit(self, task: Task, inputs: Sequence[Handle] = ()) -> None:
        result, payload = self.function.remote(self.shared, task, *inputs)
        self.refs[result] = (task, payload)

    def wait(self, timeout: float) -> list[Ended]:
        if not self.refs:
            return []
        ray = self.ray
        refs = list(self.refs)
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        if ready:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        ended: list[Ended] = []
        for ref in ready:
            task, payload = self.refs.pop(ref)
            try:
                ended.append(Ended(task, ray.get(ref), payload))
            except ray.exceptions.RayError as exc:
                ended.append(Ended(task, died=_ray_failure(exc)))
        return ended

    def close(self, cancel: bool = False) -> None:
        if cancel:
            for ref in self.refs:
                try:
                    self.ray.cancel(ref, force=True)
                except Exception:  # already finished, or the cluster is gone
                    pass
        self.refs = {}
        self.shared = []
        if self.connected_here:
            self.ray.shutdown()


def check_cpus(nodes: list[dict[str, Any]], num_cpus: float) -> None:
    """Raise :class:`UsageError` unless a live node of ``nodes`` (``ray.nodes()``) has
    ``num_cpus`` CPUs: Ray would keep such tasks pending forever, without an error.

    >>> check_cpus([{"Alive": True, "Resources": {"CPU": 2.0}}], 4)
    Traceback (most recent call last):
    ...
    tarkit.errors.UsageError: each shard task asks for 4 CPUs (num_cpus, --num-cpus) but no node of the Ray cluster has that many: the largest has 2 (1 node, 2 CPUs in all)
    """
    cpus = [float(n.get("Resources", {}).get("CPU", 0)) for n in nodes if n.get("Alive")]
    largest = max(cpus, default=0.0)
    if num_cpus <= largest:
        return
    count = "1 node" if len(cpus) == 1 else f"{len(cpus)} nodes"
    raise UsageError(
        f"each shard task asks for {num_cpus:g} CPUs (num_cpus, --num-cpus) but no node of "
        f"the Ray cluster has that many: the largest has {largest:g} ({count}, "
        f"{sum(cpus):g} CPUs in all)"
    )


_shared: dict[str, Any] = {}  # in a Ray worker: the shared object of the job, by reference


def run_on_ray(shared: list[Any], task: Task, *inputs: bytes) -> tuple[Any, bytes | None]:
    """``task.run`` in a Ray worker, which keeps a ledger of the commands it starts.

    Ray does not kill what a killed worker started in sessions of their own: each task
    first sweeps the ledgers of dead workers of its node (their commands are killed,
    their directories removed). The shared object is fetched once per worker.
    """
    record_commands()
    sweep_ledgers()
    key = shared[0].hex()
    if key not in _shared:
        import ray

        _shared.clear()
        _shared[key] = ray.get(shared[0])
    return task.run(_shared[key], inputs, None)


def _ray_failure(exc: BaseException) -> str:
    name = type(exc).__name__
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"Ray reported {name}: {first}" if first else f"Ray reported {name}"
