"""Issue 23, item 4: how well BlockSampler shuffles, how local its reads stay, what it costs.

On positions alone (no shards are read: the order is the sampler's whole work), over a
dataset of 1,000 shards of 1,000 samples (quick: 200), one rank, batches of 64, epoch 0:

- *shards a batch*: distinct shards among a batch's 64 samples (more: a more varied batch);
- *spread*: the standard deviation of a batch's positions over the dataset's size (a
  uniform draw gives 0.29; a stream that reads one place of the dataset gives ~0);
- *moved*: how far a sample lands from its position, on average, over the dataset's size
  (a random permutation gives 0.33: the epoch's order is unrelated to the dataset's);
- *open shards*: distinct shards among 1,000 consecutive samples of the order (what a rank
  reads from at a time: locality, and the cache a remote dataset needs).

next to a full random permutation, a 1,000-sample shuffle buffer over the positions in
order, and the same buffer over shards in shuffled order (what ``tarkit.loader`` does
with ``shuffle=1000``). Then the cost: indices a second through the iterator, time to the
first index and the memory added over 10^8 positions (100,000 shards) in a fresh process, and
the state's size, next to RandomSampler over a tenth of that (it holds the whole
permutation as Python integers). Run alone with ``python bench/bench_sampler.py [--quick]``.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

TITLE = "BlockSampler: shuffle quality, locality and cost (issue 23)"
ORDER = 64
BATCH = 64
STRETCH = 1000
SAMPLES_A_SHARD = 1000

LARGE = """
import json, sys, time
import torch
import tarkit

def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

class Huge:
    def __len__(self):
        return 100_000_000
    def shard_sizes(self):
        return torch.full((100_000,), 1000)

BlockSampler = tarkit.BlockSampler  # imported before anything is measured
before = resident()
start = time.perf_counter()
sampler = BlockSampler(Huge(), num_replicas=8, rank=7)
iterator = iter(sampler)
next(iterator)
first = time.perf_counter() - start
start = time.perf_counter()
for _ in range(1_000_000):
    next(iterator)
rate = 1_000_000 / (time.perf_counter() - start)
print(json.dumps({"first": first, "rate": rate, "memory": resident() - before,
                  "state": len(json.dumps(sampler.state_dict()))}))
"""


RANDOM = """
import json, time
from torch.utils.data import RandomSampler

def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

before = resident()
start = time.perf_counter()
iterator = iter(RandomSampler(range(10_000_000)))
next(iterator)
print(json.dumps({"first": time.perf_counter() - start, "memory": resident() - before}))
"""


class Shards:
    """A dataset of ``count`` shards of SAMPLES_A_SHARD positions (no data)."""

    def __init__(self, count: int) -> None:
        self.shard_sizes = [SAMPLES_A_SHARD] * count

    def __len__(self) -> int:
        return SAMPLES_A_SHARD * len(self.shard_sizes)


def buffered(positions: list[int], seed: int) -> list[int]:
    """``positions`` through the loader's own 1,000-sample shuffle buffer."""
    from tarkit.loading.runs import INITIAL
    from tarkit.loading.shuffle import shuffled

    rng = random.Random(seed)
    return list(shuffled(iter(positions), size=1000, rng=rng, initial=INITIAL))


def orders(shards: int) -> dict[str, list[int]]:
    import torch

    import tarkit
    from tarkit.loading.splitting import shard_order

    dataset = Shards(shards)
    total = len(dataset)
    shuffled_shards = [
        shard * SAMPLES_A_SHARD + i
        for shard in shard_order(shards, shuffle=True, seed=0, epoch=0)
        for i in range(SAMPLES_A_SHARD)
    ]
    found = {
        "random permutation (`RandomSampler`)": torch.randperm(
            total, generator=torch.Generator().manual_seed(0)
        ).tolist(),
        "1,000-sample buffer, positions in order": buffered(list(range(total)), 0),
        "1,000-sample buffer, shards shuffled (`tarkit.loader`)": buffered(shuffled_shards, 0),
    }
    for window in (1, 4, 8, 16, 32):
        default = " (default)" if window == 8 else ""
        name = f"`BlockSampler`, window={window}{default}"
        found[name] = list(tarkit.BlockSampler(dataset, num_replicas=1, rank=0, window=window))
    small = tarkit.BlockSampler(dataset, num_replicas=1, rank=0, window=8, block_size=100)
    found["`BlockSampler`, window=8, block_size=100"] = list(small)
    return found


def quality(order: list[int], total: int) -> tuple[float, float, float, float]:
    """(shards a batch, spread, moved, open shards) of an epoch's order."""
    import torch

    places = torch.tensor(order, dtype=torch.float64)
    batches = places[: len(order) // BATCH * BATCH].view(-1, BATCH)
    shard = (batches // SAMPLES_A_SHARD).sort(dim=1).values
    per_batch = ((shard[:, 1:] != shard[:, :-1]).sum(1) + 1).double().mean()
    spread = (batches.std(dim=1) / total).mean()
    moved = ((places - torch.arange(len(order), dtype=torch.float64)).abs().mean()) / total
    stretches = places[: len(order) // STRETCH * STRETCH].view(-1, STRETCH)
    shard = (stretches // SAMPLES_A_SHARD).sort(dim=1).values
    open_shards = ((shard[:, 1:] != shard[:, :-1]).sum(1) + 1).double().mean()
    return float(per_batch), float(spread), float(moved), float(open_shards)


def cost(script: str) -> dict[str, float]:
    """The figures ``script`` prints, from a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=600
    )
    return json.loads(out.stdout)


def run(workdir: Path, quick: bool) -> str:
    shards = 200 if quick else 1000
    total = shards * SAMPLES_A_SHARD
    lines = [
        f"{shards:,} shards of {SAMPLES_A_SHARD:,} samples, one rank, epoch 0, batches of "
        f"{BATCH}: mean over the epoch's batches (open shards: over its stretches of "
        f"{STRETCH:,} consecutive samples).\n",
        "| order | shards a batch | spread | moved | open shards |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, order in orders(shards).items():
        per_batch, spread, moved, open_shards = quality(order, total)
        lines.append(
            f"| {name} | {per_batch:.1f} | {spread:.3f} | {moved:.3f} | {open_shards:.1f} |"
        )
    figures, peer = cost(LARGE), cost(RANDOM)
    lines += [
        "",
        "### Cost over 10^8 positions (100,000 shards of 1,000; rank 7 of 8)",
        "",
        "| figure | value |",
        "| --- | ---: |",
        f"| time to the first index | {figures['first'] * 1000:.0f} ms |",
        f"| indices a second through the iterator | {figures['rate'] / 1e6:.2f} M |",
        f"| memory added (resident, after 10^6 indices) | {figures['memory']:.0f} MB |",
        f"| state size | {figures['state']:.0f} bytes |",
        f"| `RandomSampler` over 10^7 (a tenth): time to the first index | "
        f"{peer['first'] * 1000:.0f} ms |",
        f"| `RandomSampler` over 10^7: memory added | {peer['memory']:.0f} MB |",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    started = time.perf_counter()
    print(run(Path("."), "--quick" in sys.argv[1:]))
    print(f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)
