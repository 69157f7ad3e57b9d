"""Encoding samples given as dicts of Python values into tar members, by field extension.

A sample dict has ``__key__`` and one entry per field; other ``__dunder__`` entries
(``__url__``…, as webdataset adds) are left out. The extension of a field is the part
of its name after the last dot (``seg.png`` → ``png``). Values become bytes so:

========================================  ==============================================
value                                     field extensions
========================================  ==============================================
``bytes``, ``bytearray``, ``memoryview``  any (written as they are)
``str``                                   any (UTF-8)
``int``                                   ``cls cls2 class count index inx id``
anything JSON can hold (numpy values ok)  ``json jsn``
a PIL image or a ``uint8`` numpy array    ``jpg jpeg png webp ppm pgm pbm pnm bmp tif
                                          tiff gif``
a numpy array                             ``npy``
anything ``torch.save`` takes             ``pth pt``
anything ``pickle`` takes                 ``pickle pkl pyd``
========================================  ==============================================

Any other combination raises :class:`~tarkit.errors.SampleError` naming the key and the
field, and so does a value its encoder fails on (a mode ``F`` image as PNG, an object
array as npy, a lambda as pkl, NaN or infinity in JSON), with the encoder's reason. Members are written in sorted field order with tarkit's deterministic headers, so
the same dict always gives the same bytes.

>>> raw = encode_sample({"__key__": "a", "cls": 3, "json": {"w": 1}})
>>> import io
>>> from tarkit.format.tar import read_members
>>> [(m.name, m.data) for m in read_members(io.BytesIO(raw + bytes(1024)))]
[('a.cls', b'3'), ('a.json', b'{"w":1}')]
"""

from __future__ import annotations

import io
import json
import numbers
from collections.abc import Mapping
from typing import Any

from ..errors import SampleError
from .tar_writer import default_mtime, encode_member

INT_EXTENSIONS = frozenset({"cls", "cls2", "class", "count", "index", "inx", "id"})
JSON_EXTENSIONS = frozenset({"json", "jsn"})
TORCH_EXTENSIONS = frozenset({"pth", "pt"})
PICKLE_EXTENSIONS = frozenset({"pickle", "pkl", "pyd"})
IMAGE_FORMATS = {
    "jpg": "JPEG",
    "jpeg": "JPEG",
    "png": "PNG",
    "webp": "WEBP",
    "ppm": "PPM",
    "pgm": "PPM",
    "pbm": "PPM",
    "pnm": "PPM",
    "bmp": "BMP",
    "tif": "TIFF",
    "tiff": "TIFF",
    "gif": "GIF",
}
DEFAULT_QUALITY = 90

_JPEG_MODES = ("L", "RGB", "CMYK")
_WEBP_MODES = ("RGB", "RGBA")


def extension(field: str) -> str:
    """The extension that picks a field's encoder.

    >>> extension("seg.PNG"), extension("cls")
    ('png', 'cls')
    """
    return field.rsplit(".", 1)[-1].lower()


def check_key(key: object) -> str:
    """Return ``key`` if it can name a sample, else raise :class:`SampleError`.

    A key is a non-empty relative path whose file name has no dot: readers cut member
    names at the first dot of the file name.

    >>> check_key("train/0001")
    'train/0001'
    >>> check_key("a.b")
    Traceback (most recent call last):
    ...
    tarkit.errors.SampleError: sample 'a.b': a key must not have a dot in its file name (readers would cut it there)
    """
    if not isinstance(key, str) or not key:
        raise SampleError(f"__key__ must be a non-empty string, not {key!r}", source="sample")
    where = f"sample {key!r}"
    name = key[key.rfind("/") + 1 :]
    if "." in name:
        raise SampleError(
            "a key must not have a dot in its file name (readers would cut it there)",
            source=where,
        )
    if not name or key.startswith("/") or "\0" in key or ".." in key.split("/"):
        raise SampleError("a key must be a relative path ending in a name", source=where)
    return key


def encode_field(key: str, field: str, value: object, *, quality: int = DEFAULT_QUALITY) -> bytes:
    """The bytes of one field (see the module docstring for what each extension takes).

    >>> encode_field("k", "txt", "héllo"), encode_field("k", "cls", 7)
    (b'h\\xc3\\xa9llo', b'7')
    >>> encode_field("k", "jpg", 7)
    Traceback (most recent call last):
    ...
    tarkit.errors.SampleError: sample 'k': field 'jpg': cannot encode int as jpg (expected a PIL image, a uint8 numpy array, bytes or str)
    """
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    ext = extension(field)
    where = f"sample {key!r}"
    try:
        data = _encode_by_extension(ext, value, quality)
    except SampleError:
        raise
    except Exception as exc:  # numpy, Pillow, pickle and torch raise many kinds
        raise SampleError(
            f"field {field!r}: cannot encode {type(value).__name__} as {ext}: {_cause(exc)}",
            source=where,
        ) from None
    if isinstance(data, bytes):
        return data
    if data is None:
        raise SampleError(
            f"field {field!r}: no encoder for {type(value).__name__} values with extension "
            f"{ext!r} (give bytes or str)",
            source=where,
        )
    raise SampleError(
        f"field {field!r}: cannot encode {type(value).__name__} as {ext} "
        f"(expected {data}, bytes or str)",
        source=where,
    )


def _encode_by_extension(ext: str, value: object, quality: int) -> bytes | str | None:
    """The bytes of ``value`` for extension ``ext``; else what the extension expects
    (a description), or None when no encoder handles the extension."""
    if ext in INT_EXTENSIONS:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return str(int(value)).encode()
        return "an int"
    if ext in JSON_EXTENSIONS:
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"),
                              allow_nan=False, default=_json_default)  # fmt: skip
        except ValueError as exc:
            if "Out of range float" in str(exc):
                raise ValueError("NaN and infinity are not JSON (use null or a string)") from None
            raise
        return text.encode("utf-8")
    if ext in IMAGE_FORMATS:
        image = _as_image(value)
        if image is None:
            return "a PIL image, a uint8 numpy array"
        return encode_image(image, ext, quality=quality)
    if ext == "npy":
        if type(value).__module__ != "numpy":
            return "a numpy array"
        import numpy

        out = io.BytesIO()
        numpy.save(out, numpy.asarray(value), allow_pickle=False)
        return out.getvalue()
    if ext in TORCH_EXTENSIONS:
        import torch

        out = io.BytesIO()
        torch.save(value, out)
        return out.getvalue()
    if ext in PICKLE_EXTENSIONS:
        import pickle  # here: the shell tools start faster without it

        return pickle.dumps(value, protocol=4)
    return None


def _cause(exc: BaseException) -> str:
    """``Type: first line of the message``, for an error inside an encoder."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _json_default(value: object) -> object:
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars, torch tensors
    if tolist is not None:
        return tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _as_image(value: object) -> Any:
    """A PIL image for ``value``, or None when it is not one (nor a uint8 array)."""
    module = type(value).__module__
    if module.startswith("PIL."):
        return value
    if module == "numpy" and getattr(value, "dtype", None) is not None:
        if str(value.dtype) == "uint8" and value.ndim in (2, 3):  # type: ignore[attr-defined]
            from PIL import Image

            return Image.fromarray(value)  # type: ignore[arg-type]
    return None


def encode_image(image: Any, ext: str, *, quality: int = DEFAULT_QUALITY) -> bytes:
    """Encode a PIL image in the format of extension ``ext``, deterministically.

    JPEG takes modes L, RGB and CMYK and WebP takes RGB and RGBA; images in other modes
    are converted (to RGB, or RGBA for WebP when they have transparency). ``quality``
    applies to JPEG and WebP.

    >>> from PIL import Image
    >>> encode_image(Image.new("RGB", (4, 4)), "png")[:4]
    b'\\x89PNG'
    """
    image_format = IMAGE_FORMATS[ext.lower()]
    options: dict[str, Any] = {}
    if image_format == "JPEG":
        if image.mode not in _JPEG_MODES:
            image = image.convert("RGB")
        options["quality"] = quality
    elif image_format == "WEBP":
        if image.mode not in _WEBP_MODES:
            has_alpha = "A" in image.mode or "transparency" in image.info
            image = image.convert("RGBA" if has_alpha else "RGB")
        options["quality"] = quality
    out = io.BytesIO()
    image.save(out, format=image_format, **options)
    return out.getvalue()


def encode_sample(
    sample: Mapping[str, Any], *, mtime: int | None = None, quality: int = DEFAULT_QUALITY
) -> bytes:
    """The raw tar members of a sample dict: headers, data and padding, fields sorted.

    Raises :class:`SampleError` for a missing or bad ``__key__``, a sample without
    fields, two fields differing only in case, or a value its extension cannot take.
    """
    if "__key__" not in sample:
        raise SampleError(
            f"a sample dict needs a '__key__' entry (it has {sorted(map(str, sample))[:5]})",
            source="sample",
        )
    key = check_key(sample["__key__"])
    fields = sorted(f for f in sample if not (f.startswith("__") and f.endswith("__")))
    if not fields:
        raise SampleError("the sample has no fields", source=f"sample {key!r}")
    if mtime is None:
        mtime = default_mtime()
    seen: set[str] = set()
    parts = []
    for field in fields:
        folded = field.lower()
        if not field or "/" in field or "\0" in field or folded in seen:
            what = (
                "appears twice (fields differ only in case)"
                if folded in seen
                else "is not a valid field name"
            )
            raise SampleError(f"field {field!r} {what}", source=f"sample {key!r}")
        seen.add(folded)
        data = sample[field]
        if type(data) is not bytes:
            data = encode_field(key, field, data, quality=quality)
        parts.append(encode_member(f"{key}.{field}", data, mtime=mtime))
    return b"".join(parts)


RESIZE_MODES = {"": "fit", "!": "exact", "^": "cover", ":crop": "crop"}


def parse_resize(text: str, option: str = "--resize") -> tuple[int, int, str]:
    """Parse an image size: ``WxH`` fits inside W×H, ``WxH^`` covers it, ``WxH:crop`` covers
    it and crops the centre to exactly W×H, ``WxH!`` resizes to exactly W×H (distorting).

    Only ``WxH:crop`` and ``WxH!`` give every image the same size (what a batch of tensors
    needs); the others keep the aspect ratio, so sizes differ. A malformed size raises
    :class:`~tarkit.errors.UsageError` naming ``option`` (the flag or parameter it came in).

    >>> parse_resize("224x224"), parse_resize("64x48!"), parse_resize("256x256^")
    ((224, 224, 'fit'), (64, 48, 'exact'), (256, 256, 'cover'))
    >>> parse_resize("224x224:crop")
    (224, 224, 'crop')
    """
    from ..errors import UsageError

    if isinstance(text, str):
        suffix = next((s for s in RESIZE_MODES if s and text.endswith(s)), "")
        body = text[: len(text) - len(suffix)].lower()
        width, sep, height = body.partition("x")
        digits = body.isascii() and width.isdigit() and height.isdigit()
        if sep and digits and int(width) and int(height):
            return int(width), int(height), RESIZE_MODES[suffix]
    raise UsageError(
        f"{option} {text!r}: expected WxH (fit inside), WxH^ (cover), WxH:crop (cover and "
        "crop the centre to exactly WxH) or WxH! (exactly, distorting)"
    )


class ImageTransform:
    """Re-encode image fields: resize (see :func:`parse_resize`) and/or change format.

    An image field is one whose extension is an image format (``jpg``, ``seg.png``…);
    its value may be encoded bytes or a PIL image (or a ``uint8`` numpy array). A new
    format also renames the field (``seg.png`` → ``seg.jpg``). Other fields are left
    alone, and image fields too when neither a size nor a format is set. EXIF
    orientation is applied before resizing, since re-encoding drops the EXIF data.
    ``verify`` decodes every image given as bytes even when nothing changes it, so that
    an image no reader could decode fails here (:class:`SampleError`), not in training.
    """

    def __init__(self, resize: str | None = None, image_format: str | None = None,
                 quality: int = DEFAULT_QUALITY, *, verify: bool = False) -> None:  # fmt: skip
        from ..errors import UsageError

        self.size = parse_resize(resize) if resize else None
        if image_format is not None:
            image_format = image_format.lower().lstrip(".")
            if image_format not in IMAGE_FORMATS:
                known = ", ".join(sorted(IMAGE_FORMATS))
                raise UsageError(f"--format {image_format!r}: expected one of {known}")
        self.format = "jpg" if image_format == "jpeg" else image_format
        if not 1 <= quality <= 100:
            raise UsageError(f"--quality {quality}: expected 1 to 100")
        self.quality = quality
        self.verify = verify

    @property
    def active(self) -> bool:
        """Whether image fields change (or, with ``verify``, are decoded)."""
        return self.size is not None or self.format is not None or self.verify

    @property
    def changes(self) -> bool:
        """Whether image fields are resized or re-encoded."""
        return self.size is not None or self.format is not None

    def apply(self, field: str, value: object, source: str) -> tuple[str, object]:
        """The (field, value) an image field becomes; raise SampleError if undecodable.

        Bytes are decoded and re-encoded. A PIL image stays one when only resized (it is
        encoded with the sample), and is encoded when a format is set. Values of other
        types, and other fields, come back as they are.
        """
        ext = extension(field)
        if not self.active or ext not in IMAGE_FORMATS:
            return field, value
        from PIL import Image, ImageOps

        if isinstance(value, (bytes, bytearray, memoryview)):
            try:
                with Image.open(io.BytesIO(value)) as opened:
                    if not self.changes:
                        opened.load()  # decodes every pixel: a cut or corrupt file fails
                        return field, value
                    image = ImageOps.exif_transpose(opened)
                    image.load()
            except Exception as exc:  # Pillow raises many kinds for bad data
                raise SampleError(
                    f"field {field!r}: cannot decode the image: {exc}", source=source
                ) from None
        elif not self.changes:
            return field, value
        else:
            image = _as_image(value)
            if image is None:
                return field, value  # encode_field names the type it cannot take
            image = ImageOps.exif_transpose(image)
        if self.size is not None:
            image = resize_image(image, *self.size)
        if self.format is None and not isinstance(value, (bytes, bytearray, memoryview)):
            return field, image
        new_ext = self.format or ext
        new_field = field[: len(field) - len(ext)] + new_ext
        return new_field, encode_image(image, new_ext, quality=self.quality)

    def sample(self, sample: Mapping[str, Any], source: str) -> dict[str, Any]:
        """``sample`` with every image field transformed (see :meth:`apply`).

        Raises :class:`SampleError` when a new format makes two fields one
        (``jpg`` and ``png`` with ``--format png``).
        """
        if not self.active:
            return dict(sample)
        out: dict[str, Any] = {}
        seen: set[str] = set()
        for field, value in sample.items():
            if not (field.startswith("__") and field.endswith("__")):
                field, value = self.apply(field, value, source)
                if field.lower() in seen:
                    raise SampleError(f"two fields become {field!r} after --format",
                                      source=f"sample {sample.get('__key__')!r}")  # fmt: skip
                seen.add(field.lower())
            out[field] = value
        return out


def resized_size(size: tuple[int, int], width: int, height: int, mode: str) -> tuple[int, int]:
    """The size an image of ``size`` is resized to by :func:`resize_image` (before a
    ``crop`` cuts out its centre).

    >>> resized_size((100, 50), 40, 40, "fit"), resized_size((100, 50), 40, 40, "crop")
    ((40, 20), (80, 40))
    """
    if mode == "exact":
        return width, height
    scale = min if mode == "fit" else max
    factor = scale(width / size[0], height / size[1])
    return max(1, round(size[0] * factor)), max(1, round(size[1] * factor))


def resize_image(
    image: Any,
    width: int,
    height: int,
    mode: str,
    *,
    full_size: tuple[int, int] | None = None,
    scale: int = 1,
) -> Any:
    """Resize a PIL image to ``width``×``height``: ``fit`` inside keeping the aspect,
    ``cover`` the box keeping the aspect, ``crop`` (cover, then the centre W×H), or
    ``exact``.

    ``full_size`` and ``scale``: the image was decoded at 1/``scale`` of ``full_size``
    (``Image.draft``). The result then has the size the full image gives, and is resized
    from the part of the image that holds it (a reduced decode rounds up: its last row
    and column may stand for less than ``scale`` pixels), as ``Image.thumbnail`` does.

    >>> from PIL import Image
    >>> resize_image(Image.new("RGB", (100, 50)), 40, 40, "fit").size
    (40, 20)
    >>> resize_image(Image.new("RGB", (100, 50)), 40, 40, "cover").size
    (80, 40)
    >>> resize_image(Image.new("RGB", (100, 50)), 40, 40, "crop").size
    (40, 40)
    """
    from PIL import Image

    full_size = full_size or image.size
    size = resized_size(full_size, width, height, mode)
    box = (0.0, 0.0, full_size[0] / scale, full_size[1] / scale)
    if size != image.size or box[2:] != image.size:
        if image.mode not in ("1", "L", "LA", "RGB", "RGBA", "I", "F"):
            image = image.convert(
                "RGBA" if "A" in image.mode or "transparency" in image.info else "RGB"
            )
        image = image.resize(size, Image.Resampling.LANCZOS, box=box)
    if mode == "crop" and image.size != (width, height):
        left = (image.width - width) // 2
        top = (image.height - height) // 2
        image = image.crop((left, top, left + width, top + height))
    return image
