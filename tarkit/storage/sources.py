"""Where bytes come from and go to: brace expansion, files, stdin/stdout, ``pipe:``, HTTP(S), S3.

Inputs: ``-`` (stdin), a path or ``file:PATH``, ``pipe:CMD`` (the command's exit status is
checked when the input is closed; 141 is fine when tarkit stopped reading early),
``http://`` and ``https://`` (streamed; a body shorter than its Content-Length is an
error), and other ``scheme://`` URLs (``s3://``…) through fsspec when it is installed.

Outputs: ``-`` (stdout) or a path, written under a temporary name in the same directory
and renamed only by :meth:`Sink.commit`.

>>> expand_inputs(["data-{000..002}.tar"])
['data-000.tar', 'data-001.tar', 'data-002.tar']
>>> expand_inputs([])
['-']
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import BinaryIO

from ..errors import InputError, OutputError, SourceError, UsageError

PIPE_BUFFER = 1 << 20
_F_SETPIPE_SZ = 1031


def expand_inputs(specs: Sequence[str]) -> list[str]:
    """Brace-expand every input; no input at all means stdin.

    Raises :class:`~tarkit.errors.UsageError` for unbalanced braces (``a{b``).
    """
    from braceexpand import braceexpand

    expanded: list[str] = []
    for spec in specs:
        if spec.startswith("pipe:"):
            expanded.append(spec)  # a shell command keeps its own braces
            continue
        try:
            expanded.extend(braceexpand(spec))
        except ValueError:  # braceexpand's UnbalancedBracesError
            raise UsageError(
                f"{spec}: unbalanced braces (write \\{{ or \\}} for a literal brace)"
            ) from None
    return expanded or ["-"]


def display_name(spec: str) -> str:
    return "<stdin>" if spec == "-" else spec


def enlarge_pipe(fd: int) -> None:
    """Grow a pipe's kernel buffer to 1 MiB: one 64 KiB pipe hop limits large members."""
    try:
        import fcntl
        import stat

        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            fcntl.fcntl(fd, _F_SETPIPE_SZ, PIPE_BUFFER)
    except (OSError, ValueError, ImportError):
        pass


class Source:
    """An opened input: ``stream`` gives its raw bytes; :meth:`close` checks how it ended.

    ``close(early=True)`` tells it the reader stopped before the end on purpose.
    """

    def __init__(self, name: str, stream: BinaryIO, process: subprocess.Popen | None = None,
                 expected_size: int | None = None) -> None:  # fmt: skip
        self.name = name
        self.stream = stream
        self.process = process
        self.expected_size = expected_size

    def close(self, early: bool = False) -> None:
        process = self.process
        if process is None:
            if self.stream is not getattr(sys.stdin, "buffer", None):
                self.stream.close()
            return
        self.process = None
        if early:
            self.stream.close()  # the command now gets SIGPIPE if it is still writing
            try:
                status = process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                # Not writing, so no SIGPIPE (`sleep`, a stalled download): stop it.
                process.kill()
                status = process.wait()
        else:
            self.stream.read()
            self.stream.close()
            status = process.wait()
        if status == 0 or early:
            # After an early stop any status is fine: the command was cut off on
            # purpose (SIGPIPE gives 141; curl, for one, exits 23 instead).
            return
        raise SourceError(f"{self.name}: command {describe_exit(status)}")

    def __enter__(self) -> Source:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        process = self.process
        if process is not None and isinstance(exc, InputError):
            # Bad input from a command that failed: the failure is the news (pipe:false
            # gives an empty input, a crashed producer a truncated one). A command still
            # writing after a second is cut off below, and its SIGPIPE is no failure.
            try:
                status = process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                status = 0
            if status not in (0, 141, -signal.SIGPIPE):
                self.close(early=True)
                raise SourceError(f"{self.name}: command {describe_exit(status)}") from None
        # On an error the command may still be writing: do not wait for all of it.
        self.close(early=exc_type is not None)


def describe_exit(status: int | None) -> str:
    """How a process ended, in words: the one wording of every tarkit message.

    ``status`` is a ``returncode`` (negative: killed by that signal); None means the
    process stopped answering without an exit status.

    >>> describe_exit(-9)
    'was killed by signal 9 (SIGKILL)'
    >>> describe_exit(3)
    'exited with status 3'
    """
    if status is None:
        return "stopped answering"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = "?"
        return f"was killed by signal {-status} ({name})"
    return f"exited with status {status}"


class _HttpBody(io.RawIOBase):
    """An HTTP response body that fails when it ends before its Content-Length."""

    def __init__(self, response, name: str) -> None:  # type: ignore[no-untyped-def]
        self._response = response
        self._name = name
        length = response.headers.get("Content-Length")
        self._expected = int(length) if length and length.isdigit() else None
        self._received = 0
        self.status = response.status

    def readable(self) -> bool:
        return True

    def read1(self, n: int = -1) -> bytes:  # type: ignore[override]
        import http.client

        try:
            data = self._response.read1(n if n and n > 0 else 1 << 20)
        except (http.client.HTTPException, OSError) as exc:
            raise SourceError(f"{self._name}: connection failed: {exc}") from None
        self._received += len(data)
        if not data and self._expected is not None and self._received < self._expected:
            raise SourceError(
                f"{self._name}: connection closed after {self._received} of {self._expected} bytes"
            )
        return data

    def read(self, n: int | None = -1) -> bytes:  # type: ignore[override]
        if n is not None and n >= 0:
            return self.read1(n) if n else b""
        # All of it (manifest.load reads a whole body): one read1 may stop short.
        return b"".join(iter(lambda: self.read1(1 << 20), b""))

    def close(self) -> None:
        self._response.close()
        super().close()


def open_source(spec: str) -> Source:
    """Open one input for reading. Raises :class:`SourceError` if it cannot be opened."""
    if spec == "-":
        if sys.stdin is None:
            raise SourceError("<stdin>: not open")
        enlarge_pipe(0)
        return Source("<stdin>", sys.stdin.buffer)
    if spec.startswith("pipe:"):
        command = spec[5:]
        try:
            process = subprocess.Popen(
                command, shell=True, stdout=subprocess.PIPE, bufsize=PIPE_BUFFER
            )
        except OSError as exc:
            raise SourceError(f"{spec}: cannot start command: {exc.strerror}") from None
        assert process.stdout is not None
        enlarge_pipe(process.stdout.fileno())
        return Source(spec, process.stdout, process)  # type: ignore[arg-type]
    if spec.startswith(("http://", "https://")):
        return _open_http(spec)
    if "://" in spec and not spec.startswith("file:"):
        return _open_fsspec(spec)
    path = spec[5:] if spec.startswith("file:") else spec
    try:
        stream = open(path, "rb", buffering=PIPE_BUFFER)  # noqa: SIM115
    except FileNotFoundError:
        raise SourceError(f"{spec}: no such file") from None
    except IsADirectoryError:
        raise SourceError(f"{spec}: is a directory") from None
    except OSError as exc:
        raise SourceError(f"{spec}: cannot open: {exc.strerror}") from None
    return Source(spec, stream)


def open_source_at(spec: str, start: int) -> Source:
    """Open one input so that its stream begins at byte ``start``.

    HTTP(S) asks for a byte range (and reads past the bytes itself when the server
    ignores the request); seekable files and fsspec URLs seek; ``pipe:`` and stdin read
    past the bytes. Raises :class:`SourceError` if the input is shorter than ``start``.
    """
    if start and spec.startswith(("http://", "https://")):
        source = _open_http(spec, start)
        if getattr(source.stream, "status", 206) == 206:
            return source
    else:
        source = open_source(spec)
        if not start:
            return source
        seekable = getattr(source.stream, "seekable", None)
        if seekable is not None and seekable():
            source.stream.seek(start)
            return source
    read = getattr(source.stream, "read1", None) or source.stream.read
    left = start
    while left:
        chunk = read(min(left, 1 << 20))
        if not chunk:
            source.close(early=True)
            raise SourceError(f"{spec}: input ends before byte {start}")
        left -= len(chunk)
    return source


def _open_http(spec: str, start: int = 0) -> Source:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(spec, headers={"Range": f"bytes={start}-"} if start else {})
    try:
        response = urllib.request.urlopen(request, timeout=60)  # noqa: S310
    except urllib.error.HTTPError as exc:
        raise SourceError(f"{spec}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SourceError(f"{spec}: cannot connect: {reason}") from None
    return Source(spec, _HttpBody(response, spec))  # type: ignore[arg-type]


def _open_fsspec(spec: str) -> Source:
    try:
        import fsspec
    except ImportError:
        raise SourceError(
            f"{spec}: reading this kind of URL needs fsspec (pip install 'tarkit[s3]')"
        ) from None
    try:
        stream = fsspec.open(spec, "rb").open()
    except FileNotFoundError:
        raise SourceError(f"{spec}: no such object") from None
    except ImportError as exc:
        raise SourceError(f"{spec}: {exc} (pip install 'tarkit[s3]')") from None
    except Exception as exc:  # fsspec back ends raise many kinds
        raise SourceError(f"{spec}: cannot open: {exc}") from None
    return Source(spec, stream)


def stdout_stream() -> BinaryIO:
    """The binary stdout. Raises :class:`OutputError` when it is not open (``>&-``)."""
    if sys.stdout is None:
        raise OutputError("<stdout>: not open")
    return sys.stdout.buffer


class Sink:
    """An output: ``stream`` takes bytes; :meth:`commit` publishes, :meth:`abort` does not.

    For a path, bytes go to a temporary file beside it, renamed on commit and removed
    on abort. For stdout, commit and abort both flush what was written (on abort the
    caller has not written the end-of-archive marker, so readers downstream fail too).
    """

    def __init__(self, spec: str | None) -> None:
        from ..format.compression import compression_for, open_compressor

        self.spec = spec if spec not in (None, "-") else "-"
        self.temp_path: str | None = None
        if self.spec == "-":
            stdout_stream()  # fails when stdout is not open
            enlarge_pipe(1)
            self._file: BinaryIO = io.BufferedWriter(  # type: ignore[assignment]
                io.FileIO(sys.stdout.fileno(), "wb", closefd=False), buffer_size=PIPE_BUFFER
            )
            self.stream: BinaryIO = self._file
            return
        if "://" in self.spec:
            raise OutputError(f"{self.spec}: this command writes local files or stdout only")
        if _is_special_file(self.spec):
            # A device or FIFO (/dev/null, /dev/full, a named pipe) is written in place:
            # renaming a temporary file over it would replace the device.
            try:
                self._file = open(self.spec, "wb", buffering=PIPE_BUFFER)  # noqa: SIM115
            except OSError as exc:
                raise OutputError(f"{self.spec}: cannot open: {exc.strerror}") from None
            self.stream = self._file
            return
        directory = os.path.dirname(os.path.abspath(self.spec))
        try:
            fd, self.temp_path = tempfile.mkstemp(
                prefix=f".{os.path.basename(self.spec)}.", suffix=".tmp", dir=directory
            )
        except OSError as exc:
            raise OutputError(f"{self.spec}: cannot create: {exc.strerror}") from None
        self._file = open(fd, "wb", buffering=PIPE_BUFFER)  # noqa: SIM115
        self.stream = open_compressor(self._file, compression_for(self.spec))

    def commit(self) -> None:
        """Finish the output: flush, close, and rename a file into place."""
        if self.stream is not self._file:
            self.stream.close()
        self._file.flush()
        if self.temp_path is not None:
            os.fsync(self._file.fileno())
            self._file.close()
            os.chmod(self.temp_path, 0o666 & ~_umask())
            os.replace(self.temp_path, self.spec)
            self.temp_path = None

    def abort(self) -> None:
        """Give up: remove a temporary file; flush what stdout already holds."""
        if self.temp_path is not None:
            try:
                self._file.close()
            except OSError:
                pass
            try:
                os.unlink(self.temp_path)
            except OSError:
                pass
            self.temp_path = None
            return
        try:
            self._file.flush()
        except OSError:
            pass


def _is_special_file(path: str) -> bool:
    import stat

    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
