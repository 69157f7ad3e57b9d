"""Issue 24: `tarkit stats` against `tar2tsv -f cls` in the same run, `-p`, the manifest
alone at 10,000 shards, and image sizes from headers against Pillow's ``Image.open``.

The commands of a table run round-robin (``bench_tools.measure_all``), so that a busy
moment of a shared machine falls on all of them alike.
"""

from __future__ import annotations

import io
import itertools
import time
from pathlib import Path

from bench_tools import Case, Result, measure_all
from data import SETTINGS, large_shard, small_shard, small_shards

TITLE = "tarkit stats: reading shards, the manifest alone, image headers (issue 24)"
ORDER = 15

READ_CASES = [
    Case("tar2tsv", "tar2tsv -f cls < f > out", "tar2tsv -f cls < {f} > {out}", "tar2tsv"),
    Case("stats", "tarkit stats f > out", "tarkit stats {f} > {out}", "stats"),
    Case("stats_json", "tarkit stats --json f > out", "tarkit stats --json {f} > {out}", "stats"),
    Case(
        "stats_pure",
        "TARKIT_PURE=1 tarkit stats f > out",
        "TARKIT_PURE=1 tarkit stats {f} > {out}",
        "stats",
    ),  # fmt: skip
]
SHARDS = 20
SET_CASES = [
    Case(
        "tar2tsv",
        f"tar2tsv -f cls 'part-{{0..{SHARDS - 1}}}' > out",
        "tar2tsv -f cls {f} > {out}",
        "tar2tsv",
    ),  # fmt: skip
    Case("stats", "tarkit stats -p 1 'part-…' > out", "tarkit stats -p 1 {f} > {out}", "stats"),
    Case("stats_p2", "tarkit stats -p 2 'part-…' > out", "tarkit stats -p 2 {f} > {out}", "stats"),
]
MANIFEST_SHARDS = 10_000
MANIFEST_CASES = [
    Case(
        "no_read",
        f"tarkit stats --no-read manifest.json ({MANIFEST_SHARDS:,} shards)",
        "tarkit stats --no-read {f} > {out}",
        "stats",
    ),  # fmt: skip
]


def run(workdir: Path, quick: bool) -> str:
    repeat = SETTINGS.repeat
    sets = {"small": small_shard(workdir), "large": large_shard(workdir)}
    parts = small_shards(workdir, SHARDS)
    pattern = _brace_pattern(parts)
    manifest = _manifest(workdir / "manifest.json", MANIFEST_SHARDS)

    reads = {
        label: measure_all(READ_CASES, workdir, shard, repeat) for label, shard in sets.items()
    }
    spread = measure_all(SET_CASES, workdir, pattern, repeat)
    alone = measure_all(MANIFEST_CASES, workdir, manifest, repeat)

    def ratio(results: dict[str, Result], a: str, b: str) -> float | None:
        x, y = results[a].seconds, results[b].seconds
        return x / y if x is not None and y else None

    rows = [
        "Each figure is the median wall-clock time of real shell pipelines after one untimed "
        "warm-up run, input from the page cache. The small set is 20,000 samples of a ~2.5 KB "
        "JPEG, `.cls` and `.json` (one shard, or cut into 20); the large set 200 samples of a "
        "~1.9 MB JPEG. `tarkit stats` reads every shard whole: sizes of every field, the `cls` "
        "histogram, every JPEG's width and height from its header, every key.",
        "",
        "| pipeline | small s | large s |",
        "| --- | ---: | ---: |",
    ]
    for case in READ_CASES:
        cells = [_seconds(reads[label][case.name]) for label in sets]
        rows.append(f"| `{case.shown}` | {' | '.join(cells)} |")
    rows += ["", f"Over the small set cut into {SHARDS} shards:", "",
             "| pipeline | s |", "| --- | ---: |"]  # fmt: skip
    for case in SET_CASES:
        rows.append(f"| `{case.shown}` | {_seconds(spread[case.name])} |")
    no_read = alone["no_read"].seconds
    pillow, header = _image_header_costs(sets["small"])
    targets = [
        ("`tarkit stats f` ÷ `tar2tsv -f cls < f`, small", ratio(reads["small"], "stats", "tar2tsv"),
         "×", 1.5),
        ("the same, large", ratio(reads["large"], "stats", "tar2tsv"), "×", None),
        (f"`tarkit stats -p 1` ÷ `tar2tsv -f cls`, {SHARDS} shards",
         ratio(spread, "stats", "tar2tsv"), "×", 1.5),
        (f"`tarkit stats -p 2` ÷ `-p 1`, {SHARDS} shards", ratio(spread, "stats_p2", "stats"), "×",
         None),
        (f"`tarkit stats --no-read`, a manifest of {MANIFEST_SHARDS:,} shards", no_read, "s", 1.0),
        ("Pillow `Image.open(…).size` ÷ `image_size`, per small JPEG",
         pillow / header if header else None, "×", None),
    ]  # fmt: skip
    rows += ["", "### Targets", "", "| measure | value | target | result |",
             "| --- | ---: | ---: | --- |"]  # fmt: skip
    for name, value, unit, bound in targets:
        shown = "not measured" if value is None else f"{value:.2f}{unit}"
        verdict = "info" if bound is None else "—"
        if value is not None and bound is not None:
            verdict = "PASS" if value <= bound else "MISS"
        target = "—" if bound is None else f"≤ {bound:g}{unit}"
        rows.append(f"| {name} | {shown} | {target} | {verdict} |")
    rows += [
        "",
        f"Image sizes from headers (`tarkit/format/images.py`), in this process on the small "
        f"set's JPEGs: {header:.2f} µs an image; Pillow's `Image.open(…).size`, which reads "
        f"the same header but makes an image object and a file around it, {pillow:.1f} µs "
        "(that alone would take longer than the whole of `tar2tsv -f cls`). `-p 2` starts two "
        "worker processes (a few tenths of a second): it gains only where reading takes longer "
        "than that and there are cores to spare (see the load average in the header).",
        "",
    ]
    return "\n".join(rows)


def _seconds(result: Result) -> str:
    return f"{result.seconds:.3f}" if result.seconds is not None else result.note


def _brace_pattern(parts: list[Path]) -> Path:
    """The shards as one brace pattern (``…part{000..019}-of020.tar``), expanded by tarkit."""
    head, _, tail = parts[0].name.partition("part000")
    return parts[0].parent / f"{head}part{{000..{len(parts) - 1:03d}}}{tail}"


def _manifest(path: Path, shards: int) -> Path:
    """A manifest of ``shards`` shards (never read: --no-read)."""
    from tarkit.format.manifest import Manifest, ShardInfo

    entries = [ShardInfo(f"train-{i:06d}.tar", 1000 + i % 7, 100_000_000 + i, f"{i:064x}")
               for i in range(shards)]  # fmt: skip
    path.write_bytes(Manifest(entries).to_bytes())
    return path


def _image_header_costs(shard: Path) -> tuple[float, float]:
    """µs an image: Pillow's ``Image.open(…).size`` and ``image_size``, best of 3."""
    from PIL import Image

    from tarkit.format.images import image_size
    from tarkit.format.samples import group_samples
    from tarkit.format.tar import read_members

    with open(shard, "rb") as stream:
        samples = itertools.islice(group_samples(read_members(stream)), 5000)
        images = [sample.get("jpg") for sample in samples]

    def pillow(data: bytes) -> object:
        with Image.open(io.BytesIO(data)) as image:
            return image.size

    def best(size: object) -> float:
        times = []
        for _ in range(3):
            start = time.process_time()
            for data in images:
                size(data)  # type: ignore[operator]
            times.append(time.process_time() - start)
        return min(times) / len(images) * 1e6

    return best(pillow), best(image_size)
