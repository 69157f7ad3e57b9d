"""Encoding sample dicts by field extension: every value type, determinism, clear errors."""

from __future__ import annotations

import io
import json
import pickle

import numpy as np
import pytest
import torch
from conftest import samples_of
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from tarkit.errors import SampleError, UsageError
from tarkit.format.encoding import (
    ImageTransform,
    check_key,
    encode_field,
    encode_image,
    encode_sample,
    parse_resize,
)
from tarkit.format.tar_writer import encode_member


def decode(sample: dict[str, object]) -> dict[str, bytes]:
    [(_, fields)] = samples_of(encode_sample(sample) + bytes(1024))
    return fields


def test_each_value_type_is_encoded_by_its_extension() -> None:
    array = np.arange(6, dtype=np.int16).reshape(2, 3)
    fields = decode({
        "__key__": "k",
        "txt": "héllo",
        "bin": b"\x00\x01",
        "cls": 7,
        "json": {"a": [1, 2], "n": np.float32(0.5)},
        "npy": array,
        "pth": torch.arange(3),
        "pkl": {"x": 1},
        "png": Image.new("RGB", (3, 2), (9, 8, 7)),
        "seg.jpg": np.zeros((4, 4, 3), dtype=np.uint8),
        "__url__": "ignored.tar",
    })  # fmt: skip
    assert sorted(fields) == ["bin", "cls", "json", "npy", "pkl", "png", "pth", "seg.jpg", "txt"]
    assert fields["txt"] == "héllo".encode()
    assert fields["bin"] == b"\x00\x01"
    assert fields["cls"] == b"7"
    assert json.loads(fields["json"]) == {"a": [1, 2], "n": 0.5}
    assert np.array_equal(np.load(io.BytesIO(fields["npy"])), array)
    assert torch.equal(torch.load(io.BytesIO(fields["pth"])), torch.arange(3))
    assert pickle.loads(fields["pkl"]) == {"x": 1}
    png = Image.open(io.BytesIO(fields["png"]))
    assert png.format == "PNG" and png.getpixel((2, 1)) == (9, 8, 7)
    assert Image.open(io.BytesIO(fields["seg.jpg"])).size == (4, 4)


def test_fields_are_written_sorted_with_deterministic_headers() -> None:
    sample = {"__key__": "a/b", "txt": "t", "cls": 1, "json": [1]}
    raw = encode_sample(sample)
    assert raw == encode_sample(dict(reversed(list(sample.items()))))
    assert [k for k, _ in samples_of(raw + bytes(1024))] == ["a/b"]
    assert list(decode(sample)) == ["cls", "json", "txt"]


@pytest.mark.parametrize(
    "sample,message",
    [
        ({"txt": "x"}, "needs a '__key__'"),
        ({"__key__": "a.b", "txt": "x"}, "must not have a dot"),
        ({"__key__": "/abs", "txt": "x"}, "relative path"),
        ({"__key__": "k"}, "has no fields"),
        ({"__key__": "k", "txt": "x", "TXT": "y"}, "appears twice"),
        ({"__key__": "k", "cls": "3.5x", "jpg": 3}, "sample 'k': field 'jpg': cannot encode int"),
        ({"__key__": "k", "cls": 2.5}, "field 'cls': cannot encode float as cls"),
        ({"__key__": "k", "xyz": 3}, "no encoder for int values with extension 'xyz'"),
        ({"__key__": "k", "json": {1, 2}}, "field 'json': cannot encode set as json: TypeError"),
    ],
)
def test_bad_samples_are_errors_naming_key_and_field(sample: dict, message: str) -> None:
    with pytest.raises(SampleError, match=message.replace("(", r"\(")):
        encode_sample(sample)


@pytest.mark.parametrize(
    "field,value,cause",
    [
        ("npy", np.array([object(), 1], dtype=object), "ValueError: Object arrays cannot be saved"),
        ("png", Image.new("F", (2, 2)), "OSError: cannot write mode F as PNG"),
        ("seg.bmp", Image.new("F", (2, 2)), "OSError: cannot write mode F as BMP"),
        ("pkl", lambda x: x, "PicklingError: Can't pickle"),
        ("pth", lambda x: x, "PicklingError: Can't pickle"),
    ],
)
def test_a_value_its_encoder_fails_on_is_an_error_naming_key_field_and_cause(
    field: str, value: object, cause: str
) -> None:
    with pytest.raises(SampleError) as caught:
        encode_sample({"__key__": "train/7", field: value})
    ext = field.rsplit(".", 1)[-1]
    prefix = f"sample 'train/7': field '{field}': cannot encode {type(value).__name__} as {ext}: "
    assert str(caught.value).startswith(prefix + cause)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("value", [float("nan"), {"loss": float("inf")}, np.array([-np.inf])])
def test_nan_and_infinity_are_refused_rather_than_written_as_invalid_json(value: object) -> None:
    with pytest.raises(SampleError, match="field 'json': .*NaN and infinity are not JSON"):
        encode_sample({"__key__": "k", "json": value})


def test_check_key_accepts_relative_paths_without_dots_in_the_name() -> None:
    assert check_key("train/v1.0/x") == "train/v1.0/x"
    with pytest.raises(SampleError):
        check_key("a/../b")


def test_jpeg_of_an_rgba_image_is_converted_to_rgb() -> None:
    data = encode_image(Image.new("RGBA", (5, 5), (1, 2, 3, 4)), "jpg")
    assert Image.open(io.BytesIO(data)).mode == "RGB"
    assert encode_field("k", "webp", Image.new("P", (2, 2)))[:4] == b"RIFF"


def test_image_transform_resizes_and_changes_format() -> None:
    source = io.BytesIO()
    Image.new("RGB", (100, 40), (200, 10, 10)).save(source, format="PNG")
    transform = ImageTransform("50x50", "jpg", quality=75)
    field, data = transform.apply("seg.png", source.getvalue(), "x.png")
    assert field == "seg.jpg"
    image = Image.open(io.BytesIO(data))
    assert (image.format, image.size) == ("JPEG", (50, 20))
    assert ImageTransform().apply("png", b"not decoded", "x") == ("png", b"not decoded")
    assert transform.apply("txt", b"left alone", "x") == ("txt", b"left alone")
    with pytest.raises(SampleError, match="cannot decode the image"):
        transform.apply("jpg", b"garbage", "x.jpg")


def test_exif_orientation_is_applied_before_reencoding() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise on display
    source = io.BytesIO()
    Image.new("RGB", (40, 20)).save(source, format="JPEG", exif=exif)
    _, data = ImageTransform(image_format="png").apply("jpg", source.getvalue(), "x.jpg")
    assert Image.open(io.BytesIO(data)).size == (20, 40)


@pytest.mark.parametrize(
    "text", ["", "12", "x20", "20x", "0x5", "5x5?", "axb", "\u00b2x2", "\u0663x3"]
)
def test_bad_resize_specs_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError):
        parse_resize(text)


@settings(max_examples=200, deadline=None)
@given(
    key=st.from_regex(r"[a-z0-9_/]{0,60}[a-z0-9_]", fullmatch=True).filter(
        lambda k: not k.startswith("/") and "//" not in k
    ),
    fields=st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9.]{0,50}", fullmatch=True).filter(lambda f: ".." not in f),
        st.binary(max_size=1500),
        min_size=1,
        max_size=4,
    ),
    mtime=st.integers(0, 8**11 - 1),
)
def test_encoded_members_are_exactly_what_the_tar_writer_makes(
    key: str, fields: dict[str, bytes], mtime: int
) -> None:
    sample = {"__key__": key, **fields}
    expected = b"".join(
        encode_member(f"{key}.{field}", fields[field], mtime=mtime) for field in sorted(fields)
    )
    assert encode_sample(sample, mtime=mtime) == expected


def test_long_and_non_ascii_names_take_the_tar_writers_pax_path() -> None:
    for key in ("d" * 150 + "/k", "ünïcode"):
        expected = encode_member(f"{key}.txt", b"x", mtime=5)
        assert encode_sample({"__key__": key, "txt": b"x"}, mtime=5) == expected
