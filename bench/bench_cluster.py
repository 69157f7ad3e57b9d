"""Issue 17: shard_dataset on Ray next to the local engine, and the driver's cost per shard.

- engines: ``shard_dataset`` re-encoding JPEGs (decode 512×512, resize to 256×256, encode
  JPEG: ``bench_sharding``'s dataset) with the local engine and 2 DataLoader workers, and
  on a Ray of 2 CPUs on this one machine (started once, and its workers warmed up by a
  tiny run, before timing: a cluster is up before a job); items/s and their ratio. Both write the same bytes (checked).
- driver: the same Ray run over tiny items cut into shards of 2, so that the driver's
  work is mostly per shard (walking the sizes, queueing the write, publishing the
  record and the manifest entry); the driver process's CPU seconds per shard, and the
  wall time per shard.

Target from the issue: Ray at least 0.9× the local engine's items/s.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from pathlib import Path

from bench_sharding import Photos, _repeat, _verdict, reencode

TITLE = "Sharding on Ray: shard_dataset with engine='ray' (issue 17)"
ORDER = 55

IMAGES, IMAGES_QUICK = 2_000, 500
TINY, TINY_QUICK = 2_000, 600
RAY_TARGET = 0.9
BENCH = Path(__file__).resolve().parent


class Tiny:
    """Items of a few bytes: the work of a run is then the driver's and the tasks'."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict[str, object]:
        return {"__key__": f"t{index:06d}", "txt": str(index)}


def _shard(dataset: object, directory: Path, **options: object) -> None:
    from tarkit.writing.from_dataset import shard_dataset

    shard_dataset(dataset, str(directory / "p-%06d.tar"), **options)  # type: ignore[arg-type]


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def run(workdir: Path, quick: bool) -> str:
    import ray
    import torch.utils.data  # noqa: F401  (imported once, before timing)

    runs = _repeat(quick)
    items = IMAGES_QUICK if quick else IMAGES
    photos = Photos(items)
    # Ray workers import this module and bench_sharding's (the dataset and to_sample).
    path = os.pathsep.join([str(BENCH), str(BENCH.parent)])
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=300_000_000,
             runtime_env={"env_vars": {"PYTHONPATH": path}}, log_to_driver=False)  # fmt: skip
    try:
        # Ray starts its worker processes on the first tasks; a cluster's are warm.
        _shard(Tiny(8), workdir / "warm-up", engine="ray")
        local_dir, ray_dir = workdir / "local", workdir / "ray"
        engines = {
            "local, 2 DataLoader workers": (local_dir, {"num_workers": 2}),
            "Ray, 2 CPUs, one node": (ray_dir, {"engine": "ray"}),
        }
        seconds = {}
        for name, (target, options) in engines.items():
            times = []
            for _ in range(runs):
                shutil.rmtree(target, True)
                started = time.perf_counter()
                _shard(photos, target, to_sample=reencode, **options)
                times.append(time.perf_counter() - started)
            seconds[name] = statistics.median(times)
        same = _files(local_dir) == _files(ray_dir)  # the last run of each

        tiny = TINY_QUICK if quick else TINY
        shards = tiny // 2
        cpu, wall = [], []
        for _ in range(runs):
            target = workdir / "tiny"
            shutil.rmtree(target, True)
            started, started_cpu = time.perf_counter(), time.process_time()
            _shard(Tiny(tiny), target, engine="ray", maxcount=2)
            wall.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
    finally:
        ray.shutdown()
    local, on_ray = seconds["local, 2 DataLoader workers"], seconds["Ray, 2 CPUs, one node"]
    ratio = local / on_ray
    cpu_ms, wall_ms = min(cpu) / shards * 1000, min(wall) / shards * 1000
    lines = [
        f"### `shard_dataset` re-encoding {items:,} images, 512² JPEG → 256² JPEG "
        f"(median of {runs})",
        "",
        "| engine | seconds | items/s |",
        "| --- | ---: | ---: |",
        *(f"| {name} | {s:.2f} | {items / s:,.0f} |" for name, s in seconds.items()),
        "",
        f"Ray runs at **{ratio:.2f}×** the local engine's rate (target ≥ {RAY_TARGET:g}×: "
        f"{_verdict(ratio, RAY_TARGET)}); the shards are "
        f"{'byte-identical' if same else 'NOT identical (a bug)'}. Worker start-up is "
        "included for the local engine; the Ray of 2 CPUs is started, and its workers warmed up, before timing.",
        "",
        f"### The driver's cost per shard: {tiny:,} tiny items in {shards:,} shards of 2, on Ray",
        "",
        "| driver CPU per shard | wall time per shard |",
        "| ---: | ---: |",
        f"| {cpu_ms:.2f} ms | {wall_ms:.2f} ms |",
        "",
        "The driver's CPU time covers walking the sizes, queueing each write, collecting "
        "results and publishing the manifest; the wall time includes the Ray tasks "
        f"(best of {runs}).",
        "",
    ]
    return "\n".join(lines)
