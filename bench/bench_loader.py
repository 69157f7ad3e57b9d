"""Issue 6: the training loader (ShardDataset, tarkit.loader) against webdataset.WebDataset.

Throughput is timed in-process (both libraries import torch; the import is not timed) on
the small-sample set cut into 8 shards. Time to first batch streams one large shard
(~1 GB; ~64 MB under ``--quick``) from ``python -m http.server`` on 127.0.0.1.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from data import SETTINGS, large_shard, median, small_shards, tiny_image_shards

TITLE = "Training loader: ShardDataset and tarkit.loader (issue 6)"
ORDER = 60
SHARDS = 8
BATCH = 64


def _timed(run: Callable[[], int], repeat: int) -> tuple[float, int]:
    """Median seconds of ``run`` (which returns a sample count) after one warm-up."""
    count = run()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        count = run()
        times.append(time.perf_counter() - start)
    return median(times), count


def _iterate(items: object) -> int:
    return sum(1 for _ in items)  # type: ignore[attr-defined]


def _batches(loader: object) -> int:
    return sum(len(batch[1]) for batch in loader)  # type: ignore[attr-defined]


def throughput(urls: list[str], repeat: int) -> dict[str, tuple[float, int]]:
    import webdataset as wds

    import tarkit

    def webdataset(decode: bool) -> int:
        dataset = wds.WebDataset(urls, shardshuffle=False, empty_check=False)
        return _iterate(dataset.decode("rgb8") if decode else dataset)

    def loader(workers: int) -> int:
        return _batches(tarkit.loader(urls, BATCH, workers, decode="rgb8", to_tuple="jpg cls"))

    # Training runs many epochs over workers that stay up: the warm-up epoch starts them,
    # each timed epoch reuses them (no fork, no imports).
    persistent = tarkit.loader(
        urls, BATCH, 2, decode="rgb8", to_tuple="jpg cls", persistent_workers=True
    )

    cases: dict[str, Callable[[], int]] = {
        "tarkit, no decoding": lambda: _iterate(tarkit.ShardDataset(urls)),
        "webdataset, no decoding": lambda: webdataset(False),
        'tarkit, decode("rgb8")': lambda: _iterate(tarkit.ShardDataset(urls, decode="rgb8")),
        'webdataset, decode("rgb8")': lambda: webdataset(True),
        "tarkit.loader, rgb8, 0 workers": lambda: loader(0),
        "tarkit.loader, rgb8, 2 workers": lambda: loader(2),
        "tarkit.loader, rgb8, 2 persistent workers, later epochs": lambda: _batches(persistent),
    }
    return {name: _timed(case, repeat) for name, case in cases.items()}


def scaling(urls: list[str], repeat: int) -> dict[str, float]:
    """samples/s of ``tarkit.loader`` on the tiny-image set, bytes only and decoded, with 0
    and 2 persistent workers (later epochs: no start-up), batches of ``BATCH``. Bytes only,
    the two run in turn, round after round, and ``bytes ratio`` is the median of the
    rounds' ratios (a machine shared with other jobs changes speed from one second to the
    next); ``main CPU µs`` is the main process's processor time per sample with 2 workers."""
    import tarkit

    results: dict[str, float] = {}
    loaders = {w: tarkit.loader(urls, BATCH, w, persistent_workers=w > 0) for w in (0, 2)}
    for loader in loaders.values():
        sum(len(b["jpg"]) for b in loader)  # workers started, caches warm
    rates: dict[int, list[float]] = {0: [], 2: []}
    main_cpu = []
    for _ in range(max(repeat, 3)):
        for workers, loader in loaders.items():
            start, cpu = time.perf_counter(), time.process_time()
            count = sum(len(b["jpg"]) for _ in range(3) for b in loader)
            rates[workers].append(count / (time.perf_counter() - start))
            if workers:
                main_cpu.append((time.process_time() - cpu) / count)
    for workers, rate in rates.items():
        results[f"bytes, {workers} workers"] = median(rate)
    results["bytes ratio"] = median([b / a for a, b in zip(rates[0], rates[2], strict=True)])
    results["main CPU µs"] = median(main_cpu) * 1e6
    del loaders
    options: dict[str, object] = {"decode": "rgb8", "to_tuple": "jpg cls"}
    for workers in (0, 2):
        loader = tarkit.loader(urls, BATCH, workers, persistent_workers=workers > 0, **options)
        seconds, count = _timed(lambda loader=loader: _batches(loader), repeat)
        results[f"decoded, {workers} workers"] = count / seconds
    return results


def big_shard(workdir: Path, size: int) -> Path:
    """A shard of at least ``size`` bytes: the large set's samples repeated under new keys."""
    from tarkit.format.samples import group_samples
    from tarkit.format.tar import read_members
    from tarkit.format.tar_writer import TarWriter

    with open(large_shard(workdir), "rb") as stream:
        samples = [s.data() for s in group_samples(read_members(stream))]
    path = workdir / "big.tar"
    with open(path, "wb") as out, TarWriter(out, mtime=0) as writer:
        number = 0
        while writer.bytes_written < size:
            for field, data in samples[number % len(samples)].items():
                writer.add(f"{number:08d}.{field}", data)
            number += 1
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_batch(workdir: Path, size: int, repeat: int) -> dict[str, float]:
    import tarkit

    shard = big_shard(workdir, size)
    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "http.server",
            str(port),
            "--bind",
            "127.0.0.1",
            "--directory",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        url = f"http://127.0.0.1:{port}/{shard.name}"
        results = {}
        for workers in (0, 2):
            times = []
            for _ in range(repeat + 1):
                start = time.perf_counter()
                loader = tarkit.loader(url, 8, workers, decode="rgb8", to_tuple="jpg cls")
                iterator = iter(loader)
                next(iterator)
                times.append(time.perf_counter() - start)
                del iterator  # stops the workers and closes the connection
            results[f"{workers} workers"] = median(times[1:])
        results["size"] = shard.stat().st_size
        return results
    finally:
        server.terminate()
        server.wait(10)


def run(workdir: Path, quick: bool) -> str:
    repeat = SETTINGS.repeat
    urls = [str(p) for p in small_shards(workdir, SHARDS)]
    with warnings.catch_warnings():
        # torch on webdataset's read-only arrays; one shard for two workers in first_batch
        warnings.simplefilter("ignore", UserWarning)
        results = throughput(urls, repeat)
        tiny = scaling([str(p) for p in tiny_image_shards(workdir, SHARDS)], repeat)
        first = first_batch(workdir, (64 << 20) if quick else (1 << 30), repeat)

    def rate(name: str) -> float:
        seconds, count = results[name]
        return count / seconds

    lines = [
        f"Small-sample set in {SHARDS} shards, timed in-process after one warm-up run "
        f"(median of {repeat}); batches of {BATCH} for the loader rows, collated by torch.",
        "",
    ]
    if quick:
        lines += ["**Quick run:** 10× less data; the ratios mean something after a full run.", ""]
    lines += ["| case | samples | seconds | samples/s |", "|---|---:|---:|---:|"]
    for name, (seconds, count) in results.items():
        lines.append(f"| {name} | {count} | {seconds:.3f} | {count / seconds:,.0f} |")
    plain = rate("tarkit, no decoding") / rate("webdataset, no decoding")
    decoded = rate('tarkit, decode("rgb8")') / rate('webdataset, decode("rgb8")')
    zero = rate("tarkit.loader, rgb8, 0 workers")
    workers = rate("tarkit.loader, rgb8, 2 workers") / zero
    steady = rate("tarkit.loader, rgb8, 2 persistent workers, later epochs") / zero
    size_mb = first["size"] / 1e6
    checks = [
        ("no decoding vs webdataset", f"{plain:.2f}×", "≥ 3×", plain >= 3),
        ('decode("rgb8") vs webdataset', f"{decoded:.2f}×", "≥ 1×", decoded >= 1),
        (
            "DataLoader 2 workers vs 0, decoding, one epoch with worker start-up",
            f"{workers:.2f}×",
            "≥ 1.7×",
            workers >= 1.7,
        ),
        (
            "DataLoader 2 workers vs 0, decoding, later epochs (persistent workers)",
            f"{steady:.2f}×",
            "≥ 1.7×",
            steady >= 1.7,
        ),
        (
            f"first batch, {size_mb:,.0f} MB shard over HTTP, 0 workers",
            f"{first['0 workers']:.3f} s",
            "< 1 s",
            first["0 workers"] < 1,
        ),
        (
            f"first batch, {size_mb:,.0f} MB shard over HTTP, 2 workers",
            f"{first['2 workers']:.3f} s",
            "(start-up of 2 workers included)",
            None,
        ),
    ]
    lines += [
        "",
        f"Tiny-image set (64×64 JPEGs, {SHARDS} shards), `tarkit.loader` with 2 persistent "
        "workers (later epochs) against none; batches cross through reused shared memory "
        "(docs/loading.md).",
        "",
        "| case | samples/s |",
        "|---|---:|",
        *(f"| {name} | {rate:,.0f} |" for name, rate in tiny.items() if "workers" in name),
        "",
        "Bytes only, the main process spent "
        f"{tiny['main CPU µs']:.1f} µs of processor time per sample with 2 workers "
        "(unpickling the bundles the workers ship through shared memory: every key and "
        "value is a new object); the workers' reading costs what it costs in one process.",
    ]
    tiny_bytes = tiny["bytes ratio"]
    tiny_decoded = tiny["decoded, 2 workers"] / tiny["decoded, 0 workers"]
    checks += [
        ("tiny set, 2 workers vs 0, decoded", f"{tiny_decoded:.2f}×", "≥ 1.85×",
         tiny_decoded >= 1.85),
        ("tiny set, 2 workers vs 0, bytes only (median of paired rounds)",
         f"{tiny_bytes:.2f}×", "≥ 1.6× (issue 25)", tiny_bytes >= 1.6),
    ]  # fmt: skip
    lines += ["", "| target | measured | goal | verdict |", "|---|---:|---|---|"]
    for what, measured, goal, ok in checks:
        verdict = "" if ok is None else ("PASS" if ok else "MISS")
        lines.append(f"| {what} | {measured} | {goal} | {verdict} |")
    lines += [
        "",
        "Why two workers give less than 1.7× here (measured 2026-11-24 with `getrusage` and "
        "py-spy on this set, 80×80 JPEGs, batches of 64): the main process uses little CPU "
        "(0.25 s an epoch), but the workers used about 2.95 s of CPU for the 2.3 s the same "
        "work takes in one process. In a worker, torch's `default_collate` wrote each batch "
        "into new shared memory (`_new_shared`, then page faults), about five times the cost "
        "of collating in-process; since issue 16 a worker of `tarkit.loader` collates into a "
        "reused shared-memory slot instead (about 0.25 ms for a batch of 64 64×64 images "
        "against 4–10 ms; docs/loading.md). Decoding runs about 20% slower in a worker; fresh "
        "workers also import Pillow's plugins again. The machine itself scales: `tarkit map` with two "
        "workers runs 1.98× one worker on CPU-bound work (below). Larger images amortize "
        "the per-batch cost.",
    ]
    return "\n".join(lines)
