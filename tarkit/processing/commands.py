"""Map a shell command over samples: tarproc's per-sample execution model.

Each sample is unpacked into an empty private directory as one plain file per field,
``sample.<field>`` (``sample.jpg``, ``sample.seg.png``). ``bash -c COMMAND`` runs
there, in a session (process group) of its own, with ``TARKIT_KEY`` set to the
sample's key and stdin from ``/dev/null``. When it exits 0, the files ``sample.*`` it
leaves form the output sample, same key, fields in sorted order, new members with
tarkit's deterministic headers. With ``multi``, files ``sample-<part>.<field>`` form
one output sample per part instead, keyed ``<key>/<part>``, parts in sorted order.

A sample *fails* when its command exits non-zero, is killed by a signal, runs past
the timeout or leaves an output that is not a plain file. The policy decides:
``fail`` stops everything (running commands are killed) and raises
:class:`CommandFailed`; ``skip`` leaves the sample out and ``keep`` passes it through
unchanged, both reporting a :class:`Rejection`.

:func:`map_command` runs up to N commands at once and yields the output samples in
input order. It needs no threads: it starts each command with ``posix_spawn`` and
watches them all through pidfds from the calling thread; each of the N slots has a
:class:`Workspace` that is emptied and reused from one sample to the next.
:func:`run_sample` does one sample and is all another process needs.

Field names become file names, so a field that could escape the directory or be
mistaken for something else is rejected, not renamed:

>>> unsafe_field_reason("seg.png") is None
True
>>> unsafe_field_reason("../../etc/passwd")
"contains '/'"
>>> unsafe_field_reason("-rf")
"starts with '-'"
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import select
import shlex
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Union

from ..errors import InputError, TarkitError, UsageError
from ..format.samples import Sample
from ..format.tar import FILE, Member, default_mtime, encode_member

ON_ERROR = ("fail", "skip", "keep")
# Samples handed to the pool per worker: enough to keep every worker busy while the
# main thread writes, few enough that memory stays bounded on any stream.
IN_FLIGHT_PER_WORKER = 2
STDERR_TAIL_BYTES = 4096
STDERR_TAIL_LINES = 3
_FILE_FLAGS = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_LOG_FLAGS = os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_NAME_MAX = 255

FieldData = Union[bytes, memoryview]
OutputSample = tuple[str, list[tuple[str, bytes]]]


@dataclass(frozen=True)
class Command:
    """What runs on every sample, and how. Picklable, for use in other processes.

    ``timeout`` is in seconds (None: no limit). ``quiet`` drops the command's
    stdout and stderr instead of copying them to this process's stderr (the
    last lines of stderr still go into failure messages). ``keep_dirs`` keeps
    every sample's directory and its ``.stdout``/``.stderr`` logs.
    """

    text: str
    timeout: float | None = None
    multi: bool = False
    quiet: bool = False
    keep_dirs: bool = False

    def check(self) -> None:
        """Raise :class:`UsageError` for an empty command or a timeout that is not positive."""
        if not self.text.strip():
            raise UsageError("the command is empty")
        if self.timeout is not None and not self.timeout > 0:
            raise UsageError(f"the timeout must be positive (got {self.timeout})")


@dataclass(frozen=True)
class Rejection:
    """Why the command failed on one sample.

    ``status`` is short (``exit 3``, ``signal SIGSEGV``, ``timeout``, ``bad output``),
    ``reason`` one line (the last line of the command's stderr, or what was wrong),
    ``stderr`` the last few lines of its stderr, ``directory`` the kept directory.
    """

    key: str
    status: str
    reason: str
    stderr: tuple[str, ...] = ()
    directory: str | None = None

    def line(self) -> str:
        r"""The rejects-file line ``key<TAB>status<TAB>reason``, tabs and newlines escaped.

        >>> Rejection("a\tb", "exit 1", "no such file").line()
        'a\\tb\texit 1\tno such file'
        """
        from ..stream.tsv import escape

        return f"{escape(self.key)}\t{escape(self.status)}\t{escape(self.reason)}"

    def describe(self) -> str:
        """What happened, for a message: ``command exited with status 3: <stderr>``."""
        kind, _, detail = self.status.partition(" ")
        if kind == "exit":
            what = f"command exited with status {detail}"
        elif kind == "signal":
            what = f"command was killed by {detail}"
        elif kind == "timeout":
            what = f"command {self.reason}"
        else:
            what = f"command left {self.reason}"
        if self.stderr and kind in ("exit", "signal", "timeout"):
            what += ": " + " | ".join(self.stderr)
        if self.directory:
            what += f" (its directory is kept: {self.directory})"
        return what


class CommandFailed(TarkitError):
    """The command failed on a sample under the ``fail`` policy."""

    def __init__(self, rejection: Rejection, source: str) -> None:
        self.rejection = rejection
        self.source = source
        super().__init__(f"{source}: sample {rejection.key!r}: {rejection.describe()}")


@dataclass
class SampleOutcome:
    """What :func:`run_sample` returns: the output samples, or why there are none."""

    index: int
    key: str
    outputs: list[OutputSample] = field(default_factory=list)
    rejection: Rejection | None = None
    cancelled: bool = False


@dataclass
class ProcReport:
    """Counts of a :func:`map_command` run, filled in as it goes."""

    samples_in: int = 0
    samples_out: int = 0
    rejected: int = 0
    root: str | None = None


def unsafe_field_reason(field_name: str) -> str | None:
    """Why ``field_name`` cannot be a file name ``sample.<field>``, or None if it can.

    Unsafe: empty, containing ``/``, a NUL or another control character, starting
    with ``.`` or ``-``, or too long for a file name.

    >>> unsafe_field_reason("a\\nb")
    'contains a control character'
    >>> unsafe_field_reason("..")
    "starts with '.'"
    """
    if not field_name:
        return "is empty"
    if "/" in field_name:
        return "contains '/'"
    if any(ord(c) < 32 or ord(c) == 127 for c in field_name):
        return "contains a control character"
    if field_name[0] in ".-":
        return f"starts with {field_name[0]!r}"
    if len(os.fsencode("sample." + field_name)) > _NAME_MAX:
        return "is too long for a file name"
    return None


def check_fields(sample: Sample) -> None:
    """Raise :class:`InputError` naming the key if a field cannot be a file name."""
    for name, member in zip(sample.fields, sample.members, strict=True):
        why = unsafe_field_reason(name)
        if why is not None:
            raise InputError(
                f"sample {sample.key!r}: field name {name!r} {why}: unsafe as a file "
                "name, so the sample is refused (tarproc never renames fields)",
                source=sample.source,
                offset=member.offset,
                member=member.name,
            )


def make_root(tmpdir: str | None = None) -> str:
    """Create a private (mode 0700) directory for samples' directories; returns its path."""
    return tempfile.mkdtemp(prefix="tarproc-", dir=tmpdir)


_bash: str | None = None


def _bash_path() -> str:
    global _bash
    if _bash is None:
        _bash = shutil.which("bash") or "/bin/bash"
    return _bash


class Workspace:
    """A private directory where commands run one sample at a time, with their logs.

    ``directory`` (mode 0700) holds a sample's files while its command runs; the
    command's stdout and stderr go to ``<directory>.stdout`` and ``.stderr`` beside
    it. :meth:`clear` empties all three for the next sample: emptying is cheaper than
    a new directory (removing a directory can cost more than running ``true`` on a
    busy ext4), and a command cannot tell the difference.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.paths = (directory + ".stdout", directory + ".stderr")
        self.fds: tuple[int, int] = (-1, -1)
        os.mkdir(directory, 0o700)
        fds: list[int] = []
        try:
            for path in self.paths:
                # Append mode: once a log is emptied, the command's writes start at 0.
                fds.append(os.open(path, _LOG_FLAGS, 0o600))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        self.fds = (fds[0], fds[1])

    def clear(self, names: list[str] | None = None) -> None:
        """Empty the directory (``names``: what it holds, if just listed) and the logs."""
        for fd in self.fds:
            if os.fstat(fd).st_size:
                os.ftruncate(fd, 0)
        try:
            if names is None:
                names = os.listdir(self.directory)
            for name in names:
                os.unlink(os.path.join(self.directory, name))
        except OSError:
            # A subdirectory, or permissions the command changed: start afresh.
            remove_tree(self.directory)
            os.mkdir(self.directory, 0o700)

    def forward(self) -> None:
        """Copy stdout, then stderr, to this process's stderr, as one block."""
        for fd in self.fds:
            offset = 0
            while True:
                chunk = os.pread(fd, 1 << 16, offset)
                if not chunk:
                    break
                offset += len(chunk)
                try:
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(2, view) :]
                except OSError:
                    return  # our stderr is gone: nothing to forward to

    def stderr_tail(self) -> list[str]:
        """The last few non-empty lines of stderr, each cut to 300 characters."""
        fd = self.fds[1]
        size = os.fstat(fd).st_size
        start = max(0, size - STDERR_TAIL_BYTES)
        text = os.pread(fd, size - start, start).decode("utf-8", "replace")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if start and lines:
            lines = lines[1:]  # the first one is probably cut
        return [line[:300] for line in lines[-STDERR_TAIL_LINES:]]

    def close(self, remove: bool) -> None:
        """Close the logs; with ``remove``, delete everything."""
        for fd in self.fds:
            if fd >= 0:
                os.close(fd)
        self.fds = (-1, -1)
        if remove:
            for path in self.paths:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            remove_tree(self.directory)


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
            for field_name, data in fields:
                _write_file(os.path.join(self.directory, "sample." + field_name), data)
            env["TARKIT_KEY"] = key
            # A Ctrl-C or SIGTERM between the start and the registration would leave
            # a command nobody kills: hold them back for that moment.
            with _signals_held():
                self.pid = spawn(command.text, self.directory, env, workspace.fds)
                registry[index] = self
                if _ledger.wanted:
                    _ledger.enter(self.pid)
        except BaseException:
            self._clear()
            raise
        self.deadline = None if command.timeout is None else time.monotonic() + command.timeout
        with contextlib.suppress(AttributeError, OSError):
            self.pidfd = os.pidfd_open(self.pid)

    def exited(self, ready: set[int]) -> bool:
        """Whether the command has ended: its pidfd is in ``ready``, or else it is reaped."""
        if self.pidfd >= 0:
            return self.pidfd in ready
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid:
            self.reaped, self.code = True, os.waitstatus_to_exitcode(status)
        return self.reaped

    def kill(self) -> None:
        """Kill the command's whole process group (while its leader is not reaped)."""
        if self.pid and not self.reaped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)

    def _reap(self) -> int:
        self.kill()  # what the command left running in its group goes too
        if not self.reaped:
            while True:
                try:
                    _, status = os.waitpid(self.pid, 0)
                    break
                except InterruptedError:
                    continue
            self.reaped, self.code = True, os.waitstatus_to_exitcode(status)
            if _ledger.wanted:
                _ledger.leave(self.pid)
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
            status = _status(code, timed_out)
            if status:
                stderr = self.workspace.stderr_tail()
                reason = stderr[-1] if stderr else "no output on stderr"
                if timed_out:
                    reason = f"ran longer than {command.timeout:g} s (--timeout) and was killed"
                outcome.rejection = Rejection(self.key, status, reason, tuple(stderr), kept)
                return outcome
            self.names = os.listdir(self.directory)
            outputs, problem = collect_outputs(self.directory, self.key, command.multi, self.names)
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
    ``directory`` itself before the command (same line, so line numbers in bash's
    messages are the command's).
    """
    script = f"cd -- {shlex.quote(directory)} || exit 126; {text}"
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


def _status(code: int, timed_out: bool) -> str:
    if timed_out:
        return "timeout"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return "" if code == 0 else f"exit {code}"


_devnull_fd = -1


def _devnull() -> int:
    global _devnull_fd
    if _devnull_fd < 0:
        _devnull_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    return _devnull_fd


def _write_file(path: str, data: FieldData) -> None:
    fd = os.open(path, _FILE_FLAGS, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def remove_tree(directory: str) -> None:
    """Remove a directory and everything in it, even what a command made unwritable."""
    try:
        with os.scandir(directory) as entries:
            names = [entry.name for entry in entries]
        for name in names:
            os.unlink(os.path.join(directory, name))
        os.rmdir(directory)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass  # a subdirectory, or permissions the command changed

    # Make every directory below writable again (links are not followed), then remove.
    with contextlib.suppress(OSError):
        os.chmod(directory, 0o700)
    for path, subdirectories, _ in os.walk(directory):
        for name in subdirectories:
            subdirectory = os.path.join(path, name)
            if not os.path.islink(subdirectory):
                with contextlib.suppress(OSError):
                    os.chmod(subdirectory, 0o700)
    shutil.rmtree(directory, ignore_errors=True)


def collect_outputs(
    directory: str, key: str, multi: bool, listing: list[str] | None = None
) -> tuple[list[OutputSample], str | None]:
    """The output samples a command left in ``directory``, or (``[]``, what is wrong).

    ``sample.<field>`` files form one sample ``key``; with ``multi``,
    ``sample-<part>.<field>`` files form one sample ``key/part`` per part instead.
    Other files are ignored. A matching name that is not a regular file (a link, a
    directory), or a field that comes twice ignoring case, is a problem. ``listing``
    is the directory's content if the caller has just listed it.
    """
    prefix = "sample-" if multi else "sample."
    parts: dict[str, list[tuple[str, bytes]]] = {}
    if listing is None:
        listing = os.listdir(directory)
    for name in listing:
        if not name.startswith(prefix):
            continue
        if multi:
            part, dot, field_name = name[len(prefix) :].partition(".")
            if not part or not dot or not field_name:
                return [], f"an output file {name!r} that is not sample-<part>.<field>"
        else:
            part, field_name = "", name[len(prefix) :]
            if not field_name:
                return [], f"an output file {name!r} without a field name"
        try:
            data = _read_regular(os.path.join(directory, name))
        except OSError as exc:
            return [], f"an output {name!r} that cannot be read ({exc.strerror})"
        if data is None:
            return [], f"an output {name!r} that is not a regular file"
        parts.setdefault(part, []).append((field_name, data))
    outputs: list[OutputSample] = []
    for part in sorted(parts):
        fields = sorted(parts[part])
        if len({f.lower() for f, _ in fields}) != len(fields):
            listed = ", ".join(f for f, _ in fields)
            return [], f"output fields that differ only in case ({listed})"
        outputs.append((f"{key}/{part}" if multi else key, fields))
    return outputs, None


def _read_regular(path: str) -> bytes | None:
    """The content of a regular file; None for anything else, symbolic links included."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):  # a symbolic link, a socket
            return None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        # The command and its process group are gone: the size is final.
        data = os.read(fd, info.st_size) if info.st_size else b""
        while len(data) < info.st_size:  # reads stop at 2 GiB
            chunk = os.read(fd, info.st_size - len(data))
            if not chunk:
                break
            data += chunk
        return data
    finally:
        os.close(fd)


def run_sample(
    command: Command, index: int, key: str, fields: Sequence[tuple[str, FieldData]], root: str
) -> SampleOutcome:
    """Run ``command`` on one sample in a fresh directory ``root/<index>``; wait for it.

    ``fields`` are (field, bytes) pairs whose names passed :func:`unsafe_field_reason`
    (see :func:`check_fields`). Returns the output samples (key, sorted (field, bytes)
    pairs), or a :class:`Rejection` when the command failed: never raises for a
    failure of the command; raises OSError when the directory cannot be written.
    Everything is removed before returning unless ``command.keep_dirs``; an exception
    (KeyboardInterrupt included) kills the command first. Usable in any process.
    """
    workspace = Workspace(os.path.join(root, f"{index:06d}"))
    registry: dict[int, _Job] = {}
    try:
        _Job(command, index, None, key, fields, workspace, dict(os.environ), registry)
        job = registry[index]
        return job.finish(timed_out=not _wait_for(job))
    except BaseException:
        for job in registry.values():
            job.discard()
        raise
    finally:
        workspace.close(remove=not command.keep_dirs)


def _wait_for(job: _Job) -> bool:
    """Wait until ``job`` ends (True) or reaches its deadline (False)."""
    while True:
        ended, late = _wait_any([job])
        if ended:
            return True
        if late:
            return False


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


def output_sample(key: str, fields: list[tuple[str, bytes]], source: str, mtime: int) -> Sample:
    """A :class:`Sample` of new members ``key.field`` with deterministic headers."""
    members = []
    for field_name, data in fields:
        name = f"{key}.{field_name}"
        raw = encode_member(name, data, mtime=mtime)
        start = len(raw) - len(data) - (-len(data) % 512)
        members.append(Member(name, FILE, len(data), 0, raw, start))
    return Sample(key, [f for f, _ in fields], members, source)


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
    order of completion when unordered), and raises :class:`CommandFailed`; ``"skip"``
    leaves it out and ``"keep"`` yields it unchanged, both calling ``on_reject`` in
    output order. A field name unsafe as a file name raises
    :class:`~tarkit.errors.InputError`; that and any other error reading ``samples``
    is raised once the samples before it are out.

    Samples' directories live in a private directory under ``tmpdir`` (default
    ``$TMPDIR``), named in ``report.root`` once the generator has started. It is
    removed when the generator finishes or is closed (close it to stop early: running
    commands are killed), unless ``command.keep_dirs``. Runs in the calling thread:
    the commands are the only other processes.
    """
    command.check()
    if on_error not in ON_ERROR:
        raise UsageError(f"on_error must be one of {', '.join(ON_ERROR)} (got {on_error!r})")
    if parallel < 1:
        raise UsageError(f"the number of parallel commands must be at least 1 (got {parallel})")
    report = report if report is not None else ProcReport()
    return _map(samples, command, parallel, ordered, on_error, on_reject, report, tmpdir)


def _map(
    samples: Iterable[Sample], command: Command, parallel: int, ordered: bool, on_error: str,
    on_reject: Callable[[Rejection], object] | None, report: ProcReport, tmpdir: str | None,
) -> Iterator[Sample]:  # fmt: skip
    root = report.root = make_root(tmpdir if tmpdir is not None else _ledger.directory())
    mtime = default_mtime()
    env = dict(os.environ)
    limit = parallel * IN_FLIGHT_PER_WORKER
    # Each running command has a workspace, reused from one sample to the next
    # (except with keep_dirs, where each sample keeps its own).
    spare: list[Workspace] = []
    workspaces: list[Workspace] = []
    running: dict[int, _Job] = {}
    done: dict[int, tuple[Sample, SampleOutcome]] = {}
    iterator = iter(samples)
    reading = True
    next_out = 0  # ordered: the index of the next sample to go out
    input_error: TarkitError | None = None

    def workspace_for(index: int) -> Workspace:
        if command.keep_dirs:
            workspace = Workspace(os.path.join(root, f"{index:06d}"))
        elif spare:
            return spare.pop()
        else:
            workspace = Workspace(os.path.join(root, f"command-{len(workspaces)}"))
        workspaces.append(workspace)
        return workspace

    def release(job: _Job) -> None:
        del running[job.index]
        if not command.keep_dirs:
            spare.append(job.workspace)

    def results(sample: Sample, outcome: SampleOutcome) -> Iterator[Sample]:
        if outcome.rejection is None:
            for key, fields in outcome.outputs:
                report.samples_out += 1
                yield output_sample(key, fields, sample.source, mtime)
            return
        if on_error == "fail":
            raise CommandFailed(outcome.rejection, sample.source)
        report.rejected += 1
        if on_reject is not None:
            on_reject(outcome.rejection)
        if on_error == "keep":
            report.samples_out += 1
            yield sample

    try:
        while True:
            while reading and len(running) < parallel and len(running) + len(done) < limit:
                try:
                    sample = next(iterator, None)
                    if sample is not None:
                        check_fields(sample)
                except TarkitError as error:
                    # Like every tool: the samples before the bad input still go out.
                    input_error, reading = error, False
                    break
                if sample is None:
                    reading = False
                    break
                fields = [
                    (f, memoryview(m.raw)[m.data_start : m.data_start + m.size])
                    for f, m in zip(sample.fields, sample.members, strict=True)
                ]
                index = report.samples_in
                report.samples_in += 1
                _Job(command, index, sample, sample.key, fields, workspace_for(index), env, running)
            if ordered and next_out in done:
                while next_out in done:
                    yield from results(*done.pop(next_out))
                    next_out += 1
                continue
            if not ordered and done:
                for index in sorted(done):
                    yield from results(*done.pop(index))
                continue
            if not running:
                if input_error is not None:
                    raise input_error
                break
            ended, late = _wait_any(running.values())
            for job in ended + late:
                release(job)
                outcome = job.finish(timed_out=job in late)
                done[job.index] = (job.sample, outcome)  # type: ignore[assignment]
            if on_error != "fail":
                continue
            failed = [i for i, (_, outcome) in done.items() if outcome.rejection is not None]
            if failed:
                # Stop now: every command still running is killed, whatever its place.
                # What had finished goes out as far as it is contiguous; then the error.
                reading = False
                for job in list(running.values()):
                    release(job)
                    job.discard()
                first = min(failed)
                if ordered:
                    while next_out in done and next_out < first:
                        yield from results(*done.pop(next_out))
                        next_out += 1
                else:
                    for index in sorted(i for i in done if i != first):
                        if done[index][1].rejection is None:
                            yield from results(*done.pop(index))
                yield from results(*done.pop(first))
    finally:
        _finish(running, workspaces, root, command.keep_dirs, iterator)


def _finish(
    running: dict[int, _Job],
    workspaces: list[Workspace],
    root: str,
    keep: bool,
    iterator: object,
) -> None:
    """Kill what still runs, remove the directories, close the input; every step is tried.

    A Ctrl-C or SIGTERM (any BaseException that is not an Exception) arriving
    meanwhile is held back until the cleanup is done.
    """
    from ..stream.stages import close_iterator

    interrupted: BaseException | None = None
    jobs = list(running.values())
    steps: list[Callable[[], object]] = [job.kill for job in jobs]
    steps += [job.discard for job in jobs]
    steps += [functools.partial(w.close, remove=False) for w in workspaces]
    if not keep:
        steps.append(functools.partial(remove_tree, root))
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


# ---------------------------------------------------------------------------------------
# Commands a dead process left behind


class _Ledger:
    """Where a map worker records the commands it runs, for when it is killed.

    A command runs in a session of its own, so it outlives a worker killed by SIGKILL
    (or the out-of-memory killer), and so does the worker's private directory. A process
    that called :func:`record_commands` keeps a ledger: a directory
    ``$TMPDIR/tarkit-commands-<uid>/<pid namespace>-<pid>-<start time>/`` holding its
    private directories and one file per running command, named by the command's
    process group id and holding the start time of its leader, removed once the group
    is killed and reaped. :func:`sweep_ledgers` (in any process of the machine) kills
    the groups and removes the ledgers of processes that are gone.
    """

    def __init__(self) -> None:
        self.wanted = False
        self.base: str | None = None
        self.path: str | None = None
        self.owner = 0  # the process the ledger is of (not a child forked since)

    def directory(self) -> str | None:
        """This process's ledger (created on first use), or None when not recording."""
        if not self.wanted:
            return None
        if self.owner != os.getpid():
            self.path, self.owner = None, os.getpid()
        if self.path is None:
            base, me = self.base, _ledger_name(os.getpid())
            if base is None or me is None:
                self.wanted = False
                return None
            for _ in range(3):  # another process may remove the empty base meanwhile
                try:
                    _private_directory(base)
                    os.mkdir(os.path.join(base, me), 0o700)
                    break
                except FileNotFoundError:
                    continue
                except OSError:
                    self.wanted = False  # not ours, or no room: run without a ledger
                    return None
            else:
                self.wanted = False
                return None
            self.path = os.path.join(base, me)
        return self.path

    def enter(self, pid: int) -> None:
        """Record the command whose group is ``pid`` (it runs and is not reaped)."""
        directory, start = self.directory(), _start_time(pid, zombies=True)
        if directory is None or start is None:
            return
        with contextlib.suppress(OSError):
            _write_file(os.path.join(directory, str(pid)), start.encode())

    def leave(self, pid: int) -> None:
        """Forget the command whose group is ``pid`` (killed and reaped)."""
        if self.path is not None and self.owner == os.getpid():
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.path, str(pid)))

    def close(self) -> None:
        """Remove this process's ledger (and the base directory if it is then empty)."""
        if self.path is not None and self.owner == os.getpid():
            remove_tree(self.path)
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(self.path))
        self.path = None


_ledger = _Ledger()


def record_commands(base: str | None = None) -> None:
    """From now on, keep a ledger of this process's commands (see :class:`_Ledger`).

    For processes that may die without cleaning up (map workers): their commands and
    directories are then found and removed by :func:`sweep_ledgers` (give it the same
    ``base``; default :func:`ledger_base`). The ledger is removed when this process
    exits normally. Without ``/proc`` this does nothing.
    """
    if _ledger.wanted:
        return
    _ledger.base = base or ledger_base()
    _ledger.wanted = _ledger.base is not None
    if _ledger.wanted:
        import atexit

        atexit.register(_ledger.close)


def stop_recording() -> None:
    """Stop keeping a ledger; remove it (its commands are all reaped by now)."""
    _ledger.close()
    _ledger.wanted = False


def sweep_ledgers(base: str | None = None) -> int:
    """Kill the commands and remove the directories of dead processes' ledgers.

    Only ledgers of this user and this PID namespace whose process is gone (or a
    zombie) are touched. A group is killed unless its leader's process id now belongs
    to another process (a different start time): while any member of the group lives,
    its id cannot be reused. Returns the number of ledgers removed; never raises.
    """
    base = base or ledger_base()
    if base is None:
        return 0
    try:
        _private_directory(base, create=False)  # records in it name what to kill
        names = os.listdir(base)
    except OSError:
        return 0
    namespace = _pid_namespace()
    swept = 0
    for name in names:
        owner, _, rest = name.partition("-")
        pid, _, start = rest.partition("-")
        if owner != namespace or not pid.isdigit() or _start_time(int(pid)) == start:
            continue  # another namespace's, or its process lives
        ledger = os.path.join(base, name)
        try:
            entries = os.listdir(ledger)
        except OSError:
            continue
        for entry in entries:
            if entry.isdigit():
                _kill_recorded(int(entry), os.path.join(ledger, entry))
        remove_tree(ledger)
        swept += 1
    with contextlib.suppress(OSError):
        os.rmdir(base)  # only when empty
    return swept


def _kill_recorded(group: int, record: str) -> None:
    try:
        with open(record, "rb") as file:
            recorded = file.read().decode("ascii", "replace")
    except OSError:
        return
    now = _start_time(group, zombies=True)
    if now is not None and now != recorded:
        return  # the id was reused: the group is gone
    with contextlib.suppress(OSError):
        os.killpg(group, signal.SIGKILL)


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            text = file.read().decode("ascii", "replace")
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()  # after the name, which may hold anything


def _start_time(pid: int, zombies: bool = False) -> str | None:
    """The start time of a live process (clock ticks after boot), None if gone or a zombie."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20 or (fields[0] in ("Z", "X") and not zombies):
        return None
    return fields[19]


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def _ledger_name(pid: int) -> str | None:
    start = _start_time(pid)
    return None if start is None else f"{_pid_namespace()}-{pid}-{start}"


def ledger_base() -> str | None:
    """Where ledgers go: ``$TMPDIR/tarkit-commands-<uid>``; None without ``/proc``."""
    if not os.path.isdir("/proc/self"):
        return None
    return os.path.join(tempfile.gettempdir(), f"tarkit-commands-{os.getuid()}")


def _private_directory(path: str, create: bool = True) -> None:
    """Create ``path`` (mode 0700) or check it is a directory of this user, private."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f"{path} is not a private directory of this user")
