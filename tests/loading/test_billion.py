"""The billion-sample dataset opened by the loader: ``tarkit.ShardDataset`` and
``tarkit.IndexedDataset`` over a manifest of a billion samples (version 2 and version 1),
each in a process of its own (tests/synthetic_dataset.py), with the memory of its
DataLoader workers and the size of its states. A test of the bounds on memory, not of
time. Here 100,000 shards of 10,000 samples (making 10⁶ shard files takes over a
minute; bench/bench_index.py measures the full 1,000,000 × 1,000, and docs/loading.md
gives its figures), one DataLoader worker each, and IndexedDataset from version 2 only
(its version 1 is the same table, read by the reader tests/format/test_manifest.py
bounds): a worker's and a state's bounds are the issue's own; the main process's is
64 MB at this size (some 20 MB of it the same at any size: a slice of version 1 parsed,
a chunk of the directory's listing), where making an object per shard took over 100 MB.
Here it takes some 7 MB from version 2 and 37 MB from version 1, once the code of opening
has run over a small manifest (a machine that had to map torch's code in anew counted
30 MB more of it).
"""

from __future__ import annotations

import pytest
from synthetic_dataset import make_shards, measure_datasets, write_v1, write_v2

SHARDS = 100_000
SAMPLES = 10_000
OPEN = 64 << 20  # bytes of the main process's memory to open 100,000 shards
WORKER = 50 << 20  # what a DataLoader worker may add
STATE = 64 << 10  # bytes of a loader's or a sampler's state, as JSON


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, object]]:
    directory = tmp_path_factory.mktemp("billion")
    make_shards(directory, SHARDS)
    v2 = write_v2(directory / "v2.json", SHARDS, SAMPLES)
    v1 = write_v1(directory / "v1.json", SHARDS, SAMPLES)
    cases = [("shard", v2), ("shard", v1), ("indexed", v2)]
    return measure_datasets(cases, workers=1, timeout=120)


@pytest.mark.parametrize("case", range(3), ids=["shard-v2", "shard-v1", "indexed-v2"])
def test_a_billion_samples_open_within_the_memory_bounds_in_the_main_process_and_workers(
    figures: list[dict[str, object]], case: int
) -> None:
    opened = figures[case]
    assert opened["samples"] == SHARDS * SAMPLES
    assert opened["peak"] < OPEN, str(opened)  # type: ignore[operator]
    workers = opened["workers"]
    assert len(workers) == 1, str(opened)  # type: ignore[arg-type]
    for worker in workers:  # type: ignore[attr-defined]
        assert worker["private"] < WORKER, str(opened)
    assert opened["state"] < STATE, str(opened)  # type: ignore[operator]
    if opened["dataset"] == "shard":
        assert opened["loader_state"] < STATE, str(opened)  # type: ignore[operator]
    else:
        assert opened["sampler_peak"] < OPEN, str(opened)  # type: ignore[operator]
