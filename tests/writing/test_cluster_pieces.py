"""shard_dataset's cluster run (ClusterRun and the pieces its driver holds) on the local
engine, so without Ray: items that give several samples, or none, cut as one machine cuts.

The run is the one ``engine="ray"`` makes (:func:`~tarkit.writing.cluster.shard_on_engine`),
with its tasks in worker processes of this machine; every run is compared, byte for byte
and hidden records included, with the local engine's files of the same dataset and options.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from shard_datasets import Chunks, Words

from tarkit.errors import InputError, UsageError
from tarkit.format.encoding import DEFAULT_QUALITY, ImageTransform
from tarkit.format.tar_writer import default_mtime
from tarkit.writing.cluster import shard_on_engine
from tarkit.writing.cluster_tasks import EncodeTask, WriteTask, Written
from tarkit.writing.cluster_walk import Cut
from tarkit.writing.from_dataset import sample_order, shard_dataset
from tarkit.writing.items import ItemEncoder
from tarkit.writing.rejects import default_rejects
from tarkit.writing.shard_records import Covered, ShardRecord

pytestmark = pytest.mark.timeout(120)


def on_cluster(dataset: Any, pattern: str, *, to_sample: Any = None, shuffle: bool = False,
               seed: int = 0, maxcount: int = 100_000, maxsize: int = 1 << 30,
               on_error: str = "fail", mode: str = "create") -> None:  # fmt: skip
    """What ``shard_dataset(engine="ray")`` runs, on two local worker processes."""
    transform = ImageTransform(None, None, DEFAULT_QUALITY)
    encoder = ItemEncoder(dataset, to_sample, default_mtime(), DEFAULT_QUALITY, "png", transform)
    skipping = on_error == "skip"
    shard_on_engine(
        encoder, sample_order(len(dataset), shuffle, seed), pattern, engine="local", workers=2,
        address=None, num_cpus=1, retries=0, manifest=None, maxcount=maxcount, maxsize=maxsize,
        mode=mode, start=0, storage_options=None, skipping=skipping,
        rejects=default_rejects(pattern) if skipping else None, on_reject=None, post=None,
        on_shard=None, report=lambda tally: None,
    )  # fmt: skip


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def shards(directory: Path) -> dict[str, bytes]:
    """The files but the hidden records (a failed cluster run keeps every shard's)."""
    return {p.name: p.read_bytes() for p in sorted(directory.glob("s-*"))}


# Cut by count in index order (item 23 repeats the key before it) and by size shuffled,
# leaving out the items that fail; by size through gzip (whose cuts only the write tasks
# can measure), failing at item 14, before its shard is full.
CASES = [
    ({"maxcount": 7, "on_error": "skip"}, ".tar", Chunks(bad=14, repeat=23)),
    ({"maxsize": 2500, "shuffle": True, "seed": 3, "on_error": "skip"}, ".tar", Chunks(bad=14)),
    ({"maxsize": 2500}, ".tar.gz", Chunks(bad=14, as_list=True)),
]


@pytest.mark.parametrize("options, suffix, chunks", CASES)
def test_several_samples_per_item_on_a_cluster_give_the_local_engines_shards(
    tmp_path: Path, options: dict[str, Any], suffix: str, chunks: Chunks
) -> None:
    failures = []
    for name, write in (("local", shard_dataset), ("cluster", on_cluster)):
        try:
            write(Words(40), str(tmp_path / name / f"s-%02d{suffix}"), to_sample=chunks,
                  **options)  # fmt: skip
        except InputError as exc:
            failures.append(str(exc))
    expected = shards(tmp_path / "local")
    assert len(expected) > 3 and shards(tmp_path / "cluster") == expected
    if options.get("on_error") == "skip":
        assert expected["s-rejects.tsv"].startswith(b"14\t")
        # A set whose shards end among an item's samples keeps the same records.
        assert files(tmp_path / "cluster") == files(tmp_path / "local")
    else:
        assert failures == ["dataset: item 14: ValueError: no chunk 1 of item 14"] * 2


def test_a_cluster_resumes_a_local_run_cut_among_an_items_samples_and_fills_holes(
    tmp_path: Path,
) -> None:
    options: dict[str, Any] = {"maxcount": 5, "shuffle": True, "seed": 2, "on_error": "skip"}
    clean, cut = tmp_path / "clean", tmp_path / "cut"
    shard_dataset(Words(40), str(clean / "s-%02d.tar"), to_sample=Chunks(bad=14), **options)
    stop = sample_order(40, True, 2)[30]
    with pytest.raises(KeyboardInterrupt):
        shard_dataset(Words(40), str(cut / "s-%02d.tar"), to_sample=Chunks(bad=14, stop=stop),
                      **options)  # fmt: skip
    assert 0 < len(list(cut.glob("s-*.tar"))) < len(list(clean.glob("s-*.tar")))
    on_cluster(Words(40), str(cut / "s-%02d.tar"), to_sample=Chunks(bad=14), mode="resume",
               **options)  # fmt: skip
    assert files(cut) == files(clean)
    # Shards missing in the middle of a complete set: only they are written again.
    for name in ("s-02.tar", "s-05.tar"):
        (cut / name).unlink()
    kept = (cut / "s-03.tar").stat().st_mtime_ns
    on_cluster(Words(40), str(cut / "s-%02d.tar"), to_sample=Chunks(bad=14), mode="resume",
               **options)  # fmt: skip
    assert files(cut) == files(clean)
    assert (cut / "s-03.tar").stat().st_mtime_ns == kept


def test_a_cluster_overwrite_commits_its_records_with_its_shards_or_leaves_the_old_ones(
    tmp_path: Path,
) -> None:
    pattern = str(tmp_path / "cluster" / "s-%02d.tar")
    on_cluster(Words(40), pattern, to_sample=Chunks(), maxcount=5)
    old = files(tmp_path / "cluster")
    assert ".s-00.tar.shard.json" in old
    with pytest.raises(InputError, match="item 14"):  # stopped before its commit
        on_cluster(Words(40), pattern, to_sample=Chunks(bad=14), maxcount=4, mode="overwrite")
    assert files(tmp_path / "cluster") == old  # the old records too: the old set resumes
    on_cluster(Words(40), pattern, to_sample=Chunks(), maxcount=4, mode="overwrite")
    shard_dataset(Words(40), str(tmp_path / "local" / "s-%02d.tar"), to_sample=Chunks(),
                  maxcount=4)  # fmt: skip
    assert files(tmp_path / "cluster") == files(tmp_path / "local")


@pytest.mark.parametrize("pattern", ["out.tar", "d/%06d/", "s-%q.tar"])
def test_a_cluster_refuses_a_pattern_without_one_file_per_shard_before_any_work(
    tmp_path: Path, pattern: str
) -> None:
    # (it gave a TypeError traceback from the driver's first write task)
    with pytest.raises(UsageError, match="^shard pattern .* (no shard number|names a dir|malf)"):
        on_cluster(Words(4), f"{tmp_path}/{pattern}")  # (a Path would drop the last /)
    assert list(tmp_path.iterdir()) == []


def test_the_cluster_runs_payloads_are_built_by_keyword_only() -> None:
    for payload in (EncodeTask, WriteTask, Written, Cut, ShardRecord, Covered):
        with pytest.raises(TypeError, match="positional"):  # one value for each field
            payload(*range(len(dataclasses.fields(payload))))
