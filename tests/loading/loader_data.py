"""Small shards for the loader tests: known keys, a manifest with keys and offsets; and
an item through a pipe as a DataLoader worker's goes."""

from __future__ import annotations

import gzip
import io
import pickle
from collections import Counter
from collections.abc import Iterable
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

from PIL import Image

from tarkit.format.manifest import Manifest, ShardInfo
from tarkit.format.tar_writer import TarWriter


def jpeg(seed: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (seed % 256, 40, 90)).save(out, "JPEG")
    return out.getvalue()


def make_shards(
    directory: Path,
    counts: list[int],
    *,
    prefix: str = "s",
    gzip_shards: bool = False,
    bad_jpegs: Iterable[str] = (),
    images: bool = False,
) -> tuple[list[str], str]:
    """Shards with samples ``{prefix}SS-III`` (cls, txt; jpg with ``images``) and a
    manifest with keys and offsets; returns the shard paths and the manifest path."""
    directory.mkdir(parents=True, exist_ok=True)
    bad = set(bad_jpegs)
    paths, infos = [], []
    for shard, count in enumerate(counts):
        out = io.BytesIO()
        keys, offsets = [], []
        with TarWriter(out) as writer:
            for i in range(count):
                key = f"{prefix}{shard:02d}-{i:03d}"
                keys.append(key)
                offsets.append(writer.bytes_written)
                writer.add(f"{key}.cls", str(shard * 1000 + i).encode())
                if images:
                    writer.add(f"{key}.jpg", b"not a jpeg" if key in bad else jpeg(i))
                writer.add(f"{key}.txt", f"sample {key}".encode() * (i % 3 + 1))
        data = out.getvalue()
        name = f"{prefix}-{shard:03d}.tar" + (".gz" if gzip_shards else "")
        path = directory / name
        path.write_bytes(gzip.compress(data, mtime=0) if gzip_shards else data)
        paths.append(str(path))
        infos.append(ShardInfo(name, count, path.stat().st_size, keys=keys, offsets=offsets))
    manifest = directory / "manifest.json"
    # version 1: the keys and offsets the loader checks and seeks with
    manifest.write_bytes(Manifest(infos, str(manifest)).to_bytes())
    return paths, str(manifest)


def keys_of(items: Iterable[object]) -> list[str]:
    keys: list[str] = []
    for item in items:
        key = item["__key__"] if isinstance(item, dict) else item[0]  # type: ignore[index]
        keys.extend(key if isinstance(key, list) else [key])
    return keys


def all_keys(counts: list[int], prefix: str = "s") -> Counter[str]:
    return Counter(f"{prefix}{s:02d}-{i:03d}" for s, c in enumerate(counts) for i in range(c))


def same(a: Any, b: Any) -> bool:
    """Equal structure, types, dtypes and values (batches of tensors, lists, dicts)."""
    import torch

    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def piped(item: Any) -> bytes:
    """``item`` pickled as a worker pickles it: what goes through the pipe."""
    out = io.BytesIO()
    ForkingPickler(out, pickle.HIGHEST_PROTOCOL).dump(item)
    return out.getvalue()


def through_a_pipe(item: Any) -> Any:
    """``item`` pickled as a worker pickles it and unpickled as the main process does."""
    return pickle.loads(piped(item))
