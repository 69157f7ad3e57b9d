"""Issue 25 (item 4): reduced decoding, ``resize=``, beside a full decode and the same resize.

Cases: the peers' photos (JPEGs of 30–75 KB, 360–440 × 250–350 pixels; two of their 8
shards) to ``224x224:crop`` and to ``112x112:crop``, and 256×256 JPEGs drawn like the tiny
set's to ``64x64:crop``. Each case runs two paths side by side, in turn, round after round:

- full: PIL decodes the whole image and tarkit's resize (``resize_image``, Lanczos, what
  ``tarkit shard --resize`` does) resizes it, as a ``map=`` would;
- reduced: ``decode="rgb8", resize=…`` (JPEG decoded at 1/2, 1/4 or 1/8 when that is still
  at least the size resized to, then the same resize).

Each path is timed in one process over the images in memory (PIL alone), and through
``tarkit.loader`` (batches of 64) with 0 workers and with 2 persistent workers (later
epochs: the workers are up). Ratios are medians of the per-round ratios. The PSNR of the
reduced path against the full one is over the first 200 images of each case.
"""

from __future__ import annotations

import functools
import io
import math
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from data import SETTINGS, median, photo_shards, square_image_shards

TITLE = "Reduced decoding: resize= beside a full decode and the same resize (issue 25)"
ORDER = 61
BATCH = 64
ROUNDS = 3  # at most, whatever --repeat says (a round is about a minute)
CASES = (("photos", "224x224:crop"), ("photos", "112x112:crop"), ("square", "64x64:crop"))
GOALS = {("photos", "224x224:crop"): 1.8, ("square", "64x64:crop"): 1.8}
PSNR_GOAL = 35.0
ALONE = 400  # images of a case decoded by PIL alone in one timing
Case = tuple[str, str]  # set, resize
Cell = tuple[Case, str, int]  # case, "full" or "reduced", workers (-1: PIL alone)
Figures = tuple[tuple[float, float, int], tuple[float, float], int]  # PSNR, split, images


def _label(case: Case) -> str:
    return f"{'photos' if case[0] == 'photos' else '256×256'} → {case[1]}"


def full_decode(size: tuple[int, int, str], data: bytes) -> Any:
    """The baseline: PIL's full decode, then tarkit's resize, as a uint8 H×W×3 array."""
    import numpy as np
    from PIL import Image

    from tarkit.format.encoding import resize_image

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(resize_image(image.convert("RGB"), *size))


def full_pair(size: tuple[int, int, str], pair: tuple[bytes, bytes]) -> tuple[Any, int]:
    return full_decode(size, pair[0]), int(pair[1])


def _images(paths: list[Path]) -> list[bytes]:
    from tarkit.format.samples import group_samples
    from tarkit.format.tar import read_members

    images = []
    for path in paths:
        with open(path, "rb") as stream:
            images += [s.data()["jpg"] for s in group_samples(read_members(stream, str(path)))]
    return images


def _epoch(loader: Any) -> float:
    """samples/s of one pass over ``loader``."""
    start = time.perf_counter()
    count = sum(len(labels) for _, labels in loader)
    return count / (time.perf_counter() - start)


def _alone(decode: Any, images: list[bytes]) -> float:
    start = time.perf_counter()
    for data in images:
        decode(data)
    return len(images) / (time.perf_counter() - start)


def _psnr(images: list[bytes], size: tuple[int, int, str]) -> tuple[float, float, int]:
    """Median and minimum PSNR (dB) of the reduced path against the full one, and how
    many of the images a DCT scale applied to."""
    import numpy as np
    from PIL import Image

    from tarkit.format.encoding import resized_size
    from tarkit.loading.resized_images import ResizedImageHandler

    reduced = ResizedImageHandler("rgb8", size)
    values, drafted = [], 0
    for data in images[:200]:
        ours = reduced("jpg", data).astype(np.float64)
        error = np.mean((ours - full_decode(size, data)) ** 2)
        values.append(math.inf if error == 0 else 10 * math.log10(255**2 / error))
        with Image.open(io.BytesIO(data)) as image:
            width = image.width
            box = image.draft(None, resized_size(image.size, *size))
            drafted += box is not None and box[1][2] < width
    return median(values), min(values), drafted


def _split(images: list[bytes], size: tuple[int, int, str]) -> tuple[float, float]:
    """ms per image of the full path's decode alone and of its resize alone."""
    from PIL import Image

    from tarkit.format.encoding import resize_image

    start = time.perf_counter()
    decoded = []
    for data in images:
        with Image.open(io.BytesIO(data)) as image:
            decoded.append(image.convert("RGB"))
    middle = time.perf_counter()
    for image in decoded:
        resize_image(image, *size)
    end = time.perf_counter()
    return (middle - start) * 1000 / len(images), (end - middle) * 1000 / len(images)


def run(workdir: Path, quick: bool) -> str:
    import tarkit
    from tarkit.format.encoding import parse_resize
    from tarkit.loading.resized_images import ResizedImageHandler

    load_before = os.getloadavg()
    rounds = 1 if quick else max(1, min(SETTINGS.repeat, ROUNDS))
    sets = {"photos": photo_shards(workdir, 8)[:2], "square": square_image_shards(workdir, 2)}
    images = {name: _images(paths) for name, paths in sets.items()}
    loaders: dict[Cell, Any] = {}
    alone: dict[Cell, Any] = {}
    for label in CASES:
        name, text = label
        size = parse_resize(text)
        urls = [str(p) for p in sets[name]]
        for workers in (0, 2):
            common = {"to_tuple": "jpg cls", "persistent_workers": workers > 0}
            loaders[label, "full", workers] = tarkit.loader(
                urls, BATCH, workers, map=functools.partial(full_pair, size), **common
            )
            loaders[label, "reduced", workers] = tarkit.loader(
                urls, BATCH, workers, decode="rgb8", resize=text, **common
            )
        reduced = ResizedImageHandler("rgb8", size)
        alone[label, "full", -1] = (functools.partial(full_decode, size), images[name][:ALONE])
        alone[label, "reduced", -1] = (functools.partial(reduced, "jpg"), images[name][:ALONE])
    rates: dict[Cell, list[float]] = {key: [] for key in [*alone, *loaders]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch on read-only numpy arrays
        for loader in loaders.values():
            _epoch(loader)  # starts the persistent workers, warms the page cache
        for number in range(rounds):
            print(f"bench: decoding: round {number + 1} of {rounds}", file=sys.stderr, flush=True)
            for key, (decode, some) in alone.items():
                rates[key].append(_alone(decode, some))
            for key, loader in loaders.items():
                rates[key].append(_epoch(loader))
    figures = {
        (name, text): (
            _psnr(images[name], parse_resize(text)),
            _split(images[name][:ALONE], parse_resize(text)),
            len(images[name]),
        )
        for name, text in CASES
    }
    load_after = os.getloadavg()
    return _report(rates, figures, rounds, quick, (load_before, load_after))


def _report(
    rates: dict[Cell, list[float]],
    figures: dict[Case, Figures],
    rounds: int,
    quick: bool,
    load: tuple[tuple[float, ...], tuple[float, ...]],
) -> str:
    lines = [
        f"Samples/s, medians of {rounds} round(s) (each path of each case once per round, in "
        f"turn); PIL alone: {ALONE} images in memory decoded and resized in one process; "
        f"`tarkit.loader`: one epoch, batches of {BATCH}, 2 workers persistent (later "
        "epochs). Full: PIL decodes the whole image, then tarkit's resize (Lanczos); "
        'reduced: `decode="rgb8", resize=…`.',
        "",
        f"Load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load[0])}; "
        f"after: {', '.join(f'{x:.2f}' for x in load[1])} (2 cores, shared with other jobs).",
        "",
    ]
    if quick:
        lines += ["**Quick run:** 10× less data, one round.", ""]
    lines += [
        "| case | path | PIL alone | loader, 0 workers | loader, 2 workers |",
        "|---|---|---:|---:|---:|",
    ]
    for case in CASES:
        for path in ("full", "reduced"):
            cells = [f"{median(rates[case, path, w]):,.0f}" for w in (-1, 0, 2)]
            lines.append(f"| {_label(case)} | {path} | {' | '.join(cells)} |")
    lines += [
        "",
        "| case | reduced ÷ full: PIL alone | 0 workers | 2 workers | goal | verdict |",
        "|---|---:|---:|---:|---|---|",
    ]
    for case in CASES:
        ratios = []
        for workers in (-1, 0, 2):
            pairs = zip(rates[case, "reduced", workers], rates[case, "full", workers], strict=True)
            ratios.append(median([a / b for a, b in pairs]))
        goal = GOALS.get(case)
        verdict = "" if goal is None else ("PASS" if min(ratios[1:]) >= goal else "MISS")
        lines.append(f"| {_label(case)} | {ratios[0]:.2f}× | {ratios[1]:.2f}× | {ratios[2]:.2f}× | "
                     f"{f'≥ {goal:g}× (0 and 2 workers)' if goal else '—'} | {verdict} |")  # fmt: skip
    lines += [
        "",
        "| case | images a DCT scale applied to | PSNR median | PSNR min | goal | "
        "full path: decode ms | resize ms |",
        "|---|---:|---:|---:|---|---:|---:|",
    ]
    for case, ((middle, low, drafted), (decode_ms, resize_ms), count) in figures.items():
        shown = min(count, 200)
        verdict = "PASS" if low >= PSNR_GOAL else "MISS"
        lines.append(f"| {_label(case)} | {drafted} of {shown} | {_db(middle)} | {_db(low)} | "
                     f"≥ {PSNR_GOAL:g} dB: {verdict} | {decode_ms:.2f} | {resize_ms:.2f} |")  # fmt: skip
    lines += [
        "",
        "A DCT scale applies only when the image is at least twice the size it is resized to "
        "(before the crop): the photos, 250–350 pixels high, cover 224×224 at full scale "
        "only, so their reduced path is their full path (ratio about 1). What a full decode "
        "costs there is the Lanczos resize and the decode of the whole file (the entropy "
        "decoding, which no DCT scale shortens); see docs/loading.md.",
    ]
    return "\n".join(lines)


def _db(value: float) -> str:
    return "identical" if math.isinf(value) else f"{value:.1f} dB"
