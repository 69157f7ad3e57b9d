"""Batches from the workers of tarkit.loader through reused shared memory: the same
batches as torch's own way, slots that are never overwritten while a batch (or one of its
tensors) is held, persistent workers, and a worker that dies."""

from __future__ import annotations

import gc
import multiprocessing
import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import assert_gone
from loader_data import make_shards, piped, same, through_a_pipe
from torch.utils.data import DataLoader

import tarkit
from tarkit.loading import ShardDataset, arrivals
from tarkit.loading.arrivals import unpacked
from tarkit.loading.epoch_layout import WorkerPosition
from tarkit.loading.handoff import Delivery
from tarkit.loading.transport import SLOTS, BatchPool

COUNTS = [9, 4, 12, 1, 7, 10, 6]  # 49 samples
DECODED = {"decode": "rgb8", "to_tuple": "jpg cls"}
SHUFFLED = {"shuffle": 5, "seed": 3}
pytestmark = pytest.mark.filterwarnings(
    "ignore:.* some workers have nothing to read", "ignore:This DataLoader will create"
)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_shards(tmp_path_factory.mktemp("transport"), COUNTS, images=True)[1]


def torch_way(manifest: str, batch_size: int = 4, **options: Any) -> list[Any]:
    """The batches of a plain DataLoader over the same dataset: torch's default_collate
    into new shared memory, as before the pool."""
    dataset = ShardDataset(manifest, batch_size=batch_size, **options)
    return list(DataLoader(dataset, batch_size=None, num_workers=2))


@pytest.mark.parametrize("options", [DECODED, {}], ids=["decoded", "bytes"])
def test_batches_from_the_pool_equal_torchs_own_batch_for_batch(manifest, options):
    loader = tarkit.loader(manifest, 4, 2, **SHUFFLED, **options)
    got = list(loader)
    expected = torch_way(manifest, **SHUFFLED, **options)
    assert len(got) == len(expected) == 13
    assert all(same(a, b) for a, b in zip(got, expected, strict=True))


def test_the_tensors_of_a_batch_arrive_side_by_side_in_one_shared_buffer(manifest):
    for images, labels in tarkit.loader(manifest, 4, 1, **DECODED):
        aligned = -(-images.nbytes // 64) * 64  # torch's way: two separate mappings
        assert labels.data_ptr() - images.data_ptr() == aligned


def test_a_consumer_that_keeps_every_batch_sees_each_unchanged(manifest):
    expected = torch_way(manifest, 2, **SHUFFLED, **DECODED)
    loader = tarkit.loader(manifest, 2, 2, **SHUFFLED, **DECODED)
    kept = list(loader)  # 25 batches, more than the slots of both workers
    assert len(kept) > 2 * SLOTS
    assert len(kept) == len(expected) == 25
    assert all(same(a, b) for a, b in zip(kept, expected, strict=True))


def test_a_kept_tensor_holds_its_slot_until_it_is_freed():
    pool = BatchPool()
    collate = pool.collator(None)
    first = [(np.full((2, 2), i, np.uint8), i) for i in range(3)]
    images, labels = unpacked(through_a_pipe(collate(first)))
    assert pool.busy.tolist()[0] == 1
    del labels
    kept = images[1]  # a view keeps the batch's memory
    del images
    second = unpacked(through_a_pipe(collate([(np.zeros((2, 2), np.uint8), 9)] * 3)))
    assert pool.busy.tolist()[:2] == [1, 1]  # the second batch went to a new slot
    assert kept.tolist() == [[1, 1], [1, 1]]
    del kept, second
    assert pool.busy.tolist()[:2] == [0, 0]


def test_a_batch_unpacked_and_copied_in_another_thread_frees_its_slot():
    """What ``pin_memory`` does (torch's pinning thread): unpack, copy, drop."""
    pool = BatchPool()
    received = through_a_pipe(Delivery(
        pool.collator(None)([(np.ones(4, np.float32), 1)] * 2), 0, 0, 0, WorkerPosition()
    ))  # fmt: skip
    copies: list[Any] = []

    def pin(delivery: Delivery) -> None:
        copies.append(unpacked(delivery.item)[0].clone())

    thread = threading.Thread(target=pin, args=(received,))
    thread.start()
    thread.join()
    del received
    assert pool.busy.tolist()[0] == 0
    assert copies[0].tolist() == [[1.0] * 4] * 2


@pytest.mark.skipif(not torch.accelerator.is_available(), reason="pinning needs a device")
def test_pinned_batches_equal_torchs_own(manifest):
    loader = tarkit.loader(manifest, 4, 2, pin_memory=True, **SHUFFLED, **DECODED)
    got = list(loader)
    assert all(images.is_pinned() for images, _ in got)
    expected = torch_way(manifest, **SHUFFLED, **DECODED)
    assert all(same(a, b) for a, b in zip(got, expected, strict=True))


def test_persistent_workers_give_the_same_batches_each_epoch_while_earlier_ones_are_kept(
    manifest,
):
    expected = torch_way(manifest, 2, **DECODED)  # no shuffle: every epoch the same
    loader = tarkit.loader(manifest, 2, 2, persistent_workers=True, **DECODED)
    epochs = [list(loader) for _ in range(3)]  # each kept while the next one runs
    for batches in epochs:
        assert len(batches) == len(expected) == 25
        assert all(same(a, b) for a, b in zip(batches, expected, strict=True))


def test_a_killed_worker_raises_torchs_error_and_received_batches_stay_intact(manifest):
    expected = list(tarkit.loader(manifest, 2, 2, **DECODED))
    iterator = iter(tarkit.loader(manifest, 2, 2, **DECODED))
    kept = [next(iterator) for _ in range(4)]
    workers = multiprocessing.active_children()
    assert len(workers) == 2
    # torch's errors, as without the pool: a worker found dead, or (rarely) killed while
    # handing over a file descriptor
    with pytest.raises((RuntimeError, ConnectionResetError)) as error:
        # Torch's SIGCHLD handler is set aside while both die (blocking the signal would
        # not do: other threads would take it), so it cannot run for one of them later,
        # outside this block; torch finds them dead when it next waits for a batch.
        handler = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        try:
            for worker in workers:
                os.kill(worker.pid, signal.SIGKILL)  # type: ignore[arg-type]
            for worker in workers:
                assert_gone(worker.pid)  # type: ignore[arg-type]  (left for torch to reap)
        finally:
            signal.signal(signal.SIGCHLD, handler)
        for _ in range(len(expected)):
            kept.append(next(iterator))
    assert error.type is ConnectionResetError or str(error.value).startswith(
        "DataLoader worker (pid"
    )
    assert all(same(a, b) for a, b in zip(kept, expected, strict=False))
    del error, iterator  # the error's frames hold torch's iterator
    gc.collect()
    assert not multiprocessing.active_children()


def test_batches_of_bytes_come_through_the_workers_pools_which_are_forgotten_at_the_end(
    manifest,
):
    before = set(arrivals._POOLS)
    expected = torch_way(manifest, **SHUFFLED)
    iterator = iter(tarkit.loader(manifest, 4, 2, **SHUFFLED))  # bytes only
    got = [next(iterator) for _ in range(3)]
    pools = set(arrivals._POOLS) - before
    assert len(pools) == 2  # each worker's bundles came through its slots, not the pipe
    got += list(iterator)
    assert all(same(a, b) for a, b in zip(got, expected, strict=True))
    del iterator
    gc.collect()
    assert not pools & set(arrivals._POOLS)


def test_a_batchs_bytes_travel_in_its_slot_beside_its_tensors_not_through_the_pipe():
    pool = BatchPool()
    collate = pool.collator(None)
    samples = [(bytes([i]) * 50_000, i) for i in range(8)]
    sizes = []
    for _ in range(3):  # the first batch's slot was sized for its tensors alone
        packed = collate(samples)
        sizes.append(len(piped(packed)))
        jpegs, labels = unpacked(through_a_pipe(packed))
        assert list(jpegs) == [s[0] for s in samples] and labels.tolist() == list(range(8))
    assert sizes[0] > 400_000 and max(sizes[1:]) < 1000  # 400 KB of JPEG-like bytes


def test_values_shipped_larger_than_the_last_still_arrive_whole():
    pool = BatchPool()
    values = [[b"a" * 10], [b"b" * 100_000], [b"c" * 5], [b"d" * 3_000_000]]
    for value in values:
        shipped = pool.ship(value)
        assert type(shipped).__name__ == "Shipped" and len(piped(shipped)) < 1000
        assert through_a_pipe(shipped) == value
    assert not pool.busy.any()


def test_the_pools_of_workers_that_are_gone_are_forgotten_those_unused_too(tmp_path):
    # Two shards without a manifest, four workers: two of them read nothing and hand no
    # batch over, yet announce their pools; and a pass left early leaves batches untaken.
    bare = tmp_path / "bare"
    bare.mkdir()
    two = []
    for path in make_shards(tmp_path, [200, 200])[0]:  # (without the manifest beside them)
        two.append(str(bare / Path(path).name))
        shutil.copy(path, two[-1])
    before = set(arrivals._POOLS)
    loader = tarkit.loader(two, 8, 4)  # bytes only, workers anew each pass
    for _ in range(3):
        next(iter(loader))
        assert len(list(loader)) == 50
    gc.collect()
    assert len(set(arrivals._POOLS) - before) <= 4  # the last pass's, at most
