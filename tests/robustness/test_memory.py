"""Memory: reading a member holds it once, plus a read or two, whatever the compression,
the reader (compiled scanner or pure Python) and the way in (tarcat or the loader).

One member of 96 MiB of zeros: a sparse file, or a run of gzip members or zstd frames of
a megabyte each (a few hundred kilobytes in all). Each run is a fresh process, whose peak
resident memory is compared with the same run over a shard of one small member: the
difference must stay under 1.3 times the member. The reader used to keep its reads of a
member and then join them (twice the member), the zstd reader a whole input chunk
inflated (three times from a 16 KB file), the loader the member's data beside its raw
bytes.

A member that does not fit in one read is read by the same Python code whatever the
reader (the compiled scanner leaves it), so these run once, with the default reader.
"""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard
from conftest import tool

from tarkit.format.tar import END_OF_ARCHIVE
from tarkit.format.tar_writer import make_header

MIB = 1 << 20
MEMBER = 96 * MIB
BOUND = 1.3  # times the member, over the baseline

# Peak resident memory of the command in argv, in KiB: the children's peak, in a parent
# that started no other child.
PEAK_OF_COMMAND = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""

# The loader's way, in this process: resident memory before the first batch and the peak
# after the last, in KiB.
PEAK_OF_LOADER = """
import sys
import tarkit

def status(key):
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) for line in lines if line.startswith(key))

loader = tarkit.loader(sys.argv[1], batch_size=1)
before = status("VmRSS:")
sizes = [len(field) for batch in loader for field in batch["bin"]]
print(before, status("VmHWM:"), *sizes)
"""


def shard(directory: Path, compression: str | None, size: int) -> Path:
    """A shard of one sample with one member of ``size`` zero bytes (a multiple of 512)."""
    head, chunks = make_header("big.bin", size, mtime=0), size // MIB
    if compression is None:
        path = directory / f"{size}.tar"
        with path.open("wb") as out:
            out.write(head)
            out.truncate(len(head) + size)  # sparse: no disk, no time
            out.seek(0, 2)
            out.write(END_OF_ARCHIVE)
        return path
    compress = {
        "gz": lambda data: gzip.compress(data, compresslevel=1, mtime=0),
        "zst": zstandard.ZstdCompressor().compress,
    }[compression]
    megabyte = compress(bytes(MIB))
    rest = bytes(size - chunks * MIB)
    path = directory / f"{size}.tar.{compression}"
    path.write_bytes(compress(head) + megabyte * chunks + compress(rest + END_OF_ARCHIVE))
    return path


def run_python(script: str, *args: str) -> list[int]:
    result = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return [int(word) for word in result.stdout.split()]


@pytest.mark.parametrize("compression", [None, "gz", "zst"])
def test_tarcat_holds_a_member_once(tmp_path: Path, compression: str | None) -> None:
    (small,) = run_python(PEAK_OF_COMMAND, tool("tarcat"), str(shard(tmp_path, compression, 512)))
    (large,) = run_python(
        PEAK_OF_COMMAND, tool("tarcat"), str(shard(tmp_path, compression, MEMBER))
    )
    assert (large - small) * 1024 < BOUND * MEMBER, (small, large)


def test_the_loader_holds_a_member_once(tmp_path: Path) -> None:
    before, peak, size = run_python(PEAK_OF_LOADER, str(shard(tmp_path, "zst", MEMBER)))
    assert size == MEMBER
    assert (peak - before) * 1024 < BOUND * MEMBER, (before, peak)
