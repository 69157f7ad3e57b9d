"""The library side of tarkit verify: results in order whatever finishes first, a failure
raised at its own item, the manifest comparisons in their order, skips merged in order."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from conftest import make_tar

from tarkit.format.manifest import ShardInfo
from tarkit.format.samples import SkipLog
from tarkit.writing.verify import BYTES, KEYS, SAMPLES, SHA256, check_shard, in_order


def test_in_order_gives_results_in_the_order_of_the_items_whatever_finishes_first() -> None:
    def slow_first(n: int) -> int:
        time.sleep(0.05 if n % 4 == 0 else 0)
        return n * n

    assert list(in_order(slow_first, range(12), 3)) == [n * n for n in range(12)]


def test_in_order_raises_a_failure_when_the_consumer_reaches_its_item() -> None:
    def fail_at_two(n: int) -> int:
        if n == 2:
            raise ValueError("two")
        return n

    results = in_order(fail_at_two, range(6), 2)
    assert [next(results), next(results)] == [0, 1]
    with pytest.raises(ValueError, match="two"):
        next(results)


def test_closing_in_order_stops_the_threads_taking_items() -> None:
    started: list[int] = []
    lock = threading.Lock()

    def note(n: int) -> int:
        with lock:
            started.append(n)
        return n

    results = in_order(note, range(1000), 2)
    assert next(results) == 0
    results.close()
    time.sleep(0.05)
    with lock:
        taken = len(started)
    assert taken <= 1 + 4 * 2  # no more than the window ahead of the consumer
    time.sleep(0.05)
    assert len(started) == taken


def test_the_first_comparison_that_fails_names_the_problem(tmp_path: Path) -> None:
    path = tmp_path / "s.tar"
    path.write_bytes(make_tar([("a.txt", b"1"), ("b.txt", b"2")]))
    found = check_shard(str(path), None).found
    assert found is not None and found.samples == 2

    def problem(**changes: object) -> str | None:
        entry = ShardInfo(**{**found.__dict__, "keys": ["a", "b"], "offsets": [0, 1024],
                             **changes})  # type: ignore[arg-type]  # fmt: skip
        result = check_shard(str(path), entry)
        return None if result.problem is None else result.problem.reason

    assert problem() is None
    assert problem(keys=["a", "c"], samples=3, bytes=1) == KEYS  # keys say where: first
    assert problem(samples=1, keys=["a"], offsets=[0]) == SAMPLES
    assert problem(bytes=found.bytes + 512) == BYTES
    assert problem(sha256="0" * 64) == SHA256


def test_skips_kept_apart_merge_into_one_log_warning_once_per_reason() -> None:
    seen: list[tuple[str, str, str]] = []
    log = SkipLog(lambda *skip: seen.append(skip))
    for shard in ("a.tar", "b.tar"):
        apart = SkipLog()
        apart.add("member without a field", shard, "README")
        apart.add("member without a field", shard, "LICENSE")
        log.merge(apart)
    assert log.counts == {"member without a field": 4}
    assert seen == [("member without a field", "a.tar", "README")]
