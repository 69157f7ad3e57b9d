"""``resize=``: image fields decoded reduced (JPEG's DCT scaling) to the size they are
resized to, ending as a full decode and the same resize would."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import webdataset as wds
from loader_data import make_shards
from PIL import Image

import tarkit
from tarkit import IndexedDataset, ShardDataset
from tarkit.errors import InputError, UsageError
from tarkit.format.encoding import parse_resize, resize_image
from tarkit.format.index import SUFFIX, index_stream
from tarkit.format.tar_writer import TarWriter
from tarkit.loading.resized_images import ResizedImageHandler
from tarkit.loading.skips import UNDECODABLE

SPECS = ["rgb8", "l8", "rgba8", "torchrgb8", "torchl", "pil"]
SIZES = ["48x48:crop", "48x48", "48x48^", "40x30!"]


def photo(width: int, height: int, seed: int, *, grain: float = 12, cell: int = 24) -> Image.Image:
    """A photo-like picture: smooth random colour blobs plus film grain (as bench/data.py)."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (height // cell + 3, width // cell + 3, 3), dtype=np.uint8)
    smooth = Image.fromarray(coarse).resize((width + 2 * cell, height + 2 * cell), Image.BICUBIC)
    smooth = smooth.crop((cell, cell, width + cell, height + cell))
    grainy = np.asarray(smooth, np.float32) + rng.normal(0, grain, (height, width, 3))
    return Image.fromarray(grainy.clip(0, 255).astype(np.uint8))


def encoded(image: Image.Image, fmt: str = "JPEG", **options: Any) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def rotated_jpeg(width: int, height: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 6  # shown turned 90° clockwise
    return encoded(photo(width, height, 5), exif=exif)


IMAGES = {
    "jpeg": lambda: encoded(photo(200, 150, 1), quality=90),
    "progressive jpeg": lambda: encoded(photo(203, 151, 2), progressive=True),
    "greyscale jpeg": lambda: encoded(photo(200, 150, 3).convert("L")),
    "cmyk jpeg": lambda: encoded(photo(200, 150, 4).convert("CMYK")),
    "exif-rotated jpeg": lambda: rotated_jpeg(200, 150),
    "png": lambda: encoded(photo(200, 150, 6), "PNG"),
    "palette png": lambda: encoded(photo(200, 150, 7).convert("P"), "PNG", transparency=3),
    "webp": lambda: encoded(photo(200, 150, 8), "WEBP"),
    "tiny jpeg": lambda: encoded(photo(30, 20, 9)),
}


def psnr(ours: Any, theirs: Any) -> float:
    error = np.mean((np.asarray(ours, np.float64) - np.asarray(theirs, np.float64)) ** 2)
    return float("inf") if error == 0 else float(10 * np.log10(255**2 / error))


def same_form(ours: Any, theirs: Any) -> bool:
    """The same type, and the same size and mode (PIL) or shape and dtype (arrays)."""
    if type(ours) is not type(theirs):
        return False
    if isinstance(ours, Image.Image):
        return (ours.size, ours.mode) == (theirs.size, theirs.mode)
    return (ours.shape, ours.dtype) == (theirs.shape, theirs.dtype)


def dimensions(image: Any) -> tuple[int, int]:
    """Width and height of a PIL image, an H×W(×C) array or a (C×)H×W tensor."""
    if isinstance(image, Image.Image):
        return image.size
    if isinstance(image, torch.Tensor):
        return image.shape[-1], image.shape[-2]
    return image.shape[1], image.shape[0]


def write_shard(path: Path, samples: list[dict[str, bytes]]) -> str:
    with open(path, "wb") as stream, TarWriter(stream) as writer:
        for i, fields in enumerate(samples):
            for field, data in sorted(fields.items()):
                writer.add(f"k{i:03d}.{field}", data)
    return str(path)


# -- what comes out --------------------------------------------------------------------


@pytest.mark.parametrize("name", IMAGES)
def test_reduced_decode_has_the_shape_dtype_and_mode_of_full_decode_and_resize(name):
    data = IMAGES[name]()
    for spec in SPECS:
        for text in SIZES:
            size = parse_resize(text)
            ours = ResizedImageHandler(spec, size)("jpg", data)
            full = ResizedImageHandler(spec, size, reduced=False)("jpg", data)
            assert same_form(ours, full), (spec, text)
            if text.endswith(("crop", "!")):  # one size for every image: what batches need
                assert dimensions(ours) == size[:2], (spec, text)


@pytest.mark.parametrize("spec", SPECS)
def test_at_the_images_own_size_every_spec_gives_what_webdatasets_decode_gives(spec):
    data = encoded(photo(203, 151, 10))
    size = parse_resize("203x151!")
    theirs = wds.autodecode.imagehandler(spec)("jpg", data)
    for reduced in (True, False):
        ours = ResizedImageHandler(spec, size, reduced=reduced)("jpg", data)
        assert type(ours) is type(theirs)
        if isinstance(ours, Image.Image):
            assert ours.mode == theirs.mode and ours.tobytes() == theirs.tobytes()
        else:
            assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
            assert (ours == theirs).all()


@pytest.mark.parametrize("text", SIZES)
def test_the_full_path_is_webdatasets_decode_then_the_resize_of_tarkit_shard(text):
    data = encoded(photo(200, 150, 11))
    full = ResizedImageHandler("pil", parse_resize(text), reduced=False)("jpg", data)
    expected = resize_image(wds.autodecode.imagehandler("pil")("jpg", data), *parse_resize(text))
    assert full.tobytes() == expected.tobytes()


@pytest.mark.parametrize("text", ["64x64:crop", "64x64", "100x10!"])
def test_images_smaller_than_the_target_decode_whole_and_match_the_full_path_exactly(text):
    data = encoded(photo(30, 20, 12))
    ours = ResizedImageHandler("rgb8", parse_resize(text))("jpg", data)
    full = ResizedImageHandler("rgb8", parse_resize(text), reduced=False)("jpg", data)
    assert ours.shape == full.shape and (ours == full).all()


@pytest.mark.parametrize(
    "width,height,grain,text",
    [
        (500, 375, 12, "224x224"),  # an ImageNet-sized photo: decoded at 1/2
        (500, 375, 12, "112x112:crop"),
        (500, 375, 12, "64x64:crop"),  # at 1/4
        (413, 314, 15, "64x64:crop"),  # sides not multiples of 8: a part block at the edge
        (256, 256, 8, "64x64:crop"),  # the tiny set's case: exactly 1/4, no resize after
        (1024, 768, 8, "224x224:crop"),
        (1021, 763, 8, "32x32!"),  # at 1/8
    ],
)
def test_reduced_decode_is_within_35_db_of_full_decode_and_resize(width, height, grain, text):
    data = encoded(photo(width, height, width + height, grain=grain), quality=88)
    size = parse_resize(text)
    ours = ResizedImageHandler("rgb8", size)("jpg", data)
    full = ResizedImageHandler("rgb8", size, reduced=False)("jpg", data)
    assert ours.shape == full.shape
    assert not (ours == full).all()  # decoded reduced: the pixels differ a little
    assert psnr(ours, full) >= 35


def test_exif_orientation_is_not_applied_as_webdatasets_decode_does_not(tmp_path):
    path = write_shard(tmp_path / "turned.tar", [{"jpg": rotated_jpeg(80, 40), "cls": b"1"}])
    (whole, _), = ShardDataset(path, decode="rgb8", to_tuple="jpg cls")  # fmt: skip
    (small, _), = ShardDataset(path, decode="rgb8", resize="20x20", to_tuple="jpg cls")  # fmt: skip
    assert whole.shape == (40, 80, 3) and small.shape == (10, 20, 3)


# -- through the datasets --------------------------------------------------------------


def test_resize_through_a_dataloader_with_two_workers_gives_what_the_handler_gives(tmp_path):
    pictures = [encoded(photo(160, 120, 20 + i)) for i in range(12)]
    paths = [
        write_shard(tmp_path / f"p-{n}.tar",
                    [{"jpg": pictures[i], "cls": b"%d" % i} for i in range(n * 6, n * 6 + 6)])
        for n in range(2)
    ]  # fmt: skip
    handler = ResizedImageHandler("torchrgb8", parse_resize("32x32:crop"))
    expected = {i: handler("jpg", data) for i, data in enumerate(pictures)}
    loader = tarkit.loader(paths, 3, 2, decode="torchrgb8", resize="32x32:crop",
                           to_tuple="jpg cls", timeout=60)  # fmt: skip
    seen = {}
    for images, labels in loader:
        assert images.shape == (len(labels), 3, 32, 32) and images.dtype == torch.uint8
        seen.update(zip(labels.tolist(), images, strict=True))
    assert sorted(seen) == list(range(12))
    assert all(torch.equal(seen[i], expected[i]) for i in seen)


def test_indexed_dataset_resizes_as_shard_dataset_does(tmp_path):
    path = write_shard(tmp_path / "s.tar", [{"jpg": encoded(photo(150, 100, 30 + i)),
                                             "cls": b"%d" % i} for i in range(3)])  # fmt: skip
    with open(path, "rb") as stream:
        Path(path + SUFFIX).write_bytes(index_stream(stream, path))
    options: dict[str, Any] = {"decode": "rgb8", "resize": "24x24:crop", "to_tuple": "jpg cls"}
    streamed = list(ShardDataset(path, **options))
    indexed = IndexedDataset(path, **options)
    assert len(indexed) == len(streamed) == 3
    for i, (image, label) in enumerate(streamed):
        assert image.shape == (24, 24, 3) and (indexed[i][0] == image).all()
        assert indexed[i][1] == label == i


def test_an_undecodable_image_names_its_sample_or_is_counted_under_skip(tmp_path):
    paths, _ = make_shards(tmp_path, [4], images=True, bad_jpegs=["s00-002"])
    with pytest.raises(InputError, match="cannot decode field 'jpg' of sample 's00-002'"):
        list(ShardDataset(paths, decode="rgb8", resize="4x4:crop"))
    dataset = ShardDataset(paths, decode="rgb8", resize="4x4:crop", handler="skip")
    with pytest.warns(UserWarning):
        images = [s["jpg"] for s in dataset]
    assert [i.shape for i in images] == [(4, 4, 3)] * 3
    assert dataset.skipped.samples == {UNDECODABLE: 1}


# -- refusals --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "resize", ["224", "0x224", "224x", "axb", "\u00b2x2", "224x224:fill", 224, b"64x64"]
)
def test_malformed_sizes_are_refused_when_the_dataset_is_made(tmp_path, resize):
    paths, _ = make_shards(tmp_path, [2], images=True)
    with open(paths[0], "rb") as stream:
        Path(paths[0] + SUFFIX).write_bytes(index_stream(stream, paths[0]))
    for make in (ShardDataset, IndexedDataset, lambda p, **o: tarkit.loader(p, 2, 2, **o)):
        with pytest.raises(UsageError, match=f"^resize {resize!r}: expected WxH"):
            make(paths[0], decode="rgb8", resize=resize)


@pytest.mark.parametrize("decode", [None, [], "RGB8"])
def test_resize_needs_an_image_spec_that_webdataset_knows(tmp_path, decode):
    paths, _ = make_shards(tmp_path, [2], images=True)
    with pytest.raises(UsageError, match="image spec"):
        ShardDataset(paths, decode=decode, resize="8x8")
