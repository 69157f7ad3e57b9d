"""Samples to run commands on, shared by the tests of commands, the supervisor and the ledger."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_tar

from tarkit.format.samples import Sample, group_samples
from tarkit.format.tar import read_members
from tarkit.processing.commands import Command
from tarkit.processing.supervisor import map_command


def samples_from(members: list[tuple[str, bytes]]) -> list[Sample]:
    return list(group_samples(read_members(io.BytesIO(make_tar(members)), "in.tar"), "in.tar"))


def numbered(n: int, fields: tuple[str, ...] = ("txt", "cls")) -> list[Sample]:
    return samples_from(
        [(f"s{i:02d}.{f}", f"{f} {i}\n".encode()) for i in range(n) for f in fields]
    )


def as_dicts(samples: list[Sample]) -> list[tuple[str, dict[str, bytes]]]:
    return [(s.key, s.data()) for s in samples]


def run_map(samples: list[Sample], text: str, tmp: Path, **options: object) -> list[Sample]:
    command = Command(text, **{k: options.pop(k) for k in ("timeout", "multi", "quiet",
                                                           "keep_dirs") if k in options})  # fmt: skip
    return list(map_command(samples, command, tmpdir=str(tmp), **options))  # type: ignore[arg-type]


@pytest.fixture(name="tmp")
def tmp_fixture(tmp_path: Path) -> Iterator[Path]:
    """The directory the samples' directories go under; every test checks it is left empty."""
    path = tmp_path / "tmp"
    path.mkdir()
    yield path
    assert not os.listdir(path), "a temporary directory was left behind"
