"""The synthetic billion-sample dataset: manifests of 1,000,000 shards × 1,000 samples.

Only what opening a dataset reads is made (the shards and their indexes need not exist):
a version 2 manifest with its columns file, and a version 1 manifest of the same shards
(162 MB of JSON, laid out as tarkit writes it), in a second or two. Shard ``i`` is
``train-%06d.tar``, with 1,000 samples, a size and a SHA-256 made from ``i``.

:func:`measure_open` reads one of them in a fresh interpreter and reports the time and
the peak memory it took above the interpreter with tarkit imported. Used by
tests/format/test_manifest.py (the memory bound) and bench/bench_index.py (the figures).
:func:`make_shards` makes the shards as empty files (``ShardDataset`` checks that local
shards exist; opening, ``len()`` and states read none), and :func:`measure_datasets`
opens ``tarkit.ShardDataset`` and ``tarkit.IndexedDataset`` over manifests, each in a
process of its own, with the memory of its DataLoader workers and the size of its states
(tests/loading/test_billion.py, bench/bench_index.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from array import array
from collections.abc import Iterator
from pathlib import Path

from tarkit.format.columns import columns_bytes

SHARDS = 1_000_000
SAMPLES = 1_000
PATTERN = "train-%06d.tar"
BLOCK = 1000  # shards made at a time: a block's text is made once and renumbered
ROOT = Path(__file__).resolve().parent.parent


def shard_bytes(i: int) -> int:
    """The size of synthetic shard ``i``."""
    return 100_000_000 + (i % BLOCK) * 512


def shard_sha256(i: int) -> str:
    """The (made-up, never zero) SHA-256 of synthetic shard ``i``, in hex."""
    return f"{i // BLOCK + 1:06x}" + f"{i % BLOCK:04x}" * 14 + "ab"


def _blocks(template: str, shards: int) -> Iterator[str]:
    """``template`` (a block of entries for shards 0…999, their block number written
    @@@@@@ in the name and ###### in the digest) for each block of ``shards``."""
    for block in range(shards // BLOCK):
        yield template.replace("@@@@@@", f"{block:03d}").replace("######", f"{block + 1:06x}")


def _template(entry: str, separator: str, samples: int) -> str:
    return separator.join(
        entry % (f"@@@@@@{i:03d}", samples, shard_bytes(i), "######" + shard_sha256(i)[6:])
        for i in range(BLOCK)
    )


def write_v1(path: Path, shards: int = SHARDS, samples: int = SAMPLES) -> Path:
    """A version 1 manifest of ``shards`` shards (a multiple of 1,000, up to 10⁶), laid
    out as ``Manifest.dumps`` writes it."""
    assert shards % BLOCK == 0 and shards <= BLOCK * BLOCK
    entry = (
        '  {\n   "url": "train-%s.tar",\n   "samples": %d,\n   "bytes": %d,\n   "sha256": "%s"\n  }'
    )
    total = sum(shard_bytes(i) for i in range(BLOCK)) * (shards // BLOCK)
    with open(path, "w", encoding="utf-8") as out:
        out.write(
            '{\n "format": "tarkit-manifest",\n "version": 1,\n'
            f' "samples": {shards * samples},\n "bytes": {total},\n "shards": [\n'
        )
        blocks = _blocks(_template(entry, ",\n", samples), shards)
        out.write(next(blocks))
        for block in blocks:
            out.write(",\n")
            out.write(block)
        out.write("\n ]\n}\n")
    return path


def write_v2(path: Path, shards: int = SHARDS, samples: int = SAMPLES) -> Path:
    """A version 2 manifest of the same shards, and its columns file beside it."""
    assert shards % BLOCK == 0 and shards <= BLOCK * BLOCK
    sizes = array("q", map(shard_bytes, range(BLOCK))) * (shards // BLOCK)
    hex_block = "".join("######" + shard_sha256(i)[6:] for i in range(BLOCK))
    digests = b"".join(map(bytes.fromhex, _blocks(hex_block, shards)))
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
import json, mmap, sys, time
from pathlib import Path
from tarkit.format.manifest import parse
from tarkit.format.manifest_reader import read_table
from tarkit.format.shard_table import ShardTable

def peak_rss():
    # VmHWM: this process's peak resident memory (ru_maxrss would carry over the
    # parent's through fork and exec), reset to the present by clear_refs.
    with open("/proc/self/status") as status:
        return 1024 * int(next(l for l in status if l.startswith("VmHWM")).split()[1])

manifest, how = Path(sys.argv[1]), sys.argv[2]
maps = []

def columns(name):
    with open(manifest.parent / name, "rb") as f:
        maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    return maps[-1]

with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")
before = peak_rss()
start, cpu = time.perf_counter(), time.process_time()
with open(manifest, "rb") as stream:
    if how == "table":
        table = read_table(stream, str(manifest), columns)
    else:  # version 1 as read before: the whole text, an object per shard
        shards = parse(stream.read().decode("utf-8"), str(manifest)).shards
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
peak = peak_rss() - before
if how != "table":
    table = ShardTable.from_infos(shards)
print(json.dumps({"seconds": seconds, "cpu": cpu, "peak": peak, "shards": len(table),
                  "samples": table.samples, "last": table.name(len(table) - 1),
                  "pattern": table.names.pattern, "locate": table.locate(table.samples - 1)}))
"""


def measure_open(manifest: Path, how: str = "table", timeout: float = 120) -> dict[str, object]:
    """Read ``manifest`` in a fresh interpreter: into a ShardTable (``how="table"``,
    columns memory-mapped), or with version 1's :func:`~tarkit.format.manifest.parse`
    (``how="parse"``, the way before version 2). Gives ``seconds`` (wall clock), ``cpu``
    (processor time), ``peak`` (bytes of peak memory above the interpreter with tarkit
    imported: Linux's VmHWM), ``shards``, ``samples``, the ``last`` shard's name, the
    names' ``pattern`` and where the last sample lies (``locate``)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(manifest), how],
        capture_output=True, text=True, timeout=timeout, env=env, check=True,
    )  # fmt: skip
    figures: dict[str, object] = json.loads(result.stdout)
    return figures


def make_shards(directory: Path, shards: int = SHARDS) -> None:
    """The synthetic shards in ``directory``, as empty files (one ``mknod`` each: about
    4 s a hundred thousand on a busy machine)."""
    import stat

    directory.mkdir(parents=True, exist_ok=True)
    where = os.open(directory, os.O_RDONLY)
    try:
        for i in range(shards):
            os.mknod(PATTERN % i, 0o644 | stat.S_IFREG, dir_fd=where)
    finally:
        os.close(where)


_DATASETS = """
import ctypes, gc, json, os, sys, time

# Anonymous memory in pages of 4 KiB, whatever the machine's transparent huge pages
# (PR_SET_THP_DISABLE, inherited by the forked children): a bound on bytes, not pages.
ctypes.CDLL(None).prctl(41, 1, 0, 0, 0)
import torch
import tarkit
from torch.utils.data import DataLoader, Dataset, IterableDataset
from tarkit.errors import InputError, SourceError, UsageError

def status(field):
    with open("/proc/self/status") as lines:
        return 1024 * int(next(l for l in lines if l.startswith(field + ":")).split()[1])

def private():
    # What this process holds alone (USS): a forked worker's pages copied or its own.
    with open("/proc/self/smaps_rollup") as lines:
        return 1024 * sum(int(l.split()[1]) for l in lines if l.startswith("Private_"))

def probe(dataset, touch):
    # In a worker: what the dataset costs it to start reading (the shards are empty
    # files, so the first read stops there), then its own memory.
    try:
        touch(dataset)
    except (InputError, SourceError, UsageError):
        pass
    return {"private": private(), "rss": status("VmRSS")}

class IterableProbe(IterableDataset):
    def __init__(self, dataset):
        self.dataset = dataset
    def __iter__(self):
        yield probe(self.dataset, lambda d: next(iter(d)))

class MapProbe(Dataset):
    def __init__(self, dataset, workers):
        self.dataset, self.workers = dataset, workers
    def __len__(self):
        return self.workers
    def __getitem__(self, i):
        return probe(self.dataset, lambda d: d[len(d) // (i + 2)])

def rss_parts():
    return {part: status(part) for part in ("RssAnon", "RssFile", "RssShmem")}

def open_dataset(kind, manifest, workers, figures):
    # What a training script does first; its figures go into ``figures``.
    before, parts = status("VmHWM"), rss_parts()
    start = time.perf_counter()
    dataset = (tarkit.ShardDataset if kind == "shard" else tarkit.IndexedDataset)(manifest)
    samples = len(dataset)
    figures.update({"dataset": kind, "seconds": time.perf_counter() - start,
                    "peak": status("VmHWM") - before, "samples": samples})
    if kind == "shard":
        figures["state"] = len(json.dumps(dataset.state_dict()))
        loader = tarkit.ShardLoader(dataset, batch_size=None, num_workers=workers)
        figures["loader_state"] = len(json.dumps(loader.state_dict()))
        probes = IterableProbe(dataset)
    else:
        start = time.perf_counter()
        sampler = tarkit.BlockSampler(dataset, num_replicas=8, rank=3)
        order = iter(sampler)
        taken = [next(order) for _ in range(1000)]  # mid-epoch
        figures["sampler_seconds"] = time.perf_counter() - start
        figures["sampler_peak"] = status("VmHWM") - before
        figures["state"] = len(json.dumps(sampler.state_dict()))
        probes = MapProbe(dataset, workers)
    figures["grown"] = {part: now - parts[part] for part, now in rss_parts().items()}
    return probes

def measure(kind, manifest, warm, workers):
    # The same steps over a small manifest first: the code they run (torch's, tarkit's)
    # is mapped in from the page cache once, and is not the dataset's memory.
    open_dataset(kind, warm, workers, {})
    gc.collect()
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")
    figures = {}
    probes = open_dataset(kind, manifest, workers, figures)
    parent = private()
    workers_seen = DataLoader(probes, batch_size=None, num_workers=workers,
                              multiprocessing_context="fork", timeout=120)
    figures["workers"] = [dict(w) for w in workers_seen]
    figures["parent_private"] = parent
    return figures

workers = int(sys.argv[1])
tarkit.ShardDataset, tarkit.IndexedDataset, tarkit.BlockSampler, tarkit.ShardLoader  # imported
for kind, manifest, warm in zip(sys.argv[2::3], sys.argv[3::3], sys.argv[4::3]):
    gc.collect()
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # each dataset opened in a process of its own, tarkit and torch loaded
        os.close(reader)
        with os.fdopen(writer, "w") as out:
            out.write(json.dumps({**measure(kind, manifest, warm, workers), "manifest": manifest}))
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as got:
        text = got.read()
    os.waitpid(child, 0)
    print(text, flush=True)
"""


def _warm(manifest: Path) -> Path:
    """A manifest of the first 1,000 shards beside ``manifest``, of its version, to run
    the code of opening once before it is measured."""
    with open(manifest, "rb") as head:
        version_1 = b'"version": 1,' in head.read(200)
    warm = manifest.with_name(f"warm-{manifest.name}")
    (write_v1 if version_1 else write_v2)(warm, BLOCK, SAMPLES)
    return warm


def measure_datasets(
    cases: list[tuple[str, Path]], workers: int = 2, timeout: float = 300
) -> list[dict[str, object]]:
    """Open each ``(dataset, manifest)`` of ``cases`` (``"shard"``: ``tarkit.ShardDataset``;
    ``"indexed"``: ``tarkit.IndexedDataset``) in a process of its own, forked from one
    interpreter with tarkit and torch imported, which has run the same steps over a
    manifest of 1,000 of the shards first (so that the code they run is mapped in, and is
    not counted) and counts anonymous memory in small pages (transparent huge pages off).
    For each: ``seconds`` and ``peak`` (bytes above that process's memory before: Linux's
    VmHWM, reset by clear_refs) to open it and take its ``len()``, ``samples``; ``grown``
    (what its ``RssAnon``, ``RssFile`` and ``RssShmem`` grew by, states and sampler
    included); ``state`` (bytes of JSON: ``state_dict()`` of a
    ShardDataset, of a BlockSampler of 8 ranks 1,000 indices into an epoch for an
    IndexedDataset) and ``loader_state`` (a ShardLoader's); ``sampler_seconds`` and
    ``sampler_peak``; and ``workers``, each DataLoader worker's (forked) ``private``
    memory (USS: the pages it copied or made) and ``rss`` once it has begun reading."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    arguments = [str(a) for kind, manifest in cases for a in (kind, manifest, _warm(manifest))]
    result = subprocess.run(
        [sys.executable, "-c", _DATASETS, str(workers), *arguments],
        capture_output=True, text=True, timeout=timeout, env=env, check=True,
    )  # fmt: skip
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
