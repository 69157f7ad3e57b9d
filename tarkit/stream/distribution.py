"""A distribution of whole numbers in bounded memory: count, total, min, median, max.

Values are counted exactly (a count per distinct value) while there are at most
:data:`EXACT_LIMIT` distinct ones, which covers byte sizes and image sides of most
datasets; past that, values are counted in buckets 1 % wide (a bucket for every value
``v`` with the same ``floor(log(v) / log(1.01))``), so memory stays under a few thousand
entries for any value up to 2⁶³ and the median is then within 1 % of the true one
(:attr:`Spread.exact` says which). Count, total, min and max are always exact.
Distributions merge (one per shard, made in worker processes, added up).

>>> d = Distribution()
>>> d.add_all([5, 1, 9, 3])
>>> d.spread()
Spread(count=4, total=18, min=1, median=3, max=9, exact=True)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass

EXACT_LIMIT = 1 << 16  # distinct values counted one by one
_GROWTH = 1.01  # a bucket's upper bound over its lower one, once counted in buckets
_LOG_GROWTH = math.log(_GROWTH)


@dataclass
class Spread:
    """How values spread: their count, total, smallest, median and largest.

    The median is the middle value (the lower of the two middle ones for an even count),
    exact when ``exact``, else within 1 % of it.
    """

    count: int
    total: int
    min: int
    median: int
    max: int
    exact: bool = True

    def to_json(self) -> dict[str, int | bool]:
        return asdict(self)


class Distribution:
    """Counts of whole numbers (non-negative), exact until :data:`EXACT_LIMIT` distinct
    values, then in 1 % buckets (see the module's docstring). Picklable."""

    __slots__ = ("counts", "exact", "count", "total", "low", "high")

    def __init__(self) -> None:
        # value → count while exact; then bucket → count (bucket -1 holds the zeros)
        self.counts: Counter[int] = Counter()
        self.exact = True
        self.count = 0
        self.total = 0
        self.low: int | None = None
        self.high: int | None = None

    def add_all(self, values: list[int]) -> None:
        """Count every value of ``values``."""
        if not values:
            return
        self.count += len(values)
        self.total += sum(values)
        low, high = min(values), max(values)
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)
        if self.exact:
            self.counts.update(values)
            if len(self.counts) > EXACT_LIMIT:
                self._to_buckets()
        else:
            self.counts.update(map(_bucket, values))

    def merge(self, other: Distribution) -> None:
        """Add the counts of ``other``."""
        if other.low is None or other.high is None:
            return
        self.count += other.count
        self.total += other.total
        self.low = other.low if self.low is None else min(self.low, other.low)
        self.high = other.high if self.high is None else max(self.high, other.high)
        if self.exact and not other.exact:
            self._to_buckets()
        if self.exact or not other.exact:
            self.counts.update(other.counts)
        else:
            self.counts.update({_bucket(value): n for value, n in other.counts.items()})
        if self.exact and len(self.counts) > EXACT_LIMIT:
            self._to_buckets()

    def spread(self) -> Spread | None:
        """The spread of the values counted; None when there were none."""
        if self.low is None or self.high is None:
            return None
        middle = (self.count - 1) // 2
        seen = 0
        median = self.high
        for key in sorted(self.counts):
            seen += self.counts[key]
            if seen > middle:
                median = key if self.exact else _middle(key)
                break
        median = min(max(median, self.low), self.high)
        return Spread(self.count, self.total, self.low, median, self.high, self.exact)

    def _to_buckets(self) -> None:
        buckets: Counter[int] = Counter()
        for value, n in self.counts.items():
            buckets[_bucket(value)] += n
        self.counts = buckets
        self.exact = False


def _bucket(value: int) -> int:
    return -1 if value <= 0 else int(math.log(value) / _LOG_GROWTH)


def _middle(bucket: int) -> int:
    """A value for ``bucket``: the middle of its bounds, rounded."""
    return 0 if bucket < 0 else round(_GROWTH ** (bucket + 0.5))


def spread_of(values: Iterable[int]) -> Spread | None:
    """The spread of ``values`` (all held in memory: for small collections).

    >>> spread_of([4, 2])
    Spread(count=2, total=6, min=2, median=2, max=4, exact=True)
    """
    distribution = Distribution()
    distribution.add_all(list(values))
    return distribution.spread()
