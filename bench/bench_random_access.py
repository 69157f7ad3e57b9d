"""Issue 23: random access, ``IndexedDataset[i]`` beside wids, litdata and Mosaic streaming.

- ``ds[i]`` in a random order over local shards in the page cache, bytes only, on the
  peers' data sets (tiny images: 20,000 64×64 JPEGs; photos: 6,000 JPEGs of 30–75 KB, 8
  shards each): ``tarkit.IndexedDataset`` over the tar shards and their indexes,
  ``wids.ShardListDataset`` over the same shards, litdata's and Mosaic's
  ``StreamingDataset`` over their own formats of the same samples (written as
  ``bench_peers.py`` writes them, and cached with them). Each cell in a fresh process
  (``random_access_cell.py``), the cells in turn, round after round; samples/s by wall
  time (goal: tarkit ≥ 1.2× each peer) and the CPU time per sample (less sensitive to the
  other jobs of a shared machine).
- A DataLoader with 2 workers and ``BlockSampler``, decoded, beside the sequential
  ``tarkit.loader`` on the same shards (goal: within 10 %).
- Over HTTP on 127.0.0.1 (the test suite's ``ShardServer``): requests per sample without
  a cache (goal: 1), and bytes sent in an epoch with ``BlockSampler`` and a cache of a few
  shards ÷ the dataset's bytes (goal: ≤ 1.1).

The peers are installed as ``bench_peers.py`` says; one that is missing gives "not
measured" rows. wids is webdataset's own random-access reader (``pip install wids``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from data import ROOT, SETTINGS, median, photo_shards, tiny_image_shards

TITLE = "Random access: IndexedDataset beside wids, litdata and Mosaic streaming (issue 23)"
ORDER = 67
SHARDS = 8
CELL = Path(__file__).resolve().parent / "random_access_cell.py"
PEERS = ("wids", "litdata", "mosaic")
NAMES = {"tarkit": "tarkit `IndexedDataset[i]`", "wids": "wids `ShardListDataset[i]`",
         "litdata": "litdata `StreamingDataset[i]`", "mosaic": "Mosaic `StreamingDataset[i]`"}  # fmt: skip


def _indexed(workdir: Path, name: str, shards: list[Path]) -> list[str]:
    """The shards linked into ``workdir`` with their indexes beside them (the cached data
    sets are never written to)."""
    from tarkit.format.index import SUFFIX, index_stream

    directory = workdir / name
    directory.mkdir(parents=True, exist_ok=True)
    urls = []
    for shard in shards:
        link = directory / shard.name
        if not link.exists():
            link.symlink_to(shard)
        with open(shard, "rb") as stream:
            Path(str(link) + SUFFIX).write_bytes(index_stream(stream, str(shard)))
        urls.append(str(link))
    return urls


def _cell(args: list[str], env: dict[str, str], timeout: float) -> dict[str, float]:
    result = subprocess.run([sys.executable, str(CELL), *args], env=env, timeout=timeout,
                            capture_output=True, text=True, cwd=CELL.parent)  # fmt: skip
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeError(f"exit {result.returncode}: {last[:200]}")
    figures: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def _missing(loader: str, standins: Path) -> str | None:
    import bench_peers

    if loader == "wids":
        check = subprocess.run([sys.executable, "-c", "import wids"], capture_output=True)
        return None if check.returncode == 0 else "wids not installed (pip install wids)"
    return bench_peers._missing(loader, standins)


def run(workdir: Path, quick: bool) -> str:
    import bench_peers

    load_before = os.getloadavg()
    rounds = 1 if quick else max(1, min(SETTINGS.repeat, 3))
    standins = workdir / "standins"
    for relative, text in bench_peers.STANDINS.items():
        (standins / relative).parent.mkdir(parents=True, exist_ok=True)
        (standins / relative).write_text(text)
    sets = {"tiny": tiny_image_shards(workdir, SHARDS), "photos": photo_shards(workdir, SHARDS)}
    missing = {peer: _missing(peer, standins) for peer in PEERS}
    data: dict[tuple[str, str], list[str]] = {}
    for name, shards in sets.items():
        data["tarkit", name] = data["wids", name] = _indexed(workdir, name, shards)
        for peer in ("litdata", "mosaic"):
            if missing[peer] is None:
                try:
                    stem = shards[0].name.split("-part")[0]
                    env = bench_peers._env(peer, standins)
                    data[peer, name] = [str(bench_peers._converted(peer, stem, shards, env))]
                except RuntimeError as error:
                    missing[peer] = f"writing its format failed: {error}"
    bench_peers._warm([Path(p).resolve() for files in data.values() for p in files])
    loaders = ["tarkit", *(p for p in PEERS if missing[p] is None)]
    figures: dict[tuple[str, str], list[dict[str, float]]] = {}
    errors: dict[tuple[str, str], str] = {}
    for number in range(rounds):
        print(f"bench: random access: round {number + 1} of {rounds}", file=sys.stderr)
        for name in sets:
            count = 2000 if quick else (20_000 if name == "tiny" else 6000)
            for loader in loaders:
                env = bench_peers._env(loader, standins)
                try:
                    result = _cell([loader, str(count), *data[loader, name]], env, 900)
                    figures.setdefault((loader, name), []).append(result)
                except (RuntimeError, subprocess.TimeoutExpired) as error:
                    errors[loader, name] = str(error)
    lines = [
        "Each cell: a fresh process opens the data set, reads 500 samples untimed, then "
        f"reads samples in one random order (seed 0), bytes only; {rounds} round(s), medians; "
        "ratios are medians of the per-round ratios.",
        "",
        f"Load average before: {', '.join(f'{x:.2f}' for x in load_before)}.",
        "",
    ]
    if quick:
        lines += ["**Quick run:** one round, 2,000 samples a cell.", ""]
    lines += _random_access_table(figures, missing, errors, rounds)
    lines += ["", "### Through a DataLoader, decoded (2 workers, batches of 64)", ""]
    lines += _epochs(data, quick)
    lines += ["", "### Over HTTP on 127.0.0.1", ""]
    lines += _http(sets["tiny"], workdir)
    lines += ["", f"Load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}."]
    return "\n".join(lines) + "\n"


def _random_access_table(figures, missing, errors, rounds) -> list[str]:  # type: ignore[no-untyped-def]
    lines = ["| data | reader | samples/s | CPU µs/sample | tarkit ÷ it (wall) | "
             "tarkit ÷ it (CPU) | goal | verdict |",
             "|---|---|---:|---:|---:|---:|---|---|"]  # fmt: skip
    for name in ("tiny", "photos"):
        ours = figures.get(("tarkit", name), [])
        for loader in ("tarkit", *PEERS):
            why = missing.get(loader) or errors.get((loader, name))
            runs = figures.get((loader, name), [])
            if why or not runs:
                lines.append(f"| {name} | {NAMES[loader]} | not measured: {why} | | | | | |")
                continue
            rate = median([r["samples"] / r["seconds"] for r in runs])
            cpu = median([r["cpu"] / r["samples"] * 1e6 for r in runs])
            if loader == "tarkit":
                lines.append(f"| {name} | {NAMES[loader]} | {rate:,.0f} | {cpu:.1f} | | | | |")
                continue
            pairs = list(zip(ours, runs, strict=False))
            wall = median([(a["samples"] / a["seconds"]) / (b["samples"] / b["seconds"])
                           for a, b in pairs])  # fmt: skip
            cpu_ratio = median([(b["cpu"] / b["samples"]) / (a["cpu"] / a["samples"])
                                for a, b in pairs])  # fmt: skip
            verdict = "PASS" if wall >= 1.2 else "MISS"
            lines.append(f"| {name} | {NAMES[loader]} | {rate:,.0f} | {cpu:.1f} | {wall:.2f}× "
                         f"| {cpu_ratio:.2f}× | ≥ 1.2× | {verdict} |")  # fmt: skip
    return lines


def _epochs(data: dict[tuple[str, str], list[str]], quick: bool) -> list[str]:
    env = dict(os.environ)
    lines = ["| data | loader | samples/s | indexed ÷ sequential | goal | verdict |",
             "|---|---|---:|---:|---|---|"]  # fmt: skip
    for name in ("tiny", "photos"):
        rates: dict[str, list[float]] = {"indexed": [], "sequential": []}
        for _ in range(1 if quick else 2):
            for how in rates:
                try:
                    result = _cell(["epoch", how, *data["tarkit", name]], env, 900)
                    rates[how].append(result["samples"] / result["seconds"])
                except (RuntimeError, subprocess.TimeoutExpired) as error:
                    lines.append(f"| {name} | {how} | failed: {error} | | | |")
        if not rates["indexed"] or not rates["sequential"]:
            continue
        ratio = median([a / b for a, b in zip(rates["indexed"], rates["sequential"], strict=False)])
        verdict = "PASS" if ratio >= 0.9 else "MISS"
        lines.append(f"| {name} | `tarkit.loader` (sequential, shuffle buffer) | "
                     f"{median(rates['sequential']):,.0f} | | | |")  # fmt: skip
        lines.append(f"| {name} | `IndexedDataset` + `BlockSampler` + `DataLoader` | "
                     f"{median(rates['indexed']):,.0f} | {ratio:.2f}× | ≥ 0.9× | {verdict} |")  # fmt: skip
    return lines


def _http(shards: list[Path], workdir: Path) -> list[str]:
    sys.path.insert(0, str(ROOT / "tests"))
    from shard_server import ShardServer
    from torch.utils.data import DataLoader

    import tarkit
    from tarkit.format.index import SUFFIX, index_stream

    server = ShardServer()
    try:
        urls, total_bytes = [], 0
        for shard in shards:
            data = shard.read_bytes()
            with open(shard, "rb") as stream:
                index = index_stream(stream, shard.name)
            server.files[f"/d/{shard.name}"] = data
            server.files[f"/d/{shard.name}{SUFFIX}"] = index
            urls.append(f"{server.url}/d/{shard.name}")
            total_bytes += len(data)
        dataset = tarkit.IndexedDataset(urls)
        server.hits.clear()
        count = min(len(dataset), 2000)
        order = __import__("random").Random(0).sample(range(len(dataset)), count)
        for i in order:
            dataset[i]
        requests = sum(n for path, n in server.hits.items() if path.endswith(".tar"))
        index_requests = sum(n for path, n in server.hits.items() if path.endswith(SUFFIX))
        cache_shards, window = 4, 2
        cache_size = cache_shards * max(s.stat().st_size for s in shards)
        with tempfile.TemporaryDirectory(dir=workdir) as cache:
            server.sent = 0
            cached = tarkit.IndexedDataset(urls, cache_dir=cache, cache_size=cache_size)
            sampler = tarkit.BlockSampler(cached, window=window)
            loader = DataLoader(cached, batch_size=64, sampler=sampler,
                                collate_fn=lambda batch: len(batch))  # fmt: skip
            delivered = sum(loader)
            sent = server.sent
    finally:
        server.stop()
    return [
        "| figure | measured | goal | verdict |",
        "|---|---:|---|---|",
        f"| requests per sample, no cache ({count:,} samples in a random order; "
        f"{index_requests} requests for indexes besides) | {requests / count:.2f} | 1 | "
        f"{'PASS' if requests == count else 'MISS'} |",
        f"| bytes sent in an epoch ÷ dataset bytes, `BlockSampler(window={window})`, a cache of "
        f"{cache_shards} shards ({delivered:,} samples) | {sent / total_bytes:.3f} | ≤ 1.1 | "
        f"{'PASS' if sent <= 1.1 * total_bytes else 'MISS'} |",
    ]
