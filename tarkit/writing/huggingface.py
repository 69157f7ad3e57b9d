"""Hugging Face ``datasets`` as samples: each feature becomes a field by its type.

:func:`hf_samples` is what :func:`~tarkit.shard_dataset` uses for a ``datasets.Dataset``
(or ``IterableDataset``) given without ``to_sample``:

============================  ============================================================
feature                       field
============================  ============================================================
``Image``                     the image's own bytes, ``jpg``/``png``/``webp``… by their
                              format (``<column>.jpg`` when there are several images)
``ClassLabel``                ``cls`` (``<column>.cls`` when there are several), the
                              class names saved beside the shards (``classes.json``)
``Audio``                     the file's bytes, by its ending (``flac``, ``wav``…)
``Value("string")``           ``<column>.txt``
``Value("binary")``           ``<column>.bin``
other ``Value``               ``<column>.json``
``Array2D``…``Array5D``       ``<column>.npy``
lists, dicts, the rest        ``<column>.json``
============================  ============================================================

``fields`` renames (``{"image": "jpg", "label": "cls"}``; an image renamed to another
image format is re-encoded in it) or, with None, leaves a column out. A ``__key__``
column gives the keys (else the row index as ``%09d``). A missing value (None) leaves
the field out of that sample. ``datasets`` is never imported here unless a dataset of
it is given.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from typing import Any

from ..errors import SampleError, UsageError
from ..format.encoding import IMAGE_FORMATS, encode_image, extension
from .files import read_file

FieldNames = Mapping[str, "str | None"]
_MAGIC = (
    (b"\xff\xd8\xff", "jpg"),
    (b"\x89PNG", "png"),
    (b"GIF8", "gif"),
    (b"BM", "bmp"),
    (b"II*\x00", "tif"),
    (b"MM\x00*", "tif"),
)


def is_hf_dataset(dataset: object) -> bool:
    """Whether ``dataset`` is a Hugging Face ``Dataset`` or ``IterableDataset``."""
    return type(dataset).__module__.split(".")[0] == "datasets" and hasattr(dataset, "features")


def refuse_splits(dataset: object) -> None:
    """Raise :class:`~tarkit.errors.UsageError` for a mapping given as the dataset (a
    ``DatasetDict`` of splits, or any dict): iterating it gives its keys, never items, so
    the message asks for one of its values by name."""
    if not isinstance(dataset, Mapping):
        return
    names = ", ".join(map(str, list(dataset)[:8])) + (", …" if len(dataset) > 8 else "")
    example = f"ds[{next(iter(dataset), 'train')!r}]"
    if type(dataset).__module__.split(".")[0] == "datasets":
        what = type(dataset).__name__
        article = "an" if what[:1] in "AEIOU" else "a"
        raise UsageError(
            f"{article} {what} holds the splits {names or '(none)'}, not items: pass one "
            f"split, e.g. {example}"
        )
    raise UsageError(
        f"a dict ({names or 'empty'}) is not a dataset of items: pass one of its values, "
        f"e.g. {example}, or a sequence of items"
    )


def hf_samples(dataset: Any, fields: FieldNames | None = None) -> tuple[Any, HFSample]:
    """(the dataset with images and audio left undecoded, the converter of its rows)."""
    kinds = _kinds(dataset)
    dataset = hf_rows(dataset)
    return dataset, HFSample(dataset.features or {}, kinds, dict(fields or {}))


def _kinds(dataset: Any) -> dict[str, str]:
    return {name: type(feature).__name__ for name, feature in (dataset.features or {}).items()}


def hf_rows(dataset: Any) -> Any:
    """The dataset with its images and audio left undecoded (their bytes and paths), as
    plain Python rows: what :class:`HFSample` converts. A function of the module, so that
    a :class:`~tarkit.writing.items.DatasetFactory` can apply it on every node."""
    import datasets

    for name, kind in _kinds(dataset).items():
        if kind == "Image":
            dataset = dataset.cast_column(name, datasets.Image(decode=False))
        elif kind == "Audio":
            dataset = dataset.cast_column(name, datasets.Audio(decode=False))
    return dataset.with_format(None)


class HFSample:
    """Turns a row of a Hugging Face dataset into a sample dict (picklable, for workers)."""

    def __init__(self, features: Mapping[str, Any], kinds: Mapping[str, str],
                 fields: dict[str, str | None]) -> None:  # fmt: skip
        self.kinds = dict(kinds)
        self.fields = fields
        counts = {
            kind: list(kinds.values()).count(kind) for kind in ("Image", "ClassLabel", "Audio")
        }
        self.single = {kind for kind, n in counts.items() if n == 1}
        self.value_types = {
            name: str(getattr(feature, "dtype", "")) for name, feature in features.items()
        }
        labels = {
            name: list(feature.names)
            for name, feature in features.items()
            if kinds.get(name) == "ClassLabel"
        }
        self.classes: list[str] | dict[str, list[str]] | None = None
        kept = {name: names for name, names in labels.items() if fields.get(name, name)}
        if len(kept) == 1:
            self.classes = next(iter(kept.values()))
        elif kept:
            self.classes = kept

    def __call__(self, row: Mapping[str, Any], index: int) -> dict[str, Any]:
        sample: dict[str, Any] = {"__key__": str(row.get("__key__", f"{index:09d}"))}
        for name, value in row.items():
            if name == "__key__" or value is None:
                continue
            renamed = self.fields.get(name, name)
            if renamed is None:
                continue
            field, data = self._field(name, value, renamed if name in self.fields else None)
            sample[field] = data
        return sample

    def _field(self, name: str, value: Any, field: str | None) -> tuple[str, Any]:
        kind = self.kinds.get(name, "")
        if kind == "Image":
            data = _file_bytes(value)
            ext = image_ext(data)
            if field is None:
                return (ext if "Image" in self.single else f"{name}.{ext}"), data
            wanted = extension(field)
            if wanted in IMAGE_FORMATS and IMAGE_FORMATS[wanted] != IMAGE_FORMATS[ext]:
                from PIL import Image

                with Image.open(io.BytesIO(data)) as image:
                    image.load()
                    return field, encode_image(image, wanted)
            return field, data
        if kind == "Audio":
            data = _file_bytes(value)
            path = value.get("path") or ""
            ext = path.rsplit(".", 1)[-1].lower() if "." in os.path.basename(path) else "bin"
            default = ext if "Audio" in self.single else f"{name}.{ext}"
            return field or default, data
        if kind == "ClassLabel":
            return field or ("cls" if "ClassLabel" in self.single else f"{name}.cls"), value
        if kind.startswith("Array"):
            import numpy

            return field or f"{name}.npy", numpy.asarray(value, dtype=self.value_types[name])
        dtype = self.value_types.get(name, "")
        if kind == "Value" and dtype in ("string", "large_string"):
            return field or f"{name}.txt", value
        if kind == "Value" and dtype in ("binary", "large_binary"):
            return field or f"{name}.bin", value
        return field or f"{name}.json", value


def _file_bytes(value: Any) -> bytes:
    """The bytes of an undecoded Image or Audio value (``{"bytes", "path"}``)."""
    data = value.get("bytes") if isinstance(value, Mapping) else None
    if data is not None:
        return bytes(data)
    path = value.get("path") if isinstance(value, Mapping) else None
    if not path:
        raise SampleError(f"an image or audio value with neither bytes nor a path: {value!r}",
                          source="dataset")  # fmt: skip
    return read_file(path)


def image_ext(data: bytes) -> str:
    """The extension of an encoded image by its first bytes (else by what Pillow reads).

    >>> image_ext(b"\\x89PNG\\r\\n\\x1a\\n"), image_ext(b"RIFF\\x00\\x00\\x00\\x00WEBPVP8 ")
    ('png', 'webp')
    """
    for magic, ext in _MAGIC:
        if data.startswith(magic):
            return ext
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            found = (image.format or "").upper()
    except Exception as exc:  # Pillow raises many kinds for bad data
        raise SampleError(f"cannot tell the image's format: {exc}", source="dataset") from None
    for ext, name in IMAGE_FORMATS.items():
        if name == found:
            return ext
    raise SampleError(f"images in {found or 'this'} format have no field extension: rename "
                      "the column to one (fields={'image': 'png'}) to re-encode them",
                      source="dataset")  # fmt: skip
