"""A resumed writer keeps its shards only for the input they were written from: another
input (shorter, other keys) is a UsageError naming the shard, before anything is
written; the same input resumes to the bytes of a clean run. With items that give
several samples (or none), the first and last samples of each kept shard are found
where its record places them, among an item's samples."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from shard_datasets import Chunks, Words

from tarkit.errors import InputError, UsageError
from tarkit.writing.from_dataset import shard_dataset
from tarkit.writing.shard_writer import ShardWriter


def samples(count: int, renamed: int | None = None) -> list[dict[str, str]]:
    """Samples k00…; the one at ``renamed`` gets another key."""
    return [{"__key__": f"{'x' if i == renamed else 'k'}{i:02d}", "txt": "t" * i}
            for i in range(count)]  # fmt: skip


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def interrupted(directory: Path) -> dict[str, bytes]:
    """The shards of a ShardWriter run of 12 samples, 3 a shard, stopped by an error at
    the eighth sample: two complete shards stay."""
    with pytest.raises(RuntimeError), ShardWriter(str(directory / "s-%d.tar"), maxcount=3) as w:
        for sample in samples(12)[:8]:
            w.write(sample)
        raise RuntimeError("stopped")
    return files(directory)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (samples(4), "s-1.tar: the input is not the one .* the input ends after 4 samples"),
        (samples(12, renamed=4), "s-1.tar: .*, keys 'k03' to 'k05', the input's samples 3 "
                                 "to 5 have the same first and last keys but other keys between"),
        (samples(12, renamed=0), "s-0.tar: .* samples 0 to 2 are 'x00' to 'k02'"),
    ],
    ids=["shorter", "middle-key", "first-key"],
)  # fmt: skip
def test_a_resumed_writer_refuses_an_input_that_does_not_hold_its_kept_shards(
    tmp_path: Path, given: list[dict[str, str]], message: str
) -> None:
    before = interrupted(tmp_path)
    with pytest.raises(UsageError, match=message):
        with ShardWriter(str(tmp_path / "s-%d.tar"), maxcount=3, mode="resume") as writer:
            writer.write_all(writer.skip_kept(given))
    assert files(tmp_path) == before


def test_a_resumed_writer_given_its_input_writes_the_bytes_of_a_clean_run(tmp_path: Path) -> None:
    interrupted(tmp_path / "cut")
    with ShardWriter(str(tmp_path / "cut" / "s-%d.tar"), maxcount=3, mode="resume") as writer:
        writer.write_all(writer.skip_kept(samples(12)))
    with ShardWriter(str(tmp_path / "clean" / "s-%d.tar"), maxcount=3) as writer:
        writer.write_all(samples(12))
    assert files(tmp_path / "cut") == files(tmp_path / "clean")


class Items:
    """A map-style dataset of ``count`` items; item ``bad`` is no sample; ``renamed``
    gets another key."""

    def __init__(self, count: int, bad: int | None = None, renamed: int | None = None) -> None:
        self.count, self.bad, self.renamed = count, bad, renamed

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> Any:
        return (1, 2, 3) if index == self.bad else samples(self.count, self.renamed)[index]


class Stream:
    """The same items as an iterable dataset."""

    def __init__(self, items: Any) -> None:
        self.items = items

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self.items[i] for i in range(len(self.items)))


@pytest.mark.parametrize("kind", [Items, lambda *a, **k: Stream(Items(*a, **k))],
                         ids=["map-style", "iterable"])  # fmt: skip
def test_shard_dataset_resumed_on_another_dataset_is_a_usage_error_naming_the_shard(
    tmp_path: Path, kind: Any
) -> None:
    pattern = str(tmp_path / "s-%d.tar")
    with pytest.raises(InputError, match="item 7 is a tuple"):
        shard_dataset(kind(12, bad=7), pattern, maxcount=3)
    before = files(tmp_path)
    assert sorted(before) == ["s-0.tar", "s-1.tar"]
    with pytest.raises(UsageError, match=r"s-1\.tar: .* the dataset has only 4 items"):
        shard_dataset(kind(4), pattern, maxcount=3, mode="resume")
    with pytest.raises(UsageError, match=r"s-1\.tar: .* positions 3 to 5 of its order are "
                                         r"'k03' to 'x05'"):  # fmt: skip
        shard_dataset(kind(12, renamed=5), pattern, maxcount=3, mode="resume")
    assert files(tmp_path) == before
    shard_dataset(kind(12), pattern, maxcount=3, mode="resume")
    shard_dataset(kind(12), str(tmp_path / "clean" / "s-%d.tar"), maxcount=3)
    assert files(tmp_path) == files(tmp_path / "clean")


class Renamed(Chunks):
    """:class:`Chunks`, but the samples of item ``renamed`` get other keys."""

    def __init__(self, renamed: int) -> None:
        super().__init__()
        self.renamed = renamed

    def samples(self, item: dict[str, Any], index: int) -> Iterator[dict[str, Any]]:
        for sample in super().samples(item, index):
            changed = index == self.renamed
            yield {**sample, "__key__": sample["__key__"] + "x"} if changed else sample


@pytest.mark.parametrize("iterable", [False, True], ids=["map-style", "iterable"])
def test_a_resume_cut_among_an_items_samples_is_checked_where_the_records_place_them(
    tmp_path: Path, iterable: bool
) -> None:
    def words(length: int = 40) -> Any:  # item i gives i % 4 samples (Chunks)
        return Stream(Words(length)) if iterable else Words(length)

    pattern = str(tmp_path / "cut" / "s-%02d.tar")
    with pytest.raises(KeyboardInterrupt):
        shard_dataset(words(), pattern, to_sample=Chunks(stop=30), maxcount=5)
    before = files(tmp_path / "cut")
    # s-01.tar begins with the third sample of item 3 and ends with the first of item 7.
    with pytest.raises(UsageError, match=r"s-01\.tar: .*keys 'w0003/2' to 'w0007/0', the "
                       r"dataset's samples at positions 3 \(its sample 2\) to 7 \(its sample "
                       r"0\) of its order are 'w0003/2' to 'w0007/0x'\. --resume"):  # fmt: skip
        shard_dataset(words(), pattern, to_sample=Renamed(7), maxcount=5, mode="resume")
    if iterable:  # (a map-style dataset of another length has another order: refused so)
        with pytest.raises(UsageError, match=r"s-04\.tar: .* the dataset has only 16 items"):
            shard_dataset(words(16), pattern, to_sample=Chunks(), maxcount=5, mode="resume")
    assert files(tmp_path / "cut") == before
    shard_dataset(words(), pattern, to_sample=Chunks(), maxcount=5, mode="resume")
    shard_dataset(words(), str(tmp_path / "clean" / "s-%02d.tar"), to_sample=Chunks(), maxcount=5)
    assert files(tmp_path / "cut") == files(tmp_path / "clean")
