"""Tallies of shards: every figure against the samples written, with the compiled scanner
and the pure reader alike; merged tallies find keys in more than one shard; a manifest's
tally reads no shard."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from conftest import make_tar
from PIL import Image

from tarkit.format.manifest import ShardInfo
from tarkit.format.samples import SkipLog
from tarkit.stream import summary as summaries
from tarkit.stream.distribution import Spread
from tarkit.stream.summary import ClassCount, Tally, tally_shard

pytestmark = pytest.mark.usefixtures("reader")


def picture(size: tuple[int, int], kind: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(out, kind)
    return out.getvalue()


def shard(path: Path, samples: list[tuple[str, dict[str, bytes]]]) -> str:
    path.write_bytes(make_tar((f"{key}.{field}", data) for key, fields in samples
                              for field, data in fields.items()))  # fmt: skip
    return str(path)


def test_counts_fields_sizes_classes_and_image_sizes(tmp_path: Path) -> None:
    jpegs = [picture((10 + i, 20), "JPEG") for i in range(5)]
    png = picture((300, 7), "PNG")
    samples = [(f"k{i}", {"jpg": jpegs[i], "cls": b"%d" % (i % 2), "txt": b"x" * i})
               for i in range(5)]  # fmt: skip
    samples.append(("k5", {"seg.png": png, "cls": b"1\n"}))
    path = shard(tmp_path / "a.tar", samples)
    summary = tally_shard(path).summary(["even", "odd"])

    assert (summary.shards, summary.samples, summary.read) == (1, 6, True)
    assert summary.bytes == (tmp_path / "a.tar").stat().st_size
    fields = {f.name: f for f in summary.fields}
    assert list(fields) == ["jpg", "cls", "txt", "seg.png"]
    sizes = sorted(len(j) for j in jpegs)
    assert fields["jpg"].samples == 5
    assert fields["jpg"].size == Spread(5, sum(sizes), sizes[0], sizes[2], sizes[4])
    assert fields["txt"].size == Spread(5, 10, 0, 2, 4)
    assert fields["cls"].samples == 6 and fields["cls"].images is None
    images = fields["jpg"].images
    assert images is not None and (images.images, images.unread) == (5, 0)
    assert images.width == Spread(5, 60, 10, 12, 14) and images.height == Spread(5, 100, 20, 20, 20)
    assert fields["seg.png"].images.width == Spread(1, 300, 300, 300, 300)  # type: ignore[union-attr]
    [histogram] = summary.classes
    assert histogram.field == "cls" and histogram.distinct == 2
    assert histogram.counts == [ClassCount("0", "even", 3), ClassCount("1", "odd", 3)]
    assert summary.duplicate_keys == 0 and summary.keys_checked == 6


def test_an_image_field_whose_header_gives_no_size_is_counted_as_such(tmp_path: Path) -> None:
    path = shard(tmp_path / "a.tar", [("a", {"jpg": b"not a jpeg"}),
                                      ("b", {"jpg": picture((4, 3), "JPEG")}),
                                      ("c", {"tif": picture((4, 3), "TIFF")})])  # fmt: skip
    fields = {f.name: f.images for f in tally_shard(path).summary().fields}
    assert fields["jpg"] is not None and (fields["jpg"].images, fields["jpg"].unread) == (1, 1)
    assert fields["tif"] is not None and (fields["tif"].images, fields["tif"].unread) == (0, 1)
    assert fields["tif"].width is None


def test_class_values_that_are_not_indices_keep_text_order_and_get_no_names(
    tmp_path: Path,
) -> None:
    path = shard(tmp_path / "a.tar", [(f"k{i}", {"label.cls": name})
                                      for i, name in enumerate([b"dog", b"cat", b"dog"])])  # fmt: skip
    [histogram] = tally_shard(path).summary({"label": ["x", "y"]}).classes
    assert histogram.counts == [ClassCount("cat", None, 1), ClassCount("dog", None, 2)]
    numbered = shard(tmp_path / "b.tar", [("a", {"label.cls": b"1"}), ("b", {"label.cls": b"10"})])
    [histogram] = tally_shard(numbered).summary({"label": ["x", "y"]}).classes
    assert histogram.counts == [ClassCount("1", "y", 1), ClassCount("10", None, 1)]


def test_a_field_with_too_many_values_gets_no_histogram(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(summaries, "LABEL_LIMIT", 3)
    monkeypatch.setattr(summaries, "_FOLD", 2)
    path = shard(tmp_path / "a.tar", [(f"k{i}", {"cls": b"%d" % i}) for i in range(6)])
    [histogram] = tally_shard(path).summary().classes
    assert (histogram.counts, histogram.distinct) == ([], None)
    few = Tally()
    few.merge(tally_shard(shard(tmp_path / "b.tar", [("a", {"cls": b"1"})])))
    few.merge(tally_shard(path))  # many merged into few: none
    assert few.summary().classes[0].distinct is None
    long = shard(tmp_path / "c.tar", [("a", {"cls": b"1"}), ("b", {"cls": b"x" * 257})])
    assert tally_shard(long).summary().classes[0].distinct is None  # a value no class has


def test_keys_in_more_than_one_shard_are_counted_and_named(tmp_path: Path) -> None:
    a = shard(tmp_path / "a.tar", [(k, {"txt": b"1"}) for k in ("x", "y", "z")])
    b = shard(tmp_path / "b.tar", [(k, {"txt": b"2"}) for k in ("w", "y")])
    c = shard(tmp_path / "c.tar", [(k, {"txt": b"3"}) for k in ("z", "y", "v")])
    total = Tally()
    for path in (a, b, c):
        total.merge(tally_shard(path))
    summary = total.summary()
    # y twice again in c, z once: each time a shard brings a key already seen
    assert (summary.duplicate_keys, summary.duplicate_examples) == (3, ["y", "y", "z"])
    assert (summary.samples, summary.shards, summary.keys_checked) == (8, 3, 8)


def test_past_the_key_limit_the_check_says_how_many_keys_it_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(summaries, "KEY_LIMIT", 4)
    total = Tally()
    for name, keys in (("a", "pq"), ("b", "rp"), ("c", "pz"), ("d", "qw")):
        total.merge(tally_shard(shard(tmp_path / f"{name}.tar", [(k, {"t": b""}) for k in keys])))
    summary = total.summary()
    # c's keys are checked against those held, but there is no room to hold them: d's keys
    # are not checked (q comes back unseen)
    assert (summary.duplicate_keys, summary.keys_checked, summary.samples) == (2, 6, 8)


def test_skipped_members_are_counted_and_strict_refuses_them(tmp_path: Path) -> None:
    path = tmp_path / "a.tar"
    path.write_bytes(make_tar([("a.txt", b"1"), ("README", b"no field"), ("b.txt", b"2")]))
    skips = SkipLog()
    assert tally_shard(str(path), skips=skips).samples == 2 and skips.total == 1
    from tarkit.errors import SampleError

    with pytest.raises(SampleError, match="README"):
        tally_shard(str(path), strict=True)


def test_a_manifests_tally_gives_counts_bytes_and_its_keys(tmp_path: Path) -> None:
    entries = [ShardInfo("a.tar", 2, 3072, None, ["x", "y"]), ShardInfo("b.tar", 3, 4096, None,
               ["u", "v", "x"])]  # fmt: skip
    summary = Tally.of_manifest(entries).summary()
    assert (summary.shards, summary.samples, summary.bytes, summary.read) == (2, 5, 7168, False)
    assert summary.samples_per_shard == Spread(2, 5, 2, 2, 3)
    assert (summary.duplicate_keys, summary.keys_checked, summary.fields) == (1, 5, [])
    unlisted = Tally.of_manifest([ShardInfo("a.tar", 2, 3072)]).summary()
    assert (unlisted.duplicate_keys, unlisted.keys_checked) == (None, 0)


def test_the_json_shape(tmp_path: Path) -> None:
    path = shard(tmp_path / "a.tar", [("a", {"cls": b"0", "jpg": picture((4, 3), "JPEG")})])
    data = json.loads(json.dumps(tally_shard(path).summary(["zero"]).to_json()))
    assert set(data) == {"shards", "samples", "bytes", "read", "samples_per_shard",
                         "bytes_per_shard", "fields", "classes", "keys"}  # fmt: skip
    assert data["fields"]["jpg"]["images"]["width"]["median"] == 4
    assert data["fields"]["cls"] == {
        "samples": 1, "size": {"count": 1, "total": 1, "min": 1, "median": 1, "max": 1, "exact": True}
    }  # fmt: skip
    assert data["classes"] == {"cls": {"distinct": 1, "labels": [{"label": "0", "name": "zero",
                                                                    "samples": 1}]}}  # fmt: skip
    assert data["keys"] == {"checked": 1, "duplicates": 0, "examples": []}


def test_fields_behind_extension_headers_and_in_the_read_buffer_count_alike(
    tmp_path: Path,
) -> None:
    long = "d/" * 80 + "x"  # a name that needs an extension header: the Python reader's
    path = shard(tmp_path / "a.tar", [(long, {"txt": b"hello", "cls": b"3"}),
                                      ("b", {"txt": b"hi", "cls": b"3"})])  # fmt: skip
    summary = tally_shard(path).summary()
    assert [(f.name, f.samples, f.size.total) for f in summary.fields] == [("txt", 2, 7),
                                                                          ("cls", 2, 2)]  # fmt: skip
    assert summary.classes[0].counts == [ClassCount("3", None, 2)]
