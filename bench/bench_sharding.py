"""Issue 5: ShardWriter against webdataset.ShardWriter, and shard_dataset with workers.

Both parts run in this process on data made here (deterministic, in memory):

- writers: ~20,000 small samples (a ~2.5 KB JPEG-sized payload, ``cls``, ``json``, all as
  bytes) written into 100 MB shards by ``tarkit.ShardWriter`` and by
  ``webdataset.ShardWriter``; samples per second, median of the runs.
- workers: ``shard_dataset`` over a map-style dataset whose items need image re-encoding
  (decode a 512×512 JPEG, resize to 256×256, encode JPEG), with 0 and 2 DataLoader
  workers. torch is imported before timing.

Targets from the issue: the writer at least 5× webdataset's samples per second; 2 workers
at least 1.7× the rate of 0 workers.
"""

from __future__ import annotations

import io
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path

TITLE = "Sharding: ShardWriter and shard_dataset (issue 5)"
ORDER = 50

WRITER_SAMPLES, WRITER_SAMPLES_QUICK = 20_000, 2_000
IMAGES, IMAGES_QUICK = 600, 60
WRITER_TARGET, WORKERS_TARGET = 5.0, 1.7


def _repeat(quick: bool) -> int:
    try:
        from data import SETTINGS  # bench/run.py puts bench/ on the path

        return 1 if quick else SETTINGS.repeat
    except ImportError:
        return 1 if quick else 5


def small_samples(count: int) -> list[dict[str, object]]:
    """Samples of bytes, like the benchmark's small shard: ~2.5 KB + cls + json."""
    import random

    rng = random.Random(5)
    payloads = [rng.randbytes(2300 + 40 * i) for i in range(16)]
    return [
        {
            "__key__": f"sample{i:06d}",
            "jpg": payloads[i % 16],
            "cls": str(i % 10).encode(),
            "json": b'{"index": %d, "split": "train"}' % i,
        }
        for i in range(count)
    ]


def _timed(action: Callable[[], object], cleanup: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        cleanup()
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    cleanup()
    return statistics.median(times)


def write_tarkit(samples: list[dict[str, object]], directory: Path) -> None:
    from tarkit import ShardWriter

    directory.mkdir(parents=True, exist_ok=True)
    with ShardWriter(str(directory / "s-%06d.tar"), maxsize=100_000_000) as writer:
        for sample in samples:
            writer.write(sample)


def write_webdataset(samples: list[dict[str, object]], directory: Path) -> None:
    import webdataset

    directory.mkdir(parents=True, exist_ok=True)
    with webdataset.ShardWriter(str(directory / "s-%06d.tar"), maxsize=100_000_000,
                                verbose=0) as writer:  # fmt: skip
        for sample in samples:
            writer.write(sample)


class Photos:
    """A map-style dataset of JPEG bytes that each need decoding, resizing, encoding."""

    def __init__(self, count: int) -> None:
        import numpy
        from PIL import Image, ImageFilter

        rng = numpy.random.default_rng(7)
        self.count = count
        self.jpegs = []
        for _ in range(8):
            pixels = rng.integers(0, 256, (512, 512, 3), dtype=numpy.uint8)
            image = Image.fromarray(pixels).filter(ImageFilter.GaussianBlur(2))
            out = io.BytesIO()
            image.save(out, format="JPEG", quality=90)
            self.jpegs.append(out.getvalue())

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> bytes:
        return self.jpegs[index % len(self.jpegs)]


def reencode(item: bytes, index: int) -> dict[str, object]:
    from PIL import Image

    image = Image.open(io.BytesIO(item)).convert("RGB").resize((256, 256))
    return {"__key__": f"photo{index:06d}", "jpg": image, "cls": index % 10}


def shard_photos(dataset: Photos, directory: Path, workers: int) -> None:
    from tarkit.writing.from_dataset import shard_dataset

    shard_dataset(dataset, str(directory / "p-%06d.tar"), num_workers=workers,
                  to_sample=reencode)  # fmt: skip


def _verdict(ratio: float, target: float) -> str:
    return "PASS" if ratio >= target else "MISS"


def run(workdir: Path, quick: bool) -> str:
    runs = _repeat(quick)
    count = WRITER_SAMPLES_QUICK if quick else WRITER_SAMPLES
    samples = small_samples(count)
    tk_dir, wds_dir = workdir / "tarkit", workdir / "webdataset"
    import webdataset  # noqa: F401  (its import of torch is not part of the timing)

    tk = _timed(lambda: write_tarkit(samples, tk_dir), lambda: shutil.rmtree(tk_dir, True), runs)
    wd = _timed(lambda: write_webdataset(samples, wds_dir),
                lambda: shutil.rmtree(wds_dir, True), runs)  # fmt: skip
    ratio = wd / tk
    lines = [
        f"### Writing {count:,} small in-memory samples (median of {runs})",
        "",
        "| writer | seconds | samples/s |",
        "| --- | ---: | ---: |",
        f"| `tarkit.ShardWriter` | {tk:.3f} | {count / tk:,.0f} |",
        f"| `webdataset.ShardWriter` | {wd:.3f} | {count / wd:,.0f} |",
        "",
        f"`ShardWriter` is **{ratio:.1f}×** webdataset's rate (target ≥ {WRITER_TARGET:g}×: "
        f"{_verdict(ratio, WRITER_TARGET)}).",
        "",
    ]

    items = IMAGES_QUICK if quick else IMAGES
    photos = Photos(items)
    import torch.utils.data  # noqa: F401  (imported once, before timing)

    seconds = {}
    for workers in (0, 2):
        target = workdir / f"photos-{workers}"
        seconds[workers] = _timed(lambda w=workers, d=target: shard_photos(photos, d, w),
                                  lambda d=target: shutil.rmtree(d, True), runs)  # fmt: skip
    speedup = seconds[0] / seconds[2]
    lines += [
        f"### `shard_dataset` re-encoding {items:,} images, 512² JPEG → 256² JPEG "
        f"(median of {runs})",
        "",
        "| DataLoader workers | seconds | items/s |",
        "| ---: | ---: | ---: |",
        *(f"| {w} | {s:.2f} | {items / s:,.0f} |" for w, s in seconds.items()),
        "",
        f"2 workers run at **{speedup:.2f}×** the rate of 0 workers (target ≥ "
        f"{WORKERS_TARGET:g}×: {_verdict(speedup, WORKERS_TARGET)}); worker start-up is "
        "included.",
        "",
    ]
    return "\n".join(lines)
