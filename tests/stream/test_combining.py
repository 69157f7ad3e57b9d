"""Combining inputs: round robin, weighted mixing, reading ahead in threads."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_tar

from tarkit.errors import InputError, UsageError
from tarkit.format.samples import Sample, SkipLog
from tarkit.format.tar import Member
from tarkit.stream.combining import (
    MixSchedule,
    combine_inputs,
    interleave,
    mix,
    parse_weights,
    preview_seed,
    read_ahead,
)


def samples(name: str, count: int, fail: bool = False, delay: float = 0) -> Iterator[Sample]:
    for i in range(count):
        time.sleep(delay)
        member = Member(f"{name}{i}.txt", "file", 1, 0, b"x" * 1024, 512)
        yield Sample(f"{name}{i}", ["txt"], [member], name)
    if fail:
        raise InputError("input ends inside a header block", source=name, offset=9)


class Tracked:
    """An iterator that records whether it was closed."""

    def __init__(self, items: Iterator[Sample]) -> None:
        self.items = items
        self.closed = False

    def __iter__(self) -> Tracked:
        return self

    def __next__(self) -> Sample:
        return next(self.items)

    def close(self) -> None:
        self.closed = True


def keys(items) -> list[str]:  # type: ignore[no-untyped-def]
    return [s.key for s in items]


def test_interleave_goes_round_robin_until_every_input_is_done() -> None:
    got = interleave([samples("a", 1), samples("b", 3), samples("c", 2)])
    assert keys(got) == ["a0", "b0", "c0", "b1", "c1", "b2"]


def test_mix_follows_the_weights_and_the_seed() -> None:
    def drawn(seed: int) -> list[str]:
        return keys(mix([samples("a", 5000), samples("b", 5000)], [3, 1], seed=seed))

    first = drawn(5)
    assert first == drawn(5) and first != drawn(6)
    counts = Counter(k[0] for k in first)
    # It stops at the first slot of "a" after its 5000 samples: the schedule's length.
    length = MixSchedule([3, 1], seed=preview_seed(5)).length([5000, 5000])
    assert (counts["a"], counts["b"]) == (5000, length - 5000)
    assert abs(counts["b"] - 5000 / 3) < 30


@pytest.mark.parametrize("weights", [[3, 1], [0.7, 0.2, 0.1], [1, 1, 1], [5, 3, 1, 1, 0.5]])
def test_every_aligned_block_of_a_schedule_holds_each_share_to_within_one_sample(
    weights: list[float],
) -> None:
    schedule = MixSchedule(weights, seed=("test", 1))
    total = sum(weights)
    draws = [0] * len(weights)
    for number in range(200):
        block = schedule.block(number)
        assert len(block) == 1000
        for i, weight in enumerate(weights):
            share = 1000 * weight / total
            assert abs(block.count(i) - share) < 1, (number, i)
            draws[i] += block.count(i)
    # Over 200 blocks the leftover samples average out: far closer than one a block.
    for i, weight in enumerate(weights):
        assert abs(draws[i] - 200_000 * weight / total) < 60
    # The order inside a block is random, not a pattern: blocks differ.
    assert schedule.block(0) != schedule.block(1)


def test_a_schedule_finds_any_slot_and_the_length_before_an_input_runs_out() -> None:
    schedule = MixSchedule([2, 1], seed=("x",))
    slots = [schedule.source_at(k) for k in range(2500)]
    assert schedule.draws(2500) == [slots.count(0), slots.count(1)]
    length = schedule.length([1200, 10_000])
    assert slots[:length].count(0) == 1200 and slots[length] == 0


def test_mix_stops_at_the_first_input_that_runs_out_unless_until_all() -> None:
    short = keys(mix([samples("a", 3), samples("b", 100)], [1, 1], seed=0))
    assert Counter(k[0] for k in short)["a"] == 3 and len(short) < 103
    every = keys(mix([samples("a", 3), samples("b", 100)], [1, 1], seed=0, until_all=True))
    assert sorted(every) == sorted([f"a{i}" for i in range(3)] + [f"b{i}" for i in range(100)])
    assert [k for k in every if k[0] == "b"] == [f"b{i}" for i in range(100)]


def test_closing_a_mix_or_an_interleave_closes_every_input() -> None:
    for combine in (lambda s: interleave(s), lambda s: mix(s, [1, 1], seed=1)):
        inputs = [Tracked(samples("a", 10)), Tracked(samples("b", 10))]
        combined = combine(inputs)
        next(combined)
        combined.close()
        assert all(i.closed for i in inputs)


@pytest.mark.parametrize("text", ["1,x", "1,-1", "0,1", "1,nan"])
def test_bad_weights_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError):
        parse_weights(text)


def shard(path: Path, name: str, count: int, size: int = 10) -> str:
    path.write_bytes(make_tar((f"{name}{i}.txt", b"x" * size) for i in range(count)))
    return str(path)


def test_read_ahead_keeps_the_sequential_order(tmp_path: Path) -> None:
    specs = [
        f"pipe:sleep 0.0{5 - n}; cat {shard(tmp_path / f'{n}.tar', f'i{n}-', 20)}" for n in range(5)
    ]
    assert keys(read_ahead(specs, 3)) == [f"i{n}-{i}" for n in range(5) for i in range(20)]


def test_read_ahead_raises_an_inputs_error_after_its_samples_and_the_earlier_inputs(
    tmp_path: Path,
) -> None:
    # Input 2 fails at once, long before input 0 is done: the error waits its turn.
    cut = tmp_path / "cut.tar"
    cut.write_bytes(Path(shard(tmp_path / "c.tar", "c", 3)).read_bytes()[:2600])
    specs = [
        f"pipe:sleep 0.3; cat {shard(tmp_path / 'a.tar', 'a', 30)}",
        shard(tmp_path / "b.tar", "b", 5),
        str(cut),
        shard(tmp_path / "d.tar", "d", 5),
    ]
    got: list[str] = []
    with pytest.raises(InputError, match="cut.tar: input ends inside"):
        for sample in read_ahead(specs, 4):
            got.append(sample.key)
    assert got == [f"a{i}" for i in range(30)] + [f"b{i}" for i in range(5)] + ["c0", "c1"]


def test_read_ahead_holds_a_bounded_buffer_and_stops_its_threads_when_closed(
    tmp_path: Path,
) -> None:
    big = shard(tmp_path / "big.tar", "e", 2000, size=1000)
    log = tmp_path / "read"
    # The command logs every 64 KiB it passes on: how far the thread read ahead.
    spec = f"pipe:dd if={big} bs=64k 2>/dev/null | while head -c 65536; do echo >> {log}; done"
    before = threading.active_count()
    reader = read_ahead([spec, spec, "pipe:exec sleep 30"], 3, limit=100 * 1024)
    next(reader)
    time.sleep(0.5)
    # 2 MB per input; the two threads hold ~100 KiB each, plus pipe buffers of 1 MiB.
    assert len(log.read_text()) < 2 * (100 + 2 * 1024 + 64) // 64
    started = time.monotonic()
    reader.close()
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == before  # the sleep 30 was stopped too
    assert time.monotonic() - started < 5


def test_combine_inputs_reads_files_in_each_mode(tmp_path: Path) -> None:
    for name, count in (("a", 2), ("b", 3)):
        (tmp_path / f"{name}.tar").write_bytes(
            make_tar((f"{name}{i}.txt", b"x") for i in range(count))
        )
    inputs = [str(tmp_path / "{a,b}.tar")]
    assert keys(combine_inputs(inputs, interleaved=True)) == ["a0", "b0", "a1", "b1", "b2"]
    assert keys(combine_inputs(inputs, parallel=2)) == ["a0", "a1", "b0", "b1", "b2"]
    mixed = keys(combine_inputs(inputs, weights="1,1", seed=3, until_all=True))
    assert sorted(mixed) == ["a0", "a1", "b0", "b1", "b2"]
    with pytest.raises(UsageError, match="2 weights for 3 inputs"):
        combine_inputs([*inputs, "c.tar"], weights="1,1")
    with pytest.raises(UsageError):
        combine_inputs(inputs, interleaved=True, weights="1,1")
    with pytest.raises(UsageError):
        combine_inputs(inputs, until_all=True)


def test_skips_counted_from_threads_reach_the_callers_log(tmp_path: Path) -> None:
    for n in range(4):
        (tmp_path / f"{n}.tar").write_bytes(make_tar([("README", b""), (f"k{n}.txt", b"x")]))
    skips = SkipLog()
    got = keys(combine_inputs([str(tmp_path / "{0..3}.tar")], parallel=3, skips=skips))
    assert got == ["k0", "k1", "k2", "k3"]
    assert skips.total == 4
