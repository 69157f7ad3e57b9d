"""Where the shard tasks of :func:`tarkit.map_shards` run: local processes or a Ray cluster.

Both engines have the same small interface, driven by :mod:`tarkit.processing.driver`:
``room()`` (how many more tasks may be submitted now), ``submit(task)``,
``wait(timeout)`` (the tasks that ended: each with its :class:`ShardResult`, or a
string saying how its worker died), ``running()``, ``samples_read()`` (input samples
read so far by the tasks still running, for the progress display) and
``close(cancel)``.

- :class:`LocalEngine`: worker processes of this machine, started with ``forkserver``
  (``spawn`` where there is none), one task at a time each. A worker that dies (killed,
  out of memory) costs only its own task, which is reported; the worker is replaced.
- :class:`RayEngine`: one Ray task per shard (``num_cpus`` each), on the cluster at
  ``address`` or ``RAY_ADDRESS``, else a local Ray started for the job. Ray's own task
  retries are off: the driver retries, the same way for both engines.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
from typing import Any

from ..errors import TarkitError, UsageError
from ..storage.sources import describe_exit
from .commands import ledger_base, record_commands, stop_recording, sweep_ledgers
from .shard_task import ShardResult, ShardTask, run_shard

Ended = tuple[ShardTask, "ShardResult | str"]


class EngineError(TarkitError):
    """The engine cannot run: Ray is not installed, the cluster cannot be reached…"""


def default_workers() -> int:
    """One worker per core this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# ---------------------------------------------------------------------------------------
# Local processes


def _on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwind so that staging directories are removed


def _worker_main(
    conn: multiprocessing.connection.Connection, mapper: Any, environ: dict[str, str],
    ledgers: str | None,
) -> None:  # fmt: skip
    # A forkserver child has the server's environment: give it the driver's, as now.
    os.environ.clear()
    os.environ.update(environ)
    # Outputs are files: whatever the function prints is a diagnostic, for stderr.
    sys.stdout.flush()
    os.dup2(2, 1)
    # Ctrl-C reaches the whole process group; the driver decides and stops the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        conn.send(_STARTED)  # it got this far: importing the main module and fn worked
    except OSError:
        return
    # Should this process be killed, the driver finds the commands it ran and their
    # directories in its ledger (see tarkit.processing.commands.record_commands).
    record_commands(ledgers)
    try:
        while True:
            try:
                task = conn.recv()
            except (EOFError, OSError):
                return
            if task is None:
                return
            try:
                conn.send(run_shard(mapper, task, functools.partial(_tell, conn)))
            except (BrokenPipeError, OSError):
                return
    finally:
        stop_recording()


_STARTED = ("started",)


def _tell(conn: multiprocessing.connection.Connection, samples: int) -> None:
    conn.send(("samples", samples))  # how far the task is: for the progress display


class _Worker:
    def __init__(self, context: Any, mapper: Any, ledgers: str | None) -> None:
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=_worker_main,
            args=(child, mapper, dict(os.environ), ledgers),
            daemon=True,
            name="tarkit-map-worker",
        )
        self.process.start()
        child.close()
        self.started = False  # it said it got to _worker_main

    def stop(self, kill: bool = False) -> None:
        if self.process.is_alive():
            if kill:
                self.process.terminate()
            else:
                try:
                    self.conn.send(None)
                except OSError:
                    pass
            self.process.join(5)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(5)
        self.conn.close()


def start_failure_hint() -> str:
    """Why a worker process may die while starting, before it runs any shard."""
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None)
    if script and not script.endswith((f"{os.sep}tarkit", f"tarkit{os.sep}__main__.py")):
        return (
            f" while starting, before it ran any shard (its error is on stderr): worker "
            f"processes import the main module ({os.path.basename(script)}), so a script "
            'must call map_shards under `if __name__ == "__main__":`'
        )
    return (
        " while starting, before it ran any shard (its error is on stderr): can the "
        "function's module be imported in a new process?"
    )


def start_method() -> str:
    """``forkserver`` where the platform has it (safe with threads, fast), else ``spawn``."""
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


class LocalEngine:
    """A pool of ``workers`` processes on this machine, robust to a worker being killed.

    A worker that dies costs its task (reported, for a retry); the shell commands it
    was running are killed and their directories removed (from its ledger).
    """

    def __init__(self, mapper: Any, workers: int) -> None:
        self.context = multiprocessing.get_context(start_method())
        self.ledgers = ledger_base()
        self.mapper = mapper
        self.size = max(1, workers)
        self.idle: list[_Worker] = []
        self.busy: dict[_Worker, ShardTask] = {}
        self.read: dict[int, int] = {}  # task index: samples read so far, while it runs

    def samples_read(self) -> int:
        return sum(self.read.values())

    def room(self) -> int:
        return self.size - len(self.busy)

    def running(self) -> int:
        return len(self.busy)

    def submit(self, task: ShardTask) -> None:
        worker = self.idle.pop() if self.idle else _Worker(self.context, self.mapper, self.ledgers)
        try:
            worker.conn.send(task)
        except OSError:  # it died while idle: the next wait() reports it with the task
            pass
        self.busy[worker] = task

    def wait(self, timeout: float) -> list[Ended]:
        if not self.busy:
            return []
        watched: list[Any] = []
        for worker in self.busy:
            watched += [worker.conn, worker.process.sentinel]
        ready = set(multiprocessing.connection.wait(watched, timeout))
        ended: list[Ended] = []
        for worker, task in list(self.busy.items()):
            if worker.conn in ready:
                result = self._receive(worker, task)
                if isinstance(result, ShardResult):
                    del self.busy[worker]
                    self.read.pop(task.index, None)
                    self.idle.append(worker)
                    ended.append((task, result))
                    continue
                if result is not None and worker.process.sentinel not in ready:
                    continue  # it said how far it is, and runs on
            elif worker.process.sentinel not in ready:
                continue
            del self.busy[worker]
            self.read.pop(task.index, None)
            worker.process.join(5)
            pid, exitcode = worker.process.pid, worker.process.exitcode
            worker.stop(kill=True)
            sweep_ledgers(self.ledgers)  # what its commands left
            what = f"its worker process (pid {pid}) {describe_exit(exitcode)}"
            if not worker.started and exitcode is not None and exitcode > 0:
                what += start_failure_hint()
            ended.append((task, what))
        return ended

    def _receive(self, worker: _Worker, task: ShardTask) -> ShardResult | bool | None:
        """The task's result; True when only news came; None when the pipe broke."""
        conn = worker.conn
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return None
            if isinstance(message, ShardResult):
                return message
            if message == _STARTED:
                worker.started = True
            elif isinstance(message, tuple) and message[:1] == ("samples",):
                self.read[task.index] = message[1]
            try:
                if not conn.poll(0):
                    return True
            except (EOFError, OSError):
                return None

    def close(self, cancel: bool = False) -> None:
        for worker in self.idle:
            worker.stop()
        for worker in self.busy:
            worker.stop(kill=True)
        self.idle, self.busy, self.read = [], {}, {}
        sweep_ledgers(self.ledgers)  # of workers that had to be killed


# ---------------------------------------------------------------------------------------
# Ray


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
        self, mapper: Any, workers: int | None, address: str | None, num_cpus: float
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


def run_shard_on_ray(mapper: Any, task: ShardTask) -> ShardResult:
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
