"""What a command leaves running outside its process group: marked, adopted, killed.

A command runs in a session of its own, and killing its process group kills what stayed
in that group. A process it started that calls ``setsid`` (``setsid cmd &``, a daemon)
leaves the group; two things let tarkit find it all the same:

- a *mark*: every command starts with ``TARKIT_COMMAND=<owner>/<run>/<sample>/`` in its
  environment (:func:`command_mark`), which every process it starts inherits; ``owner``
  names the process that ran it (its PID namespace, id and start time: :func:`identity`).
  A command run by a command's tarproc has both marks, space-separated (:func:`marks_value`);
- *adoption*: while commands run, the process running them is a child subreaper (Linux's
  ``PR_SET_CHILD_SUBREAPER``, :func:`adopting`), so a process whose parent dies becomes
  its child rather than init's, and everything a command started stays below it.

:func:`kill_marked` then kills a command's leftovers by reading only the marks of the
adopted processes (cheap: usually there are none); :func:`kill_marked_anywhere` reads
every process of the machine, for the crash ledger, whose dead owner adopted nothing.

What escapes: a process that clears or rewrites its environment (``env -i``,
``setproctitle``) or whose environment cannot be read (a non-dumpable one, like
``ssh-agent``) *and* leaves the command's session. :func:`kill_marked` reports such
strangers, so that no directory they may still write into is reused. A cgroup would
catch them; tarkit creates none (most users may not). Without ``/proc`` (not Linux),
nothing here does anything.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
from collections.abc import Callable, Collection, Iterator
from typing import cast

MARK = "TARKIT_COMMAND"
_ROUNDS = 100  # of finding and killing: each round kills what the last one's forked

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def _read(path: str) -> bytes | None:
    """The content of a file of /proc (None if it cannot be read: the process is gone).

    Plain ``os.read`` calls: a command's end reads a few of these, and Python's file
    objects would double the cost.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the name (state, ppid, pgrp, session…)."""
    data = _read(f"/proc/{pid}/stat")
    if data is None:
        return None
    text = data.decode("ascii", "replace")
    return text.rsplit(")", 1)[-1].split()  # after the name, which may hold anything


def start_time(pid: int, zombies: bool = False) -> str | None:
    """The start time of a live process (clock ticks after boot), None if gone or a zombie."""
    fields = stat_fields(pid)
    if fields is None or len(fields) < 20 or (fields[0] in ("Z", "X") and not zombies):
        return None
    return fields[19]


def pid_namespace() -> str:
    """This process's PID namespace (the inode of /proc/self/ns/pid; "0" if unknown)."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def identity(pid: int) -> str | None:
    """``<pid namespace>-<pid>-<start time>``: names a process once in the machine's
    uptime (None if it is gone). Ledgers and marks are named by it."""
    start = start_time(pid)
    return None if start is None else f"{pid_namespace()}-{pid}-{start}"


@functools.cache
def _own_identity(pid: int) -> str:
    return identity(pid) or f"0-{pid}-0"


def run_mark(run: int) -> str:
    """The start of the marks of this process's commands of its map number ``run``:
    ``<identity>/<run>/``."""
    return f"{_own_identity(os.getpid())}/{run}/"


def command_mark(run: int, index: int) -> str:
    """The mark of this process's command on sample ``index`` of its map number ``run``.

    It ends with ``/``, as does every prefix :func:`kill_marked` takes (the owner's
    ``<identity>/``, a run's :func:`run_mark`), so that no mark starts with another.
    """
    return f"{run_mark(run)}{index}/"


def marks_value(mark: str) -> str:
    """What ``TARKIT_COMMAND`` holds for a command marked ``mark``: the marks this
    process inherited (a tarproc run by a command) and ``mark``, space-separated, so that
    the outer command's leftovers include the inner one's."""
    inherited = os.environ.get(MARK)
    return f"{inherited} {mark}" if inherited else mark


# --- the kernel's process controls ------------------------------------------------------


_Prctl = Callable[[int, int, int, int, int], int]


@functools.cache
def _prctl() -> _Prctl | None:
    """libc's ``prctl``; None where there is none (not Linux)."""
    try:
        import ctypes

        function = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    function.restype = ctypes.c_int
    return cast(_Prctl, function)


def _call_prctl(option: int, argument: int) -> bool:
    function = _prctl()
    return function is not None and function(option, argument, 0, 0, 0) == 0


def die_with_parent(signum: int) -> bool:
    """Have the kernel send ``signum`` to this process when its parent dies (Linux's
    ``PR_SET_PDEATHSIG``); False where it cannot.

    The signal comes when the *thread* that started this process ends, and only for the
    parent as it is now: a watchdog is still needed (see :mod:`tarkit.engines.local`).
    """
    return _call_prctl(_PR_SET_PDEATHSIG, signum)


def _is_subreaper() -> bool:
    import ctypes

    value = ctypes.c_int(0)
    return _call_prctl(_PR_GET_CHILD_SUBREAPER, ctypes.addressof(value)) and bool(value.value)


class _Adoption:
    """How many runs of commands in this process want orphans adopted."""

    lock = threading.Lock()
    runs = 0
    ours = False  # this module made the process a subreaper (so it may unmake it)


@contextlib.contextmanager
def adopting() -> Iterator[None]:
    """Make this process a child subreaper for the duration of the ``with`` block.

    Commands started meanwhile leave their orphans to this process (not init): each
    command's end must then :func:`kill_marked` and reap them. Nested and concurrent
    blocks share it; the last one out restores the process as it was.
    """
    with _Adoption.lock:
        if _Adoption.runs == 0 and not _is_subreaper():
            _Adoption.ours = _call_prctl(_PR_SET_CHILD_SUBREAPER, 1)
        _Adoption.runs += 1
    try:
        yield
    finally:
        with _Adoption.lock:
            _Adoption.runs -= 1
            if _Adoption.runs == 0 and _Adoption.ours:
                _call_prctl(_PR_SET_CHILD_SUBREAPER, 0)
                _Adoption.ours = False


# --- finding and killing ----------------------------------------------------------------


def _children(pid: int) -> list[int]:
    """The children of process ``pid`` (of all its threads)."""
    if not _children_listed():
        return _children_by_scan(pid)
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    children: list[int] = []
    for thread in threads:
        listed = _read(f"/proc/{pid}/task/{thread}/children")  # None: the thread ended
        if listed:
            children += [int(child) for child in listed.split()]
    return children


@functools.cache
def _children_listed() -> bool:
    """Whether the kernel lists children in /proc (``CONFIG_PROC_CHILDREN``)."""
    return os.path.exists(f"/proc/self/task/{os.getpid()}/children")


def _children_by_scan(pid: int) -> list[int]:
    parent = str(pid)
    children = []
    for name in _pids():
        fields = stat_fields(name)
        if fields is not None and len(fields) > 1 and fields[1] == parent:
            children.append(name)
    return children


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _mark(pid: int) -> bytes | None:
    """The value of the process's ``TARKIT_COMMAND``: its marks, space-separated (None:
    none, or unreadable)."""
    environ = _read(f"/proc/{pid}/environ")
    if environ is None:
        return None
    environ = b"\0" + environ
    name = b"\0" + MARK.encode() + b"="
    start = environ.find(name)
    if start < 0:
        return None
    start += len(name)
    end = environ.find(b"\0", start)
    return environ[start : end if end >= 0 else len(environ)]


class _Killer:
    """Kills processes whose mark starts with a prefix, each through a pidfd where the
    kernel has them, so that a process id reused meanwhile is never hit."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix.encode()
        self.killed: set[int] = set()

    def consider(self, pid: int) -> bool | None:
        """Kill ``pid`` if it carries the mark: True; None if it has no readable mark."""
        if pid in self.killed:
            return True
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        except (AttributeError, OSError):
            pidfd = -1
        try:
            mark = _mark(pid)  # read after the pidfd was opened: of the same process
            if mark is None:
                return None
            if not any(one.startswith(self.prefix) for one in mark.split()):
                return False
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if pidfd >= 0:
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
            self.killed.add(pid)
            return True
        finally:
            if pidfd >= 0:
                os.close(pidfd)


def kill_marked(prefix: str, spare: Collection[int] = ()) -> tuple[int, int]:
    """Kill the processes below this one whose mark starts with ``prefix``; reap the
    adopted ones that are dead. The children in ``spare`` (the commands still running,
    which their caller reaps) and what is below them are not touched.

    Returns (processes killed, strangers): a stranger is a process below this one, out
    of this process's session, whose mark is missing or unreadable, and which may be
    what a command left (see the module's docstring). Never raises.
    """
    killer = _Killer(prefix)
    session = os.getsid(0)
    strangers = 0
    for _ in range(_ROUNDS):
        before = len(killer.killed)
        strangers = 0
        below = [child for child in _children(os.getpid()) if child not in spare]
        if not below:
            return len(killer.killed), 0  # the usual case: nothing adopted, nothing to reap
        while below:
            pid = below.pop()
            if killer.consider(pid) is None:
                fields = stat_fields(pid)
                if fields is not None and fields[0] not in ("Z", "X") and fields[3] != str(session):
                    strangers += 1
            below += _children(pid)
        if len(killer.killed) == before:
            break
    reap_adopted(spare)
    return len(killer.killed), strangers


def kill_marked_anywhere(prefix: str) -> int:
    """Kill every process of the machine (that this user may see) whose mark starts with
    ``prefix``; returns how many. Reads every process's environment: for rare events
    (a dead process's ledger swept), not for every command."""
    killer = _Killer(prefix)
    me = os.getpid()
    for _ in range(_ROUNDS):
        before = len(killer.killed)
        for pid in _pids():
            if pid != me:
                killer.consider(pid)
        if len(killer.killed) == before:
            break
    return len(killer.killed)


def reap_adopted(spare: Collection[int] = ()) -> None:
    """Reap this process's dead children that it adopted: those out of its session, but
    ``spare`` (commands their caller reaps). The children it starts itself otherwise
    (``pipe:`` inputs) stay in its session, for their own ``wait``."""
    session = str(os.getsid(0))
    for child in _children(os.getpid()):
        if child in spare:
            continue
        fields = stat_fields(child)
        if fields is not None and fields[0] == "Z" and len(fields) > 3 and fields[3] != session:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(child, os.WNOHANG)
