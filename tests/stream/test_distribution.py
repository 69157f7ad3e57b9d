"""Distributions: exact medians while values are few, within 1 % in bounded memory past
that, the same whether counted at once or merged in parts (and across processes)."""

from __future__ import annotations

import pickle
import random
import statistics

import pytest

from tarkit.stream import distribution
from tarkit.stream.distribution import Distribution, Spread


def counted(*parts: list[int]) -> Distribution:
    total = Distribution()
    for part in parts:
        one = Distribution()
        one.add_all(part)
        total.merge(pickle.loads(pickle.dumps(one)))
    return total


def test_exact_spread_is_count_total_min_lower_median_max() -> None:
    values = [7, 3, 3, 10, 1, 8]
    assert counted(values).spread() == Spread(6, 32, 1, statistics.median_low(values), 10, True)
    assert counted([5]).spread() == Spread(1, 5, 5, 5, 5, True)
    assert Distribution().spread() is None


def test_parts_merged_give_the_spread_of_the_whole() -> None:
    rng = random.Random(3)
    values = [rng.randrange(1000) for _ in range(5000)]
    whole = counted(values).spread()
    assert counted(values[:10], values[10:4000], [], values[4000:]).spread() == whole


def test_past_the_exact_limit_memory_is_bounded_and_the_median_within_one_percent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(distribution, "EXACT_LIMIT", 500)
    rng = random.Random(7)
    values = [rng.randrange(10**9) for _ in range(20_000)] + [0, 0]
    parts = counted(values[:300], values[300:])  # exact, then exact merged into buckets
    spread = parts.spread()
    assert spread is not None and not spread.exact
    assert (spread.count, spread.total, spread.min, spread.max) == (
        len(values), sum(values), 0, max(values))  # fmt: skip
    true = statistics.median_low(values)
    assert abs(spread.median - true) <= true / 100
    assert len(parts.counts) < 2200  # buckets 1 % wide up to 10**9, whatever the count
    again = counted(values[:10_000], values[10_000:]).spread()  # buckets merged into buckets
    assert again is not None and abs(again.median - true) <= true / 100
