"""Issue 23, the format side of random access: manifests of a billion samples, the shard index.

- opening the synthetic billion-sample dataset (1,000,000 shards × 1,000 samples, made by
  ``tests/synthetic_dataset.py``; the shards need not exist): a version 2 manifest and its
  columns file, and a version 1 manifest of the same shards (162 MB of JSON) read in
  slices, next to version 1 read as before (``parse``: the whole text, an object per
  shard). Each in a fresh process: wall and processor time, peak memory above the
  interpreter (VmHWM). Target: well under 2 s and ~150 MB.
- the loader over it: ``tarkit.ShardDataset`` and ``tarkit.IndexedDataset`` opened (with
  ``len()``) from each version, each in a process of its own with tarkit and torch
  imported, over 10⁶ empty shard files (made once: a minute or more); the memory each of
  2 forked DataLoader workers adds once it has begun reading (its private pages), and the
  bytes of a state (the dataset's, a BlockSampler's mid-epoch). Targets (issue 23): under
  2 s and 200 MB to open, 50 MB a worker, 64 KB a state.
- the shard index of the small set: bytes per sample, the time to index the shard in one
  pass with its SHA-256 (``index_stream`` behind a hashing reader, as ``tarindex`` will)
  next to ``tarindex`` today (``index_shard``, without and with ``--offsets``), and the
  time to check and parse one sample from its span (``sample_from_span``).
"""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Callable
from pathlib import Path

from data import ROOT, SETTINGS, median, small_shard

TITLE = "Random access: manifests of a billion samples and the shard index (issue 23)"
ORDER = 66


def run(workdir: Path, quick: bool) -> str:
    return _manifests(workdir) + "\n" + _datasets(workdir) + "\n" + _index(workdir)


def _manifests(workdir: Path) -> str:
    sys.path.insert(0, str(ROOT / "tests"))
    from synthetic_dataset import measure_open, write_v1, write_v2

    v1 = write_v1(workdir / "v1.json")
    v2 = write_v2(workdir / "v2.json")
    rows = [
        ("version 2 (`read_table`, columns memory-mapped)", v2, "table"),
        ("version 1 (`read_table`, in slices)", v1, "table"),
        ("version 1 as before (`parse`: whole text, an object per shard)", v1, "parse"),
    ]
    out = [
        "### Opening 1,000,000 shards × 1,000 samples\n",
        "| manifest | file MB | wall s | CPU s | peak MB above the interpreter |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for what, path, how in rows:
        runs = [measure_open(path, how) for _ in range(max(1, SETTINGS.repeat // 2))]
        size = path.stat().st_size + (
            path.with_suffix(".columns").stat().st_size if path == v2 else 0
        )
        wall = median([float(r["seconds"]) for r in runs])  # type: ignore[arg-type]
        cpu = median([float(r["cpu"]) for r in runs])  # type: ignore[arg-type]
        peak = median([float(r["peak"]) for r in runs])  # type: ignore[arg-type]
        out.append(f"| {what} | {size / 1e6:.0f} | {wall:.2f} | {cpu:.2f} | {peak / 2**20:.0f} |")
    return "\n".join(out) + "\n"


def _datasets(workdir: Path) -> str:
    sys.path.insert(0, str(ROOT / "tests"))
    from synthetic_dataset import SHARDS, make_shards, measure_datasets

    shards = workdir / "shards"
    if not shards.is_dir():
        make_shards(shards)
    for version in (1, 2):  # beside the shards, as a manifest is
        (shards / f"v{version}.json").unlink(missing_ok=True)
        (workdir / f"v{version}.json").rename(shards / f"v{version}.json")
    (workdir / "v2.columns").rename(shards / "v2.columns")
    cases = [(kind, shards / f"v{version}.json") for kind in ("shard", "indexed")
             for version in (2, 1)]  # fmt: skip
    runs = [measure_datasets(cases) for _ in range(max(1, SETTINGS.repeat // 2))]
    out = [
        f"### The loader over {SHARDS:,} shards × 1,000 samples\n",
        "| dataset | manifest | open s | peak MB | per worker MB | state bytes |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for case, (kind, path) in enumerate(cases):
        figures = [run[case] for run in runs]
        wall = median([float(f["seconds"]) for f in figures])  # type: ignore[arg-type]
        peak = median([float(f["peak"]) for f in figures])  # type: ignore[arg-type]
        worker = median([max(float(w["private"]) for w in f["workers"]) for f in figures])  # type: ignore[attr-defined]
        state = figures[0]["state"]
        name = "`ShardDataset`" if kind == "shard" else "`IndexedDataset` (`BlockSampler` state)"
        out.append(f"| {name} | version {path.stem[1]} | {wall:.2f} | {peak / 2**20:.0f} | "
                   f"{worker / 2**20:.0f} | {state} |")  # fmt: skip
    return "\n".join(out) + "\n"


def _index(workdir: Path) -> str:
    from tarkit.format.index import ShardIndex, index_stream, sample_from_span
    from tarkit.storage import HashingReader
    from tarkit.writing.index import index_shard

    shard = small_shard(workdir)
    data = shard.read_bytes()
    index = ShardIndex(index_stream(io.BytesIO(data), str(shard)), "small.idx")

    def indexed() -> None:
        with open(shard, "rb") as f:
            hashing = HashingReader(f)
            index_stream(hashing, str(shard))  # type: ignore[arg-type]
            hashing.drain()

    def checked() -> None:
        for position in range(len(index)):
            entry = index.entry(position)
            sample_from_span(entry, data[entry.offset : entry.stop], "small.tar")

    timed = [
        ("`tarindex` today (`index_shard`: count, SHA-256)", lambda: index_shard(str(shard))),
        ("`tarindex --offsets` today (keys and offsets too)",
         lambda: index_shard(str(shard), offsets=True)),
        ("`index_stream` behind a SHA-256 reader (count, SHA-256, index)", indexed),
    ]  # fmt: skip
    out = [
        f"### The shard index of the small set ({len(index):,} samples, "
        f"{len(data) / 1e6:.0f} MB)\n",
        f"Index: {len(index_stream(io.BytesIO(data), 's')) / len(index):.1f} bytes per sample "
        "(16 and the key; the keys here are 8 bytes).\n",
        "| indexing the shard in one pass | s | CPU s |",
        "| --- | ---: | ---: |",
    ]
    for what, call in timed:
        wall, cpu = _time(call)
        out.append(f"| {what} | {wall:.3f} | {cpu:.3f} |")
    wall, cpu = _time(checked)
    out.append(
        f"\nReading a sample by the index (`entry`, its span sliced from memory, crc32 and "
        f"strict parse: `sample_from_span`): {wall / len(index) * 1e6:.1f} µs a sample "
        f"({cpu / len(index) * 1e6:.1f} µs of CPU).\n"
    )
    return "\n".join(out) + "\n"


def _time(call: Callable[[], object]) -> tuple[float, float]:
    """Median wall and processor seconds of ``call`` over the run's repeats."""
    walls, cpus = [], []
    for _ in range(SETTINGS.repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        call()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return median(walls), median(cpus)
