"""Issue 16: tarkit's loader side by side with webdataset, litdata and MosaicML streaming.

Every cell is one epoch in a fresh process (``peers_cell.py``, bounded by a timeout):
photos (6,000 JPEGs of 30–75 KB) and tiny images (20,000 64×64 JPEGs), each in 8 tar
shards, which litdata's ``optimize`` and Mosaic's ``MDSWriter`` rewrite into their own
formats (the same samples, cut into about as many chunks); bytes only, and decoded by the
same function for every loader (PIL, resized to 64×64, a uint8 tensor); 0 and 2 workers;
batches of 64 collated by torch in the workers. The cells run in turn, round after round,
so a busy moment on the shared machine falls on all alike; medians over the rounds, and
ratios as medians of the per-round ratios.

The peers belong to the bench environment only (never to ``pyproject.toml``)::

    pip install --no-deps litdata obstore tifffile
    pip install --no-deps mosaicml-streaming brotli python-snappy cramjam zstd catalogue

Mosaic's ``import streaming`` imports torchvision (two names) and transformers (three
names) although a plain ``StreamingDataset`` uses none of them; the torchvision wheel pip
pairs with this torch is a CUDA build that cannot be imported beside the CPU torch, so
Mosaic's runs get stand-in modules for those names (written into the scratch directory,
first on their ``PYTHONPATH`` only). A peer that is not installed gives "not measured" rows.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from data import SETTINGS, cache_dir, median, photo_shards, tiny_image_shards

TITLE = "Loaders side by side: tarkit, webdataset, litdata, Mosaic streaming (issue 16)"
ORDER = 64
SHARDS = 8
ROUNDS = 3  # a full run's rounds at most (each round is every cell once, ~4 minutes)
CELL = Path(__file__).resolve().parent / "peers_cell.py"
LOADERS = ("tarkit", "webdataset", "litdata", "mosaic")
NAMES = {"tarkit": "tarkit.loader", "webdataset": "webdataset", "litdata": "litdata",
         "mosaic": "Mosaic streaming", "pil": "PIL alone (plain loop, in memory)"}  # fmt: skip
PACKAGES = {"webdataset": "webdataset", "litdata": "litdata", "mosaic": "mosaicml-streaming"}
SETS = ("photos", "tiny")
MODES = ("bytes", "decoded")
WORKERS = (0, 2)
STANDINS = {
    "torchvision/__init__.py": "from . import datasets, transforms\n",
    "torchvision/datasets.py": "class VisionDataset:\n    pass\n",
    "torchvision/transforms/__init__.py": "from . import functional\n",
    "torchvision/transforms/functional.py": "def to_tensor(pic):\n    raise NotImplementedError\n",
    "transformers/__init__.py": "",
    "transformers/feature_extraction_utils.py": "class BatchFeature(dict):\n    pass\n",
    "transformers/tokenization_utils_base.py": "class BatchEncoding(dict):\n    pass\n",
    "transformers/models/__init__.py": "",
    "transformers/models/auto/__init__.py": "",
    "transformers/models/auto/tokenization_auto.py": "class AutoTokenizer:\n    pass\n",
}

Cell = tuple[str, str, str, int]  # loader, set, mode, workers
Figures = dict[str, float]


def _env(loader: str, standins: Path) -> dict[str, str]:
    env = dict(os.environ)
    if loader == "mosaic":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(standins),
                                                          env.get("PYTHONPATH")]))  # fmt: skip
    return env


def _python(args: list[str], env: dict[str, str], timeout: float) -> str:
    """Run ``peers_cell.py`` with ``args``; its stdout, or RuntimeError saying why not."""
    try:
        result = subprocess.run([sys.executable, str(CELL), *args], env=env, timeout=timeout,
                                capture_output=True, text=True)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"timed out after {timeout:.0f} s") from None
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeError(f"exit {result.returncode}: {last[:200]}")
    return result.stdout


def _missing(loader: str, standins: Path) -> str | None:
    """Why a peer cannot be measured here, or None."""
    if loader == "tarkit":
        return None
    module = {"mosaic": "streaming"}.get(loader, loader)
    if importlib.util.find_spec(module) is None:
        return f"{PACKAGES[loader]} not installed"
    check = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                           text=True, env=_env(loader, standins), timeout=300)  # fmt: skip
    if check.returncode != 0:
        last = (check.stderr.strip().splitlines() or ["?"])[-1]
        return f"`import {module}` fails: {last[:160]}"
    return None


def _converted(loader: str, name: str, shards: list[Path], env: dict[str, str]) -> Path:
    """The shards rewritten in a peer's own format, cached beside the shards."""
    path = cache_dir() / f"{loader}-{metadata.version(PACKAGES[loader])}-{name}"
    if not path.exists():
        print(f"bench: writing {path} …", file=sys.stderr, flush=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        shutil.rmtree(temp, ignore_errors=True)
        try:
            _python([f"write-{loader}", str(temp), str(SHARDS), *map(str, shards)], env, 3600)
            os.replace(temp, path)
        finally:
            shutil.rmtree(temp, ignore_errors=True)
    return path


def _warm(paths: list[Path]) -> None:
    """Read every file once, so that the first round does not read from disk."""
    for path in paths:
        for file in [path] if path.is_file() else sorted(path.rglob("*")):
            if file.is_file():
                with open(file, "rb") as stream:
                    while stream.read(1 << 24):
                        pass


def run(workdir: Path, quick: bool) -> str:
    load_before = os.getloadavg()
    rounds = 1 if quick else max(1, min(SETTINGS.repeat, ROUNDS))
    timeout = 300 if quick else 900
    standins = workdir / "standins"
    for relative, text in STANDINS.items():
        (standins / relative).parent.mkdir(parents=True, exist_ok=True)
        (standins / relative).write_text(text)
    shards = {"photos": photo_shards(workdir, SHARDS), "tiny": tiny_image_shards(workdir, SHARDS)}
    missing = {loader: _missing(loader, standins) for loader in LOADERS}
    data: dict[tuple[str, str], list[str]] = {}
    for loader in LOADERS:
        for name, paths in shards.items():
            if loader in ("litdata", "mosaic") and missing[loader] is None:
                try:
                    stem = paths[0].name.split("-part")[0]
                    converted = _converted(loader, stem, paths, _env(loader, standins))
                    data[loader, name] = [str(converted)]
                except RuntimeError as error:
                    missing[loader] = f"writing its format failed: {error}"
            else:
                data[loader, name] = [str(p) for p in paths]
    _warm([Path(p) for files in data.values() for p in files])

    cells: list[Cell] = [("pil", name, "decoded", 0) for name in SETS]
    cells += [(loader, name, mode, workers) for name in SETS for mode in MODES
              for workers in WORKERS for loader in LOADERS]  # fmt: skip
    runs: dict[Cell, list[Figures | None]] = {cell: [] for cell in cells}
    errors: dict[Cell, str] = {}
    for number in range(rounds):
        print(f"bench: peers: round {number + 1} of {rounds}", file=sys.stderr, flush=True)
        for cell in cells:
            loader, name, mode, workers = cell
            if missing.get(loader):
                continue
            source = data["tarkit" if loader == "pil" else loader, name]
            try:
                output = _python([loader, mode, str(workers), *source],
                                 _env(loader, standins), timeout)  # fmt: skip
                runs[cell].append(json.loads(output.strip().splitlines()[-1]))
            except (RuntimeError, ValueError, IndexError) as error:
                runs[cell].append(None)
                errors[cell] = str(error)
    load_after = os.getloadavg()
    return _report(runs, errors, missing, rounds, quick, (load_before, load_after))


def _rate(figures: Figures | None) -> float | None:
    return None if figures is None else figures["samples"] / figures["seconds"]


def _ratio(runs: dict[Cell, list[Figures | None]], top: Cell, bottom: Cell) -> float | None:
    """The median over the rounds of top's samples/s ÷ bottom's in the same round."""
    pairs = zip(runs.get(top, []), runs.get(bottom, []), strict=False)
    ratios = [_rate(a) / _rate(b) for a, b in pairs if a and b]  # type: ignore[operator]
    return median(ratios) if ratios else None


def _row(cell: Cell, figures: list[Figures | None], why: str | None) -> str:
    loader, _, mode, workers = cell
    what = f"| {NAMES[loader]} | {mode} | {workers if loader != 'pil' else '—'} |"
    done = [f for f in figures if f is not None]
    if why or not done:
        return f"{what} not measured: {why or 'every run failed'} | | | | |"
    rate = median([f["samples"] / f["seconds"] for f in done])
    cores = median([f["cpu"] / f["seconds"] for f in done])
    cpu = median([f["cpu"] / f["samples"] * 1000 for f in done])
    first = median([f["first"] for f in done])
    samples = {int(f["samples"]) for f in done}
    note = "" if len(done) == len(figures) else f" ({len(figures) - len(done)} run(s) failed)"
    count = "/".join(f"{n:,}" for n in sorted(samples))
    return (f"{what} {rate:,.0f}{note} | {cpu:.3f} | {cores:.2f} | "
            f"{'—' if loader == 'pil' else f'{first:.3f}'} | {count} |")  # fmt: skip


def _report(
    runs: dict[Cell, list[Figures | None]],
    errors: dict[Cell, str],
    missing: dict[str, str | None],
    rounds: int,
    quick: bool,
    load: tuple[tuple[float, ...], tuple[float, ...]],
) -> str:
    lines = [
        f"Each cell: one epoch in a fresh process, the cells in turn, {rounds} round(s) "
        f"(at most {ROUNDS}, whatever `--repeat` says: a round takes about 5 minutes); "
        "medians. Samples/s and time to first batch from making the dataset (worker "
        "start-up included); CPU is the process tree's (`getrusage` of the process and of its "
        "reaped workers), and cores busy is its CPU seconds per second: below 2 with 2 "
        "workers, the other jobs on the machine held the rest. Every loader hands `jpg` and `cls` to the same function: bytes "
        "only, or PIL decode resized to 64×64 as a uint8 tensor; batches of 64 collated by "
        "torch in the workers. litdata and Mosaic read their own formats, written by "
        "`optimize` and `MDSWriter` from the same samples.",
        "",
        f"Load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load[0])}; "
        f"after: {', '.join(f'{x:.2f}' for x in load[1])} (2 cores, shared with other jobs).",
        "",
    ]
    if quick:
        lines += ["**Quick run:** 10× less data, one round; the ratios mean something only "
                  "after a full run.", ""]  # fmt: skip
    for name in SETS:
        title = ("Photos (JPEGs of 30–75 KB, resized to 64×64 when decoded)" if name == "photos"
                 else "Tiny images (64×64 JPEGs of about 2 KB)")  # fmt: skip
        lines += [f"### {title}", "",
                  "| loader | fields | workers | samples/s | CPU ms/sample | cores busy | "
                  "first batch s | samples |", "|---|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for cell in runs:
            if cell[1] == name:
                lines.append(_row(cell, runs[cell], missing.get(cell[0])))
        lines.append("")
    lines += _ratios(runs, missing)
    if errors:
        lines += ["", "Failed runs (the last error of each cell):", ""]
        lines += [
            f"- {NAMES[c[0]]}, {c[1]}, {c[2]}, {c[3]} workers: {e}" for c, e in errors.items()
        ]
    return "\n".join(lines)


def _ratios(runs: dict[Cell, list[Figures | None]], missing: dict[str, str | None]) -> list[str]:
    lines = ["### Ratios (median of the per-round ratios)", "",
             "| figure | measured | goal | verdict |", "|---|---:|---|---|"]  # fmt: skip

    def add(what: str, ratio: float | None, goal: float | None, why: str | None = None) -> None:
        if ratio is None:
            lines.append(f"| {what} | not measured{f': {why}' if why else ''} | "
                         f"{f'≥ {goal:g}' if goal else '—'} | |")  # fmt: skip
            return
        verdict = "" if goal is None else ("PASS" if ratio >= goal else "MISS")
        lines.append(f"| {what} | {ratio:.2f}× | {f'≥ {goal:g}' if goal else '—'} | {verdict} |")

    for name in SETS:
        for mode in MODES:
            for workers in WORKERS:
                ratio = _ratio(runs, ("tarkit", name, mode, workers),
                               ("litdata", name, mode, workers))  # fmt: skip
                add(f"tarkit ÷ litdata, {name}, {mode}, {workers} workers", ratio, 1.2,
                    missing.get("litdata"))  # fmt: skip
    for workers in WORKERS:
        add(f"tarkit, photos decoded, {workers} workers ÷ PIL alone",
            _ratio(runs, ("tarkit", "photos", "decoded", workers), ("pil", "photos", "decoded", 0)),
            0.95 if workers == 0 else None)  # fmt: skip
    for loader in LOADERS:
        ratio = _ratio(runs, (loader, "tiny", "decoded", 2), (loader, "tiny", "decoded", 0))
        add(f"{NAMES[loader]}, tiny decoded, 2 workers ÷ 0", ratio,
            1.85 if loader == "tarkit" else None, missing.get(loader))  # fmt: skip
    for loader in ("webdataset", "mosaic"):
        ratios = [_ratio(runs, ("tarkit", n, m, w), (loader, n, m, w))
                  for n in SETS for m in MODES for w in WORKERS]  # fmt: skip
        present = [r for r in ratios if r is not None]
        span = f"{min(present):.2f}–{max(present):.2f}×" if present else None
        lines.append(f"| tarkit ÷ {NAMES[loader]}, range over the cells | "
                     f"{span or 'not measured: ' + str(missing.get(loader))} | — | |")  # fmt: skip
    return lines
