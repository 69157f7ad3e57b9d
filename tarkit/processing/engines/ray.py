"""The Ray engine: one Ray task per shard, on a cluster or on a local Ray started for the job.

Each task asks for ``num_cpus`` CPUs; Ray's own task retries are off (the driver retries,
the same way for both engines). Ray is imported only when this engine is chosen.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ...errors import EngineError, UsageError
from ..ledger import record_commands, sweep_ledgers
from ..shard_task import run_shard
from .base import Ended, ShardMapper, ShardResult, ShardTask


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
    """One Ray task per shard, each asking for ``num_cpus`` CPUs of the cluster.

    Connects to ``address`` (or ``RAY_ADDRESS``, or the cluster last started on this
    machine with ``ray start``), else starts a local Ray for the job; a Ray the caller
    initialized already is used as it is. ``workers`` limits the tasks in flight (None:
    all of them; Ray queues what the cluster cannot run yet).
    """

    def __init__(
        self, mapper: ShardMapper, workers: int | None, address: str | None, num_cpus: float
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
        except UsageError:
            if self.connected_here:
                ray.shutdown()
            raise
        remote = ray.remote(num_cpus=num_cpus, max_retries=0, retry_exceptions=False)
        self.task = remote(run_shard_on_ray)
        self.mapper_ref = ray.put(mapper)
        self.size = workers
        self.refs: dict[Any, ShardTask] = {}

    def samples_read(self) -> int:
        return 0  # Ray tasks report their samples when they end

    def room(self) -> int:
        if self.size is None:
            return 1 << 30
        return self.size - len(self.refs)

    def running(self) -> int:
        return len(self.refs)

    def submit(self, task: ShardTask) -> None:
        self.refs[self.task.remote(self.mapper_ref, task)] = task

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
            task = self.refs.pop(ref)
            try:
                ended.append((task, ray.get(ref)))
            except ray.exceptions.RayError as exc:
                ended.append((task, _ray_failure(exc)))
        return ended

    def close(self, cancel: bool = False) -> None:
        if cancel:
            for ref in self.refs:
                try:
                    self.ray.cancel(ref, force=True)
                except Exception:  # already finished, or the cluster is gone
                    pass
        self.refs = {}
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


def run_shard_on_ray(mapper: ShardMapper, task: ShardTask) -> ShardResult:
    """:func:`run_shard` in a Ray worker, which keeps a ledger of its shell commands.

    Ray does not kill what a killed worker started in sessions of their own: each task
    first sweeps the ledgers of dead workers of its node (their commands are killed,
    their directories removed).
    """
    record_commands()
    sweep_ledgers()
    return run_shard(mapper, task)


def _ray_failure(exc: BaseException) -> str:
    name = type(exc).__name__
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"Ray reported {name}: {first}" if first else f"Ray reported {name}"
