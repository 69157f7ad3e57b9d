"""The crash ledger: what a worker's commands leave behind, should the worker be killed.

Every engine's worker process calls :func:`record_commands`. Every command that the
code it runs starts (through the command supervisor of :mod:`tarkit.processing`) then
records itself in the ledger before it does anything else (:func:`recording_line`); the
supervisor forgets it once its group is killed (:func:`forget_command`); and
:func:`sweep_ledgers` (the local engine's driver, each Ray task) kills the commands, and
what they left in sessions of their own (by their mark: :mod:`.leftovers`), and removes
the directories of workers that are gone. See :class:`_Ledger` for the layout.
A ledger, and a worker's private directory in it, is removed with
:func:`~tarkit.storage.scratch.remove_tree`, as the command workspaces are.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import stat
import tempfile

from ..storage.scratch import remove_tree
from .leftovers import identity, kill_marked_anywhere, pid_namespace, start_time


class _Ledger:
    """Where a map worker records the commands it runs, for when it is killed.

    A command runs in a session of its own, so it outlives a worker killed by SIGKILL
    (or the out-of-memory killer), and so does the worker's private directory. A process
    that called :func:`record_commands` keeps a ledger: a directory
    ``$TMPDIR/tarkit-commands-<uid>/<pid namespace>-<pid>-<start time>/`` holding its
    private directories and one empty file per running command, named
    ``<process group id>.<start time of its leader>`` (made in one step by the command
    itself: :func:`recording_line`), removed once the group is killed.
    :func:`sweep_ledgers` (in any process of the machine) kills the groups and removes
    the ledgers of processes that are gone.
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
            base, me = self.base, identity(os.getpid())
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

    def leave(self, pid: int) -> None:
        """Forget the command whose group is ``pid`` (killed, and not reaped yet: its
        start time is read from ``/proc``)."""
        if self.path is not None and self.owner == os.getpid():
            start = start_time(pid, zombies=True)
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.path, f"{pid}.{start}"))

    def close(self) -> None:
        """Remove this process's ledger (and the base directory if it is then empty)."""
        if self.path is not None and self.owner == os.getpid():
            remove_tree(self.path)
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(self.path))
        self.path = None


_ledger = _Ledger()


def ledger_directory() -> str | None:
    """This process's ledger directory (created on first use), or None when not recording."""
    return _ledger.directory()


def recording_line() -> str:
    """Shell text for a command's shell to run first when this process keeps a ledger
    (else ``""``): the shell records its process group (its own id, as it leads a new
    session) and its start time, and exits with status 126 without running the command
    when it cannot: when its worker was killed and the ledger swept, or the disk is full.

    The command records itself, rather than its worker after starting it, so that no
    moment exists in which a killed worker leaves a command running unrecorded. The
    record is a file created empty, named by both numbers: it appears whole or not at all.
    """
    directory = _ledger.directory()
    if directory is None:
        return ""
    # The fields after the name in /proc/$$/stat, as stat_fields splits them.
    return (
        "read -r __tarkit_stat < /proc/$$/stat && __tarkit_stat=(${__tarkit_stat##*)}) && "
        f': > {shlex.quote(directory)}/$$."${{__tarkit_stat[19]}}" || exit 126; '
        "unset __tarkit_stat; "
    )


def forget_command(pid: int) -> None:
    """Forget the command whose process group is ``pid``, when recording: once its group
    is killed, before it is reaped."""
    if _ledger.wanted:
        _ledger.leave(pid)


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


def kill_own_commands() -> None:
    """Kill the commands this process runs and what they left, remove its directories,
    as a sweep does once it is dead: for a process about to end without unwinding."""
    if _ledger.path is not None and _ledger.owner == os.getpid():
        _sweep(_ledger.path)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(_ledger.path))  # only when empty
        _ledger.path = None


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
    namespace = pid_namespace()
    swept = 0
    for name in names:
        ledger = os.path.join(base, name)
        if not name.endswith(_SWEEPING):
            owner, _, rest = name.partition("-")
            pid, _, start = rest.partition("-")
            if owner != namespace or not pid.isdigit() or start_time(int(pid)) == start:
                continue  # another namespace's, or its process lives
            # Renamed first, so a command starting now can no longer record itself in
            # it (and exits unrun): every command it holds is in the listing below.
            try:
                os.rename(ledger, ledger + _SWEEPING)
            except OSError:
                continue  # another sweep took it
            ledger += _SWEEPING
        elif not name.startswith(namespace + "-"):
            continue  # left by another namespace's sweep that was killed
        _sweep(ledger)
        swept += 1
    with contextlib.suppress(OSError):
        os.rmdir(base)  # only when empty
    return swept


_SWEEPING = ".sweeping"  # a ledger being swept (or left by a sweep that was killed)


def _sweep(ledger: str) -> None:
    """Kill the groups recorded in a renamed ``ledger`` and remove it.

    A command whose shell found the ledger just before it was renamed may still add its
    record after the listing: the ledger is then not empty once what was listed is
    removed, and is listed again.
    Then the processes the commands left in sessions of their own, found by their mark
    (:mod:`~tarkit.engines.leftovers`), are killed too.
    """
    owner = os.path.basename(ledger).removesuffix(_SWEEPING)
    for round in range(_SWEEP_ROUNDS):
        try:
            entries = os.listdir(ledger)
        except OSError:
            return  # another sweep removed it
        for entry in entries:
            path = os.path.join(ledger, entry)
            group, dot, start = entry.partition(".")
            if dot and group.isdigit() and start.isdigit():
                _kill_recorded(int(group), start)
            try:
                os.unlink(path)
            except IsADirectoryError:
                remove_tree(path)  # a private directory of the worker
            except OSError:
                pass
        if round == 0:
            kill_marked_anywhere(owner + "/")
        try:
            os.rmdir(ledger)
            return
        except FileNotFoundError:
            return
        except OSError:
            continue  # a record came meanwhile
    remove_tree(ledger)


_SWEEP_ROUNDS = 5


def _kill_recorded(group: int, start: str) -> None:
    now = start_time(group, zombies=True)
    if now is not None and now != start:
        return  # the id was reused: the group is gone
    with contextlib.suppress(OSError):
        os.killpg(group, signal.SIGKILL)


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
