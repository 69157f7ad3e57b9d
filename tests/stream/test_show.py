"""Previews, terminal drawings and contact sheets of samples."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from conftest import make_tar
from PIL import Image

from tarkit.errors import OutputError, TruncatedError
from tarkit.format.samples import group_samples
from tarkit.format.tar import read_members
from tarkit.stream.show import (
    CAPTION,
    GAP,
    TILE,
    caption_text,
    describe,
    draw,
    grid,
    image_preview,
    is_image,
    open_image,
    preview,
)

COLOURS = [
    (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (255, 0, 255), (0, 255, 255),
    (128, 0, 0), (0, 128, 0), (0, 0, 128), (128, 128, 0), (128, 0, 128), (0, 128, 128),
    (255, 128, 0), (128, 255, 0), (0, 128, 255), (255, 255, 255), (200, 100, 50),
]  # fmt: skip


def encoded(image: Image.Image, fmt: str, **kw) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **kw)
    return out.getvalue()


def solid(
    colour: tuple[int, int, int], size: tuple[int, int] = (40, 40), fmt: str = "PNG"
) -> bytes:
    return encoded(Image.new("RGB", size, colour), fmt)


def samples(members: list[tuple[str, bytes]]) -> list:
    return list(group_samples(read_members(io.BytesIO(make_tar(members)))))


def close(pixel: tuple[int, ...], colour: tuple[int, int, int], tolerance: int = 6) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, colour, strict=True))


# --- previews -------------------------------------------------------------------------


def test_text_preview_is_the_first_60_characters_escaped_and_marks_the_cut() -> None:
    text = "line one\tx\n" + "y" * 100
    shown = preview("txt", text.encode())
    assert shown == "line one\\tx\\n" + "y" * 49 + "…"
    assert preview("txt", b"short\n") == "short\\n"


def test_text_preview_counts_characters_not_bytes() -> None:
    shown = preview("txt", ("日本" * 40).encode())
    assert shown == "日本" * 30 + "…"


def test_json_preview_is_compact_and_keeps_non_ascii() -> None:
    data = json.dumps({"caption": "un café", "tags": ["a", "b"]}, indent=4).encode()
    assert preview("json", data) == '{"caption":"un café","tags":["a","b"]}'
    assert preview("meta.JSON", b" [1,\n 2 ] ") == "[1,2]"


def test_long_json_is_cut_like_text() -> None:
    shown = preview("json", json.dumps(list(range(100))).encode())
    assert shown.startswith("[0,1,2,3") and shown.endswith("…")
    assert len(shown) == 61


def test_json_that_does_not_parse_is_shown_as_text() -> None:
    assert preview("json", b'{"cut": ') == '{"cut": '


def test_binary_preview_is_the_first_bytes_in_hex() -> None:
    assert preview("bin", b"\x00\x01\xfe") == "00 01 fe"
    assert preview("txt.gz", b"\x1f\x8b" + bytes(30)) == "1f 8b " + "00 " * 14 + "…"


@pytest.mark.parametrize(
    "field, expected",
    [("jpg", True), ("JPEG", True), ("seg.png", True), ("webp", True), ("gif", True),
     ("bmp", True), ("tiff", True), ("ppm", True), ("pgm", True),
     ("png.gz", False), ("cls", False), ("jpg.txt", False), ("json", False)],
)  # fmt: skip
def test_images_are_recognised_by_the_last_extension_of_the_field(
    field: str, expected: bool
) -> None:
    assert is_image(field) is expected


@pytest.mark.parametrize(
    "fmt, mode, size",
    [("PNG", "RGBA", (31, 17)), ("JPEG", "RGB", (64, 48)), ("GIF", "P", (5, 9)),
     ("PPM", "L", (12, 3)), ("WEBP", "RGB", (20, 10)), ("TIFF", "I;16", (7, 7))],
)  # fmt: skip
def test_image_preview_is_width_x_height_and_mode(
    fmt: str, mode: str, size: tuple[int, int]
) -> None:
    data = encoded(Image.new(mode, size), fmt)
    assert image_preview(open_image(data), data) == f"{size[0]}x{size[1]} {mode}"


def test_unreadable_image_is_said_so_with_its_first_bytes() -> None:
    data = b"not a jpeg at all"
    assert open_image(data) is None
    assert (
        image_preview(None, data)
        == "unreadable image: 6e 6f 74 20 61 20 6a 70 65 67 20 61 74 20 61 6c …"
    )


def test_describe_shows_key_then_aligned_name_size_and_preview_per_field() -> None:
    (sample,) = samples([
        ("dir/s1.cls", b"3"), ("dir/s1.jpg", solid((9, 9, 9), (64, 32), "JPEG")),
        ("dir/s1.json", b'{"a": 1}'), ("dir/s1.seg.png", b"\x89PNG broken"),
    ])  # fmt: skip
    jpeg_size = len(sample.get("jpg"))
    width = len(str(jpeg_size))
    assert describe(sample) == [
        "dir/s1",
        f"  cls      {'1':>{width}}  3",
        f"  jpg      {jpeg_size}  64x32 RGB",
        f'  json     {"8":>{width}}  {{"a":1}}',
        f"  seg.png  {'11':>{width}}  unreadable image: 89 50 4e 47 20 62 72 6f 6b 65 6e",
    ]


def test_describe_escapes_keys_and_field_names() -> None:
    (sample,) = samples([("a\tb.t\\x", b"v")])
    assert describe(sample) == ["a\\tb", "  t\\\\x  1  v"]


# --- drawing --------------------------------------------------------------------------

TRUECOLOR = re.compile(r"\x1b\[38;2;(\d+);(\d+);(\d+);(?:48;2;(\d+);(\d+);(\d+)|49)m")


def cells(line: str) -> list[tuple[tuple[int, ...], tuple[int, ...] | None]]:
    """(top, bottom) colours of each half block of a drawn line."""
    assert line.endswith("\x1b[0m")
    result = []
    colours = None
    for match in re.finditer(TRUECOLOR.pattern + "|▀", line[: -len("\x1b[0m")]):
        if match.group() == "▀":
            result.append(colours)
        else:
            numbers = [int(g) for g in match.groups() if g is not None]
            colours = (tuple(numbers[:3]), tuple(numbers[3:]) or None)
    return result


def test_draw_puts_upper_pixel_in_foreground_and_lower_in_background() -> None:
    image = Image.new("RGB", (3, 2))
    image.putdata([(255, 0, 0), (0, 255, 0), (1, 2, 3), (0, 0, 255), (9, 9, 9), (1, 2, 3)])
    lines = draw(image)
    assert len(lines) == 1
    assert cells(lines[0]) == [
        ((255, 0, 0), (0, 0, 255)), ((0, 255, 0), (9, 9, 9)), ((1, 2, 3), (1, 2, 3)),
    ]  # fmt: skip


def test_draw_of_an_odd_height_leaves_the_last_lower_half_to_the_terminal() -> None:
    lines = draw(Image.new("RGB", (2, 3), (10, 20, 30)))
    assert len(lines) == 2
    assert cells(lines[1]) == [((10, 20, 30), None)] * 2


def test_draw_shrinks_to_the_columns_and_rows_given_but_never_grows() -> None:
    wide = draw(Image.new("RGB", (200, 100), (5, 5, 5)), columns=40, rows=30)
    assert len(cells(wide[0])) == 40 and len(wide) == 10
    tall = draw(Image.new("RGB", (100, 400), (5, 5, 5)), columns=40, rows=10)
    assert len(tall) == 10 and len(cells(tall[0])) == 5
    small = draw(Image.new("RGB", (4, 4), (5, 5, 5)))
    assert len(small) == 2 and len(cells(small[0])) == 4


def test_draw_of_a_jpeg_keeps_its_colour() -> None:
    image = open_image(solid((200, 30, 60), (50, 50), "JPEG"))
    assert image is not None
    for top, bottom in cells(draw(image, columns=20)[3]):
        assert close(top, (200, 30, 60)) and bottom is not None and close(bottom, (200, 30, 60))


def test_describe_with_images_draws_each_readable_image_under_its_line() -> None:
    (sample,) = samples([("a.cls", b"1"), ("a.png", solid((0, 0, 255), (8, 4)))])
    lines = describe(sample, images=True)
    assert lines[0] == "a"
    assert lines[1].startswith("  cls") and lines[1].endswith("  1")
    assert lines[2].startswith("  png") and lines[2].endswith("  8x4 RGB")
    assert len(lines) == 5
    assert all(line.startswith("  \x1b[38;2;0;0;255;48;2;0;0;255m▀") for line in lines[3:])


# --- contact sheet --------------------------------------------------------------------


def tile_centre(index: int, per_row: int) -> tuple[int, int]:
    x = GAP + (index % per_row) * (TILE + GAP) + TILE // 2
    y = GAP + (index // per_row) * (TILE + CAPTION + GAP) + TILE // 2
    return x, y


def coloured_samples(count: int, fmt: str = "PNG") -> list:
    ext = {"PNG": "png", "JPEG": "jpg", "WEBP": "webp"}[fmt]
    return samples([
        (f"key{i:02d}.{field}", data)
        for i in range(count)
        for field, data in (("cls", str(i).encode()), (ext, solid(COLOURS[i], fmt=fmt)))
    ])  # fmt: skip


def test_grid_places_each_samples_first_image_in_order_with_the_documented_size(
    tmp_path: Path,
) -> None:
    out = tmp_path / "sheet.png"
    assert grid(coloured_samples(16), str(out)) == 16
    with Image.open(out) as sheet:
        assert sheet.format == "PNG" and sheet.mode == "RGB"
        assert sheet.size == (4 + 4 * 132, 4 + 4 * (128 + 16 + 4))
        for index in range(16):
            assert sheet.getpixel(tile_centre(index, 4)) == COLOURS[index], index


def test_grid_lays_out_rows_of_ceil_sqrt_n_and_decodes_jpeg(tmp_path: Path) -> None:
    out = tmp_path / "sheet.png"
    grid(coloured_samples(5, "JPEG"), str(out))
    with Image.open(out) as sheet:
        assert sheet.size == (4 + 3 * 132, 4 + 2 * 148)
        for index in range(5):
            assert close(sheet.getpixel(tile_centre(index, 3)), COLOURS[index]), index
        # the sixth cell stays background
        assert sheet.getpixel(tile_centre(5, 3)) == (24, 24, 24)


def test_grid_uses_the_first_image_field_in_archive_order(tmp_path: Path) -> None:
    out = tmp_path / "sheet.png"
    found = samples([("a.cls", b"1"), ("a.jpg", solid((255, 0, 0), fmt="JPEG")),
                     ("a.png", solid((0, 0, 255)))])  # fmt: skip
    grid(found, str(out))
    with Image.open(out) as sheet:
        assert close(sheet.getpixel(tile_centre(0, 1)), (255, 0, 0))


def test_grid_scales_images_to_fit_and_centres_them(tmp_path: Path) -> None:
    out = tmp_path / "sheet.png"
    grid(samples([("wide.png", solid((0, 255, 0), (64, 16)))]), str(out))
    with Image.open(out) as sheet:
        assert sheet.getpixel((GAP + 1, GAP + TILE // 2)) == (0, 255, 0)
        assert sheet.getpixel((GAP + TILE - 2, GAP + TILE // 2)) == (0, 255, 0)
        assert sheet.getpixel((GAP + TILE // 2, GAP + 2)) == (24, 24, 24)  # above: 128x32


def test_grid_captions_each_tile_with_its_key(tmp_path: Path) -> None:
    first, second = tmp_path / "a.png", tmp_path / "b.png"
    grid(samples([("aaaa.png", solid((0, 0, 0)))]), str(first))
    grid(samples([("WWWW.png", solid((0, 0, 0)))]), str(second))
    with Image.open(first) as a, Image.open(second) as b:
        box = (GAP, GAP + TILE, GAP + TILE, GAP + TILE + CAPTION)
        strip_a, strip_b = a.crop(box), b.crop(box)
        assert strip_a.convert("L").getextrema()[1] > 150  # light text on the dark strip
        assert strip_a.tobytes() != strip_b.tobytes()


def test_grid_gives_a_grey_tile_to_a_sample_without_a_readable_image(tmp_path: Path) -> None:
    out = tmp_path / "sheet.png"
    found = samples([("a.png", solid((255, 0, 0))), ("b.cls", b"2"), ("c.jpg", b"broken")])
    assert grid(found, str(out)) == 3
    with Image.open(out) as sheet:
        assert sheet.getpixel(tile_centre(1, 2)) == (64, 64, 64)
        assert sheet.getpixel(tile_centre(2, 2)) == (64, 64, 64)


def test_grid_is_byte_for_byte_deterministic(tmp_path: Path) -> None:
    first, second = tmp_path / "1.png", tmp_path / "2.png"
    grid(coloured_samples(7, "JPEG"), str(first))
    grid(coloured_samples(7, "JPEG"), str(second))
    assert first.read_bytes() == second.read_bytes()


def test_grid_composites_transparency_over_the_background(tmp_path: Path) -> None:
    out = tmp_path / "sheet.png"
    clear = encoded(Image.new("RGBA", (10, 10), (255, 255, 255, 0)), "PNG")
    grid(samples([("a.png", clear)]), str(out))
    with Image.open(out) as sheet:
        assert sheet.getpixel(tile_centre(0, 1)) == (24, 24, 24)


def test_grid_without_any_image_is_an_error_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "sheet.png"
    with pytest.raises(OutputError, match=r"no image in the first 2 samples"):
        grid(samples([("a.cls", b"1"), ("b.cls", b"2")]), str(out))
    assert list(tmp_path.iterdir()) == []


def test_grid_interrupted_by_an_input_error_leaves_no_file(tmp_path: Path) -> None:
    def failing():
        yield from coloured_samples(2)
        raise TruncatedError("input ends inside member data", source="x.tar")

    out = tmp_path / "sheet.png"
    with pytest.raises(TruncatedError):
        grid(failing(), str(out))
    assert list(tmp_path.iterdir()) == []


def test_grid_replaces_an_existing_file_atomically(tmp_path: Path) -> None:
    out = tmp_path / "sheet.png"
    out.write_bytes(b"old")
    grid(coloured_samples(1), str(out))
    with Image.open(out) as sheet:
        assert sheet.size == (4 + 132, 4 + 148)
    assert [p.name for p in tmp_path.iterdir()] == ["sheet.png"]


# --- captions from fields -------------------------------------------------------------


def caption_strip(sheet: Image.Image, line: int) -> bytes:
    """The pixels of caption line ``line`` of the first tile."""
    top = GAP + TILE + CAPTION * line
    return sheet.crop((GAP, top, GAP + TILE, top + CAPTION)).tobytes()


def drawn(text: str) -> bytes:
    """A caption line holding ``text``, drawn as the sheet draws it."""
    from PIL import ImageDraw, ImageFont

    strip = Image.new("RGB", (TILE, CAPTION + GAP + TILE), (24, 24, 24))
    ImageDraw.Draw(strip).text((0, 1), text, fill=(230, 230, 230),
                               font=ImageFont.load_default(size=11))  # fmt: skip
    return strip.crop((0, 0, TILE, CAPTION)).tobytes()


def test_grid_captions_a_line_per_field_with_class_names_instead_of_the_key(
    tmp_path: Path,
) -> None:
    out = tmp_path / "sheet.png"
    found = samples([("k0.cls", b"1"), ("k0.png", solid((255, 0, 0))),
                     ("k0.txt", b"a red square\n")])  # fmt: skip
    grid(found, str(out), caption=[["cls"], ["caption", "txt"], ["json"], ["__key__"]],
         class_names=["square", "red thing"])  # fmt: skip
    with Image.open(out) as sheet:
        assert sheet.size == (4 + 132, 4 + 128 + 4 * 16 + 4)
        assert [caption_strip(sheet, n) for n in range(4)] == [
            drawn("red thing (1)"),
            drawn("a red square"),
            drawn("-"),
            drawn("k0"),
        ]


def test_caption_text_of_a_class_without_a_name_is_its_value() -> None:
    found = samples([("k.label.cls", b"7"), ("k.png", solid((0, 0, 0)))])
    assert caption_text(found[0], ["label.cls"], ["a", "b"]) == "7"  # names are for cls
    assert caption_text(found[0], ["label.cls"], {"label": list("abcdefgh")}) == "h (7)"
    assert caption_text(found[0], ["PNG"]) == "40x40 RGB"
