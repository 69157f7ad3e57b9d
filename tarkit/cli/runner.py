"""What every command shares: exit statuses, error and warning lines, signals.

A remote input that reconnects prints one warning line per reconnection (URL, byte
offset, cause): :func:`run` makes that the process's reporter of reconnections.

Exit statuses: 0 success; 1 the run finished but skipped something under a lenient
option; 2 bad input, bad usage or a failure; 130 Ctrl-C; 141 output pipe closed (quiet);
143 SIGTERM. Errors are one line on stderr, ``<tool>: error: <message>``; a traceback
only for a bug, or with ``TARKIT_DEBUG=1``.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from ..errors import TarkitError, Terminated
from ..format.samples import SkipLog
from ..storage import report_reconnections, write_failure
from .declare import Typer

if TYPE_CHECKING:
    from ..format.manifest import ShardInfo

EXIT_OK, EXIT_SKIPPED, EXIT_ERROR = 0, 1, 2
EXIT_INTERRUPTED, EXIT_PIPE, EXIT_TERMINATED = 130, 141, 143


_received: list[int] = []  # the exit status each interrupting signal earns, as they came


def _on_sigterm(signum: int, frame: object) -> None:
    _received.append(EXIT_TERMINATED)
    raise Terminated()


def _on_sigint(signum: int, frame: object) -> None:
    _received.append(EXIT_INTERRUPTED)
    raise KeyboardInterrupt


def interrupted() -> bool:
    """Whether Ctrl-C or SIGTERM has come: the command is unwinding (what fails in its
    cleanup then, such as worker processes killed by the same signal, is part of it)."""
    return bool(_received)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(message: str) -> str:
    r"""``message`` with control characters escaped.

    Messages name members, and a member's name comes from the archive: a newline in it
    must not break the one-line rule, nor an escape sequence drive the terminal.

    >>> print(one_line("member a\nb\x1b[2J.txt"))
    member a\nb\x1b[2J.txt
    """
    if not _CONTROL.search(message):
        return message
    return _CONTROL.sub(lambda m: _ESCAPES.get(m.group(), f"\\x{ord(m.group()):02x}"), message)


def warn(tool: str, message: str) -> None:
    """Print one warning line on stderr."""
    sys.stderr.write(f"{tool}: warning: {one_line(message)}\n")
    sys.stderr.flush()


def skip_log(tool: str) -> SkipLog:
    """A SkipLog that warns once per reason; call :func:`report_skips` at the end."""

    def notify(reason: str, source: str, member: str) -> None:
        warn(tool, f"{source}: skipping {reason}: {member}")

    return SkipLog(notify)


def report_skips(tool: str, skips: SkipLog) -> None:
    """Print the summary line when more than one member was skipped."""
    if skips.total > 1:
        warn(tool, skips.summary())


def shard_reporter(tool: str) -> Callable[[ShardInfo], None]:
    """What -v prints for each finished shard: ``tool: path: N samples, SIZE``."""
    from ..sizes import format_size

    def report(shard: ShardInfo) -> None:
        noun = "sample" if shard.samples == 1 else "samples"
        sys.stderr.write(
            f"{tool}: {shard.url}: {shard.samples} {noun}, {format_size(shard.bytes)}\n"
        )
        sys.stderr.flush()

    return report


def _fill_closed_std_streams() -> None:
    """Hold a closed stdin, stdout or stderr (``<&-``, ``>&-``, ``2>&-``) open on /dev/null.

    Python leaves ``sys.stdin`` or ``sys.stdout`` None then, and a command that needs one
    fails with ``<stdin>: not open``. The descriptor gets /dev/null opened the other way
    round (stdin for writing, stdout and stderr for reading), so that no file opened
    later takes its number while a child process still finds it unusable, as it was. A
    closed stderr swallows tarkit's messages; the exit status still tells.
    """
    for fd, flags in ((0, os.O_WRONLY), (1, os.O_RDONLY), (2, os.O_RDONLY)):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, flags)
            if null != fd:
                os.dup2(null, fd, inheritable=True)
                os.close(null)
            else:
                os.set_inheritable(fd, True)
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115


def _quiet_stdout() -> None:
    # Python would report the broken pipe again when it flushes stdout at exit.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
    except OSError:
        pass


def _tune_malloc() -> None:
    """Keep freed megabyte buffers for reuse instead of returning them to the kernel.

    The tools allocate and free a buffer per read chunk and per large member; with
    glibc's defaults each one is a fresh mmap whose pages fault in again, which cost
    as much as the copying itself (measured: tarcat on 2 MB members, 0.40 s to 0.21 s).
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 128 << 20)  # M_TRIM_THRESHOLD
        libc.mallopt(-2, 16 << 20)  # M_TOP_PAD
    except (OSError, AttributeError, ImportError):
        pass


def run(tool: str, body: Callable[[], int | None]) -> NoReturn:
    """Run a command's body and exit with the status it earned."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when ignored
        signal.signal(signal.SIGINT, _on_sigint)
    _tune_malloc()
    report_reconnections(lambda event: warn(tool, str(event)))
    debug = bool(os.environ.get("TARKIT_DEBUG"))
    try:
        status = body() or EXIT_OK
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
        status = EXIT_PIPE
    except KeyboardInterrupt:
        status = EXIT_INTERRUPTED
    except Terminated:
        status = EXIT_TERMINATED
    except TarkitError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        sys.stderr.write(f"{tool}: error: {one_line(str(exc))}\n")
        status = EXIT_ERROR
    except MemoryError:
        sys.stderr.write(f"{tool}: error: out of memory\n")
        status = EXIT_ERROR
    except OSError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        sys.stderr.write(f"{tool}: error: {one_line(_os_error_message(exc))}\n")
        status = EXIT_ERROR
    except Exception:
        # A signal to the whole process group kills worker processes too, and the library
        # that ran them may raise about that while the command unwinds: the signal is what
        # happened (a traceback with TARKIT_DEBUG=1).
        if not _received:
            raise
        if debug:
            import traceback

            traceback.print_exc()
        status = _received[0]
    sys.stderr.flush()
    # Skip interpreter teardown flushes that could hit a closed pipe again.
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except (BrokenPipeError, OSError):
        _quiet_stdout()
    if status == EXIT_PIPE:
        os._exit(status)
    sys.exit(status)


def _os_error_message(exc: OSError) -> str:
    """An OSError that no layer turned into tarkit's own: its file and the system's words,
    or, for a full file system met writing a file, which one (``write_failure``)."""
    if exc.filename and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        name = os.fsdecode(exc.filename)
        return str(write_failure(name, exc, os.path.dirname(os.path.abspath(name))))
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}"


def plain_typer() -> None:
    """Plain help and error text, whether or not rich is installed.

    With rich installed, typer escapes ``[default: …]`` as ``\\[default: …]`` even with
    rich markup turned off, and imports rich to print tracebacks.
    """
    import typer.core
    import typer.main

    typer.core.HAS_RICH = False
    typer.main.HAS_RICH = False  # type: ignore[attr-defined]


def completion_variable(tool: str) -> str:
    """The environment variable through which a shell asks ``tool`` for completions.

    >>> completion_variable("tarcat")
    '_TARCAT_COMPLETE'
    """
    return f"_{tool}_COMPLETE".replace("-", "_").replace(" ", "_").upper()


def typer_main(app: Typer, tool: str) -> NoReturn:
    """Entry point for a console script: run the ``app`` under the name ``tool``.

    A plain command line runs the command at once (:mod:`.declare`); any other is
    parsed by typer. A malformed command line is one ``<tool>: error:`` line and exit 2,
    like every other error (click alone prints a three-line usage block).
    """
    _fill_closed_std_streams()
    completing = completion_variable(tool) in os.environ
    call = None if completing else app.quick_call(sys.argv[1:], tool)
    if call is not None:
        status = call()
        sys.exit(status if isinstance(status, int) else EXIT_OK)
    import click
    import typer.main

    plain_typer()
    if completing:
        # A shell asks for completions (see docs/index.md): only then is typer's
        # completion machinery loaded, so that start-up stays as it is.
        from typer.completion import completion_init

        completion_init()
    command = typer.main.get_command(app.real())
    try:
        status = command.main(prog_name=tool, standalone_mode=False)
    except click.UsageError as exc:
        name = exc.ctx.command_path if exc.ctx is not None else tool
        if type(exc).__name__ == "NoArgsIsHelpError" and exc.ctx is not None:
            sys.stderr.write(exc.ctx.get_help() + "\n")
            sys.exit(EXIT_ERROR)
        message = exc.format_message().rstrip(".")
        message = message[:1].lower() + message[1:]
        sys.stderr.write(f"{name}: error: {message} (see {name} --help)\n")
        sys.exit(EXIT_ERROR)
    except click.ClickException as exc:
        sys.stderr.write(f"{tool}: error: {exc.format_message()}\n")
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(status if isinstance(status, int) else EXIT_OK)
