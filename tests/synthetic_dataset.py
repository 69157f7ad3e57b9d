"""The synthetic billion-sample dataset: manifests of 1,000,000 shards × 1,000 samples.

Only what opening a dataset reads is made (the shards and their indexes need not exist):
a version 2 manifest with its columns file, and a version 1 manifest of the same shards
(~170 MB of JSON, laid out as tarkit writes it), in a second or two. Shard ``i`` is
``train-%06d.tar``, with 1,000 samples, a size and a SHA-256 made from ``i``.

:func:`measure_open` reads one of them in a fresh interpreter and reports the time and
the peak memory it took above the interpreter with tarkit imported. Used by
tests/format/test_manifest.py (the memory bound) and bench/bench_billion.py (the figures).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from array import array
from pathlib import Path

from tarkit.format.columns import columns_bytes

SHARDS = 1_000_000
SAMPLES = 1_000
PATTERN = "train-%06d.tar"
ROOT = Path(__file__).resolve().parent.parent


def shard_bytes(i: int) -> int:
    return 100_000_000 + (i % 1000) * 512


def shard_sha256(i: int) -> str:
    return f"{i * 0x9E3779B97F4A7C15 % (1 << 256):064x}"


def write_v1(path: Path, shards: int = SHARDS, samples: int = SAMPLES) -> Path:
    """A version 1 manifest of ``shards`` shards, as ``Manifest.dumps`` lays it out."""
    total = sum(shard_bytes(i) for i in range(shards))
    entry = '  {\n   "url": "%s",\n   "samples": %d,\n   "bytes": %d,\n   "sha256": "%s"\n  }'
    with open(path, "w", encoding="utf-8") as out:
        out.write(
            '{\n "format": "tarkit-manifest",\n "version": 1,\n'
            f' "samples": {shards * samples},\n "bytes": {total},\n "shards": [\n'
        )
        for start in range(0, shards, 10_000):
            stop = min(start + 10_000, shards)
            out.write(",\n".join(
                entry % (PATTERN % i, samples, shard_bytes(i), shard_sha256(i))
                for i in range(start, stop)
            ))  # fmt: skip
            out.write(",\n" if stop < shards else "\n")
        out.write(" ]\n}\n")
    return path


def write_v2(path: Path, shards: int = SHARDS, samples: int = SAMPLES) -> Path:
    """A version 2 manifest of the same shards, and its columns file beside it."""
    sizes = array("q", map(shard_bytes, range(shards)))
    digests = b"".join(bytes.fromhex(shard_sha256(i)) for i in range(shards))
    columns = path.with_suffix(".columns")
    columns.write_bytes(columns_bytes(array("q", [samples]) * shards, sizes, digests))
    document = {
        "format": "tarkit-manifest", "version": 2, "samples": shards * samples,
        "bytes": sum(sizes), "shards": shards, "names": {"pattern": PATTERN, "first": 0},
        "columns": columns.name, "index": PATTERN + ".idx",
    }  # fmt: skip
    path.write_text(json.dumps(document, indent=1) + "\n")
    return path


_MEASURE = """
import json, mmap, resource, sys, time
from pathlib import Path
from tarkit.format.manifest_reader import read_table

def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

manifest = Path(sys.argv[1])
maps = []

def columns(name):
    with open(manifest.parent / name, "rb") as f:
        maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    return maps[-1]

before = rss()
start = time.perf_counter()
with open(manifest, "rb") as stream:
    table = read_table(stream, str(manifest), columns)
seconds = time.perf_counter() - start
peak = rss() - before
print(json.dumps({"seconds": seconds, "peak": peak, "shards": len(table),
                  "samples": table.samples, "last": table.name(len(table) - 1),
                  "pattern": table.names.pattern, "locate": table.locate(table.samples - 1)}))
"""


def measure_open(manifest: Path, timeout: float = 120) -> dict[str, object]:
    """Read ``manifest`` into a ShardTable in a fresh interpreter (columns memory-mapped):
    ``seconds``, ``peak`` (bytes of peak RSS above the interpreter with tarkit imported),
    ``shards``, ``samples``, the ``last`` shard's name, the names' ``pattern`` and where
    the last sample lies (``locate``)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(manifest)],
        capture_output=True, text=True, timeout=timeout, env=env, check=True,
    )  # fmt: skip
    figures: dict[str, object] = json.loads(result.stdout)
    return figures
