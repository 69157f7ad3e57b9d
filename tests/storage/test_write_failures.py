"""What a failed write says: the file system that is full, under the name the user knows."""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest

from tarkit.storage import write_failure


def message(code: int, directory: Path) -> str:
    return str(write_failure("out.tar", OSError(code, "system words"), str(directory)))


def test_a_directory_below_tmpdir_on_its_file_system_is_named_as_tmpdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    (tmp_path / "tarproc-x" / "command-0").mkdir(parents=True)
    assert re.fullmatch(
        rf"out.tar: write failed: no space left on the file system of \$TMPDIR "
        rf"\({re.escape(str(tmp_path))}, (mounted at /[^,]*, )?[\d.]+ \w+ free\)",
        message(errno.ENOSPC, tmp_path / "tarproc-x" / "command-0"),
    )


def test_a_file_system_mounted_below_tmpdir_is_named_by_its_own_path(
    tmp_path: Path, small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not $TMPDIR's file system, which may have room: the small one that is full.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert re.fullmatch(
        rf"out.tar: disk quota exceeded on the file system of {re.escape(str(small_disk))} "
        rf"\(512.0 KiB free\)",
        message(errno.EDQUOT, small_disk).replace("write failed: ", ""),
    )


def test_other_errors_and_unknown_places_keep_the_systems_words(tmp_path: Path) -> None:
    assert message(errno.EIO, tmp_path) == "out.tar: write failed: system words"
    unknown = write_failure("<stdout>", OSError(errno.ENOSPC, "No space left on device"))
    assert str(unknown) == "<stdout>: write failed: No space left on device"
