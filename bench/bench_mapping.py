"""Issue 7: map_shards throughput on local processes, and Ray's scheduling cost per shard.

- Local engine: ``tarkit map --fn bench_mapping:resize`` over the small set cut into 8
  shards (decode each JPEG, resize it, encode a PNG: CPU-bound), with ``-j 1`` and
  ``-j 2``. The time is the one the command reports (``in S s``: the worker pool's
  start-up included, the interpreter's and imports' excluded). Target: -j 2 at least
  1.8 times the samples per second of -j 1.
- Scheduling cost per shard: 64 one-sample shards with a function that does nothing,
  through ``map_shards`` on the local engine and on a local Ray started once beforehand
  (its start-up is reported apart). Seconds per shard = wall time / shards, with 2
  workers (local) or 2 CPUs (Ray).
"""

from __future__ import annotations

import io
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from data import BENCH, CommandFailed, median, sample_count, small_shards, timeit_reported

TITLE = "Processing shards: tarkit map / map_shards, local and Ray (issue 7)"
ORDER = 70

SHARDS = 8
TINY_SHARDS = 64
TARGET = 1.8


def resize(sample: dict[str, Any]) -> dict[str, Any]:
    """The CPU-bound work: decode the JPEG, resize it to 64x64, encode a PNG."""
    from PIL import Image

    image = Image.open(io.BytesIO(sample["jpg"])).convert("RGB")
    image = image.resize((64, 64), Image.Resampling.LANCZOS).rotate(90)
    return {"__key__": sample["__key__"], "png": image, "cls": sample["cls"]}


def nothing(sample: dict[str, Any]) -> dict[str, Any]:
    """No work: the sample goes out as it came in."""
    return sample


def _local_throughput(workdir: Path, quick: bool) -> tuple[list[str], float | None]:
    shards = small_shards(workdir, SHARDS, quick=quick)
    samples = sum(sample_count(s) for s in shards)
    inputs = " ".join(shlex.quote(str(s)) for s in shards)
    out = workdir / "out"
    lines = [
        "| workers | seconds | samples/s | × one worker |",
        "| ---: | ---: | ---: | ---: |",
    ]
    rates: dict[int, float] = {}
    for jobs in (1, 2):
        command = (
            f"PYTHONPATH={shlex.quote(str(BENCH))} tarkit map --fn bench_mapping:resize "
            f"{inputs} -o {shlex.quote(str(out))}/ -j {jobs} --overwrite"
        )
        try:
            seconds = median(timeit_reported(command, setup=f"rm -rf {shlex.quote(str(out))}"))
        except CommandFailed as exc:
            lines.append(f"| {jobs} | failed: {exc} | | |")
            continue
        rates[jobs] = samples / seconds
        ratio = rates[jobs] / rates[1] if 1 in rates else float("nan")
        lines.append(f"| {jobs} | {seconds:.2f} | {rates[jobs]:,.0f} | {ratio:.2f} |")
    ratio = rates[2] / rates[1] if len(rates) == 2 else None
    head = (
        f"`tarkit map --fn bench_mapping:resize` on {samples:,} samples in {SHARDS} shards "
        "(JPEG decode, resize to 64x64, PNG encode):"
    )
    return [head, "", *lines], ratio


def _tiny_inputs(workdir: Path) -> list[str]:
    from tarkit.format.tar_writer import TarWriter

    directory = workdir / "tiny"
    directory.mkdir(exist_ok=True)
    paths = []
    for i in range(TINY_SHARDS):
        path = directory / f"t-{i:03d}.tar"
        with open(path, "wb") as stream, TarWriter(stream) as writer:
            writer.add(f"k{i:03d}.txt", b"x")
        paths.append(str(path))
    return paths


def _per_shard(engine: str, inputs: list[str], workdir: Path, **options: Any) -> float:
    from tarkit.processing.driver import map_shards

    out = workdir / f"tiny-{engine}"
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    map_shards(nothing, inputs, f"{out}/", engine=engine, mode="overwrite", **options)
    return (time.perf_counter() - started) / len(inputs)


def _scheduling(workdir: Path, repeat: int) -> list[str]:
    sys.path.insert(0, str(BENCH))  # worker processes import this module by name
    inputs = _tiny_inputs(workdir)
    local = median([_per_shard("local", inputs, workdir, workers=2) for _ in range(repeat)])
    rows = [
        "| engine | seconds per shard | notes |",
        "| --- | ---: | --- |",
        f"| local, 2 processes | {local:.4f} | pool start-up included |",
    ]
    try:
        import ray
    except ImportError:
        rows.append("| ray | – | Ray is not installed (`pip install 'tarkit[ray]'`) |")
        return rows
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    started = time.perf_counter()
    env = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(BENCH), env) if p)
    # A local Ray on loopback: no token (else ray.init() writes ~/.ray/auth_token).
    mode = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    try:
        ray.init(
            num_cpus=2, include_dashboard=False, _temp_dir=temp, logging_level="warning",
            object_store_memory=100_000_000,
        )  # fmt: skip
        start_up = time.perf_counter() - started
        _per_shard("ray", inputs, workdir)  # warm the worker processes
        per_shard = median([_per_shard("ray", inputs, workdir) for _ in range(repeat)])
    finally:
        ray.shutdown()
        os.environ["PYTHONPATH"] = env
        if mode is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = mode
        shutil.rmtree(temp, ignore_errors=True)
    rows.append(
        f"| ray, local, 2 CPUs | {per_shard:.4f} | one task per shard; starting Ray took "
        f"{start_up:.1f} s (not included) |"
    )
    return rows


def run(workdir: Path, quick: bool) -> str:
    from data import SETTINGS

    repeat = 1 if quick else SETTINGS.repeat
    lines, ratio = _local_throughput(workdir, quick)
    if ratio is not None:
        verdict = "meets" if ratio >= TARGET else "misses"
        verdict = f"{verdict} the {TARGET}× target"
        lines += ["", f"Two workers: **{ratio:.2f}×** one worker ({verdict})."]
    lines += [
        "",
        f"Scheduling cost: {TINY_SHARDS} one-sample shards, a function that does nothing "
        f"(wall time / shards, median of {repeat}):",
        "",
        *_scheduling(workdir, repeat),
    ]
    return "\n".join(lines) + "\n"
