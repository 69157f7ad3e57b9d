"""Issue 4: tarsort throughput and peak memory on an archive with interleaved members.

The small-sample set (``data.small_shard``: ~20,000 samples of a ~2.5 KB JPEG, ``cls`` and
``json``; 2,000 under ``--quick``) is rewritten field by field — every ``cls`` member, then
every ``jpg``, then every ``json``, as ``tar -cf x.tar *.cls *.jpg *.json`` would write it —
so that no sample's members are adjacent. ``tarsort`` regroups and sorts it with several
``--memory`` limits. Baselines measured in the same run: ``tarcat`` streaming the sorted
archive (the cost of reading and writing the bytes), and GNU ``sort`` on an equivalent
text list (one line per member: key, field, base64 of the data; ``-S`` as the memory
limit, ``-s`` for a stable sort). Peak memory is the maximum RSS of the command, from
``getrusage(RUSAGE_CHILDREN)`` in a fresh process.
"""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

from data import median, shell_env, small_shard, timeit_command

TITLE = "tarsort: throughput and peak memory (issue 4)"
ORDER = 40

MEMORY_LIMITS = ("256M", "32M", "8M")


def run(workdir: Path, quick: bool) -> str:
    source = small_shard(workdir, quick=quick)
    archive, members, samples = _interleaved(source, workdir / "interleaved.tar")
    listing = _listing(archive, workdir / "members.tsv")
    size = archive.stat().st_size
    temp = workdir / "tmp"
    temp.mkdir()
    env = f"TMPDIR={temp}"

    rows = []
    for memory in MEMORY_LIMITS:
        command = f"{env} tarsort --memory {memory} {archive} -o {workdir}/sorted.tar"
        seconds = median(timeit_command(command))
        rss = _peak_rss_mb(command)
        rows.append((f"`tarsort --memory {memory}`", seconds, rss))
    cat = f"tarcat {workdir}/sorted.tar -o {workdir}/copy.tar"
    rows.append(("`tarcat` of the sorted archive (streaming copy)", median(timeit_command(cat)),
                 _peak_rss_mb(cat)))  # fmt: skip
    for memory in ("32M", "8M"):
        gnu = (
            f"{env} LC_ALL=C sort -s -S {memory} -t \"$(printf '\\t')\" -k1,1 {listing} > /dev/null"
        )
        rows.append((f"GNU `sort -s -S {memory}` of the text list ({listing.stat().st_size / 1e6:.0f} MB)",
                     median(timeit_command(gnu)), _peak_rss_mb(gnu)))  # fmt: skip

    lines = [
        f"### {samples:,} samples, {members:,} members, {size / 1e6:.1f} MB, members "
        "interleaved field by field",
        "",
        "| command | s | samples/s | MB/s | peak RSS (MB) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, seconds, rss in rows:
        lines.append(
            f"| {name} | {seconds:.2f} | {samples / seconds:,.0f} | {size / 1e6 / seconds:.1f} "
            f"| {rss:.0f} |"
        )
    lines += [
        "",
        "Peak RSS includes the interpreter and imports (about 25 MB for any tarkit command); "
        "`--memory` bounds what tarsort holds on top of that. The temporary runs go to a "
        "private directory that is removed at the end.",
    ]
    return "\n".join(lines) + "\n"


def _interleaved(source: Path, path: Path) -> tuple[Path, int, int]:
    """Rewrite ``source`` with its members grouped by field; (path, members, samples)."""
    from tarkit.format.samples import split_name
    from tarkit.format.tar import read_members
    from tarkit.format.tar_writer import TarWriter

    by_field: dict[str, list[bytes]] = {}
    keys = set()
    with open(source, "rb") as stream:
        for member in read_members(stream, str(source)):
            key, field = split_name(member.name)  # type: ignore[misc]
            keys.add(key)
            by_field.setdefault(field, []).append(member.raw)
    count = 0
    with open(path, "wb") as out, TarWriter(out) as writer:
        for field in sorted(by_field):
            for raw in by_field[field]:
                writer.write_raw(raw)
                count += 1
    return path, count, len(keys)


def _listing(archive: Path, path: Path) -> Path:
    """The text list GNU sort sorts: key, field, base64 of the data, one member a line."""
    from tarkit.format.samples import split_name
    from tarkit.format.tar import read_members

    with open(archive, "rb") as stream, open(path, "wb") as out:
        for member in read_members(stream, str(archive)):
            key, field = split_name(member.name)  # type: ignore[misc]
            out.write(b"%s\t%s\t%s\n" % (key.encode(), field.encode(),
                                         base64.b64encode(member.data)))  # fmt: skip
    return path


def _peak_rss_mb(shell_cmd: str) -> float:
    """Maximum RSS in MB of ``shell_cmd``'s processes, run once in a fresh Python."""
    probe = (
        "import resource, subprocess, sys\n"
        "subprocess.run(['bash', '-o', 'pipefail', '-c', sys.argv[1]], check=True)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, shell_cmd],
        env=shell_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return int(result.stdout.split()[-1]) / 1024
