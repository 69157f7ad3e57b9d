"""The local engine: a pool of worker processes on this machine, robust to one being killed.

Workers are started with ``forkserver`` (``spawn`` where there is none) and run one task
at a time each. A worker that dies (killed, out of memory) costs only its own task,
which is reported for a retry; the worker is replaced, and the shell commands it was
running are killed and their directories removed (from its ledger). Payloads come back
to this process and go out again with the tasks that take them: on one machine that is
a copy through a pipe.

Workers die with the driver, however it ends (``kill -9``, the out-of-memory killer):
each holds the read end of a *lifeline*, a pipe whose write end only the driver has,
and a thread that waits on it (:func:`_watch_driver`). When the driver is gone the worker
ends as SIGTERM ends it, killing its commands and removing its files on the way out.
(Linux's parent-death signal is set too, but alone it would not do: a forkserver
worker's parent is the forkserver, which outlives the driver while workers live, and
the signal follows the thread that started the process, not the process.)
"""

from __future__ import annotations

import functools
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..storage import describe_exit
from .base import Ended, Handle, Task
from .ledger import (
    kill_own_commands,
    ledger_base,
    record_commands,
    stop_recording,
    sweep_ledgers,
)
from .leftovers import die_with_parent

# Seconds a worker whose driver is gone has to end as SIGTERM ends it, before it kills
# its commands and exits without unwinding.
DRIVER_GONE_GRACE = 5.0


def default_workers() -> int:
    """One worker per core this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwind so that staging directories are removed


@dataclass
class _Done:
    """A task's result and payload, as a worker sends them back."""

    result: Any
    payload: bytes | None


def _worker_main(
    conn: multiprocessing.connection.Connection, lifeline: multiprocessing.connection.Connection,
    shared: Any, environ: dict[str, str], ledgers: str | None,
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
    die_with_parent(signal.SIGTERM)
    leaving = threading.Event()
    threading.Thread(
        target=_watch_driver, args=(lifeline, leaving), name="tarkit-driver-watch", daemon=True
    ).start()
    try:
        _serve(conn, shared, ledgers)
    finally:
        leaving.set()


def _serve(conn: multiprocessing.connection.Connection, shared: Any, ledgers: str | None) -> None:
    """Run the tasks the driver sends until it sends None or is gone."""
    try:
        conn.send(_STARTED)  # it got this far: importing the main module and shared worked
    except OSError:
        return
    # Should this process be killed, the driver finds the commands it ran and their
    # directories in its ledger (see tarkit.engines.ledger).
    record_commands(ledgers)
    try:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return
            if message is None:
                return
            task, inputs = message
            try:
                conn.send(_Done(*task.run(shared, inputs, functools.partial(_tell, conn))))
            except (BrokenPipeError, OSError):
                return
    finally:
        stop_recording()


def _watch_driver(
    lifeline: multiprocessing.connection.Connection, leaving: threading.Event
) -> None:
    """In a worker: once the driver is gone (its end of ``lifeline`` closed), end the
    worker as SIGTERM does; if it has not ended after :data:`DRIVER_GONE_GRACE` seconds
    (a task that ignores SystemExit), kill its commands and exit."""
    # Signals for the worker go to its main thread alone, which holds them back while it
    # starts a command (see tarkit.processing.jobs), and raises SystemExit there. Not a
    # hold (neither jobs' mask nor a commit's handlers): blocked for this thread's life.
    signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT, signal.SIGTERM))
    try:
        lifeline.poll(None)  # nothing is ever sent: readable means the end was closed
    except (OSError, EOFError):
        pass
    if leaving.is_set():
        return  # the worker is ending anyway (the driver closes the lifeline last)
    os.kill(os.getpid(), signal.SIGTERM)
    if not leaving.wait(DRIVER_GONE_GRACE):
        kill_own_commands()
        os._exit(128 + signal.SIGTERM)


_STARTED = ("started",)


def _tell(conn: multiprocessing.connection.Connection, samples: int) -> None:
    conn.send(("samples", samples))  # how far the task is: for the progress display


class _Worker:
    def __init__(self, context: Any, shared: Any, ledgers: str | None) -> None:
        self.conn, child = context.Pipe()
        lifeline, self.lifeline = context.Pipe(duplex=False)  # the worker's end reads
        self.process = context.Process(
            target=_worker_main,
            args=(child, lifeline, shared, dict(os.environ), ledgers),
            daemon=True,
            name="tarkit-map-worker",
        )
        self.process.start()
        child.close()
        lifeline.close()
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
        self.lifeline.close()  # last: a worker that still runs takes it as the driver gone


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


# The forkserver listens on a socket in a new directory of the temporary directory
# (``pymp-XXXXXXXX/listener-XXXXXXXX``), and a socket's path may not pass 107 bytes.
_SOCKET_DIRECTORY_ROOM = 107 - len("/pymp-12345678/listener-12345678")


def start_method() -> str:
    """``forkserver`` where the platform has it (safe with threads, fast) and the
    temporary directory is short enough for its socket, else ``spawn``."""
    import tempfile

    short = len(os.fsencode(tempfile.gettempdir())) <= _SOCKET_DIRECTORY_ROOM
    if short and "forkserver" in multiprocessing.get_all_start_methods():
        return "forkserver"
    return "spawn"


class LocalEngine:
    """A pool of ``workers`` processes on this machine, robust to a worker being killed.

    ``shared`` goes to each worker once, when it starts. A worker that dies costs its
    task (reported, for a retry); the shell commands it was running are killed and their
    directories removed (from its ledger). A payload's handle is the payload itself.
    """

    def __init__(self, shared: Any, workers: int) -> None:
        self.context = multiprocessing.get_context(start_method())
        self.ledgers = ledger_base()
        self.shared = shared
        self.size = max(1, workers)
        self.idle: list[_Worker] = []
        self.busy: dict[_Worker, Task] = {}
        self.read: dict[int, int] = {}  # task index: samples read so far, while it runs

    def capacity(self) -> int:
        return self.size

    def samples_read(self) -> int:
        return sum(self.read.values())

    def room(self) -> int:
        return self.size - len(self.busy)

    def running(self) -> int:
        return len(self.busy)

    def submit(self, task: Task, inputs: Sequence[Handle] = ()) -> None:
        worker = self.idle.pop() if self.idle else _Worker(self.context, self.shared, self.ledgers)
        try:
            worker.conn.send((task, list(inputs)))
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
                if isinstance(result, _Done):
                    del self.busy[worker]
                    self.read.pop(task.index, None)
                    self.idle.append(worker)
                    ended.append(Ended(task, result.result, result.payload))
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
            ended.append(Ended(task, died=what))
        return ended

    def _receive(self, worker: _Worker, task: Task) -> _Done | bool | None:
        """The task's result; True when only news came; None when the pipe broke."""
        conn = worker.conn
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return None
            if isinstance(message, _Done):
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
