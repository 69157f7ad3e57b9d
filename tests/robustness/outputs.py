"""Reading back what a command wrote, and checking its exit status and stderr."""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from contextvars import ContextVar
from pathlib import Path

from conftest import run_shell
from corpus import END, Expected

from tarkit.errors import TruncatedError
from tarkit.format.samples import Sample, group_samples
from tarkit.format.tar import Member, read_members


def as_expected(samples: Sequence[Sample]) -> list[Expected]:
    return [
        (s.key, tuple(zip(s.fields, (m.data for m in s.members), strict=True))) for s in samples
    ]


def archive_samples(data: bytes, complete: bool) -> list[Expected]:
    """The samples of a command's tar output, checking how it ends.

    ``complete``: it ends with the end-of-archive marker; else it is whole members and
    no marker (so the next reader in a pipe fails too).
    """
    if complete:
        assert data.endswith(END)
        return as_expected(list(group_samples(read_members(io.BytesIO(data)))))
    assert not data.endswith(bytes(512)) or data == b""
    if data:
        try:
            list(read_members(io.BytesIO(data)))
        except TruncatedError as exc:
            assert "without the end-of-archive marker" in exc.what, str(exc)
            assert exc.offset == len(data)
        else:
            raise AssertionError("the output has an end-of-archive marker")
    return as_expected(list(group_samples(read_members(io.BytesIO(data + END)))))


def to_sample(expected: Expected) -> Sample:
    key, fields = expected
    members = [Member(f"{key}.{f}", "file", len(d), 0, d, 0) for f, d in fields]
    return Sample(key, [f for f, _ in fields], members, "-")


def check_stderr(
    stderr: str,
    tool: str,
    source: str | None,
    status: int,
    error: str | None,
    warnings: int | None = 0,
) -> None:
    """Check a command's stderr: no traceback, one error line or none, skip warnings.

    For status 2 the last line is the only error line, and its message after
    ``<tool>: error: <source>: `` (``<tool>: error: `` for no source) matches the regular
    expression ``error``. Every other
    line is a skip warning; ``warnings`` members were skipped (None: any number). tarsplit
    may also say, above the error, which unfinished shard it removed.
    """
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if " unfinished shard removed " not in line]
    errors = [line for line in lines if line.startswith(f"{tool}: error: ")]
    warned = [line for line in lines if line.startswith(f"{tool}: warning: ")]
    assert len(errors) + len(warned) == len(lines), stderr
    if status == 2:
        assert len(errors) == 1 and lines[-1] == errors[0], stderr
        prefix = f"{tool}: error: " + (f"{source}: " if source is not None else "")
        assert errors[0].startswith(prefix), errors[0]
        what = errors[0].removeprefix(prefix)
        assert error is not None and re.fullmatch(error, what), errors[0]
    else:
        assert errors == [], stderr
    if warnings is None:
        pass
    elif warnings == 0:
        assert warned == [], stderr
    elif warnings == 1:
        assert len(warned) == 1, stderr
    else:
        assert f"skipped {warnings} members" in warned[-1], stderr


# Variables set for the pipelines :func:`shell` runs, per thread (test_corpus runs
# commands in threads, each with its reader: conftest.reader_env).
shell_env: ContextVar[tuple[tuple[str, str], ...]] = ContextVar("shell_env", default=())


def shell(directory: Path, script: str) -> list[int]:
    """Run a bash pipeline in ``directory``; the exit statuses of its commands."""
    result = run_shell(
        script + '; echo "${PIPESTATUS[*]}"', cwd=directory, timeout=60, env=dict(shell_env.get())
    )
    assert result.stderr == "", result.stderr
    return [int(s) for s in result.stdout.split()]
