"""An image's width and height, read from its header without decoding it.

JPEG (the frame header, SOF), PNG (IHDR), GIF (the logical screen), WebP (VP8, VP8L and
VP8X) and BMP are read; the format is told by the image's first bytes (the signatures of
:mod:`.file_types`), not by the field's name. Only the header is looked at: a few dozen bytes for PNG, GIF, WebP and BMP, and the
segments before the frame header for JPEG (markers and lengths, skipping their contents).
This is the one place that reads image sizes; it is about thirty times faster than
Pillow's ``Image.open(…).size`` (which reads the same header, but makes an image object and
a file around it), so a summary of millions of images costs little beyond reading them.

The size is the one stored: an EXIF orientation that turns the picture is not applied
(as ``Image.open(…).size`` does not).

>>> png = bytes.fromhex("89504e470d0a1a0a0000000d49484452") + (640).to_bytes(4, "big") + (
...     480).to_bytes(4, "big")
>>> image_size(png)
(640, 480)
>>> image_size(b"GIF89a" + (3).to_bytes(2, "little") + (2).to_bytes(2, "little"))
(3, 2)
>>> image_size(b"not an image") is None
True
"""

from __future__ import annotations

from .file_types import GIF_SIGNATURES, JPEG_SIGNATURE, PNG_SIGNATURE, RIFF_SIGNATURE, WEBP_FORM

# What a JPEG marker (the byte after 0xFF) says to do, looked up by its value: a segment
# with a length to skip; a frame header (SOF0–SOF15 but DHT C4, JPG C8 and DAC CC, which
# share their range), which holds the size; a marker without a length (TEM, RST0–RST7,
# SOI); a fill byte (0xFF) before a marker; or the scan or the end, before any frame.
_SKIP, _FRAME, _BARE, _FILL, _NONE = range(5)
_MARKERS = tuple(
    _FRAME if 0xC0 <= m <= 0xCF and m not in (0xC4, 0xC8, 0xCC)
    else _BARE if m == 0x01 or 0xD0 <= m <= 0xD8
    else _FILL if m == 0xFF
    else _NONE if m in (0x00, 0xD9, 0xDA)
    else _SKIP
    for m in range(256)
)  # fmt: skip


def image_size(data: bytes, start: int = 0, stop: int | None = None) -> tuple[int, int] | None:
    """``(width, height)`` of the image in ``data[start:stop]``; None when its format is
    not one read here, or its header is cut short or malformed (a size of 0 included).

    ``start`` and ``stop`` let the caller point into a larger buffer without copying.

    >>> image_size(b"\\xff\\xd8\\xff\\xc0\\x00\\x11\\x08\\x00\\x02\\x00\\x03" + bytes(12))
    (3, 2)
    """
    end = len(data) if stop is None else stop
    if end - start < 10:
        return None
    first = data[start]
    if first == 0xFF:
        size = _jpeg(data, start, end)
    elif first == 0x89:
        size = _png(data, start, end)
    elif first == 0x47:  # G
        size = _gif(data, start, end)
    elif first == 0x52:  # R
        size = _webp(data, start, end)
    elif first == 0x42:  # B
        size = _bmp(data, start, end)
    else:
        return None
    if size is None or size[0] <= 0 or size[1] <= 0:
        return None
    return size


def _jpeg(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    if data[start : start + 3] != JPEG_SIGNATURE:
        return None
    pos = start + 2
    markers = _MARKERS
    while pos + 9 <= end:
        if data[pos] != 0xFF:
            return None
        action = markers[data[pos + 1]]
        if action == _SKIP:
            pos += 2 + (data[pos + 2] << 8 | data[pos + 3])
        elif action == _FRAME:
            return (data[pos + 7] << 8 | data[pos + 8], data[pos + 5] << 8 | data[pos + 6])
        elif action == _BARE:
            pos += 2
        elif action == _FILL:
            pos += 1
        else:
            return None
    return None


def _png(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    if (
        end - start < 24
        or data[start : start + 8] != PNG_SIGNATURE
        or data[start + 12 : start + 16] != b"IHDR"
    ):
        return None
    return (_big(data, start + 16, 4), _big(data, start + 20, 4))


def _gif(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    if data[start : start + 6] not in GIF_SIGNATURES:
        return None
    return (_little(data, start + 6, 2), _little(data, start + 8, 2))


def _webp(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    if (
        end - start < 30
        or data[start : start + 4] != RIFF_SIGNATURE
        or data[start + 8 : start + 12] != WEBP_FORM
    ):
        return None
    chunk = data[start + 12 : start + 16]
    if chunk == b"VP8 ":  # lossy: a key frame's start code, then 14-bit sizes
        if data[start + 23 : start + 26] != b"\x9d\x01\x2a":
            return None
        return (_little(data, start + 26, 2) & 0x3FFF, _little(data, start + 28, 2) & 0x3FFF)
    if chunk == b"VP8L":  # lossless: a signature byte, then 14-bit sizes minus one
        if data[start + 20] != 0x2F:
            return None
        bits = _little(data, start + 21, 4)
        return ((bits & 0x3FFF) + 1, (bits >> 14 & 0x3FFF) + 1)
    if chunk == b"VP8X":  # extended: the canvas, 24-bit sizes minus one
        return (_little(data, start + 24, 3) + 1, _little(data, start + 27, 3) + 1)
    return None


def _bmp(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    if end - start < 26 or data[start + 1] != 0x4D:  # BM
        return None
    if _little(data, start + 14, 4) == 12:  # OS/2 core header: 16-bit sizes
        return (_little(data, start + 18, 2), _little(data, start + 20, 2))
    width = int.from_bytes(data[start + 18 : start + 22], "little", signed=True)
    height = int.from_bytes(data[start + 22 : start + 26], "little", signed=True)
    return (width, abs(height))  # a negative height: rows stored top-down


def _big(data: bytes, pos: int, length: int) -> int:
    return int.from_bytes(data[pos : pos + length], "big")


def _little(data: bytes, pos: int, length: int) -> int:
    return int.from_bytes(data[pos : pos + length], "little")
