"""Issue 24: ``tarkit verify`` against ``sha256sum`` over the same files.

Two sets: the small-sample set cut into 8 shards (``data.small_shards``: 20,000 samples of a
~2.5 KB JPEG, ``cls`` and ``json``; 2,000 under ``--quick``) and the large-sample set
(``data.large_shard``: 200 samples of a ~1.9 MB JPEG) cut into 4 shards here. Each set gets
its manifest (``tarindex``), so that ``tarkit verify`` does all it does: reads every shard to
its end with the strict reader, counts the samples and hashes every byte, and compares both
with the manifest. The commands run in turn, round after round (one untimed round first, to
fill the page cache), so that a busy machine slows them alike; the figure is each one's
median. The goal: ``tarkit verify -p 2`` at 80 % of ``sha256sum``'s throughput or more.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from data import SETTINGS, large_shard, run_command, small_shards

TITLE = "tarkit verify: reading and hashing every shard (issue 24)"
ORDER = 45
GOAL = 0.8  # tarkit verify -p 2 throughput / sha256sum's


def run(workdir: Path, quick: bool) -> str:
    small = [str(p) for p in small_shards(workdir, 8, quick=quick)]
    large = _cut_large(workdir, quick)
    sections = [
        _compare("small set: 8 shards of ~2.5 KB samples", small, workdir / "small.json"),
        _compare("large set: 4 shards of ~1.9 MB samples", large, workdir / "large.json"),
    ]
    return "\n".join(sections)


def _cut_large(workdir: Path, quick: bool) -> list[str]:
    """The large set as 4 shards in ``workdir`` (the cached shard is one file)."""
    source = large_shard(workdir, quick=quick)
    per_shard = 5 if quick else 50
    run_command(f"tarsplit -c {per_shard} -o '{workdir}/large-%03d.tar' < {source}")
    return sorted(str(p) for p in workdir.glob("large-*.tar"))


def _compare(title: str, shards: list[str], manifest: Path) -> str:
    files = " ".join(shards)
    run_command(f"tarindex {files} -o {manifest}")
    size = sum(Path(p).stat().st_size for p in shards)
    commands = {
        "`sha256sum` (coreutils)": f"sha256sum {files} > /dev/null",
        "`tarkit verify -p 1`": f"tarkit verify {manifest} -p 1 > /dev/null",
        "`tarkit verify -p 2`": f"tarkit verify {manifest} -p 2 > /dev/null",
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for round_number in range(1 + SETTINGS.repeat):
        for name, command in commands.items():
            start = time.perf_counter()
            run_command(command)
            if round_number:
                times[name].append(time.perf_counter() - start)
    seconds = {name: statistics.median(runs) for name, runs in times.items()}
    baseline = seconds["`sha256sum` (coreutils)"]
    lines = [
        f"### {title}, {size / 1e6:.0f} MB",
        "",
        "| command | s | MB/s | throughput / sha256sum's |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, value in seconds.items():
        ratio = baseline / value
        verdict = ""
        if name == "`tarkit verify -p 2`":
            verdict = f" (goal ≥ {GOAL}: {'PASS' if ratio >= GOAL else 'MISS'})"
        lines.append(f"| {name} | {value:.2f} | {size / 1e6 / value:.0f} | {ratio:.2f}{verdict} |")
    lines += [
        "",
        "Whole commands, start-up included (about 0.15 s for `tarkit verify`). `sha256sum` "
        "only hashes; `tarkit verify` also reads every header with the strict reader, "
        "counts the samples and compares them and the sha256 with the manifest.",
        "",
    ]
    return "\n".join(lines)
