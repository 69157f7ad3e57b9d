"""Shared test helpers: run the real console scripts, build archives."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from tarkit.tario import TarWriter

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


def tool(name: str) -> str:
    """Path of an installed console script (tarcat, tarsplit, …)."""
    path = BIN / name
    assert path.exists(), f"{name} is not installed in {BIN}"
    return str(path)


def run(args: list[str], input: bytes | None = None, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """Run a command; stdout as bytes, stderr as text."""
    if args and not os.path.sep in args[0] and (BIN / args[0]).exists():
        args = [str(BIN / args[0]), *args[1:]]
    result = subprocess.run(args, input=input, capture_output=True, timeout=timeout, **kw)
    result.stderr = result.stderr.decode("utf-8", "replace")
    return result


def run_shell(script: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """Run a bash pipeline with the venv's scripts first on PATH."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.update(kw.pop("env", {}))
    result = subprocess.run(["bash", "-c", script], capture_output=True, timeout=timeout, env=env, **kw)
    result.stderr = result.stderr.decode("utf-8", "replace")
    return result


def make_tar(members: Iterable[tuple[str, bytes]]) -> bytes:
    """An archive of regular files, with tarkit's deterministic headers."""
    out = io.BytesIO()
    with TarWriter(out) as writer:
        for name, data in members:
            writer.add(name, data)
    return out.getvalue()


def samples_of(archive: bytes) -> list[tuple[str, dict[str, bytes]]]:
    """(key, {field: data}) for every sample, as tarkit reads it."""
    from tarkit.samples import group_samples
    from tarkit.tario import read_members

    return [(s.key, s.data()) for s in group_samples(read_members(io.BytesIO(archive)))]


def webdataset_samples(path: str | Path) -> list[tuple[str, dict[str, bytes]]]:
    """(key, {field: data}) for every sample, as webdataset reads the file."""
    import webdataset as wds

    dataset = wds.WebDataset(str(path), shardshuffle=False, empty_check=False)
    result = []
    for sample in dataset:
        fields = {k: v for k, v in sample.items() if not k.startswith("__")}
        result.append((sample["__key__"], fields))
    return result


@pytest.fixture
def small_archive() -> bytes:
    """Ten samples of three fields each."""
    return make_tar(
        (f"s{i:03d}.{field}", f"{field}-{i}".encode() * (i + 1))
        for i in range(10)
        for field in ("cls", "jpg", "json")
    )
