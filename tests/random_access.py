"""The check that a written set is random-access ready: through its manifest and its shard
indexes alone, every sample reads (one span each, checked) as the sequential reader reads
it, and each index costs 16 bytes a sample plus the sample's key (and its 64-byte header).

IndexedDataset lands separately; this reads with the format's own pieces
(:class:`~tarkit.format.index.ShardIndex`, :func:`~tarkit.format.index.sample_from_span`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tarkit import read_samples
from tarkit.format.index import HEADER_SIZE, ROW_SIZE, ShardIndex, sample_from_span
from tarkit.storage import load_table, resolve_url


@dataclass
class Ready:
    """What :func:`check_random_access` read: the shards, samples, index bytes and the
    bytes of all keys, and each index file's bytes (by shard name)."""

    shards: int
    samples: int
    index_bytes: int
    key_bytes: int
    indexes: dict[str, bytes]


def check_random_access(manifest: str | Path) -> Ready:
    """Assert that the set of ``manifest`` is random-access ready (the module docstring)."""
    table = load_table(str(manifest))
    assert table.index is not None, "the manifest names no index"
    ready = Ready(len(table), 0, 0, 0, {})
    for shard in range(len(table)):
        url = resolve_url(str(manifest), table.name(shard))
        where = resolve_url(str(manifest), table.index_name(shard))  # type: ignore[arg-type]
        data = Path(where).read_bytes()
        shard_bytes = Path(url).read_bytes()
        index = ShardIndex(data, where)
        index.check_size(len(shard_bytes), url)
        sequential = [(s.key, s.data()) for s in read_samples([url])]
        assert len(index) == len(sequential) == table.shard_samples(shard), url
        keys = 0
        for position, (key, fields) in enumerate(sequential):
            entry = index.entry(position)
            sample = sample_from_span(entry, shard_bytes[entry.offset : entry.stop], url)
            assert (sample.key, sample.data()) == (key, fields), (url, position)
            keys += len(key.encode("utf-8", "surrogateescape"))
        assert len(data) == HEADER_SIZE + ROW_SIZE * len(index) + keys, where
        ready.samples += len(index)
        ready.index_bytes += len(data)
        ready.key_bytes += keys
        ready.indexes[table.name(shard)] = data
    assert ready.samples == table.samples
    return ready
