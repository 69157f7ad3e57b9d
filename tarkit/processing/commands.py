"""The per-sample command contract: what tarproc's command sees, and what it must leave.

Each sample is unpacked into an empty private directory (a :class:`Workspace`) as one
plain file per field, ``sample.<field>`` (``sample.jpg``, ``sample.seg.png``). ``bash -c
COMMAND`` runs there, in a session (process group) of its own, with ``TARKIT_KEY`` set to
the sample's key and stdin from ``/dev/null``. When it exits 0, the files ``sample.*`` it
leaves form the output sample (:func:`collect_outputs`), same key, fields in sorted
order, new members with tarkit's deterministic headers (:func:`output_sample`). With
``multi``, files ``sample-<part>.<field>`` form one output sample per part instead,
keyed ``<key>/<part>``, parts in sorted order. With ``rows`` (``tarkit map``), a file
:data:`METADATA_FILE` it leaves is the sample's metadata row (:func:`collect_row`): a name
no field can have, since fields arrive as ``sample.*``, so an input field (a webdataset
``meta.json``) is never taken for a row.

A sample *fails* when its command exits non-zero, is killed by a signal, runs past
the timeout or leaves an output that is not a plain file (or, with ``rows``, a metadata
file that is not a JSON object), and, without running it, when its key is too long to
pass in the environment (:func:`~tarkit.processing.keys.key_problem`: bad input). The policy (``on_error``,
checked by :func:`tarkit.sizes.check_on_error`) decides: ``fail`` stops everything (running commands
are killed) and raises :class:`~tarkit.errors.CommandFailed`; ``skip`` leaves the sample
out and ``keep`` passes it through unchanged, both reporting a :class:`Rejection`.

The commands are run by :mod:`tarkit.processing.supervisor`: ``map_command`` over a
stream of samples, ``run_sample`` for one.

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
import json
import os
import signal
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Union

from ..errors import InputError, UsageError
from ..format.samples import Sample
from ..format.tar import FILE, Member
from ..format.tar_writer import encode_member
from ..sizes import ON_ERROR as ON_ERROR  # the policy check every layer shares
from ..sizes import check_on_error as check_on_error
from ..storage import write_failure
from ..storage.scratch import create_private_file, remove_tree
from .keys import BAD_KEY

STDERR_TAIL_BYTES = 4096
STDERR_TAIL_LINES = 3
_LOG_FLAGS = os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_NAME_MAX = 255
METADATA_FILE = "tarkit.metadata.json"  # a command's metadata row, with ``rows``

FieldData = Union[bytes, memoryview]
OutputSample = tuple[str, list[tuple[str, bytes]]]


@dataclass(frozen=True)
class Command:
    """What runs on every sample, and how. Picklable, for use in other processes.

    ``timeout`` is in seconds (None: no limit). ``quiet`` drops the command's
    stdout and stderr instead of copying them to this process's stderr (the
    last lines of stderr still go into failure messages). ``keep_dirs`` keeps
    every sample's directory and its ``.stdout``/``.stderr`` logs. ``rows`` reads each
    sample's metadata row from :data:`METADATA_FILE` (``tarkit map``; tarproc ignores it).
    """

    text: str
    timeout: float | None = None
    multi: bool = False
    quiet: bool = False
    keep_dirs: bool = False
    rows: bool = False

    def check(self) -> None:
        """Raise :class:`UsageError` for an empty command or a timeout that is not positive."""
        if not self.text.strip():
            raise UsageError("the command is empty")
        if self.timeout is not None and not self.timeout > 0:
            raise UsageError(f"the timeout must be positive (got {self.timeout})")


@dataclass(frozen=True)
class Rejection:
    """Why the command failed on one sample.

    ``status`` is short (``exit 3``, ``signal SIGSEGV``, ``timeout``, ``bad output``,
    ``bad key``: the command did not run), ``reason`` one line (the last line of the command's stderr, or what was wrong),
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
        elif self.status == BAD_KEY:
            what = self.reason
        else:
            what = f"command left {self.reason}"
        if self.stderr and kind in ("exit", "signal", "timeout"):
            what += ": " + " | ".join(self.stderr)
        if self.directory:
            what += f" (its directory is kept: {self.directory})"
        return what


@dataclass
class SampleOutcome:
    """What :func:`~tarkit.processing.supervisor.run_sample` returns: the output samples
    and metadata row, or why there are none."""

    index: int
    key: str
    outputs: list[OutputSample] = field(default_factory=list)
    row: dict[str, Any] | None = None
    rejection: Rejection | None = None
    cancelled: bool = False


@dataclass
class ProcReport:
    """Counts of a :func:`~tarkit.processing.supervisor.map_command` run, filled in as it
    goes; ``rows``: the metadata rows (``Command.rows``) of the samples gone out, in
    order, for the reader to take as it goes."""

    samples_in: int = 0
    samples_out: int = 0
    rejected: int = 0
    root: str | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)


def exit_status(code: int, timed_out: bool) -> str:
    """A :class:`Rejection`'s ``status`` for a command's exit code; ``""`` for success.

    >>> exit_status(3, False), exit_status(-11, False), exit_status(-9, True), exit_status(0, False)
    ('exit 3', 'signal SIGSEGV', 'timeout', '')
    """
    if timed_out:
        return "timeout"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return "" if code == 0 else f"exit {code}"


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
    """Create a private (mode 0700) directory for samples' directories; returns its path.

    Raises :class:`~tarkit.errors.OutputError` naming the file system when it cannot.
    """
    where = tmpdir or tempfile.gettempdir()
    try:
        return tempfile.mkdtemp(prefix="tarproc-", dir=where)
    except OSError as exc:
        name = os.path.join(where, "tarproc-*")
        raise write_failure(name, exc, where, "cannot create the samples' directory") from None


def write_fields(directory: str, fields: Iterable[tuple[str, FieldData]], sample: str) -> None:
    """Write each (field, bytes) pair as the file ``sample.<field>`` of ``directory``.

    Raises :class:`~tarkit.errors.OutputError` naming ``sample`` and the file system
    (a full ``$TMPDIR``: :func:`~tarkit.storage.write_failure`) when it cannot.
    """
    try:
        for field_name, data in fields:
            create_private_file(os.path.join(directory, "sample." + field_name), data)
    except OSError as exc:
        raise write_failure(
            sample, exc, directory, "cannot write its files for the command"
        ) from None


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
        fds: list[int] = []
        try:
            os.mkdir(directory, 0o700)
            for path in self.paths:
                # Append mode: once a log is emptied, the command's writes start at 0.
                fds.append(os.open(path, _LOG_FLAGS, 0o600))
        except BaseException as exc:
            for fd in fds:
                os.close(fd)
            if isinstance(exc, OSError):
                parent = os.path.dirname(directory)
                raise write_failure(directory, exc, parent, "cannot create") from None
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


def collect_row(directory: str, listing: list[str]) -> tuple[dict[str, Any] | None, str | None]:
    """The metadata row a command left in :data:`METADATA_FILE` (None when it left none),
    or (None, what is wrong): a file that is not a regular file or not a JSON object.
    ``listing`` is the directory's content."""
    if METADATA_FILE not in listing:
        return None, None
    try:
        data = _read_regular(os.path.join(directory, METADATA_FILE))
    except OSError as exc:
        return None, f"a {METADATA_FILE} that cannot be read ({exc.strerror})"
    if data is None:
        return None, f"a {METADATA_FILE} that is not a regular file"
    try:
        row = json.loads(data, parse_constant=_not_json)
    except ValueError:  # (UnicodeDecodeError too)
        row = None
    if not isinstance(row, dict):
        return None, f"a {METADATA_FILE} that does not hold a JSON object"
    return row, None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")  # NaN and Infinity: metadata files refuse them


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


def output_sample(key: str, fields: list[tuple[str, bytes]], source: str, mtime: int) -> Sample:
    """A :class:`Sample` of new members ``key.field`` with deterministic headers."""
    members = []
    for field_name, data in fields:
        name = f"{key}.{field_name}"
        raw = encode_member(name, data, mtime=mtime)
        start = len(raw) - len(data) - (-len(data) % 512)
        members.append(Member(name, FILE, len(data), 0, raw, start))
    return Sample(key, [f for f, _ in fields], members, source)
