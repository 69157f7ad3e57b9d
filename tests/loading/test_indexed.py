"""tarkit.IndexedDataset: any sample by position or key, exactly as the sequential loader
gives it, never another sample's bytes, through real DataLoader workers, samplers, a gloo
group, Lightning, torchdata, HTTP on 127.0.0.1 and moto's S3."""

from __future__ import annotations

import io
import json
import os
import pickle
import socket
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch
from conftest import run
from shard_server import ShardServer, drop, reset
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler

import tarkit
from tarkit import IndexedDataset
from tarkit.errors import InputError, UsageError
from tarkit.format.index import SUFFIX, ShardIndex, index_stream
from tarkit.format.manifest import Manifest
from tarkit.format.shard_table import ShardTable
from tarkit.storage import publish
from tarkit.writing.index import index_shard

COUNTS = [7, 3, 9, 5]
TOTAL = sum(COUNTS)


def write_index(shard: Path, to: Path | None = None) -> Path:
    """The shard's index (made as tarindex and the writers will), beside it or at ``to``."""
    with open(shard, "rb") as stream:
        data = index_stream(stream, str(shard))  # IndexBuilder's bytes
    ShardIndex(data, "check")
    target = to or Path(str(shard) + SUFFIX)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target


def shards(directory: Path, counts: list[int] = COUNTS, *, big: int = 0) -> list[str]:
    """Shards written by ShardWriter (samples ``kSS-III``: cls, txt, json), indexed."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for n, count in enumerate(counts):
        path = directory / f"s-{n:03d}.tar"
        with tarkit.ShardWriter(str(directory / f"part{n}-%03d.tar"), maxcount=10**6) as writer:
            for i in range(count):
                writer.write({"__key__": f"k{n:02d}-{i:03d}", "cls": str(n * 100 + i).encode(),
                              "txt": (f"sample {n}/{i} " * (i + 1 + big)).encode(),
                              "json": json.dumps({"n": n, "i": i}).encode()})  # fmt: skip
        (directory / f"part{n}-000.tar").rename(path)
        write_index(path)
        paths.append(str(path))
    return paths


@pytest.fixture
def paths(tmp_path: Path) -> list[str]:
    return shards(tmp_path / "d")


def keys_of(dataset: IndexedDataset) -> list[str]:
    return [dataset.key(i) for i in range(len(dataset))]


def test_positions_run_in_tarcats_order_over_the_same_shards(paths: list[str]) -> None:
    dataset = IndexedDataset(paths)
    result = run(["tarcat", *paths])
    assert result.returncode == 0, result.stderr
    members = tarkit.read_members(io.BytesIO(result.stdout))
    tarcat_keys = [sample.key for sample in tarkit.group_samples(members)]
    assert len(dataset) == TOTAL and keys_of(dataset) == tarcat_keys
    assert [s["__key__"] for s in map(dataset.__getitem__, range(TOTAL))] == tarcat_keys
    assert dataset.shard_sizes.tolist() == COUNTS


@pytest.mark.usefixtures("reader")
@pytest.mark.parametrize(
    "stages",
    [{}, {"decode": "pil"}, {"decode": "pil", "to_tuple": "txt cls"},
     {"decode": "pil", "to_tuple": "txt;json cls", "map": lambda t: (t[1], t[0].upper())}],
    ids=["bytes", "decoded", "to_tuple", "map"],
)  # fmt: skip
def test_every_sample_is_the_one_the_sequential_loader_yields(paths, stages) -> None:  # type: ignore[no-untyped-def]
    sequential = list(tarkit.ShardDataset(paths, manifest=False, **stages))
    dataset = IndexedDataset(paths, **stages)
    assert [dataset[i] for i in range(len(dataset))] == sequential
    assert dataset[-1] == sequential[-1] and dataset[-TOTAL] == sequential[0]


def test_positions_and_keys_out_of_range_are_refused(paths: list[str]) -> None:
    dataset = IndexedDataset(paths)
    for bad in (TOTAL, -TOTAL - 1, 10**12):
        with pytest.raises(IndexError):
            dataset[bad]
        with pytest.raises(IndexError):
            dataset.key(bad)
    assert dataset.index("k02-004") == 7 + 3 + 4 and dataset.key(14) == "k02-004"
    assert all(dataset.index(dataset.key(i)) == i for i in range(TOTAL))
    with pytest.raises(KeyError):
        dataset.index("k99-000")
    with pytest.raises(TypeError):
        dataset["k00-000"]  # type: ignore[index]


def rewrite(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "appended":
        path.write_bytes(data + bytes(1024))
    elif how == "truncated":
        path.write_bytes(data[: len(data) - 2048])
    elif how == "rewritten":  # the same keys, other contents and sizes
        samples = list(tarkit.group_samples(tarkit.read_members(io.BytesIO(data))))
        out = io.BytesIO()
        with tarkit.TarWriter(out) as writer:
            for sample in samples:
                for field, value in sample.data().items():
                    writer.add(f"{sample.key}.{field}", value * 3)
        path.write_bytes(out.getvalue())
    else:  # a member replaced by another of the same size: only the crc32 can tell
        at = data.index(b"sample 2/3 ")
        path.write_bytes(data[:at] + b"SAMPLE" + data[at + 6 :])


@pytest.mark.usefixtures("reader")
@pytest.mark.parametrize("how", ["appended", "truncated", "rewritten", "same size"])
def test_a_shard_changed_after_it_was_indexed_is_a_stale_error_naming_it(paths, how) -> None:  # type: ignore[no-untyped-def]
    dataset = IndexedDataset(paths)
    rewrite(Path(paths[2]), how)
    with pytest.raises(InputError) as caught:
        for i in range(10, 10 + COUNTS[2]):
            dataset[i]
    error = caught.value
    assert error.reason == InputError.STALE and error.source == paths[2]
    assert "the shard changed after it was indexed" in str(error)
    assert "(key 'k02-" in str(error) and "sample " in str(error)
    assert dataset[3]["__key__"] == "k00-003"  # the other shards read on
    fresh = IndexedDataset(paths)  # opened after the change: the same
    with pytest.raises(InputError, match="changed after it was indexed"):
        for i in range(10, 10 + COUNTS[2]):
            fresh[i]


def test_under_skip_a_stale_sample_is_none_counted_and_left_out_by_collate(paths) -> None:  # type: ignore[no-untyped-def]
    dataset = IndexedDataset(paths, handler="skip")
    rewrite(Path(paths[2]), "same size")
    with pytest.warns(UserWarning, match="skipping bad input"):
        items = [dataset[i] for i in range(TOTAL)]
    assert items.count(None) == 1 and dataset.skipped.total_samples == 1
    batch = IndexedDataset.collate([items[0], None, items[1]])
    assert batch["__key__"] == ["k00-000", "k00-001"]
    assert IndexedDataset.collate([None, None]) is None


def test_a_compressed_shard_and_a_shard_without_index_are_refused_naming_them(
    paths: list[str], tmp_path: Path
) -> None:
    gz = tmp_path / "s-009.tar.gz"
    gz.write_bytes(b"\x1f\x8b")
    with pytest.raises(UsageError, match=r"s-009.tar.gz: random access into gzip is not possible"):
        IndexedDataset([*paths, str(gz)])
    os.unlink(paths[1] + SUFFIX)
    with pytest.raises(UsageError) as caught:
        IndexedDataset(paths)
    assert str(caught.value).startswith(f"{paths[1]}: no shard index")
    assert "tarindex SHARDS… -o DIR/manifest.json" in str(caught.value)


def manifest_v2(directory: Path, paths: list[str], index: str | None) -> str:
    """A version 2 manifest of ``paths`` in ``directory``, its indexes by ``index``."""
    from tarkit.format.manifest import dumps_v2

    infos = [index_shard(p, manifest_path=str(directory / "manifest.json")) for p in paths]
    document, columns = dumps_v2(ShardTable.from_infos(infos, index=index), "manifest.columns")
    (directory / "manifest.columns").write_bytes(columns)
    (directory / "manifest.json").write_bytes(document)
    return str(directory / "manifest.json")


def test_manifests_of_both_versions_and_their_directory_give_the_same_dataset(
    paths: list[str], tmp_path: Path
) -> None:
    listed = [IndexedDataset(paths)[i] for i in range(TOTAL)]
    directory = Path(paths[0]).parent
    v1 = str(directory / "v1.json")
    publish(v1, Manifest([index_shard(p, manifest_path=v1) for p in paths], v1).to_bytes())
    for n, path in enumerate(paths):  # indexes where the manifest's pattern says
        write_index(Path(path), directory / "index" / f"{n:06d}.idx")
        os.unlink(path + SUFFIX)
    v2 = manifest_v2(directory, paths, "index/s-%03d.idx")
    for n in range(len(paths)):
        os.rename(directory / "index" / f"{n:06d}.idx", directory / "index" / f"s-{n:03d}.idx")
    for source in (v2, str(directory)):
        dataset = IndexedDataset(source)
        assert [dataset[i] for i in range(TOTAL)] == listed
    with pytest.raises(UsageError, match="no shard index"):
        IndexedDataset(v1)[0]  # version 1 has no pattern: the indexes must be beside


def test_shards_written_by_webdataset_and_gnu_tar_read_alike(tmp_path: Path) -> None:
    import webdataset as wds

    wds_shard = tmp_path / "wds.tar"
    with wds.TarWriter(str(wds_shard)) as writer:
        for i in range(6):
            writer.write({"__key__": f"w{i}", "txt": f"text {i}", "cls": i})
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    for i in range(4):
        (tree / "sub" / f"g{i}.txt").write_text(f"gnu {i}" * (i + 1))
        (tree / "sub" / f"g{i}.cls").write_text(str(i))
    gnu_shard = tmp_path / "gnu.tar"  # a directory member first, sorted names
    subprocess.run(["tar", "--sort=name", "--format=gnu", "-cf", str(gnu_shard), "-C",
                    str(tree), "sub"], check=True)  # fmt: skip
    urls = [str(wds_shard), str(gnu_shard)]
    for url in urls:
        write_index(Path(url))
    dataset = IndexedDataset(urls)
    assert [dataset[i] for i in range(len(dataset))] == list(
        tarkit.ShardDataset(urls, manifest=False)
    )
    assert dataset.key(6) == "sub/g0" and len(dataset) == 10


@pytest.mark.parametrize("workers, context", [(0, None), (2, "fork"), (2, "spawn")])
def test_dataloader_workers_read_every_sample_once(paths, workers, context) -> None:  # type: ignore[no-untyped-def]
    dataset = IndexedDataset(paths, to_tuple="cls txt")
    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(3))
    loader = DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=workers,
                        multiprocessing_context=context)  # fmt: skip
    got = [int(c) for batch in loader for c in batch[0]]
    assert sorted(got) == sorted(n * 100 + i for n, c in enumerate(COUNTS) for i in range(c))
    ordered = DataLoader(dataset, batch_size=5, sampler=SequentialSampler(dataset))
    assert [bytes(t) for b in ordered for t in b[1]] == [dataset[i][1] for i in range(TOTAL)]


def test_a_pickled_dataset_carries_counts_and_names_not_indexes(tmp_path: Path) -> None:
    many = shards(tmp_path / "many", [200] * 5)
    dataset = IndexedDataset(many)
    dataset[999]
    size = len(pickle.dumps(dataset))
    assert size < 20_000, size  # no per-sample table: 1,000 samples would be ≥ 16 KB
    copy = pickle.loads(pickle.dumps(dataset))
    assert copy[999] == dataset[999] and copy.index("k04-199") == 999


def test_block_sampler_and_a_stateful_dataloader_resume_mid_epoch_exactly(paths) -> None:  # type: ignore[no-untyped-def]
    from torchdata.stateful_dataloader import StatefulDataLoader

    dataset = IndexedDataset(paths, to_tuple="__key__")

    def loader() -> StatefulDataLoader:
        sampler = tarkit.BlockSampler(dataset, seed=5, window=2)
        return StatefulDataLoader(dataset, batch_size=3, sampler=sampler, num_workers=2)

    whole = [k for batch in loader() for k in batch[0]]
    assert sorted(whole) == sorted(keys_of(dataset))
    first = loader()
    iterator = iter(first)
    taken = [k for _ in range(3) for k in next(iterator)[0]]
    state = first.state_dict()
    del iterator
    second = loader()
    second.load_state_dict(state)
    assert taken + [k for batch in second for k in batch[0]] == whole


def test_a_lightning_trainer_fits_with_a_block_sampler(paths, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lightning = pytest.importorskip("lightning")
    dataset = IndexedDataset(paths, to_tuple="cls", map=lambda t: int(t[0]))
    seen: list[list[int]] = []

    class Model(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

        def training_step(self, batch: torch.Tensor, index: int) -> torch.Tensor:
            while len(seen) <= self.current_epoch:
                seen.append([])
            seen[self.current_epoch].extend(batch.tolist())
            return ((self.weight - batch.float()) ** 2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    loader = DataLoader(dataset, batch_size=4, sampler=tarkit.BlockSampler(dataset))
    trainer = lightning.Trainer(
        max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
        use_distributed_sampler=False,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on workers and logging
        trainer.fit(Model(), train_dataloaders=loader)
    every = sorted(n * 100 + i for n, c in enumerate(COUNTS) for i in range(c))
    assert len(seen) == 2 and all(sorted(epoch) == every for epoch in seen)
    assert seen[0] != seen[1]  # a new order each epoch, from the sampler itself


GROUP = """
import json, sys
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler
import tarkit

address, rank, out, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
dist.init_process_group("gloo", init_method=address, rank=rank, world_size=2)
dataset = tarkit.IndexedDataset(paths, to_tuple="__key__")
report = {}
for name, sampler in (("distributed", DistributedSampler(dataset, shuffle=True, seed=1)),
                      ("block", tarkit.BlockSampler(dataset, seed=1))):
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    report[name] = [k for batch in loader for k in batch[0]]
gathered = [None, None]
dist.all_gather_object(gathered, report)
if rank == 0:
    with open(out, "w") as f:
        json.dump(gathered, f)
dist.destroy_process_group()
"""


def test_distributed_and_block_samplers_over_a_real_gloo_group(paths, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "result.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", GROUP, f"tcp://127.0.0.1:{port}", str(rank), str(out), *paths],
            env=env,
        )  # fmt: skip
        for rank in range(2)
    ]
    try:
        for process in processes:
            assert process.wait(timeout=120) == 0
    finally:
        for process in processes:
            process.kill()
    ranks = json.loads(out.read_text())
    every = Counter(keys_of(IndexedDataset(paths)))
    block = Counter(ranks[0]["block"] + ranks[1]["block"])
    assert block == every  # each index exactly once across the ranks
    distributed = Counter(ranks[0]["distributed"] + ranks[1]["distributed"])
    assert set(distributed) == set(every) and sum(distributed.values()) == TOTAL + TOTAL % 2


@pytest.fixture
def served(http_server: ShardServer, tmp_path: Path) -> list[str]:
    paths = shards(tmp_path / "served", big=300)
    for path in paths:
        for name in (path, path + SUFFIX):
            http_server.files[f"/d/{os.path.basename(name)}"] = Path(name).read_bytes()
    return [f"{http_server.url}/d/{os.path.basename(p)}" for p in paths]


def test_over_http_each_sample_is_one_ranged_request(http_server: ShardServer, served) -> None:  # type: ignore[no-untyped-def]
    dataset = IndexedDataset(served)  # opening reads the index headers
    http_server.hits.clear()
    order = torch.randperm(TOTAL, generator=torch.Generator().manual_seed(1)).tolist()
    items = {i: dataset[i] for i in order}
    shard_hits = sum(n for path, n in http_server.hits.items() if path.endswith(".tar"))
    index_hits = sum(n for path, n in http_server.hits.items() if path.endswith(SUFFIX))
    assert shard_hits == TOTAL and index_hits == len(served)  # each fetched once
    assert [items[i] for i in range(TOTAL)] == list(tarkit.ShardDataset(served, manifest=False))


def test_over_http_a_connection_cut_mid_sample_reconnects_at_the_byte(
    http_server: ShardServer, served
) -> None:  # type: ignore[no-untyped-def]
    dataset = IndexedDataset(served, timeout=2)
    expected = dataset[8]
    http_server.fail("/d/s-001.tar", drop(1500), reset(700))
    http_server.ranges.clear()
    assert dataset[8] == expected
    starts = [start for path, start in http_server.ranges if path == "/d/s-001.tar"]
    assert starts[1:] == [starts[0] + 1500, starts[0] + 2200]


def test_with_a_cache_each_remote_shard_is_fetched_once(
    http_server: ShardServer, served, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    dataset = IndexedDataset(served, cache_dir=str(tmp_path / "cache"))
    items = [dataset[i] for i in reversed(range(TOTAL))]
    again = IndexedDataset(served, cache_dir=str(tmp_path / "cache"))
    assert [again[i] for i in range(TOTAL)] == items[::-1]
    assert all(http_server.hits[f"/d/s-{n:03d}.tar"] == 1 for n in range(len(COUNTS)))
    assert items[-1]["__url__"] == served[0] and "__local_path__" not in items[-1]


def test_over_s3_samples_and_keys_read_alike(paths, s3_server: str, s3_env) -> None:  # type: ignore[no-untyped-def]
    import boto3

    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
    client.create_bucket(Bucket="ranges")
    for path in paths:
        for name in (path, path + SUFFIX):
            client.upload_file(name, "ranges", f"d/{os.path.basename(name)}")
    urls = [f"s3://ranges/d/{os.path.basename(p)}" for p in paths]
    dataset = IndexedDataset(urls, storage_options={"endpoint_url": s3_server})
    local = IndexedDataset(paths)
    for i in (0, 12, TOTAL - 1):
        got, want = dataset[i], local[i]
        assert got["__url__"] == urls[local._shards.locate(i)[0]]
        assert {k: v for k, v in got.items() if not k.startswith("__")} == {
            k: v for k, v in want.items() if not k.startswith("__")
        }
    assert dataset.index("k03-004") == TOTAL - 1
