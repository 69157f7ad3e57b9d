"""Issue 15: tarcat over HTTP on 127.0.0.1 with a dropped connection every 50 MB.

The server is the test suite's (``tests/shard_server.py``): with ``drop_every`` each of its
answers closes after that many bytes of body, and tarcat reconnects at the byte reached
(``Range`` + ``If-Range``). The drop-free read of the same URL is the baseline; the
target is a throughput with drops of at least 0.9 of it, and an unchanged time to first
sample (``tarcat -c 1``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from data import ROOT, SETTINGS, large_shard, median, timeit_command

TITLE = "Remote reads: tarcat over HTTP with a drop every 50 MB (issue 15)"
ORDER = 55

MB = 1_000_000


def run(workdir: Path, quick: bool) -> str:
    sys.path.insert(0, str(ROOT / "tests"))
    from shard_server import ShardServer

    shard = large_shard(workdir)
    size = shard.stat().st_size
    every = 5 * MB if quick else 50 * MB  # the quick set is ~38 MB
    server = ShardServer()
    try:
        server.files["/large.tar"] = shard.read_bytes()
        url = f"{server.url}/large.tar"
        read = f"tarcat {url} 2>/dev/null >/dev/null"
        first = f"tarcat -c 1 {url} >/dev/null"
        local = median(timeit_command(f"tarcat {shard} >/dev/null"))
        # Drop-free and dropping runs alternate, so that a change of load on a shared
        # machine falls on both alike.
        times: dict[tuple[str, int], list[float]] = {}
        cpu: dict[tuple[str, int], list[float]] = {}
        timeit_command(read, 1)  # warm-up
        hits = server.hits["/large.tar"]
        for _ in range(SETTINGS.repeat):
            for drop in (0, every):
                server.drop_every.pop("/large.tar", None)
                if drop:
                    server.drop_every["/large.tar"] = drop
                for command in (read, first):
                    before = _children_cpu()
                    seconds = timeit_command(command, 1, warmup=0)
                    times.setdefault((command, drop), []).extend(seconds)
                    cpu.setdefault((command, drop), []).append(_children_cpu() - before)
        runs = server.hits["/large.tar"] - hits
    finally:
        server.stop()
    clean, dropped = median(times[read, 0]), median(times[read, every])
    clean_first, dropped_first = median(times[first, 0]), median(times[first, every])
    ratio = median([a / b for a, b in zip(times[read, 0], times[read, every], strict=True)])
    spread = max(times[read, 0]) / min(times[read, 0])
    cpu_clean, cpu_dropped = median(cpu[read, 0]), median(cpu[read, every])
    verdict = "PASS" if ratio >= 0.9 else "MISS"
    drops = (size - 1) // every
    return (
        f"`tarcat URL > /dev/null` on the large set ({size / MB:.0f} MB), served from memory "
        f"by the test server on 127.0.0.1; with drops, every answer closes after "
        f"{every // MB} MB of body ({drops} reconnections per read; {runs} requests in the "
        "timed runs). The two kinds of run alternate; the ratio is the median of the paired "
        f"ratios (the drop-free runs alone vary by {spread:.2f}× here). CPU s: the commands' "
        "own CPU time (bash and tarcat; the server runs in the benchmark's process), which "
        "the load of a shared machine changes less.\n\n"
        "| read | s | MB/s | vs no drops | CPU s |\n| --- | ---: | ---: | ---: | ---: |\n"
        f"| local file (reference) | {local:.2f} | {size / MB / local:.0f} | | |\n"
        f"| HTTP, no drops | {clean:.2f} | {size / MB / clean:.0f} | 1.00× | {cpu_clean:.2f} |\n"
        f"| HTTP, a drop every {every // MB} MB | {dropped:.2f} | {size / MB / dropped:.0f} | "
        f"{ratio:.2f}× (target ≥ 0.9×: {verdict}) | {cpu_dropped:.2f} |\n\n"
        "| time to first sample (`tarcat -c 1 URL`) | s |\n| --- | ---: |\n"
        f"| no drops | {clean_first:.3f} |\n"
        f"| a drop every {every // MB} MB | {dropped_first:.3f} |\n"
    )


def _children_cpu() -> float:
    """CPU seconds (user and system) used so far by finished child processes."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
