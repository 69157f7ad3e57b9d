"""tarkit.BlockSampler: every position once per epoch over ranks, a few blocks at a time,
the same order for the same (seed, epoch), epochs that advance, and states that resume
exactly on the same ranks and elastically on others — alone, through real DataLoader
workers, through torchdata's StatefulDataLoader and in a real two-process gloo group."""

from __future__ import annotations

import itertools
import json
import os
import random
import socket
import subprocess
import sys
import time
import warnings
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, Dataset

from tarkit import BlockSampler
from tarkit.errors import UsageError


class Positions(Dataset):
    """A map-style dataset whose sample ``i`` is ``i``, in shards of the given sizes."""

    def __init__(self, sizes: list[int], *, with_shards: bool = True) -> None:
        self.sizes = list(sizes)
        if with_shards:
            self.shard_sizes = self.sizes

    def __len__(self) -> int:
        return sum(self.sizes)

    def __getitem__(self, index: int) -> int:
        return index


SIZES = [7, 3, 12, 0, 9, 5, 11, 4, 8, 6]  # 65 samples in 10 shards (one empty)


def shard_of(sizes: list[int]) -> list[int]:
    return [shard for shard, size in enumerate(sizes) for _ in range(size)]


def sampler(sizes=SIZES, world: int = 1, rank: int = 0, **options) -> BlockSampler:
    return BlockSampler(Positions(sizes), num_replicas=world, rank=rank, **options)


def roundtrip(state: dict) -> dict:
    return json.loads(json.dumps(state))


def draw(iterator, count: int) -> list[int]:
    return [next(iterator) for _ in range(count)]


# -- every position once, over ranks -----------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 30), max_size=12),
    shards=st.booleans(),
    block_size=st.none() | st.integers(1, 12),
    window=st.integers(1, 5),
    world=st.integers(1, 7),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
    epoch=st.integers(0, 3),
)
def test_every_position_comes_once_per_epoch_over_all_ranks(
    sizes, shards, block_size, window, world, drop_last, shuffle, epoch
):
    dataset = Positions(sizes, with_shards=shards)
    parts = []
    for rank in range(world):
        one = BlockSampler(
            dataset, num_replicas=world, rank=rank, drop_last=drop_last, shuffle=shuffle,
            block_size=block_size, window=window, seed=5,
        )  # fmt: skip
        one.set_epoch(epoch)
        parts.append(list(one))
        assert len(parts[-1]) == len(one)
    counts = Counter(i for part in parts for i in part)
    total = len(dataset)
    assert max(counts.values(), default=1) == 1 and set(counts) <= set(range(total))
    lengths = {len(part) for part in parts}
    assert max(lengths) - min(lengths) <= (0 if drop_last else 1)
    assert total - len(counts) == (total % world if drop_last else 0)
    # Each rank's part is a stretch of the epoch's one order (what one rank would read).
    alone = BlockSampler(
        dataset, num_replicas=1, rank=0, shuffle=shuffle, block_size=block_size,
        window=window, seed=5,
    )  # fmt: skip
    alone.set_epoch(epoch)
    order = list(alone)
    for part in parts:
        start = order.index(part[0]) if part else 0
        assert order[start : start + len(part)] == part


def test_each_rank_reads_from_a_window_of_shards_at_a_time():
    sizes = [50] * 40
    shards = shard_of(sizes)
    for world, window in ((1, 4), (3, 2)):
        for rank in range(world):
            order = list(sampler(sizes, world=world, rank=rank, window=window))
            assert order != sorted(order)  # shuffled
            for start in range(0, len(order) - 32):
                touched = {shards[i] for i in order[start : start + 32]}
                assert len(touched) <= 2 * window  # two windows where one ends
    # Within a window, the shards' samples are mixed, not read one shard after another.
    order = list(sampler(sizes, window=4))
    assert len({shards[i] for i in order[:16]}) == 4


def whole_blocks(order: list[int], bounds: list[int]) -> list[int]:
    """The blocks (by their first position) that ``order`` reads one after another, each
    whole before the next; AssertionError when it mixes blocks."""
    firsts, place = [], 0
    while place < len(order):
        block = max(b for b in range(len(bounds) - 1) if bounds[b] <= order[place])
        size = bounds[block + 1] - bounds[block]
        assert sorted(order[place : place + size]) == [*range(bounds[block], bounds[block + 1])]
        firsts.append(bounds[block])
        place += size
    return firsts


def test_without_shard_sizes_blocks_are_block_size_positions():
    dataset = Positions([2500], with_shards=False)
    order = list(BlockSampler(dataset, num_replicas=1, rank=0, window=1))
    assert sorted(whole_blocks(order, [0, 1000, 2000, 2500])) == [0, 1000, 2000]
    order = list(BlockSampler(dataset, num_replicas=1, rank=0, window=1, block_size=100))
    assert len(whole_blocks(order, [*range(0, 2501, 100)])) == 25


def test_block_size_cuts_large_shards_into_blocks():
    order = list(sampler([400, 10], window=1, block_size=100))
    assert sorted(whole_blocks(order, [0, 100, 200, 300, 400, 410])) == [0, 100, 200, 300, 400]
    assert order != sorted(order)


def test_shuffle_false_gives_the_positions_in_order_in_contiguous_parts():
    parts = [list(sampler(world=3, rank=r, shuffle=False)) for r in range(3)]
    assert parts == [[*range(0, 21)], [*range(21, 43)], [*range(43, 65)]]
    equal = [list(sampler(world=3, rank=r, shuffle=False, drop_last=True)) for r in range(3)]
    assert [len(p) for p in equal] == [21, 21, 21]


# -- reproducible orders and epochs ----------------------------------------------------


def test_the_order_is_a_function_of_seed_and_epoch_only():
    first = sampler(seed=3)
    epochs = [list(first) for _ in range(3)]
    torch.manual_seed(1234)
    random.seed(99)
    again = sampler(seed=3)
    assert [list(again) for _ in range(3)] == epochs
    assert len({tuple(e) for e in epochs}) == 3
    assert list(sampler(seed=4)) != epochs[0]


def test_the_order_of_a_seed_and_epoch_stays_the_same_across_versions():
    # A change here breaks every saved state's resume: torch's randperm or the seeding moved.
    assert list(sampler([4, 3, 5], seed=0, window=2))[:12] == [
        5, 0, 4, 6, 2, 3, 1, 11, 10, 7, 9, 8,
    ]  # fmt: skip


def test_each_iteration_reads_the_next_epoch_and_set_epoch_pins_one():
    reference = sampler()
    epochs = []
    for epoch in range(4):
        reference.set_epoch(epoch)
        epochs.append(list(reference))
    advancing = sampler()
    assert [list(advancing) for _ in range(3)] == epochs[:3]
    assert advancing.epoch == 2
    advancing.set_epoch(1)
    assert advancing.epoch == 2  # the last pass's, until the next one begins
    assert list(advancing) == epochs[1]
    assert list(advancing) == epochs[2]  # the next one without set_epoch follows it
    assert list(advancing) == epochs[3]


def test_an_iterator_begins_its_epoch_at_its_first_index():
    reference = [sampler_epoch_on(1, 0, epoch) for epoch in range(3)]
    one = sampler()
    unread, read = iter(one), iter(one)  # torchdata makes iterators it never reads
    assert list(read) == reference[0] and list(iter(one)) == reference[1]
    later = iter(one)
    one.set_epoch(0)  # as DistributedSampler's, before the first index
    assert list(later) == reference[0]
    del unread


def test_ranks_come_from_rank_and_world_size_when_not_given(monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    found = BlockSampler(Positions(SIZES))
    assert (found.rank, found.world) == (2, 3)
    assert list(found) == list(sampler(world=3, rank=2))
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(UsageError, match="rank 3 is not in a world of size 3"):
        BlockSampler(Positions(SIZES))


@pytest.mark.parametrize(
    "options, message",
    [
        ({"window": 0}, "window must be a positive integer"),
        ({"block_size": 2.5}, "block_size must be a positive integer"),
        ({"shuffle": 1}, "shuffle must be True or False"),
        ({"seed": "1"}, "seed must be an integer"),
        ({"num_replicas": 2, "rank": 2}, "rank 2 is not in a world of size 2"),
    ],
)
def test_malformed_options_are_refused(options, message):
    with pytest.raises(UsageError, match=message):
        BlockSampler(Positions(SIZES), **{"num_replicas": 1, "rank": 0, **options})


@pytest.mark.parametrize(
    "shard_sizes, message",
    [([5, 5], "add up to 10, but its len\\(\\) is 65"), ([70, -5], "must not be negative"),
     ([32.5, 32.5], "sequence of whole numbers")],
)  # fmt: skip
def test_shard_sizes_that_do_not_fit_the_dataset_are_refused(shard_sizes, message):
    dataset = Positions(SIZES)
    dataset.shard_sizes = shard_sizes
    with pytest.raises(UsageError, match=message):
        BlockSampler(dataset, num_replicas=1, rank=0)


def test_a_hundred_million_positions_start_at_once_without_a_list_of_them():
    class Huge:
        def __len__(self) -> int:
            return 100_000_000

        def shard_sizes(self) -> torch.Tensor:
            return torch.full((100_000,), 1000)

    started = time.perf_counter()
    last = BlockSampler(Huge(), num_replicas=4, rank=3)
    assert len(last) == 25_000_000
    head = draw(iter(last), 5000)
    assert time.perf_counter() - started < 5  # lazily: only the windows read are made
    assert len(set(head)) == 5000 and len({i // 1000 for i in head}) <= 16
    assert len(json.dumps(last.state_dict())) < 1000


# -- state: exact and elastic resume ----------------------------------------------------


@pytest.mark.parametrize("world, drop_last", [(1, False), (3, False), (3, True)])
def test_a_restored_sampler_goes_on_exactly_as_the_uninterrupted_one(world, drop_last):
    for rank in range(world):
        whole = sampler(world=world, rank=rank, drop_last=drop_last)
        epochs = [list(whole) for _ in range(2)]
        for cut in (0, 1, 10, len(whole) - 1, len(whole)):
            first = sampler(world=world, rank=rank, drop_last=drop_last)
            taken = draw(iter(first), cut)
            second = sampler(world=world, rank=rank, drop_last=drop_last)
            second.load_state_dict(roundtrip(first.state_dict()))
            assert taken + list(second) == epochs[0], (rank, cut)
            assert list(second) == epochs[1], (rank, cut)


def test_the_state_says_what_it_belongs_to_in_plain_json():
    first = sampler(world=2, rank=1, seed=7, window=3)
    draw(iter(first), 4)
    state = first.state_dict()
    assert roundtrip(state) == state
    assert state["format"] == "tarkit-block-sampler-state"
    assert state["dataset"]["samples"] == 65 and state["dataset"]["blocks"] == 9
    assert state["settings"] == {"seed": 7, "shuffle": True, "window": 3}
    assert state["epoch"] == 0 and state["history"] == []
    assert state["generation"] == {"world": 2, "drop_last": False, "rank": 1, "delivered": 4}


def test_every_rank_resumes_in_step_from_rank_zeros_state():
    world = 3
    wholes = [list(sampler(world=world, rank=r)) for r in range(world)]
    zero = sampler(world=world, rank=0)
    draw(iter(zero), 8)
    state = roundtrip(zero.state_dict())
    for rank in range(world):
        restored = sampler(world=world, rank=rank)
        restored.load_state_dict(state)
        assert list(restored) == wholes[rank][8:]


def test_a_state_taken_at_the_end_covers_the_ranks_with_one_more():
    # 65 over 2 ranks: rank 0 has 32, rank 1 has 33, both ending in their 9th batch of 4.
    zero = sampler(world=2, rank=0)
    assert len(list(zero)) == 32
    state = roundtrip(zero.state_dict())
    for rank in range(2):
        restored = sampler(world=2, rank=rank)
        restored.load_state_dict(state)
        assert list(restored) == []
        assert list(restored) == sampler_epoch_on(2, rank, 1)


def resume_elastically(sizes, topologies, cuts, seed=0, window=2):
    """Run an epoch over successive topologies ``(world, drop_last)``: on each, every rank
    delivers in step what rank 0 delivered before its cut (``None``: to the end), rank 0's
    state goes on to the next topology. Returns every position delivered."""
    delivered: list[int] = []
    state = None
    for (world, drop_last), cut in zip(topologies, cuts, strict=True):
        zero_state = None
        for rank in range(world):
            one = sampler(sizes, world=world, rank=rank, drop_last=drop_last, seed=seed,
                          window=window)  # fmt: skip
            if state is not None:
                one.load_state_dict(roundtrip(state))
            if rank == 0:
                taken = list(itertools.islice(one, cut))
                zero_state = one.state_dict()
                count = zero_state["generation"]["delivered"]
            else:  # in step with rank 0: as many more as it gave
                begun = one.state_dict()["generation"]["delivered"]
                taken = list(itertools.islice(one, max(0, count - begun)))
            delivered += taken
        state = zero_state
    return delivered


@settings(max_examples=50, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 25), min_size=1, max_size=8),
    topologies=st.lists(st.tuples(st.integers(1, 5), st.booleans()), min_size=2, max_size=4),
    cuts=st.lists(st.integers(0, 40), min_size=3, max_size=3),
    seed=st.integers(0, 3),
)
def test_elastic_resumes_deliver_every_undelivered_position_once(sizes, topologies, cuts, seed):
    delivered = resume_elastically(sizes, topologies, [*cuts[: len(topologies) - 1], None], seed)
    counts = Counter(delivered)
    total = sum(sizes)
    assert max(counts.values(), default=1) == 1 and set(counts) <= set(range(total))
    world, drop_last = topologies[-1]
    missing = total - len(counts)
    assert missing == 0 if not drop_last else missing < world


@pytest.mark.parametrize("before, after", [(2, 3), (3, 2)])
def test_elastic_resume_repeated_within_an_epoch(before, after):
    topologies = [(before, False), (after, False), (before, False), (after, True)]
    delivered = resume_elastically([40] * 6, topologies, [7, 5, 11, None])
    assert len(delivered) == len(set(delivered)) and set(delivered) <= set(range(240))
    assert 240 - len(delivered) < after  # only the last, with drop_last, left some out


def test_an_elastic_resume_then_the_next_epoch_is_a_whole_one_on_the_new_ranks():
    zero = sampler(world=2, rank=0)
    draw(iter(zero), 5)
    state = roundtrip(zero.state_dict())
    restored = [sampler(world=3, rank=r) for r in range(3)]
    for one in restored:
        one.load_state_dict(state)
        list(one)
    following = [list(one) for one in restored]
    assert following == [sampler_epoch_on(3, r, 1) for r in range(3)]


def sampler_epoch_on(world: int, rank: int, epoch: int) -> list[int]:
    one = sampler(world=world, rank=rank)
    one.set_epoch(epoch)
    return list(one)


def test_the_state_stays_small_after_the_most_elastic_resumes():
    class Huge:
        def __len__(self) -> int:
            return 10**12

    state = None
    for number in range(66):
        world = (1 << 20) - (number % 2)
        one = BlockSampler(Huge(), num_replicas=world, rank=world - 1, block_size=10**9,
                           shuffle=False)  # fmt: skip
        if number == 65:
            with pytest.raises(UsageError, match="64 elastic resumes"):
                one.load_state_dict(state)
            break
        if state is not None:
            one.load_state_dict(state)
        next(iter(one))
        state = roundtrip(one.state_dict())
    assert len(state["history"]) == 64
    assert len(json.dumps(state)) < 64 * 1024


def good_state() -> dict:
    first = sampler(world=2, rank=0)
    draw(iter(first), 3)
    return roundtrip(first.state_dict())


def changed(path: str, value) -> dict:
    state = good_state()
    *parents, last = path.split(".")
    place = state
    for name in parents:
        place = place[name]
    if value is KeyError:
        del place[last]
    else:
        place[last] = value
    return state


@pytest.mark.parametrize(
    "state, message",
    [
        ({"epoch": 1}, "not a tarkit block sampler state"),
        ([1, 2], "not a tarkit block sampler state"),
        (changed("version", 2), "unsupported block sampler state version 2"),
        (changed("version", True), "unsupported block sampler state version"),
        (changed("generation.world", 10**12), "generation.world is not a whole number"),
        (changed("generation.world", 0), "generation.world is not a whole number"),
        (changed("generation.delivered", -1), "generation.delivered is not a whole number"),
        (changed("generation.delivered", 34), "generation.delivered is not a whole number"),
        (changed("generation.delivered", "3"), "generation.delivered is not a whole number"),
        (changed("generation.delivered", 3.0), "generation.delivered is not a whole number"),
        (changed("generation.rank", 2), "generation.rank is not a whole number from 0 to 1"),
        (changed("generation.drop_last", 0), "generation.drop_last is not true or false"),
        (changed("epoch", True), "epoch is not a whole number"),
        (changed("epoch", -1), "epoch is not a whole number"),
        (changed("dataset.layout", "../../etc/passwd"), "layout is not 16 hexadecimal"),
        (changed("settings.seed", None), "settings.seed is not an integer"),
        (changed("settings.extra", 1), "settings is not an object with exactly the fields"),
        (changed("generation.rank", KeyError), "generation is not an object with exactly"),
        (changed("history", {"a": 1}), "history is not a list of at most 64"),
        (changed("history", [{"world": 2, "drop_last": False, "delivered": 0}] * 10**6),
         "history is not a list of at most 64"),
        (changed("history", [{"world": 2, "drop_last": False, "delivered": 40}]),
         "history\\[0\\].delivered is not a whole number from 0 to 33"),
    ],
)  # fmt: skip
def test_malformed_or_hostile_states_are_refused_quickly(state, message):
    started = time.perf_counter()
    with pytest.raises(UsageError, match=message):
        sampler(world=2, rank=0).load_state_dict(state)
    assert time.perf_counter() - started < 0.5


@pytest.mark.parametrize(
    "other, message",
    [
        (lambda: sampler(SIZES + [1]), "taken over 65 samples, this dataset has 66"),
        (lambda: sampler(seed=1, window=2), "seed=0, this sampler has seed=1"),
        (lambda: sampler(window=3), "window=2, this sampler has window=3"),
        (lambda: sampler(shuffle=False, window=2), "shuffle=True, this sampler has shuffle=False"),
        (lambda: sampler(window=2, block_size=4), "block_size or the dataset's shard sizes"),
        (lambda: sampler([8, 2, *SIZES[2:]], window=2), "block_size or the dataset's shard sizes"),
    ],
)
def test_a_state_of_another_dataset_or_order_is_refused_naming_it(other, message):
    first = sampler(window=2)
    draw(iter(first), 3)
    with pytest.raises(UsageError, match=message):
        other().load_state_dict(roundtrip(first.state_dict()))


def test_without_shuffle_only_the_dataset_and_shuffle_must_match():
    first = sampler(shuffle=False, seed=1, window=2)
    draw(iter(first), 3)
    second = sampler(shuffle=False, seed=2, window=5, block_size=3)
    second.load_state_dict(first.state_dict())
    assert list(second) == [*range(3, 65)]


# -- DataLoader, StatefulDataLoader, Lightning's order of calls ------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataloader_with_workers_gives_the_samplers_order_each_epoch(workers):
    dataset = Positions(SIZES)
    one = BlockSampler(dataset, num_replicas=1, rank=0)
    loader = DataLoader(dataset, batch_size=4, sampler=one, num_workers=workers)
    seen = [[i for batch in loader for i in batch.tolist()] for _ in range(2)]
    assert seen == [sampler_epoch_on(1, 0, 0), sampler_epoch_on(1, 0, 1)]
    assert all(sorted(epoch) == [*range(65)] for epoch in seen)
    assert len(loader) == 17


def stateful_loader(workers: int, world: int = 1, rank: int = 0, **options):
    from torchdata.stateful_dataloader import StatefulDataLoader

    dataset = Positions(SIZES)
    one = BlockSampler(dataset, num_replicas=world, rank=rank, **options)
    return StatefulDataLoader(dataset, batch_size=4, sampler=one, num_workers=workers)


def flat(batches) -> list[int]:
    return [i for batch in batches for i in batch.tolist()]


@pytest.mark.parametrize("workers, cuts", [(0, (0, 1, 7, 16, 17)), (2, (7, 17))])
def test_a_stateful_dataloader_resumes_mid_epoch_exactly(workers, cuts):
    whole = stateful_loader(workers)
    epochs = [sampler_epoch_on(1, 0, epoch) for epoch in range(3)]
    assert [flat(whole) for _ in range(3)] == epochs  # one epoch per pass, from 0
    for cut in cuts:
        first = stateful_loader(workers)
        iterator = iter(first)
        taken = flat(next(iterator) for _ in range(cut))
        state = roundtrip(first.state_dict())
        del iterator
        second = stateful_loader(workers)
        second.load_state_dict(state)
        assert taken + flat(second) == epochs[0], cut
        assert flat(second) == epochs[1], cut


def test_a_stateful_dataloaders_state_resumes_elastically_on_other_ranks():
    first = [stateful_loader(2, world=2, rank=r) for r in range(2)]
    iterators = [iter(loader) for loader in first]
    taken = [i for it in iterators for i in flat(next(it) for _ in range(3))]
    state = roundtrip(first[0].state_dict())
    del iterators
    rest = []
    for rank in range(3):
        restored = stateful_loader(2, world=3, rank=rank)
        restored.load_state_dict(state)
        rest += flat(restored)
    assert sorted(taken + rest) == [*range(65)]


def test_set_epoch_after_the_pass_began_keeps_the_pass_in_the_state():
    # Lightning's order: the loader's iterator is made (restored), then set_epoch(epoch),
    # then the batches; a checkpoint in the middle must name the pass under way.
    whole = stateful_loader(0)
    epochs = [flat(whole), flat(whole)]
    first = stateful_loader(0)
    iterator = iter(first)
    first.sampler.set_epoch(0)
    taken = flat(next(iterator) for _ in range(5))
    state = roundtrip(first.state_dict())
    second = stateful_loader(0)
    second.load_state_dict(state)
    iterator = iter(second)
    second.sampler.set_epoch(0)
    middle = flat(next(iterator) for _ in range(3))
    third = stateful_loader(0)
    third.load_state_dict(roundtrip(second.state_dict()))
    assert taken + middle + flat(third) == epochs[0]
    second.sampler.set_epoch(1)  # the next epoch, as Lightning begins it
    assert flat(second) == epochs[1]


def test_set_epoch_of_the_pass_under_way_leaves_it_in_the_state():
    # DataLoader workers draw indices as soon as the iterator is made, before Lightning's
    # set_epoch: the state must still be that pass's, in the middle and at its end.
    whole = [sampler_epoch_on(1, 0, epoch) for epoch in range(2)]
    one = sampler()
    iterator = iter(one)
    taken = draw(iterator, 6)
    one.set_epoch(0)
    middle = roundtrip(one.state_dict())
    assert middle["generation"]["delivered"] == 6
    assert taken + list(iterator) == whole[0]
    for state, rest in ((middle, whole[0][6:]), (roundtrip(one.state_dict()), [])):
        restored = sampler()
        restored.load_state_dict(state)
        assert list(restored) == rest
        assert list(restored) == whole[1]


def test_a_lightning_trainer_resumed_mid_epoch_sees_each_position_once(tmp_path):
    lightning = pytest.importorskip("lightning")

    class Recorder(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))
            self.epochs: list[list[int]] = []

        def training_step(self, batch: torch.Tensor, index: int) -> torch.Tensor:
            while len(self.epochs) <= self.current_epoch:
                self.epochs.append([])
            self.epochs[self.current_epoch].extend(batch.tolist())
            return ((self.weight - batch.float()) ** 2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    def fit(model: Recorder, **options: object) -> None:
        path = options.pop("ckpt_path", None)
        trainer = lightning.Trainer(
            accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
            enable_model_summary=False, default_root_dir=tmp_path, **options,
        )  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Lightning's advice on workers and logging
            trainer.fit(model, train_dataloaders=stateful_loader(0), ckpt_path=path)

    whole, first, second = Recorder(), Recorder(), Recorder()
    fit(whole, max_epochs=2, enable_checkpointing=False)
    every = lightning.pytorch.callbacks.ModelCheckpoint(
        dirpath=tmp_path / "ckpt", every_n_train_steps=3, save_top_k=-1
    )
    fit(first, max_steps=3, callbacks=[every])
    (saved,) = (tmp_path / "ckpt").glob("*.ckpt")
    fit(second, max_epochs=2, enable_checkpointing=False, ckpt_path=str(saved))
    assert whole.epochs == [sampler_epoch_on(1, 0, 0), sampler_epoch_on(1, 0, 1)]
    assert first.epochs[0] + second.epochs[0] == whole.epochs[0]
    assert second.epochs[1] == whole.epochs[1]


def test_a_loop_calling_set_epoch_every_epoch_resumes_a_loaded_state():
    whole = sampler()
    first = sampler()
    taken = draw(iter(first), 9)
    restored = sampler()
    restored.load_state_dict(roundtrip(first.state_dict()))
    restored.set_epoch(0)
    assert taken + list(restored) == list(whole)


# -- a real two-process gloo group ------------------------------------------------------------

GROUP = """
import json, sys
import torch.distributed as dist
from torch.utils.data import DataLoader
import tarkit

SIZES = [7, 3, 12, 0, 9, 5, 11, 4, 8, 6]

class Positions:
    shard_sizes = SIZES
    def __len__(self):
        return sum(SIZES)
    def __getitem__(self, index):
        return index

address, rank, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
dist.init_process_group("gloo", init_method=address, rank=rank, world_size=2)
dataset = Positions()
whole = tarkit.BlockSampler(dataset, seed=4, drop_last=True)
loader = DataLoader(dataset, batch_size=4, sampler=whole)
epoch = [i for batch in loader for i in batch.tolist()]
# Rank 0's state after 3 batches of the next epoch, loaded by both ranks.
first = tarkit.BlockSampler(dataset, seed=4, drop_last=True)
first.set_epoch(1)
iterator = iter(first)
taken = [next(iterator) for _ in range(12)]
states = [first.state_dict()]
dist.broadcast_object_list(states, src=0)
second = tarkit.BlockSampler(dataset, seed=4, drop_last=True)
second.load_state_dict(states[0])
report = {"world": whole.world, "len": len(whole), "epoch": epoch,
          "taken": taken, "rest": list(second)}
gathered = [None, None]
dist.all_gather_object(gathered, report)
if rank == 0:
    with open(out, "w") as f:
        json.dump(gathered, f)
dist.destroy_process_group()
"""


def test_a_real_two_process_gloo_group_splits_and_resumes_each_epoch_exactly(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "result.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", GROUP, f"tcp://127.0.0.1:{port}", str(rank), str(out)],
            env=env,
        )
        for rank in range(2)
    ]
    try:
        for process in processes:
            assert process.wait(timeout=120) == 0
    finally:
        for process in processes:
            process.kill()
    ranks = json.loads(out.read_text())
    assert [r["world"] for r in ranks] == [2, 2] and [r["len"] for r in ranks] == [32, 32]
    epoch = ranks[0]["epoch"] + ranks[1]["epoch"]
    assert len(epoch) == len(set(epoch)) == 64  # one of 65 left out, the same on both
    next_epoch = [i for r in ranks for i in r["taken"] + r["rest"]]
    assert len(next_epoch) == len(set(next_epoch)) == 64
    for rank in range(2):
        alone = sampler(world=2, rank=rank, seed=4, drop_last=True)
        assert ranks[rank]["epoch"] == list(alone)
        assert ranks[rank]["taken"] + ranks[rank]["rest"] == list(alone)
