"""Issue 3: what tarproc costs per sample, and how it scales with -p.

- Overhead: ``tarproc -p P -c true`` on N two-field samples against ``xargs -P P``
  running ``bash -c true`` N times, at P = 1 and 2; samples per second of each and their
  ratio (target: tarproc at least 0.7 of xargs). Whole commands are timed; the ratio is
  also given with each command's start-up (the same command on one sample) taken out,
  since the issue is about the cost per sample. One more row runs tarproc with
  ``TMPDIR=/dev/shm``, to show how much of the cost is the file system.
- Scaling: a CPU-bound command (a bash loop of about 0.2 s) with ``-p 1`` and ``-p 2``
  (target: close to 2x on two cores).

The archives are generated in ``workdir``: 1,000 samples (quick: 200) of a 3 KB ``bin``
and a ``cls``; 40 samples (quick: 8) for the CPU-bound command.
"""

from __future__ import annotations

import os
import random
import shlex
from pathlib import Path

from data import MTIME, SEED, CommandFailed, median, timeit_command, tool_available

TITLE = "tarproc: per-sample overhead against xargs, and -p scaling (issue 3)"
ORDER = 30

TARGET_OVERHEAD = 0.7
TARGET_SCALING = 1.8  # "close to 2x"
CPU_BOUND = "i=0; while (( i < 150000 )); do (( i++ )); done"


def run(workdir: Path, quick: bool) -> str:
    if not tool_available("tarproc"):
        return "tarproc is not built yet.\n"
    count = 200 if quick else 1000
    many = _archive(workdir / "many.tar", count)
    one = _archive(workdir / "one.tar", 1)
    cpu_count = 8 if quick else 40
    cpu = _archive(workdir / "cpu.tar", cpu_count)
    sections = [
        _overhead(many, one, count),
        _scaling(cpu, cpu_count),
    ]
    return "\n".join(sections)


def _archive(path: Path, count: int) -> Path:
    from tarkit.format.tar_writer import TarWriter

    rng = random.Random(SEED)
    with open(path, "wb") as stream, TarWriter(stream, mtime=MTIME) as writer:
        for i in range(count):
            writer.add(f"{i:06d}.bin", rng.randbytes(3000))
            writer.add(f"{i:06d}.cls", str(i % 10).encode())
    return path


def _seconds(command: str) -> float:
    return median(timeit_command(command))


def _overhead(many: Path, one: Path, count: int) -> str:
    rows = [
        "| -p | xargs -P: `bash -c true` (samples/s) | `tarproc -c true` (samples/s) | "
        "ratio | ratio, start-up excluded | target | |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    variants = [(1, ""), (2, "")]
    if os.path.isdir("/dev/shm"):
        variants.append((2, "TMPDIR=/dev/shm "))
    for parallel, prefix in variants:
        try:
            xargs = _seconds(f"seq {count} | xargs -P {parallel} -n 1 bash -c true")
            xargs_start = _seconds(f"seq 1 | xargs -P {parallel} -n 1 bash -c true")
            tarproc = f"{prefix}tarproc -p {parallel} -c true"
            proc = _seconds(f"{tarproc} {shlex.quote(str(many))} -o /dev/null")
            proc_start = _seconds(f"{tarproc} {shlex.quote(str(one))} -o /dev/null")
        except CommandFailed as exc:
            rows.append(f"| {parallel} | failed: {exc} | | | | | |")
            continue
        ratio = xargs / proc
        per_sample = (xargs - xargs_start) / max(proc - proc_start, 1e-9)
        verdict = "PASS" if per_sample >= TARGET_OVERHEAD else "MISS"
        label = f"{parallel} ({prefix.strip()})" if prefix else str(parallel)
        rows.append(
            f"| {label} | {count / xargs:,.0f} | {count / proc:,.0f} | {ratio:.2f} | "
            f"{per_sample:.2f} | ≥ {TARGET_OVERHEAD} | {verdict} |"
        )
    head = (
        f"### Overhead: {count:,} samples (a 3 KB `bin` and a `cls` each), "
        "`TMPDIR` as in the environment unless shown\n\n"
        "Start-up excluded: each command's time on one sample is subtracted "
        "(tarproc's Python start-up is about 0.1 s).\n"
    )
    return head + "\n" + "\n".join(rows) + "\n"


def _scaling(cpu: Path, count: int) -> str:
    rows = [
        "| -p | tarproc seconds | samples/s | × -p 1 | xargs -P: × -P 1 (what the machine gives) "
        "| target | |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    command = shlex.quote(CPU_BOUND)
    times: dict[int, tuple[float, float]] = {}
    for parallel in (1, 2):
        try:
            proc = _seconds(
                f"tarproc -p {parallel} -c {command} {shlex.quote(str(cpu))} -o /dev/null"
            )
            xargs = _seconds(f"seq {count} | xargs -P {parallel} -n 1 bash -c {command}")
        except CommandFailed as exc:
            rows.append(f"| {parallel} | failed: {exc} | | | | | |")
            continue
        times[parallel] = (proc, xargs)
    if 1 in times:
        rows.append(f"| 1 | {times[1][0]:.2f} | {count / times[1][0]:.1f} | 1.00 | 1.00 | | |")
    if 1 in times and 2 in times:
        ratio = times[1][0] / times[2][0]
        machine = times[1][1] / times[2][1]
        verdict = "PASS" if ratio >= TARGET_SCALING else "MISS"
        rows.append(
            f"| 2 | {times[2][0]:.2f} | {count / times[2][0]:.1f} | {ratio:.2f} | {machine:.2f} "
            f"| ≥ {TARGET_SCALING} | {verdict} |"
        )
    head = (
        f"### Scaling: {count} samples, CPU-bound command "
        f"(`{CPU_BOUND}`, about 0.2 s of CPU each)\n"
    )
    return head + "\n" + "\n".join(rows) + "\n"
