"""Splitting arithmetic: exhaustive checks that every sample is read exactly once."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter

import pytest

from tarkit.loading.splitting import (
    Piece,
    epoch_pieces,
    range_pieces,
    rank_length,
    rank_range,
    shard_order,
    whole_shards,
    worker_range,
)
from tarkit.seeds import stable_seed


def samples_of(pieces: list[Piece], counts: list[int]) -> list[tuple[int, int]]:
    """(shard, index) of every sample the pieces cover, in reading order."""
    return [
        (p.shard, i)
        for p in pieces
        for i in range(p.start, counts[p.shard] if p.stop is None else p.stop)
    ]


def test_whole_shards_deal_every_shard_to_exactly_one_worker_of_one_rank():
    for shards in range(1, 38):
        order = shard_order(shards, shuffle=True, seed=1, epoch=shards)
        for world in (1, 2, 3, 4):
            for workers in (1, 2, 3):
                dealt = [
                    p.shard
                    for rank in range(world)
                    for worker in range(workers)
                    for p in whole_shards(
                        order, rank=rank, world=world, worker=worker, workers=workers
                    )
                ]
                assert sorted(dealt) == list(range(shards))


def test_epoch_pieces_cover_every_sample_exactly_once_for_1_to_37_shards():
    rng = random.Random(7)
    for shards in range(1, 38):
        counts = [rng.randrange(0, 9) for _ in range(shards)]
        everything = Counter((s, i) for s in range(shards) for i in range(counts[s]))
        for world in (1, 2, 3, 5):
            for workers in (1, 2, 3):
                for batch_size in (None, 1, 4):
                    read: Counter[tuple[int, int]] = Counter()
                    for rank in range(world):
                        for worker in range(workers):
                            pieces = epoch_pieces(
                                counts,
                                rank=rank,
                                world=world,
                                worker=worker,
                                workers=workers,
                                shuffle=True,
                                seed=3,
                                epoch=shards,
                                batch_size=batch_size,
                            )
                            read.update(samples_of(pieces, counts))
                    assert read == everything, (shards, world, workers, batch_size)


@pytest.mark.parametrize("drop_last", [False, True])
def test_equal_split_gives_every_rank_the_same_count_and_drops_less_than_world_times_batch(
    drop_last,
):
    rng = random.Random(11)
    for shards in range(1, 38):
        counts = [rng.randrange(1, 12) for _ in range(shards)]
        total = sum(counts)
        for world in (1, 2, 3, 4, 7):
            for workers in (1, 2, 3):
                for batch_size in (1, 2, 5):
                    per_rank = []
                    read: Counter[tuple[int, int]] = Counter()
                    for rank in range(world):
                        rank_samples = []
                        batches = 0
                        for worker in range(workers):
                            pieces = epoch_pieces(
                                counts,
                                rank=rank,
                                world=world,
                                worker=worker,
                                workers=workers,
                                equal=True,
                                batch_size=batch_size,
                                drop_last=drop_last,
                                shuffle=True,
                                epoch=world,
                            )
                            got = samples_of(pieces, counts)
                            rank_samples += got
                            batches += -(-len(got) // batch_size)
                        per_rank.append(len(rank_samples))
                        read.update(rank_samples)
                        assert batches == rank_length(
                            total,
                            rank=rank,
                            world=world,
                            equal=True,
                            batch_size=batch_size,
                            drop_last=drop_last,
                        )
                    assert len(set(per_rank)) == 1
                    assert max(read.values(), default=1) == 1
                    assert 0 <= total - sum(per_rank) < world * batch_size
                    if drop_last:
                        assert per_rank[0] % batch_size == 0


def test_worker_ranges_cut_on_batch_boundaries_so_batch_count_ignores_worker_count():
    for count in range(0, 40):
        for batch_size in (1, 3, 8):
            for workers in range(1, 6):
                ranges = [
                    worker_range(5, 5 + count, worker=w, workers=workers, batch_size=batch_size)
                    for w in range(workers)
                ]
                assert ranges[0][0] == 5 and ranges[-1][1] == 5 + count
                assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
                partial = [hi - lo for lo, hi in ranges if (hi - lo) % batch_size]
                assert len(partial) <= 1
                batches = sum(-(-(hi - lo) // batch_size) for lo, hi in ranges)
                assert batches == -(-count // batch_size)


def test_rank_ranges_differ_by_at_most_one_sample_without_equal():
    for total in range(0, 60):
        for world in range(1, 9):
            sizes = [
                hi - lo for lo, hi in (rank_range(total, rank=r, world=world) for r in range(world))
            ]
            assert sum(sizes) == total and max(sizes) - min(sizes) <= 1


def test_range_pieces_mark_pieces_that_reach_the_end_of_their_shard():
    assert range_pieces([3, 0, 3], [0, 1, 2], 0, 6) == [Piece(0), Piece(2)]
    assert range_pieces([3, 3], [0, 1], 1, 4) == [Piece(0, 1, None), Piece(1, 0, 1)]


def test_shard_order_is_the_same_in_every_run_and_differs_between_epochs():
    orders = {tuple(shard_order(20, shuffle=True, seed=5, epoch=e)) for e in range(10)}
    assert len(orders) == 10
    assert shard_order(20, shuffle=True, seed=5, epoch=3) == shard_order(
        20, shuffle=True, seed=5, epoch=3
    )


def test_stable_seed_does_not_depend_on_pythonhashseed():
    code = "from tarkit.seeds import stable_seed; print(stable_seed(1, 'x', 2))"
    values = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        ).stdout
        for seed in ("0", "1", "12345")
    }
    assert values == {f"{stable_seed(1, 'x', 2)}\n"}
