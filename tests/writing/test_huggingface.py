"""Hugging Face datasets into shards directly, and back through datasets' webdataset reader."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import datasets  # the hf extra, which `bin/setup dev` installs
import pytest
from conftest import webdataset_samples
from PIL import Image

from tarkit.errors import UsageError
from tarkit.writing.from_dataset import shard_dataset


def picture(color: tuple[int, int, int], fmt: str) -> Image.Image:
    out = io.BytesIO()
    Image.new("RGB", (8, 6), color).save(out, format=fmt)
    return Image.open(io.BytesIO(out.getvalue()))


@pytest.fixture
def pets() -> object:
    features = datasets.Features({
        "image": datasets.Image(),
        "label": datasets.ClassLabel(names=["cat", "dog"]),
        "caption": datasets.Value("string"),
        "score": datasets.Value("float32"),
        "boxes": datasets.Sequence(datasets.Value("int32")),
        "mask": datasets.Array2D(shape=(2, 2), dtype="uint8"),
    })  # fmt: skip
    rows = {
        "image": [picture((i * 40, 0, 0), "PNG" if i % 2 else "JPEG") for i in range(4)],
        "label": [0, 1, 1, 0],
        "caption": [f"pet {i}" for i in range(4)],
        "score": [0.5, 1.0, 1.5, None],
        "boxes": [[i, i + 1] for i in range(4)],
        "mask": [[[i, 0], [0, i]] for i in range(4)],
    }
    return datasets.Dataset.from_dict(rows, features=features)


def test_features_become_fields_by_type_and_class_names_are_saved(
    tmp_path: Path, pets: object
) -> None:
    manifest = shard_dataset(pets, str(tmp_path / "s-%d.tar"), maxcount=2)
    assert manifest.samples == 4
    samples = [s for i in range(2) for s in webdataset_samples(tmp_path / f"s-{i}.tar")]
    key, first = samples[0]
    assert key == "000000000"
    assert sorted(first) == ["boxes.json", "caption.txt", "cls", "jpg", "mask.npy", "score.json"]
    assert sorted(samples[1][1]) == sorted(["png", *[f for f in first if f != "jpg"]])
    assert (
        first["jpg"] == pets.cast_column("image", datasets.Image(decode=False))[0]["image"]["bytes"]
    )  # the image's own bytes, not re-encoded
    assert first["cls"] == b"0" and first["caption.txt"] == b"pet 0"
    assert json.loads(first["boxes.json"]) == [0, 1]
    assert "score.json" not in samples[3][1]  # None leaves the field out
    assert json.loads((tmp_path / "classes.json").read_text()) == ["cat", "dog"]


def test_fields_rename_reencode_and_leave_out_columns(tmp_path: Path, pets: object) -> None:
    shard_dataset(pets, str(tmp_path / "s-%d.tar"),
                  fields={"image": "jpg", "caption": "txt", "boxes": None, "mask": None})  # fmt: skip
    samples = webdataset_samples(tmp_path / "s-0.tar")
    assert [sorted(f) for _, f in samples] == [["cls", "jpg", "score.json", "txt"]] * 3 + [
        ["cls", "jpg", "txt"]
    ]
    for _, fields in samples:
        assert Image.open(io.BytesIO(fields["jpg"])).format == "JPEG"  # PNGs re-encoded


def test_shards_read_back_with_datasets_webdataset_loader(
    tmp_path: Path, pets: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    shard_dataset(pets, str(tmp_path / "shards" / "s-%d.tar"), maxcount=2, num_workers=2,
                  fields={"image": "jpg", "mask": None})  # fmt: skip
    files = sorted(str(p) for p in (tmp_path / "shards").glob("*.tar"))
    loaded = datasets.load_dataset("webdataset", data_files={"train": files}, split="train",
                                   cache_dir=str(tmp_path / "cache"))  # fmt: skip
    assert len(loaded) == 4
    assert loaded[1]["__key__"] == "000000001"
    assert loaded[1]["cls"] == 1 and loaded[1]["caption.txt"] == "pet 1"
    assert loaded[2]["jpg"].size == (8, 6)
    assert os.path.exists(tmp_path / "shards" / "classes.json")


def test_an_iterable_dataset_is_written_in_its_order(tmp_path: Path, pets: object) -> None:
    streamed = pets.to_iterable_dataset()
    manifest = shard_dataset(streamed, str(tmp_path / "s-%d.tar"), fields={"mask": None})
    assert manifest.samples == 4
    keys = [key for key, _ in webdataset_samples(tmp_path / "s-0.tar")]
    assert keys == [f"{i:09d}" for i in range(4)]


def test_a_dataset_dict_asks_for_a_split_by_name(tmp_path: Path, pets: object) -> None:
    splits = datasets.DatasetDict({"train": pets, "test": pets})
    with pytest.raises(UsageError) as info:
        shard_dataset(splits, str(tmp_path / "s-%d.tar"))
    assert str(info.value) == (
        "a DatasetDict holds the splits train, test, not items: pass one split, e.g. ds['train']"
    )
    streamed = datasets.IterableDatasetDict({"validation": pets.to_iterable_dataset()})
    with pytest.raises(
        UsageError, match=r"^an IterableDatasetDict holds the splits validation, not items"
    ):
        shard_dataset(streamed, str(tmp_path / "s-%d.tar"))
    assert list(tmp_path.iterdir()) == []
