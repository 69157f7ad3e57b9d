r"""What a field is, for the viewer: how it is shown, and what it is served as.

The field's last extension decides (``x.seg.png`` is a PNG image, ``x.png.gz`` is not),
never its bytes: a shard's bytes are not trusted to say what they are. :func:`kind` names
how the page shows a field, :func:`content_type` what its bytes are served as, and
:func:`describe` what the page is told of it beside its URL: text (escaped by the page,
never markup), pretty JSON, a class label and its name, an array's dtype and shape, or a
hex and ASCII peek.

>>> kind("seg.PNG"), kind("flac"), kind("json"), kind("label.cls"), kind("bin")
('image', 'audio', 'json', 'class', 'binary')
>>> content_type("svg"), content_type("html")
('image/svg+xml', 'text/plain; charset=utf-8')
>>> describe("cls", b"1", ["cat", "dog"])
{'kind': 'class', 'text': '1', 'label': 'dog'}
>>> print(describe("bin", b"\x00" + bytes(range(65, 84)))["text"])
00000000  00 41 42 43 44 45 46 47  48 49 4a 4b 4c 4d 4e 4f  |.ABCDEFGHIJKLMNO|
00000010  50 51 52 53                                       |PQRS|
"""

from __future__ import annotations

import ast
import io
import json
import struct
import zipfile
from typing import Any

from ..stream.show import IMAGE_EXTENSIONS
from ..stream.tsv import as_text

# Image formats a browser draws itself, and what they are served as.
BROWSER_IMAGES = {
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "png": "image/png",
    "gif": "image/gif",
    "webp": "image/webp",
    "bmp": "image/bmp",
    "avif": "image/avif",
    "ico": "image/x-icon",
    "svg": "image/svg+xml",
}
# Images a browser does not draw (TIFF, PPM…): served converted to PNG (:func:`as_png`).
CONVERTED_IMAGES = frozenset(IMAGE_EXTENSIONS) - set(BROWSER_IMAGES)
AUDIO = {
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "flac": "audio/flac",
    "ogg": "audio/ogg",
    "oga": "audio/ogg",
    "opus": "audio/ogg",
    "m4a": "audio/mp4",
    "aac": "audio/aac",
    "weba": "audio/webm",
}
VIDEO = {
    "mp4": "video/mp4",
    "m4v": "video/mp4",
    "webm": "video/webm",
    "ogv": "video/ogg",
    "mov": "video/quicktime",
    "mkv": "video/x-matroska",
}
JSON = frozenset({"json", "jsn"})
CLASS = frozenset({"cls", "cls2", "class"})
ARRAY = frozenset({"npy", "npz"})
TEXT = "text/plain; charset=utf-8"
BINARY = "application/octet-stream"

TEXT_CHARS = 4000  # characters of a text field shown in the grid (all of it: its URL)
JSON_BYTES = 1 << 20  # a larger JSON field is shown as text, not parsed
PEEK_BYTES = 64  # bytes of an unknown field shown in hex
NPY_HEADER = 1 << 16  # bytes of an .npy header read at most
NPZ_ARRAYS = 20  # arrays of an .npz listed
NPZ_BYTES = 64 << 20  # a larger .npz is shown as bytes


def extension(field: str) -> str:
    """The last extension of a field name, lowercased.

    >>> extension("seg.PNG"), extension("cls")
    ('png', 'cls')
    """
    return field.rsplit(".", 1)[-1].lower()


def kind(field: str) -> str:
    """How the page shows field ``field``: ``image``, ``audio``, ``video``, ``json``,
    ``class``, ``array``, or, by its bytes, ``text`` or ``binary`` (:func:`describe`)."""
    ext = extension(field)
    if ext in BROWSER_IMAGES or ext in CONVERTED_IMAGES:
        return "image"
    if ext in AUDIO:
        return "audio"
    if ext in VIDEO:
        return "video"
    if ext in JSON:
        return "json"
    if ext in CLASS:
        return "class"
    if ext in ARRAY:
        return "array"
    return "binary"


def content_type(field: str, data: bytes | memoryview = b"") -> str:
    """What the bytes ``data`` of ``field`` are served as: an image, audio or video type
    by its extension; text for a text-like extension (HTML and XML too: never a document
    that runs), or for another whose bytes are text; else ``application/octet-stream``.

    >>> content_type("x.JPG"), content_type("mp3"), content_type("txt"), content_type("pkl")
    ('image/jpeg', 'audio/mpeg', 'text/plain; charset=utf-8', 'application/octet-stream')
    >>> content_type("caption", b"a cat")
    'text/plain; charset=utf-8'
    """
    ext = extension(field)
    for table in (BROWSER_IMAGES, AUDIO, VIDEO):
        if ext in table:
            return table[ext]
    if ext in JSON:
        return "application/json"
    if ext in CLASS or ext in _TEXT_EXTENSIONS or _head_text(data) is not None and data:
        return TEXT
    return BINARY


_TEXT_EXTENSIONS = frozenset(
    "txt text md caption csv tsv html htm xml yaml yml toml log srt vtt py sh id count "
    "index inx".split()
)


def describe(
    field: str, data: bytes | memoryview, class_names: list[str] | None = None
) -> dict[str, Any]:
    """What the page is told of field ``field`` (its bytes ``data``, a view of them
    will do: only what is shown is copied) beside its URL: its ``kind`` and, by kind,
    ``text`` (the first :data:`TEXT_CHARS` characters; ``more`` counts the bytes left
    out), ``label`` (the class's name, from ``class_names``), ``arrays`` (each one's
    ``dtype`` and ``shape``, read from its header), or a hex and ASCII peek.

    Every value is plain data: the page puts text in the document as text, never as
    markup. A field that is not what its extension says (JSON that does not parse, a
    class that is not text) is described by its bytes, as text or binary.
    """
    shown = kind(field)
    if shown in ("image", "audio", "video"):
        return {"kind": shown}
    if shown == "json" and len(data) <= JSON_BYTES:
        try:
            value = json.loads(bytes(data))
        except (ValueError, RecursionError):
            pass
        else:
            pretty = json.dumps(value, indent=1, ensure_ascii=False)
            return {"kind": "json", **_cut(pretty, len(pretty.encode("utf-8", "replace")))}
    if shown == "class" and len(data) <= 256:
        text = as_text(bytes(data))
        if text is not None:
            label = text.strip()
            entry: dict[str, Any] = {"kind": "class", "text": label}
            if class_names is not None and label.isdigit() and int(label) < len(class_names):
                entry["label"] = class_names[int(label)]
            return entry
    if shown == "array":
        arrays = npz_arrays(data) if extension(field) == "npz" else [npy_array(data)]
        if arrays and all(a is not None for a in arrays):
            return {"kind": "array", "arrays": arrays}
    text = _head_text(data)
    if text is not None:
        return {"kind": "text", **_cut(text, len(data))}
    return {"kind": "binary", "text": hex_peek(data)}


def _head_text(data: bytes | memoryview) -> str | None:
    """The text the first :data:`TEXT_CHARS` characters of ``data`` hold (a character
    cut at the end of what is looked at left out); None when they are not text."""
    head = bytes(data[: 4 * TEXT_CHARS])
    text = as_text(head)
    for cut in (1, 2, 3):  # a UTF-8 character cut short at the end of the head
        if text is not None or len(head) == len(data):
            break
        text = as_text(head[:-cut])
    return text


def _cut(text: str, size: int) -> dict[str, Any]:
    """``text``'s first :data:`TEXT_CHARS` characters, and the bytes of the ``size``
    it came from that they leave out."""
    shown = text[:TEXT_CHARS]
    left = size - len(shown.encode("utf-8", "surrogateescape"))
    return {"text": shown, "more": left} if left > 0 else {"text": shown}


def hex_peek(data: bytes | memoryview, limit: int = PEEK_BYTES) -> str:
    """The first ``limit`` bytes as ``hexdump -C`` shows them: offset, 16 bytes in hex,
    and the printable ASCII ones (``.`` for the others).

    >>> hex_peek(b"\\x89PNG\\r\\n")
    '00000000  89 50 4e 47 0d 0a                                 |.PNG..|'
    """
    lines = []
    for at in range(0, min(len(data), limit), 16):
        row = bytes(data[at : at + 16])
        hexes = " ".join(f"{b:02x}" for b in row[:8]) + "  " + " ".join(f"{b:02x}" for b in row[8:])
        ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append(f"{at:08x}  {hexes.rstrip():<48}  |{ascii_}|")
    if len(data) > limit:
        lines.append(f"… {len(data) - limit:,} more bytes")
    return "\n".join(lines)


def npy_array(data: bytes | memoryview) -> dict[str, Any] | None:
    """The ``dtype`` and ``shape`` in the header of an ``.npy`` file, without numpy (the
    header is a Python literal, read with :func:`ast.literal_eval`); None when ``data``
    is not one.

    >>> npy_array(b"\\x93NUMPY\\x01\\x00v\\x00{'descr': '<f4', 'fortran_order': False, "
    ...           b"'shape': (3, 4), }")
    {'dtype': 'float32', 'shape': [3, 4]}
    >>> npy_array(b"not an array") is None
    True
    """
    data = bytes(data[: NPY_HEADER + 12])
    if data[:6] != b"\x93NUMPY" or len(data) < 10:
        return None
    if data[6] == 1:
        (length,), start = struct.unpack_from("<H", data, 8), 10
    elif data[6] in (2, 3) and len(data) >= 12:
        (length,), start = struct.unpack_from("<I", data, 8), 12
    else:
        return None
    if length > NPY_HEADER:
        return None
    try:
        header = ast.literal_eval(data[start : start + length].decode("latin-1"))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(header, dict):
        return None
    shape, descr = header.get("shape"), header.get("descr")
    if not isinstance(shape, tuple) or not all(type(n) is int for n in shape):
        return None
    return {"dtype": _dtype(descr), "shape": list(shape)}


def npz_arrays(data: bytes | memoryview) -> list[dict[str, Any] | None]:
    """The arrays of an ``.npz`` file (a zip of ``.npy`` files), each with its ``name``
    (the first :data:`NPZ_ARRAYS`); empty when ``data`` is not a zip (or is larger than
    :data:`NPZ_BYTES`)."""
    if len(data) > NPZ_BYTES:
        return []
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            arrays: list[dict[str, Any] | None] = []
            for info in archive.infolist()[:NPZ_ARRAYS]:
                with archive.open(info) as member:
                    head = npy_array(member.read(NPY_HEADER + 12))
                arrays.append(None if head is None else {"name": info.filename, **head})
            return arrays
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError):
        return []


_KINDS = {"f": "float", "i": "int", "u": "uint", "c": "complex"}


def _dtype(descr: object) -> str:
    """numpy's name of a simple ``descr`` (``<f4`` → ``float32``), else the descr as
    written."""
    if isinstance(descr, str) and len(descr) >= 3 and descr[0] in "<>|=" and descr[2:].isdigit():
        size = int(descr[2:])
        if descr[1] in _KINDS:
            return f"{_KINDS[descr[1]]}{8 * size}"
        if descr[1:] == "b1":
            return "bool"
        if descr[1] == "U":
            return f"<U{size}"
    return str(descr)


def as_png(data: bytes) -> bytes | None:
    """An image a browser does not draw (TIFF, PPM…) as PNG bytes, or None when Pillow
    cannot read it (or it is larger than Pillow's limit against decompression bombs)."""
    from PIL import Image  # here: only a converted image needs Pillow

    try:
        with Image.open(io.BytesIO(data)) as opened:
            image: Image.Image = opened
            if image.mode not in ("1", "L", "LA", "P", "RGB", "RGBA"):
                image = opened.convert("RGBA" if "A" in opened.mode else "RGB")
            out = io.BytesIO()
            image.save(out, "PNG")
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return None
    return out.getvalue()
