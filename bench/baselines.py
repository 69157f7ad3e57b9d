"""Reference programs the tools are measured against, run as real commands.

    python bench/baselines.py tarfile-copy < in.tar > out.tar   # tarfile stream copy r| -> w|
    python bench/baselines.py webdataset SHARD...               # iterate all samples

The copy writes only the archive; the iteration reports ``N samples in S s`` on stderr,
S timed in-process after the (slow: torch) import, for :func:`data.timeit_reported`.
"""

from __future__ import annotations

import sys


def tarfile_copy() -> int:
    """Copy a tar stream from stdin to stdout with Python's ``tarfile`` in stream modes."""
    import tarfile

    source = tarfile.open(fileobj=sys.stdin.buffer, mode="r|")
    with tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as target:
        for info in source:
            target.addfile(info, source.extractfile(info) if info.isreg() else None)
    return 0


def webdataset_iterate(urls: list[str]) -> int:
    """Iterate every sample of the shards with ``webdataset.WebDataset`` (no decoding)."""
    import time

    import webdataset

    start = time.perf_counter()
    dataset = webdataset.WebDataset(urls, shardshuffle=False, empty_check=False)
    count = sum(1 for _ in dataset)
    elapsed = time.perf_counter() - start
    print(f"{count} samples in {elapsed:.6f} s", file=sys.stderr)
    return 0 if count else 1


def main(argv: list[str]) -> int:
    if argv[:1] == ["tarfile-copy"] and len(argv) == 1:
        return tarfile_copy()
    if argv[:1] == ["webdataset"] and len(argv) > 1:
        return webdataset_iterate(argv[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
