r"""Looking at samples: a one-line preview per field, terminal drawings, a contact sheet
(its tiles captioned with the key, or with fields: a class named from ``classes.json``).

A field is an image when its last extension is one of :data:`IMAGE_EXTENSIONS`
(``x.seg.png`` is one, ``x.png.gz`` is not): the name decides, not the bytes, so
Pillow is imported only when an image field is actually shown.

>>> preview("txt", b"a cat\non a mat")
'a cat\\non a mat'
>>> preview("json", b'{ "label": 3,\n  "tags": ["x"] }')
'{"label":3,"tags":["x"]}'
>>> preview("bin", bytes(range(20)))
'00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f …'
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, cast

from ..errors import OutputError
from ..format.classes import CLASSES_FILE, ClassNames, names_for
from ..format.field_spec import select_fields
from ..format.samples import Sample
from .tsv import as_text, escape

if TYPE_CHECKING:
    from PIL import Image, ImageFont

    from ..storage import StorageOptions

IMAGE_EXTENSIONS = tuple(
    "jpg jpeg png webp gif bmp tif tiff ppm pgm pbm pnm tga ico jp2 avif".split()
)
_IMAGES = frozenset(IMAGE_EXTENSIONS)
PREVIEW_CHARS = 60
PREVIEW_BYTES = 16
MORE = "…"

# Contact sheet layout, in pixels: each cell is a TILE x TILE image area above a
# CAPTION-high line per caption (the key, or each caption field), cells GAP apart and GAP
# from the border.
TILE, CAPTION, GAP = 128, 16, 4
KEY = "__key__"  # the key, as a caption field (webdataset's name for it)
MISSING = "-"  # the caption of a field the sample does not have
BACKGROUND, EMPTY_TILE, CAPTION_COLOUR = (24, 24, 24), (64, 64, 64), (230, 230, 230)


def extension(field: str) -> str:
    """The last extension of a field name, lowercased: what says how to read it.

    >>> extension("seg.PNG"), extension("txt.gz"), extension("cls")
    ('png', 'gz', 'cls')
    """
    return field.rsplit(".", 1)[-1].lower()


def is_image(field: str) -> bool:
    """True for a field whose name marks it as an image (``jpg``, ``seg.png``…).

    >>> is_image("JPEG"), is_image("left.webp"), is_image("png.gz")
    (True, True, False)
    """
    return extension(field) in _IMAGES


def preview(field: str, data: bytes) -> str:
    """A one-line preview of a field's bytes, at most about 60 characters before escaping.

    JSON (a ``json`` field that parses) is shown compact; UTF-8 text escaped as in TSV;
    anything else as its first 16 bytes in hex. ``…`` marks a cut. Image fields are
    described by :func:`image_preview` instead.

    >>> preview("txt", ("é" * 70).encode())[-3:]
    'éé…'
    >>> preview("json", b"[1, 2")
    '[1, 2'
    """
    if extension(field) == "json":
        try:
            value = json.loads(data)
        except ValueError:
            pass
        else:
            compact = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
            return _cut(compact)
    text = as_text(data)
    if text is not None:
        return _cut(text)
    return hex_preview(data)


def _cut(text: str) -> str:
    if len(text) <= PREVIEW_CHARS:
        return escape(text)
    return escape(text[:PREVIEW_CHARS]) + MORE


def hex_preview(data: bytes) -> str:
    """The first bytes in hex.

    >>> hex_preview(b"\\x89PNG")
    '89 50 4e 47'
    """
    shown = data[:PREVIEW_BYTES].hex(" ")
    return shown + " " + MORE if len(data) > PREVIEW_BYTES else shown


def open_image(data: bytes) -> Image.Image | None:
    """The image in ``data`` (header read, pixels not yet decoded), or None if unreadable."""
    from PIL import Image

    try:
        return Image.open(io.BytesIO(data))
    # Pillow's plug-ins report a bad file with any of these (and a bomb with its own).
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return None


def image_preview(image: Image.Image | None, data: bytes) -> str:
    """``WIDTHxHEIGHT MODE`` of an image, or ``unreadable image:`` and its first bytes."""
    if image is None:
        return "unreadable image: " + hex_preview(data)
    width, height = image.size
    return f"{width}x{height} {image.mode}"


def describe(sample: Sample, *, images: bool = False, columns: int = 60) -> list[str]:
    """The lines tarkit shows for a sample: its key, then per field name, size, preview.

    With ``images``, each readable image field is followed by its drawing
    (:func:`draw`, at most ``columns`` characters wide). Lines have no newline.
    """
    fields = [escape(f) for f in sample.fields]
    name_width = max(map(len, fields), default=0)
    sizes = [str(m.size) for m in sample.members]
    size_width = max(map(len, sizes), default=0)
    lines = [escape(sample.key)]
    for field, name, size, member in zip(sample.fields, fields, sizes, sample.members,
                                         strict=True):  # fmt: skip
        data = member.data
        drawing: list[str] = []
        if is_image(field):
            image = open_image(data)
            shown = image_preview(image, data)
            if images and image is not None:
                drawing = draw(image, columns=columns)
        else:
            shown = preview(field, data)
        lines.append(f"  {name:<{name_width}}  {size:>{size_width}}  {shown}".rstrip())
        lines.extend("  " + row for row in drawing)
    return lines


def _rgb(image: Image.Image) -> Image.Image:
    """The first frame as RGB, transparency composited over the sheet's background."""
    from PIL import Image

    image.seek(0)
    if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
        rgba = image.convert("RGBA")
        flat = Image.new("RGBA", rgba.size, BACKGROUND + (255,))
        return Image.alpha_composite(flat, rgba).convert("RGB")
    if image.mode in ("I", "I;16", "I;16B", "I;16L", "F"):
        # Wide greyscale: scale to 8 bits rather than clip at 255.
        wide = image.convert("F")
        low, high = cast("tuple[float, float]", wide.getextrema())
        scale = 255 / (high - low) if high > low else 0
        return wide.point(lambda v: (v - low) * scale).convert("L").convert("RGB")
    return image.convert("RGB")


def draw(image: Image.Image, *, columns: int = 60, rows: int = 30) -> list[str]:
    """Draw an image with truecolor escape sequences and Unicode upper half blocks.

    Each character cell shows two pixels: the upper one in the foreground colour of
    ``▀``, the lower one in the background colour. The image is shrunk (never grown) to
    fit ``columns`` characters by ``rows`` lines. Each line ends by resetting colours.
    Raises nothing for a broken image: its lines say ``unreadable image``.
    """
    from PIL import Image

    try:
        image.draft("RGB", (columns, 2 * rows))
        picture = _rgb(image)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return ["unreadable image"]
    width, height = picture.size
    scale = min(1.0, columns / width, 2 * rows / height)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    if size != picture.size:
        picture = picture.resize(size, Image.Resampling.BOX)
    width, height = size
    pixels = picture.load()
    assert pixels is not None
    lines = []
    for y in range(0, height, 2):
        cells = []
        previous = ""
        for x in range(width):
            top = "38;2;{};{};{}".format(*pixels[x, y])  # type: ignore[misc]
            bottom = "49"  # an odd last row: the terminal's own background
            if y + 1 < height:
                bottom = "48;2;{};{};{}".format(*pixels[x, y + 1])  # type: ignore[misc]
            colours = f"\x1b[{top};{bottom}m"
            # Runs of one colour pair need its escape sequence only once.
            cells.append("▀" if colours == previous else colours + "▀")
            previous = colours
        lines.append("".join(cells) + "\x1b[0m")
    return lines


def first_image(sample: Sample) -> bytes | None:
    """The bytes of the sample's first image field, in archive order, or None."""
    for field, member in zip(sample.fields, sample.members, strict=True):
        if is_image(field):
            return member.data
    return None


def grid(
    samples: Iterable[Sample],
    path: str,
    *,
    image_fields: list[list[str]] | None = None,
    caption: list[list[str]] | None = None,
    class_names: ClassNames | None = None,
) -> int:
    """Write a contact sheet PNG of the first image of each sample, captioned with its key.

    Cells are laid out in rows of ``ceil(sqrt(n))``; each is a ``TILE`` pixel square
    holding the image scaled to fit and centred, above its key (cut from the left with
    ``...`` when too long). A sample without an image (or with an unreadable one) gets
    a grey tile. ``image_fields`` (a field spec, as ``-f`` parses it) limits the fields
    an image is taken from. ``caption`` (a field spec; ``__key__`` is the key) captions
    each tile with a line per column instead: the first field of its alternatives that
    the sample has, previewed (:func:`caption_text`, a class value named from
    ``class_names``), or ``-``. The PNG is deterministic and written atomically (``-`` is
    stdout). Returns the number of cells; raises :class:`~tarkit.errors.OutputError` when
    no sample has an image (nothing is written).
    """
    from PIL import Image, ImageDraw, ImageFont, ImageOps

    from ..storage import Sink
    from .stages import output_errors

    columns = caption or [[KEY]]
    tiles: list[tuple[list[str], Image.Image | None]] = []
    for sample in samples:
        data = first_image(select_fields(sample, image_fields) if image_fields else sample)
        tile = None
        if data is not None and (image := open_image(data)) is not None:
            try:
                image.draft("RGB", (TILE, TILE))
                tile = ImageOps.contain(_rgb(image), (TILE, TILE), Image.Resampling.LANCZOS)
            except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
                tile = None
        tiles.append(([caption_text(sample, c, class_names) for c in columns], tile))
    if not any(tile is not None for _, tile in tiles):
        raise OutputError(
            f"{path}: no image in the first {len(tiles)} samples "
            f"(image fields end in .{', .'.join(IMAGE_EXTENSIONS[:4])}, …); "
            "nothing written"
        )
    per_row = math.ceil(math.sqrt(len(tiles)))
    rows = math.ceil(len(tiles) / per_row)
    cell_height = TILE + CAPTION * len(columns) + GAP
    sheet = Image.new(
        "RGB",
        (GAP + per_row * (TILE + GAP), GAP + rows * cell_height),
        BACKGROUND,
    )
    pen = ImageDraw.Draw(sheet)
    font = ImageFont.load_default(size=11)
    for index, (lines, tile) in enumerate(tiles):
        x = GAP + (index % per_row) * (TILE + GAP)
        y = GAP + (index // per_row) * cell_height
        if tile is None:
            pen.rectangle((x, y, x + TILE - 1, y + TILE - 1), fill=EMPTY_TILE)
        else:
            sheet.paste(tile, (x + (TILE - tile.width) // 2, y + (TILE - tile.height) // 2))
        for number, (line, column) in enumerate(zip(lines, columns, strict=True)):
            # A key's end tells keys apart, a text's beginning says what it is.
            text = _fit(line, font, TILE, keep_end=column == [KEY])
            pen.text((x, y + TILE + 1 + CAPTION * number), text, fill=CAPTION_COLOUR, font=font)
    sink = Sink(path)
    try:
        with output_errors(sink):
            sheet.save(sink.stream, "PNG")
            sink.commit()
    except BaseException:
        sink.abort()
        raise
    return len(tiles)


def caption_text(
    sample: Sample, alternatives: list[str], class_names: ClassNames | None = None
) -> str:
    """The caption line of ``sample`` for one column of a field spec: the key for
    ``__key__``, else the first of ``alternatives`` the sample has (matched
    case-insensitively): a class (a ``cls`` field, ``<column>.cls``) as its value and its
    name from ``class_names`` (``dog (3)``), an image as its size and mode, anything else as
    its :func:`preview`; ``-`` when the sample has none of them.

    >>> from tarkit.format.tar import Member
    >>> sample = Sample("k1", ["cls", "txt"], [Member("k1.cls", "file", 1, 0, b"1", 0),
    ...     Member("k1.txt", "file", 5, 0, b"a cat", 0)], "-")
    >>> [caption_text(sample, c, ["cat", "dog"]) for c in (["cls"], ["caption", "txt"], ["json"])]
    ['dog (1)', 'a cat', '-']
    """
    for alternative in alternatives:
        if alternative == KEY:
            return escape(sample.key)
        index = sample.field_index(alternative)
        if index is None:
            continue
        field, data = sample.fields[index], sample.data_at(index)
        if is_image(field):
            return image_preview(open_image(data), data)
        text = preview(field, data.strip())
        if extension(field) == "cls":
            names = names_for(field.lower(), class_names)
            value = text.strip()
            if names is not None and value.isdigit() and int(value) < len(names):
                return f"{escape(names[int(value)])} ({value})"
        return text
    return MISSING


def caption_classes(
    inputs: Sequence[str], named: str | None = None, storage_options: StorageOptions | None = None
) -> ClassNames | None:
    """The class names captions use: those of the file ``named`` (which must exist), else
    of the ``classes.json`` beside the first input, when it is a file or a URL and there is
    one (the writers put it beside the shards). Raises
    :class:`~tarkit.errors.SourceError` for a ``named`` file that does not exist and
    :class:`~tarkit.errors.InputError` for one that is not a list of names."""
    from ..storage import expand_inputs, location
    from ..storage.classes import load_class_names

    if named is None:
        first = location(expand_inputs(inputs)[0])
        if not (first.is_file or first.remote):
            return None
        place = first.sibling(CLASSES_FILE)
    else:
        place = named
    return load_class_names(place, storage_options, required=named is not None)


def _fit(
    text: str, font: ImageFont.FreeTypeFont | ImageFont.ImageFont, width: int, keep_end: bool
) -> str:
    """``text``, cut with ``...`` until it is at most ``width`` pixels: from the left when
    ``keep_end``, else from the right."""
    if font.getlength(text) <= width:
        return text
    for cut in range(1, len(text)):
        shorter = "..." + text[cut:] if keep_end else text[: len(text) - cut] + "..."
        if font.getlength(shorter) <= width:
            return shorter
    return "..."
