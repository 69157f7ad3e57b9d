"""Image sizes read from headers: the same as Pillow's for every format read, None (never
an exception) for what is not one of them or is cut short."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from tarkit.format.images import image_size

SIZES = [(1, 1), (37, 91), (1000, 3)]
FORMATS = [
    ("JPEG", "RGB", {}),
    ("JPEG", "L", {}),
    ("JPEG", "CMYK", {}),
    ("JPEG", "RGB", {"progressive": True}),
    ("PNG", "RGBA", {}),
    ("PNG", "P", {}),
    ("GIF", "P", {}),
    ("WEBP", "RGB", {}),
    ("WEBP", "RGB", {"lossless": True}),
    ("WEBP", "RGBA", {}),  # VP8X: the extended header, with an alpha chunk
    ("BMP", "RGB", {}),
]


def encoded(size: tuple[int, int], kind: str, mode: str = "RGB", **options: object) -> bytes:
    out = io.BytesIO()
    Image.new(mode, size).save(out, kind, **options)
    return out.getvalue()


@pytest.mark.parametrize("kind, mode, options", FORMATS, ids=lambda v: str(v))
def test_size_is_pillows_for_every_format_read(kind: str, mode: str, options: dict) -> None:
    for size in SIZES:
        data = encoded(size, kind, mode, **options)
        with Image.open(io.BytesIO(data)) as image:
            assert image_size(data) == image.size == size


def test_a_jpeg_with_exif_and_a_comment_before_its_frame_header() -> None:
    image = Image.new("RGB", (20, 10))
    exif = image.getexif()
    exif[0x0112] = 6  # rotated: the stored size is given, as Pillow's .size gives it
    out = io.BytesIO()
    image.save(out, "JPEG", exif=exif, comment=b"x" * 5000)
    assert image_size(out.getvalue()) == (20, 10)


def test_a_field_inside_a_larger_buffer_is_read_in_place() -> None:
    data = encoded((7, 5), "PNG")
    buffer = b"\xff" * 100 + data + b"\x89" * 50
    assert image_size(buffer, 100, 100 + len(data)) == (7, 5)
    assert image_size(buffer, 100, 120) is None  # the header does not fit before stop


@pytest.mark.parametrize("kind, mode, options", FORMATS, ids=lambda v: str(v))
def test_a_header_cut_anywhere_gives_none_or_the_size_never_an_error(
    kind: str, mode: str, options: dict
) -> None:
    data = encoded((33, 17), kind, mode, **options)
    for end in range(min(len(data), 400)):
        assert image_size(data[:end]) in (None, (33, 17))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not an image at all",
        encoded((3, 3), "TIFF"),  # a format not read here
        b"\xff\xd8\xff\xda" + bytes(20),  # JPEG scan data before any frame header
        b"\xff\xd8\x00\x00" + bytes(20),  # not a marker where one must be
        b"\xff\xd8\xff\xc0\x00\x11\x08\x00\x00\x00\x05" + bytes(12),  # height 0
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDX" + bytes(8),
        b"RIFF\x00\x00\x00\x00WEBPVP8 " + bytes(20),  # no key frame start code
        b"GIF88a" + bytes(10),
    ],
)
def test_what_is_not_a_readable_header_gives_none(data: bytes) -> None:
    assert image_size(data) is None
