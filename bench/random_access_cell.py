"""One cell of ``bench_random_access.py``: ``ds[i]`` in a random order, in a fresh process.

    python bench/random_access_cell.py LOADER COUNT DATA...
    python bench/random_access_cell.py epoch indexed|sequential DATA...

LOADER is ``tarkit`` (DATA: indexed tar shards, ``IndexedDataset``), ``wids`` (DATA: the
same tar shards, ``wids.ShardListDataset``), ``litdata`` or ``mosaic`` (DATA: a directory
in their own format, their ``StreamingDataset``). Every loader reads the same samples in
the same random order (seed 0), bytes only: each sample's ``jpg`` as bytes and ``cls``.
The dataset is opened and a first pass over 500 samples is made untimed (page tables,
open files, the peers' own caches), then ``COUNT`` samples are timed. Prints JSON: samples,
wall seconds, CPU seconds.

``epoch`` times one epoch of a DataLoader with 2 workers, decoded as ``peers_cell.py``
decodes (PIL, 64×64, a uint8 tensor), batches of 64: ``indexed`` is ``IndexedDataset``
with ``BlockSampler``, ``sequential`` is ``tarkit.loader`` over the same shards.
"""

from __future__ import annotations

import json
import random
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any


def tarkit_get(data: list[str]) -> tuple[int, Callable[[int], Any]]:
    import tarkit

    dataset = tarkit.IndexedDataset(data)

    def get(i: int) -> Any:
        sample = dataset[i]
        return sample["jpg"], sample["cls"]

    return len(dataset), get


def wids_get(data: list[str]) -> tuple[int, Callable[[int], Any]]:
    import wids

    import tarkit

    sizes = tarkit.IndexedDataset(data).shard_sizes.tolist()
    shards = [{"url": url, "nsamples": n} for url, n in zip(data, sizes, strict=True)]
    dataset = wids.ShardListDataset(shards, transformations=[])

    def get(i: int) -> Any:
        sample = dataset[i]
        return sample[".jpg"].getvalue(), sample[".cls"].getvalue()

    return len(dataset), get


def litdata_get(data: list[str]) -> tuple[int, Callable[[int], Any]]:
    from litdata import StreamingDataset

    dataset = StreamingDataset(data[0])

    def get(i: int) -> Any:
        sample = dataset[i]
        return bytes(sample["jpg"]), sample["cls"]

    return len(dataset), get


def mosaic_get(data: list[str]) -> tuple[int, Callable[[int], Any]]:
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    dataset = StreamingDataset(local=data[0], batch_size=64)

    def get(i: int) -> Any:
        sample = dataset[i]
        return bytes(sample["jpg"]), sample["cls"]

    return len(dataset), get


LOADERS = {"tarkit": tarkit_get, "wids": wids_get, "litdata": litdata_get, "mosaic": mosaic_get}


def epoch(how: str, data: list[str]) -> dict[str, float]:
    import functools

    from peers_cell import cpu_seconds, prepare_pair
    from torch.utils.data import DataLoader

    import tarkit

    prepare = functools.partial(prepare_pair, True)
    cpu, start = cpu_seconds(), time.perf_counter()
    if how == "indexed":
        dataset = tarkit.IndexedDataset(data, to_tuple="jpg cls", map=prepare)
        loader: Any = DataLoader(dataset, batch_size=64, num_workers=2,
                                 sampler=tarkit.BlockSampler(dataset))  # fmt: skip
    else:
        loader = tarkit.loader(data, 64, 2, to_tuple="jpg cls", map=prepare)
    count = sum(len(batch[1]) for batch in loader)
    seconds = time.perf_counter() - start
    del loader
    return {"samples": count, "seconds": seconds, "cpu": cpu_seconds() - cpu}


def main(argv: list[str]) -> int:
    import contextlib
    import io

    if argv[0] == "epoch":
        warnings.simplefilter("ignore")
        print(json.dumps(epoch(argv[1], argv[2:])))
        return 0
    name, count, data = argv[0], int(argv[1]), argv[2:]
    warnings.simplefilter("ignore")
    with contextlib.redirect_stdout(io.StringIO()):  # wids prints what it opened
        total, get = LOADERS[name](data)
        order = list(range(total))
        random.Random(0).shuffle(order)
        for i in order[:500]:
            get(i)
    timed = order[:count]
    cpu, start = time.process_time(), time.perf_counter()
    for i in timed:
        get(i)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(json.dumps({"samples": len(timed), "seconds": seconds, "cpu": cpu}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
