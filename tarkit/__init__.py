"""tarkit: a toolkit for datasets stored as WebDataset tar shards.

The library streams tar members and samples strictly and byte-exactly; the commands
(``tarcat``, ``tarsplit``, ``tar2tsv``, ``tarshow``…) are thin layers over it. This module
is the public face: the names users import, the heavy ones (torch's, numpy's) loaded only
on first use. The folders below follow the data flow (docs/architecture.md names every
module).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import (
    CompressionError,
    HeaderError,
    InputError,
    MapError,
    OutputError,
    SampleError,
    SourceError,
    TarkitError,
    TruncatedError,
    UsageError,
)

if TYPE_CHECKING:
    from .format.samples import Sample, SkipLog, group_samples, split_name
    from .format.tar import Member, read_members
    from .format.tar_writer import TarWriter
    from .stream.stages import read_samples, shuffle_samples, slice_samples, take, write_samples

__version__ = "0.1.0"

# Imported on first use, so ``import tarkit`` does not load torch and the tools start fast
# (a tool imports the modules it uses, and nothing else, when it imports ``tarkit.cli``).
_LAZY = {
    **dict.fromkeys(("Sample", "SkipLog", "group_samples", "split_name"), "format.samples"),
    **dict.fromkeys(("Member", "read_members"), "format.tar"),
    "TarWriter": "format.tar_writer",
    **dict.fromkeys(
        ("read_samples", "shuffle_samples", "slice_samples", "take", "write_samples"),
        "stream.stages",
    ),
    "BlockSampler": "loading.sampler",
    "KeySplit": "seeds",
    "IndexedDataset": "loading.indexed",
    "ShardDataset": "loading.dataset",
    "ShardLoader": "loading.loader",
    "loader": "loading.loader",
    "shard_dataset": "writing.from_dataset",
    "ShardWriter": "writing.shard_writer",
    "map_shards": "processing.driver",
    "dataset_stats": "processing.stats",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BlockSampler",
    "CompressionError",
    "HeaderError",
    "IndexedDataset",
    "InputError",
    "KeySplit",
    "MapError",
    "Member",
    "OutputError",
    "Sample",
    "SampleError",
    "ShardDataset",
    "ShardLoader",
    "ShardWriter",
    "SkipLog",
    "SourceError",
    "TarWriter",
    "TarkitError",
    "TruncatedError",
    "UsageError",
    "dataset_stats",
    "group_samples",
    "loader",
    "map_shards",
    "read_members",
    "read_samples",
    "shard_dataset",
    "shuffle_samples",
    "slice_samples",
    "split_name",
    "take",
    "write_samples",
]
