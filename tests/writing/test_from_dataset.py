"""shard_dataset: round trips, DataLoader workers, determinism, resume after SIGKILL, S3."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import samples_of, sigkill_when, webdataset_samples
from PIL import Image
from shard_datasets import Chunks, Words

from tarkit.errors import InputError, OutputError, SampleError, UsageError
from tarkit.format.tar_writer import default_mtime
from tarkit.storage import temp_place
from tarkit.writing.from_dataset import ShardProgress, default_sample, sample_order, shard_dataset
from tarkit.writing.shard_writer import ShardWriter


class Pictures:
    """A map-style dataset of (PIL image, label), made here: nothing is downloaded."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n = n
        self.fail_at = fail_at

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        if index == self.fail_at:
            raise ValueError(f"cannot load picture {index}")
        image = Image.new("RGB", (24 + index % 5, 16), (index * 37 % 256, index % 256, 90))
        return image, index % 3


def shard_bytes(directory: Path, glob: str = "*.tar") -> list[bytes]:
    return [p.read_bytes() for p in sorted(directory.glob(glob))]


def test_a_dataset_of_images_and_labels_round_trips_through_webdataset_and_tar(
    tmp_path: Path,
) -> None:
    manifest = shard_dataset(Pictures(23), str(tmp_path / "s-%03d.tar"), maxcount=10)
    shards = sorted(tmp_path.glob("s-*.tar"))
    assert [s.samples for s in manifest.shards] == [10, 10, 3]
    read = [sample for shard in shards for sample in webdataset_samples(shard)]
    assert [key for key, _ in read] == [f"{i:09d}" for i in range(23)]
    for index, (_, fields) in enumerate(read):
        assert sorted(fields) == ["cls", "png"]
        assert fields["cls"] == str(index % 3).encode()
        image = Image.open(io.BytesIO(fields["png"]))
        assert image.size == (24 + index % 5, 16)
        assert image.getpixel((0, 0)) == (index * 37 % 256, index % 256, 90)
    for shard in shards:
        listed = subprocess.run(["tar", "-tvf", str(shard)], capture_output=True, text=True)
        assert listed.returncode == 0 and listed.stderr == ""


def test_zero_and_two_workers_write_identical_shards(tmp_path: Path) -> None:
    for workers in (0, 2):
        shard_dataset(Pictures(40), str(tmp_path / f"w{workers}" / "s-%02d.tar"),
                      num_workers=workers, maxsize="12K", shuffle=True, seed=5)  # fmt: skip
    zero, two = shard_bytes(tmp_path / "w0"), shard_bytes(tmp_path / "w2")
    assert len(zero) > 2
    assert zero == two


def test_shuffle_is_a_seeded_permutation_of_all_items(tmp_path: Path) -> None:
    keys = {}
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        shard_dataset(Pictures(30), str(tmp_path / name / "s-%d.tar"), shuffle=True, seed=seed)
        keys[name] = [k for k, _ in samples_of((tmp_path / name / "s-0.tar").read_bytes())]
    assert keys["a"] == keys["b"] != keys["c"]
    assert sorted(keys["a"]) == [f"{i:09d}" for i in range(30)]
    assert keys["a"] != sorted(keys["a"])


def test_an_iterable_with_workers_gives_the_same_shards_as_without(tmp_path: Path) -> None:
    def items():
        for i in range(50):
            yield {"__key__": f"item{i:03d}", "json": {"i": i}, "txt": "x" * i}

    for workers in (0, 2):
        manifest = shard_dataset(items(), str(tmp_path / f"w{workers}" / "s-%d.tar"),
                                 num_workers=workers, maxcount=16)  # fmt: skip
        assert [s.samples for s in manifest.shards] == [16, 16, 16, 2]
    assert shard_bytes(tmp_path / "w0") == shard_bytes(tmp_path / "w2")


def test_to_sample_builds_each_sample_in_the_workers(tmp_path: Path) -> None:
    def to_sample(item: tuple[Image.Image, int], index: int) -> dict[str, object]:
        image, label = item
        return {"__key__": f"pic{index:04d}", "jpg": image.resize((8, 8)), "json": {"label": label}}

    shard_dataset(Pictures(6), str(tmp_path / "s-%d.tar"), num_workers=2, to_sample=to_sample)
    samples = samples_of((tmp_path / "s-0.tar").read_bytes())
    assert [k for k, _ in samples] == [f"pic{i:04d}" for i in range(6)]
    assert Image.open(io.BytesIO(samples[4][1]["jpg"])).size == (8, 8)
    assert samples[4][1]["json"] == b'{"label":1}'


@pytest.mark.parametrize("workers", [0, 2])
def test_an_item_that_fails_names_its_index_and_keeps_complete_shards(
    tmp_path: Path, workers: int
) -> None:
    with pytest.raises(InputError, match="item 13: ValueError: cannot load picture 13"):
        shard_dataset(Pictures(20, fail_at=13), str(tmp_path / "s-%d.tar"), maxcount=5,
                      num_workers=workers)  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s-0.tar", "s-1.tar"]


def test_to_sample_returning_none_is_an_error_naming_the_item(tmp_path: Path) -> None:
    def to_sample(item: int, index: int) -> None:
        return None  # a forgotten return: not taken for "no sample"

    with pytest.raises(SampleError) as caught:
        shard_dataset(range(3), str(tmp_path / "s-%d.tar"), to_sample=to_sample)
    assert str(caught.value) == (
        "dataset: item 0: to_sample returned None: it must return a sample dict (with "
        "'__key__'), or a list or generator of them ([] for none)"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_tarkit_error_in_a_worker_arrives_intact(tmp_path: Path) -> None:
    items = [{"__key__": "good", "txt": "x"}, {"__key__": "bad", "jpg": 3.5}]
    with pytest.raises(SampleError) as caught:
        shard_dataset(items, str(tmp_path / "s-%d.tar"), num_workers=2)
    assert str(caught.value).startswith("sample 'bad': field 'jpg': cannot encode float")
    assert list(tmp_path.iterdir()) == []


def test_resize_and_format_reach_pil_images_and_image_bytes_of_dict_items(
    tmp_path: Path,
) -> None:
    encoded = io.BytesIO()
    Image.new("RGB", (40, 20), (200, 10, 10)).save(encoded, format="PNG")
    items = [{"__key__": "k", "jpg": Image.new("RGB", (20, 40)), "mask.png": encoded.getvalue(),
              "txt": "left alone"}]  # fmt: skip
    shard_dataset(items, str(tmp_path / "s-%d.tar"), resize="10x10!", image_format="webp")
    [(key, fields)] = samples_of((tmp_path / "s-0.tar").read_bytes())
    assert sorted(fields) == ["mask.webp", "txt", "webp"]
    assert fields["txt"] == b"left alone"
    for field in ("webp", "mask.webp"):
        image = Image.open(io.BytesIO(fields[field]))
        assert (image.format, image.size) == ("WEBP", (10, 10))


def test_a_format_that_makes_two_fields_one_is_an_error_naming_the_sample(tmp_path: Path) -> None:
    items = [{"__key__": "k", "jpg": Image.new("RGB", (2, 2)), "png": Image.new("RGB", (2, 2))}]
    with pytest.raises(SampleError, match="sample 'k': two fields become 'png' after --format"):
        shard_dataset(items, str(tmp_path / "s-%d.tar"), image_format="png")
    assert list(tmp_path.iterdir()) == []


def test_default_sample_names_fields_by_type() -> None:
    image = Image.new("L", (2, 2))
    assert default_sample((image, 4), 12) == {"__key__": "000000012", "png": image, "cls": 4}
    assert default_sample({"__key__": "k", "txt": "a"}, 1) == {"__key__": "k", "txt": "a"}
    with pytest.raises(SampleError, match="item 3 is a float"):
        default_sample(2.5, 3)


def test_shuffle_of_an_iterable_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        shard_dataset(iter([]), str(tmp_path / "s-%d.tar"), shuffle=True)


def test_progress_is_a_callback_of_counts_and_nothing_is_written_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[ShardProgress] = []
    shard_dataset(Pictures(5), str(tmp_path / "a-%d.tar"), maxcount=2, progress=seen.append)
    assert capsys.readouterr() == ("", "")
    assert [(p.samples, p.shards, p.finished) for p in seen] == [
        (1, 0, False), (2, 0, False), (3, 1, False), (4, 1, False), (5, 2, False), (5, 3, True)
    ]  # fmt: skip
    assert {(p.total, p.resumed) for p in seen} == {(5, 0)}
    assert seen[-1].seconds >= seen[0].seconds > 0 and seen[-1].samples_per_second > 0
    # A resumed run counts the samples found in the complete shards apart.
    (tmp_path / "a-2.tar").unlink()
    seen.clear()
    shard_dataset(Pictures(5), str(tmp_path / "a-%d.tar"), maxcount=2, progress=seen.append,
                  mode="resume")  # fmt: skip
    assert [(p.samples, p.shards, p.resumed) for p in seen] == [(5, 2, 4), (5, 3, 4)]
    iterable: list[ShardProgress] = []
    shard_dataset(iter([{"txt": "x"}]), str(tmp_path / "i-%d.tar"), progress=iterable.append)
    assert [(p.samples, p.total) for p in iterable] == [(1, None), (1, None)]


KILLABLE = """
import sys, time
from PIL import Image
from tarkit.writing.from_dataset import shard_dataset

class Slow:
    def __len__(self):
        return 47
    def __getitem__(self, i):
        if i == 25 and sys.argv[2] == "stall":
            time.sleep(120)  # the test kills the process here
        return Image.new("RGB", (8, 8), (i, 0, 0)), i

shard_dataset(Slow(), sys.argv[1], maxcount=10, shuffle=False, mode="resume",
              manifest=sys.argv[1].replace("s-%03d.tar", "m.json"))
"""


def test_resume_after_sigkill_ends_with_the_bytes_of_a_clean_run(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(KILLABLE))
    clean, cut = tmp_path / "clean", tmp_path / "cut"
    done = subprocess.run([sys.executable, str(script), str(clean / "s-%03d.tar"), "go"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr

    process = subprocess.Popen([sys.executable, str(script), str(cut / "s-%03d.tar"), "stall"])
    sigkill_when(process, (cut / "s-001.tar").exists)
    names = sorted(p.name for p in cut.iterdir())
    # the third shard only as a temp file; each complete one with its index
    assert names[1:] == ["s-000.tar", "s-000.tar.idx", "s-001.tar", "s-001.tar.idx"]
    assert len(names) == 5 and names[0].startswith(".s-002.tar.") and names[0].endswith(".tmp")

    resumed = subprocess.run([sys.executable, str(script), str(cut / "s-%03d.tar"), "go"],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(p.name for p in cut.iterdir()) == sorted(p.name for p in clean.iterdir())
    for path in clean.iterdir():
        assert (cut / path.name).read_bytes() == path.read_bytes(), path.name


def test_writing_to_s3_uploads_only_complete_shards_and_resumes(
    tmp_path: Path, s3_server: str, s3_env: dict[str, str]
) -> None:
    import s3fs

    options = {"endpoint_url": s3_server}
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir("sharding-lib")
    pattern = "s3://sharding-lib/data/s-%02d.tar"
    seen: list[list[str]] = []

    def listing(info: object) -> None:
        seen.append(sorted(p.rsplit("/", 1)[-1] for p in fs.ls("sharding-lib/data", refresh=True)))

    manifest = shard_dataset(Pictures(12), pattern, maxcount=5, storage_options=options,
                             manifest="s3://sharding-lib/data/m.json", on_shard=listing)  # fmt: skip
    shards = [[f"s-0{i}.tar", f"s-0{i}.tar.idx"] for i in range(3)]
    assert seen == [shards[0], shards[0] + shards[1], shards[0] + shards[1] + shards[2]]
    assert [s.samples for s in manifest.shards] == [5, 5, 2]

    shard_dataset(Pictures(12), str(tmp_path / "s-%02d.tar"), maxcount=5)
    local = shard_bytes(tmp_path)
    assert [fs.cat(f"sharding-lib/data/s-{i:02d}.tar") for i in range(3)] == local
    assert b'"samples": 12' in fs.cat("sharding-lib/data/m.json")
    prefixes = tuple(temp_place(pattern % i)[1] for i in range(3))
    assert not [n for n in os.listdir(temp_place(pattern)[0]) if n.startswith(prefixes)]

    fs.rm("sharding-lib/data/s-02.tar")  # as if the run had stopped before its last shard
    again = shard_dataset(Pictures(12), pattern, maxcount=5, storage_options=options, mode="resume")
    assert [s.samples for s in again.shards] == [5, 5, 2]
    assert fs.cat("sharding-lib/data/s-02.tar") == local[2]


def test_a_killed_s3_run_leaves_a_named_staging_file_that_resume_removes(
    tmp_path: Path, s3_server: str, s3_env: dict[str, str]
) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=s3_server)
    fs.mkdir("staging")
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(KILLABLE))
    staging = tmp_path / "tmp"
    staging.mkdir()
    env = dict(os.environ, **s3_env, TMPDIR=str(staging))
    pattern = "s3://staging/d/s-%03d.tar"
    command = [sys.executable, str(script), pattern]
    process = subprocess.Popen([*command, "stall"], env=env)
    sigkill_when(process, lambda: any("-s-002.tar." in n for n in os.listdir(staging)))
    [left] = os.listdir(staging)
    assert left.startswith(temp_place("s3://staging/d/s-002.tar")[1]) and left.endswith(".tmp")
    assert left.startswith("tarkit-upload-")

    resumed = subprocess.run([*command, "go"], env=env, capture_output=True, text=True,
                             timeout=120)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert os.listdir(staging) == []
    shards = [f"s-{i:03d}.tar{index}" for i in range(5) for index in ("", ".idx")]
    assert sorted(fs.ls("staging/d", refresh=True)) == [
        f"staging/d/{name}" for name in ["m.columns", "m.json", *shards]
    ]


class Flaky:
    """20 text items; those in ``bad`` raise, and item ``stop`` ends the run as a crash would."""

    def __init__(self, bad: set[int], stop: int | None = None) -> None:
        self.bad, self.stop = bad, stop

    def __len__(self) -> int:
        return 20

    def __getitem__(self, index: int) -> dict[str, object]:
        if index == self.stop:
            raise KeyboardInterrupt  # not an item's failure: the run stops here
        if index in self.bad:
            raise ValueError(f"item {index} is broken")
        return {"__key__": f"k{index:02d}", "txt": f"text {index}"}

    def item_source(self, index: int) -> str:
        return f"row {index}"


def test_on_error_skip_leaves_out_failing_items_and_lists_them_beside_the_shards(
    tmp_path: Path,
) -> None:
    seen = []
    manifest = shard_dataset(Flaky({3, 11}), str(tmp_path / "s-%d.tar"), maxcount=4,
                             on_error="skip", on_reject=seen.append)  # fmt: skip
    assert manifest.samples == 18
    assert [(r.index, r.source) for r in seen] == [(3, "row 3"), (11, "row 11")]
    assert (tmp_path / "s-rejects.tsv").read_text() == (
        "3\trow 3\tdataset: item 3: ValueError: item 3 is broken\n"
        "11\trow 11\tdataset: item 11: ValueError: item 11 is broken\n"
    )


def test_resume_with_on_error_skip_counts_the_rejected_items_of_the_complete_shards(
    tmp_path: Path,
) -> None:
    options = dict(maxcount=4, on_error="skip", shuffle=True, seed=3)
    shard_dataset(Flaky({3, 11, 17}), str(tmp_path / "clean" / "s-%d.tar"), **options)
    pattern = str(tmp_path / "cut" / "s-%d.tar")
    with pytest.raises(KeyboardInterrupt):
        shard_dataset(Flaky({3, 11, 17}, stop=14), pattern, **options)
    cut = sorted(p.name for p in (tmp_path / "cut").glob("*.tar"))
    assert 0 < len(cut) < 5
    shard_dataset(Flaky({3, 11, 17}), pattern, mode="resume", **options)
    clean = {p.name: p.read_bytes() for p in (tmp_path / "clean").iterdir()}
    assert {p.name: p.read_bytes() for p in (tmp_path / "cut").iterdir()} == clean


# One item, many samples: Words items cut by shard_datasets.Chunks into i % 4 samples each.


def flat_shards(directory: Path, chunks: Chunks, positions: list[int], **limits: object) -> None:
    """The reference: the items' samples one after another through one ShardWriter."""
    words = Words(40)
    with ShardWriter(str(directory / "s-%02d.tar"), mtime=default_mtime(), **limits) as writer:
        for index in positions:
            writer.write_all(chunks.samples(words[index], index))


def tars(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("s-*.tar"))}


@pytest.mark.parametrize("limits", [{"maxcount": 7}, {"maxsize": "3K"}])
def test_items_give_none_one_or_several_samples_cut_as_one_stream_whatever_the_workers(
    tmp_path: Path, limits: dict[str, object]
) -> None:
    flat_shards(tmp_path / "flat", Chunks(), list(range(40)), **limits)
    expected = tars(tmp_path / "flat")
    assert len(expected) > 4
    seen: list[ShardProgress] = []
    runs = [("generators", Chunks(), 0), ("lists", Chunks(as_list=True), 0)]
    if "maxsize" in limits:
        runs.append(("workers", Chunks(), 2))  # DataLoader workers: once is enough
    for name, chunks, workers in runs:
        shard_dataset(Words(40), str(tmp_path / name / "s-%02d.tar"), to_sample=chunks,
                      num_workers=workers, progress=seen.append, **limits)  # fmt: skip
        assert tars(tmp_path / name) == expected, name
        assert (seen[-1].samples, seen[-1].empty, seen[-1].total) == (60, 10, 40)
    keys = [key for data in expected.values() for key, _ in samples_of(data)]
    assert keys[:4] == ["w0001/0", "w0002/0", "w0002/1", "w0003/0"]


def test_a_generator_failing_part_way_leaves_none_of_its_items_samples(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"^dataset: item 14: ValueError: no chunk 1 of item 14$"):
        shard_dataset(Words(40), str(tmp_path / "fail" / "s-%02d.tar"), to_sample=Chunks(bad=14),
                      maxcount=4)  # fmt: skip
    shard_dataset(Words(40), str(tmp_path / "skip" / "s-%02d.tar"), to_sample=Chunks(bad=14),
                  maxcount=4, on_error="skip")  # fmt: skip
    flat_shards(tmp_path / "flat", Chunks(), [i for i in range(40) if i != 14], maxcount=4)
    assert tars(tmp_path / "skip") == tars(tmp_path / "flat")
    assert (tmp_path / "skip" / "s-rejects.tsv").read_text() == (
        "14\t\tdataset: item 14: ValueError: no chunk 1 of item 14\n"
    )
    # On failure the complete shards stay: the 19 samples before the item's fill 4.
    assert tars(tmp_path / "fail") == dict(list(tars(tmp_path / "flat").items())[:4])


def test_a_key_repeated_within_an_item_or_after_the_item_before_fails_that_item(
    tmp_path: Path,
) -> None:
    def twice(item: int, index: int) -> list[dict[str, object]]:
        return [{"__key__": f"k{index}", "txt": "a"}, {"__key__": f"k{index}", "txt": "b"}]

    with pytest.raises(SampleError) as within:
        shard_dataset(range(3), str(tmp_path / "a-%d.tar"), to_sample=twice)
    assert str(within.value) == (
        "dataset: item 0: to_sample gave two samples with the key 'k0': give every sample a "
        "key of its own"
    )
    repeat = "sample 'w0022/1' follows a sample with the same key, and readers would merge the two"
    with pytest.raises(SampleError, match=f"^dataset: item 23: {repeat}"):
        shard_dataset(Words(40), str(tmp_path / "b-%d.tar"), to_sample=Chunks(repeat=23))
    shard_dataset(Words(40), str(tmp_path / "c-%d.tar"), to_sample=Chunks(repeat=23),
                  on_error="skip")  # fmt: skip
    assert (tmp_path / "c-rejects.tsv").read_text().startswith(f"23\t\tdataset: item 23: {repeat}")
    # One sample per item, too: two adjacent items with one key are no longer both written.
    items = [{"__key__": "a", "txt": "x"}, {"__key__": "a", "txt": "y"}]
    with pytest.raises(SampleError, match="^dataset: item 1: sample 'a' follows a sample"):
        shard_dataset(items, str(tmp_path / "d-%d.tar"))


def test_resume_of_a_run_cut_among_an_items_samples_ends_with_the_files_of_a_clean_run(
    tmp_path: Path,
) -> None:
    options: dict[str, Any] = dict(maxcount=5, on_error="skip", shuffle=True, seed=2)
    clean, cut = tmp_path / "clean", tmp_path / "cut"
    shard_dataset(Words(40), str(clean / "s-%02d.tar"), to_sample=Chunks(bad=14), **options)
    pattern = str(cut / "s-%02d.tar")
    order = sample_order(40, True, 2)
    with pytest.raises(KeyboardInterrupt):
        shard_dataset(Words(40), pattern, to_sample=Chunks(bad=14, stop=order[30]), **options)
    # Each complete shard has its record beside it: where it ends among the items' samples.
    records = [json.loads(p.read_text()) for p in sorted(cut.glob(".s-*.tar.shard.json"))]
    assert 0 < len(records) == len(list(cut.glob("s-*.tar"))) < len(list(clean.glob("s-*.tar")))
    assert any(record["samples"][1] > 0 for record in records if "samples" in record)
    with pytest.raises(OutputError, match="not a complete shard of the run being resumed"):
        shard_dataset(Words(40), pattern, to_sample=Chunks(bad=14), mode="resume",
                      **dict(options, maxcount=6))  # fmt: skip
    shard_dataset(Words(40), pattern, to_sample=Chunks(bad=14), mode="resume", **options)
    every = {p.name: p.read_bytes() for p in sorted(clean.iterdir())}
    assert {p.name: p.read_bytes() for p in sorted(cut.iterdir())} == every
    # A complete set resumed is left as it is: its records say where it ends.
    shard_dataset(Words(40), pattern, to_sample=Chunks(bad=14), mode="resume", **options)
    assert {p.name: p.read_bytes() for p in sorted(cut.iterdir())} == every
