"""One cell of ``bench_peers.py``, timed in a fresh process, its figures printed as JSON.

    python bench/peers_cell.py LOADER bytes|decoded WORKERS DATA...
    python bench/peers_cell.py write-litdata|write-mosaic OUTPUT CHUNKS SHARDS...

LOADER is ``tarkit``, ``webdataset`` (DATA: tar shards), ``litdata`` (DATA: a directory
written by litdata's ``optimize``), ``mosaic`` (DATA: a directory written by ``MDSWriter``)
or ``pil`` (DATA: tar shards, read into memory untimed, then decoded in a plain loop).
Every loader hands each sample's ``jpg`` and ``cls`` to the same :func:`prepare` (bytes
only, or decoded by :func:`decode`) and batches of 64 are collated by torch's
``default_collate`` in the workers (tarkit: by ``tarkit.loader``'s own collation, which
gives the same batches). The clock starts before the dataset is made, so time to first
batch includes opening the data and starting the workers; CPU seconds are the process
tree's (``getrusage`` of this process and of its reaped children).
"""

from __future__ import annotations

import functools
import io
import json
import resource
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

BATCH = 64
SIDE = 64  # every image ends as SIDE × SIDE × 3 uint8, as webdataset's "rgb8" gives


def decode(data: bytes | memoryview) -> Any:
    """PIL decode, resized to SIDE × SIDE when it is not, as a uint8 HWC tensor."""
    import numpy
    import torch
    from PIL import Image

    image = Image.open(io.BytesIO(data)).convert("RGB")
    if image.size != (SIDE, SIDE):
        image = image.resize((SIDE, SIDE), Image.BILINEAR)
    return torch.from_numpy(numpy.array(image))


def prepare(decoded: bool, jpg: bytes | memoryview, cls: bytes | int) -> tuple[Any, int]:
    """What every loader makes of a sample: (image bytes or decoded image, class)."""
    return (decode(jpg) if decoded else bytes(jpg)), int(cls)


def prepare_pair(decoded: bool, pair: tuple[Any, Any]) -> tuple[Any, int]:
    return prepare(decoded, *pair)


def prepare_dict(decoded: bool, sample: dict[str, Any]) -> tuple[Any, int]:
    return prepare(decoded, sample["jpg"], sample["cls"])


def tarkit_loader(data: list[str], decoded: bool, workers: int) -> Iterable[Any]:
    import tarkit

    return tarkit.loader(data, BATCH, workers, to_tuple="jpg cls",
                         map=functools.partial(prepare_pair, decoded))  # fmt: skip


def webdataset_loader(data: list[str], decoded: bool, workers: int) -> Iterable[Any]:
    import webdataset as wds

    dataset = wds.WebDataset(data, shardshuffle=False, empty_check=False)
    dataset = dataset.to_tuple("jpg", "cls").map(functools.partial(prepare_pair, decoded))
    return wds.WebLoader(dataset, batch_size=BATCH, num_workers=workers)


def litdata_loader(data: list[str], decoded: bool, workers: int) -> Iterable[Any]:
    from litdata import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(data[0], transform=functools.partial(prepare_dict, decoded))
    return StreamingDataLoader(dataset, batch_size=BATCH, num_workers=workers)


def mosaic_loader(data: list[str], decoded: bool, workers: int) -> Iterable[Any]:
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory
    from torch.utils.data import DataLoader

    class Prepared(StreamingDataset):  # Mosaic's way: override __getitem__
        def __getitem__(self, index: int) -> Any:
            return prepare_dict(decoded, super().__getitem__(index))

    clean_stale_shared_memory()  # left by a run that timed out
    dataset = Prepared(local=data[0], batch_size=BATCH)
    return DataLoader(dataset, batch_size=BATCH, num_workers=workers)


LOADERS: dict[str, Callable[[list[str], bool, int], Iterable[Any]]] = {
    "tarkit": tarkit_loader,
    "webdataset": webdataset_loader,
    "litdata": litdata_loader,
    "mosaic": mosaic_loader,
}


def cpu_seconds() -> float:
    own, children = (resource.getrusage(w) for w in (resource.RUSAGE_SELF,
                                                    resource.RUSAGE_CHILDREN))  # fmt: skip
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def time_loader(name: str, data: list[str], decoded: bool, workers: int) -> dict[str, float]:
    """One epoch: samples, wall seconds, seconds to the first batch, CPU seconds."""
    cpu, start = cpu_seconds(), time.perf_counter()
    iterator = iter(LOADERS[name](data, decoded, workers))
    count = len(next(iterator)[1])
    first = time.perf_counter() - start
    for batch in iterator:
        count += len(batch[1])
    seconds = time.perf_counter() - start
    del iterator  # its workers are joined, so their CPU time is counted below
    return {"samples": count, "seconds": seconds, "first": first, "cpu": cpu_seconds() - cpu}


def time_pil(data: list[str], decoded: bool) -> dict[str, float]:
    """:func:`prepare` over the samples held in memory, in a plain loop: the limit."""
    import tarkit

    samples = [(s.get("jpg"), s.get("cls")) for s in tarkit.read_samples(data)]
    cpu, start = cpu_seconds(), time.perf_counter()
    for jpg, cls in samples:
        prepare(decoded, jpg, cls)
    seconds = time.perf_counter() - start
    return {"samples": len(samples), "seconds": seconds, "first": 0.0,
            "cpu": cpu_seconds() - cpu}  # fmt: skip


def shard_samples(shard: str) -> Iterable[dict[str, Any]]:
    """The samples of a tar shard as litdata and Mosaic store them: JPEG bytes, int class."""
    import tarkit

    for sample in tarkit.read_samples([shard]):
        yield {"jpg": sample.get("jpg"), "cls": int(sample.get("cls") or b"")}


def chunk_bytes(shards: list[str], chunks: int) -> int:
    """A chunk size that cuts the samples' bytes into about ``chunks`` chunks, like the
    tar shards (so that two workers each get some)."""
    total = sum(len(s["jpg"]) + 16 for shard in shards for s in shard_samples(shard))
    return total // chunks + 4096


def write_litdata(output: str, chunks: int, shards: list[str]) -> None:
    from litdata import optimize

    optimize(fn=shard_samples, inputs=shards, output_dir=output,
             chunk_bytes=chunk_bytes(shards, chunks),
             num_workers=1, mode="overwrite", verbose=False)  # fmt: skip


def write_mosaic(output: str, chunks: int, shards: list[str]) -> None:
    from streaming import MDSWriter

    columns = {"jpg": "bytes", "cls": "int"}
    with MDSWriter(out=output, columns=columns, size_limit=chunk_bytes(shards, chunks)) as writer:
        for shard in shards:
            for sample in shard_samples(shard):
                writer.write(sample)


def main(argv: list[str]) -> int:
    if argv[0] in ("write-litdata", "write-mosaic"):
        writer = write_litdata if argv[0] == "write-litdata" else write_mosaic
        writer(argv[1], int(argv[2]), argv[3:])
        return 0
    name, mode, workers, data = argv[0], argv[1], int(argv[2]), argv[3:]
    decoded = mode == "decoded"
    import warnings

    import torch  # noqa: F401  (imported before the clock starts, as are the libraries)

    warnings.simplefilter("ignore")  # torch on read-only arrays, litdata's notices
    decode(_tiny_jpeg())  # Pillow's JPEG plugin loaded before timing
    if name == "pil":
        figures = time_pil(data, decoded)
    else:
        __import__({"tarkit": "tarkit.loading", "mosaic": "streaming"}.get(name, name))
        figures = time_loader(name, data, decoded, workers)
    print(json.dumps(figures))
    return 0


def _tiny_jpeg() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 8)).save(out, "JPEG")
    return out.getvalue()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
