"""ShardDataset and loader: exactly once per epoch over real DataLoader workers and ranks."""

from __future__ import annotations

import datetime
import functools
import io
import os
import pickle
import random
import socket
import subprocess
import sys
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import webdataset as wds
from conftest import DATA
from loader_data import all_keys, jpeg, keys_of, make_shards
from PIL import Image
from shard_server import ShardServer
from torch.utils.data import ChainDataset, DataLoader, get_worker_info

import tarkit
from tarkit.errors import InputError, SourceError, TruncatedError, UsageError
from tarkit.format.tar_writer import TarWriter
from tarkit.loading import ShardDataset
from tarkit.loading.skips import CORRUPT, MISSING, TRUNCATED, UNDECODABLE, UNREADABLE

PEERS = DATA / "peer-shards"
# Warnings raised in this process; what workers print is tested through a script's stderr.
pytestmark = pytest.mark.filterwarnings(
    "ignore:This DataLoader will create", "ignore:.* some workers have nothing to read"
)


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], str, list[int]]:
    counts = [5, 3, 7, 1, 4]
    paths, manifest = make_shards(tmp_path_factory.mktemp("five"), counts)
    return paths, manifest, counts


# What a user sees of warnings raised in DataLoader workers: the workers' own stderr (a
# test process's warning filters, copied into forked workers, would hide them).
WARNINGS_SCRIPT = """
import sys
from torch.utils.data import DataLoader
from tarkit import ShardDataset

paths, manifest = sys.argv[1:-1], sys.argv[-1]
print("== idle", file=sys.stderr, flush=True)
for rank in (0, 1):
    dataset = ShardDataset(paths, rank=rank, world_size=2, manifest=False)
    for persistent in (False, True):
        loader = DataLoader(dataset, batch_size=None, num_workers=3, persistent_workers=persistent)
        for epoch in (0, 1):
            dataset.set_epoch(epoch)
            list(loader)
print("== idle batches", file=sys.stderr, flush=True)
for batch_size in (None, 4):  # 8 samples: 3, 3, 2 or 4, 4, 0
    dataset = ShardDataset(manifest, batch_size=batch_size)
    for epoch in (0, 1):
        dataset.set_epoch(epoch)
        list(DataLoader(dataset, batch_size=None, num_workers=3))
print("== skipped", file=sys.stderr, flush=True)
dataset = ShardDataset(paths, to_tuple="jpg", handler="skip")  # no sample has a jpg
for epoch in (0, 1):
    dataset.set_epoch(epoch)
    list(DataLoader(dataset, batch_size=None, num_workers=2))
print("== batched once", file=sys.stderr, flush=True)
dataset = ShardDataset(manifest, batch_size=2)
for workers in (2, 0):
    for epoch in (0, 1):
        dataset.set_epoch(epoch)
        list(DataLoader(dataset, batch_size=None, num_workers=workers))
"""


@pytest.fixture(scope="module")
def worker_warnings(tmp_path_factory) -> dict[str, str]:
    """The stderr of WARNINGS_SCRIPT, by section."""
    paths, manifest = make_shards(tmp_path_factory.mktemp("warnings"), [6, 2])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "RANK")}
    result = subprocess.run(
        [sys.executable, "-c", WARNINGS_SCRIPT, *paths, manifest],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    sections = result.stderr.split("== ")[1:]
    return dict(section.split("\n", 1) for section in sections)


# -- what a sample is ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["compressed.tar", "mpdata.tar", "sample.tgz", "tendata.tar", "testgz.tar"]
)
def test_samples_are_the_dicts_webdataset_yields_for_peer_shards(name):
    path = str(PEERS / name)
    ours = list(ShardDataset(path))
    theirs = list(wds.WebDataset(path, shardshuffle=False, empty_check=False))
    assert ours == theirs and ours


def test_field_names_are_lowercased_as_webdataset_does(tmp_path):
    path = tmp_path / "mixed-case.tar"
    with open(path, "wb") as file:
        writer = TarWriter(file)
        for key in ("a", "b"):
            writer.add(f"{key}.JPG", b"image " + key.encode())
            writer.add(f"{key}.Seg.PNG", b"mask")
            writer.add(f"{key}.cls", b"3")
        writer.close()
    ours = list(ShardDataset(str(path)))
    theirs = list(wds.WebDataset(str(path), shardshuffle=False, empty_check=False))
    assert ours == theirs
    assert [sorted(k for k in s if not k.startswith("__")) for s in ours] == [
        ["cls", "jpg", "seg.png"]
    ] * 2


def test_decode_and_to_tuple_give_what_webdataset_gives():
    path = str(PEERS / "sample.tgz")
    ours = list(ShardDataset(path, decode="rgb8", to_tuple="png;jpg cls"))
    theirs = list(wds.WebDataset(path, shardshuffle=False).decode("rgb8").to_tuple("png;jpg cls"))
    assert len(ours) == len(theirs) == 90
    for (image, label), (their_image, their_label) in zip(ours, theirs, strict=True):
        assert (image == their_image).all() and label == their_label


def same(ours: object, theirs: object) -> bool:
    if isinstance(ours, Image.Image):
        return isinstance(theirs, Image.Image) and ours.tobytes() == theirs.tobytes()
    if isinstance(ours, (torch.Tensor, np.ndarray)):
        return type(ours) is type(theirs) and ours.shape == theirs.shape and (ours == theirs).all()
    return ours == theirs


@pytest.mark.parametrize("spec", ["pil", "rgb8", "torchrgb", "l8"])
def test_image_specs_and_basic_handlers_decode_as_webdataset_does(tmp_path, spec):
    out = io.BytesIO()
    png = io.BytesIO()
    Image.new("RGB", (5, 3), (10, 200, 30)).save(png, "PNG")
    array = io.BytesIO()
    np.save(array, np.arange(6, dtype=np.int16).reshape(2, 3))
    with TarWriter(out) as writer:
        for i in range(3):
            writer.add(f"k{i}.jpg", jpeg(i * 70))
            writer.add(f"k{i}.png", png.getvalue())
            writer.add(f"k{i}.json", b'{"a": [1, 2], "b": "x"}')
            writer.add(f"k{i}.npy", array.getvalue())
            writer.add(f"k{i}.cls", str(i).encode())
            writer.add(f"k{i}.txt", "caf\u00e9".encode())
    path = tmp_path / "fields.tar"
    path.write_bytes(out.getvalue())
    ours = list(ShardDataset(str(path), decode=spec))
    theirs = list(wds.WebDataset(str(path), shardshuffle=False).decode(spec))
    assert len(ours) == len(theirs) == 3
    for mine, their in zip(ours, theirs, strict=True):
        assert mine.keys() == their.keys()
        assert all(same(mine[k], their[k]) for k in mine), spec
    assert ours[1]["cls"] == 1 and ours[0]["json"] == {"a": [1, 2], "b": "x"}
    assert ours[0]["txt"] == "caf\u00e9" and ours[0]["npy"].dtype == np.int16


def test_map_runs_after_decode_and_batches_are_collated_by_torch(shards):
    paths, _, counts = shards
    dataset = ShardDataset(
        paths, decode=[], to_tuple=("cls", "txt"), map=lambda s: s[0] * 2, batch_size=4
    )
    batches = list(dataset)
    assert all(isinstance(b, torch.Tensor) for b in batches)
    assert sorted(torch.cat(batches).tolist()) == sorted(
        2 * (s * 1000 + i) for s, c in enumerate(counts) for i in range(c)
    )


# -- exactly once ----------------------------------------------------------------------


def tagged(tag: str, sample: dict[str, object]) -> str:
    return f"{tag}/{sample['__key__']}"


@pytest.fixture(scope="module")
def layouts(tmp_path_factory) -> list[tuple[list[str], str, list[int]]]:
    """37 sets of shards: set n has n shards of uneven sizes (0 to 7), one of them n samples."""
    rng = random.Random(37)
    root = tmp_path_factory.mktemp("layouts")
    result = []
    for n in range(1, 38):
        counts = [rng.randrange(0, 8) for _ in range(n)]
        counts[rng.randrange(n)] = n
        paths, manifest = make_shards(root / str(n), counts)
        result.append((paths, manifest, counts))
    return result


@pytest.mark.parametrize("num_workers", [0, 2, 3])
def test_real_workers_of_every_rank_deliver_every_sample_once_per_epoch_for_1_to_37_shards(
    layouts, num_workers
):
    # One DataLoader runs them all: each worker iterates every dataset of the chain in
    # turn, as a worker of that dataset, so worker start-up is paid once.
    datasets, expected = [], Counter()
    for paths, manifest, counts in layouts:
        for source in (paths, manifest):
            for world in (1, 2, 3):
                tag = f"{len(counts)} {'manifest' if source == manifest else 'shards'} {world}"
                for rank in range(world):
                    datasets.append(
                        ShardDataset(
                            source,
                            rank=rank,
                            world_size=world,
                            shuffle=5 * (len(counts) % 2),
                            map=functools.partial(tagged, tag),
                            batch_size=4 if len(counts) % 3 else None,  # batches pass faster
                        )
                    )
                expected.update({f"{tag}/{key}": n for key, n in all_keys(counts).items()})
    loader = DataLoader(
        ChainDataset(datasets),
        batch_size=None,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
    )
    for epoch in (0, 1):
        for dataset in datasets:
            dataset.set_epoch(epoch)
        read = Counter(
            key for item in loader for key in ([item] if isinstance(item, str) else item)
        )
        assert read == expected, sorted((read - expected) + (expected - read))[:5]


@pytest.mark.parametrize("num_workers", [0, 2, 3])
def test_dataloader_workers_deliver_every_sample_once_per_epoch(shards, num_workers):
    paths, manifest, counts = shards
    for source in (paths, manifest):
        dataset = ShardDataset(source, shuffle=4, batch_size=3)
        loader = DataLoader(
            dataset, batch_size=None, num_workers=num_workers, persistent_workers=num_workers > 0
        )
        for epoch in (0, 1):
            dataset.set_epoch(epoch)
            assert Counter(keys_of(loader)) == all_keys(counts)


def test_ranks_from_rank_and_world_size_variables_split_the_samples(shards, monkeypatch):
    paths, _, counts = shards
    read: Counter[str] = Counter()
    for rank in range(3):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "3")
        part = keys_of(DataLoader(ShardDataset(paths), batch_size=None, num_workers=2))
        assert part and len(part) < sum(counts)
        read.update(part)
    assert read == all_keys(counts)


def test_more_workers_than_shards_read_each_sample_once_per_epoch(tmp_path):
    paths, _ = make_shards(tmp_path, [6, 2])
    for persistent in (False, True):
        datasets = [ShardDataset(paths, rank=rank, world_size=2) for rank in (0, 1)]
        loaders = [
            DataLoader(d, batch_size=None, num_workers=3, persistent_workers=persistent)
            for d in datasets
        ]
        for epoch in (0, 1):
            read: Counter[str] = Counter()
            for dataset, loader in zip(datasets, loaders, strict=True):
                dataset.set_epoch(epoch)
                read.update(keys_of(loader))
            assert read == all_keys([6, 2])


def test_more_workers_than_shards_warns_once_per_dataset_on_stderr(worker_warnings):
    # Two datasets (ranks 0 and 1 of 2), each read for two epochs by a DataLoader with
    # three workers started anew and then by one with persistent workers.
    idle = "UserWarning: tarkit: 2 shards for 2 ranks x 3 workers: some workers have nothing"
    assert worker_warnings["idle"].count(idle) == 2
    assert worker_warnings["idle"].count("tarkit:") == 2


def test_a_worker_left_without_a_batch_warns_once_per_dataset_on_stderr(worker_warnings):
    idle = worker_warnings["idle batches"]
    message = "tarkit: 8 samples for 1 ranks x 3 workers: some workers have nothing to read"
    assert idle.count(message + " (in batches of 4)") == 1
    assert idle.count("tarkit:") == 1


def test_with_offsets_one_shard_is_split_so_that_every_worker_has_work(tmp_path):
    paths, manifest = make_shards(tmp_path, [10])
    dataset = ShardDataset(manifest, map=lambda s: (s["__key__"], get_worker_info().id))
    seen = list(DataLoader(dataset, batch_size=None, num_workers=3))
    assert Counter(k for k, _ in seen) == all_keys([10])
    assert Counter(w for _, w in seen) == {0: 3, 1: 3, 2: 4}


@pytest.mark.parametrize("gzip_shards", [False, True])
def test_pieces_start_mid_shard_by_offset_or_by_skipping(tmp_path, gzip_shards):
    paths, manifest = make_shards(tmp_path, [9, 4], gzip_shards=gzip_shards)
    for drop_offsets in (False, True):
        if drop_offsets:
            text = Path(manifest).read_text().replace('"offsets"', '"unused"')
            Path(manifest).write_text(text)
        dataset = ShardDataset(manifest, map=lambda s: (s["__key__"], get_worker_info().id))
        seen = list(DataLoader(dataset, batch_size=None, num_workers=3))
        assert Counter(k for k, _ in seen) == all_keys([9, 4])
        # Worker 1 starts at sample 4 of the first shard, worker 2 at sample 8.
        assert Counter(w for _, w in seen) == {0: 4, 1: 4, 2: 5}


# -- equal batches and len() -----------------------------------------------------------


@pytest.mark.parametrize("num_workers", [0, 2, 3])
def test_equal_batches_give_every_rank_the_same_batches_and_len_is_exact(shards, num_workers):
    _, manifest, counts = shards  # 20 samples
    per_rank, read = [], Counter()
    for rank in range(3):
        dataset = ShardDataset(
            manifest, equal_batches=True, batch_size=4, shuffle=3, rank=rank, world_size=3
        )
        loader = DataLoader(dataset, batch_size=None, num_workers=num_workers)
        batches = list(loader)
        assert len(batches) == len(loader) == len(dataset) == 2
        per_rank.append([len(b["__key__"]) for b in batches])
        read.update(keys_of(batches))
    assert per_rank == [[4, 2]] * 3
    assert max(read.values()) == 1 and sum(counts) - sum(read.values()) == 2  # < 3 x 4


def test_len_counts_samples_or_batches_of_this_rank(shards):
    _, manifest, _ = shards
    assert len(ShardDataset(manifest)) == 20
    assert len(ShardDataset(manifest, batch_size=6)) == 4
    assert len(ShardDataset(manifest, batch_size=6, drop_last=True)) == 3
    assert [len(ShardDataset(manifest, rank=r, world_size=3)) for r in range(3)] == [6, 7, 7]
    dataset = ShardDataset(manifest, batch_size=6, drop_last=True)
    assert len(list(DataLoader(dataset, batch_size=None, num_workers=2))) == 3


@pytest.mark.parametrize("num_workers", [0, 2, 3])
def test_len_of_a_dataloader_is_the_batches_it_yields_when_the_dataset_batches(
    tmp_path, num_workers
):
    _, manifest = make_shards(tmp_path, [5, 3, 7, 1, 4, 6])  # 26 samples
    # One rank: 26 samples; three ranks: 8, 9, 9, or 8 each with equal_batches.
    for world, equal in ((1, False), (3, False), (3, True)):
        per_rank: list[list[list[int]]] = []
        for rank in range(world):
            per_rank.append([])
            options = dict(equal_batches=equal, rank=rank, world_size=world)
            samples = len(ShardDataset(manifest, **options))
            for batch_size, drop_last in ((4, False), (3, True)):
                dataset = ShardDataset(
                    manifest, batch_size=batch_size, drop_last=drop_last, **options
                )
                loader = DataLoader(dataset, batch_size=None, num_workers=num_workers)
                batches = [len(b["__key__"]) for b in loader]
                assert len(loader) == len(batches), (world, equal, rank, batch_size)
                assert sum(batches) == samples - drop_last * (samples % batch_size)
                per_rank[rank].append(batches)
        if equal:
            assert per_rank[0] == per_rank[1] == per_rank[2]


@pytest.mark.parametrize("num_workers", [0, 2, 3])
def test_a_dataloader_that_batches_gets_every_sample_and_at_most_a_batch_per_worker_more(
    tmp_path, num_workers
):
    # The documented route without the dataset batching: each worker's share ends in a
    # partial batch of its own, so len() may be short by up to num_workers - 1.
    paths, manifest = make_shards(tmp_path, [5, 3, 7, 1, 4, 6])  # 26 samples
    loader = DataLoader(ShardDataset(manifest), batch_size=4, num_workers=num_workers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own length warning, when it is short
        batches = [list(b["__key__"]) for b in loader]
    keys = sorted(k for batch in batches for k in batch)
    assert keys == sorted(keys_of(ShardDataset(paths)))
    assert len(loader) <= len(batches) <= len(loader) + max(num_workers - 1, 0)


def test_a_dataset_that_batches_for_a_dataloader_that_does_not_warns_nothing(worker_warnings):
    assert "tarkit:" not in worker_warnings["batched once"]


def test_len_without_a_manifest_is_a_type_error_and_equal_batches_needs_one(shards):
    paths, _, _ = shards
    with pytest.raises(TypeError, match="needs a manifest"):
        len(ShardDataset(paths, manifest=False))
    with pytest.raises(UsageError, match="equal_batches needs a manifest"):
        ShardDataset(paths, equal_batches=True, manifest=False)


def test_a_manifest_beside_the_shards_gives_len_when_it_lists_exactly_them(tmp_path):
    paths, _ = make_shards(tmp_path, [5, 3, 7])
    pattern = str(tmp_path / "s-{000..002}.tar")
    assert len(ShardDataset(pattern)) == 15
    assert len(ShardDataset(pattern, batch_size=4)) == 4
    subset = ShardDataset(str(tmp_path / "s-{000..001}.tar"))  # not exactly its shards
    assert subset.infos is None
    with pytest.raises(TypeError, match="needs a manifest"):
        len(subset)


def test_local_shards_that_do_not_exist_fail_when_the_dataset_is_built(tmp_path):
    make_shards(tmp_path, [2, 2, 2])
    past_the_end = str(tmp_path / "s-{000..004}.tar")
    with pytest.raises(SourceError) as info:
        ShardDataset(past_the_end)
    assert str(info.value) == (f"{tmp_path}/s-003.tar: no such shard (2 of 5 shards do not exist)")
    assert info.value.reason == SourceError.MISSING
    with pytest.raises(
        SourceError, match="s-00l.tar: no such shard \\(1 of 1 shards do not exist\\)$"
    ):
        ShardDataset(str(tmp_path / "s-00l.tar"), handler="skip")


def test_a_local_glob_names_the_shards_it_matches_sorted_as_the_shell_would(tmp_path):
    paths, manifest = make_shards(tmp_path / "wds", [2, 3, 1])
    (tmp_path / "wds" / "s-000.tar.idx").write_bytes(b"not matched")
    dataset = ShardDataset(str(tmp_path / "wds" / "s-*.tar"))
    assert dataset.urls == paths and len(dataset) == 6  # the manifest beside: exactly them
    assert keys_of(dataset) == list(all_keys([2, 3, 1]))
    with pytest.raises(SourceError) as info:
        ShardDataset(str(tmp_path / "wds" / "train-*.tar"))
    assert str(info.value) == f"{tmp_path}/wds/train-*.tar: no shard matches this glob"


def test_a_remote_glob_is_refused_with_the_brace_form_to_write_instead():
    with pytest.raises(UsageError) as info:
        ShardDataset("s3://bucket/wds/data-*.tar")
    assert str(info.value) == (
        "s3://bucket/wds/data-*.tar: a glob names local shards only (a remote listing is "
        "slow, and can differ between ranks): name remote shards as a brace range, such as "
        "s3://bucket/wds/data-{000000..000099}.tar, or by their manifest"
    )
    # a query string is no glob
    assert ShardDataset("https://example.com/s-000.tar?sig=a*b").urls[0].endswith("?sig=a*b")


@pytest.mark.parametrize(
    "written,meant",
    [("s-{0..2}.tar", "s-{000..002}.tar"), ("s-{00..02}.tar", "s-{000..002}.tar")],
)
def test_a_range_that_names_no_shard_suggests_the_padding_of_the_files(tmp_path, written, meant):
    make_shards(tmp_path, [1, 1, 1])
    with pytest.raises(SourceError) as info:
        ShardDataset(str(tmp_path / written))
    first = str(tmp_path / written).replace("{0..2}", "0").replace("{00..02}", "00")
    assert str(info.value) == (
        f"{first}: no such shard (3 of 3 shards do not exist); did you mean {tmp_path}/{meant}?"
    )
    assert len(ShardDataset(str(tmp_path / meant)).urls) == 3


def test_a_directory_of_images_is_named_with_the_command_that_makes_shards_of_it(tmp_path):
    for name in ("cat/1.jpg", "cat/2.jpg", "dog/1.png"):
        (tmp_path / "photos" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "photos" / name).write_bytes(jpeg(1))
    with pytest.raises(UsageError) as info:
        ShardDataset(str(tmp_path / "photos"))
    assert str(info.value) == (
        f"{tmp_path}/photos: no tar shards in this directory; it holds images (jpg, png): make "
        f"shards of it with tarkit shard {tmp_path}/photos -o 'shards/photos-%06d.tar'"
    )


def test_a_jpeg_given_for_a_shard_is_named_with_the_command_that_makes_shards(tmp_path):
    path = tmp_path / "cat.jpg"
    path.write_bytes(jpeg(1))
    with pytest.raises(InputError) as info:
        list(ShardDataset(str(path)))
    assert str(info.value) == (
        f"{path}: a JPEG image, not a tar archive: make shards of image files with tarkit "
        "shard DIR -o 'shards/shard-%06d.tar' (or tarcreate)"
    )


def test_a_directory_among_the_shards_fails_when_the_dataset_is_built(tmp_path):
    make_shards(tmp_path, [2])
    (tmp_path / "more").mkdir()
    with pytest.raises(SourceError) as info:
        ShardDataset([str(tmp_path / "s-000.tar"), str(tmp_path / "more")])
    assert str(info.value) == f"{tmp_path}/more: is a directory, not a shard; it holds no files"
    assert info.value.reason == SourceError.MISSING


WORKER_ERROR_SCRIPT = """
import sys
import tarkit
for batch in tarkit.loader(sys.argv[1:], batch_size=2, num_workers=2):
    pass
"""


@pytest.mark.parametrize("debug", [False, True])
def test_an_error_in_a_worker_reaches_the_user_as_tarkits_one_line_message(tmp_path, debug):
    paths, _ = make_shards(tmp_path, [4, 4], images=True, bad_jpegs=["s01-002"])
    env = {k: v for k, v in os.environ.items() if k != "TARKIT_DEBUG"}
    if debug:
        env["TARKIT_DEBUG"] = "1"
    script = WORKER_ERROR_SCRIPT.replace("batch_size=2,", "batch_size=2, decode='rgb8',")
    result = subprocess.run(
        [sys.executable, "-c", script, *paths], capture_output=True, text=True, timeout=120,
        env=env,
    )  # fmt: skip
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"tarkit.errors.InputError: {paths[1]}: cannot decode field 'jpg' of sample "
        "'s01-002': UnidentifiedImageError: cannot identify image file <_io.BytesIO object"
    )
    assert last.endswith("> (member s01-002)")
    assert "Caught InputError in DataLoader worker" not in result.stderr
    assert ("in the DataLoader worker:" in result.stderr) == debug
    assert ("tarkit/loading/transforms.py" in result.stderr) == debug


def test_a_batch_that_does_not_stack_names_the_samples_and_their_shapes(tmp_path):
    out = io.BytesIO()
    with TarWriter(out) as writer:
        for i, size in enumerate([(8, 8), (8, 8), (9, 8)]):
            image = io.BytesIO()
            Image.new("RGB", size).save(image, format="PNG")
            writer.add(f"k{i}.png", image.getvalue())
            writer.add(f"k{i}.cls", b"1")
    (tmp_path / "s.tar").write_bytes(out.getvalue())
    dataset = ShardDataset(str(tmp_path / "s.tar"), decode="torchrgb", to_tuple="png cls",
                           batch_size=3)  # fmt: skip
    with pytest.raises(InputError) as info:
        list(dataset)
    assert str(info.value) == (
        f"{tmp_path}/s.tar: cannot batch field 0: sample 'k2' has shape (3, 8, 9), sample "
        f"'k0' ({tmp_path}/s.tar) has (3, 8, 8); fields of a batch must have one shape: give "
        "images one size (tarkit shard --resize 256x256:crop, or a map= that resizes) or "
        "pass collate= (member k2)"
    )


# -- order -----------------------------------------------------------------------------


def test_order_is_reproducible_and_differs_between_epochs(shards):
    paths, _, _ = shards

    def order(epoch: int) -> list[str]:
        dataset = ShardDataset(paths, shuffle=6, seed=3, rank=0, world_size=1)
        dataset.set_epoch(epoch)
        return keys_of(dataset)

    assert order(0) == order(0)
    assert len({tuple(order(e)) for e in range(4)}) == 4


ORDER_SCRIPT = """
import sys
from torch.utils.data import DataLoader
from tarkit import ShardDataset

dataset = ShardDataset(sys.argv[1:], shuffle=6, seed=2)
dataset.set_epoch(1)
print(" ".join(sample["__key__"] for sample in dataset))
loader = DataLoader(dataset, batch_size=None, num_workers=2)
print(" ".join(sample["__key__"] for sample in loader))
"""


def test_order_does_not_depend_on_pythonhashseed(shards):
    paths, _, _ = shards
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", ORDER_SCRIPT, *paths],
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONHASHSEED=seed),
        )
        for seed in ("1", "4242")
    ]
    try:
        outputs = [run.communicate(timeout=60)[0] for run in runs]
    finally:
        for run in runs:
            run.kill()  # only if it is still running
    assert [run.returncode for run in runs] == [0, 0]
    dataset = ShardDataset(paths, shuffle=6, seed=2)
    dataset.set_epoch(1)
    alone = " ".join(keys_of(dataset))
    with_workers = " ".join(keys_of(DataLoader(dataset, batch_size=None, num_workers=2)))
    assert alone != with_workers  # two workers shuffle their own shares
    assert outputs == [f"{alone}\n{with_workers}\n"] * 2


@pytest.mark.parametrize("persistent", [True, False])
def test_set_epoch_reaches_the_workers(shards, persistent):
    paths, _, _ = shards
    dataset = ShardDataset(paths, shuffle=5, batch_size=2)
    loader = DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=persistent)
    epochs = []
    for epoch in range(3):
        dataset.set_epoch(epoch)
        epochs.append(keys_of(loader))
    assert len({tuple(e) for e in epochs}) == 3
    fresh = ShardDataset(paths, shuffle=5, batch_size=2)
    fresh.set_epoch(2)
    assert keys_of(DataLoader(fresh, batch_size=None, num_workers=2)) == epochs[2]


def test_shuffle_true_is_a_buffer_of_1000_samples_and_false_keeps_the_order(tmp_path):
    paths, _ = make_shards(tmp_path, [400, 400, 400])

    def order(shuffle: object) -> list[str]:
        return keys_of(ShardDataset(paths, shuffle=shuffle, seed=1))

    assert ShardDataset(paths, shuffle=True).shuffle == 1000
    assert order(True) == order(1000) != order(1)  # not the 1-sample buffer int(True) was
    assert order(False) == sorted(all_keys([400, 400, 400]))
    for bad in (-1, 0.5, "yes"):
        with pytest.raises(UsageError, match=r"shuffle must be True, False or a buffer size"):
            ShardDataset(paths, shuffle=bad)


def test_dataset_pickles_with_its_epoch(shards):
    paths, _, _ = shards
    dataset = ShardDataset(paths, shuffle=4)
    dataset.set_epoch(5)
    copy = pickle.loads(pickle.dumps(dataset))
    assert copy.epoch == 5 and keys_of(copy) == keys_of(dataset)


# -- bad input -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jpeg_shards(tmp_path_factory) -> tuple[list[str], list[int]]:
    counts = [4, 4, 4]
    paths, _ = make_shards(
        tmp_path_factory.mktemp("jpegs"), counts, images=True, bad_jpegs=["s00-002", "s02-001"]
    )
    return paths, counts


def test_corrupt_jpeg_raises_naming_shard_key_and_cause(jpeg_shards):
    paths, _ = jpeg_shards
    with pytest.raises(InputError) as caught:
        list(ShardDataset(paths, decode="rgb8"))
    message = str(caught.value)
    assert paths[0] in message and "'s00-002'" in message and "'jpg'" in message
    assert "UnidentifiedImageError" in message


def test_corrupt_jpegs_are_skipped_and_counted_over_workers(jpeg_shards):
    paths, counts = jpeg_shards
    dataset = ShardDataset(paths, decode="rgb8", to_tuple="jpg cls", handler="skip", batch_size=2)
    batches = list(DataLoader(dataset, batch_size=None, num_workers=2))
    labels = sorted(torch.cat([b[1] for b in batches]).tolist())
    assert labels == sorted(
        {0, 1, 2, 3, 1000, 1001, 1002, 1003, 2000, 2001, 2002, 2003} - {2, 2001}
    )
    skipped = dataset.skipped
    assert skipped.samples == {UNDECODABLE: 2} and skipped.shards == {}
    assert "s00-002" in skipped.examples[UNDECODABLE] or "s02-001" in skipped.examples[UNDECODABLE]
    dataset.set_epoch(1)
    assert not dataset.skipped


def test_skipping_in_two_workers_warns_once_per_epoch_on_stderr(worker_warnings):
    skipped = worker_warnings["skipped"]
    assert skipped.count("UserWarning: tarkit: skipping bad input") == 2
    assert skipped.count("tarkit:") == 2


def test_skipping_warns_and_never_sleeps(jpeg_shards, monkeypatch):
    import time

    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"slept {seconds} s")

    monkeypatch.setattr(time, "sleep", no_sleep)
    paths, _ = jpeg_shards
    dataset = ShardDataset(paths, decode="rgb8", handler="skip")
    with pytest.warns(UserWarning, match="ShardDataset.skipped"):
        assert len(list(dataset)) == 10


def test_a_directory_means_its_manifest_or_else_its_shards(tmp_path):
    paths, manifest = make_shards(tmp_path, [2, 3])
    assert len(ShardDataset(str(tmp_path))) == 5
    os.unlink(manifest)
    dataset = ShardDataset(str(tmp_path))
    assert dataset.urls == paths and keys_of(dataset) == list(all_keys([2, 3]))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no tar shards"):
        ShardDataset(str(tmp_path / "empty"))


def test_missing_field_for_to_tuple_is_named_or_skipped(shards):
    paths, _, _ = shards
    with pytest.raises(InputError, match="lacks a field for to_tuple"):
        list(ShardDataset(paths, to_tuple="jpg cls"))
    dataset = ShardDataset(paths[:1], to_tuple="jpg cls", handler="skip")
    with pytest.warns(UserWarning):
        assert list(dataset) == []
    assert dataset.skipped.samples == {MISSING: 5}


def truncate_shard(path: str, key: str, *, inside: bool) -> None:
    """Cut a shard inside the first member of ``key`` (or just before it)."""
    data = Path(path).read_bytes()
    name = f"{key}.cls".encode()
    at = data.index(name)
    Path(path).write_bytes(data[: at + 520] if inside else data[:at])


@pytest.mark.parametrize("inside", [True, False])
def test_truncated_shard_raises_or_skips_its_rest_with_exact_counts(tmp_path, inside):
    counts = [5, 6, 4]
    paths, manifest = make_shards(tmp_path, counts)
    truncate_shard(paths[1], "s01-003", inside=inside)
    with pytest.raises(TruncatedError, match=paths[1]):
        list(ShardDataset(paths, manifest=False))
    with pytest.raises(TruncatedError, match=paths[1]):  # not taken for a decoding error
        list(ShardDataset(paths, decode=[], to_tuple="cls", manifest=False))
    # Cut inside 003's data: 000-002 come out, since 003's header (another key) ends 002.
    # Cut at 003's header: 002 is lost too, because its end cannot be confirmed.
    first_lost = 3 if inside else 2
    expected = all_keys(counts) - Counter(f"s01-{i:03d}" for i in range(first_lost, 6))
    dataset = ShardDataset(paths, handler="skip", manifest=False)
    with pytest.warns(UserWarning, match="skipping bad input"):
        assert Counter(keys_of(dataset)) == expected
    assert dataset.skipped.shards == {TRUNCATED: 1}
    assert dataset.skipped.samples == {TRUNCATED: 1}
    with_manifest = ShardDataset(manifest, handler="skip", batch_size=2)
    got = keys_of(DataLoader(with_manifest, batch_size=None, num_workers=2))  # warns in a worker
    assert Counter(got) == expected
    assert with_manifest.skipped.samples == {TRUNCATED: 6 - first_lost}


def test_a_shard_missing_its_end_of_archive_marker_is_not_complete(tmp_path):
    paths, _ = make_shards(tmp_path, [3])
    Path(paths[0]).write_bytes(Path(paths[0]).read_bytes()[:-1024])
    with pytest.raises(TruncatedError, match="without the end-of-archive marker"):
        list(ShardDataset(paths))
    dataset = ShardDataset(paths, handler="skip")
    with pytest.warns(UserWarning):
        assert keys_of(dataset) == ["s00-000", "s00-001"]
    assert dataset.skipped.samples == {TRUNCATED: 1}


def test_equal_batches_stay_equal_when_samples_are_skipped(tmp_path):
    paths, manifest = make_shards(tmp_path, [4, 4], images=True, bad_jpegs=["s00-001"])
    counts = []
    for rank in (0, 1):
        dataset = ShardDataset(
            manifest,
            decode="rgb8",
            handler="skip",
            equal_batches=True,
            batch_size=2,
            rank=rank,
            world_size=2,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            counts.append([len(b["__key__"]) for b in dataset])
        if rank == 0:
            assert dataset.skipped.repeated == 1
    assert counts == [[2, 2], [2, 2]]


def test_unreadable_and_corrupt_shards(tmp_path):
    paths, _ = make_shards(tmp_path, [2, 2])
    Path(paths[1]).write_bytes(b"x" * 2048)
    failing = f"pipe:cat {tmp_path}/missing.tar"
    with pytest.raises(SourceError, match="missing.tar: command exited with status 1"):
        list(ShardDataset([paths[0], failing]))
    dataset = ShardDataset([paths[0], failing, paths[1]], handler="skip")
    with pytest.warns(UserWarning):
        assert keys_of(dataset) == ["s00-000", "s00-001"]
    assert dataset.skipped.shards == {UNREADABLE: 1, CORRUPT: 1}


def test_a_manifest_that_does_not_match_the_shard_is_an_error(tmp_path):
    import json

    paths, manifest = make_shards(tmp_path, [3, 3])
    original = json.loads(Path(manifest).read_text())

    def read_with(change) -> list[object]:
        data = json.loads(json.dumps(original))
        change(data["shards"][0])
        Path(manifest).write_text(json.dumps(data))
        return list(ShardDataset(manifest))

    with pytest.raises(InputError, match="sample 1 is 's00-001', the manifest says 'zzz'"):
        read_with(lambda shard: shard["keys"].__setitem__(1, "zzz"))

    def fewer(shard):
        shard.update(samples=2, keys=shard["keys"][:2], offsets=shard["offsets"][:2])

    with pytest.raises(InputError, match="more samples than the 2 the manifest says"):
        read_with(fewer)

    def more(shard):
        shard.update(samples=4, keys=None, offsets=None)

    with pytest.raises(InputError, match="the shard has 3 samples, the manifest says 4"):
        read_with(more)
    with pytest.raises(InputError, match="lists 2 keys or offsets for 3 samples"):
        read_with(lambda shard: shard["offsets"].pop())


# -- sources ---------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[ShardServer]:
    s = ShardServer()
    yield s
    s.stop()


def serve(server: ShardServer, paths: list[str], manifest: str) -> str:
    for path in paths:
        server.files[f"/d/{os.path.basename(path)}"] = Path(path).read_bytes()
    server.files["/d/manifest.json"] = Path(manifest).read_bytes()
    return f"{server.url}/d/manifest.json"


def test_http_shards_are_read_with_byte_ranges_for_pieces(tmp_path, server):
    paths, manifest = make_shards(tmp_path, [7, 2])
    url = serve(server, paths, manifest)
    loader = tarkit.loader(url, batch_size=2, num_workers=3)
    assert Counter(keys_of(loader)) == all_keys([7, 2])
    assert server.ranges and all(start > 0 for _, start in server.ranges)


def test_a_server_that_ignores_ranges_still_gives_each_sample_once(tmp_path, server):
    paths, manifest = make_shards(tmp_path, [7, 2])
    server.honour_ranges = False
    url = serve(server, paths, manifest)
    loader = DataLoader(ShardDataset(url), batch_size=None, num_workers=3)
    assert Counter(keys_of(loader)) == all_keys([7, 2]) and not server.ranges


def test_cache_downloads_each_shard_once_for_all_workers(tmp_path, server):
    paths, manifest = make_shards(tmp_path / "src", [7, 5])
    url = serve(server, paths, manifest)
    cache = tmp_path / "cache"
    loader = tarkit.loader(
        url,
        batch_size=2,
        num_workers=3,
        cache_dir=str(cache),
        cache_size="1M",
        persistent_workers=True,
    )
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        assert Counter(keys_of(loader)) == all_keys([7, 5])
    assert server.hits["/d/s-000.tar"] == server.hits["/d/s-001.tar"] == 1
    assert sorted(p.name.split("-", 1)[1] for p in cache.glob("*.tar")) == [
        "s-000.tar",
        "s-001.tar",
    ]


def test_pipe_urls_are_read(shards):
    paths, _, counts = shards
    assert Counter(keys_of(ShardDataset([f"pipe:cat {p}" for p in paths]))) == all_keys(counts)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_s3_shards_through_fsspec_from_a_moto_server(tmp_path, monkeypatch):
    from moto.server import ThreadedMotoServer

    port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    moto.start()
    try:
        for name, value in {
            "FSSPEC_S3_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
        }.items():
            monkeypatch.setenv(name, value)
        import fsspec

        fsspec.config.set_conf_env(fsspec.config.conf)
        s3 = fsspec.filesystem("s3", skip_instance_cache=True)
        s3.mkdir("shards")
        paths, _ = make_shards(tmp_path, [3, 4])
        for path in paths:
            s3.put(path, f"shards/{os.path.basename(path)}")
        dataset = ShardDataset("s3://shards/s-{000..001}.tar", batch_size=2)
        assert Counter(keys_of(DataLoader(dataset, batch_size=None, num_workers=2))) == all_keys(
            [3, 4]
        )
    finally:
        moto.stop()
        fsspec.config.conf.pop("s3", None)


# -- torch.distributed -----------------------------------------------------------------


def _distributed_rank(rank: int, port: int, manifest: str, out: str) -> None:
    torch.distributed.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=2,
        timeout=datetime.timedelta(seconds=60),
    )
    dataset = ShardDataset(manifest, equal_batches=True, batch_size=3, shuffle=4)
    # A process started by spawn would spawn its workers too (slow); torchrun's fork them.
    loader = DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context="fork")
    batches = list(loader)
    keys = keys_of(batches)
    gathered: list[object] = [None, None]
    torch.distributed.all_gather_object(gathered, (len(batches), len(loader), keys))
    if rank == 0:
        Path(out).write_text(repr(gathered))
    torch.distributed.destroy_process_group()


def test_a_real_two_process_gloo_group_gets_equal_batches_and_every_sample_once(tmp_path):
    counts = [5, 3, 7, 4]  # 19 samples: 9 per rank, one dropped
    _, manifest = make_shards(tmp_path / "shards", counts)
    out = tmp_path / "result.txt"
    context = torch.multiprocessing.start_processes(
        _distributed_rank,
        args=(free_port(), manifest, str(out)),
        nprocs=2,
        join=False,
        start_method="spawn",
    )
    deadline = datetime.datetime.now() + datetime.timedelta(seconds=90)
    while not context.join(timeout=0.2):
        assert datetime.datetime.now() < deadline, "the gloo group did not finish"
    (batches0, length0, keys0), (batches1, length1, keys1) = eval(out.read_text())
    assert batches0 == batches1 == length0 == length1 == 3
    assert len(keys0) == len(keys1) == 9
    read = Counter(keys0 + keys1)
    assert max(read.values()) == 1 and len(read) == 18 and set(read) <= set(all_keys(counts))
