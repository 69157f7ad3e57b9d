"""Run tarproc's command on samples: a process supervisor without threads.

:func:`map_command` runs the command (:mod:`tarkit.processing.commands` says what it sees
and must leave) on up to N samples at once and yields the output samples in input order.
It starts each command with ``posix_spawn`` and watches them all through pidfds from the
calling thread; each of the N slots has a :class:`~tarkit.processing.commands.Workspace`
that is emptied and reused from one sample to the next. :func:`run_sample` does one
sample and is all another process needs.

Every command runs in a session (process group) of its own; its process is reaped only
after the whole group was killed, so killing the group never hits another program. In a
map worker each running command is recorded in the :mod:`~tarkit.engines.ledger`.
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
from collections.abc import Callable, Iterable, Iterator, Sequence

from ..engines.ledger import (
    forget_command,
    ledger_directory,
    recording_line,
    remove_tree,
)
from ..errors import CommandFailed, TarkitError
from ..format.samples import Sample
from ..format.tar import default_mtime
from ..sizes import check_parallel
from .commands import (
    Command,
    FieldData,
    ProcReport,
    Rejection,
    SampleOutcome,
    Workspace,
    check_fields,
    check_on_error,
    collect_outputs,
    collect_row,
    exit_status,
    make_root,
    output_sample,
    write_fields,
)

# Samples handed to the pool per worker: enough to keep every worker busy while the
# main thread writes, few enough that memory stays bounded on any stream.
IN_FLIGHT_PER_WORKER = 2


@functools.cache
def _bash_path() -> str:
    return shutil.which("bash") or "/bin/bash"


class _Job:
    """The command running on one sample, in its own directory and process group.

    The process is reaped only after its whole group was killed: until then its
    process id, the id of its group, cannot be reused, so killing the group never
    hits another program.
    """

    def __init__(
        self, command: Command, index: int, sample: Sample | None, key: str,
        fields: Sequence[tuple[str, FieldData]], workspace: Workspace, env: dict[str, str],
        registry: dict[int, _Job],
    ) -> None:  # fmt: skip
        """Write the fields and start the command; the job is then in ``registry``."""
        self.command = command
        self.index = index
        self.sample = sample
        self.key = key
        self.workspace = workspace
        self.directory = workspace.directory
        self.names: list[str] | None = None  # what the directory held when the command ended
        self.pid = 0
        self.pidfd = -1
        self.reaped = False
        self.code = 0
        try:
            where = f"sample {key!r}" if sample is None else f"{sample.source}: sample {key!r}"
            write_fields(self.directory, fields, where)
            env["TARKIT_KEY"] = key
            # A Ctrl-C or SIGTERM between the start and the registration would leave
            # a command nobody kills: hold them back for that moment.
            with _signals_held():
                self.pid = spawn(command.text, self.directory, env, workspace.fds)
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
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        return self.code

    def finish(self, timed_out: bool = False) -> SampleOutcome:
        """Reap the ended (or timed-out) command; the outcome; the directory removed."""
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
        """Kill the command if it still runs, reap it, remove its directory."""
        if self.pid and not self.reaped:
            self._reap()
        self._clear()

    def _clear(self) -> None:
        if not self.command.keep_dirs:
            self.workspace.clear(self.names)


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
    """Hold back SIGINT and SIGTERM (in this thread) for the duration of a ``with`` block."""

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


def run_sample(
    command: Command, index: int, key: str, fields: Sequence[tuple[str, FieldData]], root: str
) -> SampleOutcome:
    """Run ``command`` on one sample in a fresh directory ``root/<index>``; wait for it.

    ``fields`` are (field, bytes) pairs whose names passed
    :func:`~tarkit.processing.commands.check_fields`. Returns the output samples (key,
    sorted (field, bytes) pairs), or a ``Rejection`` when the command failed: never
    raises for a failure of the command; raises :class:`~tarkit.errors.OutputError` when
    the directory cannot be written (naming the file system when it is full).
    Everything is removed before returning unless ``command.keep_dirs``; an exception
    (KeyboardInterrupt included) kills the command first. Usable in any process.
    """
    workspace = Workspace(os.path.join(root, f"{index:06d}"))
    registry: dict[int, _Job] = {}
    try:
        _Job(command, index, None, key, fields, workspace, dict(os.environ), registry)
        job = registry[index]
        while True:
            ended, late = _wait_any([job])
            if ended or late:
                return job.finish(timed_out=not ended)
    except BaseException:
        for job in registry.values():
            job.discard()
        raise
    finally:
        workspace.close(remove=not command.keep_dirs)


def _wait_any(jobs: Iterable[_Job]) -> tuple[list[_Job], list[_Job]]:
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


def map_command(
    samples: Iterable[Sample],
    command: Command,
    *,
    parallel: int = 1,
    ordered: bool = True,
    on_error: str = "fail",
    on_reject: Callable[[Rejection], object] | None = None,
    report: ProcReport | None = None,
    tmpdir: str | None = None,
) -> Iterator[Sample]:
    """Run ``command`` on every sample, ``parallel`` at a time; yield the output samples.

    Output is in input order unless ``ordered`` is False (then in order of
    completion). At most ``IN_FLIGHT_PER_WORKER * parallel`` samples are held at
    once. A failed sample follows ``on_error``: ``"fail"`` kills every running
    command at once (those of samples before it too), yields the samples that had
    already finished as far as they follow on from what went out (in input order; in
    order of completion when unordered), and raises :class:`~tarkit.errors.CommandFailed`;
    ``"skip"`` leaves it out and ``"keep"`` yields it unchanged, both calling
    ``on_reject`` in output order. With ``command.rows``, each sample's metadata row
    joins ``report.rows`` before its outputs go out. A field name unsafe as a file name
    raises :class:`~tarkit.errors.InputError`; that and any other error reading
    ``samples`` is raised once the samples before it are out.

    Samples' directories live in a private directory under ``tmpdir`` (default
    ``$TMPDIR``), named in ``report.root`` once the generator has started. It is
    removed when the generator finishes or is closed (close it to stop early: running
    commands are killed), unless ``command.keep_dirs``. Runs in the calling thread:
    the commands are the only other processes.
    """
    command.check()
    check_on_error(on_error)
    check_parallel(parallel)
    report = report if report is not None else ProcReport()
    return _CommandMap(command, parallel, ordered, on_error, on_reject, report).run(samples, tmpdir)


class _CommandMap:
    """One run of :func:`map_command`: reads samples, runs their commands, hands out results.

    Up to ``parallel`` commands run; finished samples wait in ``done`` until their turn
    (input order, or at once when unordered), and at most ``IN_FLIGHT_PER_WORKER *
    parallel`` samples are running or waiting.
    """

    def __init__(
        self, command: Command, parallel: int, ordered: bool, on_error: str,
        on_reject: Callable[[Rejection], object] | None, report: ProcReport,
    ) -> None:  # fmt: skip
        self.command = command
        self.parallel = parallel
        self.ordered = ordered
        self.on_error = on_error
        self.on_reject = on_reject
        self.report = report
        self.root = ""  # these three are set when iteration starts
        self.mtime = 0
        self.env: dict[str, str] = {}
        # Each running command has a workspace, reused from one sample to the next
        # (except with keep_dirs, where each sample keeps its own).
        self.spare: list[Workspace] = []
        self.workspaces: list[Workspace] = []
        self.running: dict[int, _Job] = {}
        self.done: dict[int, tuple[Sample, SampleOutcome]] = {}
        self.reading = True
        self.next_out = 0  # ordered: the index of the next sample to go out
        self.input_error: TarkitError | None = None

    def run(self, samples: Iterable[Sample], tmpdir: str | None) -> Iterator[Sample]:
        """The output samples; the private directory is made when iteration starts."""
        where = tmpdir if tmpdir is not None else ledger_directory()
        self.root = self.report.root = make_root(where)
        self.mtime = default_mtime()
        self.env = dict(os.environ)
        iterator = iter(samples)
        try:
            while True:
                self._start_more(iterator)
                ready = self._in_turn()
                if ready:
                    for index in ready:
                        yield from self._results(*self.done.pop(index))
                        self.next_out = index + 1
                    continue
                if not self.running:
                    if self.input_error is not None:
                        raise self.input_error
                    break
                self._collect()
                if self.on_error == "fail":
                    yield from self._stop_at_failure()
        finally:
            self._finish(iterator)

    def _start_more(self, iterator: Iterator[Sample]) -> None:
        """Start commands on the next samples while there is room."""
        limit = self.parallel * IN_FLIGHT_PER_WORKER
        while (
            self.reading
            and len(self.running) < self.parallel
            and (len(self.running) + len(self.done) < limit)
        ):
            try:
                sample = next(iterator, None)
                if sample is not None:
                    check_fields(sample)
            except TarkitError as error:
                # Like every tool: the samples before the bad input still go out.
                self.input_error, self.reading = error, False
                return
            if sample is None:
                self.reading = False
                return
            fields = [
                (f, memoryview(m.raw)[m.data_start : m.data_start + m.size])
                for f, m in zip(sample.fields, sample.members, strict=True)
            ]
            index = self.report.samples_in
            self.report.samples_in += 1
            workspace = self._workspace_for(index)
            _Job(self.command, index, sample, sample.key, fields, workspace, self.env, self.running)

    def _workspace_for(self, index: int) -> Workspace:
        if self.command.keep_dirs:
            workspace = Workspace(os.path.join(self.root, f"{index:06d}"))
        elif self.spare:
            return self.spare.pop()
        else:
            workspace = Workspace(os.path.join(self.root, f"command-{len(self.workspaces)}"))
        self.workspaces.append(workspace)
        return workspace

    def _release(self, job: _Job) -> None:
        del self.running[job.index]
        if not self.command.keep_dirs:
            self.spare.append(job.workspace)

    def _in_turn(self) -> list[int]:
        """The finished samples that may go out now, in the order they go."""
        if not self.ordered:
            return sorted(self.done)
        ready: list[int] = []
        while self.next_out + len(ready) in self.done:
            ready.append(self.next_out + len(ready))
        return ready

    def _collect(self) -> None:
        """Wait until commands end or time out; their outcomes join ``done``."""
        ended, late = _wait_any(self.running.values())
        for job in ended + late:
            self._release(job)
            outcome = job.finish(timed_out=job in late)
            self.done[job.index] = (job.sample, outcome)  # type: ignore[assignment]

    def _stop_at_failure(self) -> Iterator[Sample]:
        """Under ``fail``, once a sample failed: kill every command still running, whatever
        its place; yield what had finished as far as it is contiguous; raise."""
        failed = [i for i, (_, outcome) in self.done.items() if outcome.rejection is not None]
        if not failed:
            return
        self.reading = False
        for job in list(self.running.values()):
            self._release(job)
            job.discard()
        first = min(failed)
        if self.ordered:
            while self.next_out in self.done and self.next_out < first:
                yield from self._results(*self.done.pop(self.next_out))
                self.next_out += 1
        else:
            for index in sorted(i for i in self.done if i != first):
                if self.done[index][1].rejection is None:
                    yield from self._results(*self.done.pop(index))
        yield from self._results(*self.done.pop(first))

    def _results(self, sample: Sample, outcome: SampleOutcome) -> Iterator[Sample]:
        """What a finished sample gives, by the policy; raises CommandFailed under ``fail``."""
        report = self.report
        if outcome.rejection is None:
            if outcome.row is not None:
                report.rows.append(outcome.row)
            for key, fields in outcome.outputs:
                report.samples_out += 1
                yield output_sample(key, fields, sample.source, self.mtime)
            return
        if self.on_error == "fail":
            raise CommandFailed(outcome.rejection, sample.source)
        report.rejected += 1
        if self.on_reject is not None:
            self.on_reject(outcome.rejection)
        if self.on_error == "keep":
            report.samples_out += 1
            yield sample

    def _finish(self, iterator: Iterator[Sample]) -> None:
        """Kill what still runs, remove the directories, close the input; every step is tried.

        A Ctrl-C or SIGTERM (any BaseException that is not an Exception) arriving
        meanwhile is held back until the cleanup is done.
        """
        from ..stream.stages import close_iterator

        interrupted: BaseException | None = None
        jobs = list(self.running.values())
        steps: list[Callable[[], object]] = [job.kill for job in jobs]
        steps += [job.discard for job in jobs]
        steps += [functools.partial(w.close, remove=False) for w in self.workspaces]
        if not self.command.keep_dirs:
            steps.append(functools.partial(remove_tree, self.root))
        steps.append(functools.partial(close_iterator, iterator))
        error: Exception | None = None
        for step in steps:
            while True:
                try:
                    step()
                    break
                except Exception as exc:
                    error = error or exc
                    break
                except BaseException as exc:
                    interrupted = interrupted or exc
        if interrupted is not None:
            raise interrupted
        if error is not None:
            raise error
