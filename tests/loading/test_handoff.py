"""Hand-over from workers in bundles: batches without tensors travel several to an item,
and the main process puts them back in the order torch gives single items, so batches,
order and state are unchanged; the first batch is never held back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from loader_data import make_shards, same, through_a_pipe
from torch.utils.data import DataLoader

import tarkit
from tarkit.errors import InputError
from tarkit.loading import ShardDataset
from tarkit.loading.arrivals import Shipped
from tarkit.loading.epoch_layout import WorkerPosition
from tarkit.loading.handoff import (
    BUNDLE,
    BUNDLE_BYTES,
    Bundle,
    Interleaved,
    WorkerError,
    handed_over,
)
from tarkit.loading.transport import BatchPool

pytestmark = pytest.mark.filterwarnings(
    "ignore:.* some workers have nothing to read", "ignore:This DataLoader will create"
)


def round_robin(sequences: list[list[Any]]) -> list[Any]:
    """Items one at a time as torch gives them: in turn, each worker out after its last."""
    out: list[Any] = []
    positions = [0] * len(sequences)
    active = [w for w, items in enumerate(sequences) if items]
    while active:
        for worker in list(active):
            out.append(sequences[worker][positions[worker]])
            positions[worker] += 1
            if positions[worker] == len(sequences[worker]):
                active.remove(worker)
    return out


def torch_order(bundles: list[list[Bundle]]) -> list[Bundle]:
    """The bundles as torch hands them over: each bundle is one item (the last, maybe
    empty, marks a worker's end)."""
    return round_robin(bundles)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 30), min_size=1, max_size=4).flatmap(
        lambda counts: st.tuples(
            st.just(counts),
            st.lists(st.integers(1, 9), min_size=sum(counts) + 4, max_size=sum(counts) + 4),
        )
    )
)
def test_bundles_of_any_sizes_come_out_in_the_order_of_single_items(case) -> None:
    counts, sizes = case
    sequences = [[(w, i) for i in range(n)] for w, n in enumerate(counts)]
    cuts = iter(sizes)
    bundles: list[list[Bundle]] = []
    for worker, items in enumerate(sequences):
        mine, start = [], 0
        while start < len(items):
            size = next(cuts)
            mine.append(Bundle(items[start : start + size], worker))
            start += size
        if mine and not next(cuts) % 2:
            mine[-1].last = True  # the end said by the last bundle of batches…
        else:
            mine.append(Bundle([], worker, last=True))  # …or by an empty one after it
        bundles.append(mine)
    got = list(Interleaved(iter(torch_order(bundles)), len(counts)))
    assert got == round_robin(sequences)


class _Run:
    worker = 1

    def __init__(self) -> None:
        self.taken = 0

    def snapshot(self) -> WorkerPosition:
        return WorkerPosition()


def test_a_worker_bundles_batches_without_tensors_and_never_holds_back_the_first() -> None:
    run = _Run()

    def items() -> Iterator[Any]:
        for i in range(40):
            run.taken = i + 1
            yield {"__key__": [f"k{i}"], "txt": [b"x"]}
        yield {"__key__": ["t"], "x": torch.zeros(2)}  # a tensor: alone
        run.taken += 1

    sizes, taken_at = [], []
    for bundle in handed_over(items(), run, epoch=0, generation=0):
        sizes.append(len(bundle.deliveries))
        taken_at.append(run.taken)
    assert sizes == [1, 2, 4, 8, 16, 9, 1, 0]  # the last: the end, empty
    assert taken_at[0] == 1  # the first batch went out as soon as it was read
    assert BUNDLE == 32


def test_a_workers_bundles_are_shipped_through_its_pool_and_shrink_to_the_byte_bound() -> None:
    pool = BatchPool()
    batch = BUNDLE_BYTES // 4 + 1000  # bytes of one batch: four make a bundle past the bound
    items = [{"__key__": [f"k{i}"], "bin": [bytes([i]) * batch]} for i in range(12)]
    shipped = list(handed_over(iter(items), _Run(), epoch=0, generation=0, pool=pool))
    assert [type(item) for item in shipped] == [Shipped] * 5
    assert pool.busy.sum() == 5  # each bundle in a slot of its own while it travels
    bundles = [through_a_pipe(item) for item in shipped]
    assert [len(b.deliveries) for b in bundles] == [1, 2, 4, 3, 2]  # 3 a bundle past the 4
    assert [b.last for b in bundles] == [False] * 4 + [True]
    assert not pool.busy.any()  # each slot free once its bundle was unpickled
    bundles = [through_a_pipe(item) for item in handed_over(iter(items), _Run(), 0, 0, pool=pool)]
    got = [delivery.item for bundle in bundles for delivery in bundle.deliveries]
    assert got == items
    assert {d.pool for b in bundles for d in b.deliveries} == {pool.token}


def test_torchs_own_iterator_is_run_to_its_end_which_stops_its_workers() -> None:
    ended = []

    def items() -> Iterator[Bundle]:
        yield Bundle([1, 2], 0)
        yield Bundle([3], 1, last=True)
        yield Bundle([], 0, last=True)
        ended.append(True)  # torch's iterator ends here: it shuts its workers down

    assert list(Interleaved(items(), 2)) == [1, 3, 2]
    assert ended == [True]


def test_another_error_of_a_worker_comes_after_its_batches_as_torch_raises_it() -> None:
    def items() -> Iterator[Any]:
        yield {"__key__": ["a"]}
        raise ZeroDivisionError("a bug in the user's code")

    bundles = list(handed_over(items(), _Run(), epoch=0, generation=0))
    last = bundles[-1]
    assert [len(b.deliveries) for b in bundles] == [1, 1] and last.last
    assert isinstance(last.deliveries[-1], WorkerError)
    with pytest.raises(ZeroDivisionError, match="Caught ZeroDivisionError in the main process"):
        last.deliveries[-1].reraise()


def test_under_a_timeout_batches_are_handed_over_one_at_a_time(manifest) -> None:
    assert tarkit.loader(manifest, 1, 2, timeout=30).dataset.bundle == 1
    assert tarkit.loader(manifest, 1, 2).dataset.bundle == BUNDLE
    assert len(list(tarkit.loader(manifest, 1, 2, timeout=30, decode=[]))) == 79


def test_an_error_ends_the_last_bundle_after_the_batches_before_it() -> None:
    def items() -> Iterator[Any]:
        yield {"__key__": ["a"]}
        yield {"__key__": ["b"]}
        raise InputError("truncated", source="s.tar")

    bundles = list(handed_over(items(), _Run(), epoch=0, generation=0))
    assert [len(b.deliveries) for b in bundles] == [1, 2]
    assert bundles[-1].last and isinstance(bundles[-1].deliveries[-1], WorkerError)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_shards(tmp_path_factory.mktemp("handoff"), [9, 4, 12, 1, 7, 10, 6, 30])[1]


@pytest.mark.parametrize("workers", [2, 3])
def test_many_small_batches_equal_torchs_own_one_item_at_a_time(manifest, workers) -> None:
    options = {"shuffle": 5, "seed": 3, "decode": []}
    got = list(tarkit.loader(manifest, 1, workers, **options))
    dataset = ShardDataset(manifest, batch_size=1, **options)
    expected = list(DataLoader(dataset, batch_size=None, num_workers=workers))
    assert len(got) == len(expected) == 79  # bundles of up to 8, workers ending unevenly
    assert all(same(a, b) for a, b in zip(got, expected, strict=True))
