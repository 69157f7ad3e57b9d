"""sort_samples: regrouping, order, stability, runs on disk and their removal."""

from __future__ import annotations

import io
import random
import tracemalloc
from pathlib import Path

import pytest
from conftest import make_tar
from hypothesis import given, settings
from hypothesis import strategies as st
from tarfiles import END, header, member

from tarkit.errors import SampleError, UsageError
from tarkit.format.samples import DOT_FIRST, NO_FIELD, SkipLog, group_samples
from tarkit.format.tar import read_members
from tarkit.format.tar_writer import TarWriter
from tarkit.stream.sorting import (
    ITEM_OVERHEAD,
    SortOrder,
    _item_size,
    _keyed_members,
    _member_items,
    sort_samples,
)


def write(path: Path, members: list[tuple[str, bytes]]) -> str:
    path.write_bytes(make_tar(members))
    return str(path)


def interleaved_members(keys: int, fields: int, size: int = 100) -> list[tuple[str, bytes]]:
    members = [(f"k{k:05d}.f{f}", b"%d." % k * size) for k in range(keys) for f in range(fields)]
    random.Random(keys).shuffle(members)
    return members


def test_members_of_a_key_are_regrouped_in_the_order_they_were_read(tmp_path: Path) -> None:
    path = write(tmp_path / "in.tar", [("b.y", b"1"), ("a.x", b"2"), ("b.x", b"3"), ("a.y", b"4")])
    samples = list(sort_samples([path]))
    assert [(s.key, s.data()) for s in samples] == [
        ("a", {"x": b"2", "y": b"4"}),
        ("b", {"y": b"1", "x": b"3"}),
    ]
    assert samples[0].source == path


def test_keys_are_ordered_by_their_utf8_bytes(tmp_path: Path) -> None:
    keys = ["é", "z", "Z", "a/b", "a.d/b", "a-b", "10", "9"]
    path = write(tmp_path / "in.tar", [(f"{k}.txt", b"") for k in keys])
    got = [s.key for s in sort_samples([path])]
    assert got == sorted(keys, key=lambda k: k.encode())


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 30), st.sampled_from(["a", "b", "c"])), max_size=60),
    st.booleans(),
)
def test_sorted_samples_are_the_grouped_members_by_key(
    tmp_path_factory: pytest.TempPathFactory, pairs: list[tuple[int, str]], reverse: bool
) -> None:
    seen: set[tuple[int, str]] = set()
    members = []
    for key, field in pairs:
        if (key, field) not in seen:
            seen.add((key, field))
            members.append((f"{key:02d}.{field}", b"%d%s" % (key, field.encode())))
    path = write(tmp_path_factory.mktemp("h") / "in.tar", members)
    want: dict[str, dict[str, bytes]] = {}
    for name, data in members:
        key, field = name.split(".")
        want.setdefault(key, {})[field] = data
    expected = sorted(want.items(), reverse=reverse)
    for memory in (1 << 20, 256 << 20):
        got = sort_samples([path], SortOrder(reverse=reverse), memory=memory, allow_empty=True)
        assert [(s.key, s.data()) for s in got] == expected


def test_spilled_runs_and_several_merge_passes_give_the_in_memory_order(tmp_path: Path) -> None:
    path = write(tmp_path / "in.tar", interleaved_members(3000, 3))
    in_memory = [(s.key, s.fields) for s in sort_samples([path], memory=1 << 30)]
    temp = tmp_path / "tmp"
    temp.mkdir()
    sorted_ = sort_samples([path], memory=1 << 20, tempdir=str(temp))
    first = next(sorted_)
    (directory,) = temp.iterdir()
    assert len(list(directory.iterdir())) > 1
    spilled = [(first.key, first.fields)] + [(s.key, s.fields) for s in sorted_]
    assert spilled == in_memory
    assert list(temp.iterdir()) == []


def test_field_sort_spills_too_and_stays_stable(tmp_path: Path) -> None:
    # Labels 0..4 in reverse key order: equal labels keep the order of first appearance.
    members = []
    for i in range(4000):
        key = f"k{3999 - i:04d}"
        members += [(f"{key}.cls", b"%d" % (i % 5)), (f"{key}.bin", b"x" * 300)]
    path = write(tmp_path / "in.tar", members)
    appearance = [f"k{3999 - i:04d}" for i in range(4000)]
    want = sorted(appearance, key=lambda k: (3999 - int(k[1:])) % 5)
    want_reversed = sorted(appearance, key=lambda k: -((3999 - int(k[1:])) % 5))
    for memory in (1 << 20, 1 << 30):
        order = SortOrder(field="cls", numeric=True)
        assert [s.key for s in sort_samples([path], order, memory=memory)] == want
        order = SortOrder(field="cls", numeric=True, reverse=True)
        assert [s.key for s in sort_samples([path], order, memory=memory)] == want_reversed


def test_closing_early_and_failing_remove_the_runs(tmp_path: Path) -> None:
    path = write(tmp_path / "in.tar", interleaved_members(3000, 2))
    temp = tmp_path / "tmp"
    temp.mkdir()
    sorted_ = sort_samples([path], memory=1 << 20, tempdir=str(temp))
    next(sorted_)
    assert list(temp.iterdir())
    sorted_.close()
    assert list(temp.iterdir()) == []
    members = interleaved_members(3000, 2) + [("k00007.F0", b"again")]
    duplicate = write(tmp_path / "dup.tar", members)
    with pytest.raises(SampleError, match="field 'F0' appears twice in sample 'k00007'"):
        list(sort_samples([duplicate], memory=1 << 20, tempdir=str(temp)))
    assert list(temp.iterdir()) == []


def test_shuffle_depends_on_keys_and_seed_only(tmp_path: Path) -> None:
    members = interleaved_members(500, 2)
    a = write(tmp_path / "a.tar", members)
    b = write(tmp_path / "b.tar", list(reversed(members)))

    def keys(path: str, seed: int, memory: int = 1 << 30) -> list[str]:
        return [s.key for s in sort_samples([path], SortOrder(shuffle_seed=seed), memory=memory)]

    assert keys(a, 1) == keys(b, 1) == keys(a, 1, 1 << 20)
    assert keys(a, 1) != keys(a, 2)
    assert sorted(keys(a, 1)) == [f"k{k:05d}" for k in range(500)]


def test_skipped_members_follow_the_readers_rules(tmp_path: Path) -> None:
    archive = (
        member("README", b"no field")
        + member("__meta__/x.json", b"{}")
        + member("d/", typeflag=b"5")
        + member("a.txt", b"a")
        + header("l.txt", 0, b"2", linkname=b"a.txt")
        + member(".hidden", b"h")
        + member("b.txt", b"b")
        + END
    )
    path = tmp_path / "in.tar"
    path.write_bytes(archive)
    sorting, grouping = SkipLog(), SkipLog()
    assert [s.key for s in sort_samples([str(path)], skips=sorting)] == ["a", "b"]
    assert [s.key for s in group_samples(read_members(io.BytesIO(archive)), str(path), skips=grouping)] == [
        "a", "b"
    ]  # fmt: skip
    assert sorting.counts == grouping.counts == {NO_FIELD: 1, DOT_FIRST: 1, "symlink member": 1}
    assert sorting.first == grouping.first
    with pytest.raises(SampleError, match="member without a field .* not allowed with --strict"):
        list(sort_samples([str(path)], strict=True))


def test_contradicting_orders_are_usage_errors() -> None:
    with pytest.raises(UsageError):
        SortOrder(numeric=True)
    with pytest.raises(UsageError):
        SortOrder(field="cls", shuffle_seed=1)


def test_item_size_estimate_covers_what_python_holds(tmp_path: Path) -> None:
    path = write(tmp_path / "in.tar", interleaved_members(2000, 2, size=3))
    sources: list[str] = []
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        members = _keyed_members([path], sources, 1 << 20, False, None, False, False)
        items = list(_member_items(members, SortOrder()))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    estimate = sum(_item_size(item) for item in items)
    assert held <= estimate < 1.5 * held, (held, estimate, ITEM_OVERHEAD)


def test_sorted_output_reads_back_as_samples(tmp_path: Path) -> None:
    path = write(tmp_path / "in.tar", interleaved_members(50, 3))
    out = io.BytesIO()
    with TarWriter(out) as writer:
        for sample in sort_samples([path], memory=1 << 20):
            for member in sample.members:
                writer.write(member)
    out.seek(0)
    assert len(list(group_samples(read_members(out)))) == 50
