"""Epochs advance by themselves: every new pass reads the next epoch's order, each
exactly once, with 0 or more real DataLoader workers, persistent or not, forked or
spawned; set_epoch pins one."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from loader_data import all_keys, keys_of, make_shards
from torch.utils.data import DataLoader

from tarkit.loading import ShardDataset

COUNTS = [5, 3, 7, 1, 4, 6]
pytestmark = pytest.mark.filterwarnings(
    "ignore:.* some workers have nothing to read", "ignore:This DataLoader will create"
)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_shards(tmp_path_factory.mktemp("epochs"), COUNTS)[1]


def dataset(manifest: str) -> ShardDataset:
    return ShardDataset(manifest, shuffle=4, seed=7, batch_size=3, rank=0, world_size=1)


def pinned(manifest: str, epoch: int, **loader: object) -> list[str]:
    """The keys of epoch ``epoch`` read by a fresh dataset pinned with set_epoch."""
    fresh = dataset(manifest)
    fresh.set_epoch(epoch)
    return keys_of(DataLoader(fresh, batch_size=None, **loader))


@pytest.mark.parametrize(
    "loader",
    [
        {"num_workers": 0},
        {"num_workers": 2},
        {"num_workers": 2, "persistent_workers": True},
        {"num_workers": 3, "persistent_workers": True, "prefetch_factor": 1},
    ],
    ids=["main process", "2 workers", "2 persistent workers", "3 persistent workers"],
)
def test_each_pass_reads_the_next_epoch_exactly_once_without_set_epoch(
    manifest: str, loader: dict
) -> None:
    data = dataset(manifest)
    passes = DataLoader(data, batch_size=None, **loader)
    orders = []
    for epoch in range(3):
        keys = keys_of(passes)
        assert Counter(keys) == all_keys(COUNTS)
        assert data.epoch == epoch
        assert keys == pinned(manifest, epoch, **loader)
        orders.append(keys)
    assert len({tuple(order) for order in orders}) == 3


def test_a_dataset_iterated_by_hand_advances_too(manifest: str) -> None:
    data = dataset(manifest)
    first, second = keys_of(data), keys_of(data)
    assert first != second
    assert first == pinned(manifest, 0) and second == pinned(manifest, 1)


def test_set_epoch_pins_the_next_pass_and_the_ones_after_follow_it(manifest: str) -> None:
    data = dataset(manifest)
    loader = DataLoader(data, batch_size=None, num_workers=2, persistent_workers=True)
    keys_of(loader)
    data.set_epoch(5)
    assert data.epoch == 5
    assert keys_of(loader) == pinned(manifest, 5, num_workers=2)
    assert keys_of(loader) == pinned(manifest, 6, num_workers=2)
    data.set_epoch(5)
    assert keys_of(loader) == pinned(manifest, 5, num_workers=2)


def test_a_dataloader_rebuilt_every_epoch_with_a_fixed_generator_still_advances(
    manifest: str,
) -> None:
    # The same base seed every epoch: the workers still tell a new pass from the old one.
    data = dataset(manifest)
    orders = []
    for _ in range(3):
        generator = torch.Generator().manual_seed(1234)
        orders.append(
            keys_of(DataLoader(data, batch_size=None, num_workers=2, generator=generator))
        )
    assert [o == pinned(manifest, e, num_workers=2) for e, o in enumerate(orders)] == [True] * 3


def test_changing_the_number_of_workers_between_passes_keeps_advancing(manifest: str) -> None:
    data = dataset(manifest)
    for epoch, workers in enumerate([2, 3, 0, 1]):
        keys = keys_of(DataLoader(data, batch_size=None, num_workers=workers))
        assert keys == pinned(manifest, epoch, num_workers=workers)


def test_spawned_workers_agree_on_each_pass_epoch(manifest: str) -> None:
    data = dataset(manifest)
    loader = DataLoader(data, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    first, second = keys_of(loader), keys_of(loader)
    assert Counter(first) == Counter(second) == all_keys(COUNTS)
    assert first != second
    assert (first, second) == (
        pinned(manifest, 0, num_workers=2, multiprocessing_context="spawn"),
        pinned(manifest, 1, num_workers=2, multiprocessing_context="spawn"),
    )


@pytest.mark.filterwarnings("ignore:tarkit. skipping bad input")
def test_skip_counts_are_those_of_the_last_epoch(tmp_path: Path) -> None:
    paths, _ = make_shards(tmp_path, [4, 4], images=True, bad_jpegs=["s00-001"])
    data = ShardDataset(paths, decode="rgb8", to_tuple="jpg cls", handler="skip")
    for _ in range(2):
        assert len(list(DataLoader(data, batch_size=None, num_workers=2))) == 7
        assert data.skipped.total_samples == 1
