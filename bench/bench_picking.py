"""Issue 23, the shell side of random access: ``tarcat --keys`` and ``tarfirst --key``.

The small set cut into 10 shards, linked into the scratch directory with an index beside
each and their manifest (the cached shards are never written to). Timed side by side:

- ``tarcat --keys`` of 100 keys drawn at random (seeded) over the dataset (its directory:
  only those samples are read, and every shard's index), next to the full ``tarcat |
  tarcat --keys`` pipe and ``tarcat --keys`` over the same shards without indexes (both
  read everything); the outputs are compared byte for byte;
- ``tarfirst --key`` of the last sample's key over the dataset (the indexes looked through
  up to it, then one read) next to the same over the shards without indexes.
"""

from __future__ import annotations

import random
from pathlib import Path

from data import SETTINGS, median, run_command, small_shards, timeit_command

TITLE = "Random access from the shell: tarcat --keys, tarfirst --key (issue 23)"
ORDER = 68
SHARDS = 10
KEYS = 100


def _dataset(workdir: Path, shards: list[Path]) -> Path:
    """The shards linked into ``workdir/dataset`` with their indexes and manifest."""
    from tarkit.format.index import SUFFIX, index_stream
    from tarkit.storage import publish
    from tarkit.writing.index import index_shards

    directory = workdir / "dataset"
    directory.mkdir()
    links = []
    for shard in shards:
        link = directory / shard.name
        link.symlink_to(shard)
        with open(shard, "rb") as stream:
            Path(str(link) + SUFFIX).write_bytes(index_stream(stream, str(shard)))
        links.append(str(link))
    manifest = str(directory / "manifest.json")
    publish(manifest, index_shards(links, manifest_path=manifest).to_bytes())
    return directory


def _keys(directory: Path) -> list[str]:
    from tarkit.storage.indexed_shards import open_indexed

    shards = open_indexed(str(directory))
    return [key for _, keys in shards.keys() for key in keys]


def run(workdir: Path, quick: bool) -> str:
    shards = small_shards(workdir, SHARDS)
    directory = _dataset(workdir, shards)
    every = _keys(directory)
    wanted = workdir / "keys.txt"
    wanted.write_text("\n".join(random.Random(23).sample(every, KEYS)) + "\n")
    plain = " ".join(str(shard) for shard in shards)  # the cached shards: no index beside
    out = workdir / "out.tar"
    picked = f"tarcat --keys {wanted} {directory} > {out}"
    rows = [
        (f"`tarcat --keys` ({KEYS} keys) over the dataset: only those samples", picked),
        (f"`tarcat SHARDS… \\| tarcat --keys` ({KEYS} keys): the full filter",
         f"tarcat {plain} | tarcat --keys {wanted} > {out}.whole"),
        (f"`tarcat --keys` ({KEYS} keys) over shards without indexes",
         f"tarcat --keys {wanted} {plain} > {out}.plain"),
        (f"`tarfirst --key` (the last of {len(every):,}) over the dataset",
         f"tarfirst --key {every[-1]} {directory} > /dev/null"),
        ("`tarfirst --key` (the last) over shards without indexes",
         f"tarfirst --key {every[-1]} {plain} > /dev/null"),
        ("start-up: `tarcat -c 0` of one shard", f"tarcat -c 0 {shards[0]} > /dev/null"),
    ]  # fmt: skip
    seconds = [median(timeit_command(command)) for _, command in rows]
    run_command(f"cmp {out} {out}.whole && cmp {out} {out}.plain")  # the same bytes
    size = sum(shard.stat().st_size for shard in shards)
    lines = [
        f"{len(every):,} samples in {SHARDS} shards ({size / 1e6:.0f} MB), median of "
        f"{SETTINGS.repeat} runs; the three `tarcat` outputs are byte-identical. The last "
        "column is each time ÷ the same command's over the dataset (random access).\n",
        "| command | s | ÷ random access |",
        "| --- | ---: | ---: |",
    ]
    for n, ((what, _), taken) in enumerate(zip(rows, seconds, strict=True)):
        base = seconds[0] if n < 3 else seconds[3] if n < 5 else None
        lines.append(f"| {what} | {taken:.3f} | {'' if base is None else f'{taken / base:.1f}×'} |")
    return "\n".join(lines) + "\n"
