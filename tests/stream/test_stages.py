"""Stream stages: reading many inputs, take, slice (against Python lists), shuffle, write."""

from __future__ import annotations

import errno
import io
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_tar, samples_of
from hypothesis import given
from hypothesis import strategies as st

from tarkit.errors import OutputError, SampleError, TruncatedError, UsageError
from tarkit.storage import Sink
from tarkit.stream.stages import (
    output_errors,
    parse_slice,
    read_samples,
    shuffle_samples,
    slice_samples,
    take,
    write_samples,
)


def shard(tmp_path: Path, name: str, keys: range) -> Path:
    path = tmp_path / name
    path.write_bytes(make_tar((f"{k:04d}.{f}", f"{f}{k}".encode()) for k in keys for f in "ab"))
    return path


def keys(samples) -> list[str]:  # type: ignore[no-untyped-def]
    return [s.key for s in samples]


def test_read_samples_concatenates_inputs_in_order_with_braces(tmp_path: Path) -> None:
    for i in range(3):
        shard(tmp_path, f"d-{i}.tar", range(i * 10, i * 10 + 10))
    got = read_samples([str(tmp_path / "d-{0..2}.tar")])
    assert keys(got) == [f"{k:04d}" for k in range(30)]


def test_each_pipe_input_is_finished_before_the_next_one_starts(tmp_path: Path) -> None:
    first = shard(tmp_path, "a.tar", range(3))
    second = shard(tmp_path, "b.tar", range(3, 6))
    done = tmp_path / "first-done"
    inputs = [f"pipe:cat {first} && touch {done}", f"pipe:test -e {done} && cat {second}"]
    assert len(keys(read_samples(inputs))) == 6


def test_an_error_in_a_later_input_comes_after_the_earlier_samples(tmp_path: Path) -> None:
    good = shard(tmp_path, "good.tar", range(4))
    cut = tmp_path / "cut.tar"
    cut.write_bytes(make_tar([("z.a", b"1"), ("z.b", b"2")])[:600])
    seen = []
    with pytest.raises(TruncatedError) as info:
        for sample in read_samples([str(good), str(cut)]):
            seen.append(sample.key)
    assert seen == ["0000", "0001", "0002", "0003"]
    assert info.value.source == str(cut)


def counting(n: int, pulled: list[int]) -> Iterator[int]:
    try:
        for i in range(n):
            pulled.append(i)
            yield i
    finally:
        pulled.append(-1)  # closed


@pytest.mark.parametrize("count", [sys.maxsize, 10**20])
def test_take_of_more_than_any_stream_holds_is_everything(count: int) -> None:
    assert list(take(iter(range(5)), count)) == [0, 1, 2, 3, 4]


def test_take_stops_pulling_and_closes_upstream() -> None:
    pulled: list[int] = []
    assert list(take(counting(1000, pulled), 3)) == [0, 1, 2]
    assert pulled == [0, 1, 2, -1]
    assert list(take(iter(range(5)), None)) == [0, 1, 2, 3, 4]
    assert list(take(iter(range(5)), 0)) == []
    with pytest.raises(UsageError):
        list(take(iter(range(5)), -1))


def test_take_of_read_samples_closes_a_pipe_input_early(tmp_path: Path) -> None:
    # yes | tar never ends: only stopping early (and SIGPIPE) lets this return.
    (tmp_path / "a.txt").write_bytes(b"a")
    (tmp_path / "b.txt").write_bytes(b"b")
    command = f"pipe:cd {tmp_path} && yes \"$(printf 'a.txt\\nb.txt')\" | tar -cf - -T - --hard-dereference"
    assert keys(take(read_samples([command]), 1)) == ["a"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2:8:3", slice(2, 8, 3)),
        ("10:-5", slice(10, -5, None)),
        (":5", slice(None, 5, None)),
        ("::2", slice(None, None, 2)),
        ("-3:", slice(-3, None, None)),
        ("4", slice(4, 5)),
        ("-1", slice(-1, None)),
        ("-2", slice(-2, -1)),
    ],
)
def test_parse_slice_reads_python_syntax(text: str, expected: slice) -> None:
    assert parse_slice(text) == expected


@pytest.mark.parametrize("text", ["1:2:3:4", "a:b", "1.5:", "::0", "::-1"])
def test_parse_slice_rejects_malformed_or_backward_slices(text: str) -> None:
    with pytest.raises(UsageError, match="--slice"):
        parse_slice(text)


HUGE = st.sampled_from([sys.maxsize - 1, sys.maxsize, 10**20])
BOUND = st.one_of(st.none(), st.integers(-12, 12), HUGE, HUGE.map(lambda n: -n))
STEP = st.one_of(st.none(), st.integers(1, 4), HUGE)


@given(n=st.integers(0, 10), start=BOUND, stop=BOUND, step=STEP)
def test_slice_samples_matches_python_list_slicing(
    n: int, start: int | None, stop: int | None, step: int | None
) -> None:
    items = list(range(n))
    want = items[start:stop:step]
    assert list(slice_samples(iter(items), slice(start, stop, step))) == want
    text = ":".join("" if v is None else str(v) for v in (start, stop, step))
    assert list(slice_samples(iter(items), text)) == want


@given(n=st.integers(0, 10), index=st.integers(-12, 12))
def test_single_index_slice_is_one_item_like_python(n: int, index: int) -> None:
    items = list(range(n))
    want = [items[index]] if -n <= index < n else []
    assert list(slice_samples(iter(items), str(index))) == want


def test_slice_with_positive_bounds_stops_reading_early() -> None:
    pulled: list[int] = []
    assert list(slice_samples(counting(1000, pulled), "2:4")) == [2, 3]
    assert pulled == [0, 1, 2, 3, -1]


def test_shuffle_is_a_seeded_permutation() -> None:
    items = list(range(200))
    first = list(shuffle_samples(iter(items), 50, seed=7))
    assert first == list(shuffle_samples(iter(items), 50, seed=7))
    assert sorted(first) == items
    assert first != items
    assert first != list(shuffle_samples(iter(items), 50, seed=8))
    assert list(shuffle_samples(iter(items), 1, seed=7)) == items
    with pytest.raises(UsageError):
        list(shuffle_samples(iter(items), 0))


def test_write_samples_copies_members_and_ends_the_archive(tmp_path: Path) -> None:
    path = shard(tmp_path, "in.tar", range(5))
    target = tmp_path / "out.tar"
    assert write_samples(read_samples([str(path)]), Sink(str(target))) == 5
    assert target.read_bytes() == path.read_bytes()


def test_write_samples_on_a_read_error_removes_the_file_output(tmp_path: Path) -> None:
    cut = tmp_path / "cut.tar"
    cut.write_bytes(shard(tmp_path, "in.tar", range(5)).read_bytes()[:5000])
    target = tmp_path / "out.tar"
    with pytest.raises(TruncatedError):
        write_samples(read_samples([str(cut)]), Sink(str(target)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.tar", "in.tar"]


def test_write_samples_to_a_stream_keeps_whole_samples_and_no_end_marker(tmp_path: Path) -> None:
    data = shard(tmp_path, "in.tar", range(5)).read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[:5300])  # inside the second member of sample 0002

    class Captured(Sink):
        def __init__(self) -> None:
            self.spec, self.staged = "-", None
            self._file = self.stream = io.BytesIO()  # type: ignore[assignment]

    sink = Captured()
    with pytest.raises(TruncatedError):
        write_samples(read_samples([str(cut)]), sink)
    written = sink.stream.getvalue()  # type: ignore[attr-defined]
    assert written == data[: 2 * 2048]  # samples 0000 and 0001, whole, no end marker
    assert [k for k, _ in samples_of(written + bytes(1024))] == ["0000", "0001"]


def test_write_samples_refuses_a_sample_with_the_key_of_the_one_before_it(tmp_path: Path) -> None:
    first = shard(tmp_path, "first.tar", range(3))
    second = shard(tmp_path, "second.tar", range(2, 5))  # starts with first's last key
    target = tmp_path / "out.tar"
    with pytest.raises(SampleError) as info:
        write_samples(read_samples([str(first), str(second)]), Sink(str(target)))
    assert str(info.value).startswith(
        f"{second}: sample '0002' follows a sample with the same key (from {first}), "
        "and readers would merge the two: keys must be unique"
    )
    assert str(info.value).endswith("(byte 0, member 0002.a)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first.tar", "second.tar"]


def test_write_samples_allows_a_key_again_after_other_keys(tmp_path: Path) -> None:
    path = shard(tmp_path, "in.tar", range(2))
    target = tmp_path / "out.tar"
    assert write_samples(read_samples([str(path), str(path)]), Sink(str(target))) == 4
    assert target.read_bytes()[:-1024] == path.read_bytes()[:-1024] * 2


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EIO])
def test_disk_errors_while_writing_a_device_become_output_errors(code: int) -> None:
    sink = Sink("/dev/null")  # a device has no file system to name
    with pytest.raises(OutputError) as info, output_errors(sink):
        raise OSError(code, "disk trouble")
    assert str(info.value) == "/dev/null: write failed: disk trouble"
    sink.abort()


def test_an_error_that_is_not_a_file_sinks_own_is_not_blamed_on_it(tmp_path: Path) -> None:
    # A file sink names its own write errors (StagedFile): an OSError from elsewhere in
    # the pipeline (a full $TMPDIR) must not read as the output's.
    sink = Sink(str(tmp_path / "out.tar"))
    with pytest.raises(OSError) as info, output_errors(sink):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert type(info.value) is OSError
    sink.abort()


def test_broken_pipe_is_left_alone_for_the_runner() -> None:
    sink = Sink("/dev/null")
    with pytest.raises(BrokenPipeError), output_errors(sink):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")
