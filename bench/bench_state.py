"""Issue 14: loader state and mixing.

- time to the first batch after restoring a state taken at 10 % and at 90 % of an epoch
  over 200 shards (a fresh process each time, so worker start-up is in both), next to a
  fresh loader's, and litdata's ``StreamingDataLoader`` resuming on the same samples
  (litdata is installed in the bench environment only: ``pip install --no-deps litdata
  obstore tifffile``; without it that row says "not measured");
- the size of a state for 10,000 shards and 64 workers;
- steady-state samples/s of a mixture of 3 sources against one source of the same samples.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from data import SETTINGS, median, small_shards

TITLE = "Loader state: resume cost and size, and mixing (issue 14)"
ORDER = 62
SHARDS = 200
BATCH = 64

RESUME = """
import json, sys, time
import tarkit
manifest, state_file, fraction = sys.argv[1], sys.argv[2], float(sys.argv[3])
loader = tarkit.loader(manifest, batch_size=64, num_workers=2, shuffle=1000, seed=1)
if fraction > 0:
    first = iter(loader)
    for _ in range(int(len(loader) * fraction)):
        next(first)
    state = loader.state_dict()
    del first
    loader = tarkit.loader(manifest, batch_size=64, num_workers=2, shuffle=1000, seed=1)
    loader.load_state_dict(json.loads(json.dumps(state)))
start = time.perf_counter()
next(iter(loader))
print(time.perf_counter() - start)
"""

LITDATA_WRITE = """
import sys
from litdata import optimize
import tarkit

def samples(shard):
    for s in tarkit.read_samples([shard]):
        yield {"key": s.key, "jpg": bytes(s.get("jpg")), "cls": int(s.get("cls"))}

if __name__ == "__main__":
    optimize(fn=samples, inputs=sys.argv[2:], output_dir=sys.argv[1], chunk_bytes="8MB",
             num_workers=1, mode="overwrite")
"""

LITDATA_RESUME = """
import sys, time
from litdata import StreamingDataLoader, StreamingDataset
directory, fraction = sys.argv[1], float(sys.argv[2])
def as_list(samples):
    # No collation (bytes of many lengths, as tarkit hands them over); litdata's readers
    # give memoryviews, which cannot leave a worker process.
    return [{k: bytes(v) if isinstance(v, memoryview) else v for k, v in s.items()}
            for s in samples]
def loader():
    return StreamingDataLoader(StreamingDataset(directory, shuffle=True, seed=1),
                               batch_size=64, num_workers=2, collate_fn=as_list)
first = loader()
if fraction > 0:
    iterator = iter(first)
    for _ in range(int(len(first) * fraction)):
        next(iterator)
    state = first.state_dict()
    del iterator
    first = loader()
    first.load_state_dict(state)
start = time.perf_counter()
next(iter(first))
print(time.perf_counter() - start)
"""


def _seconds(script: str, *args: str) -> float:
    result = subprocess.run(
        [sys.executable, script, *args], capture_output=True, text=True, timeout=600
    )
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-2000:])
    return float(result.stdout.strip().splitlines()[-1])


def _script(workdir: Path, name: str, text: str) -> str:
    path = workdir / f"{name}.py"  # a file: litdata's worker processes import its functions
    path.write_text(text)
    return str(path)


def _manifest(workdir: Path) -> str:
    from tarkit.storage import publish
    from tarkit.writing.index import index_shards

    shards = small_shards(workdir, SHARDS)
    manifest = str(workdir / "manifest.json")
    made = index_shards([str(s) for s in shards], offsets=True, manifest_path=manifest)
    publish(manifest, made.to_bytes())  # (version 1: with keys and offsets)
    return manifest


def _paired(seconds: Callable[[float], float], repeat: int) -> tuple[dict[float, float], float]:
    """Median seconds to the first batch of a fresh loader (0.0) and of restores at 10 %
    and 90 %, run in turn (a busy moment falls on all three alike); and the median of
    the paired ratios 90 % ÷ 10 %."""
    runs: dict[float, list[float]] = {0.0: [], 0.1: [], 0.9: []}
    for _ in range(repeat):
        for fraction, times in runs.items():
            times.append(seconds(fraction))
    ratios = [late / early for late, early in zip(runs[0.9], runs[0.1], strict=True)]
    return {f: median(times) for f, times in runs.items()}, median(ratios)


def _resume_rows(manifest: str, workdir: Path, repeat: int) -> list[str]:
    state = str(workdir / "state.json")
    resume = _script(workdir, "resume", RESUME)
    figures, ratio = _paired(lambda f: _seconds(resume, manifest, state, str(f)), repeat)
    rows = [
        f"| tarkit, fresh loader | {figures[0.0]:.3f} | — |",
        f"| tarkit, restored at 10 % | {figures[0.1]:.3f} | — |",
        f"| tarkit, restored at 90 % | {figures[0.9]:.3f} | "
        f"{ratio:.2f} × the 10 % restore (goal ≤ 1.5: {'PASS' if ratio <= 1.5 else 'MISS'}) |",
    ]
    try:
        import litdata  # noqa: F401
    except ImportError:
        return [*rows, "| litdata `StreamingDataLoader` | not measured (not installed) | — |"]
    from tarkit.storage import load_manifest, manifest_urls

    directory = workdir / "litdata"
    shards = manifest_urls(load_manifest(manifest))
    write = _script(workdir, "litdata_write", LITDATA_WRITE)
    subprocess.run([sys.executable, write, str(directory), *shards], check=True,
                   capture_output=True, timeout=1200)  # fmt: skip
    lit_resume = _script(workdir, "litdata_resume", LITDATA_RESUME)
    lit, lit_ratio = _paired(lambda f: _seconds(lit_resume, str(directory), str(f)), repeat)
    return [
        *rows,
        f"| litdata, fresh loader | {lit[0.0]:.3f} | — |",
        f"| litdata, restored at 10 % | {lit[0.1]:.3f} | — |",
        f"| litdata, restored at 90 % | {lit[0.9]:.3f} | {lit_ratio:.2f} × its 10 % |",
    ]


def _state_size() -> int:
    from tarkit.format.manifest import Manifest, ShardInfo
    from tarkit.loading import ShardDataset
    from tarkit.loading.epoch_layout import Generation, Topology, WorkerPosition
    from tarkit.loading.state import LoaderState

    shards = [ShardInfo(f"http://127.0.0.1:9/s-{i:05d}.tar", 1000, 1 << 20) for i in range(10_000)]
    dataset = ShardDataset(manifest=Manifest(shards, None), shuffle=100_000)
    state = LoaderState.from_json(dataset.state_dict())
    position = WorkerPosition(10_000_000, 10_100_000, 150_000, False, [])
    state.generation = Generation(Topology(64, 64, 256), 150_000, 3, [position] * 64, 63)
    state.covers = list(range(64))
    return len(json.dumps(state.to_json()))


def _mixing(workdir: Path, manifest: str, repeat: int) -> tuple[float, float]:
    """samples/s of one source, and the median ratio of its shards as three sources mixed
    1:1:1 to it (passes in turn)."""
    import tarkit
    from tarkit.format.manifest import Manifest
    from tarkit.storage import load_manifest, publish

    shards = load_manifest(manifest).shards
    parts = []
    for number in range(3):
        path = workdir / f"part-{number}.json"  # beside the shards: the same relative names
        publish(str(path), Manifest(shards[number::3], None).to_bytes())
        parts.append(str(path))

    def rate(loader: Any) -> float:
        start = time.perf_counter()
        count = sum(len(b["__key__"]) for b in loader)
        return count / (time.perf_counter() - start)

    one = tarkit.loader(manifest, batch_size=BATCH, shuffle=1000)
    mixture = tarkit.loader({"a": parts[0], "b": parts[1], "c": parts[2]}, batch_size=BATCH,
                            shuffle=1000, weights={"a": 1, "b": 1, "c": 1})  # fmt: skip
    rate(one), rate(mixture)  # warm the page cache
    pairs = [(rate(one), rate(mixture)) for _ in range(max(repeat, 3))]  # in turn
    return median([p[0] for p in pairs]), median([p[1] / p[0] for p in pairs])


def run(workdir: Path, quick: bool) -> str:
    repeat = 1 if quick else SETTINGS.repeat
    manifest = _manifest(workdir)
    rows = _resume_rows(manifest, workdir, repeat)
    size = _state_size()
    single, ratio = _mixing(workdir, manifest, repeat)
    mixed = single * ratio
    return "\n".join(
        [
            f"### Time to the first batch after a restore ({SHARDS} shards, batches of {BATCH}, "
            "2 workers, shuffle 1000; a fresh process each)",
            "",
            "| loader | seconds | ratio |",
            "| --- | ---: | --- |",
            *rows,
            "",
            "### State size and mixing",
            "",
            "| figure | value | goal |",
            "| --- | ---: | --- |",
            f"| state for 10,000 shards × 64 workers | {size:,} bytes | < 64 KB: "
            f"{'PASS' if size < 64 * 1024 else 'MISS'} |",
            f"| one source, samples/s (no workers, no decoding) | {single:,.0f} | — |",
            f"| three sources mixed 1:1:1, samples/s | {mixed:,.0f} | "
            "median of paired passes: "
            f"{ratio:.2f} × one source (goal ≥ 0.95: {'PASS' if ratio >= 0.95 else 'MISS'}) |",
            "",
        ]
    )
