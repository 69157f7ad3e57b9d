"""One command on one sample: started, watched, and killed with everything it left.

A :class:`Job` writes a sample's fields into its workspace and starts ``bash -c`` there
with ``posix_spawn``, in a session of its own, marked with ``TARKIT_COMMAND`` (see
:mod:`tarkit.engines.leftovers`) and, in a map worker, recorded in the crash ledger.
When it ends or times out, its process group is killed and it is reaped, then every
process it left in sessions of its own is found by its mark and killed. Its process is
reaped only after its whole group was killed: until then its process id, the id of its
group, cannot be reused, so killing the group never hits another program.
:func:`wait_any` watches several jobs at once; the supervisor
(:mod:`tarkit.processing.supervisor`) decides which run when.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import shlex
import shutil
import signal
import time
from collections.abc import Iterable, Sequence

from ..engines.ledger import forget_command, recording_line
from ..engines.leftovers import MARK, kill_marked, marks_value
from ..format.samples import Sample
from .commands import (
    Command,
    FieldData,
    Rejection,
    SampleOutcome,
    Workspace,
    collect_outputs,
    collect_row,
    exit_status,
    write_fields,
)

# The commands of this process that are not reaped yet (of every supervisor in it): what
# their leftovers' sweep must leave to them.
_UNREAPED: set[int] = set()


@functools.cache
def _bash_path() -> str:
    return shutil.which("bash") or "/bin/bash"


class Job:
    """The command running on one sample, in its own directory and process group.

    ``left_behind`` tells, once it is reaped, whether it left processes in other
    sessions (killed, or strangers that may be its): its workspace must then not be
    reused, and is left as it is for its owner to remove.
    """

    def __init__(
        self, command: Command, index: int, sample: Sample | None, key: str,
        fields: Sequence[tuple[str, FieldData]], workspace: Workspace, env: dict[str, str],
        registry: dict[int, Job], mark: str,
    ) -> None:  # fmt: skip
        """Write the fields and start the command, marked ``mark``; the job is then in
        ``registry``."""
        self.command = command
        self.index = index
        self.sample = sample
        self.key = key
        self.workspace = workspace
        self.directory = workspace.directory
        self.mark = mark
        self.names: list[str] | None = None  # what the directory held when the command ended
        self.pid = 0
        self.pidfd = -1
        self.reaped = False
        self.left_behind = False
        self.code = 0
        try:
            where = f"sample {key!r}" if sample is None else f"{sample.source}: sample {key!r}"
            write_fields(self.directory, fields, where)
            env["TARKIT_KEY"] = key
            env[MARK] = marks_value(mark)
            # A Ctrl-C or SIGTERM between the start and the registration would leave
            # a command nobody kills: hold them back for that moment.
            with _signals_held():
                self.pid = spawn(command.text, self.directory, env, workspace.fds)
                _UNREAPED.add(self.pid)
                registry[index] = self
        except BaseException:
            self._clear()
            raise
        self.deadline = None if command.timeout is None else time.monotonic() + command.timeout
        with contextlib.suppress(AttributeError, OSError):
            self.pidfd = os.pidfd_open(self.pid)

    def exited(self, ready: set[int]) -> bool:
        """Whether the command has ended: its pidfd is in ``ready`` (else: asked, not reaped)."""
        if self.pidfd >= 0:
            return self.pidfd in ready
        return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None

    def kill(self) -> None:
        """Kill the command's whole process group (while its leader is not reaped)."""
        if self.pid and not self.reaped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)

    def _reap(self) -> int:
        self.kill()  # what the command left running in its group goes too
        if not self.reaped:
            forget_command(self.pid)  # (its group is killed; unreaped, its id is not reused)
            while True:
                try:
                    _, status = os.waitpid(self.pid, 0)
                    break
                except InterruptedError:
                    continue
            self.reaped, self.code = True, os.waitstatus_to_exitcode(status)
            _UNREAPED.discard(self.pid)
            # What it left in sessions of its own goes too.
            killed, strangers = kill_leftovers(self.mark)
            self.left_behind = bool(killed or strangers)
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        return self.code

    def finish(self, timed_out: bool = False) -> SampleOutcome:
        """Reap the ended (or timed-out) command; the outcome; the directory emptied."""
        try:
            code = self._reap()
            command = self.command
            if not command.quiet:
                self.workspace.forward()
            outcome = SampleOutcome(self.index, self.key)
            kept = self.directory if command.keep_dirs else None
            status = exit_status(code, timed_out)
            if status:
                stderr = self.workspace.stderr_tail()
                reason = stderr[-1] if stderr else "no output on stderr"
                if timed_out:
                    reason = f"ran longer than {command.timeout:g} s (--timeout) and was killed"
                outcome.rejection = Rejection(self.key, status, reason, tuple(stderr), kept)
                return outcome
            self.names = os.listdir(self.directory)
            outputs, problem = collect_outputs(self.directory, self.key, command.multi, self.names)
            if problem is None and command.rows:
                outcome.row, problem = collect_row(self.directory, self.names)
            if problem is not None:
                stderr = self.workspace.stderr_tail()
                outcome.rejection = Rejection(self.key, "bad output", problem, tuple(stderr), kept)
            else:
                outcome.outputs = outputs
            return outcome
        finally:
            self.discard()

    def discard(self) -> None:
        """Kill the command if it still runs, reap it, empty its directory."""
        if self.pid and not self.reaped:
            self._reap()
        self._clear()

    def _clear(self) -> None:
        if not self.command.keep_dirs and not self.left_behind:
            self.workspace.clear(self.names)


def kill_leftovers(prefix: str) -> tuple[int, int]:
    """Kill what commands of this process marked ``prefix…`` left (the running commands
    of every supervisor in it spared): :func:`~tarkit.engines.leftovers.kill_marked`."""
    return kill_marked(prefix, spare=_UNREAPED)


def spawn(text: str, directory: str, env: dict[str, str], logs: tuple[int, int]) -> int:
    """Start ``bash -c text`` in ``directory``, in a new session; returns its process id.

    stdin is /dev/null, stdout and stderr go to ``logs``; signal dispositions and
    mask are the defaults (Python ignores SIGPIPE, a command must not). Started with
    ``posix_spawn``, which has no working-directory action: bash changes into
    ``directory`` itself before the command, after recording itself in its worker's
    crash ledger if there is one (same line, so line numbers in bash's messages are the
    command's).
    """
    script = f"{recording_line()}cd -- {shlex.quote(directory)} || exit 126; {text}"
    return os.posix_spawn(
        _bash_path(), ["bash", "-c", script], env,
        file_actions=[
            (os.POSIX_SPAWN_DUP2, _devnull(), 0),
            (os.POSIX_SPAWN_DUP2, logs[0], 1),
            (os.POSIX_SPAWN_DUP2, logs[1], 2),
        ],
        setsid=True, setsigmask=(), setsigdef=_DEFAULT_SIGNALS,
    )  # fmt: skip


class _signals_held:
    """Hold back SIGINT and SIGTERM (in this thread) for the duration of a ``with`` block.

    The signal mask, not handlers (as a commit holds them, :mod:`tarkit.storage.commit`):
    it works in any thread, costs no handler swap per command started, and its block
    lasts microseconds, so a second signal need not break through."""

    def __enter__(self) -> None:
        self.mask = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)

    def __exit__(self, *exc: object) -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)


_HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_DEFAULT_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ", "SIGINT", "SIGTERM", "SIGCHLD")
    if hasattr(signal, name)
)  # fmt: skip


@functools.cache
def _devnull() -> int:
    return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)


def wait_any(jobs: Iterable[Job]) -> tuple[list[Job], list[Job]]:
    """Block until a job ends or one is past its deadline: (ended, past deadline).

    Jobs are watched through pidfds (Linux), or else polled every 10 ms.
    """
    jobs = list(jobs)
    now = time.monotonic()
    deadlines = [j.deadline for j in jobs if j.deadline is not None]
    timeout = max(0.0, min(deadlines) - now) if deadlines else None
    pidfds = [j.pidfd for j in jobs if j.pidfd >= 0]
    if len(pidfds) < len(jobs):
        timeout = 0.01 if timeout is None else min(timeout, 0.01)
    ready: set[int] = set()
    if pidfds:
        poller = select.poll()
        for fd in pidfds:
            poller.register(fd, select.POLLIN)
        ready = {fd for fd, _ in poller.poll(None if timeout is None else timeout * 1000)}
    elif timeout:
        time.sleep(timeout)
    ended = [j for j in jobs if j.exited(ready)]
    now = time.monotonic()
    late = [j for j in jobs if j not in ended and j.deadline is not None and now >= j.deadline]
    return ended, late
